/* st-file.h: safetensors files for the tests (test-st.c, test-config.c), written by the engine's
 * own writer (src/format/st-write.c), plus the raw edits the corrupt-file cases need: a header
 * changed after the writer wrote it (the data section kept byte for byte), and files of any bytes.
 *
 *     tsf f = {0};
 *     tsf_add(&f, "a", "F32", 2, (int64_t[]){2, 3}, data);  // data NULL: zeros (a hole)
 *     tsf_write(&f, "/tmp/x/model.safetensors");            // 0 or -1; empties f
 *     tsf_edit_header(path, edit);                          // edit(hdr): 0 when it applied
 *     tsf_bytes(path, p, n);                                // a file of exactly these bytes
 */
#pragma once
#include "st-write.h"
#include "st.h"
#include "test.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tsf_tensor {
    char        name[300];
    st_dtype    dt;
    int         nd;
    int64_t     shape[ST_MAX_DIMS];
    const void *data; /* NULL: zeros */
} tsf_tensor;

typedef struct tsf {
    tsf_tensor *t; /* (n) in file order */
    int         n, cap;
    int         bad; /* an unknown dtype or out of memory: tsf_write fails */
} tsf;

/* Declare the next tensor (dt: the header's name, "F32", "BF16", "U8", ...). */
static inline void tsf_add(tsf *f, const char *name, const char *dt, int nd, const int64_t *shape,
                           const void *data) {
    if (f->n == f->cap) {
        int         cap = f->cap ? 2 * f->cap : 64;
        tsf_tensor *t   = realloc(f->t, (size_t)cap * sizeof *t);
        if (!t) {
            f->bad = 1;
            return;
        }
        f->t = t, f->cap = cap;
    }
    tsf_tensor *x = &f->t[f->n];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dt = ST_DTYPE_COUNT;
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(st_dtype_name((st_dtype)i), dt))
            x->dt = (st_dtype)i;
    x->nd = nd < 0 ? 0 : nd > ST_MAX_DIMS ? ST_MAX_DIMS : nd;
    for (int i = 0; i < x->nd; i++)
        x->shape[i] = shape[i];
    x->data = data;
    f->bad |= x->dt == ST_DTYPE_COUNT;
    f->n++;
}

/* Write the declared tensors with the engine's writer; empties f. 0, or -1 (the reason printed). */
static inline int tsf_write(tsf *f, const char *path) {
    stw_file *w  = NULL;
    k3_status st = f->bad ? K3_ERR_ARG : stw_create(path, &w);
    for (int i = 0; !st && i < f->n; i++)
        st = stw_add(w, f->t[i].name, f->t[i].dt, f->t[i].nd, f->t[i].shape);
    st = st ? st : stw_begin(w);
    for (int i = 0; !st && i < f->n; i++) {
        uint64_t n = st_dtype_size(f->t[i].dt);
        for (int k = 0; k < f->t[i].nd; k++)
            n *= (uint64_t)f->t[i].shape[k];
        st = f->t[i].data ? stw_write(w, f->t[i].data, n) : stw_skip(w, n);
    }
    st = st ? st : stw_end(w);
    if (st)
        printf("tsf_write: %s: %s\n", path, f->bad ? "unknown dtype or out of memory" : k3_errmsg());
    stw_free(w);
    free(f->t);
    memset(f, 0, sizeof *f);
    return st ? -1 : 0;
}

/* A file of exactly the n bytes at p. 0 or -1. */
static inline int tsf_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}

/* The data_offsets of entry name in a header; 0, or -1 when it has none. */
static inline int tsf_range(json_t *hdr, const char *name, uint64_t *begin, uint64_t *end) {
    json_t *o = json_object_get(json_object_get(hdr, name), "data_offsets");
    if (json_array_size(o) != 2 || !json_is_integer(json_array_get(o, 0)) ||
        !json_is_integer(json_array_get(o, 1)))
        return -1;
    *begin = (uint64_t)json_integer_value(json_array_get(o, 0));
    *end   = (uint64_t)json_integer_value(json_array_get(o, 1));
    return 0;
}

/* Rewrite path's header through edit (which returns 0 when it applied): the new header JSON
 * (keys sorted, padded with spaces to 8 bytes), then the data section as it was. 0 or -1. */
static inline int tsf_edit_header(const char *path, int (*edit)(json_t *hdr)) {
    size_t   n = 0;
    char    *p = t_read_file(path, &n), *h = NULL;
    uint64_t hl  = 0;
    int      rc  = -1;
    json_t  *hdr = NULL;
    for (int i = 0; p && n >= 8 && i < 8; i++)
        hl |= (uint64_t)(unsigned char)p[i] << (8 * i);
    if (!p || n < 8 || hl > n - 8 || !(hdr = json_loadb(p + 8, (size_t)hl, 0, NULL)) || edit(hdr) != 0 ||
        !(h = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS)))
        goto done;
    size_t        len = strlen(h), pad = (8 - len % 8) % 8;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)((len + pad) >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (!f)
        goto done;
    int ok = fwrite(lb, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fwrite(p + 8 + hl, 1, n - 8 - hl, f) == n - 8 - hl;
    rc = fclose(f) == 0 && ok ? 0 : -1;
done:
    json_decref(hdr);
    free(h);
    free(p);
    return rc;
}
