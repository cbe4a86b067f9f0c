/* st-write.c: streaming safetensors writer (API and format in st-write.h).
 *
 * DESIGN
 * The header is built as a jansson object while tensors are declared (which also catches
 * duplicate names); data offsets are assigned in declaration order, so the caller decides the
 * physical layout (e.g. the six tensors of one expert back to back) independently of the
 * header's key order (sorted, as the reference writer does). stw_write() only counts bytes
 * against the declared total; it never needs to know where one tensor ends.
 */
#include "st-write.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct stw_file {
    char    *path;
    FILE    *f;         /* open between stw_begin and stw_end     */
    json_t  *hdr;       /* name -> {dtype, shape}; offsets at begin */
    json_t  *meta;      /* "__metadata__" object                  */
    json_t  *order;     /* array of names in declaration order    */
    uint64_t data;      /* declared data bytes                    */
    uint64_t written;   /* data bytes written so far              */
    uint64_t hdr_bytes; /* 8 + padded header length               */
};

k3_status stw_create(const char *path, stw_file **out) {
    *out        = NULL;
    stw_file *w = k3_calloc(1, sizeof *w);
    if (!w)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    w->path  = k3_strdup(path);
    w->hdr   = json_object();
    w->meta  = json_object();
    w->order = json_array();
    if (!w->path || !w->hdr || !w->meta || !w->order ||
        json_object_set_new(w->meta, "format", json_string("pt"))) {
        stw_free(w);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    }
    *out = w;
    return K3_OK;
}

k3_status stw_add(stw_file *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape) {
    K3_ASSERT(!w->f && (unsigned)dtype < ST_DTYPE_COUNT);
    if (!name[0] || !strcmp(name, "__metadata__"))
        return k3_err(K3_ERR_ARG, "%s: tensor name '%s' is not allowed", w->path, name);
    if (json_object_get(w->hdr, name))
        return k3_err(K3_ERR_ARG, "%s: tensor '%s' declared twice", w->path, name);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return k3_err(K3_ERR_ARG, "%s: tensor '%s': %d dims, expected 0..%d", w->path, name, ndim,
                      ST_MAX_DIMS);
    uint64_t n  = st_dtype_size(dtype);
    json_t  *sh = json_array(), *t = json_object();
    if (!sh || !t)
        goto nomem;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && n > UINT64_MAX / (uint64_t)shape[i])) {
            json_decref(sh);
            json_decref(t);
            return k3_err(K3_ERR_ARG, "%s: tensor '%s': bad dimension %lld", w->path, name,
                          (long long)shape[i]);
        }
        n *= (uint64_t)shape[i];
        if (json_array_append_new(sh, json_integer(shape[i])))
            goto nomem;
    }
    if (json_object_set_new(t, "dtype", json_string(st_dtype_name(dtype))) ||
        json_object_set_new(t, "shape", sh) || json_object_set_new(t, "data_offsets", json_array()) ||
        json_object_set_new(t, "_n", json_integer((json_int_t)n)))
        goto nomem_t;
    if (json_object_set_new(w->hdr, name, t) || json_array_append_new(w->order, json_string(name)))
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    w->data += n;
    return K3_OK;
nomem:
    json_decref(sh);
nomem_t:
    json_decref(t);
    return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
}

k3_status stw_meta(stw_file *w, const char *key, const char *value) {
    K3_ASSERT(!w->f);
    if (json_object_set_new(w->meta, key, json_string(value)))
        return k3_err(K3_ERR_ARG, "%s: metadata '%s' is not valid UTF-8", w->path, key);
    return K3_OK;
}

k3_status stw_header(stw_file *w, size_t align, char **out, size_t *len) {
    K3_ASSERT(!w->f && align >= 8 && align % 8 == 0 && !w->hdr_bytes);
    *out = NULL;
    *len = 0;
    /* assign offsets in declaration order */
    uint64_t off = 0;
    size_t   i;
    json_t  *nm;
    json_array_foreach(w->order, i, nm) {
        json_t  *t = json_object_get(w->hdr, json_string_value(nm));
        uint64_t n = (uint64_t)json_integer_value(json_object_get(t, "_n"));
        json_t  *o = json_object_get(t, "data_offsets");
        if (json_array_append_new(o, json_integer((json_int_t)off)) ||
            json_array_append_new(o, json_integer((json_int_t)(off + n))))
            return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
        json_object_del(t, "_n");
        off += n;
    }
    if (json_object_set(w->hdr, "__metadata__", w->meta))
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    char *js = json_dumps(w->hdr, JSON_COMPACT | JSON_SORT_KEYS);
    if (!js)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    size_t jl = strlen(js), hl = jl + (align - (8 + jl) % align) % align; /* spaces: data aligned */
    char  *h = malloc(8 + hl);
    if (!h) {
        free(js);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    }
    for (int b = 0; b < 8; b++)
        h[b] = (char)(unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(h + 8, js, jl);
    memset(h + 8 + jl, ' ', hl - jl);
    free(js);
    w->hdr_bytes = 8 + hl;
    *out         = h;
    *len         = 8 + hl;
    return K3_OK;
}

k3_status stw_begin(stw_file *w) {
    K3_ASSERT(!w->f);
    char     *h;
    size_t    n;
    k3_status st = stw_header(w, 8, &h, &n);
    if (st)
        return st;
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        free(h);
        return k3_err(K3_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    int ok = fwrite(h, 1, n, w->f) == n;
    free(h);
    if (!ok)
        return k3_err(K3_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return K3_OK;
}

k3_status stw_write(stw_file *w, const void *data, size_t n) {
    K3_ASSERT(w->f);
    if (n > w->data - w->written)
        return k3_err(K3_ERR_ARG, "%s: %zu bytes written past the declared %llu data bytes", w->path,
                      n - (size_t)(w->data - w->written), (unsigned long long)w->data);
    if (fwrite(data, 1, n, w->f) != n)
        return k3_err(K3_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += n;
    return K3_OK;
}

k3_status stw_skip(stw_file *w, uint64_t n) {
    K3_ASSERT(w->f);
    if (n > w->data - w->written)
        return k3_err(K3_ERR_ARG, "%s: %llu bytes skipped past the declared %llu data bytes", w->path,
                      (unsigned long long)(n - (w->data - w->written)), (unsigned long long)w->data);
    if (fflush(w->f) != 0 || fseeko(w->f, (off_t)n, SEEK_CUR) != 0)
        return k3_err(K3_ERR_IO, "%s: seek failed: %s", w->path, strerror(errno));
    w->written += n;
    return K3_OK;
}

k3_status stw_end(stw_file *w) {
    K3_ASSERT(w->f);
    FILE *f = w->f;
    w->f    = NULL;
    if (w->written != w->data) {
        fclose(f);
        return k3_err(K3_ERR_ARG, "%s: %llu of %llu data bytes written", w->path,
                      (unsigned long long)w->written, (unsigned long long)w->data);
    }
    int bad = fflush(f) != 0 || ferror(f);
    /* the exact length: holes left by stw_skip at the end are not written */
    if (!bad && ftruncate(fileno(f), (off_t)(w->hdr_bytes + w->data)) != 0)
        bad = 1;
    if (fclose(f) != 0)
        bad = 1;
    if (bad)
        return k3_err(K3_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return K3_OK;
}

void stw_free(stw_file *w) {
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    json_decref(w->hdr);
    json_decref(w->meta);
    json_decref(w->order);
    free(w->path);
    free(w);
}

uint64_t stw_data_bytes(const stw_file *w) {
    return w->data;
}

uint64_t stw_file_bytes(const stw_file *w) {
    return w->hdr_bytes + w->data;
}
