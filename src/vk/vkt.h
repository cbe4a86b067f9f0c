/* vkt.h: the engine's Vulkan tier (implementation: vk-tier.c, built only with VK=1).
 *
 * DESIGN
 * - At open, the shared experts of every MoE layer (the largest always-used dense slice) are
 *   uploaded once; a decode step (one token) computes them on the device.
 * - Routed experts: a fill-once tier. An expert the expert cache (experts.c) has just read into
 *   RAM is offered to the device; at most K3_VK_UP uploads happen per forward step, until the
 *   budget (K3_VK_GB, default: what the driver reports) is full. At decode, an expert already on
 *   the device skips both the disk read and the CPU matmul. Chunked prefill computes on the
 *   CPU (bit-identical chunking) but warms the tier.
 * - Numerics: the shaders compute exact-float (f32 activations), i.e. the K3_IDOT=0 path of
 *   the CPU kernels up to summation order.
 * - K3_VK=0 off, K3_VK=1 on with any device (lavapipe included, for tests), unset: on only
 *   for a real GPU (a CPU-emulated device would be slower than the CPU kernels).
 * With VK=0 builds every function below is a no-op stub.
 */
#pragma once
#include "k3-impl.h"
#include "quant.h"

typedef struct vkt vkt;

/* What the tier needs of the model (no more: the tier does not see the model's structs). */
typedef struct vkt_src {
    int   n_layers;                    /* layers run; the tier's layer tables are this long       */
    int   n_experts;                   /* routed experts of an MoE layer (E)                      */
    int   latent;                      /* routed_expert_hidden_size (L)                           */
    float situ_beta, situ_linear_beta; /* the experts' activation constants     */
    /* (n_layers, 3): gate, up, down of layer l's shared experts; NULL for a dense layer */
    const qmat *const *shared;
} vkt_src;

typedef struct vkt_stats {
    uint64_t used, budget; /* device bytes                        */
    uint64_t hits;         /* routed experts computed on the device */
    int      experts;      /* routed experts resident              */
} vkt_stats;

/* The tier's variables, read and checked by their rows in every build (a malformed K3_VK_DEVICE
 * used to turn the tier off with a warning, or nothing at all when K3_VK was unset, where a
 * malformed K3_VK_GB is an error): K3_VK into *on (-1 unset), K3_VK_GB, K3_VK_UP, and
 * K3_VK_DEVICE (checked here, read where the device is picked). */
static inline k3_status vkt_env(int *on, double *gb, int *up) {
    int       dev = -1;
    k3_status st;
    *on = -1;
    *gb = k3_setting(K3_SETTING_VK_GB)->def;
    *up = (int)k3_setting(K3_SETTING_VK_UP)->def;
    if ((st = k3_setting_env_int(K3_SETTING_VK, on)) || (st = k3_setting_env(K3_SETTING_VK_GB, gb)) ||
        (st = k3_setting_env_int(K3_SETTING_VK_UP, up)) ||
        (st = k3_setting_env_int(K3_SETTING_VK_DEVICE, &dev)))
        return st;
    return K3_OK;
}

#if K3_VK
/* NULL in *out (and K3_OK) when the tier is off or no device is usable (one notice). A malformed
 * variable of the tier is an error (vkt_env). */
k3_status vkt_open(const vkt_src *src, vkt **out);
void      vkt_close(vkt *t);
/* Shared experts of MoE layer l for one token: out (D) = shared(x). 0 when not resident. */
int vkt_shared(vkt *t, int l, const float *x, float *out);
/* Of ids[n], move the device-resident experts to res[] (returns their count) and leave the
 * others, in order, at the front of ids (*n updated). */
int vkt_split(vkt *t, int l, int *ids, int *n, int *res);
/* Run resident experts res[nr] on latent z (L): out[i] (L) = expert res[i](z). */
k3_status vkt_experts(vkt *t, int l, const int *res, int nr, const float *z, float *out);
/* Expert e of layer l (w1 gate, w3 up, w2 down) just read into RAM: upload it if the step
 * quota and the budget allow. */
void vkt_offer(vkt *t, int l, int e, const qmat *w1, const qmat *w3, const qmat *w2);
void vkt_get_stats(const vkt *t, vkt_stats *out);
#else
/* The variables checked as with the tier; K3_VK=1 asks for what this build lacks: said, once. */
static inline k3_status vkt_open(const vkt_src *src, vkt **out) {
    int       on, up;
    double    gb;
    k3_status st = vkt_env(&on, &gb, &up);
    (void)src;
    *out = NULL;
    if (!st && on == 1)
        K3_LOG_WARN(
            "K3_VK=1: this k3chat was built without the Vulkan tier (make VK=1); computing on the CPU");
    return st;
}
static inline void vkt_close(vkt *t) {
    (void)t;
}
static inline int vkt_shared(vkt *t, int l, const float *x, float *out) {
    (void)t;
    (void)l;
    (void)x;
    (void)out;
    return 0;
}
static inline int vkt_split(vkt *t, int l, int *ids, int *n, int *res) {
    (void)t;
    (void)l;
    (void)ids;
    (void)n;
    (void)res;
    return 0;
}
static inline k3_status vkt_experts(vkt *t, int l, const int *res, int nr, const float *z, float *out) {
    (void)t;
    (void)l;
    (void)res;
    (void)nr;
    (void)z;
    (void)out;
    return K3_OK;
}
static inline void vkt_offer(vkt *t, int l, int e, const qmat *w1, const qmat *w3, const qmat *w2) {
    (void)t;
    (void)l;
    (void)e;
    (void)w1;
    (void)w3;
    (void)w2;
}
static inline void vkt_get_stats(const vkt *t, vkt_stats *out) {
    (void)t;
    *out = (vkt_stats){0};
}
#endif
