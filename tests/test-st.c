/* test-st.c: the safetensors reader on hand-made files: a single file and an index with shards,
 * the language_model. prefix, dtype conversions, a vision-only shard that must never be opened,
 * and one case per header corruption (each must fail with a message naming the file and tensor).
 */
#include "st-file.h"
#include "st.h"
#include "test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[512];

/* A fresh empty directory root/name; returns its path (static buffer per call site is enough). */
static const char *mkdir_case(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", root, name);
    mkdir(buf, 0755);
    return buf;
}

static void path2(char *buf, size_t n, const char *dir, const char *file) {
    snprintf(buf, n, "%s/%s", dir, file);
}

static int msg_has(const char *a, const char *b) {
    return strstr(k3_errmsg(), a) && (!b || strstr(k3_errmsg(), b));
}

/* Open dir expecting failure; the message must contain a and b. */
static void expect_fail(const char *dir, const char *what, const char *a, const char *b) {
    st_dir   *d  = NULL;
    k3_status st = st_open(dir, &d);
    T_CHECK(st != K3_OK && !d, "%s: rejected", what);
    T_CHECK(msg_has(a, b), "%s: message names '%s'%s%s (%s)", what, a, b ? " and " : "", b ? b : "",
            k3_errmsg());
    T_CHECK(!strchr(k3_errmsg(), '\n'), "%s: message is one line", what);
    st_close(d);
}

/* A single valid file with one F32 tensor "w" [2,3], written by the engine's writer, then a
 * header entry "bad" put in by edit. Where the bad entry needs data, the writer first writes a
 * placeholder "bad" of that many U8 bytes after "w"; every offset an edit uses is read back from
 * the written header (tsf_range), none is assumed. */
static void single_with(const char *name, int64_t placeholder, int (*edit)(json_t *), const char *what,
                        const char *a, const char *b) {
    char dir[600], p[700];
    mkdir_case(name, dir, sizeof dir);
    path2(p, sizeof p, dir, "model.safetensors");
    tsf f = {0};
    tsf_add(&f, "w", "F32", 2, (int64_t[]){2, 3}, NULL);
    if (placeholder)
        tsf_add(&f, "bad", "U8", 1, (int64_t[]){placeholder}, NULL);
    T_CHECK(tsf_write(&f, p) == 0 && tsf_edit_header(p, edit) == 0, "%s: file written, header changed", what);
    expect_fail(dir, what, a, b);
}

/* "bad" as dtype[dim] over data_offsets [begin, end). */
static int set_bad(json_t *h, const char *dt, int64_t dim, uint64_t begin, uint64_t end) {
    return json_object_set_new(h, "bad",
                               json_pack("{s:s,s:[I],s:[I,I]}", "dtype", dt, "shape", (json_int_t)dim,
                                         "data_offsets", (json_int_t)begin, (json_int_t)end));
}
/* the placeholder's own bytes (4), under a dtype the reader does not know */
static int x_unknown_dtype(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "bad", &b, &e) || e - b != 4 || set_bad(h, "F8_E4M3", 4, b, e);
}
/* 12 bytes of placeholder for F32[4], which needs 16 */
static int x_size_mismatch(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "bad", &b, &e) || e - b != 12 || set_bad(h, "F32", 4, b, e);
}
/* the last 8 bytes of "w" */
static int x_overlap(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "w", &b, &e) || e - b != 24 || set_bad(h, "F32", 2, e - 8, e);
}
/* 1 MiB past the end of the data section (which ends with "w") */
static int x_beyond(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "w", &b, &e) || set_bad(h, "F32", 2, e + (1 << 20), e + (1 << 20) + 8);
}
static int x_end_before(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "w", &b, &e) || set_bad(h, "F32", 0, e, e - 4);
}
/* the placeholder's 4 bytes as F32[-1] */
static int x_neg_shape(json_t *h) {
    uint64_t b, e;
    return tsf_range(h, "bad", &b, &e) || e - b != 4 || set_bad(h, "F32", -1, b, e);
}

static void corruptions(void) {
    char dir[600], p[700];
    single_with("dtype", 4, x_unknown_dtype, "unknown dtype", "model.safetensors", "'bad'");
    single_with("size", 12, x_size_mismatch, "shape/size mismatch", "model.safetensors", "'bad'");
    single_with("overlap", 0, x_overlap, "overlapping ranges", "overlaps", "'bad'");
    single_with("beyond", 0, x_beyond, "range beyond the data section", "model.safetensors", "'bad'");
    single_with("endbefore", 0, x_end_before, "end before begin", "model.safetensors", "'bad'");
    single_with("negshape", 4, x_neg_shape, "negative dimension", "model.safetensors", "'bad'");

    /* header length beyond the file */
    mkdir_case("hlen", dir, sizeof dir);
    path2(p, sizeof p, dir, "model.safetensors");
    unsigned char b[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    tsf_bytes(p, b, 10);
    expect_fail(dir, "header length beyond the file", "model.safetensors", "header length 65535");
    /* too short for the length */
    tsf_bytes(p, b, 5);
    expect_fail(dir, "file shorter than 8 bytes", "model.safetensors", "too short");
    /* malformed JSON */
    static const char bad[] = "\x0f\0\0\0\0\0\0\0{\"w\": {\"dtype\":";
    tsf_bytes(p, bad, sizeof bad - 1);
    expect_fail(dir, "malformed header JSON", "model.safetensors", "malformed");
    static const char arr[] = "\x07\0\0\0\0\0\0\0[1,2,3]";
    tsf_bytes(p, arr, sizeof arr - 1);
    expect_fail(dir, "header JSON not an object", "model.safetensors", "not an object");

    /* a header of no tensors: opens, empty (the sort of its entries had none to sort: qsort was
     * passed NULL, undefined behaviour the sanitizer tree stops on) */
    static const char none[] = "\x02\0\0\0\0\0\0\0{}";
    tsf_bytes(p, none, sizeof none - 1);
    st_dir   *d0  = NULL;
    k3_status st0 = st_open(dir, &d0);
    T_CHECK(st0 == K3_OK && st_n_tensors(d0) == 0, "a header of no tensors opens with none (%s)",
            st0 ? k3_errmsg() : "ok");
    st_close(d0);

    /* truncated data section */
    mkdir_case("trunc", dir, sizeof dir);
    path2(p, sizeof p, dir, "model.safetensors");
    tsf w = {0};
    tsf_add(&w, "a", "F32", 1, (int64_t[]){100}, NULL);
    tsf_add(&w, "last", "BF16", 2, (int64_t[]){10, 10}, NULL);
    tsf_write(&w, p);
    struct stat sb;
    stat(p, &sb);
    T_CHECK(truncate(p, sb.st_size - 7) == 0, "truncate shard");
    expect_fail(dir, "truncated shard", "model.safetensors", "'last'");

    /* empty directory */
    mkdir_case("empty", dir, sizeof dir);
    expect_fail(dir, "directory without safetensors", "model.safetensors", NULL);
}

/* Index with two text shards (one using the prefix), a vision-only shard, conversions. */
static void sharded(void) {
    char dir[600], p[700];
    mkdir_case("sharded", dir, sizeof dir);
    float    f32[6] = {1, -2, 3.5f, 0.25f, -0, 65504};
    uint16_t bf[4]  = {0x3f80, 0xc020, 0x0000, 0x7f80}; /* 1, -2.5, 0, inf */
    uint16_t hf[3]  = {0x3c00, 0xc500, 0x0001};         /* 1, -5, 2^-24 */
    double   f64[2] = {0.1, -1e3};
    uint8_t  u8[5]  = {1, 2, 3, 4, 5};

    tsf w = {0};
    tsf_add(&w, "language_model.model.norm.weight", "F32", 2, (int64_t[]){2, 3}, f32);
    tsf_add(&w, "language_model.model.bf", "BF16", 1, (int64_t[]){4}, bf);
    tsf_add(&w, "vision_tower.mixed", "F32", 1, (int64_t[]){1}, NULL); /* vision tensor in a text shard */
    path2(p, sizeof p, dir, "m-1-of-3.safetensors");
    T_CHECK(tsf_write(&w, p) == 0, "write shard 1");
    tsf_add(&w, "language_model.model.hf", "F16", 1, (int64_t[]){3}, hf);
    tsf_add(&w, "language_model.model.f64", "F64", 1, (int64_t[]){2}, f64);
    tsf_add(&w, "language_model.model.u8", "U8", 1, (int64_t[]){5}, u8);
    tsf_add(&w, "language_model.model.scalar", "F32", 0, NULL, f32);
    path2(p, sizeof p, dir, "m-2-of-3.safetensors");
    T_CHECK(tsf_write(&w, p) == 0, "write shard 2");
    tsf_add(&w, "vision_tower.a", "F32", 1, (int64_t[]){4}, NULL);
    tsf_add(&w, "mm_projector.b", "F32", 1, (int64_t[]){4}, NULL);
    path2(p, sizeof p, dir, "m-3-of-3.safetensors");
    T_CHECK(tsf_write(&w, p) == 0, "write vision shard");

    json_t *idx = json_pack(
        "{s:{s:s}, s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}}", "metadata", "total_size", "0", "weight_map",
        "language_model.model.norm.weight", "m-1-of-3.safetensors", "language_model.model.bf",
        "m-1-of-3.safetensors", "vision_tower.mixed", "m-1-of-3.safetensors", "language_model.model.hf",
        "m-2-of-3.safetensors", "language_model.model.f64", "m-2-of-3.safetensors", "language_model.model.u8",
        "m-2-of-3.safetensors", "language_model.model.scalar", "m-2-of-3.safetensors", "vision_tower.a",
        "m-3-of-3.safetensors", "mm_projector.b", "m-3-of-3.safetensors");
    path2(p, sizeof p, dir, "model.safetensors.index.json");
    json_dump_file(idx, p, JSON_INDENT(2));

    /* the vision shard: unreadable, then a directory in its place, then gone: never opened */
    path2(p, sizeof p, dir, "m-3-of-3.safetensors");
    chmod(p, 0);
    for (int round = 0; round < 3; round++) {
        if (round == 1) {
            unlink(p);
            mkdir(p, 0);
        } else if (round == 2) {
            rmdir(p);
        }
        st_dir   *d  = NULL;
        k3_status st = st_open(dir, &d);
        T_CHECK(st == K3_OK, "sharded index opens with the vision shard %s (%s)",
                round == 0   ? "unreadable"
                : round == 1 ? "a directory"
                             : "deleted",
                k3_errmsg());
        if (st)
            continue;
        int vis = -1;
        for (int i = 0; i < st_n_shards(d); i++)
            if (!strcmp(st_shard_name(d, i), "m-3-of-3.safetensors"))
                vis = i;
        T_CHECK(vis >= 0 && !st_shard_opened(d, vis) && st_shard_fd(d, vis) < 0,
                "vision shard listed, never opened");
        if (round < 2) {
            st_close(d);
            continue;
        }
        T_CHECK(st_n_shards(d) == 3, "three shards (%d)", st_n_shards(d));
        T_CHECK(st_n_tensors(d) == 6, "six text tensors (%d)", st_n_tensors(d));
        T_CHECK(st_has_prefix(d), "prefix detected");
        const st_tensor *a  = st_find(d, "model.norm.weight"),
                        *a2 = st_find(d, "language_model.model.norm.weight");
        T_CHECK(a && a == a2, "st_find with and without the prefix");
        T_CHECK(a && !strcmp(a->name, "model.norm.weight"), "names stored without the prefix");
        T_CHECK(!st_find(d, "vision_tower.mixed") && !st_find(d, "vision_tower.a"),
                "vision tensors not listed");
        T_CHECK(!st_find(d, "model.nothing"), "absent tensor -> NULL");
        float out[8];
        if (a) {
            T_CHECK(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24 &&
                        st_numel(a) == 6,
                    "shape [2,3] F32");
            T_CHECK(st_read_f32(d, a, out) == K3_OK && !memcmp(out, f32, sizeof f32), "F32 read");
        }
        const st_tensor *t = st_find(d, "model.bf");
        T_CHECK(t && st_read_f32(d, t, out) == K3_OK && out[0] == 1 && out[1] == -2.5f && out[2] == 0 &&
                    isinf(out[3]),
                "BF16 -> f32");
        t = st_find(d, "model.hf");
        T_CHECK(t && st_read_f32(d, t, out) == K3_OK && out[0] == 1 && out[1] == -5 && out[2] == 0x1p-24f,
                "F16 -> f32");
        t = st_find(d, "model.f64");
        T_CHECK(t && st_read_f32(d, t, out) == K3_OK && out[0] == 0.1f && out[1] == -1000, "F64 -> f32");
        t = st_find(d, "model.u8");
        uint8_t ub[5];
        T_CHECK(t && st_read(d, t, ub) == K3_OK && !memcmp(ub, u8, 5), "U8 raw read");
        T_CHECK(t && st_read_f32(d, t, out) != K3_OK && msg_has("'model.u8'", "U8"),
                "U8 as f32 rejected (%s)", k3_errmsg());
        const void *m = NULL;
        T_CHECK(t && st_map(d, t, &m) == K3_OK && m && !memcmp(m, u8, 5), "st_map U8");
        t = st_find(d, "model.scalar");
        T_CHECK(t && t->ndim == 0 && st_numel(t) == 1 && st_read_f32(d, t, out) == K3_OK && out[0] == 1,
                "0-dim scalar");

        /* file shrinks after open: the read names the file and offset */
        t = st_find(d, "model.u8");
        path2(p, sizeof p, dir, "m-2-of-3.safetensors");
        if (t) {
            T_CHECK(truncate(p, (off_t)t->offset + 2) == 0, "shrink shard 2 after open");
            k3_status rs = st_read(d, t, ub);
            char      off[32];
            snprintf(off, sizeof off, "%llu", (unsigned long long)t->offset + 2);
            T_CHECK(rs == K3_ERR_IO && msg_has("m-2-of-3.safetensors", off),
                    "short read names file and offset (%s)", k3_errmsg());
        }
        st_close(d);
        path2(p, sizeof p, dir, "m-3-of-3.safetensors");
    }
    json_decref(idx);
}

/* Index problems: a name in two shards, an index entry missing from its shard. */
static void index_errors(void) {
    char dir[600], p[700];
    mkdir_case("dup", dir, sizeof dir);
    for (int s = 1; s <= 2; s++) {
        tsf w = {0};
        tsf_add(&w, s == 1 ? "x" : "language_model.x", "F32", 1, (int64_t[]){1}, NULL);
        char f[64];
        snprintf(f, sizeof f, "s%d.safetensors", s);
        path2(p, sizeof p, dir, f);
        tsf_write(&w, p);
    }
    json_t *idx =
        json_pack("{s:{s:s,s:s}}", "weight_map", "x", "s1.safetensors", "language_model.x", "s2.safetensors");
    path2(p, sizeof p, dir, "model.safetensors.index.json");
    json_dump_file(idx, p, 0);
    json_decref(idx);
    expect_fail(dir, "duplicate tensor across shards", "'x'", "also in");

    idx = json_pack("{s:{s:s,s:s}}", "weight_map", "x", "s1.safetensors", "y", "s1.safetensors");
    json_dump_file(idx, p, 0);
    json_decref(idx);
    path2(p, sizeof p, dir, "s2.safetensors");
    unlink(p);
    expect_fail(dir, "index entry absent from its shard", "s1.safetensors", "'y'");

    path2(p, sizeof p, dir, "model.safetensors.index.json");
    idx = json_pack("{s:{s:s}}", "weight_map", "x", "../etc/passwd");
    json_dump_file(idx, p, 0);
    json_decref(idx);
    expect_fail(dir, "shard path outside the directory", "model.safetensors.index.json", "weight_map");

    tsf_bytes(p, "{\"weight_map\": {", 16);
    expect_fail(dir, "malformed index JSON", "model.safetensors.index.json", NULL);

    idx = json_pack("{s:{s:s}}", "weight_map", "x", "missing.safetensors");
    json_dump_file(idx, p, 0);
    json_decref(idx);
    expect_fail(dir, "missing text shard", "missing.safetensors", NULL);
}

/* Random byte damage to a valid file: every open either succeeds or fails with a one-line
 * message naming the file; never a crash (the ASan/UBSan tree checks memory). */
static void fuzz(void) {
    char dir[600], p[700];
    mkdir_case("fuzz", dir, sizeof dir);
    path2(p, sizeof p, dir, "model.safetensors");
    tsf w = {0};
    tsf_add(&w, "a", "F32", 2, (int64_t[]){3, 5}, NULL);
    tsf_add(&w, "language_model.b", "BF16", 1, (int64_t[]){7}, NULL);
    tsf_add(&w, "c", "U8", 3, (int64_t[]){2, 2, 3}, NULL);
    tsf_write(&w, p);
    FILE         *f = fopen(p, "rb");
    unsigned char orig[4096], buf[4096];
    size_t        n = f ? fread(orig, 1, sizeof orig, f) : 0;
    if (f)
        fclose(f);
    uint64_t rng = 0x9e3779b97f4a7c15u;
    int      bad = 0, opened = 0, rejected = 0;
    for (int it = 0; it < 400 && n > 16; it++) {
        memcpy(buf, orig, n);
        int k = 1 + it % 4;
        for (int j = 0; j < k; j++) {
            rng       = rng * 6364136223846793005u + 1442695040888963407u;
            size_t at = (size_t)(rng >> 33) % (it % 8 == 0 ? 8 : n);
            buf[at]   = (unsigned char)(rng >> 24);
        }
        size_t len = it % 5 == 4 ? (size_t)(rng >> 40) % n : n; /* sometimes truncated too */
        tsf_bytes(p, buf, len);
        st_dir   *d  = NULL;
        k3_status st = st_open(dir, &d);
        if (st == K3_OK) {
            opened++;
            for (int i = 0; i < st_n_tensors(d); i++) { /* every recorded range is readable */
                const st_tensor *t = st_tensor_at(d, i);
                unsigned char    tmp[512];
                if (t->nbytes > sizeof tmp || st_read(d, t, tmp) != K3_OK)
                    bad++;
            }
        } else {
            rejected++;
            if (!strstr(k3_errmsg(), "model.safetensors") || strchr(k3_errmsg(), '\n'))
                bad++;
        }
        st_close(d);
    }
    T_CHECK(n > 16 && bad == 0,
            "400 damaged files: %d opened and readable, %d rejected naming the file, %d bad", opened,
            rejected, bad);
}

/* The sum of n mapped bytes, each read once (volatile: the reads happen). */
static unsigned touch(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    unsigned                      s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    return s;
}

/* The whole file at path into a new buffer (*n bytes), NULL on failure. */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long           sz = ftell(f);
    unsigned char *b  = sz > 0 ? malloc((size_t)sz) : NULL;
    fseek(f, 0, SEEK_SET);
    *n = b && fread(b, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : 0;
    fclose(f);
    if (!*n) {
        free(b);
        return NULL;
    }
    return b;
}

/* A mapped shard truncated under its reader (K3_MMAP=1's weights): was SIGBUS, the end of the
 * process. Now the pages past the end read as zeros, the fault is counted and st_map_check names
 * the file, the tensor, the offset and both sizes; st_map_repair refuses while the file is short
 * or has another header, and maps it again once it is back (the tensors' pointers still good). */
static void mapped_shrink(void) {
    char dir[600], p[700];
    mkdir_case("mapped", dir, sizeof dir);
    path2(p, sizeof p, dir, "model.safetensors");
    enum { N = 4096 }; /* 16 kB a tensor: several pages */
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; a && b && i < N; i++)
        a[i] = (float)i + 0.5f, b[i] = -(float)i - 1;
    tsf f = {0};
    tsf_add(&f, "a", "F32", 1, (int64_t[]){N}, a);
    tsf_add(&f, "b", "F32", 1, (int64_t[]){N}, b);
    size_t         n    = 0;
    unsigned char *orig = tsf_write(&f, p) == 0 ? slurp(p, &n) : NULL;
    st_dir        *d    = NULL;
    T_CHECK(orig && st_open(dir, &d) == K3_OK, "mapped: file written and opened (%s)", d ? "" : k3_errmsg());
    const st_tensor *ta = d ? st_find(d, "a") : NULL, *tb = d ? st_find(d, "b") : NULL;
    const void      *ma = NULL, *mb = NULL;
    T_CHECK(ta && tb && st_map(d, ta, &ma) == K3_OK && st_map(d, tb, &mb) == K3_OK &&
                !memcmp(ma, a, N * sizeof *a) && !memcmp(mb, b, N * sizeof *b),
            "mapped: both tensors read through the map");
    if (!ta || !tb || !ma || !mb || !orig)
        goto out;
    T_CHECK(st_map_check(d) == K3_OK && st_map_repair(d) == K3_OK, "mapped: no fault yet");

    /* shrink to the start of b: a stays whole, b's pages past the end fault */
    unsigned long gen = st_map_gen();
    T_CHECK(truncate(p, (off_t)tb->offset) == 0, "mapped: truncate to b's offset %llu",
            (unsigned long long)tb->offset);
    unsigned sa = touch(ma, N * sizeof *a), sb = touch(mb, N * sizeof *b);
    long     ps    = sysconf(_SC_PAGESIZE);
    uint64_t first = ((uint64_t)tb->offset + (uint64_t)ps - 1) / (uint64_t)ps * (uint64_t)ps;
    T_CHECK(st_map_gen() > gen, "mapped: the reads past the end were counted as a fault (%lu -> %lu)", gen,
            st_map_gen());
    T_CHECK(sa == touch(a, N * sizeof *a) && sb != touch(b, N * sizeof *b) && ((const float *)mb)[N - 1] == 0,
            "mapped: a intact, b past the end reads zeros");
    char want[200], was[64];
    snprintf(want, sizeof want, "tensor 'b' at offset %llu is past the end", (unsigned long long)first);
    snprintf(was, sizeof was, "is now %llu bytes, %zu when", (unsigned long long)tb->offset, n);
    k3_status st = st_map_check(d);
    T_CHECK(st == K3_ERR_IO && msg_has("model.safetensors: mapped ", want) && msg_has(was, "shrank"),
            "mapped: the error names file, tensor, offset and sizes (%s)", k3_errmsg());
    st = st_map_repair(d);
    T_CHECK(st == K3_ERR_IO && msg_has("model.safetensors", was), "mapped: repair refused while short (%s)",
            k3_errmsg());
    T_CHECK(st_map_check(d) != K3_OK, "mapped: the fault stays");

    /* the same size with another header: refused too */
    orig[9] ^= 0x20; /* a byte of the JSON header */
    T_CHECK(tsf_bytes(p, orig, n) == 0, "mapped: another header written");
    orig[9] ^= 0x20;
    st = st_map_repair(d);
    T_CHECK(st == K3_ERR_IO && msg_has("model.safetensors", "header is not the one"),
            "mapped: repair refused with another header (%s)", k3_errmsg());

    /* the file back as it was: mapped again at the same address */
    T_CHECK(tsf_bytes(p, orig, n) == 0, "mapped: original bytes back");
    st = st_map_repair(d);
    T_CHECK(st == K3_OK && st_map_check(d) == K3_OK, "mapped: repaired (%s)", st ? k3_errmsg() : "");
    T_CHECK(!memcmp(ma, a, N * sizeof *a) && !memcmp(mb, b, N * sizeof *b),
            "mapped: the old pointers read the data again");

    /* a SIGBUS that is not a fault in a registered map still ends the process */
    for (int kind = 0; kind < 2; kind++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0)
                dup2(nul, 2); /* the sanitizer's report of the expected death */
            if (kind == 0) {
                kill(getpid(), SIGBUS);
            } else { /* a file mapped by hand, truncated, read */
                int   fd = open(p, O_RDONLY);
                void *m  = fd < 0 ? MAP_FAILED : mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
                if (m != MAP_FAILED && truncate(p, 0) == 0)
                    (void)touch(m, n);
            }
            _exit(0);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
#if defined(__SANITIZE_ADDRESS__)
        int died = !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0); /* ASan's handler reports and exits */
#else
        int died = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS;
#endif
        T_CHECK(pid > 0 && died, "mapped: a SIGBUS %s still ends the process (status %#x)",
                kind ? "on an unregistered map" : "sent by kill", ws);
        if (kind)
            tsf_bytes(p, orig, n);
    }
out:
    st_close(d);
    free(orig);
    free(a);
    free(b);
}

int main(void) {
    const char *tmp = getenv("K3_TMP");
    snprintf(root, sizeof root, "%s/test-st.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        T_CHECK(0, "mkdtemp %s", root);
        return t_done();
    }
    T_CHECK(st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8 && !strcmp(st_dtype_name(ST_U8), "U8"),
            "dtype table");
    corruptions();
    sharded();
    index_errors();
    fuzz();
    mapped_shrink();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd))
        T_SKIP("could not remove %s", root);
    return t_done();
}
