/* serve-gate.c: the server's front door, and its only HTTP parser in the path: the listening
 * socket, one event loop thread that reads every request (head and body) and enforces the
 * limits and deadlines, a thread per request being served, and the responses written back.
 *
 * DESIGN
 * The server owns its listening socket (SO_REUSEADDR for a quick restart, never SO_REUSEPORT:
 * a second server on the same port fails with "address already in use"; IPv6 with
 * IPV6_V6ONLY off, so [::] takes IPv4 clients too). The gate thread waits in epoll on the
 * listening socket and every connection it holds, each in one state:
 *
 *   HEAD    the request head is arriving: the gate reads it into the connection's buffer and
 *           checks only the new bytes (http_head_scan keeps its position), so a head trickled
 *           one byte at a time costs constant work per byte. It must be complete within
 *           rules.head_secs (K3_SERVE_HEAD_SECS) of the accept, or 408. http_head_scan decides
 *           (serve-http.c); a head that passes is authenticated here (401 before any body is
 *           read), answered "100 Continue" when it asked and has a body, and goes on to
 *   BODY    the body (exactly Content-Length bytes) is arriving into a buffer that grows with
 *           what came (never more than Content-Length; all such buffers together at most
 *           HTTP_BODY_BUDGET, beyond which 503): it must be complete within rules.body_secs
 *           (K3_SERVE_BODY_SECS) of the head, or 408.
 *   WAIT    the request is complete; waiting (FIFO) for a thread of its own, at most
 *           HTTP_QUEUE_SECS, then 503 with Retry-After. A request from an address that already
 *           holds HTTP_PER_ADDR threads goes after those from other addresses, but a free
 *           thread is never left idle while a request waits.
 *   ACTIVE  served by a thread of its own (at most HTTP_MAX_CONN at once), which calls the
 *           handler (serve.c) with the checked request; the connection is out of epoll.
 *   SEND    a thread's whole response (http_respond) that the socket did not take at once,
 *           or the rest of a finished stream (http_stream_end), written by the gate as the
 *           client takes it (at most HTTP_SEND_BUDGET bytes in all,
 *           N_SEND connections; beyond, the thread writes it itself): a client that reads
 *           slowly holds a buffer, not one of the HTTP_MAX_CONN threads (64 slow readers held
 *           them all, and every other request waited for its 503). No byte taken for
 *           rules.send_secs (the kernel's send queue not going down either): closed. Then
 *   LINGER  answered (by the gate or a thread) with the sending side shut: what the client
 *           still sends is read and dropped for up to a second (so the answer is not lost to a
 *           reset), then the connection closes.
 *
 * Only a complete request holds a thread: slow heads and slow bodies cost the gate a buffer
 * and a deadline, nothing more. At most HTTP_MAX_PENDING connections are in HEAD, BODY or WAIT,
 * at most HTTP_PENDING_ADDR of them incomplete (HEAD or BODY) from one address: a new
 * connection over either limit takes the place of the oldest incomplete one (of that address,
 * for the second; after a last read of what it may already have sent), which is answered 503.
 * Over the per-address limit only an incomplete one older than HTTP_BURST_SECS gives way: a
 * burst of connections whose requests are on their way is served, not cut down at the accept.
 *
 * Deadlines fire on their own: each state keeps its connections in a list in order of deadline
 * (every state's deadline is its entry time plus a constant), so the loop looks at the first of
 * each list, and every event costs constant work whatever the number of connections.
 *
 * Every answer the gate writes is one complete HTTP/1.1 response with a JSON error body
 * {"error":{"message","type","param":null,"code"}} and Connection: close. Refusals are logged at most one
 * line a second (with a count of those not shown), so an attack cannot flood the log.
 */
#include "serve-http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

enum { R_FREE = 0, R_HEAD, R_BODY, R_WAIT, R_ACTIVE, R_SEND, R_LINGER, R_NSTATE };
#define N_LINGER 64
#define N_SEND 256 /* responses the gate writes at once */
#define N_REC (HTTP_MAX_PENDING + HTTP_MAX_CONN + N_SEND + N_LINGER)
#define HTTP_SEND_BUDGET ((size_t)256 << 20) /* bytes of the responses the gate writes, in all */
#define HEAD_BUF0 2048 /* a head buffer's first size; it doubles up to HTTP_MAX_HEAD + 1 */
#define BODY_BUF0 (64u << 10)
#define HTTP_SNDBUF (64 << 10)               /* a response's socket send buffer (the kernel doubles it) */
#define HTTP_BODY_BUDGET ((size_t)256 << 20) /* bytes of bodies being read or waiting, in all */

typedef struct hrec {
    int               state, fd;
    int               prev, next; /* its state's list (in order of deadline), -1 at the ends */
    char              ip[64];     /* the client address, the key of the per-address limits   */
    double            deadline, t_accept;
    char             *buf; /* (cap) the head's bytes (len so far)                        */
    size_t            len, cap;
    http_scan         scan;
    http_head         head;
    char             *body; /* (body_cap) the body so far (body_n bytes)                  */
    size_t            body_n, body_cap;
    int               key;     /* its API key's index                     */
    size_t            drained; /* LINGER: bytes dropped                   */
    char             *out;     /* SEND: (out_n) the response, sent up to out_off */
    size_t            out_off, out_n;
    int               outq; /* SEND: the kernel's unacknowledged bytes when it last took none */
    struct http_gate *g;
} hrec;

struct http_gate {
    int             lfd, ep, wake[2], have_thread, stopping, stopped;
    unsigned        port;
    pthread_t       th;
    pthread_mutex_t mu;
    pthread_cond_t  idle_cv;
    http_handler    handler;
    void           *cls;
    http_rules      rules;
    char           *allow; /* rules.allow_hosts (owned) */
    hrec            rec[N_REC];
    int             first[R_NSTATE], last[R_NSTATE], count[R_NSTATE];
    double          t_log, t_pause;
    unsigned long   n_quiet;               /* refusals not logged since the last line */
    size_t          body_bytes;            /* body buffers of requests being read or waiting */
    size_t          send_bytes;            /* responses held for SEND (and promised to it)   */
    int             n_taking;              /* of which promised: threads about to hand over  */
    pthread_t       zombie[HTTP_MAX_CONN]; /* (n_zombie) request threads that ended, to join */
    int             n_zombie;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the state lists (lock held) ------------------------------------------------------------ */

static void list_out(http_gate *g, hrec *x) {
    int st = x->state;
    if (x->prev >= 0)
        g->rec[x->prev].next = x->next;
    else
        g->first[st] = x->next;
    if (x->next >= 0)
        g->rec[x->next].prev = x->prev;
    else
        g->last[st] = x->prev;
    x->prev = x->next = -1;
    g->count[st]--;
}

/* Move x to the end of state st's list with its deadline `secs` from now. */
static void set_state(http_gate *g, hrec *x, int st, double secs) {
    int i = (int)(x - g->rec);
    list_out(g, x);
    x->state    = st;
    x->deadline = mono() + secs;
    x->prev     = g->last[st];
    x->next     = -1;
    if (x->prev >= 0)
        g->rec[x->prev].next = i;
    else
        g->first[st] = i;
    g->last[st] = i;
    g->count[st]++;
}

/* epoll: what x waits for in its state (HEAD, BODY, LINGER: bytes; WAIT: only a reset; SEND:
 * room to write). */
static void ep_watch(http_gate *g, hrec *x, int op) {
    struct epoll_event ev = {.events   = x->state == R_WAIT   ? 0u
                                         : x->state == R_SEND ? (uint32_t)EPOLLOUT
                                                              : (uint32_t)(EPOLLIN | EPOLLRDHUP),
                             .data.u64 = ((uint64_t)(unsigned)x->fd << 32) | (uint32_t)(x - g->rec)};
    if (epoll_ctl(g->ep, op, x->fd, &ev) && op == EPOLL_CTL_MOD)
        epoll_ctl(g->ep, EPOLL_CTL_ADD, x->fd, &ev);
}

/* Free x's body buffer and take it off the gate's budget. */
static void body_drop(http_gate *g, hrec *x) {
    g->body_bytes -= x->body_cap;
    x->body_cap = 0;
    free(x->body);
    x->body = NULL;
}

/* Free x's SEND response and take it off the gate's budget. */
static void out_drop(http_gate *g, hrec *x) {
    g->send_bytes -= x->out_n;
    x->out_n = x->out_off = 0;
    free(x->out);
    x->out = NULL;
}

static void rec_close(http_gate *g, hrec *x) {
    if (x->fd >= 0)
        close(x->fd); /* also leaves the epoll set */
    free(x->buf);
    body_drop(g, x);
    out_drop(g, x);
    int st = x->state;
    set_state(g, x, R_FREE, 0);
    memset((char *)x + offsetof(hrec, ip), 0, sizeof *x - offsetof(hrec, ip));
    x->fd = -1;
    x->g  = g;
    if (st == R_ACTIVE)
        pthread_cond_broadcast(&g->idle_cv);
}

/* ---- answers written by the gate ------------------------------------------------------------- */

static const char *reason(int status) {
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
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
    case 417:
        return "Expectation Failed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* Log a refusal (status 0: a connection cut), at most one line a second (lock held). */
static void gate_note(http_gate *g, const hrec *x, int status, const char *msg) {
    double now = mono();
    if (now - g->t_log < 1.0) {
        g->n_quiet++;
        return;
    }
    char st[16] = "";
    if (status)
        snprintf(st, sizeof st, "%d: ", status);
    if (g->n_quiet)
        serve_log("%s: %s%s (and %lu more refusals not shown)", x->ip, st, msg, g->n_quiet);
    else
        serve_log("%s: %s%s", x->ip, st, msg);
    g->t_log   = now;
    g->n_quiet = 0;
}

static void to_linger(http_gate *g, hrec *x) {
    shutdown(x->fd, SHUT_WR);
    free(x->buf);
    x->buf = NULL;
    body_drop(g, x);
    out_drop(g, x);
    x->drained = 0;
    int was    = x->state;
    set_state(g, x, R_LINGER, 1.0);
    ep_watch(g, x, was == R_ACTIVE ? EPOLL_CTL_ADD : EPOLL_CTL_MOD);
}

/* Answer x with a JSON error and move it to LINGER (lock held; x not ACTIVE). */
static void gate_answer(http_gate *g, hrec *x, int status, const char *type, const char *code,
                        const char *msg) {
    char *body = http_error_json(type, code, NULL, msg);
    char  out[1600];
    int   hn = snprintf(out, sizeof out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                          "Connection: close\r\n\r\n%s",
                        status, reason(status), body ? strlen(body) : 0,
                      status == 503   ? "Retry-After: 5\r\n"
                        : status == 401 ? "WWW-Authenticate: Bearer\r\n"
                                        : "",
                      body ? body : "");
    if (hn > 0 && (size_t)hn < sizeof out)
        (void)!send(x->fd, out, (size_t)hn, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(body);
    gate_note(g, x, status, msg);
    to_linger(g, x);
}

/* ---- reading a request (lock held) ------------------------------------------------------------ */

static int unhex(int c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* The head passed: method and path as C strings in place (path %-decoded, query dropped). */
static void head_strings(hrec *x) {
    char *t = x->buf + x->head.target, *o = t;
    x->buf[x->head.method_n] = 0;
    for (size_t i = 0; i < x->head.target_n && t[i] != '?'; i++) {
        if (t[i] == '%') { /* the head check saw two hex digits, never %00 */
            *o++ = (char)(unhex((unsigned char)t[i + 1]) * 16 + unhex((unsigned char)t[i + 2]));
            i += 2;
        } else {
            *o++ = t[i];
        }
    }
    *o = 0;
}

static void body_read(http_gate *g, hrec *x);

/* x's body buffer to cap bytes, within the gate's budget of bodies being read; else 503. */
static int body_grow(http_gate *g, hrec *x, size_t cap) {
    char *nb = g->body_bytes + cap - x->body_cap <= HTTP_BODY_BUDGET ? realloc(x->body, cap) : NULL;
    if (!nb) {
        gate_answer(g, x, 503, "server_error", "server_busy",
                    "too many request bodies are arriving at once: retry later");
        return -1;
    }
    g->body_bytes += cap - x->body_cap;
    x->body = nb, x->body_cap = cap;
    return 0;
}

/* The head passed its checks: authenticate, then the body (what came with the head first). */
static void head_done(http_gate *g, hrec *x) {
    x->key = 0;
    if (g->rules.auth &&
        (x->key = g->rules.auth(x->head.has_auth ? x->buf + x->head.auth : NULL, x->head.auth_n)) < 0) {
        gate_answer(g, x, 401, "invalid_request_error", "invalid_api_key",
                    "missing or wrong API key (Authorization: Bearer KEY)");
        return;
    }
    size_t extra = x->len - x->head.len, want = (size_t)x->head.body;
    size_t take = extra < want ? extra : want;
    size_t cap  = want < BODY_BUF0 || take > BODY_BUF0 ? want : BODY_BUF0;
    if (want && body_grow(g, x, cap))
        return;
    if (take)
        memcpy(x->body, x->buf + x->head.len, take);
    x->body_n = take;
    head_strings(x);
    if (x->head.expect && take < want) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!send(x->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    set_state(g, x, R_BODY, g->rules.body_secs);
    body_read(g, x);
}

/* New bytes (or the end) on a connection in HEAD: only the new bytes are checked. */
static void head_read(http_gate *g, hrec *x, int eof) {
    if (x->len == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : HEAD_BUF0;
        cap        = cap > HTTP_MAX_HEAD + 1 ? HTTP_MAX_HEAD + 1 : cap;
        char *nb   = cap > x->cap ? realloc(x->buf, cap) : NULL;
        if (!nb) {
            gate_answer(g, x, 503, "server_error", "out_of_memory", "out of memory: retry later");
            return;
        }
        x->buf = nb, x->cap = cap;
    }
    ssize_t n = recv(x->fd, x->buf + x->len, x->cap - x->len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !eof)
        return;
    if (n < 0 || (n == 0 && !x->len)) { /* reset, or closed before sending anything */
        rec_close(g, x);
        return;
    }
    x->len += (size_t)n;
    if (!http_head_scan(x->buf, x->len, &x->scan, n == 0, &g->rules, &x->head))
        return;
    if (x->head.status)
        gate_answer(g, x, x->head.status, "invalid_request_error", x->head.code, x->head.msg);
    else
        head_done(g, x);
}

/* New bytes (or the end) on a connection in BODY; complete: on to WAIT. */
static void body_read(http_gate *g, hrec *x) {
    size_t want = (size_t)x->head.body;
    if (x->body_n < want) {
        if (x->body_n == x->body_cap && /* grows with what came, up to Content-Length */
            body_grow(g, x, x->body_cap * 2 < want ? x->body_cap * 2 : want))
            return;
        ssize_t n = recv(x->fd, x->body + x->body_n, x->body_cap - x->body_n, MSG_DONTWAIT);
        if (n > 0)
            x->body_n += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            char m[160];
            snprintf(m, sizeof m, "the connection ended inside the request body (%zu of %zu bytes)",
                     x->body_n, want);
            gate_answer(g, x, 400, "invalid_request_error", "incomplete_request", m);
            return;
        }
        if (x->body_n < want)
            return;
    }
    set_state(g, x, R_WAIT, HTTP_QUEUE_SECS);
    ep_watch(g, x, EPOLL_CTL_MOD);
}

static void gate_linger(http_gate *g, hrec *x) {
    char    buf[4096];
    ssize_t n;
    while ((n = recv(x->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
        if ((x->drained += (size_t)n) > (256u << 10))
            break;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        x->drained > (256u << 10))
        rec_close(g, x);
}

/* SEND: write what the socket takes; done: LINGER; the client gone: closed. Each byte taken
 * starts send_secs again; when none is, the kernel's send queue is noted for the deadline's check. */
static void gate_send(http_gate *g, hrec *x) {
    while (x->out_off < x->out_n) {
        ssize_t k = send(x->fd, x->out + x->out_off, x->out_n - x->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            x->out_off += (size_t)k;
            set_state(g, x, R_SEND, g->rules.send_secs);
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (ioctl(x->fd, SIOCOUTQ, &x->outq))
                x->outq = -1;
            return;
        } else {
            rec_close(g, x); /* gone */
            return;
        }
    }
    to_linger(g, x);
}

/* SEND past its deadline: the client acknowledged bytes since the socket last took one (it reads,
 * slowly: served on), else it took none for send_secs: closed. */
static void gate_send_expire(http_gate *g, hrec *x) {
    int q;
    if (x->outq >= 0 && !ioctl(x->fd, SIOCOUTQ, &q) && q < x->outq) {
        x->outq = q;
        set_state(g, x, R_SEND, g->rules.send_secs);
        return;
    }
    char m[120];
    snprintf(m, sizeof m, "the client took no byte of its answer for %d s (K3_SERVE_SEND_SECS): closed",
             g->rules.send_secs);
    gate_note(g, x, 0, m);
    rec_close(g, x);
}

/* ---- accepting ------------------------------------------------------------------------------- */

static int count_addr(const http_gate *g, const char *ip, int s1, int s2) {
    int n = 0;
    for (int i = 0; i < N_REC; i++)
        n += (g->rec[i].state == s1 || g->rec[i].state == s2) && !strcmp(g->rec[i].ip, ip);
    return n;
}

/* The oldest incomplete connection (HEAD, then BODY) of ip, or of anyone when ip is NULL;
 * with anyone, else the oldest waiting one. */
static hrec *victim(http_gate *g, const char *ip) {
    static const int order[] = {R_HEAD, R_BODY, R_WAIT};
    for (int k = 0; k < (ip ? 2 : 3); k++)
        for (int i = g->first[order[k]]; i >= 0; i = g->rec[i].next)
            if (!ip || !strcmp(g->rec[i].ip, ip))
                return &g->rec[i];
    return NULL;
}

/* Room for one more pending connection from ip: the oldest incomplete one over a limit gives
 * way with 503, after a last read (its request may be complete already: then it stays). */
static void make_room(http_gate *g, const char *ip) {
    for (int tries = 0; tries < HTTP_PENDING_ADDR + 2; tries++) {
        int   mine = count_addr(g, ip, R_HEAD, R_BODY);
        int   all  = g->count[R_HEAD] + g->count[R_BODY] + g->count[R_WAIT];
        hrec *v    = mine >= HTTP_PENDING_ADDR ? victim(g, ip)
                     : all >= HTTP_MAX_PENDING ? victim(g, NULL)
                                               : NULL;
        if (!v || (all < HTTP_MAX_PENDING && mono() - v->t_accept < HTTP_BURST_SECS))
            return; /* a burst: requests whose bytes are on their way, not a slowloris yet */
        if (v->state == R_HEAD)
            head_read(g, v, 0);
        else if (v->state == R_BODY)
            body_read(g, v);
        if (v->state == R_HEAD || v->state == R_BODY || (v->state == R_WAIT && mine < HTTP_PENDING_ADDR)) {
            gate_answer(g, v, 503, "server_error", "server_busy",
                        "too many connections are waiting: this one gave way to a newer one");
            return;
        }
    }
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
        make_room(g, ip);
        if (g->first[R_FREE] < 0 && g->first[R_LINGER] >= 0)
            rec_close(g, &g->rec[g->first[R_LINGER]]); /* every record taken: the oldest lingering */
        if (g->first[R_FREE] < 0) {
            close(fd);
            continue;
        }
        hrec *x     = &g->rec[g->first[R_FREE]];
        x->fd       = fd;
        x->t_accept = mono();
        snprintf(x->ip, sizeof x->ip, "%s", ip);
        set_state(g, x, R_HEAD, g->rules.head_secs);
        ep_watch(g, x, EPOLL_CTL_ADD);
        head_read(g, x, 0); /* often the head came with the connection */
    }
}

/* ---- serving: a thread per request ------------------------------------------------------------ */

static void *req_main(void *arg) {
    hrec      *x  = arg;
    http_gate *g  = x->g;
    int        fl = fcntl(x->fd, F_GETFL), one = 1;
    pthread_setname_np(pthread_self(), "k3-request"); /* as top -H and /proc/PID/task/N/comm show it */
    fcntl(x->fd, F_SETFL, fl & ~O_NONBLOCK);
    setsockopt(x->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int sndbuf = HTTP_SNDBUF; /* fixed: what a client that never reads leaves in the kernel is bounded */
    setsockopt(x->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    http_req q = {.fd        = x->fd,
                  .send_secs = g->rules.send_secs,
                  .v11       = x->head.v11,
                  .head_only = !strcmp(x->buf, "HEAD"),
                  .key       = x->key,
                  .ip        = x->ip,
                  .method    = x->buf,
                  .path      = x->buf + x->head.target,
                  .body      = x->body,
                  .body_n    = x->body_n,
                  .rec       = x};
    x->body    = NULL;
    g->handler(g->cls, &q);
    free(q.body);
    free(q.pend);
    fcntl(x->fd, F_SETFL, fl | O_NONBLOCK);
    pthread_mutex_lock(&g->mu);
    g->n_taking -= q.rest != NULL;
    if (q.rest && !q.failed) { /* the rest of the answer goes out from the gate: this thread is free */
        x->out     = q.rest;
        x->out_off = q.rest_off;
        x->out_n   = q.rest_n;
        if (ioctl(x->fd, SIOCOUTQ, &x->outq)) /* the deadline's check: acknowledged since? */
            x->outq = -1;
        set_state(g, x, R_SEND, g->rules.send_secs);
        ep_watch(g, x, EPOLL_CTL_ADD);
    } else {
        g->send_bytes -= q.rest ? q.rest_n : 0;
        free(q.rest);
        if (q.failed || g->stopped)
            rec_close(g, x);
        else
            to_linger(g, x);
    }
    g->zombie[g->n_zombie++] = pthread_self(); /* at most HTTP_MAX_CONN run at once */
    pthread_cond_broadcast(&g->idle_cv);
    if (g->wake[1] >= 0)
        (void)!write(g->wake[1], "", 1); /* a thread is free */
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Join the request threads that ended (lock held; dropped while joining: each is at its return). */
static void reap(http_gate *g) {
    while (g->n_zombie) {
        pthread_t th = g->zombie[--g->n_zombie];
        pthread_mutex_unlock(&g->mu);
        pthread_join(th, NULL);
        pthread_mutex_lock(&g->mu);
    }
}

/* Hand waiting requests to threads while fewer than HTTP_MAX_CONN run: the oldest whose address
 * holds fewer than HTTP_PER_ADDR, else the oldest. */
static void gate_dispatch(http_gate *g) {
    while (!g->stopping && g->count[R_ACTIVE] < HTTP_MAX_CONN && g->first[R_WAIT] >= 0) {
        hrec *best = &g->rec[g->first[R_WAIT]];
        for (int i = g->first[R_WAIT]; i >= 0; i = g->rec[i].next)
            if (count_addr(g, g->rec[i].ip, R_ACTIVE, R_ACTIVE) < HTTP_PER_ADDR) {
                best = &g->rec[i];
                break;
            }
        epoll_ctl(g->ep, EPOLL_CTL_DEL, best->fd, NULL);
        set_state(g, best, R_ACTIVE, 0);
        g->body_bytes -= best->body_cap; /* the body is the request's now */
        best->body_cap = 0;
        pthread_t th;
        if (pthread_create(&th, NULL, req_main, best)) {
            set_state(g, best, R_WAIT, 0);
            gate_answer(g, best, 503, "server_error", "server_busy", "cannot start a thread: retry later");
        }
    }
}

/* ---- the event loop ---------------------------------------------------------------------------- */

static void gate_expire(http_gate *g, double now) {
    static const int st[] = {R_HEAD, R_BODY, R_WAIT, R_SEND, R_LINGER};
    for (int k = 0; k < 5; k++)
        while (g->first[st[k]] >= 0 && g->rec[g->first[st[k]]].deadline <= now) {
            hrec *x = &g->rec[g->first[st[k]]];
            if (st[k] == R_HEAD || st[k] == R_BODY) {
                char m[80];
                snprintf(m, sizeof m, "the request %s did not arrive within %d s",
                         st[k] == R_HEAD ? "head" : "body",
                         st[k] == R_HEAD ? g->rules.head_secs : g->rules.body_secs);
                gate_answer(g, x, 408, "invalid_request_error", "request_timeout", m);
            } else if (st[k] == R_WAIT)
                gate_answer(g, x, 503, "server_error", "server_busy",
                            "every connection slot is busy: retry later");
            else if (st[k] == R_SEND)
                gate_send_expire(g, x);
            else
                rec_close(g, x);
        }
}

static double next_deadline(const http_gate *g, double now) {
    double next = now + 5;
    for (int st = R_HEAD; st < R_NSTATE; st++)
        if (st != R_ACTIVE && g->first[st] >= 0 && g->rec[g->first[st]].deadline < next)
            next = g->rec[g->first[st]].deadline;
    if (g->t_pause > now && g->t_pause < next)
        next = g->t_pause;
    return next;
}

static void gate_event(http_gate *g, uint64_t data, uint32_t ev) {
    int   fd = (int)(data >> 32);
    hrec *x  = &g->rec[(uint32_t)data];
    if (x->fd != fd)
        return; /* closed since, its record taken again */
    int eof = (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    if (x->state == R_HEAD)
        head_read(g, x, eof);
    else if (x->state == R_BODY)
        body_read(g, x);
    else if (x->state == R_SEND)
        gate_send(g, x);
    else if (x->state == R_LINGER)
        gate_linger(g, x);
    else if (x->state == R_WAIT && (ev & (EPOLLHUP | EPOLLERR)))
        rec_close(g, x); /* reset while waiting */
}

/* The connections' reads and writes and deadlines, no accepts, for up to secs while any is in
 * state st (lock held; the gate thread's loop, or after it ended). The wake pipe and the
 * listening socket are not connections: their events are skipped (the listening socket's, taken
 * for a record, was an index past the records' end: a client that connected during the linger at
 * shutdown crashed the server). */
static void gate_pump(http_gate *g, double secs, int st) {
    for (double t_end = mono() + secs; g->first[st] >= 0 && mono() < t_end;) {
        struct epoll_event evs[64];
        pthread_mutex_unlock(&g->mu);
        int n = epoll_wait(g->ep, evs, 64, 50);
        pthread_mutex_lock(&g->mu);
        for (int k = 0; k < n; k++)
            if (evs[k].data.u64 < UINT64_MAX - 1)
                gate_event(g, evs[k].data.u64, evs[k].events);
        gate_expire(g, mono());
    }
}

static void gate_shutdown(http_gate *g) {
    static const int st[] = {R_HEAD, R_BODY, R_WAIT};
    for (int k = 0; k < 3; k++)
        while (g->first[st[k]] >= 0)
            gate_answer(g, &g->rec[g->first[st[k]]], 503, "server_error", "shutting_down",
                        "the server is shutting down");
    gate_pump(g, 0.5, R_LINGER); /* the answers SEND writes go on in http_gate_drain */
    while (g->first[R_LINGER] >= 0)
        rec_close(g, &g->rec[g->first[R_LINGER]]);
    g->stopped = 1;
}

static void *gate_main(void *arg) {
    http_gate *g         = arg;
    int        listening = 1;
    pthread_setname_np(pthread_self(), "k3-http-gate");
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        double now = mono();
        if (!listening && now >= g->t_pause) {
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX - 1};
            listening             = !epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &ev);
        }
        int ms = (int)((next_deadline(g, now) - now) * 1000) + 1;
        pthread_mutex_unlock(&g->mu);
        struct epoll_event evs[64];
        int                n = epoll_wait(g->ep, evs, 64, ms < 0 ? 0 : ms);
        pthread_mutex_lock(&g->mu);
        if (g->stopping)
            break;
        int accept_now = 0;
        for (int k = 0; k < n; k++) {
            if (evs[k].data.u64 == UINT64_MAX) { /* the wake pipe */
                char b[64];
                while (read(g->wake[0], b, sizeof b) > 0) {
                }
            } else if (evs[k].data.u64 == UINT64_MAX - 1) {
                accept_now = 1;
            } else {
                gate_event(g, evs[k].data.u64, evs[k].events);
            }
        }
        gate_expire(g, mono());
        if (accept_now) {
            gate_accept(g);
            if (g->t_pause > mono() && !epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL))
                listening = 0;
        }
        reap(g);
        gate_dispatch(g);
    }
    gate_shutdown(g);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- responses (a request's thread) ------------------------------------------------------------ */

/* Writes wait in poll, not in a blocking send, so that the rule is the client's progress: a
 * write that sees no byte taken for send_secs (K3_SERVE_SEND_SECS) ends the connection. A byte
 * is taken when the kernel accepts it or when the client's TCP acknowledges one (the socket's
 * unacknowledged bytes, SIOCOUTQ, go down): a client that reads slowly opens its window now and
 * then and is served however slowly; one that stopped reading acknowledges nothing. A connection
 * shut down by another thread (serve.c, a stream cancelled for its unread backlog) fails the
 * write at once. */

/* What the socket takes of p[0..n) now, without waiting; when it takes nothing, the rule above
 * (q->t_taken: when a byte was last taken; q->outq: the socket's unacknowledged bytes then).
 * Bytes taken; q->failed set when the client is gone or took no byte for send_secs. */
static size_t send_now(http_req *q, const char *p, size_t n) {
    size_t done = 0;
    while (done < n && !q->failed) {
        ssize_t k = send(q->fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            q->t_taken = mono();
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            int now_q;
            if (!ioctl(q->fd, SIOCOUTQ, &now_q)) {
                if (q->outq >= 0 && now_q < q->outq)
                    q->t_taken = mono(); /* the client acknowledged bytes: it reads */
                q->outq = now_q;
            }
            if (mono() - q->t_taken > q->send_secs) { /* no byte taken for send_secs */
                q->failed  = 1;
                q->stalled = HTTP_STALL_QUIET;
            }
            break;
        } else {
            q->failed = 1; /* gone, or shut down */
        }
    }
    return done;
}

static int send_all(http_req *q, const char *p, size_t n) {
    q->t_taken = mono();
    q->outq    = -1;
    for (size_t k; n && !q->failed; p += k, n -= k)
        if ((k = send_now(q, p, n)) < n && !q->failed) {
            struct pollfd pf = {.fd = q->fd, .events = POLLOUT};
            poll(&pf, 1, 250);
        }
    return q->failed ? -1 : 0;
}

/* Whether the gate takes a response of n bytes to write (SEND): within HTTP_SEND_BUDGET and
 * N_SEND, counted from now (req_main hands it over). */
static int gate_take(http_gate *g, size_t n) {
    pthread_mutex_lock(&g->mu);
    int ok = g->send_bytes + n <= HTTP_SEND_BUDGET && g->count[R_SEND] + g->n_taking < N_SEND;
    if (ok)
        g->send_bytes += n, g->n_taking++;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* The status line and headers; len < 0: a body of unknown length. */
static int head_text(char *out, size_t cap, http_req *q, int status, const char *ctype, const char *extra,
                     long long len) {
    char framing[64] = "";
    if (len >= 0)
        snprintf(framing, sizeof framing, "Content-Length: %lld\r\n", len);
    else if (q->chunked)
        snprintf(framing, sizeof framing, "Transfer-Encoding: chunked\r\n");
    int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%sConnection: close\r\n\r\n", status,
                     reason(status), ctype, framing, extra ? extra : "");
    return n > 0 && (size_t)n < cap ? n : -1;
}

int http_respond(http_req *q, int status, const char *ctype, const char *extra, const char *body, size_t n) {
    if (q->sent || q->failed)
        return -1;
    q->sent     = 1;
    size_t blen = q->head_only ? 0 : n;
    char  *out  = malloc(1024 + blen);
    int    hn   = out ? head_text(out, 1024, q, status, ctype, extra, (long long)n) : -1;
    if (hn < 0) {
        free(out);
        q->failed = 1;
        return -1;
    }
    if (blen)
        memcpy(out + hn, body, blen);
    size_t  len = (size_t)hn + blen, k = 0; /* one write: no small segment left behind */
    ssize_t s;
    while (k < len && (s = send(q->fd, out + k, len - k, MSG_NOSIGNAL | MSG_DONTWAIT)) > 0)
        k += (size_t)s;
    if (k < len && q->rec && gate_take(((hrec *)q->rec)->g, len)) { /* the gate writes the rest */
        q->rest     = out;
        q->rest_off = k;
        q->rest_n   = len;
        return 0;
    }
    int rc = send_all(q, out + k, len - k);
    free(out);
    return rc;
}

/* ---- a stream: written as the socket takes it, its end by the gate ------------------------------ */

/* Appends p[0..n) to the stream's bytes not yet sent, as a chunk when chunked (raw: framed
 * as they are); fin: and the end of the body. -1 when out of memory. */
static int pend_add(http_req *q, const char *p, size_t n, int raw, int fin) {
    if (q->head_only)
        return 0;
    int    chunk = q->chunked && !raw && n;
    size_t need  = q->pend_n + n + (chunk ? 32 : 0) + (fin && q->chunked ? 5 : 0);
    if (need > q->pend_cap) {
        size_t cap = q->pend_cap ? q->pend_cap : 4096;
        while (cap < need)
            cap *= 2;
        char *nb = realloc(q->pend, cap);
        if (!nb)
            return -1;
        q->pend = nb, q->pend_cap = cap;
    }
    if (q->pend_off == q->pend_n) { /* the stall rule starts with the first byte waiting */
        q->t_taken = mono();
        q->outq    = -1;
    }
    if (chunk)
        q->pend_n += (size_t)snprintf(q->pend + q->pend_n, 32, "%zx\r\n", n);
    if (n)
        memcpy(q->pend + q->pend_n, p, n);
    q->pend_n += n;
    if (chunk)
        memcpy(q->pend + q->pend_n, "\r\n", 2), q->pend_n += 2;
    if (fin && q->chunked)
        memcpy(q->pend + q->pend_n, "0\r\n\r\n", 5), q->pend_n += 5;
    return 0;
}

int http_stream_flush(http_req *q) {
    q->pend_off += send_now(q, q->pend + q->pend_off, q->pend_n - q->pend_off);
    if (q->pend_off == q->pend_n)
        q->pend_off = q->pend_n = 0;
    return q->failed ? -1 : 0;
}

size_t http_stream_left(const http_req *q) {
    return q->pend_n - q->pend_off;
}

int http_stream_begin(http_req *q, int status, const char *ctype, const char *extra) {
    if (q->sent || q->failed)
        return -1;
    q->sent    = 1;
    q->chunked = q->v11;
    char out[1024];
    int  hn      = head_text(out, sizeof out, q, status, ctype, extra, -1);
    int  ho      = q->head_only;
    q->head_only = 0; /* the head goes out whatever the method */
    int rc       = hn < 0 ? -1 : pend_add(q, out, (size_t)hn, 1, 0);
    q->head_only = ho;
    return rc ? (q->failed = 1, -1) : http_stream_flush(q);
}

int http_stream_write(http_req *q, const char *p, size_t n) {
    if (q->failed)
        return -1;
    return pend_add(q, p, n, 0, 0) ? (q->failed = 1, -1) : http_stream_flush(q);
}

int http_stream_end(http_req *q, const char *p, size_t n) {
    if (q->failed || pend_add(q, p, n, 0, 1))
        return q->failed = 1, -1;
    if (http_stream_flush(q) || !http_stream_left(q))
        return q->failed ? -1 : 0;
    if (q->rec && gate_take(((hrec *)q->rec)->g, q->pend_n)) { /* the gate writes the rest */
        q->rest     = q->pend;
        q->rest_off = q->pend_off;
        q->rest_n   = q->pend_n;
        q->pend     = NULL;
        q->pend_off = q->pend_n = q->pend_cap = 0;
        return 0;
    }
    int rc      = send_all(q, q->pend + q->pend_off, q->pend_n - q->pend_off);
    q->pend_off = q->pend_n = 0;
    return rc;
}

/* ---- the gate's life ----------------------------------------------------------------------------- */

http_gate *http_gate_open(const struct sockaddr *addr, socklen_t alen, const http_rules *r,
                          const char **step) {
    *step        = "set up";
    http_gate *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->lfd = g->ep = g->wake[0] = g->wake[1] = -1;
    for (int st = 0; st < R_NSTATE; st++)
        g->first[st] = g->last[st] = -1;
    for (int i = 0; i < N_REC; i++) {
        g->rec[i] = (hrec){.fd = -1, .prev = i - 1, .next = i + 1 < N_REC ? i + 1 : -1, .g = g};
    }
    g->first[R_FREE] = 0, g->last[R_FREE] = N_REC - 1, g->count[R_FREE] = N_REC;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->idle_cv, NULL);
    g->rules = *r;
    if (r->allow_hosts && !(g->allow = strdup(r->allow_hosts)))
        goto fail;
    g->rules.allow_hosts = g->allow;
    int one = 1, zero = 0;
    *step = "open a socket for";
    if ((g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        (addr->sa_family == AF_INET6 && setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero)))
        goto fail;
    *step = "bind";
    if (bind(g->lfd, addr, alen))
        goto fail;
    *step = "listen on";
    if (listen(g->lfd, 128))
        goto fail;
    *step = "set up";
    if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) || (g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    struct epoll_event el = {.events = EPOLLIN, .data.u64 = UINT64_MAX - 1};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake[0], &ev) || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &el))
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

int http_gate_start(http_gate *g, http_handler h, void *cls) {
    g->handler = h;
    g->cls     = cls;
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
    pthread_mutex_lock(&g->mu);
    g->stopped = 1;
    pthread_mutex_unlock(&g->mu);
    if (g->lfd >= 0)
        close(g->lfd);
    g->lfd = -1;
}

static int wait_idle(http_gate *g, double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)secs;
    ts.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (g->count[R_ACTIVE] > 0 && pthread_cond_timedwait(&g->idle_cv, &g->mu, &ts) != ETIMEDOUT) {
    }
    return g->count[R_ACTIVE];
}

int http_gate_drain(http_gate *g, double secs) {
    pthread_mutex_lock(&g->mu);
    double t_end = mono() + secs;
    int    left  = wait_idle(g, secs);
    if (left) { /* responses still being written to clients that do not read: end them */
        for (int i = g->first[R_ACTIVE]; i >= 0; i = g->rec[i].next)
            shutdown(g->rec[i].fd, SHUT_RDWR);
        wait_idle(g, 2);
    }
    reap(g);
    gate_pump(g, t_end - mono(), R_SEND); /* the answers the gate writes, in the time left */
    left += g->count[R_SEND];
    for (int st = R_SEND; st <= R_LINGER; st++)
        while (g->first[st] >= 0)
            rec_close(g, &g->rec[g->first[st]]);
    pthread_mutex_unlock(&g->mu);
    return left ? -1 : 0;
}

void http_gate_free(http_gate *g) {
    if (!g)
        return;
    http_gate_stop(g);
    pthread_mutex_lock(&g->mu);
    reap(g);
    int busy = g->count[R_ACTIVE];
    for (int i = 0; i < N_REC; i++)
        if (g->rec[i].state != R_FREE && g->rec[i].state != R_ACTIVE)
            rec_close(g, &g->rec[i]);
    pthread_mutex_unlock(&g->mu);
    if (busy)
        return; /* a request's thread still holds it (its client never read): left to the exit */
    if (g->ep >= 0)
        close(g->ep);
    for (int k = 0; k < 2; k++)
        if (g->wake[k] >= 0)
            close(g->wake[k]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->idle_cv);
    free(g->allow);
    free(g);
}

int http_peer_gone(int fd, int can_probe, double *t_probe) {
    /* Bytes after the request (a pipelined request, a stray CRLF after a body) are never served:
     * one request per connection. They are read and dropped, as LINGER drops them after the
     * answer, so that what comes after them, the end of the connection, is seen (a peek stopped at
     * the first of them for good, and a client that left was never noticed). At most 64 kB a call. */
    char    buf[4096];
    ssize_t r;
    for (int k = 0; (r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0 && k < 16; k++) {
    }
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
