/* test-tok.c: vocabulary loading errors, pre-tokenizer pieces, BPE (heap vs tiktoken's
 * quadratic loop), specials, the Kimi input cutting, round trips and the streaming
 * decoder. Vocabularies are built here in memory (the tiktoken cross-check on the
 * real o200k ranks is tests/t-tiktoken.sh). */
#include "test.h"
#include "tok.h"
#include "tok-vocab.h"

#include <stdlib.h>
#include <sys/stat.h>

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* tiktoken.model text: the 256 bytes (rank = byte) then the given extra tokens. */
static char *model_text(const char *const *extra, size_t n_extra) {
    t_vocab v = {0};
    t_vocab_bytes_words(&v, extra, n_extra);
    return v.p;
}

static k3_tok *mk(const char *const *extra, size_t n, enum tok_family f) {
    char     *m  = model_text(extra, n);
    k3_tok   *t  = NULL;
    k3_status st = tok_load_mem(m, strlen(m), "mem.model", NULL, NULL, f, &t);
    if (st)
        printf("load failed: %s\n", k3_errmsg());
    free(m);
    return t;
}

static int load_err(const char *model, const char *cfg, const char *want1, const char *want2) {
    k3_tok   *t = NULL;
    k3_status st =
        tok_load_mem(model, strlen(model), "v/tiktoken.model", cfg, "v/tokenizer_config.json", TOK_KIMI, &t);
    k3_tok_free(t);
    int ok = st == K3_ERR_FORMAT && strstr(k3_errmsg(), want1) && (!want2 || strstr(k3_errmsg(), want2));
    if (!ok)
        printf("  got status %d: %s\n", st, k3_errmsg());
    return ok;
}

/* pre-tokenizer pieces of s joined with '|' */
static void pieces(enum tok_family f, const char *s, char *out) {
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n;) {
        size_t e = tok_pre_next(f, (const uint8_t *)s, n, i);
        if (i)
            out[o++] = '|';
        memcpy(out + o, s + i, e - i);
        o += e - i;
        i = e;
    }
    out[o] = 0;
}

/* printable copy: control bytes as \xNN (keeps PASS/FAIL lines on one line) */
static const char *esc(const char *s, char *buf) {
    char *o = buf;
    for (; *s; s++)
        o += (unsigned char)*s < 0x20 ? sprintf(o, "\\x%02x", (unsigned char)*s) : (*o = *s, 1);
    *o = 0;
    return buf;
}

static int ids_eq(const k3_ids *a, const k3_ids *b) {
    return a->n == b->n && (a->n == 0 || !memcmp(a->v, b->v, a->n * sizeof *a->v));
}

/* ---- tests ------------------------------------------------------------------ */

/* tokenizer_config.json naming the chat format's four reserved ids, for model_text's vocabularies */
static const char cfg_ok[] =
    "{\"added_tokens_decoder\": {\"259\": {\"content\": \"<|open|>\"}, \"260\": "
    "{\"content\": \"<|close|>\"},"
    " \"261\": {\"content\": \"<|sep|>\"}, \"258\": {\"content\": \"<|end_of_msg|>\"}}}";

static void test_vocab_errors(void) {
    char   *good = model_text((const char *const[]){"ab", "abc"}, 2);
    k3_tok *t    = NULL;
    T_CHECK(tok_load_mem(good, strlen(good), "m", cfg_ok, "c", TOK_KIMI, &t) == K3_OK && t,
            "good vocab loads (%s)", k3_errmsg());
    if (t) {
        T_CHECK(k3_tok_n_vocab(t) == 258 + 256, "n_vocab = base + 256 reserved (%d)", k3_tok_n_vocab(t));
        T_CHECK(k3_tok_special(t, "<|open|>") == 259, "special by name");
        T_CHECK(k3_tok_special(t, "<|reserved_token_300|>") == 300,
                "unnamed reserved ids are <|reserved_token_ID|>");
        T_CHECK(k3_tok_special(t, "<|nope|>") == -1, "unknown special -> -1");
    }
    k3_tok_free(t);

    char *m     = strdup(good);
    char *line3 = m;
    for (int k = 0; k < 2; k++)
        line3 = strchr(line3, '\n') + 1;
    line3[0] = '*'; /* line 3: "Ag== 2" -> "*g== 2" */
    T_CHECK(load_err(m, NULL, "v/tiktoken.model: line 3:", "base64"), "bad base64 names file and line (%s)",
            k3_errmsg());
    free(m);

    m       = strdup(good);
    char *p = strstr(m, " 257\n");
    memcpy(p, " 256", 4); /* rank 256 twice */
    T_CHECK(load_err(m, NULL, "line 258:", "duplicated"), "duplicated rank names the line (%s)", k3_errmsg());
    free(m);

    m = strdup(good);
    p = strstr(m, " 256\n");
    memcpy(p, " 999", 4);
    T_CHECK(load_err(m, NULL, "line 257:", "out of order"), "rank out of order names the line (%s)",
            k3_errmsg());
    free(m);

    char *dup = model_text((const char *const[]){"ab", "ab"}, 2);
    T_CHECK(load_err(dup, NULL, "line 258:", "duplicate token bytes"), "duplicate bytes name the line (%s)",
            k3_errmsg());
    free(dup);

    m = malloc(strlen(good) + 8);
    p = strstr(good, "YQ== 97\n"); /* byte 'a' becomes "abcd": then 'a' has no token */
    sprintf(m, "%.*sYWJjZA== 97\n%s", (int)(p - good), good, p + 8);
    T_CHECK(load_err(m, NULL, "byte 0x61 has no token", NULL), "missing single byte is reported (%s)",
            k3_errmsg());
    free(m);

    const char *cfg_missing = "{\"added_tokens_decoder\": {\"259\": {\"content\": \"<|open|>\"}}}";
    T_CHECK(load_err(good, cfg_missing, "v/tokenizer_config.json", "<|close|>"),
            "missing special names file and token (%s)", k3_errmsg());
    T_CHECK(load_err(good, "{\"added_tokens_decoder\": \n [}", "v/tokenizer_config.json: line 2", NULL),
            "bad JSON names file and line (%s)", k3_errmsg());
    const char *cfg_range = "{\"added_tokens_decoder\": {\"5\": {\"content\": \"<|x|>\"}}}";
    T_CHECK(load_err(good, cfg_range, "added_tokens_decoder.5", "reserved range"),
            "special id outside range (%s)", k3_errmsg());
    T_CHECK(load_err("YQ==\n", NULL, "line 1", "no separator"), "line without rank (%s)", k3_errmsg());
    /* one id named twice: the later name won, unsaid (config.json refuses a repeated key too) */
    const char *cfg_dup =
        "{\"added_tokens_decoder\": {\"259\": {\"content\": \"<|evil|>\"},\n"
        " \"259\": {\"content\": \"<|open|>\"}, \"260\": {\"content\": \"<|close|>\"},"
        " \"261\": {\"content\": \"<|sep|>\"}, \"258\": {\"content\": \"<|end_of_msg|>\"}}}";
    T_CHECK(load_err(good, cfg_dup, "v/tokenizer_config.json: line 2", "duplicate"),
            "an id named twice in added_tokens_decoder is refused, naming the line (%s)", k3_errmsg());
    /* " 259", "+259" and "0259" are the id 259 to strtol: a second name for it under another key */
    static const char *const alias[] = {" 259", "+259", "0259"};
    for (int i = 0; i < 3; i++) {
        char cfg[512], want[64];
        snprintf(cfg, sizeof cfg, "{\"added_tokens_decoder\": {\"%s\": {\"content\": \"<|x|>\"}}}", alias[i]);
        snprintf(want, sizeof want, "key '%s' is not a token id", alias[i]);
        T_CHECK(load_err(good, cfg, "v/tokenizer_config.json: added_tokens_decoder:", want),
                "added_tokens_decoder key '%s' is refused (%s)", alias[i], k3_errmsg());
    }
    free(good);
}

/* k3_tok_load_model: a tokenizer with more ids than config.json's vocab_size (the embedding's rows)
 * is refused at load, naming both; every request failed later with "token id N is outside 0..V-1". */
static void test_vocab_fits(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tok-fits", t_tmp());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    char *m = model_text((const char *const[]){"ab", "abc"}, 2); /* 258 tokens + 256 reserved = 514 ids */
    FILE *f = fopen(path, "w");
    T_CHECK(f && fputs(m, f) >= 0 && !fclose(f), "wrote %s", path);
    free(m);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir); /* a model's tokenizer needs it */
    f = fopen(path, "w");
    T_CHECK(f && fputs(cfg_ok, f) >= 0 && !fclose(f), "wrote %s", path);
    k3_tok *t = NULL;
    T_CHECK(k3_tok_load_model(dir, 514, &t) == K3_OK && t, "514 ids fit vocab_size 514 (%s)", k3_errmsg());
    k3_tok_free(t);
    T_CHECK(k3_tok_load_model(dir, 600, &t) == K3_OK && t, "and vocab_size 600 (padded rows) (%s)",
            k3_errmsg());
    k3_tok_free(t);
    t            = (k3_tok *)1;
    k3_status st = k3_tok_load_model(dir, 513, &t);
    char      want[700];
    snprintf(want, sizeof want,
             "%s/tiktoken.model: 258 tokens and 256 reserved ids do not fit config.json's vocab_size 513 "
             "(the model has no embedding row for ids 513..513)",
             dir);
    T_CHECK(st == K3_ERR_FORMAT && !t && !strcmp(k3_errmsg(), want),
            "514 ids do not fit vocab_size 513: refused naming both (%s)", k3_errmsg());
}

static void test_pretok(void) {
    static const struct {
        enum tok_family f;
        const char     *in, *want;
    } cases[] = {
        /* hand-derived from the patterns (and agreeing with tiktoken's WASM build) */
        {TOK_O200K, "Hello world", "Hello| world"},
        {TOK_O200K, "I'm HAPPY they'RE here", "I'm| HAPPY| they'RE| here"},
        {TOK_O200K, "DEFghi's", "DEFghi's"},
        {TOK_O200K, "x'\xc5\xbf", "x'\xc5\xbf"}, /* (?i) folds U+017F to s  */
        {TOK_O200K, "12345 678", "123|45| |678"},
        {TOK_O200K, "a  b", "a| | b"},            /* \s+(?!\S) leaves one space */
        {TOK_O200K, "a \n\n  b", "a| \n\n| | b"}, /* \s*[\r\n]+ ends at last \n */
        {TOK_O200K, "end   ", "end|   "},
        {TOK_O200K, "x //\n/y", "x| //\n/|y"}, /* o200k: '/' in the tail   */
        {TOK_KIMI, "x //\n/y", "x| //\n|/y"},
        {TOK_O200K,
         "\xe4\xbd\xa0\xe5\xa5\xbd"
         "abc",
         "\xe4\xbd\xa0\xe5\xa5\xbd"
         "abc"},
        {TOK_KIMI,
         "\xe4\xbd\xa0\xe5\xa5\xbd"
         "abc",
         "\xe4\xbd\xa0\xe5\xa5\xbd|abc"},              /* Han rule */
        {TOK_KIMI, " \xe4\xbd\xa0", " |\xe4\xbd\xa0"}, /* Han is not a letter class */
        {TOK_O200K, " \xe4\xbd\xa0", " \xe4\xbd\xa0"},
        {TOK_O200K,
         "a\xcc\x81"
         "b",
         "a\xcc\x81"
         "b"}, /* marks join letters */
        {TOK_O200K,
         "\xcc\x81"
         "abc",
         "\xcc\x81"
         "abc"}, /* a mark is also [^\r\n\pL\pN] */
        {TOK_O200K, "!!!\r\n\r\nX", "!!!\r\n\r\n|X"},
        {TOK_O200K, "\t hi", "\t| hi"},
        {TOK_O200K,
         "a\xff\xfe"
         "b",
         "a|\xff\xfe|b"}, /* invalid bytes: punctuation */
    };
    char got[256], e1[1024], e2[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pieces(cases[i].f, cases[i].in, got);
        T_CHECK(!strcmp(got, cases[i].want), "pieces %s #%zu: got [%s] want [%s]",
                cases[i].f == TOK_KIMI ? "kimi" : "o200k", i, esc(got, e1), esc(cases[i].want, e2));
    }
}

static void test_bpe(void) {
    /* random vocab over {a,b,c}: pairs then longer merges of existing tokens */
    const char *ex[400];
    char        store[400][40];
    size_t      n = 0;
    while (n < 300) {
        size_t len = 2 + rnd() % 6;
        for (size_t k = 0; k < len; k++)
            store[n][k] = "abc"[rnd() % 3];
        store[n][len] = 0;
        int dup       = 0;
        for (size_t j = 0; j < n; j++)
            dup |= !strcmp(store[j], store[n]);
        if (!dup) {
            ex[n] = store[n];
            n++;
        }
    }
    k3_tok *t = mk(ex, n, TOK_O200K);
    if (!t) {
        T_CHECK(0, "bpe vocab");
        return;
    }
    tok_scratch sc   = {0};
    int         same = 1, tries = 0;
    char        s[600];
    for (; tries < 400; tries++) {
        size_t len = 1 + rnd() % (tries < 200 ? 40 : 500); /* both the stack scan and the heap */
        for (size_t k = 0; k < len; k++)
            s[k] = "abc"[rnd() % (tries % 2 ? 3 : 2)];
        k3_ids a = {0}, b = {0};
        tok_bpe(t, (const uint8_t *)s, len, &sc, &a);
        tok_bpe_ref(t, (const uint8_t *)s, len, &b);
        if (!ids_eq(&a, &b)) {
            same = 0;
            printf("  mismatch on '%.*s'\n", (int)len, s);
        }
        k3_ids_free(&a);
        k3_ids_free(&b);
        if (!same)
            break;
    }
    T_CHECK(same, "heap BPE == tiktoken's quadratic merge loop on %d random pieces", tries);

    /* 100 KB of one character: a single piece, linear-ish (the scan would be quadratic) */
    size_t big = 100000;
    char  *run = malloc(big);
    memset(run, 'a', big);
    k3_ids    ids  = {0};
    double    t0   = k3_time();
    k3_status st   = tok_bpe(t, (const uint8_t *)run, big, &sc, &ids);
    double    dt   = k3_time() - t0;
    char     *back = NULL;
    size_t    bl   = 0;
    if (!st)
        st = k3_tok_decode(t, ids.v, ids.n, &back, &bl);
    T_CHECK(!st && bl == big && !memcmp(back, run, big),
            "100 KB run of one char: %zu ids, decodes back (%.3f s)", ids.n, dt);
    free(back);
    free(run);
    k3_ids_free(&ids);
    tok_scratch_free(&sc);
    k3_tok_free(t);
}

static void test_roundtrip_and_specials(void) {
    const char *ex[] = {"he",   "ll",     "hell", "hello", " w",       "or",
                        " wor", " world", "<|",   "|>",    "\xe4\xbd", "\xe4\xbd\xa0"};
    for (int fam = 0; fam < 2; fam++) {
        k3_tok *t = mk(ex, sizeof ex / sizeof ex[0], (enum tok_family)fam);
        if (!t) {
            T_CHECK(0, "vocab");
            return;
        }
        int ok = 1;
        for (int it = 0; it < 300 && ok; it++) {
            size_t len = rnd() % 200;
            char   s[200];
            for (size_t k = 0; k < len; k++) {
                uint32_t r = rnd() % 10;
                s[k]       = r < 3   ? (char)(rnd() & 0xff)
                             : r < 6 ? "hello world\r\n\t 7'"[rnd() % 17]
                             : r < 8 ? "\xe4\xbd\xa0\xcc\x81"[rnd() % 5]
                                     : "<|>"[rnd() % 3];
            }
            for (int allow = 0; allow < 2 && ok; allow++) {
                k3_ids    ids  = {0};
                char     *back = NULL;
                size_t    bl   = 0;
                k3_status st   = k3_tok_encode(t, s, len, allow, &ids);
                if (!st)
                    st = k3_tok_decode(t, ids.v, ids.n, &back, &bl);
                ok = !st && bl == len && !memcmp(back, s, len);
                free(back);
                k3_ids_free(&ids);
            }
        }
        T_CHECK(ok, "%s: decode(encode(s)) == s for 300 random byte strings (specials allowed and not)",
                fam ? "o200k" : "kimi");

        int32_t     open = k3_tok_special(t, "<|reserved_token_268|>");
        k3_ids      a = {0}, b = {0};
        const char *txt = "x<|reserved_token_268|>y";
        k3_tok_encode(t, txt, strlen(txt), 1, &a);
        k3_tok_encode(t, txt, strlen(txt), 0, &b);
        int has_a = 0, has_b = 0;
        for (size_t i = 0; i < a.n; i++)
            has_a |= a.v[i] == open;
        for (size_t i = 0; i < b.n; i++)
            has_b |= k3_tok_is_special(t, b.v[i]);
        T_CHECK(has_a && a.n == 3, "special recognised when allowed (%zu ids)", a.n);
        T_CHECK(!has_b, "special name is ordinary text when not allowed");
        k3_ids_free(&a);
        k3_ids_free(&b);
        k3_tok_free(t);
    }
}

static void test_kimi_cut(void) {
    const char *ex[] = {"aa", "aaaa", "aaaaaaaa", "  ", "    "};
    k3_tok     *t    = mk(ex, 5, TOK_KIMI);
    if (!t)
        return;
    size_t n = 60000;
    char  *s = malloc(n + 2);
    memset(s, 'a', 30000);
    memset(s + 30000, ' ', 30000);
    s[n] = 'b';
    n++;
    /* expected: a cut after 25,000 chars of one class; the class change does not reset
     * the piece, only the count: pieces [0,25000) [25000,55000) [55000,n) */
    size_t      cuts[] = {0, 25000, 55000, n};
    k3_ids      want = {0}, got = {0};
    tok_scratch sc = {0};
    for (int k = 0; k < 3; k++)
        tok_encode_segment(t, (const uint8_t *)s + cuts[k], cuts[k + 1] - cuts[k], &sc, &want);
    k3_tok_encode(t, s, n, 0, &got);
    T_CHECK(ids_eq(&want, &got), "kimi: runs cut at 25,000 chars of one class (%zu ids vs %zu)", got.n,
            want.n);
    T_CHECK(tok_kimi_cut_next((const uint8_t *)s, n, 0) == 25000 &&
                tok_kimi_cut_next((const uint8_t *)s, n, 25000) == 55000,
            "kimi: cut positions");
    size_t big = 900000;
    char  *u   = malloc(big);
    for (size_t i = 0; i < big; i++)
        u[i] = (i % 7) ? 'x' : ' ';
    T_CHECK(tok_kimi_chunk_end((const uint8_t *)u, big, 0) == 400000 &&
                tok_kimi_chunk_end((const uint8_t *)u, big, 800000) == big,
            "kimi: 400,000-char chunks");
    free(u);
    k3_ids_free(&want);
    k3_ids_free(&got);
    tok_scratch_free(&sc);
    free(s);
    k3_tok_free(t);
}

/* Stream b in two feeds split at cut (then flush) into acc; returns the length. */
static size_t stream_bytes(const k3_tok *t, const uint8_t *b, size_t len, size_t cut, char *acc) {
    k3_detok *d;
    k3_detok_new(t, &d);
    size_t      an = 0, xl;
    const char *x;
    k3_detok_feed_bytes(d, (const char *)b, cut, &x, &xl);
    memcpy(acc + an, x, xl), an += xl;
    k3_detok_feed_bytes(d, (const char *)b + cut, len - cut, &x, &xl);
    memcpy(acc + an, x, xl), an += xl;
    k3_detok_flush(d, &x, &xl);
    memcpy(acc + an, x, xl), an += xl;
    k3_detok_free(d);
    return an;
}

/* Stream ids one by one (then flush) into acc; returns the length. */
static size_t stream_ids(const k3_tok *t, const k3_ids *ids, char *acc) {
    k3_detok *d;
    k3_detok_new(t, &d);
    size_t      an = 0, xl;
    const char *x;
    for (size_t i = 0; i < ids->n; i++) {
        k3_detok_feed(d, ids->v[i], &x, &xl);
        memcpy(acc + an, x, xl), an += xl;
    }
    k3_detok_flush(d, &x, &xl);
    memcpy(acc + an, x, xl), an += xl;
    k3_detok_free(d);
    return an;
}

static void test_stream(void) {
    const char *ex[] = {"\xe4\xbd", "\xa0\xe5", "\xf0\x9f", "\x91\x8d"};
    k3_tok     *t    = mk(ex, 4, TOK_O200K);
    if (!t)
        return;
    int ok_split = 1, ok_ids = 1;
    for (int it = 0; it < 300; it++) {
        /* random bytes biased towards UTF-8 fragments */
        size_t  len = rnd() % 24;
        uint8_t b[24];
        for (size_t k = 0; k < len; k++) {
            uint32_t r = rnd() % 6;
            b[k]       = r == 0   ? (uint8_t)(0x80 | (rnd() & 0x3f))
                         : r == 1 ? (uint8_t)(0xC0 | (rnd() & 0x3f))
                         : r == 2 ? (uint8_t)(0xE0 | (rnd() & 0x1f))
                         : r == 3 ? (uint8_t)(0xF0 | (rnd() & 0xf))
                         : r == 4 ? (uint8_t)(rnd() & 0xff)
                                  : 'a';
        }
        char  *whole;
        size_t wl;
        tok_utf8_sanitize(b, len, &whole, &wl);
        for (size_t cut = 0; cut <= len && ok_split; cut++) {
            char   acc[200];
            size_t an = stream_bytes(t, b, len, cut, acc);
            ok_split  = an == wl && !memcmp(acc, whole, wl);
            if (!ok_split)
                printf("  split %zu of %zu differs\n", cut, len);
        }
        /* and per id: encode, then stream id by id vs decode_text */
        k3_ids ids = {0};
        k3_tok_encode(t, (const char *)b, len, 0, &ids);
        char  *dt;
        size_t dl;
        k3_tok_decode_text(t, ids.v, ids.n, &dt, &dl);
        char   acc[200];
        size_t an = stream_ids(t, &ids, acc);
        ok_ids &= an == dl && !memcmp(acc, dt, dl) && (wl == dl && !memcmp(dt, whole, dl));
        free(dt);
        free(whole);
        k3_ids_free(&ids);
    }
    T_CHECK(ok_split, "streaming decoder == whole-string decoder at every split point (300 strings)");
    T_CHECK(ok_ids, "streaming by ids == decode_text (300 strings)");

    /* fixed cases of the replacement rule */
    static const struct {
        const char *in, *want;
    } rc[] = {
        {"\xe4\xbd\xa0", "\xe4\xbd\xa0"},
        {"\xe4\xbd"
         "a",
         "\xef\xbf\xbd"
         "a"}, /* truncated 3-byte: one U+FFFD */
        {"\xff", "\xef\xbf\xbd"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: 3 maximal subparts */
        {"\xf0\x9f\x91", "\xef\xbf\xbd"},                         /* incomplete at the end */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong */
    };
    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        char  *o;
        size_t ol;
        tok_utf8_sanitize((const uint8_t *)rc[i].in, strlen(rc[i].in), &o, &ol);
        T_CHECK(ol == strlen(rc[i].want) && !memcmp(o, rc[i].want, ol), "U+FFFD rule case %zu", i);
        free(o);
    }
    /* never a broken sequence mid-stream: feeding half a character emits nothing */
    k3_detok *d;
    k3_detok_new(t, &d);
    const char *x;
    size_t      xl;
    k3_detok_feed(d, 256, &x, &xl); /* "\xe4\xbd" */
    T_CHECK(xl == 0, "incomplete tail held back");
    k3_detok_feed_bytes(d, "\xa0", 1, &x, &xl);
    T_CHECK(xl == 3 && !memcmp(x, "\xe4\xbd\xa0", 3), "completed by the next token");
    k3_detok_free(d);
    k3_tok_free(t);
}

/* k3_ids_parse: the one reader of typed id lists (--ids, --detokenize, k3-ab). */
static void test_ids_parse(void) {
    k3_ids ids = {0};
    k3_ids_push(&ids, 7);
    k3_status st = k3_ids_parse(" 1, 2\n\t3\r\n,,40 ", 40, &ids);
    T_CHECK(!st && ids.n == 5 && ids.v[0] == 7 && ids.v[1] == 1 && ids.v[2] == 2 && ids.v[3] == 3 &&
                ids.v[4] == 40,
            "white space and commas separate; ids append (%zu ids)", ids.n);
    static const struct {
        const char *text, *msg;
    } bad[] = {{"1 x 3", "token 2: 'x' is not an id in 0..40"},
               {"1 41", "token 2: '41' is not an id in 0..40"},
               {"-1", "token 1: '-1' is not an id in 0..40"},
               {"12x 1", "token 1: '12x' is not an id in 0..40"},
               {"99999999999999999999", "token 1: '99999999999999999999' is not an id in 0..40"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        k3_ids_free(&ids);
        st = k3_ids_parse(bad[i].text, 40, &ids);
        T_CHECK(st == K3_ERR_ARG && !strcmp(k3_errmsg(), bad[i].msg), "'%s' is refused: %s", bad[i].text,
                k3_errmsg());
    }
    k3_ids_free(&ids);
    /* Growth past what size_t counts is refused before v is read (v holds 1 id here): the hand
     * doubling wrapped ids->n + n, or cap * 4 bytes, to a short block and copied past it. */
    int32_t one[1] = {5};
    k3_ids_push(&ids, 7);
    st = k3_ids_append(&ids, one, SIZE_MAX);
    T_CHECK(st == K3_ERR_NOMEM && ids.n == 1 && ids.v[0] == 7, "n + SIZE_MAX ids: refused (%s)", k3_errmsg());
    st = k3_ids_append(&ids, one, SIZE_MAX / 2);
    T_CHECK(st == K3_ERR_NOMEM && ids.n == 1 && ids.v[0] == 7, "SIZE_MAX / 2 ids: refused, ids kept (%s)",
            k3_errmsg());
    k3_ids_free(&ids);
    st = k3_ids_parse(" \n", 40, &ids);
    T_CHECK(!st && ids.n == 0, "no ids: none appended");
    k3_ids_free(&ids);
}

int main(void) {
    test_ids_parse();
    test_vocab_errors();
    test_vocab_fits();
    test_pretok();
    test_bpe();
    test_roundtrip_and_specials();
    test_kimi_cut();
    test_stream();
    return t_done();
}
