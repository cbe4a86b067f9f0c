/* serve-http.c: the server's front door: listening socket, accept loop, request-head checks,
 * connection limits; and the text rules for what the server echoes and logs.
 *
 * DESIGN
 * The server owns its listening socket (SO_REUSEADDR for a quick restart, never SO_REUSEPORT:
 * a second server on the same port fails with "address already in use"). One gate thread
 * accepts and polls every connection that libmicrohttpd has not been given yet:
 *
 *   HEAD    the request head is arriving. The gate peeks at it (MSG_PEEK: the bytes stay in
 *           the socket for libmicrohttpd) and sets SO_RCVLOWAT one byte past what it has seen,
 *           so poll() wakes only on new bytes. The head must be complete (CRLF CRLF) within
 *           HTTP_HEAD_SECS of the accept, or 408. http_head_check decides on the raw bytes:
 *           framing (RFC 9112: one Content-Length of digits, no Transfer-Encoding, CRLF line
 *           ends, no NUL or other control bytes, no obsolete line folding, one Host on
 *           HTTP/1.1), sizes (413 from Content-Length, 414, 431), the version (505), and for a
 *           server without a key the Host (an IP literal, localhost or --allow-host: no DNS
 *           rebinding) and Content-Type: application/json on POST (no blind form posts).
 *   WAIT    the head passed; waiting (FIFO) for a libmicrohttpd slot, at most HTTP_QUEUE_SECS,
 *           then 503 with Retry-After. A slot is free when fewer than HTTP_MAX_CONN connections
 *           are handed on, fewer than HTTP_PER_ADDR from this address, and the last
 *           HTTP_RESERVED slots go only to addresses that hold none.
 *   ACTIVE  handed on with MHD_add_connection (SO_RCVLOWAT back to 1); libmicrohttpd reports
 *           its end through http_gate_notify (MHD_CONNECTION_NOTIFY_CLOSED).
 *   LINGER  the gate answered (an error or 503) and shut its sending side; it reads and drops
 *           what the client still sends for up to a second (so the answer is not lost to a
 *           reset), then closes.
 *
 * At most HTTP_MAX_PENDING connections are in HEAD or WAIT, at most HTTP_PENDING_ADDR of them
 * from one address: a new connection over either limit takes the place of the oldest
 * incomplete head (of that address, for the second), which is answered 503. So a slowloris
 * (many connections trickling a head) holds no libmicrohttpd slot and never locks new clients
 * out; a normal client, whose head arrives at once, passes straight through.
 *
 * Every answer the gate writes is one complete HTTP/1.1 response with a JSON error body
 * {"error":{"message","type","code"}} and Connection: close. Refusals are logged at most one
 * line a second (with a count of those not shown), so an attack cannot flood the log.
 */
#include "serve-http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

/* ---- text -------------------------------------------------------------------------------- */

static int put(char *dst, size_t cap, size_t *at, const char *s, size_t n) {
    if (*at + n + 1 > cap)
        return -1;
    memcpy(dst + *at, s, n);
    *at += n;
    return 0;
}

size_t http_clean(char *dst, size_t cap, const char *src, size_t n, int log) {
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
        } else if ((cp >= 0x80 && cp < 0xA0) || (cp >= 0x202A && cp <= 0x202E) ||
                   (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E ||
                   cp == 0x200F || cp == 0x061C) {
            snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
            s = esc, m = 6;
        } else if (cp == '\\' && log) {
            s = "\\\\", m = 2;
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
    http_clean(line, sizeof line, raw, (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1, 1);
    fprintf(stderr, "k3chat: serve: %s\n", line);
}

char *http_error_json(const char *type, const char *code, const char *msg) {
    char clean[1024];
    http_clean(clean, sizeof clean, msg, strlen(msg), 0);
    json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", clean, "type", type, "code", code);
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
    http_clean(h->msg, sizeof h->msg, raw,
               n < 0                    ? 0
               : (size_t)n < sizeof raw ? (size_t)n
                                        : sizeof raw - 1,
               0);
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

int http_head_check(const char *p, size_t n, int eof, const http_rules *r, http_head *h) {
    memset(h, 0, sizeof *h);
    /* bytes that are wrong wherever they are, before the head is complete */
    const char *end = NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') {
            if (!i || p[i - 1] != '\r')
                return verdict(h, 400, "invalid_framing",
                               "a line of the request head ends with a bare LF (CRLF expected)");
            if (i >= 3 && p[i - 2] == '\n' && p[i - 3] == '\r') {
                end = p + i + 1;
                break;
            }
        } else if (c == '\r') {
            if (i + 1 < n && p[i + 1] != '\n')
                return verdict(h, 400, "invalid_framing", "a bare CR in the request head");
        } else if ((c < 0x20 && c != '\t') || c == 0x7F) {
            return verdict(h, 400, "invalid_header", "a control byte 0x%02X in the request head (byte %zu)",
                           c, i);
        }
    }
    const char *line_end = memchr(p, '\r', end ? (size_t)(end - p) : n);
    size_t      line_len = line_end ? (size_t)(line_end - p) : n;
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

    /* request line: method SP request-target SP HTTP-version */
    size_t m = 0;
    while (m < line_len && tchar((unsigned char)p[m]))
        m++;
    if (!m || m >= line_len || p[m] != ' ')
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    const char *t = p + m + 1, *sp = memchr(t, ' ', line_len - m - 1);
    if (!sp)
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    const char *ver = sp + 1;
    size_t      vl = line_len - (size_t)(ver - p), tl = (size_t)(sp - t);
    if (vl != 8 || strncmp(ver, "HTTP/", 5) || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' ||
        ver[7] < '0' || ver[7] > '9')
        return verdict(h, 400, "invalid_request_line", "the request line is not METHOD TARGET HTTP/1.1");
    if (ver[5] != '1' || ver[7] > '1')
        return verdict(h, 505, "http_version_not_supported", "HTTP/%c.%c is not supported (HTTP/1.1 or 1.0)",
                       ver[5], ver[7]);
    int v11 = ver[7] == '1';
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
    int post = m == 4 && !memcmp(p, "POST", 4);

    /* header fields */
    const char *host = NULL, *cl = NULL, *ctype = NULL;
    size_t      host_n = 0, cl_n = 0, ctype_n = 0;
    int         n_host = 0, n_cl = 0, n_te = 0, n_ct = 0, n_auth = 0, n_fields = 0;
    const char *te   = NULL;
    size_t      te_n = 0;
    for (const char *q = line_end + 2; q < end - 2;) {
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
            n_host++, host = v, host_n = vn;
        else if (name_is(q, k, "Content-Length"))
            n_cl++, cl = v, cl_n = vn;
        else if (name_is(q, k, "Transfer-Encoding"))
            n_te++, te = v, te_n = vn;
        else if (name_is(q, k, "Content-Type"))
            n_ct++, ctype = v, ctype_n = vn;
        else if (name_is(q, k, "Authorization"))
            n_auth++;
        q = e + 2;
    }
    if (n_cl > 1 || n_host > 1 || n_te > 1 || n_ct > 1 || n_auth > 1)
        return verdict(h, 400, "invalid_framing", "more than one %s header",
                       n_cl > 1     ? "Content-Length"
                       : n_host > 1 ? "Host"
                       : n_te > 1   ? "Transfer-Encoding"
                       : n_ct > 1   ? "Content-Type"
                                    : "Authorization");
    if (n_te && n_cl)
        return verdict(h, 400, "invalid_framing", "both Content-Length and Transfer-Encoding");
    if (n_te) {
        if (!v11 || te_n != 7 || strncasecmp(te, "chunked", 7))
            return verdict(h, 400, "invalid_framing", "Transfer-Encoding '%.*s' is not supported",
                           (int)(te_n > 60 ? 60 : te_n), te);
        return verdict(h, 411, "length_required",
                       "send the body with Content-Length (chunked request bodies are not accepted)");
    }
    if (n_cl) {
        unsigned long long len = 0;
        if (!cl_n || cl_n > 19)
            return verdict(h, 400, "invalid_framing", "Content-Length is not a number of bytes");
        for (size_t i = 0; i < cl_n; i++) {
            if (cl[i] < '0' || cl[i] > '9')
                return verdict(h, 400, "invalid_framing", "Content-Length '%.*s' is not a number of bytes",
                               (int)(cl_n > 40 ? 40 : cl_n), cl);
            len = len * 10 + (unsigned)(cl[i] - '0');
        }
        if (len > r->max_body)
            return verdict(h, 413, "body_too_large",
                           "the request body (%llu bytes) is over the limit of %zu bytes", len, r->max_body);
    }
    if (v11 && !n_host)
        return verdict(h, 400, "missing_host", "an HTTP/1.1 request without a Host header");
    if (n_host && !host_syntax(host, host_n))
        return verdict(h, 400, "invalid_host", "Host '%.*s' is not HOST[:PORT]",
                       (int)(host_n > 80 ? 80 : host_n), host);
    if (r->keyless && n_host && !host_allowed(host, host_n, r->allow_hosts))
        return verdict(
            h, 403, "host_not_allowed",
            "Host '%.*s' is not allowed: a server without an API key answers only requests for an IP "
            "address, localhost or an --allow-host name",
            (int)(host_n > 80 ? 80 : host_n), host);
    if (r->keyless && post) {
        size_t k = 0;
        while (k < ctype_n && ctype[k] != ';' && ctype[k] != ' ' && ctype[k] != '\t')
            k++;
        if (!ctype || k != 16 || strncasecmp(ctype, "application/json", 16))
            return verdict(h, 415, "unsupported_media_type",
                           "a server without an API key takes only Content-Type: application/json");
    }
    return 1;
}

/* ---- the gate ------------------------------------------------------------------------------ */

#define HTTP_STR_(x) #x
#define HTTP_STR(x) HTTP_STR_(x)

enum { R_FREE = 0, R_HEAD, R_WAIT, R_ACTIVE, R_LINGER };
#define N_LINGER 64
#define N_REC (HTTP_MAX_PENDING + HTTP_MAX_CONN + N_LINGER)

typedef struct hrec {
    int                     state, fd, started;
    char                    ip[64]; /* the client address, the key of the per-address limits */
    struct sockaddr_storage addr;
    socklen_t               alen;
    double                  t_accept, t_ready, deadline;
    size_t                  seen;    /* head bytes peeked so far */
    size_t                  drained; /* LINGER: bytes dropped    */
} hrec;

struct http_gate {
    int                lfd, wake[2], have_thread, stopping;
    unsigned           port;
    pthread_t          th;
    pthread_mutex_t    mu;
    pthread_cond_t     idle_cv;
    struct MHD_Daemon *d;
    http_rules         rules;
    char              *allow; /* rules.allow_hosts (owned) */
    hrec               rec[N_REC];
    int                n_active;
    double             t_log, t_pause;
    unsigned long      n_quiet; /* refusals not logged since the last line */
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *reason(int status) {
    switch (status) {
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* Log a refusal, at most one line a second (lock held). */
static void gate_note(http_gate *g, const hrec *x, int status, const char *msg) {
    double now = mono();
    if (now - g->t_log < 1.0) {
        g->n_quiet++;
        return;
    }
    if (g->n_quiet)
        serve_log("%s: %d: %s (and %lu more refusals not shown)", x->ip, status, msg, g->n_quiet);
    else
        serve_log("%s: %d: %s", x->ip, status, msg);
    g->t_log   = now;
    g->n_quiet = 0;
}

/* Answer x with a JSON error and move it to LINGER (lock held). */
static void gate_answer(http_gate *g, hrec *x, int status, const char *type, const char *code,
                        const char *msg) {
    char *body = http_error_json(type, code, msg);
    char  head[320];
    int   hn =
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                 "Connection: close\r\n\r\n",
                 status, reason(status), body ? strlen(body) : 0, status == 503 ? "Retry-After: 5\r\n" : "");
    if (hn > 0 && send(x->fd, head, (size_t)hn, MSG_NOSIGNAL | MSG_DONTWAIT) == hn && body)
        (void)!send(x->fd, body, strlen(body), MSG_NOSIGNAL | MSG_DONTWAIT);
    free(body);
    gate_note(g, x, status, msg);
    shutdown(x->fd, SHUT_WR);
    int one = 1;
    setsockopt(x->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    x->state    = R_LINGER;
    x->deadline = mono() + 1.0;
    x->drained  = 0;
}

static void rec_close(hrec *x) {
    close(x->fd);
    memset(x, 0, sizeof *x);
    x->fd = -1;
}

static int count_addr(const http_gate *g, const char *ip, int s1, int s2) {
    int n = 0;
    for (int i = 0; i < N_REC; i++)
        n += (g->rec[i].state == s1 || g->rec[i].state == s2) && !strcmp(g->rec[i].ip, ip);
    return n;
}

static int admissible(const http_gate *g, const hrec *x) {
    if (g->n_active >= HTTP_MAX_CONN)
        return 0;
    int mine = count_addr(g, x->ip, R_ACTIVE, R_ACTIVE);
    return mine < HTTP_PER_ADDR && (g->n_active < HTTP_MAX_CONN - HTTP_RESERVED || mine == 0);
}

/* The oldest incomplete head (of ip, or of anyone when ip is NULL); else the oldest waiting. */
static hrec *victim(http_gate *g, const char *ip) {
    hrec *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (int i = 0; i < N_REC; i++) {
            hrec *x = &g->rec[i];
            if (x->state == (pass ? R_WAIT : R_HEAD) && (!ip || !strcmp(x->ip, ip)) &&
                (!best || x->t_accept < best->t_accept))
                best = x;
        }
    return best;
}

static hrec *free_rec(http_gate *g, int linger) {
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state == R_FREE)
            return &g->rec[i];
    if (!linger)
        return NULL;
    hrec *old = NULL; /* every slot taken: close the oldest lingering one */
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state == R_LINGER && (!old || g->rec[i].deadline < old->deadline))
            old = &g->rec[i];
    if (old)
        rec_close(old);
    return old;
}

static void addr_text(const struct sockaddr_storage *a, char *ip, size_t n) {
    snprintf(ip, n, "?");
    if (a->ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, (socklen_t)n);
    } else if (a->ss_family == AF_INET6) {
        const struct in6_addr *s6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(s6))
            inet_ntop(AF_INET, (const char *)s6 + 12, ip, (socklen_t)n);
        else
            inet_ntop(AF_INET6, s6, ip, (socklen_t)n);
    }
}

static void gate_accept(http_gate *g) {
    for (int round = 0; round < 64; round++) {
        struct sockaddr_storage a;
        socklen_t               al = sizeof a;
        int fd = accept4(g->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                g->t_pause = mono() + 0.1; /* out of descriptors: leave them in the backlog a while */
            return;
        }
        char ip[64];
        addr_text(&a, ip, sizeof ip);
        int pend = count_addr(g, ip, R_HEAD, R_WAIT), all = 0;
        for (int i = 0; i < N_REC; i++)
            all += g->rec[i].state == R_HEAD || g->rec[i].state == R_WAIT;
        hrec *v = pend >= HTTP_PENDING_ADDR ? victim(g, ip)
                  : all >= HTTP_MAX_PENDING ? victim(g, NULL)
                                            : NULL;
        if (v)
            gate_answer(g, v, 503, "server_error", "server_busy",
                        "too many connections are waiting: this one gave way to a newer one");
        hrec *x = free_rec(g, 1);
        if (!x) {
            close(fd);
            continue;
        }
        memset(x, 0, sizeof *x);
        x->state    = R_HEAD;
        x->fd       = fd;
        x->addr     = a;
        x->alen     = al;
        x->t_accept = mono();
        x->deadline = x->t_accept + HTTP_HEAD_SECS;
        snprintf(x->ip, sizeof x->ip, "%s", ip);
    }
}

/* New bytes (or the end) on a connection in HEAD (lock held). */
static void gate_head(http_gate *g, hrec *x, int eof) {
    char      buf[HTTP_MAX_HEAD + 1];
    ssize_t   n = recv(x->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    http_head h;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) { /* reset, or closed before sending anything */
        rec_close(x);
        return;
    }
    x->seen = (size_t)n;
    if (!http_head_check(buf, (size_t)n, eof, &g->rules, &h)) {
        int low = (int)x->seen + 1;
        setsockopt(x->fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof low);
        return;
    }
    if (h.status) {
        gate_answer(g, x, h.status, "invalid_request_error", h.code, h.msg);
        return;
    }
    int one = 1;
    setsockopt(x->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    x->state    = R_WAIT;
    x->t_ready  = mono();
    x->deadline = x->t_ready + HTTP_QUEUE_SECS;
}

static void gate_linger(hrec *x) {
    char    buf[4096];
    ssize_t n;
    while ((n = recv(x->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
        if ((x->drained += (size_t)n) > (256u << 10))
            break;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        x->drained > (256u << 10))
        rec_close(x);
}

/* Hand waiting connections on, oldest first, while slots allow (lock held; dropped around
 * MHD_add_connection, which may call http_gate_notify). */
static void gate_dispatch(http_gate *g) {
    for (;;) {
        hrec *best = NULL;
        for (int i = 0; i < N_REC; i++) {
            hrec *x = &g->rec[i];
            if (x->state == R_WAIT && (!best || x->t_ready < best->t_ready) && admissible(g, x))
                best = x;
        }
        if (!best || g->stopping)
            return;
        best->state   = R_ACTIVE;
        best->started = 0;
        g->n_active++;
        int                     fd = best->fd;
        struct sockaddr_storage a  = best->addr;
        socklen_t               al = best->alen;
        pthread_mutex_unlock(&g->mu);
        enum MHD_Result ok = MHD_add_connection(g->d, fd, (struct sockaddr *)&a, al);
        pthread_mutex_lock(&g->mu);
        if (ok != MHD_YES && best->state == R_ACTIVE && best->fd == fd && !best->started) {
            /* libmicrohttpd closed the socket */
            memset(best, 0, sizeof *best);
            best->fd = -1;
            g->n_active--;
            pthread_cond_broadcast(&g->idle_cv);
        }
    }
}

void http_gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe) {
    http_gate *g = cls;
    pthread_mutex_lock(&g->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (int i = 0; ci && i < N_REC; i++)
            if (g->rec[i].state == R_ACTIVE && g->rec[i].fd == ci->connect_fd && !g->rec[i].started) {
                g->rec[i].started = 1;
                *socket_context   = &g->rec[i];
                break;
            }
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        hrec *x = *socket_context;
        memset(x, 0, sizeof *x);
        x->fd           = -1;
        *socket_context = NULL;
        g->n_active--;
        pthread_cond_broadcast(&g->idle_cv);
        (void)!write(g->wake[1], "", 1); /* a slot is free */
    }
    pthread_mutex_unlock(&g->mu);
}

static void *gate_main(void *arg) {
    http_gate    *g = arg;
    struct pollfd pf[N_REC + 2];
    int           idx[N_REC + 2];
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        double now = mono(), next = now + 5;
        int    np = 0;
        pf[np++]  = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        if (now >= g->t_pause)
            pf[np++] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
        else if (g->t_pause < next)
            next = g->t_pause;
        int lpos = now >= g->t_pause ? 1 : -1;
        for (int i = 0; i < N_REC; i++) {
            hrec *x = &g->rec[i];
            if (x->state == R_FREE || x->state == R_ACTIVE)
                continue;
            if (x->deadline < next)
                next = x->deadline;
            idx[np]  = i;
            pf[np++] = (struct pollfd){.fd     = x->fd,
                                       .events = (short)(x->state == R_HEAD     ? POLLIN | POLLRDHUP
                                                         : x->state == R_LINGER ? POLLIN
                                                                                : 0)};
        }
        pthread_mutex_unlock(&g->mu);
        int ms = (int)((next - now) * 1000) + 1;
        int rc = poll(pf, (nfds_t)np, ms < 0 ? 0 : ms);
        pthread_mutex_lock(&g->mu);
        if (g->stopping)
            break;
        if (rc > 0 && (pf[0].revents & POLLIN)) {
            char b[64];
            while (read(g->wake[0], b, sizeof b) > 0) {
            }
        }
        for (int k = 2 + (lpos < 0 ? -1 : 0); rc > 0 && k < np; k++) {
            hrec *x  = &g->rec[idx[k]];
            short ev = pf[k].revents;
            if (!ev || x->fd != pf[k].fd)
                continue;
            if (x->state == R_HEAD)
                gate_head(g, x, (ev & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
            else if (x->state == R_LINGER)
                gate_linger(x);
            else if (x->state == R_WAIT && (ev & (POLLHUP | POLLERR)))
                rec_close(x); /* reset while waiting */
        }
        now = mono();
        for (int i = 0; i < N_REC; i++) {
            hrec *x = &g->rec[i];
            if (x->state == R_HEAD && now >= x->deadline)
                gate_answer(g, x, 408, "invalid_request_error", "request_timeout",
                            "the request head did not arrive within " HTTP_STR(HTTP_HEAD_SECS) " s");
            else if (x->state == R_WAIT && now >= x->deadline)
                gate_answer(g, x, 503, "server_error", "server_busy",
                            "every connection slot is busy: retry later");
            else if (x->state == R_LINGER && now >= x->deadline)
                rec_close(x);
        }
        if (rc > 0 && lpos > 0 && (pf[lpos].revents & POLLIN))
            gate_accept(g);
        gate_dispatch(g);
    }
    /* stopping: answer whoever is not handed on, give the answers a moment, close */
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state == R_HEAD || g->rec[i].state == R_WAIT)
            gate_answer(g, &g->rec[i], 503, "server_error", "shutting_down", "the server is shutting down");
    pthread_mutex_unlock(&g->mu);
    for (double t_end = mono() + 0.5; mono() < t_end;) {
        int np = 0;
        pthread_mutex_lock(&g->mu); /* libmicrohttpd's threads still return slots */
        for (int i = 0; i < N_REC; i++)
            if (g->rec[i].state == R_LINGER)
                idx[np] = i, pf[np++] = (struct pollfd){.fd = g->rec[i].fd, .events = POLLIN};
        pthread_mutex_unlock(&g->mu);
        if (!np || poll(pf, (nfds_t)np, 50) < 0)
            break;
        pthread_mutex_lock(&g->mu);
        for (int k = 0; k < np; k++)
            if (pf[k].revents && g->rec[idx[k]].state == R_LINGER)
                gate_linger(&g->rec[idx[k]]);
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state == R_LINGER)
            rec_close(&g->rec[i]);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

http_gate *http_gate_open(const struct sockaddr *addr, socklen_t alen, const http_rules *r) {
    http_gate *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->lfd = g->wake[0] = g->wake[1] = -1;
    for (int i = 0; i < N_REC; i++)
        g->rec[i].fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->idle_cv, NULL);
    g->rules = *r;
    if (r->allow_hosts && !(g->allow = strdup(r->allow_hosts)))
        goto fail;
    g->rules.allow_hosts = g->allow;
    int one              = 1;
    if ((g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        (addr->sa_family == AF_INET6 && setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one)) ||
        bind(g->lfd, addr, alen) || listen(g->lfd, 128) || pipe2(g->wake, O_NONBLOCK | O_CLOEXEC))
        goto fail;
    struct sockaddr_storage a;
    socklen_t               al = sizeof a;
    if (!getsockname(g->lfd, (struct sockaddr *)&a, &al))
        g->port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                                : ((struct sockaddr_in *)&a)->sin_port);
    return g;
fail:;
    int e = errno;
    http_gate_free(g);
    errno = e;
    return NULL;
}

unsigned http_gate_port(const http_gate *g) {
    return g->port;
}

int http_gate_start(http_gate *g, struct MHD_Daemon *d) {
    g->d = d;
    if (pthread_create(&g->th, NULL, gate_main, g))
        return -1;
    g->have_thread = 1;
    return 0;
}

void http_gate_stop(http_gate *g) {
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_mutex_unlock(&g->mu);
    if (g->wake[1] >= 0)
        (void)!write(g->wake[1], "", 1);
    if (g->have_thread)
        pthread_join(g->th, NULL);
    g->have_thread = 0;
    if (g->lfd >= 0)
        close(g->lfd);
    g->lfd = -1;
}

int http_gate_drain(http_gate *g, double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)secs;
    ts.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g->mu);
    while (g->n_active > 0 && pthread_cond_timedwait(&g->idle_cv, &g->mu, &ts) != ETIMEDOUT) {
    }
    int left = g->n_active;
    pthread_mutex_unlock(&g->mu);
    return left ? -1 : 0;
}

void http_gate_free(http_gate *g) {
    if (!g)
        return;
    http_gate_stop(g);
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state != R_FREE && g->rec[i].state != R_ACTIVE && g->rec[i].fd >= 0)
            close(g->rec[i].fd);
    for (int k = 0; k < 2; k++)
        if (g->wake[k] >= 0)
            close(g->wake[k]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->idle_cv);
    free(g->allow);
    free(g);
}

/* ---- a peer during a request ----------------------------------------------------------------- */

int http_peer_gone(int fd, int can_probe, double *t_probe) {
    char    c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
        return 0;
    if (r < 0)
        return 1; /* reset */
    /* EOF: half-closed (still reading) or gone; only a write can tell. A closed peer answers
     * the probe with a reset, which recv does not report after a FIN (it keeps returning 0):
     * the connection's state does (TCP_CLOSE; CLOSE_WAIT while the peer may still read). */
    struct tcp_info ti;
    socklen_t       tl = sizeof ti;
    if (!getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) && ti.tcpi_state == TCP_CLOSE)
        return 1;
    if (!can_probe)
        return 0;
    double now = mono();
    if (now - *t_probe < 1.0)
        return 0;
    *t_probe                  = now;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return send(fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
           errno != EWOULDBLOCK;
}
