/* test-wmap.c: the index's fast weight_map scanner (src/format/wmap.c) against jansson, the
 * reader it stands in for. For each input: what the scanner must do (read it, or stop and leave
 * it to jansson), what jansson says (accepts or refuses), and, where the scanner reads it, the
 * same entries as jansson's (names and files byte for byte, in order). Inputs: JSON escapes,
 * \u sequences and surrogate pairs, raw UTF-8 (valid and each invalid kind), \u0000, duplicate
 * keys (also one spelled with an escape), whitespace, numbers at jansson's limits, wrong types,
 * truncations; then 3,000 random damages of a valid index (the scanner may stop where jansson
 * accepts, never the other way round, and never with other entries); then corrupt indexes through
 * st_open: the error names the index file and the byte offset.
 */
#include "st-file.h"
#include "st.h"
#include "test.h"
#include "wmap.h"

#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[512];

/* 1 when the two maps hold the same entries in the same order */
static int same(const wm_map *a, const wm_map *b) {
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->e[i].name, b->e[i].name) || strcmp(a->e[i].file, b->e[i].file))
            return 0;
    return 1;
}

enum { SCAN = 1, STOP = 2 };  /* what the scanner must do */
enum { J_OK = 1, J_ERR = 2 }; /* what jansson (wm_parse_full) says */

/* One input: the scanner's and jansson's verdicts as expected; where both read it, the same
 * entries; want_n >= 0: that many entries, and (first_name, first_file) the first one decoded. */
static void one(const char *what, const char *text, size_t len, int want_scan, int want_j, long want_n,
                const char *first_name, const char *first_file) {
    char *copy = malloc(len + 1);
    memcpy(copy, text, len);
    wm_map    s = {0}, j = {0};
    size_t    at = 0;
    int       rc = wm_scan(copy, len, &s, &at);
    k3_status st = wm_parse_full("idx.json", text, len, &j);
    T_CHECK(rc == 0 ? want_scan == SCAN : want_scan == STOP,
            "%s: the scanner %s (expected %s; stopped at %zu)", what, rc == 0 ? "reads it" : "stops",
            want_scan == SCAN ? "reads it" : "stops", rc ? at : 0);
    T_CHECK(st == K3_OK ? want_j == J_OK : want_j == J_ERR, "%s: jansson %s (expected %s) (%s)", what,
            st == K3_OK ? "accepts" : "refuses", want_j == J_OK ? "accepts" : "refuses",
            st == K3_OK ? "" : k3_errmsg());
    if (rc == 0 && st == K3_OK)
        T_CHECK(same(&s, &j), "%s: the scanner's %zu entries are jansson's %zu", what, s.n, j.n);
    if (want_n >= 0 && st == K3_OK)
        T_CHECK(j.n == (size_t)want_n && (!first_name || (j.n && !strcmp(j.e[0].name, first_name) &&
                                                          !strcmp(j.e[0].file, first_file))),
                "%s: %ld entries, the first decoded as expected", what, want_n);
    wm_free(&s);
    wm_free(&j);
    free(copy);
}

#define ONE(what, lit, sc, jj, n, name, file) one(what, lit, sizeof lit - 1, sc, jj, n, name, file)

/* wm_map.names, from either reader: every entry's name without the prefix finds the first entry
 * with it; a name no entry has is not found. */
static void names_table(void) {
    static const char text[] = "{\"weight_map\": {\"language_model.a\": \"s1\", \"b\": \"s2\", "
                               "\"a\": \"s3\", \"language_model.c.d\": \"s4\"}}";
    for (int full = 0; full < 2; full++) {
        char  *copy = strdup(text);
        wm_map m    = {0};
        size_t at;
        int    ok = full ? wm_parse_full("idx.json", text, sizeof text - 1, &m) == K3_OK
                         : wm_scan(copy, sizeof text - 1, &m, &at) == 0;
        T_CHECK(ok && m.n == 4, "names table (%s): the index read, %zu entries", full ? "jansson" : "scanner",
                m.n);
        if (ok && m.n == 4) {
            long a = k3_names_find(&m.names, "a"), b = k3_names_find(&m.names, "b"),
                 cd = k3_names_find(&m.names, "c.d"), x = k3_names_find(&m.names, "language_model.a"),
                 y = k3_names_find(&m.names, "e");
            T_CHECK(a == 0 && b == 1 && cd == 3 && x < 0 && y < 0 && !strcmp(m.e[3].key, "c.d") &&
                        !strcmp(m.e[1].key, "b"),
                    "names table (%s): a -> %ld (the first, language_model.a), b -> %ld, c.d -> %ld, "
                    "the full name %ld and e %ld not found",
                    full ? "jansson" : "scanner", a, b, cd, x, y);
        }
        wm_free(&m);
        free(copy);
    }
}

static void tricky(void) {
    ONE("plain index",
        "{\"metadata\": {\"total_size\": 123}, \"weight_map\": {\"a\": \"s1\", \"b\": \"s2\"}}", SCAN, J_OK,
        2, "a", "s1");
    ONE("whitespace everywhere", " \t\r\n{ \n\"weight_map\"\t:\r\n{ \"a\" :\"s\"\n,\"b\":\"t\" }\t} \n\r",
        SCAN, J_OK, 2, "a", "s");
    ONE("the eight one-letter escapes", "{\"weight_map\": {\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\": \"s\"}}",
        SCAN, J_OK, 1, "a\"b\\c/d\be\ff\ng\rh\ti", "s");
    ONE("\\u escapes (1, 2 and 3 UTF-8 bytes, upper and lower hex)",
        "{\"weight_map\": {\"\\u0041\\u00e9\\u20AC.x\": \"\\u0073\"}}", SCAN, J_OK, 1,
        "A\xc3\xa9\xe2\x82\xac.x", "s");
    ONE("surrogate pair", "{\"weight_map\": {\"\\ud83d\\ude00\": \"s\"}}", SCAN, J_OK, 1, "\xf0\x9f\x98\x80",
        "s");
    ONE("lone high surrogate", "{\"weight_map\": {\"\\ud83d\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("lone low surrogate", "{\"weight_map\": {\"\\ude00x\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("high surrogate before a non-surrogate", "{\"weight_map\": {\"\\ud83d\\u0041\": \"s\"}}", STOP, J_ERR,
        -1, 0, 0);
    ONE("\\u0000", "{\"weight_map\": {\"a\\u0000b\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("bad escape letter", "{\"weight_map\": {\"a\\x\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("short \\u escape", "{\"weight_map\": {\"a\\u12\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("raw UTF-8 (2, 3, 4 bytes)", "{\"weight_map\": {\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\": \"s\"}}",
        SCAN, J_OK, 1, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "s");
    ONE("DEL and the highest code point", "{\"weight_map\": {\"\x7f\xf4\x8f\xbf\xbf\": \"s\"}}", SCAN, J_OK,
        1, "\x7f\xf4\x8f\xbf\xbf", "s");
    ONE("UTF-8: a bad continuation byte", "{\"weight_map\": {\"\xc3\x28\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("UTF-8: overlong 2 bytes", "{\"weight_map\": {\"\xc0\xaf\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("UTF-8: overlong 3 bytes", "{\"weight_map\": {\"\xe0\x80\xaf\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("UTF-8: a surrogate", "{\"weight_map\": {\"\xed\xa0\x80\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("UTF-8: above U+10FFFF", "{\"weight_map\": {\"\xf4\x90\x80\x80\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("UTF-8: cut at the end of the text", "{\"weight_map\": {\"\xe2\x82", STOP, J_ERR, -1, 0, 0);
    ONE("a raw control character", "{\"weight_map\": {\"a\tb\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("duplicate tensor name", "{\"weight_map\": {\"a\": \"s\", \"b\": \"s\", \"a\": \"t\"}}", STOP, J_ERR,
        -1, 0, 0);
    ONE("duplicate spelled with an escape", "{\"weight_map\": {\"ab\": \"s\", \"\\u0061b\": \"s\"}}", STOP,
        J_ERR, -1, 0, 0);
    /* the duplicate check is the table of names without the prefix (wm_map.names): a name with
     * and without it is two names, the same full name twice a duplicate in either order */
    ONE("a name with and without language_model.",
        "{\"weight_map\": {\"x\": \"s\", \"language_model.x\": \"t\"}}", SCAN, J_OK, 2, "x", "s");
    ONE("language_model.x twice after x",
        "{\"weight_map\": {\"x\": \"s\", \"language_model.x\": \"s\", \"language_model.x\": \"s\"}}", STOP,
        J_ERR, -1, 0, 0);
    ONE("x twice after language_model.x",
        "{\"weight_map\": {\"language_model.x\": \"s\", \"x\": \"s\", \"y\": \"s\", \"x\": \"s\"}}", STOP,
        J_ERR, -1, 0, 0);
    ONE("language_model.x twice",
        "{\"weight_map\": {\"language_model.x\": \"s\", \"language_model.x\": \"s\"}}", STOP, J_ERR, -1, 0,
        0);
    ONE("weight_map twice", "{\"weight_map\": {\"a\": \"s\"}, \"weight_map\": {\"b\": \"s\"}}", STOP, J_ERR,
        -1, 0, 0);
    ONE("duplicate key in metadata", "{\"metadata\": {\"x\": 1, \"x\": 2}, \"weight_map\": {\"a\": \"s\"}}",
        STOP, J_ERR, -1, 0, 0);
    ONE("metadata of every kind of value",
        "{\"metadata\": {\"n\": -0, \"f\": -1.5e-3, \"e\": 2E+10, \"a\": [1, [true, false, null], {}], "
        "\"s\": "
        "\"\\u00e9\", \"o\": {\"k\": []}}, \"weight_map\": {\"a\": \"s\"}, \"z\": null}",
        SCAN, J_OK, 1, "a", "s");
    ONE("integer of 18 digits", "{\"m\": 999999999999999999, \"weight_map\": {\"a\": \"s\"}}", SCAN, J_OK, 1,
        "a", "s");
    ONE("integer beyond long long", "{\"m\": 12345678901234567890, \"weight_map\": {\"a\": \"s\"}}", STOP,
        J_ERR, -1, 0, 0);
    ONE("integer of 19 digits within long long",
        "{\"m\": 1234567890123456789, \"weight_map\": {\"a\": \"s\"}}", STOP, J_OK, 1, "a", "s");
    ONE("real overflow", "{\"m\": 1e400, \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("real underflow", "{\"m\": 1e-400, \"weight_map\": {\"a\": \"s\"}}", SCAN, J_OK, 1, "a", "s");
    ONE("leading zero", "{\"m\": 01, \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("a lone minus", "{\"m\": -, \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("no digit after the point", "{\"m\": 1., \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("a bare word", "{\"m\": tru, \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("a word run on", "{\"m\": truex, \"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("nesting 40 deep (jansson allows 2048)",
        "{\"m\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], "
        "\"weight_map\": "
        "{\"a\": \"s\"}}",
        STOP, J_OK, 1, "a", "s");
    ONE("metadata of 17 members",
        "{\"m\": "
        "{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,\"k\":1,\"l\":1,"
        "\"m\":1,\"n\":1,\"o\":1,\"p\":1,\"q\":1}, \"weight_map\": {\"a\": \"s\"}}",
        STOP, J_OK, 1, "a", "s");
    ONE("empty weight_map", "{\"weight_map\": {}}", SCAN, J_OK, 0, 0, 0);
    ONE("no weight_map", "{\"metadata\": {}}", STOP, J_ERR, -1, 0, 0);
    ONE("weight_map an array", "{\"weight_map\": [\"a\"]}", STOP, J_ERR, -1, 0, 0);
    ONE("a file name that is a number", "{\"weight_map\": {\"a\": 1}}", STOP, J_ERR, -1, 0, 0);
    ONE("a file name that is null", "{\"weight_map\": {\"a\": null}}", STOP, J_ERR, -1, 0, 0);
    ONE("top level an array", "[{\"weight_map\": {\"a\": \"s\"}}]", STOP, J_ERR, -1, 0, 0);
    ONE("trailing comma in weight_map", "{\"weight_map\": {\"a\": \"s\",}}", STOP, J_ERR, -1, 0, 0);
    ONE("trailing comma at the top", "{\"weight_map\": {\"a\": \"s\"},}", STOP, J_ERR, -1, 0, 0);
    ONE("text after the object", "{\"weight_map\": {\"a\": \"s\"}} x", STOP, J_ERR, -1, 0, 0);
    ONE("a second object after it", "{\"weight_map\": {\"a\": \"s\"}}{}", STOP, J_ERR, -1, 0, 0);
    ONE("a NUL byte after it", "{\"weight_map\": {\"a\": \"s\"}}\0", STOP, J_ERR, -1, 0, 0);
    ONE("missing colon", "{\"weight_map\": {\"a\" \"s\"}}", STOP, J_ERR, -1, 0, 0);
    ONE("single quotes", "{'weight_map': {'a': 's'}}", STOP, J_ERR, -1, 0, 0);
    ONE("cut in a string", "{\"weight_map\": {\"a\": \"s", STOP, J_ERR, -1, 0, 0);
    ONE("cut after a member", "{\"weight_map\": {\"a\": \"s\"", STOP, J_ERR, -1, 0, 0);
    ONE("empty text", "", STOP, J_ERR, -1, 0, 0);
    ONE("a UTF-8 byte order mark", "\xef\xbb\xbf{\"weight_map\": {\"a\": \"s\"}}", STOP, J_ERR, -1, 0, 0);
}

/* base (n bytes) into t with damage r of a series: by r % 3, one byte changed to one of the
 * characters that matter to a JSON reader, one removed, or the text cut; its length. */
static size_t damage(const char *base, size_t n, char *t, unsigned *seed, int r) {
    static const char pick[] = "{}[]\",:\\u0aZ \n\t\x01\x80\xc3\xed\xf4-+.eE9";
    memcpy(t, base, n);
    *seed      = *seed * 1103515245u + 12345u;
    size_t pos = (*seed >> 8) % n;
    *seed      = *seed * 1103515245u + 12345u;
    if (r % 3 == 0) {
        t[pos] = pick[(*seed >> 8) % (sizeof pick - 1)];
        return n;
    }
    if (r % 3 == 1) {
        memmove(t + pos, t + pos + 1, n - pos - 1);
        return n - 1;
    }
    return pos;
}

/* Random damage to a valid index: a byte changed to one of the characters that matter, one
 * removed, or the text cut. The scanner may stop where jansson accepts (it then decides), never
 * read what jansson refuses, never give other entries. */
static void damaged(void) {
    static const char base[] =
        "{\n  \"metadata\": {\"total_size\": 1560085955072, \"v\": [1.5, true, null]},\n  \"weight_map\": {\n"
        "    \"language_model.model.layers.0.mlp.gate_proj.weight\": \"model-00001-of-000096.safetensors\",\n"
        "    \"na\\u00efve\\ud83d\\ude00\": \"model-00002-of-000096.safetensors\",\n"
        "    \"esc\\\"\\\\\\/\\n\": \"model-00002-of-000096.safetensors\",\n"
        "    \"vision_tower.x\": \"model-00096-of-000096.safetensors\"\n  }\n}\n";
    size_t   n = sizeof base - 1;
    char    *t = malloc(n + 1), *copy = malloc(n + 1);
    int      agree = 0, scan_more = 0, jansson_only = 0, both_refuse = 0, bad = 0;
    unsigned seed = 12345;
    for (int r = 0; r < 3000; r++) {
        size_t len = damage(base, n, t, &seed, r);
        memcpy(copy, t, len);
        wm_map    s = {0}, j = {0};
        size_t    at;
        int       rc = wm_scan(copy, len, &s, &at);
        k3_status st = wm_parse_full("idx.json", t, len, &j);
        if (rc == 0 && st != K3_OK)
            scan_more++;
        else if (rc == 0 && !same(&s, &j))
            bad++;
        else if (rc == 0)
            agree++;
        else if (st == K3_OK)
            jansson_only++;
        else
            both_refuse++;
        wm_free(&s);
        wm_free(&j);
    }
    T_CHECK(scan_more == 0 && bad == 0 && agree > 100 && both_refuse > 1000,
            "3,000 damaged indexes: %d read alike, %d left to jansson which accepts, %d refused by both; the "
            "scanner read %d that jansson refuses and gave other entries for %d",
            agree, jansson_only, both_refuse, scan_more, bad);
    free(t);
    free(copy);
}

/* Through st_open: a damaged index is refused naming the index file and the byte offset (jansson's:
 * the bytes read when it stopped, so just past the offending token: 32 is the end of the cut text,
 * 40 just past the ']' at byte 39); an index the scanner reads opens as before (escaped names
 * found in the shard). */
static void via_st_open(void) {
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/idx", root);
    mkdir(dir, 0755);
    tsf w = {0};
    tsf_add(&w, "a\"b", "F32", 1, (int64_t[]){2}, NULL);
    tsf_add(&w, "caf\xc3\xa9", "F32", 1, (int64_t[]){2}, NULL);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    T_CHECK(tsf_write(&w, p) == 0, "shard written");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    static const char good[] =
        "{\"weight_map\": {\"a\\\"b\": \"s1.safetensors\", \"caf\\u00e9\": \"s\\u0031.safetensors\"}}";
    tsf_bytes(p, good, sizeof good - 1);
    st_dir   *d  = NULL;
    k3_status st = st_open(dir, &d);
    T_CHECK(st == K3_OK && d && st_find(d, "caf\xc3\xa9") && st_find(d, "a\"b"),
            "an index with escaped names and file names opens; both tensors found (%s)",
            st ? k3_errmsg() : "ok");
    st_close(d);
    static const struct {
        const char *what, *text, *want;
    } bad[] = {
        {"cut in the middle", "{\"weight_map\": {\"a\\\"b\": \"s1.safe", "(byte 32): premature end"},
        {"a lone surrogate", "{\"weight_map\": {\"\\ud800\": \"s1.safetensors\"}}", "byte "},
        {"a duplicate name", "{\"weight_map\": {\"x\": \"s1.safetensors\", \"x\": \"s1.safetensors\"}}",
         "duplicate"},
        {"a stray character", "{\"weight_map\": {\"x\": \"s1.safetensors\"} ]", "(byte 40)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tsf_bytes(p, bad[i].text, strlen(bad[i].text));
        d  = NULL;
        st = st_open(dir, &d);
        T_CHECK(st != K3_OK && !d && strstr(k3_errmsg(), "model.safetensors.index.json: line 1 column") &&
                    strstr(k3_errmsg(), bad[i].want),
                "index %s: refused naming the file and '%s' (%s)", bad[i].what, bad[i].want, k3_errmsg());
        st_close(d);
    }
}

/* ==== shard headers (wm_scan_header) ==== */

/* The entries as text, one line each: name, dtype, shape, data_offsets. */
static void put_entry(k3_buf *b, const char *name, const char *dtype, int nd, const int64_t *shape,
                      uint64_t begin, uint64_t end) {
    char t[64];
    (void)k3_buf_add(b, name, strlen(name) + 1); /* the NUL: names may hold any other byte */
    (void)k3_buf_add(b, dtype, strlen(dtype) + 1);
    for (int i = 0; i < nd; i++)
        (void)k3_buf_add(b, t, (size_t)snprintf(t, sizeof t, "%lld,", (long long)shape[i]));
    (void)k3_buf_add(
        b, t,
        (size_t)snprintf(t, sizeof t, "|%llu-%llu\n", (unsigned long long)begin, (unsigned long long)end));
}

static int scan_cb(void *ud, const wm_tensor *t) {
    put_entry(ud, t->name, t->dtype, t->ndim, t->shape, t->begin, t->end);
    return 0;
}

/* jansson's reading as st.c's full parse takes it: 0 and the entries, or -1 (refused: not JSON, a
 * duplicate key, or an entry not of the form: dtype a string, shape at most 8 non-negative
 * integers, data_offsets two) */
static int jansson_header(const char *text, size_t len, k3_buf *out) {
    json_error_t e;
    json_t      *jroot = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    int          bad   = !json_is_object(jroot);
    const char  *key;
    json_t      *v;
    if (!bad)
        json_object_foreach(jroot, key, v) {
            if (!strcmp(key, "__metadata__"))
                continue;
            json_t *d = json_object_get(v, "dtype"), *s = json_object_get(v, "shape"),
                   *o = json_object_get(v, "data_offsets");
            int64_t sh[ST_MAX_DIMS], off[2];
            size_t  nd = json_array_size(s);
            bad |= !json_is_object(v) || !json_is_string(d) || !json_is_array(s) || nd > ST_MAX_DIMS ||
                   !json_is_array(o) || json_array_size(o) != 2;
            for (size_t i = 0; !bad && i < nd + 2; i++) {
                json_t *x = i < nd ? json_array_get(s, i) : json_array_get(o, i - nd);
                bad |= !json_is_integer(x) || json_integer_value(x) < 0;
                if (!bad)
                    *(i < nd ? &sh[i] : &off[i - nd]) = json_integer_value(x);
            }
            if (bad)
                break;
            put_entry(out, key, json_string_value(d), (int)nd, sh, (uint64_t)off[0], (uint64_t)off[1]);
        }
    json_decref(jroot);
    return bad ? -1 : 0;
}

/* 0 both read it alike, 1 the scanner stops and jansson reads it, 2 both refuse, 3 the scanner
 * reads what jansson refuses, 4 both read it but the entries differ */
static int header_verdict(const char *text, size_t len) {
    char  *copy = malloc(len + 1);
    k3_buf a = {0}, b = {0};
    size_t at;
    memcpy(copy, text, len);
    int rs = wm_scan_header(copy, len, scan_cb, &a, &at), rj = jansson_header(text, len, &b);
    int v = rs ? (rj ? 2 : 1) : rj ? 3 : a.n != b.n || (a.n && memcmp(a.p, b.p, a.n)) ? 4 : 0;
    free(copy);
    free(a.p);
    free(b.p);
    return v;
}

static void headers(void) {
    static const struct {
        const char *what, *text;
        int         want; /* header_verdict */
    } c[] = {
        {"plain",
         "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],"
         "\"data_offsets\":[0,24]}}",
         0},
        {"no tensor", " {} ", 0},
        {"members in any order, one extra, spaces, an escaped name",
         "{ \"n\\u00e9\\\"\" : { \"shape\" : [ ] , \"x\" : [1, {\"y\": null}], \"data_offsets\" : [ 7 , 9 ] ,"
         " \"dtype\" : \"U8\" } , \"__metadata__\" : [1] }   ",
         0},
        {"18 digits", "{\"a\":{\"dtype\":\"U8\",\"shape\":[999999999999999999],\"data_offsets\":[0,1]}}", 0},
        {"eight dimensions", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         0},
        {"an unknown dtype (st.c's check, not the reader's)",
         "{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[5,1]}}", 0},
        {"19 digits (jansson reads them)",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1234567890123456789],\"data_offsets\":[0,1]}}", 1},
        {"-0 (jansson reads 0)", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 1},
        {"a negative dimension", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 2},
        {"a real dimension", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2.0],\"data_offsets\":[0,2]}}", 2},
        {"a real of 22 digits",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2555555555555555055555.5],"
         "\"data_offsets\":[0,2]}}",
         2},
        {"an exponent", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e0]}}", 2},
        {"nine dimensions", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         2},
        {"three offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 2},
        {"one offset", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 2},
        {"a dtype that is a number", "{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 2},
        {"no shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 2},
        {"an empty entry", "{\"a\":{}}", 2},
        {"an entry that is an array", "{\"a\":[1]}", 2},
        {"a tensor twice",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
         2},
        {"a tensor twice, once escaped",
         "{\"ab\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"\\u0061b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
         2},
        {"__metadata__ twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 2},
        {"dtype twice in an entry",
         "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[0],"
         "\"data_offsets\":[0,0]}}",
         2},
        {"a NUL after the object", "{}\0", 2},
        {"cut short", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_off", 2},
        {"not an object", "[]", 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        size_t len = strlen(c[i].text) + (strstr(c[i].what, "NUL") ? 1 : 0);
        int    v   = header_verdict(c[i].text, len);
        T_CHECK(v == c[i].want,
                "header %s: verdict %d, expected %d (0 read alike, 1 left to jansson, 2 both "
                "refuse)",
                c[i].what, v, c[i].want);
    }
    /* random damage to a valid header, as damaged() for the index */
    static const char base[] =
        "{\"__metadata__\":{\"format\":\"pt\",\"n\":[1.5,true,null]},\n"
        "\"model.layers.0.mlp.gate_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[90,100],"
        "\"data_offsets\":[0,18000]},\n"
        "\"na\\u00efve\\ud83d\\ude00\":{\"shape\":[3, 4],\"dtype\":\"F32\",\"data_offsets\":[18000,18048]},\n"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[18048,18049],\"x\":{\"y\":\"z\"}}}   ";
    size_t   n        = sizeof base - 1;
    char    *t        = malloc(n + 1);
    int      count[5] = {0};
    unsigned seed     = 4242;
    for (int r = 0; r < 3000; r++) {
        size_t len = damage(base, n, t, &seed, r);
        count[header_verdict(t, len)]++;
    }
    T_CHECK(
        count[3] == 0 && count[4] == 0 && count[0] > 100 && count[2] > 1000,
        "3,000 damaged headers: %d read alike, %d left to jansson which reads them, %d refused by both; the "
        "scanner read %d that jansson refuses and gave other entries for %d",
        count[0], count[1], count[2], count[3], count[4]);
    free(t);
}

/* Through st_open: a shard's entries that the index does not name are checked but not kept as
 * tensors (10,000 zero-length ones beside two real ones); a bad one among them is still refused;
 * without an index (model.safetensors) every entry is a tensor. */
static void header_via_st_open(void) {
    char dir[600], p[700], name[32];
    snprintf(dir, sizeof dir, "%s/hdr", root);
    mkdir(dir, 0755);
    tsf w = {0};
    tsf_add(&w, "a", "F32", 1, (int64_t[]){2}, NULL);
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "pad.%d", i);
        tsf_add(&w, name, "U8", 1, (int64_t[]){0}, NULL);
    }
    tsf_add(&w, "b", "BF16", 2, (int64_t[]){3, 2}, NULL);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    T_CHECK(tsf_write(&w, p) == 0, "a shard of 10,002 entries written");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    static const char idx[] = "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\"}}";
    tsf_bytes(p, idx, sizeof idx - 1);
    st_dir   *d  = NULL;
    k3_status st = st_open(dir, &d);
    T_CHECK(st == K3_OK && st_n_tensors(d) == 2 && st_find(d, "a") && st_find(d, "b") &&
                st_find(d, "b")->nbytes == 12 && !st_find(d, "pad.7"),
            "with an index naming 2 of the shard's 10,002 entries: those 2 kept (%d tensors; %s)",
            d ? st_n_tensors(d) : -1, st ? k3_errmsg() : "ok");
    st_close(d);
    /* the index against the headers: each error names the file, the tensor and the shards */
    tsf_add(&w, "a", "F32", 1, (int64_t[]){2}, NULL);
    tsf_add(&w, "z", "F32", 1, (int64_t[]){1}, NULL);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    T_CHECK(tsf_write(&w, p) == 0, "a second shard (a, z) written");
    static const struct {
        const char *what, *index, *want; /* want NULL: opens */
    } x[] = {
        {"a tensor the header lacks",
         "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s1.safetensors\"}}",
         "s1.safetensors: tensor 'c' is in the index but not in the shard's header"},
        {"a tensor mapped to another shard",
         "{\"weight_map\": {\"pad.0\": \"s1.safetensors\", \"b\": \"s2.safetensors\", \"z\": "
         "\"s2.safetensors\"}}",
         "model.safetensors.index.json: tensor 'b' is mapped to s2.safetensors but stored in s1.safetensors"},
        {"a tensor in two shards", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"z\": \"s2.safetensors\"}}",
         "s2.safetensors: tensor 'a' is also in s1.safetensors"},
        {"names with the prefix the headers lack",
         "{\"weight_map\": {\"language_model.b\": \"s1.safetensors\", \"z\": \"s2.safetensors\"}}", NULL},
    };
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) {
        tsf_bytes(p, x[i].index, strlen(x[i].index));
        d  = NULL;
        st = st_open(dir, &d);
        if (x[i].want)
            T_CHECK(st == K3_ERR_FORMAT && !d && !strcmp(k3_errmsg(), x[i].want), "%s: refused (%s)",
                    x[i].what, k3_errmsg());
        else
            T_CHECK(st == K3_OK && st_n_tensors(d) == 2 && st_find(d, "b") && st_find(d, "z") &&
                        !st_find(d, "a"),
                    "%s: opens with the 2 tensors the index names (%s)", x[i].what, st ? k3_errmsg() : "ok");
        st_close(d);
    }
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    unlink(p);
    char q[700];
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    T_CHECK(rename(p, q) == 0, "the shard renamed model.safetensors");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    unlink(p);
    d  = NULL;
    st = st_open(dir, &d);
    T_CHECK(st == K3_OK && st_n_tensors(d) == 10002 && st_find(d, "pad.9999"),
            "the same file as model.safetensors, no index: all 10,002 entries are tensors (%d; %s)",
            d ? st_n_tensors(d) : -1, st ? k3_errmsg() : "ok");
    st_close(d);
}

int main(void) {
    const char *tmp = getenv("K3_TMP");
    snprintf(root, sizeof root, "%s/test-wmap.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        T_CHECK(0, "mkdtemp %s", root);
        return t_done();
    }
    tricky();
    names_table();
    damaged();
    via_st_open();
    headers();
    header_via_st_open();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd))
        T_SKIP("could not remove %s", root);
    return t_done();
}
