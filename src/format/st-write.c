/* st-write.c: streaming safetensors writer (API and format in st-write.h).
 *
 * DESIGN
 * Tensors are declared into a table (name, dtype, shape, bytes) with a hash of the names that
 * catches duplicates; data offsets are assigned in declaration order, so the caller decides the
 * physical layout (e.g. the six tensors of one expert back to back) independently of the
 * header's key order (sorted, as the reference writer does). The header is written as text
 * directly, byte for byte what jansson's json_dumps(JSON_COMPACT | JSON_SORT_KEYS) made of the
 * same object before (keys sorted by strcmp, the same string escapes but for a control byte's
 * \u00xx, in small letters here): building and freeing a jansson tree of the release's 497,052
 * tensors cost k3-mkmodel most of its 10 s of CPU.
 * stw_write() only counts bytes against the declared total; it never needs to know where one
 * tensor ends.
 */
#include "st-write.h"

#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct stw_ent {
    char    *name;
    st_dtype dtype;
    int      ndim;
    int64_t  shape[ST_MAX_DIMS];
    uint64_t n; /* bytes */
} stw_ent;

struct stw_file {
    char    *path;
    FILE    *f;   /* open between stw_begin and stw_end     */
    stw_ent *ent; /* (n_ent) in declaration order            */
    size_t   n_ent, cap_ent;
    k3_names names; /* the entries' names (k3_names: the duplicate check) */
    char   **meta;  /* (n_meta) key, value, key, value, ...    */
    size_t   n_meta, cap_meta;
    uint64_t data;      /* declared data bytes                    */
    uint64_t written;   /* data bytes written so far              */
    uint64_t hdr_bytes; /* 8 + padded header length               */
};

static const char *ent_name(const void *w, size_t i) {
    return ((const stw_file *)w)->ent[i].name;
}

/* What jansson accepts as a string: valid UTF-8. */
static int utf8_ok(const char *s) {
    return k3_utf8_repair(s, strlen(s), NULL, NULL) == 0;
}

k3_status stw_create(const char *path, stw_file **out) {
    *out        = NULL;
    stw_file *w = k3_calloc(1, sizeof *w);
    if (!w)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    w->path          = k3_strdup(path);
    w->names.name_of = ent_name;
    w->names.ctx     = w;
    if (!w->path || stw_meta(w, "format", "pt")) {
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
    if (!utf8_ok(name))
        return k3_err(K3_ERR_ARG, "%s: tensor name '%s' is not valid UTF-8", w->path, name);
    if (k3_names_find(&w->names, name) >= 0)
        return k3_err(K3_ERR_ARG, "%s: tensor '%s' declared twice", w->path, name);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return k3_err(K3_ERR_ARG, "%s: tensor '%s': %d dims, expected 0..%d", w->path, name, ndim,
                      ST_MAX_DIMS);
    stw_ent e = {.dtype = dtype, .ndim = ndim, .n = st_dtype_size(dtype)};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && e.n > UINT64_MAX / (uint64_t)shape[i]))
            return k3_err(K3_ERR_ARG, "%s: tensor '%s': bad dimension %lld", w->path, name,
                          (long long)shape[i]);
        e.n *= (uint64_t)shape[i];
        e.shape[i] = shape[i];
    }
    stw_ent *ne = k3_grow_z(w->ent, &w->cap_ent, w->n_ent + 1, sizeof *ne, 256);
    if (!ne)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    w->ent = ne;
    if (!(e.name = k3_strdup(name)))
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    w->ent[w->n_ent++] = e;
    if (k3_names_add(&w->names, w->n_ent - 1, NULL)) { /* not there: checked above */
        free(w->ent[--w->n_ent].name);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->data += e.n;
    return K3_OK;
}

k3_status stw_meta(stw_file *w, const char *key, const char *value) {
    K3_ASSERT(!w->f);
    if (!utf8_ok(key) || !utf8_ok(value))
        return k3_err(K3_ERR_ARG, "%s: metadata '%s' is not valid UTF-8", w->path, key);
    char *v = k3_strdup(value);
    if (!v)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    for (size_t i = 0; i < w->n_meta; i += 2)
        if (!strcmp(w->meta[i], key)) { /* a key given again: its last value */
            free(w->meta[i + 1]);
            w->meta[i + 1] = v;
            return K3_OK;
        }
    char  *k  = k3_strdup(key);
    char **nm = k ? k3_grow_z(w->meta, &w->cap_meta, w->n_meta + 2, sizeof *nm, 16) : NULL;
    if (!nm) {
        free(k);
        free(v);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta            = nm;
    w->meta[w->n_meta] = k, w->meta[w->n_meta + 1] = v;
    w->n_meta += 2;
    return K3_OK;
}

/* ---- the header's text (k3_buf: an append that runs out of memory sets oom) ---- */

static void put(k3_buf *b, const char *s, size_t n) {
    (void)k3_buf_add(b, s, n);
}

static void put_u(k3_buf *b, long long v) {
    char t[24];
    put(b, t, (size_t)snprintf(t, sizeof t, "%lld", v));
}

/* A JSON string: jv_escape's escapes ('"', '\\', the control bytes; jansson wrote the same but
 * \u00XX in capitals, which no tensor name has), UTF-8 as it is. */
static void put_str(k3_buf *b, const char *s) {
    put(b, "\"", 1);
    if (jv_escape(s, strlen(s), b))
        b->oom = 1;
    put(b, "\"", 1);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

k3_status stw_header(stw_file *w, size_t align, char **out, size_t *len) {
    K3_ASSERT(!w->f && align >= 8 && align % 8 == 0 && !w->hdr_bytes);
    *out = NULL;
    *len = 0;
    /* offsets in declaration order; keys in strcmp order, "__metadata__" among them */
    uint64_t    *off  = malloc((w->n_ent + 1) * sizeof *off);
    const char **keys = malloc((w->n_ent + 1) * sizeof *keys);
    const char **mk   = malloc((w->n_meta / 2 + 1) * sizeof *mk);
    k3_buf       b    = {0};
    if (!off || !keys || !mk)
        b.oom = 1;
    for (size_t i = 0, o = 0; !b.oom && i < w->n_ent; o += w->ent[i].n, i++)
        off[i] = o, keys[i] = w->ent[i].name;
    if (!b.oom) {
        keys[w->n_ent] = "__metadata__";
        qsort(keys, w->n_ent + 1, sizeof *keys, cmp_str);
        for (size_t i = 0; i < w->n_meta / 2; i++)
            mk[i] = w->meta[2 * i];
        qsort(mk, w->n_meta / 2, sizeof *mk, cmp_str);
    }
    put(&b, "{", 1);
    for (size_t k = 0; !b.oom && k <= w->n_ent; k++) {
        if (k)
            put(&b, ",", 1);
        put_str(&b, keys[k]);
        put(&b, ":{", 2);
        if (!strcmp(keys[k], "__metadata__")) {
            for (size_t i = 0; i < w->n_meta / 2; i++) {
                size_t j = 0;
                while (strcmp(w->meta[j], mk[i]))
                    j += 2;
                if (i)
                    put(&b, ",", 1);
                put_str(&b, mk[i]);
                put(&b, ":", 1);
                put_str(&b, w->meta[j + 1]);
            }
        } else {
            size_t         e = (size_t)k3_names_find(&w->names, keys[k]);
            const stw_ent *t = &w->ent[e];
            put(&b, "\"data_offsets\":[", 16);
            put_u(&b, (long long)off[e]);
            put(&b, ",", 1);
            put_u(&b, (long long)(off[e] + t->n));
            put(&b, "],\"dtype\":", 10);
            put_str(&b, st_dtype_name(t->dtype));
            put(&b, ",\"shape\":[", 10);
            for (int d = 0; d < t->ndim; d++) {
                if (d)
                    put(&b, ",", 1);
                put_u(&b, (long long)t->shape[d]);
            }
            put(&b, "]", 1);
        }
        put(&b, "}", 1);
    }
    put(&b, "}", 1);
    free(off);
    free(keys);
    free(mk);
    size_t jl = b.n, hl = jl + (align - (8 + jl) % align) % align; /* spaces: data aligned */
    char  *h = b.oom ? NULL : malloc(8 + hl);
    if (!h) {
        free(b.p);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", w->path);
    }
    for (int i = 0; i < 8; i++)
        h[i] = (char)(unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(h + 8, b.p, jl);
    memset(h + 8 + jl, ' ', hl - jl);
    free(b.p);
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
    for (size_t i = 0; i < w->n_ent; i++)
        free(w->ent[i].name);
    for (size_t i = 0; i < w->n_meta; i++)
        free(w->meta[i]);
    free(w->ent);
    k3_names_free(&w->names);
    free(w->meta);
    free(w->path);
    free(w);
}

uint64_t stw_data_bytes(const stw_file *w) {
    return w->data;
}

uint64_t stw_file_bytes(const stw_file *w) {
    return w->hdr_bytes + w->data;
}
