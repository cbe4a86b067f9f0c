/* config.c: config.json + generation_config.json -> k3_config, and the tensor inventory check
 * (API in config.h; the keys are spec section 2, the tensors spec section 3).
 *
 * DESIGN
 * Text keys are looked up in text_config first and then at the top level (a text-only checkpoint
 * may be flat), so every error can name the key path where the key was found or, when missing,
 * where it is expected ("text_config.hidden_size" when there is a text_config). Keys that switch
 * the formulas of spec section 5 (mla_use_nope, hidden_act, ...) may be absent, but when present
 * they must say what the formulas assume; gate_lower_bound must be present. Every error message is
 * one line: "config.json: <key path> <what is wrong>".
 *
 * cfg_check_tensors() walks the tensor table (tensors.h) over the configuration (globals, then per
 * layer: the common norms, KDA or MLA attention, dense MLP or MoE with every routed expert) and
 * checks presence, dtype class (float: F32/F16/BF16; expert packs and scales: U8) and shape. The first
 * problem is reported naming the shard file holding the tensor (or the index, when it is missing).
 */
#include "config.h"
#include "repack.h"
#include "tensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define CFG_FILE "config.json"
#define GEN_FILE "generation_config.json"
#define DIM_MAX (1 << 24) /* generous bound for any width: keeps every product inside int64 */

typedef struct cfg_ctx {
    json_t *top; /* root object                                   */
    json_t *tc;  /* text_config, or NULL when the keys are flat    */
} cfg_ctx;

/* ---- key lookup ------------------------------------------------------------------------------ */

static void key_path(char *buf, size_t n, const char *obj, const char *key) {
    snprintf(buf, n, "%s%s%s", obj ? obj : "", obj && *obj ? "." : "", key);
}

/* A text key: text_config.KEY, else top-level KEY. Sets path to where it was found or expected. */
static json_t *text_key(const cfg_ctx *c, const char *key, char *path, size_t n) {
    json_t *v = c->tc ? json_object_get(c->tc, key) : NULL;
    if (v) {
        key_path(path, n, "text_config", key);
        return v;
    }
    v = json_object_get(c->top, key);
    key_path(path, n, v || !c->tc ? "" : "text_config", key);
    return v;
}

static k3_status missing(const char *path) {
    return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is missing", path);
}

static k3_status to_int(json_t *v, const char *path, long lo, long hi, int *out) {
    if (!v)
        return missing(path);
    if (!json_is_integer(v))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not an integer", path);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %lld is outside %ld..%ld", path, (long long)x, lo, hi);
    *out = (int)x;
    return K3_OK;
}

static k3_status to_float(json_t *v, const char *path, float *out) {
    if (!v)
        return missing(path);
    if (!json_is_number(v))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not a number", path);
    double x = json_number_value(v);
    if (!isfinite(x) || fabs(x) > 1e30)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %g is not a finite number", path, x);
    *out = (float)x;
    return K3_OK;
}

/* Required text integer in lo..hi. */
static k3_status t_int(const cfg_ctx *c, const char *key, long lo, long hi, int *out) {
    char path[128];
    return to_int(text_key(c, key, path, sizeof path), path, lo, hi, out);
}

static k3_status t_float(const cfg_ctx *c, const char *key, float *out) {
    char path[128];
    return to_float(text_key(c, key, path, sizeof path), path, out);
}

/* Optional flag that must be true (spec section 2: the formulas assume it). */
static k3_status want_true(json_t *v, const char *path) {
    if (!v)
        return K3_OK;
    if (!json_is_boolean(v))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not true/false", path);
    if (!json_is_true(v))
        return k3_err(K3_ERR_CONFIG,
                      CFG_FILE ": %s = false is not supported (k3chat implements the true variant only)",
                      path);
    return K3_OK;
}

static k3_status want_string(json_t *v, const char *path, const char *want) {
    if (!v)
        return K3_OK;
    if (!json_is_string(v))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not a string", path);
    if (strcmp(json_string_value(v), want))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = \"%s\" is not supported (expected \"%s\")", path,
                      json_string_value(v), want);
    return K3_OK;
}

static k3_status want_one(json_t *v, const char *path) {
    if (!v || json_is_null(v))
        return K3_OK;
    if (!json_is_integer(v) || json_integer_value(v) != 1)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s must be 1 (grouped routing is not supported)", path);
    return K3_OK;
}

/* Optional token id (-1 when absent or null); top level first, then text_config. */
static k3_status token_id(const cfg_ctx *c, const char *key, int vocab, int *out) {
    char    path[128];
    json_t *v = json_object_get(c->top, key);
    key_path(path, sizeof path, "", key);
    if (!v && c->tc && (v = json_object_get(c->tc, key)))
        key_path(path, sizeof path, "text_config", key);
    *out = -1;
    if (!v || json_is_null(v))
        return K3_OK;
    if (json_is_array(v)) { /* some configs list several ids: the first is the one we use */
        if (!json_array_size(v))
            return K3_OK;
        v = json_array_get(v, 0);
        strncat(path, "[0]", sizeof path - strlen(path) - 1);
    }
    return to_int(v, path, 0, vocab - 1, out);
}

/* ---- sections ------------------------------------------------------------------------------- */

const cfg_fixed cfg_fixed_keys[CFG_N_FIXED] = {
    {"mla_use_nope", CFG_TRUE, NULL},        {"mla_use_output_gate", CFG_TRUE, NULL},
    {"latent_moe_use_norm", CFG_TRUE, NULL}, {"moe_renormalize", CFG_TRUE, NULL},
    {"hidden_act", CFG_STRING, "situ"},      {"moe_router_activation_func", CFG_STRING, "sigmoid"},
    {"num_expert_group", CFG_ONE, NULL},     {"topk_group", CFG_ONE, NULL},
};

static k3_status read_flags(const cfg_ctx *c, json_t *lac, const char *lpath) {
    char      path[160];
    k3_status st;
    for (int i = 0; i < CFG_N_FIXED; i++) {
        const cfg_fixed *f = &cfg_fixed_keys[i];
        json_t          *v = text_key(c, f->key, path, sizeof path);
        st                 = f->kind == CFG_TRUE     ? want_true(v, path)
                             : f->kind == CFG_STRING ? want_string(v, path, f->str)
                                                     : want_one(v, path);
        if (st)
            return st;
    }
    key_path(path, sizeof path, lpath, "use_full_rank_gate");
    return want_true(json_object_get(lac, "use_full_rank_gate"), path);
}

/* kda_layers / full_attn_layers (1-indexed) -> layer_kind (0-indexed), each layer exactly once. */
static k3_status read_layer_plan(json_t *lac, const char *lpath, k3_config *o) {
    static const char *keys[2]  = {"kda_layers", "full_attn_layers"};
    static const int   kinds[2] = {K3_LAYER_KDA, K3_LAYER_MLA};
    int                where[K3_MAX_LAYERS]; /* index into its list, for duplicate messages */
    memset(o->layer_kind, 0, sizeof o->layer_kind);
    for (int k = 0; k < 2; k++) {
        char    path[160];
        json_t *a = json_object_get(lac, keys[k]);
        key_path(path, sizeof path, lpath, keys[k]);
        if (!a)
            return missing(path);
        if (!json_is_array(a))
            return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not a list", path);
        for (size_t i = 0; i < json_array_size(a); i++) {
            char el[192];
            int  l;
            snprintf(el, sizeof el, "%s[%zu]", path, i);
            k3_status st = to_int(json_array_get(a, i), el, 1, o->n_layers, &l);
            if (st)
                return st;
            if (o->layer_kind[l - 1])
                return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %d repeats layer %d (already in %s[%d])", el, l,
                              l, keys[o->layer_kind[l - 1] == K3_LAYER_KDA ? 0 : 1], where[l - 1]);
            o->layer_kind[l - 1] = (unsigned char)kinds[k];
            where[l - 1]         = (int)i;
        }
    }
    for (int l = 0; l < o->n_layers; l++)
        if (!o->layer_kind[l])
            return k3_err(K3_ERR_CONFIG,
                          CFG_FILE
                          ": %s.kda_layers / full_attn_layers: layer %d (1-indexed) is in neither list",
                          lpath, l + 1);
    return K3_OK;
}

/* quantization_config: compressed-tensors, mxfp4-pack-quantized, group size 32. */
static k3_status read_quant(const cfg_ctx *c, k3_config *o) {
    char    path[160], p2[400];
    json_t *q = text_key(c, "quantization_config", path, sizeof path);
    if (!q && c->tc && (q = json_object_get(c->top, "quantization_config")))
        key_path(path, sizeof path, "", "quantization_config");
    if (!q)
        return k3_err(K3_ERR_CONFIG, CFG_FILE
                      ": quantization_config is missing (the routed experts must be mxfp4-pack-quantized)");
    if (!json_is_object(q))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not an object", path);
    k3_status st;
    key_path(p2, sizeof p2, path, "quant_method");
    if (!json_object_get(q, "quant_method"))
        return missing(p2);
    if ((st = want_string(json_object_get(q, "quant_method"), p2, "compressed-tensors")))
        return st;
    json_t *fmt = json_object_get(q, "format");
    key_path(p2, sizeof p2, path, "format");
    if ((st = want_string(fmt, p2, "mxfp4-pack-quantized")))
        return st;
    int found_fmt      = fmt != NULL;
    o->mxfp4_group     = 32;
    json_t     *groups = json_object_get(q, "config_groups"), *g;
    const char *gname;
    if (groups && json_is_object(groups)) {
        json_object_foreach(groups, gname, g) {
            char gp[224];
            snprintf(gp, sizeof gp, "%s.config_groups.%s", path, gname);
            if (!json_is_object(g))
                return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not an object", gp);
            json_t *gf = json_object_get(g, "format");
            key_path(p2, sizeof p2, gp, "format");
            if ((st = want_string(gf, p2, "mxfp4-pack-quantized")))
                return st;
            found_fmt |= gf != NULL;
            json_t *w = json_object_get(g, "weights");
            if (!json_is_object(w))
                continue;
            json_t *gs = json_object_get(w, "group_size"), *nb = json_object_get(w, "num_bits");
            snprintf(p2, sizeof p2, "%s.weights.group_size", gp);
            if (gs && !json_is_null(gs) && (st = to_int(gs, p2, 32, 32, &o->mxfp4_group)))
                return st;
            snprintf(p2, sizeof p2, "%s.weights.num_bits", gp);
            int bits;
            if (nb && !json_is_null(nb) && (st = to_int(nb, p2, 4, 4, &bits)))
                return st;
        }
    }
    if (!found_fmt)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s.format is missing (expected \"mxfp4-pack-quantized\")",
                      path);
    return K3_OK;
}

static k3_status read_generation(const char *dir, k3_config *o) {
    /* absent keys (or file): the settings table's defaults, the release's own 1.0 / 1.0 */
    o->gen_temp  = (float)k3_setting(K3_SETTING_TEMP)->def;
    o->gen_top_p = (float)k3_setting(K3_SETTING_TOP_P)->def;
    char path[4096];
    snprintf(path, sizeof path, "%s/" GEN_FILE, dir);
    json_error_t e;
    char        *text;
    size_t       len;
    int          missing;
    k3_status    rs = k3_read_regular(path, GEN_FILE, &text, &len, &missing);
    if (rs || missing)
        return rs; /* absent: defaults */
    json_t *g = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    free(text);
    if (!g)
        return k3_err(K3_ERR_CONFIG, GEN_FILE ": line %d column %d: %s", e.line, e.column, e.text);
    /* the model's defaults have the ranges of --temp, /temp and the API's fields: their rows */
    k3_status st = K3_OK;
    json_t   *t = json_object_get(g, "temperature"), *p = json_object_get(g, "top_p");
    char      err[256];
    if (!json_is_object(g))
        st = k3_err(K3_ERR_CONFIG, GEN_FILE ": not a JSON object");
    else if (t && !json_is_null(t) && !json_is_number(t))
        st = k3_err(K3_ERR_CONFIG, GEN_FILE ": temperature is not a number");
    else if (t && json_is_number(t) &&
             k3_setting_check(K3_SETTING_TEMP, K3_SRC_API, json_number_value(t), err, sizeof err))
        st = k3_err(K3_ERR_CONFIG, GEN_FILE ": %s", err);
    else if (p && !json_is_null(p) && !json_is_number(p))
        st = k3_err(K3_ERR_CONFIG, GEN_FILE ": top_p is not a number");
    else if (p && json_is_number(p) &&
             k3_setting_check(K3_SETTING_TOP_P, K3_SRC_API, json_number_value(p), err, sizeof err))
        st = k3_err(K3_ERR_CONFIG, GEN_FILE ": %s", err);
    if (!st && t && json_is_number(t))
        o->gen_temp = (float)json_number_value(t);
    if (!st && p && json_is_number(p))
        o->gen_top_p = (float)json_number_value(p);
    json_decref(g);
    return st;
}

/* ---- cfg_load ------------------------------------------------------------------------------- */

/* model_type names what it found: at most MT_SHOW bytes of it (cut on a character boundary, "..."
 * after), escaped (k3_escape, and \n, \t as \x0A, \x09), since the file is outside text and an
 * error line must not carry a terminal command or a line break. */
#define MT_SHOW 48
static k3_status bad_model_type(const char *s, size_t n) {
    size_t cut = n;
    if (cut > MT_SHOW)
        for (cut = MT_SHOW; cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80; cut--)
            ;
    k3_buf b = {0};
    for (size_t i = 0, run = 0; i <= cut; i++) {
        if (i < cut && s[i] != '\n' && s[i] != '\t')
            continue;
        k3_escape(&b, NULL, s + run, i - run); /* out of memory sets b.oom */
        if (i < cut)
            k3_buf_printf(&b, "\\x%02X", (unsigned)s[i]);
        run = i + 1;
    }
    k3_status st = k3_err(K3_ERR_CONFIG, CFG_FILE ": model_type is \"%s%s\", expected \"kimi_k3\"",
                          b.oom || !b.p ? "" : b.p, cut < n ? "..." : "");
    free(b.p);
    return st;
}

/* The top level: model_type exactly "kimi_k3", tie_word_embeddings false (in text_config too). */
static k3_status parse_top(const cfg_ctx *c, k3_config *o) {
    json_t *v;
    if (!(v = json_object_get(c->top, "model_type")))
        return missing("model_type");
    /* exactly: a prefix match took "kimi_k3x" and "kimi_k3\e]0;..." (printed by --inspect) */
    if (!json_is_string(v))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": model_type is not a string, expected \"kimi_k3\"");
    if (strcmp(json_string_value(v), "kimi_k3"))
        return bad_model_type(json_string_value(v), json_string_length(v));
    snprintf(o->model_type, sizeof o->model_type, "%s", json_string_value(v));
    /* both copies, when both are there: a text_config that ties the head contradicts the top level */
    for (int i = 0; i < 2; i++) {
        v = json_object_get(i ? c->tc : c->top, "tie_word_embeddings");
        if (v && !json_is_false(v))
            return k3_err(K3_ERR_CONFIG,
                          CFG_FILE ": %stie_word_embeddings must be false (K3 has a separate lm_head)",
                          i ? "text_config." : "");
    }
    o->tie_word_embeddings = 0;
    return K3_OK;
}

/* text_config's layer, attention and vocabulary dimensions. */
static k3_status parse_dims(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    char      path[160];
    if ((st = t_int(c, "num_hidden_layers", 1, K3_MAX_LAYERS, &o->n_layers)))
        return st;
    if ((st = t_int(c, "hidden_size", 1, DIM_MAX, &o->hidden)))
        return st;
    if ((st = t_int(c, "vocab_size", 1, DIM_MAX, &o->vocab)))
        return st;
    if ((st = t_int(c, "first_k_dense_replace", 0, o->n_layers, &o->first_dense)))
        return st;
    /* the dense MLP width matters only when there are dense layers */
    if ((o->first_dense > 0 || text_key(c, "intermediate_size", path, sizeof path)) &&
        (st = t_int(c, "intermediate_size", 1, DIM_MAX, &o->inter)))
        return st;
    if ((st = t_int(c, "num_attention_heads", 1, 65536, &o->n_heads)))
        return st;
    if ((st = t_int(c, "q_lora_rank", 1, DIM_MAX, &o->q_lora)))
        return st;
    if ((st = t_int(c, "kv_lora_rank", 1, DIM_MAX, &o->kv_lora)))
        return st;
    /* at least 1: the absorbed decode keeps kv_b's nope rows as (kv_lora, nope) matrices, which
     * the load quantizes (K3_MLA_BITS); a width of 0 gave them no columns to quantize */
    if ((st = t_int(c, "qk_nope_head_dim", 1, 65536, &o->nope)))
        return st;
    if ((st = t_int(c, "qk_rope_head_dim", 0, 65536, &o->rope)))
        return st;
    if ((st = t_int(c, "v_head_dim", 1, 65536, &o->v_dim)))
        return st;
    if ((long)o->n_heads * (o->nope + o->rope + o->v_dim) > DIM_MAX)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s times the head widths exceeds %d",
                      (text_key(c, "num_attention_heads", path, sizeof path), path), DIM_MAX);
    return K3_OK;
}

/* num_experts_per_token, or its other spelling num_experts_per_tok (both in one place: the same
 * number), into o->n_active (o->n_experts read). */
static k3_status parse_active(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    char      path[160], p2[160];
    json_t   *v  = text_key(c, "num_experts_per_token", path, sizeof path);
    json_t   *v2 = text_key(c, "num_experts_per_tok", p2, sizeof p2);
    int       k2;
    if (!v && v2) {
        v = v2;
        strcpy(path, p2);
    } else if (v && v2 && !strncmp(path, "text_config.", 12) == !strncmp(p2, "text_config.", 12)) {
        /* both spellings in one place: each valid, and the same number (a copy elsewhere is
         * a key not read, as for any key in both places) */
        if ((st = to_int(v, path, 1, o->n_experts, &o->n_active)) ||
            (st = to_int(v2, p2, 1, o->n_experts, &k2)))
            return st;
        if (k2 != o->n_active)
            return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %d and %s = %d disagree (experts per token)", path,
                          o->n_active, p2, k2);
    }
    return to_int(v, path, 1, o->n_experts, &o->n_active);
}

/* text_config's experts: counts and widths (multiples of 32: MXFP4 groups), attention residual
 * blocks. */
static k3_status parse_experts(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    char      path[160];
    if ((st = t_int(c, "num_experts", 1, 1 << 20, &o->n_experts)))
        return st;
    if ((st = parse_active(c, o)))
        return st;
    if ((st = t_int(c, "moe_intermediate_size", 1, DIM_MAX, &o->moe_inter)))
        return st;
    if ((st = t_int(c, "routed_expert_hidden_size", 1, DIM_MAX, &o->latent)))
        return st;
    if (o->moe_inter % 32)
        return k3_err(K3_ERR_CONFIG,
                      CFG_FILE ": %s = %d is not a multiple of 32 (MXFP4 groups of the down projection)",
                      (text_key(c, "moe_intermediate_size", path, sizeof path), path), o->moe_inter);
    if (o->latent % 32)
        return k3_err(K3_ERR_CONFIG,
                      CFG_FILE ": %s = %d is not a multiple of 32 (MXFP4 groups of the gate/up projections)",
                      (text_key(c, "routed_expert_hidden_size", path, sizeof path), path), o->latent);
    if ((st = t_int(c, "num_shared_experts", 1, K3_MAX_SHARED, &o->n_shared)))
        return st;
    if ((long)o->n_shared * o->moe_inter > DIM_MAX)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s times moe_intermediate_size exceeds %d",
                      (text_key(c, "num_shared_experts", path, sizeof path), path), DIM_MAX);
    if ((st = t_int(c, "attn_res_block_size", 1, K3_MAX_LAYERS, &o->attn_res_block)))
        return st;
    return K3_OK;
}

/* text_config's float scalars, each within its range. */
static k3_status parse_scalars(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    char      path[160];
    struct {
        const char *key;
        float      *dst;
        float       lo, hi;
        int         open_lo;
    } fl[] = {
        {"activation_situ_beta", &o->situ_beta, 0, 1e6f, 1},
        {"activation_situ_linear_beta", &o->situ_linear_beta, 0, 1e6f, 1},
        {"rms_norm_eps", &o->rms_eps, 0, 1, 1},
        {"routed_scaling_factor", &o->routed_scale, 0, 1e6f, 1},
    };
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) {
        if ((st = t_float(c, fl[i].key, fl[i].dst)))
            return st;
        if (!(*fl[i].dst > fl[i].lo && *fl[i].dst <= fl[i].hi))
            return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %g is outside (%g, %g]",
                          (text_key(c, fl[i].key, path, sizeof path), path), (double)*fl[i].dst,
                          (double)fl[i].lo, (double)fl[i].hi);
    }
    return K3_OK;
}

/* linear_attn_config: the KDA heads, gate bound, flags and layer plan. */
static k3_status parse_linear_attn(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    char      path[160];
    char      lpath[64];
    json_t   *lac = text_key(c, "linear_attn_config", lpath, sizeof lpath);
    if (!lac)
        return missing(lpath);
    if (!json_is_object(lac))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s is not an object", lpath);
    struct {
        const char *key;
        int        *dst;
        long        lo, hi;
    } li[] = {
        {"num_heads", &o->kda_heads, 1, 65536},
        {"head_dim", &o->kda_head_dim, 1, 65536},
        {"short_conv_kernel_size", &o->conv_k, 1, 64},
    };
    for (size_t i = 0; i < sizeof li / sizeof *li; i++) {
        key_path(path, sizeof path, lpath, li[i].key);
        if ((st = to_int(json_object_get(lac, li[i].key), path, li[i].lo, li[i].hi, li[i].dst)))
            return st;
    }
    if ((long)o->kda_heads * o->kda_head_dim > DIM_MAX)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s.num_heads * head_dim exceeds %d", lpath, DIM_MAX);
    key_path(path, sizeof path, lpath, "gate_lower_bound");
    if ((st = to_float(json_object_get(lac, "gate_lower_bound"), path, &o->gate_lower_bound)))
        return st;
    if (!(o->gate_lower_bound < 0))
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": %s = %g must be negative", path,
                      (double)o->gate_lower_bound);
    if ((st = read_flags(c, lac, lpath)))
        return st;
    if ((st = read_layer_plan(lac, lpath, o)))
        return st;
    return K3_OK;
}

static k3_status parse(const cfg_ctx *c, k3_config *o) {
    k3_status st;
    if ((st = parse_top(c, o)) || (st = parse_dims(c, o)) || (st = parse_experts(c, o)) ||
        (st = parse_scalars(c, o)) || (st = parse_linear_attn(c, o)))
        return st;
    if ((st = token_id(c, "bos_token_id", o->vocab, &o->bos_id)))
        return st;
    if ((st = token_id(c, "eos_token_id", o->vocab, &o->eos_id)))
        return st;
    if ((st = token_id(c, "pad_token_id", o->vocab, &o->pad_id)))
        return st;
    return read_quant(c, o);
}

/* A model path that is a file, or is not there, or holds no config.json, would otherwise be told
 * "config.json: cannot open x/config.json: Not a directory": the message says what a model path is. */
#define CFG_DIR_HINT "the model path must be a directory holding " CFG_FILE

k3_status cfg_read_text(const char *dir, char **text, size_t *len) {
    *text = NULL;
    *len  = 0;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/" CFG_FILE, dir) >= sizeof path)
        return k3_err(K3_ERR_ARG, "%s: path too long", dir);
    struct stat sb;
    if (stat(dir, &sb) < 0)
        return errno == ENOENT
                   ? k3_err(K3_ERR_IO, "%s: no such directory (" CFG_DIR_HINT ")", dir)
                   : k3_err(K3_ERR_IO, "%s: cannot open: %s (" CFG_DIR_HINT ")", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return k3_err(K3_ERR_IO, "%s: not a directory (" CFG_DIR_HINT ")", dir);
    int       missing;
    k3_status st = k3_read_regular(path, CFG_FILE, text, len, &missing);
    if (!st && missing)
        st = k3_err(K3_ERR_IO, "%s: no " CFG_FILE " in this directory (" CFG_DIR_HINT ")", dir);
    return st;
}

k3_status cfg_load(const char *dir, k3_config *out) {
    memset(out, 0, sizeof *out);
    json_error_t e;
    char        *text;
    size_t       len;
    k3_status    rs = cfg_read_text(dir, &text, &len);
    if (rs)
        return rs;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    free(text);
    if (!root)
        return k3_err(K3_ERR_CONFIG, CFG_FILE ": line %d column %d: %s", e.line, e.column, e.text);
    k3_status st;
    cfg_ctx   c = {.top = root, .tc = json_object_get(root, "text_config")};
    if (!json_is_object(root))
        st = k3_err(K3_ERR_CONFIG, CFG_FILE ": not a JSON object");
    else if (c.tc && !json_is_object(c.tc))
        st = k3_err(K3_ERR_CONFIG, CFG_FILE ": text_config is not an object");
    else
        st = parse(&c, out);
    json_decref(root);
    if (!st)
        st = read_generation(dir, out);
    return st;
}

/* ---- cfg_check_tensors ---------------------------------------------------------------------- */

static void fmt_shape(char *buf, size_t n, int nd, const int64_t *s) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static int shape_eq(const st_tensor *t, tt_shape a) {
    if (a.n == 0)
        return st_numel(t) >= a.s[0];
    if (a.n != t->ndim)
        return 0;
    for (int i = 0; i < a.n; i++)
        if (t->shape[i] != a.s[i])
            return 0;
    return 1;
}

static const char *index_file(const st_dir *d) {
    return st_n_shards(d) == 1 && !strcmp(st_shard_name(d, 0), "model.safetensors")
               ? "model.safetensors"
               : "model.safetensors.index.json";
}

/* Check one tensor of the table: present, dtype class (float, or U8 for the routed experts),
 * shape or its alternative. what: why the config implies it. */
static k3_status want(const st_dir *d, const char *what, const tt_ref *r) {
    const char      *name = r->name;
    const tt_shape   a = r->shape, b = r->alt;
    const int        u8 = tt_table[r->id].kind >= TT_K_PACK;
    const st_tensor *t  = st_find(d, name);
    if (!t)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is missing (config.json: %s)", index_file(d), name,
                      what);
    const char *file = st_shard_name(d, t->shard);
    if (!u8 && a.n == 2 && t->dtype == ST_U8) { /* k3 container matrix (repack.h) */
        rp_form f;
        return rp_matrix_form(d, name, (int)a.s[0], (int)a.s[1], &f);
    }
    int okdt = u8 ? t->dtype == ST_U8 : t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16;
    if (!okdt)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected %s", file, name,
                      st_dtype_name(t->dtype), u8 ? "U8" : "F32, F16 or BF16");
    if (shape_eq(t, a) || (b.n >= 0 && shape_eq(t, b)))
        return K3_OK;
    char got[160], e1[96], e2[96];
    fmt_shape(got, sizeof got, t->ndim, t->shape);
    if (a.n == 0)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected at least %lld values", file,
                      name, got, (long long)a.s[0]);
    fmt_shape(e1, sizeof e1, a.n, a.s);
    if (b.n >= 0)
        fmt_shape(e2, sizeof e2, b.n, b.s);
    return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s%s%s", file, name, got, e1,
                  b.n >= 0 ? " or " : "", b.n >= 0 ? e2 : "");
}

typedef struct check_ctx {
    const k3_config *c;
    const st_dir    *d;
    char             what[96]; /* why the config implies the tensors of this walk */
} check_ctx;

static k3_status check_one(const tt_ref *r, void *ud) {
    const check_ctx *x = ud;
    const st_tensor *t = st_find(x->d, r->name);
    if (tt_table[r->id].kind == TT_K_KVB && t && t->ndim == 1) { /* k3 container: split per head (repack.h) */
        const k3_config *c = x->c;
        rp_kvb           k = {.Hm = c->n_heads, .nope = c->nope, .v = c->v_dim, .kl = c->kv_lora};
        rp_form          f;
        int              split;
        return rp_kvb_form(x->d, r->name, &k, &f, &split);
    }
    return want(x->d, x->what, r);
}

/* Every tensor the table gives the configuration: the globals, then layer by layer. */
k3_status cfg_check_tensors(const k3_config *c, const st_dir *d) {
    k3_status st;
    check_ctx x = {.c = c, .d = d, .what = "the model's global tensors"};
    if ((st = tt_walk(c, -1, 0, check_one, &x)))
        return st;
    for (int i = 0; i < c->n_layers; i++) {
        snprintf(x.what, sizeof x.what, "layer %d is %s with a %s", i,
                 c->layer_kind[i] == K3_LAYER_KDA ? "KDA" : "MLA", i < c->first_dense ? "dense MLP" : "MoE");
        if ((st = tt_walk(c, i, TT_WALK_EXPERTS, check_one, &x)))
            return st;
    }
    return K3_OK;
}
