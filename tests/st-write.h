/* st-write.h: tiny safetensors writer for tests (header built with jansson, data from blobs or
 * zeros). Not a general tool: tests/test-st.c and tests/test-config.c build checkpoints with it,
 * then corrupt them on purpose.
 *
 *     stw w; stw_init(&w);
 *     stw_add(&w, "a", "F32", 2, (int64_t[]){2, 3}, data);   // data may be NULL (zeros)
 *     stw_write(&w, "/tmp/x/model.safetensors");            // frees w
 */
#pragma once
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STW_MAX_BLOBS 64

typedef struct stw {
    json_t  *hdr;
    uint64_t off;                      /* data section size so far */
    int      nb;
    struct { uint64_t off, n; const void *p; } blobs[STW_MAX_BLOBS];
} stw;

static inline void stw_init(stw *w) {
    memset(w, 0, sizeof *w);
    w->hdr = json_object();
}

static inline size_t stw_dsize(const char *dt) {
    if (!strcmp(dt, "F64") || !strcmp(dt, "I64")) return 8;
    if (!strcmp(dt, "F32") || !strcmp(dt, "I32")) return 4;
    if (!strcmp(dt, "F16") || !strcmp(dt, "BF16") || !strcmp(dt, "I16")) return 2;
    return 1;
}

/* Add an entry with explicit offsets (for corrupt headers). */
static inline void stw_add_raw(stw *w, const char *name, const char *dt, int nd, const int64_t *shape,
                               uint64_t begin, uint64_t end) {
    json_t *e = json_object(), *s = json_array();
    for (int i = 0; i < nd; i++) json_array_append_new(s, json_integer(shape[i]));
    json_object_set_new(e, "dtype", json_string(dt));
    json_object_set_new(e, "shape", s);
    json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)begin, (json_int_t)end));
    json_object_set_new(w->hdr, name, e);
    if (end > w->off) w->off = end;
}

/* Append a tensor after the previous ones; data (nbytes of it) may be NULL for zeros. */
static inline void stw_add(stw *w, const char *name, const char *dt, int nd, const int64_t *shape,
                           const void *data) {
    uint64_t n = stw_dsize(dt);
    for (int i = 0; i < nd; i++) n *= (uint64_t)shape[i];
    uint64_t b = w->off;
    stw_add_raw(w, name, dt, nd, shape, b, b + n);
    if (data && w->nb < STW_MAX_BLOBS) {
        w->blobs[w->nb].off = b;
        w->blobs[w->nb].n = n;
        w->blobs[w->nb].p = data;
        w->nb++;
    }
}

/* Write the file (header padded with spaces to 8 bytes) and free w. Returns 0 on success. */
static inline int stw_write(stw *w, const char *path) {
    char *h = json_dumps(w->hdr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(w->hdr);
    w->hdr = NULL;
    if (!h) return -1;
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8;
    FILE  *f = fopen(path, "wb");
    if (!f) { free(h); return -1; }
    uint64_t      n = hl + pad;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(n >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(h, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    free(h);
    /* data: zeros, then blobs at their offsets */
    long base = ftell(f);
    if (w->off && (fseek(f, base + (long)w->off - 1, SEEK_SET) || fputc(0, f) == EOF)) { fclose(f); return -1; }
    for (int i = 0; i < w->nb; i++) {
        fseek(f, base + (long)w->blobs[i].off, SEEK_SET);
        fwrite(w->blobs[i].p, 1, w->blobs[i].n, f);
    }
    return fclose(f) ? -1 : 0;
}

/* Write an arbitrary file (corrupt headers). */
static inline int stw_write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) || w != n ? -1 : 0;
}
