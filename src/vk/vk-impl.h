/* vk-impl.h: host mirrors of the shader push-constant blocks (shaders/types.glsl, glu.comp).
 * Field for field; test-vk checks the sizes and offsets. */
#pragma once
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vk_pc_matvec {
    uint32_t rows, cols;   /* output, input width           */
    uint32_t w_off, s_off; /* byte offsets in the arena     */
    uint32_t x_off, y_off; /* float offsets in X and Y      */
    uint32_t pad0, pad1;
} vk_pc_matvec;

typedef struct vk_pc_glu {
    uint32_t n, g_off, u_off, o_off; /* count; float offsets (g, u in Y; out in X) */
    float    beta1, beta2;
    uint32_t pad0, pad1;
} vk_pc_glu;

static_assert(sizeof(vk_pc_matvec) == 32, "vk_pc_matvec mirrors types.glsl PC (8 x uint)");
static_assert(offsetof(vk_pc_matvec, y_off) == 20, "y_off is the 6th word");
static_assert(sizeof(vk_pc_glu) == 32, "vk_pc_glu mirrors glu.comp PC");
static_assert(offsetof(vk_pc_glu, beta1) == 16, "beta1 is the 5th word");
