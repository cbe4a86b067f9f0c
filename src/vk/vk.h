/* vk.h: the Vulkan tier (implementation vk.c, shaders in shaders/).
 *
 * DESIGN
 * Weights are uploaded once into device-local arena chunks in exactly the CPU layout of
 * quant.h (MXFP4 nibbles and ue8m0 exponents as stored, never re-encoded); nothing is
 * ever freed individually (fill-once tier): the arena grows chunk by chunk until the
 * budget (K3_VK_GB, default: what the driver reports as available) is spent. A matvec
 * copies x into a host-visible buffer, records one dispatch per matrix in one command
 * buffer, submits and waits. An expert runs entirely on the device: gate and up
 * matvecs, SiTU-GLU, down matvec, in one submit for all resident experts of a token.
 * Compiled only when the build has VK=1; K3_VK=0 disables it at run time.
 */
#pragma once
#include "quant.h"

typedef struct vk_ctx vk_ctx;

/* A matrix resident on the device: its format and shape, and where its bytes are. */
typedef struct vk_mat {
    int      type, rows, cols; /* as the qmat it came from                 */
    uint32_t chunk;            /* arena chunk index                        */
    uint32_t w_off, s_off;     /* byte offsets of weights / scales there   */
} vk_mat;

/* Open the first suitable device (K3_VK_DEVICE=N picks another). budget_bytes 0 = driver's
 * available memory. K3_ERR_UNSUPPORTED with a message when disabled (K3_VK=0) or no device. */
k3_status   vk_ctx_new(uint64_t budget_bytes, vk_ctx **out);
void        vk_ctx_free(vk_ctx *c);
const char *vk_device_name(const vk_ctx *c);
int         vk_device_is_cpu(const vk_ctx *c); /* a CPU-emulated device (lavapipe) */
uint64_t    vk_budget(const vk_ctx *c);
uint64_t    vk_used(const vk_ctx *c);

/* Copy a matrix to the device. K3_ERR_NOMEM (no message noise) when the budget is full. */
k3_status vk_upload(vk_ctx *c, const qmat *m, vk_mat *out);

/* y = W x for several matrices in one submit (each job independent). */
typedef struct vk_job {
    const vk_mat *m;
    const float  *x; /* [m->cols] */
    float        *y; /* [m->rows] */
} vk_job;
k3_status vk_matvec(vk_ctx *c, const vk_job *jobs, int n);

/* n experts on one input z[in]: out[e] = w2_e(SiTU-GLU(w1_e z, w3_e z)), each [w2.rows].
 * mats[e][0..2] = w1 (gate), w3 (up), w2 (down). */
/* Benchmarks: best device read bandwidth over reps passes of a bytes-long buffer; and the
 * time of reps back-to-back matvecs of one matrix in one submit (x uploaded once). */
k3_status vk_read_bandwidth(vk_ctx *c, uint64_t bytes, int reps, double *gbps);
k3_status vk_matvec_repeat(vk_ctx *c, const vk_mat *m, const float *x, int reps, double *seconds);

k3_status vk_expert_ffn(vk_ctx *c, int n, const vk_mat *const *mats, const float *z, float beta1, float beta2,
                        float *out);
