// matvec.glsl: y = W x for one weight format, one workgroup per output row.
// Each of the WG invocations sums a strided share of the row; a shared-memory tree
// reduction in a fixed order gives the same result on every run.
// Variant defines: Q_F32, Q_I8, Q_I4, Q_MXFP4 (one per .comp file).
#extension GL_GOOGLE_include_directive : enable
#include "types.glsl"

layout(local_size_x = WG) in;

layout(std430, binding = 0) readonly buffer Wbuf { uint w[]; };
layout(std430, binding = 1) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };

shared float red[WG];

uint byte_at(uint off) {
    return (w[off >> 2] >> ((off & 3u) * 8u)) & 0xffu;
}

float float_at(uint off) { // off multiple of 4
    return uintBitsToFloat(w[off >> 2]);
}

#ifdef Q_MXFP4
const float E2M1[8] = float[8](0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
float nib_mx(uint n) {
    float v = E2M1[n & 7u];
    return (n & 8u) != 0u ? -v : v;
}
#endif

void main() {
    const uint r   = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    const uint tid = gl_LocalInvocationID.x;
    const uint n   = pc.cols;
    const uint xo  = pc.x_off;
    float acc = 0.0;

    if (r < pc.rows) {
#if defined(Q_F32)
        const uint base = pc.w_off + r * n * 4u;
        for (uint c = tid; c < n; c += WG)
            acc += float_at(base + c * 4u) * x[xo + c];
#elif defined(Q_I8)
        const uint base = pc.w_off + r * n;
        for (uint c = tid; c < n; c += WG) {
            int q = int(byte_at(base + c) << 24) >> 24;
            acc += float(q) * x[xo + c];
        }
        acc *= float_at(pc.s_off + r * 4u);
#elif defined(Q_I4)
        // one invocation per group of 64 columns; the group scale applied once per group
        const uint rb = (n + 1u) / 2u, ng = (n + 63u) / 64u;
        const uint base = pc.w_off + r * rb, sb = pc.s_off + r * ng * 4u;
        for (uint g = tid; g < ng; g += WG) {
            float part = 0.0;
            uint end = min(g * 64u + 64u, n);
            for (uint c = g * 64u; c < end; c++) {
                uint b = byte_at(base + (c >> 1));
                uint nib = (c & 1u) != 0u ? (b >> 4) : (b & 15u);
                part += float(int(nib) - 8) * x[xo + c];
            }
            acc += part * float_at(sb + g * 4u);
        }
#elif defined(Q_MXFP4)
        // one invocation per group of 32 columns = 16 bytes = 4 aligned words
        const uint ng = n / 32u;
        const uint base = pc.w_off + r * (n / 2u), sb = pc.s_off + r * ng;
        for (uint g = tid; g < ng; g += WG) {
            float part = 0.0;
            uint wo = (base + g * 16u) >> 2;
            uint c0 = xo + g * 32u;
            for (uint k = 0u; k < 4u; k++) {
                uint word = w[wo + k];
                for (uint j = 0u; j < 8u; j++)
                    part += nib_mx((word >> (4u * j)) & 15u) * x[c0 + k * 8u + j];
            }
            acc += part * exp2(float(int(byte_at(sb + g)) - 127));
        }
#endif
    }

    red[tid] = acc;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s)
            red[tid] += red[tid + s];
        barrier();
    }
    if (tid == 0u && r < pc.rows)
        y[pc.y_off + r] = red[0];
}
