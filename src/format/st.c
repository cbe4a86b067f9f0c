/* st.c: safetensors model directory reader (API in st.h).
 *
 * DESIGN
 * A safetensors file is: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data section; offsets are relative to the data section.
 *
 * st_open() decides from model.safetensors.index.json (weight_map: name -> shard file) which
 * shards hold at least one text tensor. Shards whose every entry is vision_tower.* or
 * mm_projector.* are recorded but never opened or stat'ed (fd -1, size 0), so a missing or
 * unreadable vision shard does not matter. Every other shard is opened read-only and its whole
 * header is validated before any tensor is recorded: header length within the file, JSON well
 * formed (no duplicate keys), known dtype, product(shape) * dtype size == end - begin (with
 * overflow checks), every range inside the data section, no two ranges overlapping (checked
 * after sorting by begin). Tensors the index places in a shard must be in that shard's header;
 * a name in two shards is an error. A header is read by wmap.c's scanner, with no tree (jansson
 * parses it again only where the scanner stops: an error, or a form it leaves to jansson). An
 * entry the index does not name is checked as any other but not recorded: a header padded with a
 * million such entries costs its scan, not a tensor each.
 *
 * Text tensors are kept sorted by name (without the optional "language_model." prefix) for
 * bsearch; vision tensors that happen to share a shard with text tensors are validated but not
 * recorded. Reads are positioned (pread, looping on short reads and EINTR) so any thread may read
 * any tensor concurrently; a read that hits end of file names the file and the offset. A sparse
 * shard (a replica) has its holes filled with zeros by the reader, not read (read_sparse).
 * st_read_block reads a big tensor with O_DIRECT into a block of its own (the 4096-aligned span
 * around it): a buffered read of a container's 4 GB cost more CPU than anything else in the open
 * (the page cache copy and a page fault per 4 KB, expensive in a VM: 200 MB/s of CPU, against
 * 5 GB/s with O_DIRECT). Reads of tensor data are counted (st_io_get): calls, bytes, O_DIRECT.
 *
 * K3_DIRS (a checkpoint split over drives): a colon-separated list of directories; a shard
 * file that is not in the model directory is taken from the first of them that holds it.
 */
#include "st.h"
#include "wmap.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER ((uint64_t)100000000) /* 100 MB; the release's shard headers are under 1 MB */

typedef struct st_shard {
    char             *path;   /* full path                                   */
    char             *name;   /* file name as in the index                   */
    uint64_t          size;   /* file size (0 if never opened)               */
    uint64_t          hlen;   /* header length (shard_check)                 */
    int               fd;     /* -1 if never opened (vision-only)            */
    int               dfd;    /* O_DIRECT descriptor (st_read_block): -1 not yet opened, -2 refused */
    int               text;   /* holds at least one text tensor              */
    int               sparse; /* fewer blocks on disk than its size: holes (read_sparse) */
    void             *map;    /* st_map(): whole-file read-only map, or NULL */
    uint64_t          hsum;   /* FNV-1a of the header (shard_check): st_map_repair's same-file test */
    struct st_mapreg *reg;    /* the map's entry for the SIGBUS handler (st_map), or NULL */
} st_shard;

struct st_dir {
    char           *path;
    int             has_prefix;
    int             n_shards, cap_shards;
    st_shard       *shards; /* [n_shards]                                  */
    int             n_tensors;
    int             cap_tensors;
    st_tensor      *tensors; /* [n_tensors], sorted by name after st_open   */
    st_io          *io;      /* -> io_n: tensor data read so far (atomic adds: any thread reads; */
    st_io           io_n;    /*    counted through a const st_dir too)                       */
    pthread_mutex_t map_mu;  /* st_map_repair                                             */
};

static const struct {
    const char *name;
    size_t      size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_F64] = {"F64", 8}, [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};

size_t st_dtype_size(st_dtype t) {
    K3_ASSERT((unsigned)t < ST_DTYPE_COUNT);
    return dtypes[t].size;
}

const char *st_dtype_name(st_dtype t) {
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

static int dtype_parse(const char *s) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(s, dtypes[i].name))
            return i;
    return -1;
}

static const char *strip_prefix(const char *name) {
    return strncmp(name, ST_PREFIX, ST_PREFIX_LEN) ? name : name + ST_PREFIX_LEN;
}

static int is_vision(const char *name) {
    name = strip_prefix(name);
    return !strncmp(name, "vision_tower.", 13) || !strncmp(name, "mm_projector.", 13);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char  *p = k3_malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* ---- positioned reads ------------------------------------------------------------------- */

/* A read of tensor data: counted in io (NULL: headers and the index, not counted). */
static void io_count(st_io *io, uint64_t bytes, int direct) {
    if (!io)
        return;
    __atomic_add_fetch(&io->calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&io->bytes, bytes, __ATOMIC_RELAXED);
    if (direct)
        __atomic_add_fetch(&io->direct_bytes, bytes, __ATOMIC_RELAXED);
}

/* Read at least `need` bytes at off into dst, asking for up to n >= need (an O_DIRECT span is
 * whole 4096-byte blocks and may run past the end of the file). On error the message names the
 * file (by base name) and offset. Each read call of tensor data is counted in io (NULL: not
 * counted). DIRECT (fd opened with O_DIRECT): its bytes are counted as such, and EINVAL on the
 * first call (the filesystem refuses the alignment) is K3_ERR_UNSUPPORTED, with no message. */
static k3_status pread_span(int fd, const char *path, void *dst, uint64_t n, uint64_t need, uint64_t off,
                            st_io *io, int direct) {
    unsigned char *p    = dst;
    uint64_t       done = 0;
    while (done < need) {
        size_t  want = (size_t)(n - done > (1u << 30) ? (1u << 30) : n - done);
        ssize_t r    = pread(fd, p + done, want, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EINVAL && direct && done == 0)
            return K3_ERR_UNSUPPORTED;
        io_count(io, r > 0 ? (uint64_t)r : 0, direct);
        if (r < 0)
            return k3_err(K3_ERR_IO, "%s: read of %llu bytes at offset %llu failed: %s", base_name(path),
                          (unsigned long long)(need - done), (unsigned long long)(off + done),
                          strerror(errno));
        if (r == 0)
            return k3_err(
                K3_ERR_IO,
                "%s: unexpected end of file at offset %llu (wanted %llu more bytes; file truncated?)",
                base_name(path), (unsigned long long)(off + done), (unsigned long long)(need - done));
        done += (uint64_t)r;
    }
    return K3_OK;
}

/* Read exactly n bytes at off (pread_span through the page cache). */
static k3_status pread_all(int fd, const char *path, void *dst, uint64_t n, uint64_t off, st_io *io) {
    return pread_span(fd, path, dst, n, n, off, io, 0);
}

/* ---- header parsing ---------------------------------------------------------------------- */

typedef struct hdr_entry {
    const char *name; /* points into the header's text or jansson's tree (valid while load_shard runs) */
    uint64_t    begin, end;
} hdr_entry;

static int cmp_entry_begin(const void *a, const void *b) {
    const hdr_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static k3_status add_tensor(st_dir *d, const st_tensor *t) {
    st_tensor *nt = k3_grow(d->tensors, &d->cap_tensors, (size_t)d->n_tensors + 1, sizeof *nt, 256);
    if (!nt)
        return k3_err(K3_ERR_NOMEM, "out of memory for the tensor table");
    d->tensors                 = nt;
    d->tensors[d->n_tensors++] = *t;
    return K3_OK;
}

static int get_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* One tensor entry of a header parsed by jansson into w (w->name set): the form the scanner
 * (wm_scan_header) takes, or the error saying what is not. */
static k3_status entry_from_json(const char *file, json_t *v, wm_tensor *w) {
    const char *name = w->name;
    if (!json_is_object(v))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", file, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': dtype missing or not a string", file, name);
    w->dtype = json_string_value(jd);
    if (!json_is_array(js))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': shape missing or not an array", file, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d supported)", file, name, nd,
                      ST_MAX_DIMS);
    w->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        uint64_t s;
        if (get_u64(json_array_get(js, i), &s))
            return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", file,
                          name, i);
        w->shape[i] = (int64_t)s;
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || get_u64(json_array_get(jo, 0), &w->begin) ||
        get_u64(json_array_get(jo, 1), &w->end))
        return k3_err(K3_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets is not [begin, end] (non-negative integers)", file,
                      name);
    return K3_OK;
}

/* Check one tensor entry of a header (read by either reader) against the data section: a known
 * dtype, shape times dtype size equal to the range, the range inside the data section. Fills t
 * (name not set) and its range e. */
static k3_status entry_check(const char *file, const wm_tensor *w, uint64_t data_size, st_tensor *t,
                             hdr_entry *e) {
    const char *name = w->name;
    int         dt   = dtype_parse(w->dtype);
    if (dt < 0)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", file, name, w->dtype);
    memset(t, 0, sizeof *t);
    t->dtype          = (st_dtype)dt;
    t->ndim           = w->ndim;
    uint64_t numel    = 1;
    int      overflow = 0;
    for (int i = 0; i < w->ndim; i++) {
        uint64_t s  = (uint64_t)w->shape[i];
        t->shape[i] = w->shape[i];
        if (s && numel > UINT64_MAX / s)
            overflow = 1;
        numel *= s;
    }
    size_t es = dtypes[dt].size;
    if (numel && numel > UINT64_MAX / es)
        overflow = 1;
    uint64_t want = numel * es;
    e->begin = w->begin, e->end = w->end;
    if (e->end < e->begin)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", file,
                      name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (overflow || want != e->end - e->begin)
        return k3_err(
            K3_ERR_FORMAT,
            "%s: tensor '%s': shape and dtype %s need %s%llu bytes but data_offsets [%llu, %llu] hold %llu",
            file, name, dtypes[dt].name, overflow ? "more than " : "",
            (unsigned long long)(overflow ? UINT64_MAX : want), (unsigned long long)e->begin,
            (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    if (e->end > data_size)
        return k3_err(K3_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%llu, %llu] beyond the data section (%llu bytes; file "
                      "truncated?)",
                      file, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                      (unsigned long long)data_size);
    t->nbytes = want;
    e->name   = name;
    return K3_OK;
}

/* Open shard si, validate its whole header, record its text tensors. */
/* The largest data_offsets end in header text h (n bytes), found without parsing the JSON, and
 * the name of its tensor (the key before the enclosing '{'; "?" when it cannot be told) into
 * name; 0 when none. A quick bound for shard_check; load_shard's full parse checks every entry. */
static uint64_t header_data_end(const char *h, size_t n, char *name, size_t nn) {
    static const char key[] = "\"data_offsets\"";
    uint64_t          best  = 0;
    snprintf(name, nn, "?");
    for (const char *p = h, *e = h + n; (p = memmem(p, (size_t)(e - p), key, sizeof key - 1));) {
        const char *at = p;
        p += sizeof key - 1;
        const char *q = memchr(p, ']', (size_t)(e - p));
        if (!q)
            break;
        const char *c = memchr(p, ',', (size_t)(q - p)); /* [begin, end]: the number after the comma */
        uint64_t    v = 0;
        if (c) {
            for (c++; c < q && (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r'); c++) {
            }
            for (; c < q && *c >= '0' && *c <= '9' && v < UINT64_MAX / 10; c++)
                v = v * 10 + (uint64_t)(*c - '0');
        }
        if (v > best) {
            best          = v;
            const char *b = at; /* back to the object's '{', then its key: "NAME" : { */
            while (b > h && *b != '{')
                b--;
            if (b > h) { /* a '{' at the header's first byte has no key before it */
                for (b--; b > h && (*b == ' ' || *b == ':' || *b == '\n' || *b == '\t' || *b == '\r'); b--) {
                }
                const char *ke = b, *ks = b > h ? b - 1 : h;
                while (ks > h && *ks != '"')
                    ks--;
                if (*ke == '"' && *ks == '"' && ke > ks)
                    snprintf(name, nn, "%.*s", (int)(ke - ks - 1), ks + 1);
            }
        }
        p = q;
    }
    return best;
}

/* Open shard si and check what costs no JSON parse: a regular file, the header length within the
 * file and under ST_MAX_HEADER, and no tensor's data past the end of the file. st_open runs it on
 * every shard before parsing any header, so a missing, truncated or absurd shard is reported at
 * once, whichever it is of the 96. */
static k3_status shard_check(st_dir *d, int si) {
    st_shard   *sh   = &d->shards[si];
    const char *file = sh->name;
    k3_status   st;
    struct stat sb;
    if ((st = k3_open_regular(sh->path, file, &sh->fd, &sh->size, NULL))) {
        const char *dirs = k3_setting_env_str(K3_SETTING_DIRS); /* searched too: say so (it named one path) */
        if (dirs && stat(sh->path, &sb) != 0 && errno == ENOENT)
            return k3_err(K3_ERR_IO, "%s: not in %s nor in any directory of K3_DIRS=%s", file, d->path, dirs);
        return st;
    }
    sh->sparse = fstat(sh->fd, &sb) == 0 && (uint64_t)sb.st_blocks * 512 < sh->size;
    if (sh->size < 8)
        return k3_err(K3_ERR_FORMAT, "%s: %llu bytes, too short for the 8-byte header length", file,
                      (unsigned long long)sh->size);
    unsigned char lb[8];
    if ((st = pread_all(sh->fd, sh->path, lb, 8, 0, NULL)))
        return st;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lb[i];
    if (hlen > sh->size - 8)
        return k3_err(K3_ERR_FORMAT,
                      "%s: header length %llu beyond the file (%llu bytes after the length field)", file,
                      (unsigned long long)hlen, (unsigned long long)(sh->size - 8));
    if (hlen > ST_MAX_HEADER)
        return k3_err(K3_ERR_FORMAT,
                      "%s: header length %llu at offset 0 is implausibly large (limit %llu bytes; the "
                      "release's shard headers are under 1 MB)",
                      file, (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    sh->hlen   = hlen;
    char *hbuf = k3_malloc((size_t)hlen + 1);
    if (!hbuf)
        return k3_err(K3_ERR_NOMEM, "%s: no memory for a %llu-byte header", file, (unsigned long long)hlen);
    st = pread_all(sh->fd, sh->path, hbuf, hlen, 8, NULL);
    char     tname[256];
    uint64_t end = st ? 0 : header_data_end(hbuf, (size_t)hlen, tname, sizeof tname);
    sh->hsum     = k3_fnv1a(hbuf, (size_t)hlen);
    free(hbuf);
    if (!st && end > sh->size - 8 - hlen)
        st = k3_err(K3_ERR_FORMAT,
                    "%s: tensor '%s': its data ends at byte %llu of the file, but the file has %llu bytes "
                    "(file truncated?)",
                    file, tname, (unsigned long long)(8 + hlen + end), (unsigned long long)sh->size);
    return st;
}

/* A shard's header being loaded: where its entries go (take_entry). */
typedef struct shard_load {
    st_dir         *d;
    int             si;
    const char     *file;
    uint64_t        data_start, data_size;
    const k3_names *index; /* the index's names (NULL: no index, every entry is a tensor) */
    int            *found; /* [index's items]: 1 + the shard that first held the item, or 0 */
    size_t          n_found;
    hdr_entry      *ents; /* every entry's range (the overlap check) */
    size_t          ne;
    int             cap;
    k3_status       st; /* the first entry's error */
} shard_load;

/* One tensor entry of the header, from either reader, in the header's order: checked, its range
 * kept, and recorded as a tensor unless it is a vision tensor or one the index does not name
 * (such entries are checked, not kept: a header's count is not the checkpoint's). After the
 * first error the rest are skipped (that error is the header's). */
static int take_entry(void *ud, const wm_tensor *w) {
    shard_load *L = ud;
    st_tensor   t;
    hdr_entry   e;
    if (L->st || (L->st = entry_check(L->file, w, L->data_size, &t, &e)))
        return 0;
    hdr_entry *n = k3_grow(L->ents, &L->cap, L->ne + 1, sizeof *n, 256);
    if (!n) {
        L->st = k3_err(K3_ERR_NOMEM, "%s: out of memory", L->file);
        return 0;
    }
    L->ents          = n;
    L->ents[L->ne++] = e;
    long item        = L->index ? k3_names_find(L->index, strip_prefix(w->name)) : -1;
    if (is_vision(w->name) || (L->index && item < 0))
        return 0;
    if (item >= 0 && !L->found[item])
        L->found[item] = L->si + 1;
    if (!(t.name = k3_strdup(strip_prefix(w->name)))) {
        L->st = k3_err(K3_ERR_NOMEM, "%s: out of memory", L->file);
        return 0;
    }
    if (strip_prefix(w->name) != w->name)
        L->d->has_prefix = 1;
    t.shard  = L->si;
    t.offset = L->data_start + e.begin;
    if ((L->st = add_tensor(L->d, &t)))
        free((void *)(uintptr_t)t.name);
    return 0;
}

/* Parse and validate the header of shard si (shard_check ran) and record its text tensors (those
 * the index names, when there is one: index). The scanner of wmap.h reads it without a tree; what
 * it leaves (or stops at) jansson parses again from the file, with the same checks after. */
static k3_status load_shard(st_dir *d, int si, const k3_names *index, int *found, size_t n_found) {
    st_shard   *sh   = &d->shards[si];
    const char *file = sh->name;
    k3_status   st   = K3_OK;
    char       *hbuf = NULL;
    json_t     *root = NULL;
    uint64_t    hlen = sh->hlen;
    int         mark = d->n_tensors;
    shard_load  L    = {.d          = d,
                        .si         = si,
                        .file       = file,
                        .data_start = 8 + hlen,
                        .data_size  = sh->size - 8 - hlen,
                        .index      = index,
                        .found      = found,
                        .n_found    = n_found};
    size_t      at;
    hbuf = k3_malloc((size_t)hlen + 1);
    if (!hbuf) {
        st = k3_err(K3_ERR_NOMEM, "%s: no memory for a %llu-byte header", file, (unsigned long long)hlen);
        goto fail;
    }
    if ((st = pread_all(sh->fd, sh->path, hbuf, hlen, 8, NULL)))
        goto fail;
    if (!wm_scan_header(hbuf, (size_t)hlen, take_entry, &L, &at)) {
        st = L.st;
    } else { /* jansson decides, on the text read again (the scanner decoded it in place) */
        K3_LOG_DEBUG("%s: the fast reader stopped at byte %zu; full parse", file, at);
        for (int i = mark; i < d->n_tensors; i++)
            free((void *)(uintptr_t)d->tensors[i].name);
        d->n_tensors = mark;
        for (size_t i = 0; i < n_found; i++)
            if (found[i] == si + 1)
                found[i] = 0;
        L.ne = 0;
        L.st = K3_OK;
        if ((st = pread_all(sh->fd, sh->path, hbuf, hlen, 8, NULL)))
            goto fail;
        json_error_t jerr;
        root = json_loadb(hbuf, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
            st = k3_err(K3_ERR_FORMAT, "%s: header JSON malformed at byte %d: %s", file, jerr.position,
                        jerr.text);
            goto fail;
        }
        if (!json_is_object(root)) {
            st = k3_err(K3_ERR_FORMAT, "%s: header JSON is not an object", file);
            goto fail;
        }
        const char *key;
        json_t     *val;
        json_object_foreach(root, key, val) {
            wm_tensor w = {.name = key};
            if (strcmp(key, "__metadata__") && !L.st && !(L.st = entry_from_json(file, val, &w)))
                take_entry(&L, &w);
        }
        st = L.st;
    }
    if (st)
        goto fail;
    if (L.ne > 1) /* a header of no tensors has no entries, and qsort a NULL base: undefined */
        qsort(L.ents, L.ne, sizeof *L.ents, cmp_entry_begin);
    for (size_t i = 1; i < L.ne; i++)
        if (L.ents[i].begin < L.ents[i - 1].end) {
            const hdr_entry *a = &L.ents[i - 1], *b = &L.ents[i];
            st = k3_err(K3_ERR_FORMAT,
                        "%s: tensor '%s' data [%llu, %llu) overlaps tensor '%s' data [%llu, %llu)", file,
                        b->name, (unsigned long long)b->begin, (unsigned long long)b->end, a->name,
                        (unsigned long long)a->begin, (unsigned long long)a->end);
            goto fail;
        }
fail:
    free(L.ents);
    json_decref(root);
    free(hbuf);
    return st;
}

/* ---- directory ------------------------------------------------------------------------- */

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static k3_status add_shard(st_dir *d, const char *name, int *idx) {
    if (d->n_shards && !strcmp(d->shards[d->n_shards - 1].name, name)) { /* the index groups by shard */
        *idx = d->n_shards - 1;
        return K3_OK;
    }
    for (int i = 0; i < d->n_shards; i++)
        if (!strcmp(d->shards[i].name, name)) {
            *idx = i;
            return K3_OK;
        }
    st_shard *ns = k3_grow(d->shards, &d->cap_shards, (size_t)d->n_shards + 1, sizeof *ns, 8);
    if (!ns)
        return k3_err(K3_ERR_NOMEM, "out of memory for the shard list");
    d->shards   = ns;
    st_shard *s = &ns[d->n_shards];
    memset(s, 0, sizeof *s);
    s->fd            = -1;
    s->dfd           = -1;
    s->name          = k3_strdup(name);
    s->path          = path_join(d->path, name);
    const char *dirs = k3_setting_env_str(K3_SETTING_DIRS);
    struct stat sb;
    for (const char *p = dirs; s->path && p && *p && stat(s->path, &sb) != 0;) {
        size_t n   = strcspn(p, ":");
        char  *dir = n ? k3_malloc(n + 1) : NULL;
        if (dir) {
            memcpy(dir, p, n);
            dir[n]    = 0;
            char *alt = path_join(dir, name);
            free(dir);
            if (alt && stat(alt, &sb) == 0) {
                free(s->path);
                s->path = alt;
            } else {
                free(alt);
            }
        }
        p += n + (p[n] == ':');
    }
    if (!s->name || !s->path) {
        free(s->name);
        free(s->path);
        return k3_err(K3_ERR_NOMEM, "out of memory for the shard list");
    }
    *idx = d->n_shards++;
    return K3_OK;
}

static int cmp_shard_name(const void *a, const void *b) {
    return strcmp(((const st_shard *)a)->name, ((const st_shard *)b)->name);
}

/* Read model.safetensors.index.json: the shard list, which shards hold text tensors. The
 * weight_map (*wm, wm_free'd by the caller) is used afterwards to cross-check headers; each
 * entry's file is then its shard's index in d->shards (wm_shard). */
static k3_status read_index(st_dir *d, const char *ipath, wm_map *wm, int **wm_shard) {
    const char *file = base_name(ipath);
    /* one read and the fast weight_map reader (wmap.h): jansson's tree of the release's 60 MB
     * index cost ~2.3 s of CPU before the first check of a shard */
    int       fd;
    uint64_t  fsize;
    k3_status rst = k3_open_regular(ipath, file, &fd, &fsize, NULL);
    if (rst)
        return rst;
    char *buf = k3_malloc((size_t)fsize + 1);
    rst = buf ? pread_all(fd, ipath, buf, fsize, 0, NULL) : k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    size_t at;
    if (!rst && !wm_scan(buf, (size_t)fsize, wm, &at)) {
        wm->arena = buf; /* the entries point into it */
    } else if (!rst) {   /* jansson decides, on the text read again (the scanner decoded it in place) */
        K3_LOG_DEBUG("%s: the fast reader stopped at byte %zu; full parse", file, at);
        if (!(rst = pread_all(fd, ipath, buf, fsize, 0, NULL)))
            rst = wm_parse_full(file, buf, (size_t)fsize, wm);
        free(buf);
    } else {
        free(buf);
    }
    close(fd);
    if (rst)
        return rst;
    if (!(*wm_shard = malloc((wm->n ? wm->n : 1) * sizeof **wm_shard)))
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    for (size_t i = 0; i < wm->n; i++) {
        const char *key = wm->e[i].name, *s = wm->e[i].file;
        if (!*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
            return k3_err(K3_ERR_FORMAT, "%s: weight_map.%s is not a plain shard file name", file, key);
        int       idx;
        k3_status st = add_shard(d, s, &idx);
        if (st)
            return st;
        (*wm_shard)[i] = idx;
        if (!is_vision(key))
            d->shards[idx].text = 1;
    }
    if (d->n_shards == 0)
        return k3_err(K3_ERR_FORMAT, "%s: weight_map names no shard file", file);
    /* sorted by name; the entries' shard numbers follow */
    int *rank = malloc((size_t)d->n_shards * sizeof *rank);
    if (!rank)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    for (int i = 0; i < d->n_shards; i++)
        d->shards[i].fd = i; /* the old position rides along (fd is -1 until load) */
    qsort(d->shards, (size_t)d->n_shards, sizeof *d->shards, cmp_shard_name);
    for (int i = 0; i < d->n_shards; i++) {
        rank[d->shards[i].fd] = i;
        d->shards[i].fd       = -1;
    }
    for (size_t i = 0; i < wm->n; i++)
        (*wm_shard)[i] = rank[(*wm_shard)[i]];
    free(rank);
    return K3_OK;
}

k3_status st_open(const char *dir, st_dir **out) {
    *out            = NULL;
    k3_status st    = K3_OK;
    wm_map    wm    = {0};
    int      *found = NULL; /* [wm.n] (shard_load.found) */
    int      *wms   = NULL; /* [wm.n] each entry's shard */
    char     *ipath = NULL;
    st_dir   *d     = k3_calloc(1, sizeof *d);
    if (!d || !(d->path = k3_strdup(dir))) {
        free(d);
        return k3_err(K3_ERR_NOMEM, "out of memory");
    }
    d->io = &d->io_n;
    pthread_mutex_init(&d->map_mu, NULL);
    ipath = path_join(dir, "model.safetensors.index.json");
    if (!ipath) {
        st = k3_err(K3_ERR_NOMEM, "out of memory");
        goto fail;
    }
    struct stat sb;
    if (stat(ipath, &sb) == 0) {
        if ((st = read_index(d, ipath, &wm, &wms)))
            goto fail;
        if (d->n_shards == 0) {
            st = k3_err(K3_ERR_FORMAT, "model.safetensors.index.json: weight_map is empty");
            goto fail;
        }
    } else {
        char *single = path_join(dir, "model.safetensors");
        int   ok     = single && stat(single, &sb) == 0;
        free(single);
        if (!ok) {
            st = k3_err(K3_ERR_IO, "%s: neither model.safetensors.index.json nor model.safetensors found",
                        dir);
            goto fail;
        }
        int idx;
        if ((st = add_shard(d, "model.safetensors", &idx)))
            goto fail;
        d->shards[idx].text = 1;
    }
    for (int i = 0; i < d->n_shards; i++) /* every shard's size first: no header parsed yet */
        if (d->shards[i].text && (st = shard_check(d, i)))
            goto fail;
    /* the names the index gives (wm.names, made by its duplicate check): the headers' entries kept */
    if (wm.n && !(found = calloc(wm.n, sizeof *found))) {
        st = k3_err(K3_ERR_NOMEM, "model.safetensors.index.json: out of memory");
        goto fail;
    }
    for (int i = 0; i < d->n_shards; i++)
        if (d->shards[i].text && (st = load_shard(d, i, wm.n ? &wm.names : NULL, found, wm.n)))
            goto fail;

    if (d->n_tensors > 1) /* qsort with a NULL base (no text tensor at all) is undefined */
        qsort(d->tensors, (size_t)d->n_tensors, sizeof *d->tensors, cmp_tensor_name);
    for (int i = 1; i < d->n_tensors; i++)
        if (!strcmp(d->tensors[i].name, d->tensors[i - 1].name)) {
            const st_tensor *a = &d->tensors[i - 1], *b = &d->tensors[i];
            st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is also in %s", d->shards[b->shard].name, b->name,
                        d->shards[a->shard].name);
            goto fail;
        }
    for (size_t i = 0; i < wm.n; i++) { /* every text tensor of the index is where the index says */
        const char *key = wm.e[i].name;
        if (is_vision(key))
            continue;
        int at = found[i]; /* 0 also for a name given again with the prefix: its first item's */
        if (!at) {
            long f = k3_names_find(&wm.names, wm.e[i].key);
            at     = f >= 0 ? found[f] : 0;
        }
        if (!at) {
            st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is in the index but not in the shard's header",
                        d->shards[wms[i]].name, key);
            goto fail;
        }
        if (at - 1 != wms[i]) {
            st = k3_err(K3_ERR_FORMAT,
                        "model.safetensors.index.json: tensor '%s' is mapped to %s but stored in %s", key,
                        d->shards[wms[i]].name, d->shards[at - 1].name);
            goto fail;
        }
    }
    free(found);
    wm_free(&wm);
    free(wms);
    free(ipath);
    *out = d;
    return K3_OK;
fail:
    free(found);
    wm_free(&wm);
    free(wms);
    free(ipath);
    st_close(d);
    return st;
}

static void map_unregister(struct st_mapreg *r);

void st_close(st_dir *d) {
    if (!d)
        return;
    for (int i = 0; i < d->n_tensors; i++)
        free((void *)(uintptr_t)d->tensors[i].name);
    for (int i = 0; i < d->n_shards; i++) {
        st_shard *s = &d->shards[i];
        if (s->map) {
            map_unregister(s->reg);
            munmap(s->map, (size_t)s->size);
        }
        if (s->fd >= 0)
            close(s->fd);
        if (s->dfd >= 0)
            close(s->dfd);
        free(s->path);
        free(s->name);
    }
    free(d->tensors);
    free(d->shards);
    free(d->path);
    pthread_mutex_destroy(&d->map_mu);
    free(d);
}

const char *st_path(const st_dir *d) {
    return d->path;
}
int st_n_tensors(const st_dir *d) {
    return d->n_tensors;
}
int st_has_prefix(const st_dir *d) {
    return d->has_prefix;
}
int st_n_shards(const st_dir *d) {
    return d->n_shards;
}

const st_tensor *st_tensor_at(const st_dir *d, int i) {
    K3_ASSERT(i >= 0 && i < d->n_tensors);
    return &d->tensors[i];
}

const st_tensor *st_find(const st_dir *d, const char *name) {
    st_tensor key = {.name = strip_prefix(name)};
    if (!d->n_tensors)
        return NULL;
    return bsearch(&key, d->tensors, (size_t)d->n_tensors, sizeof key, cmp_tensor_name);
}

const char *st_shard_path(const st_dir *d, int shard) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    return d->shards[shard].path;
}

const char *st_shard_name(const st_dir *d, int shard) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    return d->shards[shard].name;
}

uint64_t st_shard_size(const st_dir *d, int shard) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    return d->shards[shard].size;
}

int st_shard_fd(const st_dir *d, int shard) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    return d->shards[shard].fd;
}

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* A read of a sparse shard (a replica written with holes): its holes are filled with zeros here
 * and only its data is read. A buffered read of a hole costs the kernel a page-cache page zeroed
 * and copied per 4 kB (the release replica's --layers 2 open reads 8 GB of holes: 40 % of its
 * CPU). SEEK_DATA / SEEK_HOLE find them; where the filesystem has neither, everything is read.
 * Counted as read (io). Past the end of the file the read goes to pread_all, which names it. */
static k3_status read_sparse(const st_shard *s, unsigned char *dst, uint64_t n, uint64_t off, st_io *io) {
    uint64_t done = 0;
    while (done < n) {
        const off_t p = (off_t)(off + done);
        off_t       d = lseek(s->fd, p, SEEK_DATA);
        uint64_t    z = 0, left = n - done;
        if (d < 0 && errno == ENXIO) { /* no data from p on: a hole to the end of the file */
            struct stat sb;
            if (fstat(s->fd, &sb) == 0 && sb.st_size > p)
                z = (uint64_t)(sb.st_size - p) < left ? (uint64_t)(sb.st_size - p) : left;
        } else if (d > p)
            z = (uint64_t)(d - p) < left ? (uint64_t)(d - p) : left;
        if (z) {
            memset(dst + done, 0, (size_t)z);
            io_count(io, z, 0);
            done += z;
            continue;
        }
        off_t     h  = d == p ? lseek(s->fd, p, SEEK_HOLE) : -1; /* data at p: read up to the next hole */
        uint64_t  m  = h > p && (uint64_t)(h - p) < left ? (uint64_t)(h - p) : left;
        k3_status st = pread_all(s->fd, s->path, dst + done, m, off + done, io);
        if (st)
            return st;
        done += m;
    }
    return K3_OK;
}

k3_status st_read_at(const st_dir *d, int shard, void *dst, uint64_t n, uint64_t off) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    const st_shard *s = &d->shards[shard];
    if (s->fd < 0)
        return k3_err(K3_ERR_IO, "%s: shard was never opened (vision only)", s->name);
    if (s->sparse)
        return read_sparse(s, dst, n, off, d->io);
    return pread_all(s->fd, s->path, dst, n, off, d->io);
}

k3_status st_read(const st_dir *d, const st_tensor *t, void *dst) {
    k3_status st = st_read_at(d, t->shard, dst, t->nbytes, t->offset);
    if (st)
        k3_err_prefix("tensor '%s'", t->name);
    return st;
}

/* O_DIRECT reads of [a0, a0 + n) (4096-aligned) into blk; at least `need` bytes must come
 * (the span may run past the end of the file). K3_ERR_UNSUPPORTED when the filesystem refuses
 * O_DIRECT (the caller reads through the page cache instead), else K3_OK or K3_ERR_IO. */
static k3_status direct_span(st_dir *d, st_shard *s, uint8_t *blk, uint64_t a0, uint64_t n, uint64_t need) {
    if (s->dfd == -1 && (s->dfd = open(s->path, O_RDONLY | O_CLOEXEC | O_DIRECT)) < 0)
        s->dfd = -2;
    if (s->dfd < 0)
        return K3_ERR_UNSUPPORTED;
    k3_status st = pread_span(s->dfd, s->path, blk, n, need, a0, d->io, 1);
    if (st == K3_ERR_UNSUPPORTED) { /* alignment refused: the page cache from now on */
        close(s->dfd);
        s->dfd = -2;
    }
    return st;
}

k3_status st_read_block(st_dir *d, const st_tensor *t, uint64_t direct_min, void **block, const void **data,
                        uint64_t *block_bytes) {
    enum { ALIGN = 4096 };
    st_shard *s = &d->shards[t->shard];
    *block = NULL, *data = NULL, *block_bytes = 0;
    if (s->fd < 0)
        return k3_err(K3_ERR_IO, "%s: shard was never opened (vision only)", s->name);
    const uint64_t a0 = t->offset / ALIGN * ALIGN,
                   n  = (t->offset + t->nbytes - a0 + ALIGN - 1) / ALIGN * ALIGN;
    k3_status st      = K3_ERR_UNSUPPORTED;
    uint8_t  *b;
    if (direct_min && t->nbytes >= direct_min && t->offset % 64 == 0) {
        if (!(b = k3_aligned_alloc(ALIGN, (size_t)n)))
            return k3_err(K3_ERR_NOMEM, "tensor '%s': out of memory", t->name);
        if ((st = direct_span(d, s, b, a0, n, t->offset + t->nbytes - a0)) == K3_OK) {
            *block = b, *data = b + (t->offset - a0), *block_bytes = n;
            return K3_OK;
        }
        free(b);
        if (st != K3_ERR_UNSUPPORTED) {
            k3_err_prefix("tensor '%s'", t->name);
            return st;
        }
    }
    if (!(b = k3_aligned_alloc(64, t->nbytes ? (size_t)t->nbytes : 64)))
        return k3_err(K3_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    if ((st = st_read(d, t, b))) {
        free(b);
        return st;
    }
    *block = b, *data = b, *block_bytes = t->nbytes;
    return K3_OK;
}

void st_io_get(const st_dir *d, st_io *out) {
    out->calls        = __atomic_load_n(&d->io->calls, __ATOMIC_RELAXED);
    out->bytes        = __atomic_load_n(&d->io->bytes, __ATOMIC_RELAXED);
    out->direct_bytes = __atomic_load_n(&d->io->direct_bytes, __ATOMIC_RELAXED);
}

k3_status st_read_f32(const st_dir *d, const st_tensor *t, float *dst) {
    if (t->dtype == ST_F32)
        return st_read(d, t, dst);
    return st_read_f32_part(d, t, 0, st_numel(t), dst);
}

k3_status st_read_f32_part(const st_dir *d, const st_tensor *t, int64_t first, int64_t count, float *dst) {
    size_t es = dtypes[t->dtype].size;
    K3_ASSERT(first >= 0 && count >= 0 && (uint64_t)(first + count) * es <= t->nbytes);
    if (t->dtype == ST_F32) {
        k3_status st = st_read_at(d, t->shard, dst, (uint64_t)count * 4, t->offset + (uint64_t)first * 4);
        if (st)
            k3_err_prefix("tensor '%s'", t->name);
        return st;
    }
    if (t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_F64)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected a float type (F32/F16/BF16/F64)",
                      d->shards[t->shard].name, t->name, dtypes[t->dtype].name);
    /* convert in chunks through a bounce buffer (no second copy of a big tensor) */
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = k3_malloc(CHUNK * 8);
    if (!buf)
        return k3_err(K3_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    uint64_t  numel = (uint64_t)count, base = t->offset + (uint64_t)first * es;
    k3_status st = K3_OK;
    for (uint64_t i0 = 0; i0 < numel; i0 += CHUNK) {
        uint64_t n = numel - i0 < CHUNK ? numel - i0 : CHUNK;
        if ((st = st_read_at(d, t->shard, buf, n * es, base + i0 * es))) {
            k3_err_prefix("tensor '%s'", t->name);
            break;
        }
        float *o = dst + i0;
        for (uint64_t i = 0; i < n; i++) {
            if (t->dtype == ST_F64) {
                double v;
                memcpy(&v, buf + i * 8, 8);
                o[i] = (float)v;
            } else {
                uint16_t h = (uint16_t)(buf[i * 2] | buf[i * 2 + 1] << 8);
                o[i]       = t->dtype == ST_BF16 ? k3_bf16_to_f32(h) : k3_f16_to_f32(h);
            }
        }
    }
    free(buf);
    return st;
}

int st_shard_opened(const st_dir *d, int shard) {
    K3_ASSERT(shard >= 0 && shard < d->n_shards);
    return d->shards[shard].fd >= 0;
}

/* ---- mapped shards that change under the engine --------------------------------------------
 * A page of a MAP_SHARED mapping past the end of its file (the file truncated after st_map, or a
 * page the drive cannot read) raises SIGBUS on access, which would end the process and the
 * conversation with it. st_map registers each mapping; the handler, on a fault inside one, maps
 * anonymous zero pages over the rest of that mapping (from the faulting page on: one fault per
 * shrink, not one per page), records the lowest faulting offset and bumps a counter, and returns:
 * the access completes with zeros. The forward pass compares the counter between layers
 * (st_map_gen) and fails the pass with st_map_check's error, which names the file, the offset,
 * the tensor and the sizes; the sessions keep their state (nothing of a failed pass is
 * committed). The next pass calls st_map_repair first: the shard is reopened by path and mapped
 * again at the same address (the tensors keep their pointers) when it is back at its size with
 * the same header, else the pass fails again with the same kind of message. A SIGBUS outside
 * every registered mapping goes to the handler that was there before, or to the default action
 * (the access faults again and the process dies as before).
 * Entries are never freed (st_close marks them free for reuse), so the handler walks the list
 * without a lock. mmap is a system call (no lock of the C library is taken), which the handler
 * may make even though POSIX does not list it as async-signal-safe. */
typedef struct st_mapreg {
    struct st_mapreg *next;
    _Atomic uintptr_t lo, hi; /* the mapping [lo, hi); 0, 0 while the entry is free    */
    _Atomic uint64_t  fault;  /* lowest faulting offset in the file + 1; 0: none        */
    atomic_int        used;
} st_mapreg;

static st_mapreg *_Atomic map_regs;    /* the list (entries pushed at its head)               */
static atomic_ulong       map_gen;     /* faults handled so far                               */
static struct sigaction   map_old_bus; /* the SIGBUS action before ours                       */
static pthread_once_t     map_once = PTHREAD_ONCE_INIT;
static long               map_page; /* the page size                                     */

static void map_bus(int sig, siginfo_t *si, void *uc) {
    uintptr_t a  = (uintptr_t)si->si_addr;
    long      ps = map_page; /* read before the handler was installed: no libc call here */
    for (st_mapreg *r = si->si_code > 0 ? atomic_load(&map_regs) : NULL; r; r = r->next) { /* > 0: a fault */
        uintptr_t lo = atomic_load(&r->lo), hi = atomic_load(&r->hi);
        if (a < lo || a >= hi)
            continue;
        uintptr_t pg = a & ~(uintptr_t)(ps - 1);
        if (mmap((void *)pg, hi - pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
                 0) == MAP_FAILED)
            break;
        uint64_t off = (uint64_t)(a - lo) + 1, cur = atomic_load(&r->fault);
        while ((!cur || off < cur) && !atomic_compare_exchange_weak(&r->fault, &cur, off)) {
        }
        atomic_fetch_add(&map_gen, 1);
        return;
    }
    if (map_old_bus.sa_flags & SA_SIGINFO) {
        map_old_bus.sa_sigaction(sig, si, uc);
    } else if (map_old_bus.sa_handler != SIG_DFL && map_old_bus.sa_handler != SIG_IGN) {
        map_old_bus.sa_handler(sig);
    } else { /* the default action: pending until the handler returns (a fault would recur anyway) */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        raise(sig);
    }
}

static void map_install(void) {
    map_page            = sysconf(_SC_PAGESIZE);
    struct sigaction sa = {.sa_sigaction = map_bus, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &map_old_bus);
}

/* An entry for [p, p + n): a free one reused, else a new one (NULL: out of memory). */
static st_mapreg *map_register(void *p, uint64_t n) {
    pthread_once(&map_once, map_install);
    st_mapreg *r = atomic_load(&map_regs);
    for (; r; r = r->next) {
        int z = 0;
        if (atomic_compare_exchange_strong(&r->used, &z, 1))
            break;
    }
    if (!r) {
        if (!(r = k3_calloc(1, sizeof *r)))
            return NULL;
        atomic_store(&r->used, 1);
        r->next = atomic_load(&map_regs);
        while (!atomic_compare_exchange_weak(&map_regs, &r->next, r)) {
        }
    }
    atomic_store(&r->fault, 0);
    atomic_store(&r->hi, (uintptr_t)p + n);
    atomic_store(&r->lo, (uintptr_t)p);
    return r;
}

static void map_unregister(st_mapreg *r) {
    if (!r)
        return;
    atomic_store(&r->lo, 0);
    atomic_store(&r->hi, 0);
    atomic_store(&r->used, 0);
}

unsigned long st_map_gen(void) {
    return atomic_load(&map_gen);
}

/* The error of shard si, faulted at offset off (its file now `now` bytes, -1: unknown). */
static k3_status map_fault_err(const st_dir *d, int si, uint64_t off, int64_t now, const char *why) {
    const st_shard  *s = &d->shards[si];
    const st_tensor *t = NULL;
    for (int i = 0; i < d->n_tensors && !t; i++)
        if (d->tensors[i].shard == si && off >= d->tensors[i].offset &&
            off - d->tensors[i].offset < d->tensors[i].nbytes)
            t = &d->tensors[i];
    char tn[300] = "";
    if (t)
        snprintf(tn, sizeof tn, "tensor '%s' ", t->name);
    char sz[96];
    if (now < 0)
        snprintf(sz, sizeof sz, "cannot be read");
    else
        snprintf(sz, sizeof sz, "is now %lld bytes", (long long)now);
    return k3_err(K3_ERR_IO,
                  "%s: mapped %sat offset %llu %s: the file %s, %llu when the model was opened (K3_MMAP=1; "
                  "restore the file, or restart k3chat to load what is there now)",
                  s->name, tn, (unsigned long long)off, why, sz, (unsigned long long)s->size);
}

/* The size of the file at path now (-1: cannot stat). */
static int64_t path_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) < 0 ? -1 : (int64_t)sb.st_size;
}

k3_status st_map_check(const st_dir *d) {
    for (int i = 0; i < d->n_shards; i++) {
        const st_shard *s = &d->shards[i];
        uint64_t        f = s->reg ? atomic_load(&s->reg->fault) : 0;
        if (!f)
            continue;
        int64_t now = path_size(s->path);
        return map_fault_err(d, i, f - 1, now,
                             now >= 0 && (uint64_t)now <= f - 1 ? "is past the end of the file (it shrank "
                                                                  "under the running engine)"
                                                                : "could not be read");
    }
    return K3_OK;
}

/* Map shard s again at its address from the file at its path, when that is the file st_open read
 * (same size and header). */
static k3_status map_again(const st_dir *d, int si) {
    st_shard *s   = &d->shards[si];
    uint64_t  off = atomic_load(&s->reg->fault) - 1, size;
    int       fd;
    k3_status st = k3_open_regular(s->path, s->name, &fd, &size, NULL);
    if (st) {
        k3_err_prefix("mapped data at offset %llu failed, and opening the file again",
                      (unsigned long long)off);
        return st;
    }
    int64_t now = (int64_t)size;
    if (now != (int64_t)s->size) {
        st = map_fault_err(d, si, off, now,
                           now >= 0 && (uint64_t)now <= off ? "is still past the end of the file"
                                                            : "failed, and the file is not the size it had");
        goto done;
    }
    char *h = k3_malloc((size_t)s->hlen + 1);
    if (!h) {
        st = k3_err(K3_ERR_NOMEM, "%s: no memory for a %llu-byte header", s->name,
                    (unsigned long long)s->hlen);
        goto done;
    }
    st = pread_all(fd, s->path, h, s->hlen, 8, NULL);
    if (!st && k3_fnv1a(h, (size_t)s->hlen) != s->hsum)
        st = k3_err(
            K3_ERR_IO,
            "%s: mapped data at offset %llu failed before, and the file's header is not the one the model "
            "was opened with (K3_MMAP=1; restart k3chat to load the new file)",
            s->name, (unsigned long long)off);
    free(h);
    if (st)
        goto done;
    if (mmap(s->map, (size_t)s->size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        st = k3_err(K3_ERR_IO, "%s: mapping the file again failed: %s", s->name, strerror(errno));
        goto done;
    }
    if (dup2(fd, s->fd) < 0) /* the new file under the old descriptor number: st_read_at reads it too */
        K3_LOG_WARN("%s: dup2: %s", s->name, strerror(errno));
    atomic_store(&s->reg->fault, 0);
done:
    close(fd);
    return st;
}

k3_status st_map_repair(st_dir *d) {
    k3_status st = K3_OK;
    pthread_mutex_lock(&d->map_mu);
    for (int i = 0; i < d->n_shards && !st; i++)
        if (d->shards[i].reg && atomic_load(&d->shards[i].reg->fault))
            st = map_again(d, i);
    pthread_mutex_unlock(&d->map_mu);
    return st;
}

k3_status st_map(st_dir *d, const st_tensor *t, const void **out) {
    st_shard *s = &d->shards[t->shard];
    *out        = NULL;
    if (s->fd < 0)
        return k3_err(K3_ERR_IO, "%s: shard was never opened (vision only)", s->name);
    if (!s->map) {
        void *m = mmap(NULL, (size_t)s->size, PROT_READ, MAP_SHARED, s->fd, 0);
        if (m == MAP_FAILED)
            return k3_err(K3_ERR_IO, "%s: mmap failed: %s", s->name, strerror(errno));
        if (!(s->reg = map_register(m, s->size))) {
            munmap(m, (size_t)s->size);
            return k3_err(K3_ERR_NOMEM, "%s: out of memory", s->name);
        }
        s->map = m;
    }
    *out = (const unsigned char *)s->map + t->offset;
    return K3_OK;
}
