// types.glsl: layouts shared by the compute shaders; mirrored field for field by
// struct vk_pc_matvec / vk_pc_glu in src/vk/vk-impl.h (test-vk checks sizes and offsets).
//
// Weight bytes live in one storage buffer per arena chunk, addressed in bytes; the
// formats are those of src/kern/quant.h, uploaded exactly as the CPU holds them:
//   Q_F32    float rows
//   Q_I8     int8 [rows][cols], float s[rows]
//   Q_I4     nibbles [rows][(cols+1)/2] (low = even column, value nibble-8), float s[rows][groups of 64]
//   Q_MXFP4  nibbles [rows][cols/2] (sign bit 3, e2m1 index bits 0-2), ue8m0 e[rows][cols/32]

#define WG 64

layout(push_constant) uniform PC {
    uint rows;     // output width
    uint cols;     // input width
    uint w_off;    // byte offset of the weights in the arena buffer (multiple of 4)
    uint s_off;    // byte offset of the scales (float scales: multiple of 4)
    uint x_off;    // float offset of the input vector in X
    uint y_off;    // float offset of the output vector in Y
    uint pad0;
    uint pad1;
} pc;
