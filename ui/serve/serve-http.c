/* serve-http.c: the rules of what the server reads and writes as text: the request head
 * checks (RFC 9112, strictly), and the escaping of what the server echoes and logs.
 *
 * DESIGN
 * http_head_scan decides on the raw bytes of a request head, checking each byte once however
 * the head is trickled (serve-gate.c reads it and calls the scan with each new piece):
 * framing (one Content-Length of digits, no Transfer-Encoding, CRLF line ends, no NUL or other
 * control bytes, no obsolete line folding, one Host on HTTP/1.1), sizes (413 from
 * Content-Length, 414, 431), the version (505), Expect (only 100-continue: 417), and for a
 * server without a key the Host (an IP literal, localhost or --allow-host: no DNS rebinding)
 * and Content-Type: application/json on POST (no blind form posts). Every header value is
 * read with the white space around it trimmed, once, and every later step (the body length,
 * the API key) uses that reading: there is no second parser to disagree with it.
 *
 * http_clean is the one escaping of outside text: control characters, invalid UTF-8 and
 * bidirectional overrides become visible escapes, once (a backslash stays one backslash).
 */
#include "serve-http.h"
#include "text.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

/* ---- text -------------------------------------------------------------------------------- */

static int put(char *dst, size_t cap, size_t *at, const char *s, size_t n) {
    if (*at + n + 1 > cap)
        return -1;
    memcpy(dst + *at, s, n);
    *at += n;
    return 0;
}

size_t http_clean(char *dst, size_t cap, const char *src, size_t n) {
    size_t at = 0, i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)src + i, (utf8proc_ssize_t)(n - i), &cp);
        char esc[16];
        if (k < 0) {
            /* an incomplete character at the very end: the text was cut there */
            size_t need = ((unsigned char)src[i] & 0xE0) == 0xC0   ? 2
                          : ((unsigned char)src[i] & 0xF0) == 0xE0 ? 3
                          : ((unsigned char)src[i] & 0xF8) == 0xF0 ? 4
                                                                   : 0;
            int    cut  = need && n - i < need;
            for (size_t t = i + 1; cut && t < n; t++)
                cut = ((unsigned char)src[t] & 0xC0) == 0x80;
            if (cut)
                break;
            snprintf(esc, sizeof esc, "\\x%02X", (unsigned char)src[i]);
            if (put(dst, cap, &at, esc, strlen(esc)))
                break;
            i++;
            continue;
        }
        const char *s = src + i;
        size_t      m = (size_t)k;
        if (cp == '\n' || cp == '\r' || cp == '\t') {
            snprintf(esc, sizeof esc, "\\%c", cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't');
            s = esc, m = 2;
        } else if (cp < 0x20 || cp == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02X", (unsigned)cp);
            s = esc, m = 4;
        } else if (txt_ctrl_cp(cp)) { /* C1, bidi controls, line separators (text.h) */
            snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
            s = esc, m = 6;
        }
        if (put(dst, cap, &at, s, m))
            break;
        i += (size_t)k;
    }
    if (cap)
        dst[at] = 0;
    return at;
}

void serve_log(const char *fmt, ...) {
    char    raw[1200], line[2400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    http_clean(line, sizeof line, raw, (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1);
    fprintf(stderr, "k3chat: serve: %s\n", line);
}

char *http_error_json(const char *type, const char *code, const char *param, const char *msg) {
    char clean[1024];
    http_clean(clean, sizeof clean, msg, strlen(msg));
    json_t *o = json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", clean, "type", type, "param", param,
                          "code", code);
    char   *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- the request head --------------------------------------------------------------------- */

static int tchar(int c) { /* RFC 9110 token characters */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int verdict(http_head *h, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int verdict(http_head *h, int status, const char *code, const char *fmt, ...) {
    char    raw[sizeof h->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    h->status = status;
    snprintf(h->code, sizeof h->code, "%s", code);
    http_clean(h->msg, sizeof h->msg, raw, n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1);
    return 1;
}

static int name_is(const char *p, size_t n, const char *name) {
    return strlen(name) == n && !strncasecmp(p, name, n);
}

/* Host for a server without a key: an IP literal, localhost (or *.localhost), or a name in the
 * comma-separated allow list. v points at the value (already checked for its characters). */
static int host_allowed(const char *v, size_t n, const char *allow) {
    char host[256];
    if (n && v[0] == '[')
        return 1; /* an IPv6 literal (its syntax is checked by the caller) */
    size_t hl = 0;
    while (hl < n && v[hl] != ':')
        hl++;
    if (!hl || hl >= sizeof host)
        return 0;
    memcpy(host, v, hl);
    host[hl] = 0;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1 || !strcasecmp(host, "localhost") ||
        (hl > 10 && !strcasecmp(host + hl - 10, ".localhost")))
        return 1;
    for (const char *p = allow; p && *p;) {
        size_t k = strcspn(p, ",");
        if (k == hl && !strncasecmp(p, host, hl))
            return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

/* Host value syntax: uri-host [ ":" port ]; uri-host a name of unreserved characters, an IPv4
 * address or an [IPv6] literal. */
static int host_syntax(const char *v, size_t n) {
    size_t i = 0;
    if (n && v[0] == '[') {
        while (i < n && v[i] != ']')
            i++;
        char            a[64];
        struct in6_addr a6;
        if (i >= n || i - 1 >= sizeof a)
            return 0;
        memcpy(a, v + 1, i - 1);
        a[i - 1] = 0;
        if (inet_pton(AF_INET6, a, &a6) != 1)
            return 0;
        i++;
    } else {
        while (i < n && (tchar((unsigned char)v[i]) && !strchr("!#$%&'*+^`|", v[i])))
            i++;
        if (!i)
            return 0;
    }
    if (i == n)
        return 1;
    if (v[i] != ':' || i + 1 == n || n - i - 1 > 5)
        return 0;
    for (i++; i < n; i++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    return 1;
}

/* The bytes of a head that are wrong wherever they are, from s->pos on: bare LF or CR, control
 * bytes. Sets *end past the final CRLF CRLF once it is in. Returns 1 with a verdict, else 0. */
static int head_bytes(const char *p, size_t n, http_scan *s, const char **end, http_head *h) {
    size_t i = s->pos;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') {
            if (!i || p[i - 1] != '\r')
                return verdict(h, 400, "invalid_framing",
                               "a line of the request head ends with a bare LF (CRLF expected)");
            if (i >= 3 && p[i - 2] == '\n' && p[i - 3] == '\r') {
                *end = p + i + 1;
                break;
            }
        } else if (c == '\r') {
            if (!s->has_line)
                s->has_line = 1, s->line_len = i;
            if (i + 1 == n)
                break; /* what follows decides: look at this CR again with the next bytes */
            if (p[i + 1] != '\n')
                return verdict(h, 400, "invalid_framing", "a bare CR in the request head");
        } else if ((c < 0x20 && c != '\t') || c == 0x7F) {
            return verdict(h, 400, "invalid_header", "a control byte 0x%02X in the request head (byte %zu)",
                           c, i);
        }
    }
    s->pos = i;
    return 0;
}

/* The request line p[0..n): METHOD SP request-target SP HTTP-version. 1 with a verdict. */
static int head_line(const char *p, size_t n, http_head *h) {
    size_t m = 0;
    while (m < n && tchar((unsigned char)p[m]))
        m++;
    if (!m || m >= n || p[m] != ' ')
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    const char *t = p + m + 1, *sp = memchr(t, ' ', n - m - 1);
    if (!sp)
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    const char *ver = sp + 1;
    size_t      vl = n - (size_t)(ver - p), tl = (size_t)(sp - t);
    if (vl != 8 || strncmp(ver, "HTTP/", 5) || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' ||
        ver[7] < '0' || ver[7] > '9')
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    if (ver[5] != '1' || ver[7] > '1')
        return verdict(h, 505, "http_version_not_supported", "HTTP/%c.%c is not supported (HTTP/1.1 or 1.0)",
                       ver[5], ver[7]);
    if (!tl || t[0] != '/')
        return verdict(h, 400, "invalid_request_target", "the request target must be a path starting with /");
    for (size_t i = 0; i < tl; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c <= 0x20 || c >= 0x7F)
            return verdict(h, 400, "invalid_request_target",
                           "a byte 0x%02X in the request target (percent-encode it)", c);
        if (c == '%') {
            if (i + 2 >= tl || !isxdigit((unsigned char)t[i + 1]) || !isxdigit((unsigned char)t[i + 2]))
                return verdict(h, 400, "invalid_request_target",
                               "a %%-escape in the request target is not %%XX");
            if (t[i + 1] == '0' && t[i + 2] == '0')
                return verdict(h, 400, "invalid_request_target", "%%00 (NUL) in the request target");
        }
    }
    h->v11      = ver[7] == '1';
    h->method_n = m;
    h->target   = m + 1;
    h->target_n = tl;
    return 0;
}

/* The header fields that matter, each value with the white space around it trimmed (the one
 * reading every later step uses). */
typedef struct head_fields {
    const char *host, *cl, *ctype, *te, *auth, *expect_v;
    size_t      host_n, cl_n, ctype_n, te_n, auth_n, expect_n;
    int         n_host, n_cl, n_te, n_ct, n_auth, expect;
} head_fields;

/* The field lines in [q, end) (each ending CRLF). 1 with a verdict. */
static int head_collect(const char *q, const char *end, head_fields *f, http_head *h) {
    int n_fields = 0;
    while (q < end) {
        const char *e  = memchr(q, '\r', (size_t)(end - q));
        size_t      ln = (size_t)(e - q);
        if (++n_fields > HTTP_MAX_FIELDS)
            return verdict(h, 431, "headers_too_large", "over %d header fields", HTTP_MAX_FIELDS);
        if (q[0] == ' ' || q[0] == '\t')
            return verdict(h, 400, "invalid_header",
                           "a header line starts with white space (obsolete line folding)");
        size_t k = 0;
        while (k < ln && tchar((unsigned char)q[k]))
            k++;
        if (!k || k == ln || q[k] != ':')
            return verdict(h, 400, "invalid_header", "header line %d is not NAME: VALUE", n_fields);
        const char *v  = q + k + 1;
        size_t      vn = ln - k - 1;
        while (vn && (*v == ' ' || *v == '\t'))
            v++, vn--;
        while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
            vn--;
        if (name_is(q, k, "Host"))
            f->n_host++, f->host = v, f->host_n = vn;
        else if (name_is(q, k, "Content-Length"))
            f->n_cl++, f->cl = v, f->cl_n = vn;
        else if (name_is(q, k, "Transfer-Encoding"))
            f->n_te++, f->te = v, f->te_n = vn;
        else if (name_is(q, k, "Content-Type"))
            f->n_ct++, f->ctype = v, f->ctype_n = vn;
        else if (name_is(q, k, "Authorization"))
            f->n_auth++, f->auth = v, f->auth_n = vn;
        else if (name_is(q, k, "Expect"))
            f->expect++, f->expect_v = v, f->expect_n = vn;
        q = e + 2;
    }
    return 0;
}

/* Framing and sizes: one Content-Length of digits, no Transfer-Encoding, one Host. */
static int head_framing(const head_fields *f, const http_rules *r, http_head *h) {
    if (f->n_cl > 1 || f->n_host > 1 || f->n_te > 1 || f->n_ct > 1 || f->n_auth > 1 || f->expect > 1)
        return verdict(h, 400, "invalid_framing", "more than one %s header",
                       f->n_cl > 1     ? "Content-Length"
                       : f->n_host > 1 ? "Host"
                       : f->n_te > 1   ? "Transfer-Encoding"
                       : f->n_ct > 1   ? "Content-Type"
                       : f->n_auth > 1 ? "Authorization"
                                       : "Expect");
    if (f->n_te && f->n_cl)
        return verdict(h, 400, "invalid_framing", "both Content-Length and Transfer-Encoding");
    if (f->n_te) {
        if (!h->v11 || f->te_n != 7 || strncasecmp(f->te, "chunked", 7))
            return verdict(h, 400, "invalid_framing", "Transfer-Encoding '%.*s' is not supported",
                           (int)(f->te_n > 60 ? 60 : f->te_n), f->te);
        return verdict(h, 411, "length_required",
                       "send the body with Content-Length (chunked request bodies are not accepted)");
    }
    if (f->n_cl) {
        unsigned long long len = 0;
        if (!f->cl_n || f->cl_n > 19)
            return verdict(h, 400, "invalid_framing", "Content-Length is not a number of bytes");
        for (size_t i = 0; i < f->cl_n; i++) {
            if (f->cl[i] < '0' || f->cl[i] > '9')
                return verdict(h, 400, "invalid_framing", "Content-Length '%.*s' is not a number of bytes",
                               (int)(f->cl_n > 40 ? 40 : f->cl_n), f->cl);
            len = len * 10 + (unsigned)(f->cl[i] - '0');
        }
        if (len > r->max_body)
            return verdict(h, 413, "body_too_large",
                           "the request body (%llu bytes) is over the limit of %zu bytes", len, r->max_body);
        h->body = len;
    }
    if (h->v11 && !f->n_host)
        return verdict(h, 400, "missing_host", "an HTTP/1.1 request without a Host header");
    if (f->n_host && !host_syntax(f->host, f->host_n))
        return verdict(h, 400, "invalid_host", "Host '%.*s' is not HOST[:PORT]",
                       (int)(f->host_n > 80 ? 80 : f->host_n), f->host);
    return 0;
}

int http_head_check(const char *p, size_t n, int eof, const http_rules *r, http_head *h) {
    http_scan s = {0};
    return http_head_scan(p, n, &s, eof, r, h);
}

int http_head_scan(const char *p, size_t n, http_scan *s, int eof, const http_rules *r, http_head *h) {
    memset(h, 0, sizeof *h);
    const char *end = NULL;
    if (head_bytes(p, n, s, &end, h))
        return 1;
    size_t line_len = s->has_line ? s->line_len : n;
    if (line_len > HTTP_MAX_TARGET)
        return verdict(h, 414, "uri_too_long", "the request line is over %d bytes", HTTP_MAX_TARGET);
    if (!end) {
        if (n >= HTTP_MAX_HEAD)
            return verdict(h, 431, "headers_too_large", "the request head is over %d bytes", HTTP_MAX_HEAD);
        if (eof)
            return verdict(h, 400, "incomplete_request", "the connection ended inside the request head");
        return 0;
    }
    h->len = (size_t)(end - p);
    if (h->len > HTTP_MAX_HEAD)
        return verdict(h, 431, "headers_too_large", "the request head is over %d bytes", HTTP_MAX_HEAD);
    head_fields f = {0};
    if (head_line(p, line_len, h) || head_collect(p + line_len + 2, end - 2, &f, h) || head_framing(&f, r, h))
        return 1;
    int post = h->method_n == 4 && !memcmp(p, "POST", 4);
    if (r->keyless && f.n_host && !host_allowed(f.host, f.host_n, r->allow_hosts))
        return verdict(
            h, 403, "host_not_allowed",
            "Host '%.*s' is not allowed: a server without an API key answers only requests for an IP "
            "address, localhost or an --allow-host name",
            (int)(f.host_n > 80 ? 80 : f.host_n), f.host);
    if (r->keyless && post) {
        size_t k = 0;
        while (k < f.ctype_n && f.ctype[k] != ';' && f.ctype[k] != ' ' && f.ctype[k] != '\t')
            k++;
        if (!f.ctype || k != 16 || strncasecmp(f.ctype, "application/json", 16))
            return verdict(h, 415, "unsupported_media_type",
                           "a server without an API key takes only Content-Type: application/json");
    }
    if (f.expect && h->v11) {
        if (f.expect_n != 12 || strncasecmp(f.expect_v, "100-continue", 12))
            return verdict(h, 417, "expectation_failed", "Expect '%.*s' is not supported (only 100-continue)",
                           (int)(f.expect_n > 60 ? 60 : f.expect_n), f.expect_v);
        h->expect = h->body > 0; /* no body: nothing to continue to */
    }
    if (f.auth) {
        h->has_auth = 1;
        h->auth     = (size_t)(f.auth - p);
        h->auth_n   = f.auth_n;
    }
    return 1;
}
