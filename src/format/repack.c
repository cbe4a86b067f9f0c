/* repack.c: the k3 container format's readers (format in repack.h; writer: tools/k3-repack.c).
 *
 * DESIGN
 * Detection is by the tensors themselves, never by trusting config.json alone: a matrix stored
 * as U8 must come with NAME.qs (F32) and both shapes must match exactly one qmat layout for the
 * logical shape the configuration implies. So a half-written or foreign directory fails with a
 * message naming the shard and tensor instead of being computed with wrong bytes.
 */
#include "config.h"
#include "repack.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

int rp_bits_type(int bits) {
    return bits == 8 ? Q_I8 : bits == 4 ? Q_I4 : Q_F32;
}

const char *rp_type_name(int type) {
    return type == Q_I8 ? "I8" : type == Q_I4 ? "I4" : type == Q_F32 ? "F32" : "float";
}

/* ---- config.json ----------------------------------------------------------------------------- */

static k3_status info_bits(json_t *sec, const char *key, int allow32, int *out) {
    json_t *v = json_object_get(sec, key);
    if (!v)
        return k3_err(K3_ERR_CONFIG, "config.json: " RP_CONFIG_KEY ".%s is missing", key);
    json_int_t b = json_is_integer(v) ? json_integer_value(v) : -1;
    if (b != 4 && b != 8 && !(allow32 && b == 32))
        return k3_err(K3_ERR_CONFIG, "config.json: " RP_CONFIG_KEY ".%s: expected 4, 8%s", key,
                      allow32 ? " or 32" : "");
    *out = (int)b;
    return K3_OK;
}

k3_status rp_info_load(const char *dir, rp_info *info) {
    memset(info, 0, sizeof *info);
    json_error_t jerr;
    char        *text;
    size_t       len;
    k3_status    rs = cfg_read_text(dir, &text, &len);
    if (rs)
        return rs;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root)
        return k3_err(K3_ERR_CONFIG, "config.json: %s", jerr.text);
    json_t   *sec = json_is_object(root) ? json_object_get(root, RP_CONFIG_KEY) : NULL;
    k3_status st  = K3_OK;
    if (sec) {
        json_t *ver = json_object_get(sec, "version");
        if (!json_is_object(sec)) {
            st = k3_err(K3_ERR_CONFIG, "config.json: " RP_CONFIG_KEY " is not an object");
        } else if (!json_is_integer(ver) || json_integer_value(ver) != RP_VERSION) {
            st = k3_err(K3_ERR_CONFIG,
                        "config.json: " RP_CONFIG_KEY ".version: expected %d (written by another k3-repack?)",
                        RP_VERSION);
        } else if (!(st = info_bits(sec, "bits", 0, &info->bits)) &&
                   !(st = info_bits(sec, "mla_bits", 1, &info->mla_bits)) &&
                   !(st = info_bits(sec, "head_bits", 1, &info->head_bits))) {
            info->present = 1;
        }
    }
    json_decref(root);
    return st;
}

static int env_set(enum k3_setting_id id) {
    return k3_setting_env_str(id) != NULL;
}

int rp_run_bits(const rp_info *ci, k3_params *p) {
    if (!ci->present)
        return 0;
    int set_b = env_set(K3_SETTING_BITS), from = 0;
    if (!set_b) {
        p->bits = ci->bits;
        from |= RP_FROM_BITS;
    }
    if (!env_set(K3_SETTING_MLA_BITS)) {
        p->mla_bits = set_b ? p->bits : ci->mla_bits;
        from |= set_b ? 0 : RP_FROM_MLA;
    }
    if (!env_set(K3_SETTING_HEAD_BITS)) {
        p->head_bits = set_b ? p->bits : ci->head_bits;
        from |= set_b ? 0 : RP_FROM_HEAD;
    }
    return from;
}

/* ---- matrices -------------------------------------------------------------------------------- */

static int shape_is(const st_tensor *t, int nd, int64_t a, int64_t b) {
    return t->ndim == nd && t->shape[0] == a && (nd < 2 || t->shape[1] == b);
}

static const st_tensor *need(const st_dir *d, const char *name, k3_status *st) {
    const st_tensor *t = st_find(d, name);
    if (!t)
        *st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is missing", st_path(d), name);
    return t;
}

/* The sidecar of a U8 tensor: present and F32, else an error naming both. */
static const st_tensor *sidecar(const st_dir *d, const st_tensor *t, k3_status *st) {
    char sn[512];
    snprintf(sn, sizeof sn, "%s" RP_SIDECAR, t->name);
    const st_tensor *s = st_find(d, sn);
    if (!s)
        *st = k3_err(K3_ERR_FORMAT,
                     "%s: tensor '%s' is U8 (a k3 container matrix) but its scales '%s' are missing",
                     st_shard_name(d, t->shard), t->name, sn);
    else if (s->dtype != ST_F32) {
        *st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32 scales",
                     st_shard_name(d, s->shard), sn, st_dtype_name(s->dtype));
        s   = NULL;
    }
    return s;
}

/* A float tensor used as is (F32) or converted (others). */
static k3_status float_form(const st_dir *d, const st_tensor *t, rp_form *out) {
    if (t->dtype == ST_F32)
        out->type = Q_F32;
    else if (t->dtype == ST_BF16 || t->dtype == ST_F16 || t->dtype == ST_F64)
        out->type = -1;
    else
        return k3_err(K3_ERR_FORMAT,
                      "%s: tensor '%s' has dtype %s, expected a float type or a k3 container U8",
                      st_shard_name(d, t->shard), t->name, st_dtype_name(t->dtype));
    return K3_OK;
}

k3_status rp_matrix_form(const st_dir *d, const char *name, int rows, int cols, rp_form *out) {
    memset(out, 0, sizeof *out);
    k3_status st = K3_OK;
    if (!(out->w = need(d, name, &st)))
        return st;
    const st_tensor *t = out->w;
    if (t->dtype != ST_U8) {
        if (!shape_is(t, 2, rows, cols))
            return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': expected shape [%d, %d]",
                          st_shard_name(d, t->shard), name, rows, cols);
        return float_form(d, t, out);
    }
    if (!(out->s = sidecar(d, t, &st)))
        return st;
    const st_tensor *s = out->s;
    if (shape_is(t, 2, rows, cols) && shape_is(s, 1, rows, 0))
        out->type = Q_I8;
    else if (shape_is(t, 2, rows, (cols + 1) / 2) &&
             shape_is(s, 2, rows, (cols + Q_I4_GROUP - 1) / Q_I4_GROUP))
        out->type = Q_I4;
    else
        return k3_err(K3_ERR_FORMAT,
                      "%s: tensor '%s' (k3 container, logical [%d, %d]): shapes fit neither I8 (U8 [%d, %d] "
                      "+ F32 [%d]) nor I4 (U8 [%d, %d] + F32 [%d, %d])",
                      st_shard_name(d, t->shard), name, rows, cols, rows, cols, rows, rows, (cols + 1) / 2,
                      rows, (cols + Q_I4_GROUP - 1) / Q_I4_GROUP);
    return K3_OK;
}

size_t rp_kvb_head_wbytes(int type, const rp_kvb *k) {
    return q_wbytes(type, k->kl, k->nope) + q_wbytes(type, k->v, k->kl);
}

size_t rp_kvb_head_sfloats(int type, const rp_kvb *k) {
    return (q_sbytes(type, k->kl, k->nope) + q_sbytes(type, k->v, k->kl)) / sizeof(float);
}

k3_status rp_kvb_form(const st_dir *d, const char *name, const rp_kvb *k, rp_form *out, int *split) {
    *split = 0;
    memset(out, 0, sizeof *out);
    k3_status st = K3_OK;
    if (!(out->w = need(d, name, &st)))
        return st;
    const st_tensor *t = out->w;
    if (t->ndim == 2)
        return rp_matrix_form(d, name, k->Hm * (k->nope + k->v), k->kl, out);
    const char *file = st_shard_name(d, t->shard);
    *split           = 1;
    if (t->dtype == ST_F32 && shape_is(t, 1, (int64_t)k->Hm * (int64_t)rp_kvb_head_wbytes(Q_F32, k) / 4, 0)) {
        out->type = Q_F32;
        return K3_OK;
    }
    if (t->dtype != ST_U8 || t->ndim != 1)
        return k3_err(K3_ERR_FORMAT,
                      "%s: tensor '%s': dtype %s with %d dimensions, expected [%d, %d] float or a k3 "
                      "container split layout",
                      file, name, st_dtype_name(t->dtype), t->ndim, k->Hm * (k->nope + k->v), k->kl);
    if (!(out->s = sidecar(d, t, &st)))
        return st;
    for (int type = Q_I8; type <= Q_I4; type++)
        if (shape_is(t, 1, (int64_t)k->Hm * (int64_t)rp_kvb_head_wbytes(type, k), 0) &&
            shape_is(out->s, 1, (int64_t)k->Hm * (int64_t)rp_kvb_head_sfloats(type, k), 0)) {
            out->type = type;
            return K3_OK;
        }
    return k3_err(K3_ERR_FORMAT,
                  "%s: tensor '%s' (k3 container per-head split of %d heads): shapes fit neither the I8 nor "
                  "the I4 layout",
                  file, name, k->Hm);
}
