/* tensors.c: the tensor table expanded (tensors.h): rows, dimensions, names and the walk over
 * the tensors a configuration implies. */
#include "tensors.h"

#include <stdio.h>

/* ---- the table ------------------------------------------------------------------------------ */

#define S1(a)                                                                                                \
    { 1, TT_D_##a, 0, 0 }
#define S2(a, b)                                                                                             \
    { 2, TT_D_##a, TT_D_##b, 0 }
#define S3(a, b, c)                                                                                          \
    { 3, TT_D_##a, TT_D_##b, TT_D_##c }
#define MIN(a)                                                                                               \
    { 0, TT_D_##a, 0, 0 }
#define NONE                                                                                                 \
    { -1, 0, 0, 0 }
#define X(id, scope, name, shape, alt, kind, dtype, field)                                                   \
    [TT_##id] = {name, TT_S_##scope, TT_K_##kind, TT_DT_##dtype, shape, alt},
const tt_row tt_table[TT_COUNT] = {K3_TENSORS(X)};
#undef X
#undef S1
#undef S2
#undef S3
#undef MIN
#undef NONE

/* ---- dimensions and shapes -------------------------------------------------------------------- */

void tt_dims(const k3_config *c, int64_t dim[TT_D_COUNT]) {
    const int64_t Hm = c->n_heads;
    dim[TT_D_1]      = 1;
    dim[TT_D_D]      = c->hidden;
    dim[TT_D_V]      = c->vocab;
    dim[TT_D_I]      = c->inter;
    dim[TT_D_H]      = c->kda_heads;
    dim[TT_D_DH]     = c->kda_head_dim;
    dim[TT_D_P]      = (int64_t)c->kda_heads * c->kda_head_dim;
    dim[TT_D_K]      = c->conv_k;
    dim[TT_D_QL]     = c->q_lora;
    dim[TT_D_KL]     = c->kv_lora;
    dim[TT_D_QK]     = Hm * (c->nope + c->rope);
    dim[TT_D_KVA]    = (int64_t)c->kv_lora + c->rope;
    dim[TT_D_KVB]    = Hm * (c->nope + c->v_dim);
    dim[TT_D_HV]     = Hm * c->v_dim;
    dim[TT_D_E]      = c->n_experts;
    dim[TT_D_L]      = c->latent;
    dim[TT_D_SF]     = (int64_t)c->n_shared * c->moe_inter;
    dim[TT_D_F]      = c->moe_inter;
    dim[TT_D_L_2]    = c->latent / 2;
    dim[TT_D_L_32]   = c->latent / 32;
    dim[TT_D_F_2]    = c->moe_inter / 2;
    dim[TT_D_F_32]   = c->moe_inter / 32;
}

tt_shape tt_shape_of(const int64_t dim[TT_D_COUNT], int id, int alt) {
    const signed char *d = alt ? tt_table[id].alt : tt_table[id].shape;
    tt_shape           s = {.n = d[0]};
    for (int i = 0; i < (d[0] > 0 ? d[0] : d[0] == 0); i++)
        s.s[i] = dim[(int)d[1 + i]];
    return s;
}

int64_t tt_numel(tt_shape s) {
    int64_t n = 1;
    for (int i = 0; i < (s.n > 0 ? s.n : 1); i++)
        n *= s.s[i];
    return n;
}

int tt_in_layer(const k3_config *c, int id, int l) {
    switch (tt_table[id].scope) {
    case TT_S_ROOT:
    case TT_S_MODEL:
        return l < 0;
    case TT_S_LAYER:
        return l >= 0;
    case TT_S_KDA:
        return l >= 0 && c->layer_kind[l] == K3_LAYER_KDA;
    case TT_S_MLA:
        return l >= 0 && c->layer_kind[l] == K3_LAYER_MLA;
    case TT_S_DENSE:
        return l >= 0 && l < c->first_dense;
    default:
        return l >= 0 && l >= c->first_dense; /* TT_S_MOE, TT_S_EXPERT */
    }
}

const char *tt_name(char *buf, size_t n, int id, int l, int e) {
    const char *nm = tt_table[id].name;
    switch (tt_table[id].scope) {
    case TT_S_ROOT:
        snprintf(buf, n, "%s", nm);
        break;
    case TT_S_MODEL:
        snprintf(buf, n, "model.%s", nm);
        break;
    case TT_S_LAYER:
        snprintf(buf, n, "model.layers.%d.%s", l, nm);
        break;
    case TT_S_KDA:
    case TT_S_MLA:
        snprintf(buf, n, "model.layers.%d.self_attn.%s", l, nm);
        break;
    case TT_S_DENSE:
        snprintf(buf, n, "model.layers.%d.mlp.%s", l, nm);
        break;
    case TT_S_MOE:
        snprintf(buf, n, "model.layers.%d.block_sparse_moe.%s", l, nm);
        break;
    default:
        snprintf(buf, n, "model.layers.%d.block_sparse_moe.experts.%d.%s", l, e, nm);
        break;
    }
    return buf;
}

int tt_bits(int kind, int bits, int mla_bits, int head_bits) {
    switch (kind) {
    case TT_K_BITS:
        return bits;
    case TT_K_MLA:
    case TT_K_KVB:
        return mla_bits;
    case TT_K_HEAD:
        return head_bits;
    default:
        return 32;
    }
}

/* ---- walk ------------------------------------------------------------------------------------ */

static k3_status visit(const int64_t *dim, int id, int l, int e, tt_fn fn, void *ud) {
    tt_ref r = {.id = id, .layer = l, .expert = e};
    tt_name(r.name, sizeof r.name, id, l, e);
    r.shape = tt_shape_of(dim, id, 0);
    r.alt   = tt_shape_of(dim, id, 1);
    return fn(&r, ud);
}

k3_status tt_walk(const k3_config *c, int l, int flags, tt_fn fn, void *ud) {
    int64_t   dim[TT_D_COUNT];
    k3_status st;
    tt_dims(c, dim);
    for (int id = 0; id < TT_EXPERT_FIRST; id++)
        if (tt_in_layer(c, id, l) && (st = visit(dim, id, l, -1, fn, ud)))
            return st;
    if (!(flags & TT_WALK_EXPERTS) || !tt_in_layer(c, TT_EXPERT_FIRST, l))
        return K3_OK;
    for (int e = 0; e < c->n_experts; e++)
        for (int id = TT_EXPERT_FIRST; id < TT_COUNT; id++)
            if ((st = visit(dim, id, l, e, fn, ud)))
                return st;
    return K3_OK;
}

/* The routed experts' rows come last, and only they. */
#define X(id, scope, ...) _Static_assert((TT_##id >= TT_EXPERT_FIRST) == (TT_S_##scope == TT_S_EXPERT), #id);
K3_TENSORS(X)
#undef X
