/* test-tensors.c: the tensor table (tensors.h) on its own: its rows are consistent (names unique
 * in a layer, each AttnRes norm followed by its projection, the routed experts' rows last in the
 * canonical order, the release dtypes of spec section 3), its shapes follow the config, and its
 * walk over a generated checkpoint (build/k3-mkmodel) visits every text tensor exactly once.
 */
#include "config.h"
#include "st.h"
#include "tensors.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

typedef struct seen {
    char (*names)[192];
    int n, cap, experts;
} seen;

static k3_status collect(const tt_ref *r, void *ud) {
    seen *s = ud;
    if (s->n == s->cap) {
        s->cap   = s->cap ? 2 * s->cap : 256;
        s->names = realloc(s->names, (size_t)s->cap * sizeof *s->names);
        if (!s->names)
            return K3_ERR_NOMEM;
    }
    memcpy(s->names[s->n++], r->name, sizeof r->name);
    s->experts += r->expert >= 0;
    return K3_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(a, b);
}

/* Number of names that appear more than once. */
static int duplicates(seen *s) {
    int d = 0;
    qsort(s->names, (size_t)s->n, sizeof *s->names, cmp_str);
    for (int i = 1; i < s->n; i++)
        d += !strcmp(s->names[i], s->names[i - 1]);
    return d;
}

static void test_rows(void) {
    int mix_ok = 1, expert_ok = 1, dtype_ok = 1;
    for (int id = 0; id < TT_COUNT; id++) {
        const tt_row *r = &tt_table[id];
        if (r->kind == TT_K_MIXP) {
            const tt_row *n = &tt_table[id - 1];
            size_t        k = strlen(r->name) - strlen("proj.weight");
            mix_ok &= n->kind == TT_K_MIX && n->scope == r->scope && !strncmp(n->name, r->name, k) &&
                      !strcmp(n->name + k, "norm.weight");
        }
        expert_ok &= (id >= TT_EXPERT_FIRST) == (r->scope == TT_S_EXPERT);
        int f32 = !strcmp(r->name, "dt_bias") || !strcmp(r->name, "A_log") || strstr(r->name, "conv1d") ||
                  !strcmp(r->name, "o_norm.weight");
        dtype_ok &= r->dtype == (r->scope == TT_S_EXPERT ? TT_DT_U8 : f32 ? TT_DT_F32 : TT_DT_BF16);
    }
    T_CHECK(mix_ok, "every AttnRes projection row follows its norm row");
    T_CHECK(expert_ok, "the routed experts' rows come last, and only they");
    T_CHECK(dtype_ok, "release dtypes: F32 for dt_bias, A_log, conv taps, o_norm; U8 experts; BF16 else");
    static const char *canon[] = {"w1.weight_packed", "w1.weight_scale",  "w3.weight_packed",
                                  "w3.weight_scale",  "w2.weight_packed", "w2.weight_scale"};
    int                ok      = TT_EXPERT_PARTS == 6;
    for (int k = 0; ok && k < 6; k++)
        ok = !strcmp(tt_table[TT_EXPERT_FIRST + k].name, canon[k]);
    T_CHECK(ok, "an expert's six rows in the canonical order w1, w3, w2 (packed, scale)");
}

static void test_shapes(void) {
    k3_config c = {.hidden       = 40,
                   .vocab        = 300,
                   .n_heads      = 2,
                   .q_lora       = 16,
                   .kv_lora      = 8,
                   .nope         = 4,
                   .rope         = 2,
                   .v_dim        = 5,
                   .n_experts    = 4,
                   .moe_inter    = 32,
                   .latent       = 64,
                   .n_shared     = 2,
                   .kda_heads    = 3,
                   .kda_head_dim = 6,
                   .conv_k       = 4,
                   .inter        = 24};
    int64_t   dim[TT_D_COUNT];
    tt_dims(&c, dim);
    tt_shape q = tt_shape_of(dim, TT_MLA_Q_B, 0), kv = tt_shape_of(dim, TT_MLA_KV_B, 0);
    tt_shape cv = tt_shape_of(dim, TT_KDA_Q_CONV, 0), cva = tt_shape_of(dim, TT_KDA_Q_CONV, 1);
    tt_shape w2 = tt_shape_of(dim, TT_W2_SCALE, 0), al = tt_shape_of(dim, TT_KDA_A_LOG, 0);
    tt_shape sh = tt_shape_of(dim, TT_SHARED_DOWN, 0), rp = tt_shape_of(dim, TT_ATTN_RES_PROJ, 1);
    T_CHECK(q.n == 2 && q.s[0] == 12 && q.s[1] == 16, "q_b_proj [Hm*(nope+rope), q_lora] = [12, 16]");
    T_CHECK(kv.n == 2 && kv.s[0] == 18 && kv.s[1] == 8, "kv_b_proj [Hm*(nope+v), kv_lora] = [18, 8]");
    T_CHECK(cv.n == 3 && cv.s[0] == 18 && cv.s[1] == 1 && cv.s[2] == 4 && cva.n == 2 && cva.s[1] == 4,
            "conv taps [P, 1, K] or [P, K]");
    T_CHECK(w2.n == 2 && w2.s[0] == 64 && w2.s[1] == 1, "w2.weight_scale [L, F/32] = [64, 1]");
    T_CHECK(al.n == 0 && al.s[0] == 3 && tt_numel(al) == 3, "A_log: at least H = 3 values");
    T_CHECK(sh.n == 2 && sh.s[0] == 40 && sh.s[1] == 64, "shared down_proj [D, S*F] = [40, 64]");
    T_CHECK(rp.n == 2 && rp.s[0] == 1 && rp.s[1] == 40, "AttnRes projection may be [1, D]");
    char n[192];
    T_CHECK(!strcmp(tt_name(n, sizeof n, TT_W3_PACKED, 7, 11),
                    "model.layers.7.block_sparse_moe.experts.11.w3.weight_packed") &&
                !strcmp(tt_name(n, sizeof n, TT_LM_HEAD, -1, -1), "lm_head.weight") &&
                !strcmp(tt_name(n, sizeof n, TT_OUT_RES_NORM, -1, -1), "model.output_attn_res_norm.weight") &&
                !strcmp(tt_name(n, sizeof n, TT_MLP_DOWN, 0, -1), "model.layers.0.mlp.down_proj.weight"),
            "full names from scope prefixes (%s)", n);
}

/* The walk over a generated checkpoint: every text tensor once, nothing else. */
static void test_walk(const char *build, const char *tmp) {
    char dir[600], cmd[1400];
    snprintf(dir, sizeof dir, "%s/tensors-tiny", tmp);
    snprintf(cmd, sizeof cmd, "'%s/k3-mkmodel' --preset tiny --seed 2 --quiet --force '%s' >/dev/null", build,
             dir);
    if (system(cmd)) {
        T_CHECK(0, "k3-mkmodel --preset tiny writes a model (%s/k3-mkmodel)", build);
        return;
    }
    k3_config *c = calloc(1, sizeof *c);
    st_dir    *d = NULL;
    seen       s = {0};
    if (!c || cfg_load(dir, c) || st_open(dir, &d)) {
        T_CHECK(0, "open %s: %s", dir, k3_errmsg());
        free(c);
        return;
    }
    k3_status st = K3_OK;
    for (int l = -1; l < c->n_layers && !st; l++)
        st = tt_walk(c, l, TT_WALK_EXPERTS, collect, &s);
    int missing = 0;
    for (int i = 0; i < s.n; i++)
        missing += !st_find(d, s.names[i]);
    long want_experts = (long)(c->n_layers - c->first_dense) * c->n_experts * 6;
    T_CHECK(!st && missing == 0, "every tensor the walk names is in the checkpoint (%d missing)", missing);
    T_CHECK(s.n == st_n_tensors(d), "the walk names as many tensors as the checkpoint holds (%d, %d)", s.n,
            st_n_tensors(d));
    T_CHECK(s.experts == want_experts, "routed experts: six tensors each (%d, expected %ld)", s.experts,
            want_experts);
    T_CHECK(duplicates(&s) == 0, "no name twice");
    T_CHECK(cfg_check_tensors(c, d) == K3_OK, "cfg_check_tensors accepts it (%s)", k3_errmsg());
    free(s.names);
    st_close(d);
    free(c);
}

int main(void) {
    const char *t = getenv("K3_TMP"), *b = getenv("K3_BUILD");
    test_rows();
    test_shapes();
    test_walk(b ? b : "build", t ? t : "/tmp");
    return t_done();
}
