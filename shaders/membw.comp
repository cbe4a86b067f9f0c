#version 450
// membw.comp: device memory read bandwidth, the reference for the matvec benchmarks.
// Every invocation reads a strided share of the buffer as uvec4 and folds it into one word,
// written per workgroup so the reads cannot be optimised away.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Wbuf { uvec4 w[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { uint y[]; };
layout(push_constant) uniform PC {
    uint n;      // uvec4 elements to read
    uint pad[7];
} pc;

shared uint red[256];

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    uvec4 acc = uvec4(0u);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        acc ^= w[i];
    red[gl_LocalInvocationID.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        uint r = 0u;
        for (uint j = 0u; j < 256u; j++)
            r ^= red[j];
        y[gl_WorkGroupID.x] = r;
    }
}
