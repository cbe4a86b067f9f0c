/* test-st-write.c: the streaming safetensors writer (src/format/st-write.c) round-trips through the
 * reader (src/format/st.c): names, dtypes, shapes and bytes come back exactly, data lies in declaration
 * order whatever the header's key order, chunked writes may cross tensor boundaries, and misuse
 * (duplicate name, too many or too few bytes, unwritable path) fails with a message naming the
 * file; holes (stw_skip) read back as zeros, sparse shards included. (The other tests write their safetensors
 * files with it too, through tests/st-file.h.)
 */
#include "st-write.h"
#include "st.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[512];

static void roundtrip(void) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/rt", root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);

    /* declared in an order that is not the sorted order of the names */
    static const char    *names[3]  = {"zeta.weight", "alpha.bias", "mid.weight_packed"};
    static const st_dtype dts[3]    = {ST_BF16, ST_F32, ST_U8};
    int64_t               shp[3][2] = {{3, 5}, {7, 1}, {4, 9}};
    size_t                nb[3]     = {3 * 5 * 2, 7 * 4, 4 * 9};
    uint8_t               data[200];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 37 + 11);

    stw_file *w  = NULL;
    k3_status st = stw_create(path, &w);
    for (int i = 0; i < 3 && !st; i++)
        st = stw_add(w, names[i], dts[i], 2, shp[i]);
    if (!st)
        st = stw_meta(w, "producer", "test");
    T_CHECK(!st, "declare three tensors (%s)", st ? k3_errmsg() : "ok");
    T_CHECK(stw_add(w, "alpha.bias", ST_F32, 1, shp[0]) == K3_ERR_ARG && strstr(k3_errmsg(), path),
            "a duplicate name is rejected, naming the file (%s)", k3_errmsg());
    size_t total = nb[0] + nb[1] + nb[2];
    T_CHECK(stw_data_bytes(w) == total, "data bytes = sum of the tensors (%llu)",
            (unsigned long long)stw_data_bytes(w));
    if (!st)
        st = stw_begin(w);
    /* chunks of 13 bytes: every tensor boundary falls inside a chunk */
    for (size_t o = 0; o < total && !st; o += 13)
        st = stw_write(w, data + o, total - o < 13 ? total - o : 13);
    T_CHECK(!st, "chunked writes across tensor boundaries (%s)", st ? k3_errmsg() : "ok");
    T_CHECK(stw_write(w, data, 1) == K3_ERR_ARG && strstr(k3_errmsg(), path),
            "a byte past the declared data is rejected (%s)", k3_errmsg());
    uint64_t fb = stw_file_bytes(w);
    if (!st)
        st = stw_end(w);
    T_CHECK(!st, "stw_end (%s)", st ? k3_errmsg() : "ok");
    stw_free(w);

    struct stat sb;
    T_CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == fb, "file size = header + data (%llu)",
            (unsigned long long)fb);
    FILE   *f     = fopen(path, "rb");
    uint8_t le[8] = {0};
    T_CHECK(f && fread(le, 1, 8, f) == 8, "read the header length");
    if (f)
        fclose(f);
    uint64_t hl = 0;
    for (int b = 7; b >= 0; b--)
        hl = hl << 8 | le[b];
    T_CHECK(hl % 8 == 0 && 8 + hl + total == fb, "header length %llu is a multiple of 8",
            (unsigned long long)hl);

    st_dir *d = NULL;
    st        = st_open(dir, &d);
    T_CHECK(!st, "the reader opens the file (%s)", st ? k3_errmsg() : "ok");
    if (st)
        return;
    T_CHECK(st_n_tensors(d) == 3, "three tensors (%d)", st_n_tensors(d));
    size_t   off  = 0;
    uint64_t prev = 0;
    for (int i = 0; i < 3; i++) {
        const st_tensor *t = st_find(d, names[i]);
        T_CHECK(t && t->dtype == dts[i] && t->ndim == 2 && t->shape[0] == shp[i][0] &&
                    t->shape[1] == shp[i][1] && t->nbytes == nb[i],
                "%s: dtype and shape as declared", names[i]);
        if (!t)
            continue;
        T_CHECK(i == 0 || t->offset > prev, "%s: data in declaration order", names[i]);
        prev        = t->offset;
        uint8_t *b  = malloc(t->nbytes);
        int      eq = b && !st_read(d, t, b) && !memcmp(b, data + off, nb[i]);
        T_CHECK(eq, "%s: bytes read back exactly", names[i]);
        free(b);
        off += nb[i];
    }
    st_close(d);
}

static void misuse(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/short.safetensors", root);
    int64_t   shp[1] = {10};
    stw_file *w      = NULL;
    k3_status st     = stw_create(path, &w);
    if (!st)
        st = stw_add(w, "x", ST_F32, 1, shp);
    if (!st)
        st = stw_begin(w);
    float v[4] = {1, 2, 3, 4};
    if (!st)
        st = stw_write(w, v, sizeof v);
    T_CHECK(!st, "partial data written");
    st = stw_end(w);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "16 of 40"),
            "stw_end with missing bytes fails, saying how many (%s)", k3_errmsg());
    stw_free(w);

    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", root);
    w  = NULL;
    st = stw_create(path, &w);
    if (!st)
        st = stw_add(w, "x", ST_F32, 1, shp);
    if (!st)
        st = stw_begin(w);
    T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), path), "an unwritable path fails, naming it (%s)",
            k3_errmsg());
    stw_free(w);

    w              = NULL;
    st             = stw_create(path, &w);
    int64_t neg[1] = {-1};
    T_CHECK(!st && stw_add(w, "y", ST_F32, 1, neg) == K3_ERR_ARG, "a negative dimension is rejected");
    T_CHECK(stw_add(w, "__metadata__", ST_F32, 1, shp) == K3_ERR_ARG, "the name __metadata__ is rejected");
    stw_free(w);
}

/* stw_header: the header alone, the data section aligned as asked (k3-repack: 64 bytes), the
 * same bytes stw_begin writes at 8; a file made of it and the data reads back. */
static void header_align(void) {
    static const int64_t shp[2][1] = {{3}, {5}};
    for (size_t align = 8; align <= 128; align *= 2) {
        char dir[600], path[700];
        snprintf(dir, sizeof dir, "%s/align%zu", root, align);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        stw_file *w  = NULL;
        char     *h  = NULL;
        size_t    n  = 0;
        k3_status st = stw_create(path, &w);
        if (!st)
            st = stw_add(w, "a", ST_F32, 1, shp[0]);
        if (!st)
            st = stw_add(w, "b", ST_U8, 1, shp[1]);
        if (!st)
            st = stw_header(w, align, &h, &n);
        uint64_t hl = 0;
        for (int b = 0; h && b < 8; b++)
            hl |= (uint64_t)(unsigned char)h[b] << (8 * b);
        T_CHECK(!st && n % align == 0 && hl == n - 8 && h[n - 1] != 0 && stw_file_bytes(w) == n + 17,
                "stw_header align %zu: %zu bytes, length field %llu, data after it", align, n,
                (unsigned long long)hl);
        FILE *f  = h ? fopen(path, "wb") : NULL;
        int   ok = f && fwrite(h, 1, n, f) == n && fwrite("0123456789abcdefg", 1, 17, f) == 17;
        if (f)
            ok &= fclose(f) == 0;
        st_dir          *sf = NULL;
        const st_tensor *b  = NULL;
        T_CHECK(ok && st_open(dir, &sf) == K3_OK && (b = st_find(sf, "b")) && b->nbytes == 5 &&
                    b->offset == n + 12,
                "align %zu: the file reads back, b after a's 12 bytes (%s)", align, sf ? "ok" : k3_errmsg());
        st_close(sf);
        free(h);
        stw_free(w);
    }
}

/* Holes (stw_skip) read back as zeros and data as written, whether the reader takes a sparse
 * shard's holes from the drive or fills them itself (st.c read_sparse): a hole in the middle, a
 * hole at the end (not written: the file's length), a read across data, hole and data; the bytes
 * are counted as read; a file cut short after the open still fails naming the file. */
static void sparse(void) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/sparse", root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const int64_t  na = 10000, nb = 3 << 20, nc = 5000, nd = 2 << 20; /* holes of several MB */
    static uint8_t a[10000], c[5000];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = (uint8_t)((i * 13 + 1) | 1);
    for (size_t i = 0; i < sizeof c; i++)
        c[i] = (uint8_t)((i * 7 + 3) | 1);
    stw_file     *w      = NULL;
    k3_status     st     = stw_create(path, &w);
    const int64_t shp[4] = {na, nb, nc, nd};
    for (int i = 0; i < 4 && !st; i++)
        st = stw_add(w, (const char *[]){"a", "b", "c", "d"}[i], ST_U8, 1, &shp[i]);
    if (!st && !(st = stw_begin(w)) && !(st = stw_write(w, a, sizeof a)) &&
        !(st = stw_skip(w, (uint64_t)nb)) && !(st = stw_write(w, c, sizeof c)) &&
        !(st = stw_skip(w, (uint64_t)nd)))
        st = stw_end(w);
    stw_free(w);
    T_CHECK(!st, "a shard with a hole of 3 MB between data and 2 MB at its end (%s)",
            st ? k3_errmsg() : "ok");
    struct stat sb;
    if (stat(path, &sb) == 0 && (uint64_t)sb.st_blocks * 512 >= (uint64_t)sb.st_size)
        printf("SKIP: this filesystem wrote no holes (%lld of %lld bytes on disk): read as plain data\n",
               (long long)sb.st_blocks * 512, (long long)sb.st_size);
    st_dir *d = NULL;
    T_CHECK(st_open(dir, &d) == K3_OK, "the sparse shard opens (%s)", d ? "ok" : k3_errmsg());
    if (!d)
        return;
    const st_tensor *t[4] = {st_find(d, "a"), st_find(d, "b"), st_find(d, "c"), st_find(d, "d")};
    T_CHECK(t[0] && t[1] && t[2] && t[3], "four tensors");
    if (!(t[0] && t[1] && t[2] && t[3])) {
        st_close(d);
        return;
    }
    uint64_t all = t[3]->offset + t[3]->nbytes - t[0]->offset;
    uint8_t *buf = malloc(all);
    T_CHECK(buf != NULL, "buffer");
    if (!buf) {
        st_close(d);
        return;
    }
    for (int i = 0; i < 4; i++) {
        memset(buf, 0xAA, all);
        st     = st_read(d, t[i], buf);
        int ok = !st;
        for (uint64_t k = 0; ok && k < t[i]->nbytes; k++)
            ok = buf[k] == (i == 0 ? a[k] : i == 2 ? c[k] : 0);
        T_CHECK(ok && buf[t[i]->nbytes] == 0xAA,
                "%s (%s, %llu bytes): read back exactly, nothing past it (%s)", t[i]->name,
                i % 2 ? "a hole" : "data", (unsigned long long)t[i]->nbytes, st ? k3_errmsg() : "ok");
    }
    /* one read from the middle of a to the middle of d: data, hole, data, hole */
    st_io io0, io1;
    st_io_get(d, &io0);
    uint64_t from = t[0]->offset + 5000, n = all - 5000 - (uint64_t)nd / 2;
    memset(buf, 0xAA, all);
    st     = st_read_at(d, t[0]->shard, buf, n, from);
    int ok = !st;
    for (uint64_t k = 0; ok && k < n; k++) {
        uint64_t o    = from + k;
        uint8_t  want = o < t[1]->offset                        ? a[o - t[0]->offset]
                        : o >= t[2]->offset && o < t[3]->offset ? c[o - t[2]->offset]
                                                                : 0;
        ok            = buf[k] == want;
    }
    st_io_get(d, &io1);
    T_CHECK(ok && io1.bytes - io0.bytes == n,
            "a read across data, hole, data and hole: %llu bytes exact, counted "
            "as read (%llu) (%s)",
            (unsigned long long)n, (unsigned long long)(io1.bytes - io0.bytes), st ? k3_errmsg() : "ok");
    /* cut inside d after the open: its read fails and names the file */
    T_CHECK(truncate(path, (off_t)(8 + t[3]->offset + (uint64_t)nd / 2)) == 0, "truncate the shard inside d");
    st = st_read(d, t[3], buf);
    T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), "model.safetensors") && strstr(k3_errmsg(), "end of file"),
            "d cut short after the open: an error naming the file and the end (%s)",
            st ? k3_errmsg() : "none");
    free(buf);
    st_close(d);
}

int main(void) {
    const char *tmp = getenv("K3_TMP");
    snprintf(root, sizeof root, "%s/test-st-write.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        T_CHECK(0, "mkdtemp %s", root);
        return t_done();
    }
    T_CHECK(st_dtype_size(ST_BF16) == 2 && !strcmp(st_dtype_name(ST_U8), "U8"), "dtype table");
    roundtrip();
    misuse();
    header_align();
    sparse();
    return t_done();
}
