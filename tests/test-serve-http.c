/* test-serve-http.c: the server's one reading of a request head (ui/serve/serve-http.c):
 * http_head_scan checks each byte once however the head is trickled (bytes it has passed are
 * never read again, so a head sent one byte at a time costs constant work per byte), gives the
 * same verdict byte by byte as at once, and reads each value once with the white space around
 * it trimmed (Content-Length "2 ", an Authorization with trailing white space); Expect other
 * than 100-continue is 417, and 100-continue without a body asks for no "100 Continue";
 * http_clean escapes once (a backslash stays one). The stop strings' matcher (serve-req.c,
 * sstop_feed) gives, over random texts fed in random pieces (two at a time through the same
 * strings, each with its own match state, as a request's choices share them), what a search of
 * the whole text gives: the earliest stop string that ends in the new bytes, and the longest end of the text
 * that begins one (the part a stream holds back). Integers past int64 in a body (serve-req.c,
 * sreq_big_ints): reals inside a JSON Schema, else a 400 naming the field and the limit. */
#include "serve-http.h"
#include "serve-req.h"
#include "serve.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* By brute force over text[0..n): where the earliest stop string ending in (from, n] starts
 * (SIZE_MAX: none), and the longest end of the text that is a proper beginning of one. */
static size_t stop_ref(const sstop *st, const char *text, size_t from, size_t n, size_t *hold) {
    size_t first = SIZE_MAX;
    *hold        = 0;
    for (int k = 0; k < st->n; k++) {
        size_t len = st->len[k];
        for (size_t end = from + 1; end <= n; end++)
            if (end >= len && !memcmp(text + end - len, st->s[k], len) && end - len < first)
                first = end - len;
        for (size_t h = len - 1; h > *hold; h--)
            if (h <= n && !memcmp(text + n - h, st->s[k], h)) {
                *hold = h;
                break;
            }
    }
    return first;
}

/* Random stop strings and texts over a 2- or 3-letter alphabet (so they overlap and repeat),
 * fed in pieces of 1 to 5 bytes: every feed agrees with stop_ref. Returns the feeds that differ. */
static int stop_rounds(int rounds, int *matches) {
    int bad = 0;
    srand(7);
    for (int r = 0; r < rounds; r++) {
        sstop st;
        memset(&st, 0, sizeof st);
        int  abc = 2 + r % 2, n_stops = 1 + rand() % 4;
        char text[200], s[12];
        for (int k = 0; k < n_stops; k++) {
            size_t len = 1 + (size_t)(rand() % 10);
            for (size_t i = 0; i < len; i++)
                s[i] = (char)('a' + rand() % abc);
            if (sstop_add(&st, s, len))
                return -1;
        }
        /* two texts fed in turns through the same strings, each with its own match state (the
         * choices of one request share its stop strings) */
        char   text2[200];
        size_t n = 0, n2 = 0, q[SERVE_MAX_STOPS] = {0}, q2[SERVE_MAX_STOPS] = {0};
        while (n < sizeof text - 5 || n2 < sizeof text2 - 5) {
            int     two = n >= sizeof text - 5 || (n2 < sizeof text2 - 5 && rand() % 2);
            char   *t   = two ? text2 : text;
            size_t *at = two ? &n2 : &n, *qs = two ? q2 : q;
            size_t  piece = 1 + (size_t)(rand() % 5), hold, want_hold;
            for (size_t i = 0; i < piece; i++)
                t[*at + i] = (char)('a' + rand() % abc);
            size_t got  = sstop_feed(&st, qs, t + *at, piece, *at, &hold);
            size_t want = stop_ref(&st, t, *at, *at + piece, &want_hold);
            bad += got != want || hold != want_hold;
            *matches += got != SIZE_MAX;
            *at += piece;
        }
        for (int k = 0; k < st.n; k++) {
            free(st.s[k]);
            free(st.fail[k]);
        }
    }
    return bad;
}

static const http_rules rules = {.keyless = 0, .allow_hosts = NULL, .max_body = 1000};

/* The verdict on head fed byte by byte through one http_scan. */
static int trickle(const char *head, http_head *h, size_t *calls) {
    http_scan s = {0};
    size_t    n = strlen(head);
    *calls      = 0;
    for (size_t k = 1; k <= n; k++) {
        ++*calls;
        if (http_head_scan(head, k, &s, 0, &rules, h))
            return 1;
    }
    return 0;
}

int main(void) {
    http_head h, h2;
    size_t    calls;

    /* the same verdicts trickled as at once */
    const char *heads[] = {
        "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        "GET /health HTTP/2.0\r\nHost: a\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        int a = http_head_check(heads[i], strlen(heads[i]), 0, &rules, &h);
        int b = trickle(heads[i], &h2, &calls);
        T_CHECK(a == 1 && b == 1 && h.status == h2.status && h.len == h2.len && !strcmp(h.code, h2.code),
                "head %zu: byte by byte gives the verdict it gives at once (%d %s / %d %s)", i, h.status,
                h.code, h2.status, h2.code);
    }

    /* bytes already passed are not looked at again: spoil them after the scan went past, and the
     * verdict still follows only from the new bytes (a re-scan from byte 0 would see the NUL) */
    char      buf[HTTP_MAX_HEAD];
    http_scan s    = {0};
    size_t    n    = (size_t)snprintf(buf, sizeof buf, "GET /health HTTP/1.1\r\nHost: a\r\nX-Pad: ");
    int       r    = http_head_scan(buf, n, &s, 0, &rules, &h);
    size_t    seen = s.pos;
    buf[25]        = 0; /* inside "Host: a", already checked */
    for (int k = 0; k < 4000 && !r; k++) {
        buf[n++] = 'p';
        r        = http_head_scan(buf, n, &s, 0, &rules, &h);
    }
    T_CHECK(!r && seen == n - 4000 && s.pos == n,
            "4000 more bytes one at a time: each scan starts where the last stopped (at %zu of %zu), and a "
            "byte it passed is never read again (verdict %d)",
            s.pos, n, r);

    /* a bare CR at the end waits for the next byte; then it is judged */
    http_scan   s2 = {0};
    const char *cr = "GET / HTTP/1.1\r";
    T_CHECK(!http_head_scan(cr, strlen(cr), &s2, 0, &rules, &h) && s2.pos == strlen(cr) - 1,
            "a CR as the last byte so far is judged with the next one (position %zu)", s2.pos);
    const char *crx = "GET / HTTP/1.1\rX";
    T_CHECK(http_head_scan(crx, strlen(crx), &s2, 0, &rules, &h) && h.status == 400,
            "and a CR followed by another byte is a bare CR: 400 (%d)", h.status);

    /* every value is read once, trimmed: the length and the key every later step uses */
    const char *sp =
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2 \r\nAuthorization: Bearer k1 \t\r\n\r\n";
    T_CHECK(http_head_check(sp, strlen(sp), 0, &rules, &h) && h.status == 0 && h.body == 2 && h.auth_n == 9 &&
                !memcmp(sp + h.auth, "Bearer k1", 9),
            "'Content-Length: 2 ' is 2 and 'Authorization: Bearer k1 <tab>' is 'Bearer k1' (status %d, body "
            "%llu, auth %zu bytes)",
            h.status, h.body, h.auth_n);
    const char *tab = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length:\t7\t\r\n\r\n";
    T_CHECK(http_head_check(tab, strlen(tab), 0, &rules, &h) && h.status == 0 && h.body == 7,
            "'Content-Length: <tab>7<tab>' is 7 (status %d, %llu)", h.status, h.body);

    /* Expect */
    const char *ex = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nExpect: foo\r\n\r\n";
    T_CHECK(http_head_check(ex, strlen(ex), 0, &rules, &h) && h.status == 417 &&
                !strcmp(h.code, "expectation_failed"),
            "Expect: foo -> 417 (%d %s)", h.status, h.code);
    const char *e0 = "GET /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n";
    T_CHECK(http_head_check(e0, strlen(e0), 0, &rules, &h) && h.status == 0 && !h.expect,
            "Expect: 100-continue without a body: served, no 100 Continue asked (%d, expect %d)", h.status,
            h.expect);
    const char *e1 = "POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n";
    T_CHECK(http_head_check(e1, strlen(e1), 0, &rules, &h) && h.status == 0 && h.expect,
            "Expect: 100-Continue with a body: a 100 Continue is due (%d, expect %d)", h.status, h.expect);

    /* one escaping: a backslash stays one, a newline becomes \n once */
    char out[64];
    http_clean(out, sizeof out, "a\\nb\nc", 6);
    T_CHECK(!strcmp(out, "a\\nb\\nc"), "http_clean: 'a\\nb<LF>c' -> %s (a backslash is not doubled)", out);
    char again[64];
    http_clean(again, sizeof again, out, strlen(out));
    T_CHECK(!strcmp(again, out), "and cleaning clean text again changes nothing (%s)", again);

    /* stop strings: the matcher that keeps its state against a search of the whole text */
    int matches = 0, bad = stop_rounds(300, &matches);
    T_CHECK(
        bad == 0 && matches > 1000,
        "stop strings: 300 random texts fed in pieces, every feed's match and held tail as a search of the "
        "whole text gives (%d differ, %d matches)",
        bad, matches);

    /* integers past int64, which jansson refuses (the whole body was "invalid JSON ... too big
     * integer"): inside a JSON Schema they are reals, as ajv reads them; elsewhere a 400 that
     * names the field and the limit (serve_check_body: the server's parse, no model) */
    static const struct {
        const char *body, *want; /* want NULL: served */
    } big[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":"
         "\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"integer\",\"maximum\":"
         "100000000000000000000,\"minimum\":-99999999999999999999999}}}}",
         NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{"
         "\"enum\":[18446744073709551616,1]}}}}}]}",
         NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"99999999999999999999\"}],\"seed\":"
         "9223372036854775807}",
         NULL},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"seed\":18446744073709551616}",
         "seed: the integer 18446744073709551616 is past the 64-bit integers this server reads "
         "(-9223372036854775808 .. 9223372036854775807)"},
        {"{\"seed\":-9223372036854775809,\"messages\":[]}", "seed: the integer -9223372036854775809"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "\"\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
         "\"arguments\":{\"id\":[1,123456789012345678901234]}}}]}]}",
         "messages[1].tool_calls[0].function.arguments.id[1]: the integer 123456789012345678901234 is past"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "\"\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
         "\"arguments\":{\"id\":123456789012345678901234}}}]}]}",
         "send the arguments as a JSON string, kept as written"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1e400}", "invalid JSON"},
    };
    for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
        char err[512] = "";
        int  rc       = serve_check_body(big[k].body, strlen(big[k].body), err, sizeof err);
        T_CHECK(big[k].want ? rc == -1 && strstr(err, big[k].want) : rc == 0, "%.90s...: %s%s", big[k].body,
                rc ? "refused: " : "served", err);
    }
    return t_done();
}
