#version 450
// glu.comp: SiTU-GLU over n elements: out = b1*tanh(g/b1)*sigmoid(g) * b2*tanh(u/b2).
// Reads g and u from Y (the outputs of the gate and up matvecs), writes into X (the
// input of the down matvec), so an expert runs as matvec, matvec, glu, matvec in one submit.
layout(local_size_x = 64) in;
layout(std430, binding = 1) buffer Xbuf { float x[]; };
layout(std430, binding = 2) buffer Ybuf { float y[]; };
layout(push_constant) uniform PC {
    uint  n;
    uint  g_off;   // float offset in Y
    uint  u_off;   // float offset in Y
    uint  o_off;   // float offset in X
    float beta1;
    float beta2;
    uint  pad0;
    uint  pad1;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n)
        return;
    float g = y[pc.g_off + i], u = y[pc.u_off + i];
    float sg = 1.0 / (1.0 + exp(-g));
    x[pc.o_off + i] = pc.beta1 * tanh(g / pc.beta1) * sg * (pc.beta2 * tanh(u / pc.beta2));
}
