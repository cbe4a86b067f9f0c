/* test-config.c: cfg_load on a release-structured config.json and its variants (flat keys,
 * aliases, generation_config.json), one error case per validation rule with the exact key path,
 * and cfg_check_tensors on a hand-written single-file checkpoint (zeros) built from the tensor list
 * of spec section 3, written independently of config.c.
 */
#include "config.h"
#include "st-file.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[512];

static const char base_cfg[] =
    "{\"model_type\": \"kimi_k3\", \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0,"
    " \"tie_word_embeddings\": false,"
    " \"text_config\": {\"hidden_size\": 40, \"num_hidden_layers\": 4, \"vocab_size\": 300,"
    "  \"first_k_dense_replace\": 1, \"intermediate_size\": 24, \"num_attention_heads\": 2,"
    "  \"q_lora_rank\": 16, \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 4, \"qk_rope_head_dim\": 2,"
    "  \"v_head_dim\": 4, \"num_experts\": 4, \"num_experts_per_token\": 2, \"moe_intermediate_size\": 32,"
    "  \"routed_expert_hidden_size\": 64, \"num_shared_experts\": 1, \"attn_res_block_size\": 2,"
    "  \"activation_situ_beta\": 4.0, \"activation_situ_linear_beta\": 25.0, \"rms_norm_eps\": 1e-5,"
    "  \"routed_scaling_factor\": 1.0, \"moe_renormalize\": true, \"latent_moe_use_norm\": true,"
    "  \"mla_use_nope\": true, \"mla_use_output_gate\": true, \"hidden_act\": \"situ\","
    "  \"moe_router_activation_func\": \"sigmoid\", \"num_expert_group\": 1, \"topk_group\": 1,"
    "  \"linear_attn_config\": {\"num_heads\": 2, \"head_dim\": 6, \"short_conv_kernel_size\": 4,"
    "   \"gate_lower_bound\": -5.0, \"use_full_rank_gate\": true, \"kda_layers\": [1, 2, 3],"
    "   \"full_attn_layers\": [4]},"
    "  \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
    "\"mxfp4-pack-quantized\","
    "   \"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 4, \"type\": \"float\", "
    "\"group_size\": 32},"
    "   \"targets\": [\"Linear\"]}}}},"
    " \"vision_config\": {}}";

static json_t *base(void) {
    json_error_t e;
    json_t      *j = json_loads(base_cfg, 0, &e);
    if (!j)
        fprintf(stderr, "base config: %s\n", e.text);
    return j;
}

static json_t *tc(json_t *j) {
    return json_object_get(j, "text_config");
}
static json_t *lac(json_t *j) {
    return json_object_get(tc(j), "linear_attn_config");
}

static char *case_dir(const char *name) {
    static char buf[700];
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    mkdir(buf, 0755);
    return buf;
}

/* Write j (stolen) as DIR/config.json. */
static void put_cfg(const char *dir, json_t *j) {
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_dump_file(j, p, JSON_INDENT(1));
    json_decref(j);
}

/* cfg_load must fail with exactly msg (or containing it when exact is 0). */
static void expect_cfg(const char *name, json_t *j, const char *msg, int exact) {
    const char *dir = case_dir(name);
    put_cfg(dir, j);
    k3_config c;
    k3_status st = cfg_load(dir, &c);
    int       ok = exact ? !strcmp(k3_errmsg(), msg) : strstr(k3_errmsg(), msg) != NULL;
    T_CHECK(st != K3_OK && ok, "%s: rejected with '%s' (got: %s)", name, msg, st ? k3_errmsg() : "accepted");
}

static void config_cases(void) {
    k3_config c;
    json_t   *j;

    /* valid, nested */
    const char *dir = case_dir("ok");
    put_cfg(dir, base());
    k3_status st = cfg_load(dir, &c);
    T_CHECK(st == K3_OK, "release-structured config loads (%s)", k3_errmsg());
    T_CHECK(c.hidden == 40 && c.n_layers == 4 && c.vocab == 300 && c.first_dense == 1 && c.inter == 24,
            "dimensions read");
    T_CHECK(c.n_heads == 2 && c.q_lora == 16 && c.kv_lora == 8 && c.nope == 4 && c.rope == 2 && c.v_dim == 4,
            "MLA widths read");
    T_CHECK(c.n_experts == 4 && c.n_active == 2 && c.moe_inter == 32 && c.latent == 64 && c.n_shared == 1,
            "MoE widths read");
    T_CHECK(c.kda_heads == 2 && c.kda_head_dim == 6 && c.conv_k == 4 && c.gate_lower_bound == -5.0f,
            "KDA config read");
    T_CHECK(c.attn_res_block == 2 && c.situ_beta == 4.0f && c.situ_linear_beta == 25.0f &&
                c.rms_eps == 1e-5f && c.routed_scale == 1.0f,
            "scalars read");
    T_CHECK(c.layer_kind[0] == K3_LAYER_KDA && c.layer_kind[2] == K3_LAYER_KDA &&
                c.layer_kind[3] == K3_LAYER_MLA,
            "1-indexed layer lists -> 0-indexed plan");
    T_CHECK(c.bos_id == 1 && c.eos_id == 2 && c.pad_id == 0 && !strcmp(c.model_type, "kimi_k3"),
            "top-level ids");
    T_CHECK(c.mxfp4_group == 32, "MXFP4 group 32");
    T_CHECK(c.gen_temp == 1.0f && c.gen_top_p == 1.0f &&
                c.gen_temp == (float)k3_setting(K3_SETTING_TEMP)->def &&
                c.gen_top_p == (float)k3_setting(K3_SETTING_TOP_P)->def,
            "no generation_config.json: 1.0 / 1.0, the settings table's defaults (what --help says)");

    char p[800];
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    tsf_bytes(p, "{\"temperature\": 0.6, \"top_p\": 0.95, \"max_length\": 9}", 52);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.gen_temp == 0.6f && c.gen_top_p == 0.95f,
            "generation_config.json read");
    tsf_bytes(p, "{\"temperature\": ", 16);
    T_CHECK(cfg_load(dir, &c) != K3_OK && strstr(k3_errmsg(), "generation_config.json"),
            "malformed generation_config (%s)", k3_errmsg());
    tsf_bytes(p, "{\"top_p\": 2}", 12);
    T_CHECK(cfg_load(dir, &c) != K3_OK &&
                strstr(k3_errmsg(), "generation_config.json: top_p: '2' is not a number in 0..1"),
            "top_p 2 rejected (%s)", k3_errmsg());
    /* the TEMP row's range (0..2), as --temp, /temp and the API field: 5 was taken (0..100) */
    tsf_bytes(p, "{\"temperature\": 5}", 18);
    T_CHECK(cfg_load(dir, &c) != K3_OK &&
                strstr(k3_errmsg(), "generation_config.json: temperature: '5' is not a number in 0..2"),
            "temperature 5 rejected by the TEMP row (%s)", k3_errmsg());
    tsf_bytes(p, "{\"temperature\": 2, \"top_p\": 0}", 30);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.gen_temp == 2.0f && c.gen_top_p == 0.0f,
            "temperature 2 and top_p 0, the rows' bounds, read (%s)", k3_errmsg());
    unlink(p);

    /* flat: every text key at the top level, _per_tok alias, quantization_config top level */
    j         = base();
    json_t *t = json_incref(tc(j));
    json_object_del(j, "text_config");
    json_object_update(j, t);
    json_object_del(j, "num_experts_per_token");
    json_object_set_new(j, "num_experts_per_tok", json_integer(3));
    json_decref(t);
    dir = case_dir("flat");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.n_active == 3 && c.hidden == 40,
            "flat config with num_experts_per_tok (%s)", k3_errmsg());

    j = base();
    json_object_set(j, "quantization_config", json_object_get(tc(j), "quantization_config"));
    json_object_del(tc(j), "quantization_config");
    dir = case_dir("qtop");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK, "quantization_config at the top level (%s)", k3_errmsg());

    /* one case per rule */
    j = base();
    json_array_set_new(json_object_get(lac(j), "kda_layers"), 2, json_integer(5));
    expect_cfg("layer-range", j,
               "config.json: text_config.linear_attn_config.kda_layers[2] = 5 is outside 1..4", 1);
    j = base();
    json_array_set_new(json_object_get(lac(j), "full_attn_layers"), 0, json_integer(3));
    expect_cfg("layer-dup", j,
               "config.json: text_config.linear_attn_config.full_attn_layers[0] = 3 repeats layer 3", 0);
    j = base();
    json_array_remove(json_object_get(lac(j), "kda_layers"), 1);
    expect_cfg("layer-gap", j, "layer 2 (1-indexed) is in neither list", 0);
    j = base();
    json_object_del(lac(j), "full_attn_layers");
    expect_cfg("layer-list-missing", j,
               "config.json: text_config.linear_attn_config.full_attn_layers is missing", 1);
    j = base();
    json_object_del(tc(j), "hidden_size");
    expect_cfg("missing-key", j, "config.json: text_config.hidden_size is missing", 1);
    j = base();
    json_object_del(tc(j), "intermediate_size");
    expect_cfg("dense-width", j, "config.json: text_config.intermediate_size is missing", 1);
    j = base();
    json_object_del(tc(j), "intermediate_size");
    json_object_set_new(tc(j), "first_k_dense_replace", json_integer(0));
    dir = case_dir("no-dense");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.first_dense == 0,
            "no dense layer: intermediate_size may be absent (%s)", k3_errmsg());
    j = base();
    json_object_del(tc(j), "num_experts_per_token");
    expect_cfg("missing-topk", j, "config.json: text_config.num_experts_per_token is missing", 1);
    j = base(); /* both spellings of the experts per token: the same number is fine */
    json_object_set_new(tc(j), "num_experts_per_tok", json_integer(2));
    dir = case_dir("topk-both");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.n_active == 2, "both spellings of 2 experts per token read (%s)",
            k3_errmsg());
    j = base();
    json_object_set_new(tc(j), "num_experts_per_tok", json_integer(3));
    expect_cfg("topk-disagree", j,
               "config.json: text_config.num_experts_per_token = 2 and text_config.num_experts_per_tok = 3 "
               "disagree (experts per token)",
               1);
    j = base(); /* the other spelling at the top level is a key not read, as any top-level copy */
    json_object_set_new(j, "num_experts_per_tok", json_integer(3));
    dir = case_dir("topk-top");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.n_active == 2,
            "num_experts_per_tok at the top level beside text_config's spelling: text_config's read (%s)",
            k3_errmsg());
    j = base();
    json_object_set_new(tc(j), "num_experts_per_token", json_integer(5));
    expect_cfg("topk-range", j, "config.json: text_config.num_experts_per_token = 5 is outside 1..4", 1);
    j = base();
    json_object_set_new(tc(j), "moe_intermediate_size", json_integer(40));
    expect_cfg("mxfp4-width", j,
               "config.json: text_config.moe_intermediate_size = 40 is not a multiple of 32", 0);
    j = base();
    json_object_set_new(tc(j), "routed_expert_hidden_size", json_integer(48));
    expect_cfg("mxfp4-latent", j,
               "config.json: text_config.routed_expert_hidden_size = 48 is not a multiple of 32", 0);
    j = base();
    json_object_set_new(tc(j), "hidden_size", json_string("40"));
    expect_cfg("type", j, "config.json: text_config.hidden_size is not an integer", 1);
    j = base();
    json_object_set_new(tc(j), "hidden_size", json_integer(0));
    expect_cfg("zero", j, "config.json: text_config.hidden_size = 0 is outside", 0);
    j = base();
    json_object_set_new(tc(j), "qk_nope_head_dim", json_integer(0));
    expect_cfg("zero-nope", j, "config.json: text_config.qk_nope_head_dim = 0 is outside 1..65536", 0);
    j = base(); /* a key of rope width 0 is a model: the nope part alone */
    json_object_set_new(tc(j), "qk_rope_head_dim", json_integer(0));
    dir = case_dir("zero-rope");
    put_cfg(dir, j);
    T_CHECK(cfg_load(dir, &c) == K3_OK && c.rope == 0, "qk_rope_head_dim = 0 is read (%s)", k3_errmsg());
    j = base();
    json_object_set_new(tc(j), "rms_norm_eps", json_real(-1));
    expect_cfg("eps", j, "config.json: text_config.rms_norm_eps = -1 is outside", 0);
    j = base();
    json_object_set_new(tc(j), "mla_use_nope", json_false());
    expect_cfg("flag-nope", j, "config.json: text_config.mla_use_nope = false", 0);
    j = base();
    json_object_set_new(lac(j), "use_full_rank_gate", json_false());
    expect_cfg("flag-gate", j, "config.json: text_config.linear_attn_config.use_full_rank_gate = false", 0);
    j = base();
    json_object_set_new(tc(j), "moe_renormalize", json_false());
    expect_cfg("flag-renorm", j, "config.json: text_config.moe_renormalize = false", 0);
    j = base();
    json_object_set_new(tc(j), "hidden_act", json_string("silu"));
    expect_cfg("act", j, "config.json: text_config.hidden_act = \"silu\" is not supported", 0);
    j = base();
    json_object_set_new(tc(j), "moe_router_activation_func", json_string("softmax"));
    expect_cfg("router", j, "config.json: text_config.moe_router_activation_func = \"softmax\"", 0);
    j = base();
    json_object_set_new(tc(j), "topk_group", json_integer(4));
    expect_cfg("groups", j, "config.json: text_config.topk_group must be 1", 0);
    for (int i = 0; i < CFG_N_FIXED; i++) { /* every key whose value the formulas fix */
        const cfg_fixed *f = &cfg_fixed_keys[i];
        char             want[160];
        j = base();
        json_object_set_new(tc(j), f->key,
                            f->kind == CFG_TRUE     ? json_false()
                            : f->kind == CFG_STRING ? json_string("other")
                                                    : json_integer(2));
        snprintf(want, sizeof want, "config.json: text_config.%s ", f->key);
        expect_cfg(f->key, j, want, 0);
    }
    j = base();
    json_object_del(lac(j), "gate_lower_bound");
    expect_cfg("gate-bound", j, "config.json: text_config.linear_attn_config.gate_lower_bound is missing", 1);
    j = base();
    json_object_set_new(j, "tie_word_embeddings", json_true());
    expect_cfg("tied", j, "config.json: tie_word_embeddings must be false", 0);
    j = base();
    json_object_set_new(j, "eos_token_id", json_integer(300));
    expect_cfg("eos", j, "config.json: eos_token_id = 300 is outside 0..299", 1);
    /* the copy in text_config was not read when the top level had the key: a tied head passed */
    j = base();
    json_object_set_new(tc(j), "tie_word_embeddings", json_true());
    expect_cfg("tied-text", j, "config.json: text_config.tie_word_embeddings must be false", 0);
    j = base();
    json_object_set_new(j, "model_type", json_string("llama"));
    expect_cfg("model-type", j, "config.json: model_type", 0);
    /* a prefix was enough: "kimi_k3" and then anything, terminal commands too (--inspect prints it) */
    /* the error names the value found (it did not), escaped: the terminal title command shows as
     * \xHH, a line break as \x0A, so the one error line carries neither */
    static const char *const not_k3[][2] = {
        {"kimi_k3x", "kimi_k3x"},
        {"kimi_k3\x1b]0;EVIL\x07", "kimi_k3\\x1B]0;EVIL\\x07"},
        {"kimi_k", "kimi_k"},
        {"kimi\nk3\t\xe2\x80\xae", "kimi\\x0Ak3\\x09\\u202E"},
    };
    for (int i = 0; i < 4; i++) {
        char want[128];
        snprintf(want, sizeof want, "config.json: model_type is \"%s\", expected \"kimi_k3\"", not_k3[i][1]);
        j = base();
        json_object_set_new(j, "model_type", json_string(not_k3[i][0]));
        expect_cfg("model-type-prefix", j, want, 1);
    }
    /* a long value is cut to 48 bytes on a character boundary (a 2-byte character straddles byte 48) */
    j = base();
    json_object_set_new(j, "model_type",
                        json_string("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\xc3\xa9zzzz"));
    expect_cfg("model-type-long", j,
               "config.json: model_type is \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\", expected "
               "\"kimi_k3\"",
               1);
    j = base();
    json_object_set_new(j, "model_type", json_integer(3));
    expect_cfg("model-type-int", j, "config.json: model_type is not a string, expected \"kimi_k3\"", 1);
    j = base();
    json_object_set_new(json_object_get(tc(j), "quantization_config"), "format", json_string("int4"));
    expect_cfg("quant-format", j, "config.json: text_config.quantization_config.format = \"int4\"", 0);
    j = base();
    json_object_del(tc(j), "quantization_config");
    expect_cfg("quant-missing", j, "config.json: quantization_config is missing", 0);
    j = base();
    json_object_set_new(json_object_get(tc(j), "linear_attn_config"), "short_conv_kernel_size",
                        json_integer(0));
    expect_cfg("conv", j,
               "config.json: text_config.linear_attn_config.short_conv_kernel_size = 0 is outside 1..64", 1);

    dir = case_dir("malformed");
    snprintf(p, sizeof p, "%s/config.json", dir);
    tsf_bytes(p, "{\"text_config\": {\"hidden_size\": 40,,}}", 37);
    T_CHECK(cfg_load(dir, &c) != K3_OK && !strncmp(k3_errmsg(), "config.json: line 1", 19),
            "malformed config.json (%s)", k3_errmsg());
    dir = case_dir("absent");
    T_CHECK(cfg_load(dir, &c) == K3_ERR_IO && !strncmp(k3_errmsg(), dir, strlen(dir)) &&
                strstr(k3_errmsg(), ": no config.json in this directory (the model path must be a directory"),
            "absent config.json (%s)", k3_errmsg());
}

/* Every key of text_config and linear_attn_config: deleted, the config either loads (optional
 * flags) or names the key; given a string instead, it is always rejected naming the key. */
static void every_key(void) {
    json_t     *keys = base(), *v;
    const char *k;
    int         bad_del = 0, bad_type = 0, n = 0;
    char        failed[512] = "";
    for (int sect = 0; sect < 2; sect++) {
        json_t *obj = sect ? lac(keys) : tc(keys);
        json_object_foreach(obj, k, v) {
            for (int mode = 0; mode < 2; mode++) {
                json_t *j = base(), *o = sect ? lac(j) : tc(j);
                if (mode == 0)
                    json_object_del(o, k);
                else
                    json_object_set_new(o, k, json_string("x"));
                const char *dir = case_dir("every-key");
                put_cfg(dir, j);
                k3_config c;
                k3_status st = cfg_load(dir, &c);
                int       named =
                    st != K3_OK && strstr(k3_errmsg(), k) && !strncmp(k3_errmsg(), "config.json: ", 13);
                if (mode == 0 ? !(st == K3_OK || named) : !named) {
                    mode == 0 ? bad_del++ : bad_type++;
                    if (strlen(failed) + strlen(k) + 4 < sizeof failed)
                        strcat(strcat(failed, " "), k);
                }
            }
            n++;
        }
    }
    json_decref(keys);
    T_CHECK(n > 30 && !bad_del, "%d keys deleted one at a time: load or name the key (bad:%s)", n, failed);
    T_CHECK(n > 30 && !bad_type, "%d keys set to a string: rejected naming the key (bad:%s)", n, failed);
}

/* ---- tensors --------------------------------------------------------------------------------- */

typedef struct gen_opts {
    const char *skip;   /* leave this tensor out                      */
    const char *wide;   /* give this tensor one more column             */
    const char *f64;    /* store this one as F64 (not allowed)          */
    int         alt;    /* [1,D] res_proj, [P,K] conv, A_log padded     */
    int         prefix; /* language_model. on every name                */
} gen_opts;

static void add(tsf *w, const gen_opts *o, const char *dt, int nd, int64_t a, int64_t b, int64_t c,
                const char *fmt, ...) K3_PRINTF(8, 9);
static void add(tsf *w, const gen_opts *o, const char *dt, int nd, int64_t a, int64_t b, int64_t c,
                const char *fmt, ...) {
    char    name[256], full[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (o->skip && !strcmp(name, o->skip))
        return;
    int64_t s[3] = {a, b, c};
    if (o->wide && !strcmp(name, o->wide))
        s[nd - 1]++;
    if (o->f64 && !strcmp(name, o->f64))
        dt = "F64";
    snprintf(full, sizeof full, "%s%s", o->prefix ? "language_model." : "", name);
    tsf_add(w, full, dt, nd, s, NULL);
}

/* The checkpoint the base config describes (D 40, 4 layers: 0 dense KDA, 1-2 KDA MoE, 3 MLA MoE). */
static void gen_model(const char *dir, const gen_opts *o) {
    const int64_t D = 40, V = 300, I = 24, H = 2, d = 6, P = 12, K = 4, Hm = 2, QL = 16, KL = 8, nope = 4,
                  rope = 2, vd = 4, E = 4, F = 32, L = 64, S = 1;
    tsf w = {0};
    add(&w, o, "BF16", 2, V, D, 0, "model.embed_tokens.weight");
    add(&w, o, "BF16", 1, D, 0, 0, "model.norm.weight");
    add(&w, o, "BF16", 1, D, 0, 0, "model.output_attn_res_norm.weight");
    add(&w, o, "BF16", 1, D, 0, 0, "model.output_attn_res_proj.weight");
    add(&w, o, "BF16", 2, V, D, 0, "lm_head.weight");
    for (int i = 0; i < 4; i++) {
        static const char *norms[] = {"input_layernorm", "post_attention_layernorm",
                                      "self_attention_res_norm", "mlp_res_norm"};
        for (int k = 0; k < 4; k++)
            add(&w, o, "F32", 1, D, 0, 0, "model.layers.%d.%s.weight", i, norms[k]);
        for (int k = 0; k < 2; k++)
            if (o->alt)
                add(&w, o, "F16", 2, 1, D, 0, "model.layers.%d.%s_res_proj.weight", i,
                    k ? "mlp" : "self_attention");
            else
                add(&w, o, "F32", 1, D, 0, 0, "model.layers.%d.%s_res_proj.weight", i,
                    k ? "mlp" : "self_attention");
        if (i < 3) {
            static const char *pr[] = {"q_proj", "k_proj", "v_proj", "g_proj"},
                              *cv[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
            for (int k = 0; k < 4; k++)
                add(&w, o, "BF16", 2, P, D, 0, "model.layers.%d.self_attn.%s.weight", i, pr[k]);
            add(&w, o, "BF16", 2, D, P, 0, "model.layers.%d.self_attn.o_proj.weight", i);
            for (int k = 0; k < 3; k++)
                add(&w, o, "F32", o->alt ? 2 : 3, P, o->alt ? K : 1, K, "model.layers.%d.self_attn.%s.weight",
                    i, cv[k]);
            add(&w, o, "BF16", 2, d, D, 0, "model.layers.%d.self_attn.f_a_proj.weight", i);
            add(&w, o, "BF16", 2, P, d, 0, "model.layers.%d.self_attn.f_b_proj.weight", i);
            add(&w, o, "BF16", 2, H, D, 0, "model.layers.%d.self_attn.b_proj.weight", i);
            add(&w, o, "F32", 1, P, 0, 0, "model.layers.%d.self_attn.dt_bias", i);
            if (o->alt)
                add(&w, o, "F32", 1, 8, 0, 0, "model.layers.%d.self_attn.A_log", i);
            else
                add(&w, o, "F32", 3, 1, H, 1, "model.layers.%d.self_attn.A_log", i);
            add(&w, o, "F32", 1, d, 0, 0, "model.layers.%d.self_attn.o_norm.weight", i);
        } else {
            add(&w, o, "BF16", 2, QL, D, 0, "model.layers.%d.self_attn.q_a_proj.weight", i);
            add(&w, o, "BF16", 1, QL, 0, 0, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
            add(&w, o, "BF16", 2, Hm * (nope + rope), QL, 0, "model.layers.%d.self_attn.q_b_proj.weight", i);
            add(&w, o, "BF16", 2, KL + rope, D, 0, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
            add(&w, o, "BF16", 1, KL, 0, 0, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
            add(&w, o, "BF16", 2, Hm * (nope + vd), KL, 0, "model.layers.%d.self_attn.kv_b_proj.weight", i);
            add(&w, o, "BF16", 2, D, Hm * vd, 0, "model.layers.%d.self_attn.o_proj.weight", i);
            add(&w, o, "BF16", 2, Hm * vd, D, 0, "model.layers.%d.self_attn.g_proj.weight", i);
        }
        if (i == 0) {
            add(&w, o, "BF16", 2, I, D, 0, "model.layers.%d.mlp.gate_proj.weight", i);
            add(&w, o, "BF16", 2, I, D, 0, "model.layers.%d.mlp.up_proj.weight", i);
            add(&w, o, "BF16", 2, D, I, 0, "model.layers.%d.mlp.down_proj.weight", i);
            continue;
        }
        const char *m = "block_sparse_moe";
        add(&w, o, "BF16", 2, E, D, 0, "model.layers.%d.%s.gate.weight", i, m);
        add(&w, o, "F32", 1, E, 0, 0, "model.layers.%d.%s.gate.e_score_correction_bias", i, m);
        add(&w, o, "BF16", 2, L, D, 0, "model.layers.%d.%s.routed_expert_down_proj.weight", i, m);
        add(&w, o, "BF16", 2, D, L, 0, "model.layers.%d.%s.routed_expert_up_proj.weight", i, m);
        add(&w, o, "BF16", 1, L, 0, 0, "model.layers.%d.%s.routed_expert_norm.weight", i, m);
        add(&w, o, "BF16", 2, S * F, D, 0, "model.layers.%d.%s.shared_experts.gate_proj.weight", i, m);
        add(&w, o, "BF16", 2, S * F, D, 0, "model.layers.%d.%s.shared_experts.up_proj.weight", i, m);
        add(&w, o, "BF16", 2, D, S * F, 0, "model.layers.%d.%s.shared_experts.down_proj.weight", i, m);
        for (int e = E - 1; e >= 0; e--) {
            add(&w, o, "U8", 2, F, L / 2, 0, "model.layers.%d.%s.experts.%d.w1.weight_packed", i, m, e);
            add(&w, o, "U8", 2, F, L / 32, 0, "model.layers.%d.%s.experts.%d.w1.weight_scale", i, m, e);
            add(&w, o, "U8", 2, F, L / 2, 0, "model.layers.%d.%s.experts.%d.w3.weight_packed", i, m, e);
            add(&w, o, "U8", 2, F, L / 32, 0, "model.layers.%d.%s.experts.%d.w3.weight_scale", i, m, e);
            add(&w, o, "U8", 2, L, F / 2, 0, "model.layers.%d.%s.experts.%d.w2.weight_packed", i, m, e);
            add(&w, o, "U8", 2, L, F / 32, 0, "model.layers.%d.%s.experts.%d.w2.weight_scale", i, m, e);
        }
    }
    char p[800];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    T_CHECK(tsf_write(&w, p) == 0, "checkpoint written (%s)", dir);
    put_cfg(dir, base());
}

/* Generate, load, check; expect msg (NULL = success). */
static void tensor_case(const char *name, const gen_opts *o, const char *msg) {
    const char *dir = case_dir(name);
    gen_model(dir, o);
    k3_config c;
    st_dir   *d  = NULL;
    k3_status st = cfg_load(dir, &c);
    if (!st)
        st = st_open(dir, &d);
    if (!st)
        st = cfg_check_tensors(&c, d);
    if (!msg)
        T_CHECK(st == K3_OK, "%s: tensors match the config (%s)", name, k3_errmsg());
    else
        T_CHECK(st != K3_OK && !strcmp(k3_errmsg(), msg), "%s: '%s' (got: %s)", name, msg,
                st ? k3_errmsg() : "accepted");
    st_close(d);
}

static void tensor_cases(void) {
    tensor_case("t-ok", &(gen_opts){0}, NULL);
    tensor_case("t-alt", &(gen_opts){.alt = 1, .prefix = 1}, NULL);
    tensor_case("t-wide", &(gen_opts){.wide = "model.layers.1.self_attn.q_proj.weight"},
                "model.safetensors: tensor 'model.layers.1.self_attn.q_proj.weight' has shape [12, 41], "
                "expected [12, 40]");
    tensor_case("t-conv", &(gen_opts){.wide = "model.layers.2.self_attn.k_conv1d.weight"},
                "model.safetensors: tensor 'model.layers.2.self_attn.k_conv1d.weight' has shape [12, 1, 5], "
                "expected [12, 1, 4] or [12, 4]");
    tensor_case("t-missing", &(gen_opts){.skip = "model.layers.3.self_attn.kv_b_proj.weight"},
                "model.safetensors: tensor 'model.layers.3.self_attn.kv_b_proj.weight' is missing "
                "(config.json: layer 3 is MLA with a MoE)");
    tensor_case("t-expert", &(gen_opts){.skip = "model.layers.2.block_sparse_moe.experts.3.w2.weight_scale"},
                "model.safetensors: tensor 'model.layers.2.block_sparse_moe.experts.3.w2.weight_scale' is "
                "missing (config.json: layer 2 is KDA with a MoE)");
    tensor_case("t-packed", &(gen_opts){.wide = "model.layers.1.block_sparse_moe.experts.0.w2.weight_packed"},
                "model.safetensors: tensor 'model.layers.1.block_sparse_moe.experts.0.w2.weight_packed' has "
                "shape [64, 17], expected [64, 16]");
    tensor_case("t-dtype", &(gen_opts){.f64 = "model.layers.1.block_sparse_moe.experts.2.w1.weight_packed"},
                "model.safetensors: tensor 'model.layers.1.block_sparse_moe.experts.2.w1.weight_packed' has "
                "dtype F64, expected U8");
    tensor_case("t-fdtype", &(gen_opts){.f64 = "model.norm.weight"},
                "model.safetensors: tensor 'model.norm.weight' has dtype F64, expected F32, F16 or BF16");
    tensor_case(
        "t-head", &(gen_opts){.skip = "lm_head.weight"},
        "model.safetensors: tensor 'lm_head.weight' is missing (config.json: the model's global tensors)");
    tensor_case("t-dense", &(gen_opts){.wide = "model.layers.0.mlp.down_proj.weight"},
                "model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape [40, 25], "
                "expected [40, 24]");
}

int main(void) {
    const char *tmp = getenv("K3_TMP");
    snprintf(root, sizeof root, "%s/test-config.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        T_CHECK(0, "mkdtemp %s", root);
        return t_done();
    }
    config_cases();
    every_key();
    tensor_cases();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd))
        T_SKIP("could not remove %s", root);
    return t_done();
}
