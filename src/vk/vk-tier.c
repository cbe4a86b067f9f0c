/* vk-tier.c: the engine's Vulkan tier over vk.c (contract and design in vkt.h). It sees the
 * model only through vkt_src: sizes, activation constants and the shared experts' matrices. */
#include "vkt.h"
#include "vk.h"

#include <stdlib.h>
#include <string.h>

typedef struct vkt_layer {
    int      shared_ok; /* shared experts resident                   */
    vk_mat   shared[3]; /* gate, up, down                            */
    uint8_t *resident;  /* (E) 1 when routed expert e is on device   */
    vk_mat  *experts;   /* (E, 3) w1, w3, w2                          */
} vkt_layer;

struct vkt {
    vk_ctx    *c;
    int        n_layers, latent;
    float      beta, linear_beta; /* situ_beta, situ_linear_beta    */
    vkt_layer *ly;                /* (n_layers)                          */
    int        up_per_step;       /* K3_VK_UP                            */
    int        step_ups, last_layer;
    int        full; /* budget exhausted: stop offering     */
    uint64_t   hits;
    int        n_resident;
};

k3_status vkt_open(const vkt_src *src, vkt **out) {
    *out = NULL;
    int       on, up; /* K3_VK: 0 off, 1 on, -1 (unset) on with a GPU */
    double    gb;
    k3_status st = vkt_env(&on, &gb, &up);
    if (st || on == 0)
        return st;
    vk_ctx *c;
    if (vk_ctx_new((uint64_t)(gb * 1e9), &c) != K3_OK) {
        /* asked for explicitly (K3_VK=1, or a device named that is not there): say why it is off */
        if (on == 1 || k3_setting_env_str(K3_SETTING_VK_DEVICE))
            K3_LOG_WARN("Vulkan tier off: %s; computing on the CPU", k3_errmsg());
        return K3_OK;
    }
    if (on < 0 && vk_device_is_cpu(c)) { /* a CPU-emulated device is slower than the CPU kernels */
        K3_LOG_INFO("vulkan: '%s' is a CPU device, slower than the CPU kernels: not used (K3_VK=1 forces it)",
                    vk_device_name(c));
        vk_ctx_free(c);
        return K3_OK;
    }
    K3_LOG_INFO("vulkan: using '%s', budget %.2f GB", vk_device_name(c), (double)vk_budget(c) / 1e9);
    vkt *t = calloc(1, sizeof *t);
    if (!t || !(t->ly = calloc((size_t)src->n_layers, sizeof *t->ly))) {
        free(t);
        vk_ctx_free(c);
        return K3_ERR_NOMEM;
    }
    t->c           = c;
    t->n_layers    = src->n_layers;
    t->latent      = src->latent;
    t->beta        = src->situ_beta;
    t->linear_beta = src->situ_linear_beta;
    t->up_per_step = up;
    t->last_layer  = -1;
    for (int l = 0; l < src->n_layers; l++) {
        const qmat *const *sh = src->shared + (size_t)l * 3;
        if (!sh[0])
            continue; /* dense layer */
        vkt_layer *ly = &t->ly[l];
        ly->resident  = calloc((size_t)src->n_experts, 1);
        ly->experts   = calloc((size_t)src->n_experts * 3, sizeof *ly->experts);
        if (!ly->resident || !ly->experts) {
            vkt_close(t);
            return K3_ERR_NOMEM;
        }
        if (vk_upload(c, sh[0], &ly->shared[0]) == K3_OK && vk_upload(c, sh[1], &ly->shared[1]) == K3_OK &&
            vk_upload(c, sh[2], &ly->shared[2]) == K3_OK)
            ly->shared_ok = 1;
    }
    K3_LOG_INFO("Vulkan tier on '%s': shared experts resident, %.2f of %.2f GB used", vk_device_name(c),
                (double)vk_used(c) / 1e9, (double)vk_budget(c) / 1e9);
    *out = t;
    return K3_OK;
}

void vkt_close(vkt *t) {
    if (!t)
        return;
    if (t->ly)
        for (int l = 0; l < t->n_layers; l++) {
            free(t->ly[l].resident);
            free(t->ly[l].experts);
        }
    free(t->ly);
    vk_ctx_free(t->c);
    free(t);
}

int vkt_shared(vkt *t, int l, const float *x, float *out) {
    if (!t || !t->ly[l].shared_ok)
        return 0;
    const vk_mat *mats[3] = {&t->ly[l].shared[0], &t->ly[l].shared[1], &t->ly[l].shared[2]};
    return vk_expert_ffn(t->c, 1, mats, x, t->beta, t->linear_beta, out) == K3_OK;
}

int vkt_split(vkt *t, int l, int *ids, int *n, int *res) {
    if (!t || !t->ly[l].resident)
        return 0;
    int nr = 0, keep = 0;
    for (int i = 0; i < *n; i++) {
        if (t->ly[l].resident[ids[i]])
            res[nr++] = ids[i];
        else
            ids[keep++] = ids[i];
    }
    *n = keep;
    return nr;
}

k3_status vkt_experts(vkt *t, int l, const int *res, int nr, const float *z, float *out) {
    enum { MAXN = 64 };
    const vk_mat *mats[3 * MAXN];
    for (int i0 = 0; i0 < nr; i0 += MAXN) {
        int n = nr - i0 < MAXN ? nr - i0 : MAXN;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 3; k++)
                mats[3 * i + k] = &t->ly[l].experts[(size_t)res[i0 + i] * 3 + k];
        k3_status st = vk_expert_ffn(t->c, n, mats, z, t->beta, t->linear_beta, out + (size_t)i0 * t->latent);
        if (st)
            return st;
    }
    t->hits += (uint64_t)nr;
    return K3_OK;
}

void vkt_offer(vkt *t, int l, int e, const qmat *w1, const qmat *w3, const qmat *w2) {
    if (!t || t->full || !t->ly[l].resident || t->ly[l].resident[e])
        return;
    if (l <= t->last_layer) /* a new forward step began */
        t->step_ups = 0;
    t->last_layer = l;
    if (t->step_ups >= t->up_per_step)
        return;
    vk_mat *v = &t->ly[l].experts[(size_t)e * 3];
    if (vk_upload(t->c, w1, &v[0]) || vk_upload(t->c, w3, &v[1]) || vk_upload(t->c, w2, &v[2])) {
        t->full = 1; /* fill-once: the arena is never freed, so the tier is complete */
        K3_LOG_INFO("Vulkan tier full: %d routed experts resident, %.2f GB", t->n_resident,
                    (double)vk_used(t->c) / 1e9);
        return;
    }
    t->ly[l].resident[e] = 1;
    t->n_resident++;
    t->step_ups++;
}

void vkt_get_stats(const vkt *t, vkt_stats *out) {
    *out = (vkt_stats){0};
    if (!t)
        return;
    out->used    = vk_used(t->c);
    out->budget  = vk_budget(t->c);
    out->hits    = t->hits;
    out->experts = t->n_resident;
}
