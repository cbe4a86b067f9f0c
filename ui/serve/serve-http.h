/* serve-http.h: the server's HTTP layer (serve-http.c), the only HTTP parser in the path: its
 * own listening socket and event loop, the request head and body read and checked there,
 * connection limits and deadlines, a thread per request being served, the responses written
 * on the socket, and the text rules (UTF-8, escaping) of what the server echoes and logs.
 * serve.c keeps the routes and the jobs: it gets each complete, checked request once
 * (http_handler) and answers it with http_respond or a stream (http_stream_*).
 */
#pragma once
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#define HTTP_MAX_CONN 64     /* requests being served at once (a thread each)             */
#define HTTP_PER_ADDR 16     /* a waiting request from an address that holds this many    */
                             /* goes after those from addresses that hold fewer            */
#define HTTP_MAX_PENDING 256 /* connections whose request is being read or that wait     */
#define HTTP_PENDING_ADDR 32 /* incomplete ones from one client address                  */
#define HTTP_BURST_SECS 1    /* over it, only one incomplete for this long gives way      */
#define HTTP_QUEUE_SECS 10   /* a complete request waits this long for a slot, then 503    */
#define HTTP_MAX_HEAD 16384  /* bytes of a request head (431 beyond)                      */
#define HTTP_MAX_TARGET 8192 /* bytes of a request line (414 beyond)                       */
#define HTTP_MAX_FIELDS 100  /* header fields of a request (431 beyond)                    */

/* What the head checks enforce beyond HTTP itself. */
typedef struct http_rules {
    int         keyless;     /* no API key: Host must be an IP, localhost or allowed; POST needs JSON */
    const char *allow_hosts; /* comma-separated extra Host names for a keyless server, or NULL     */
    size_t      max_body;    /* Content-Length above this: 413 from the head                       */
    int         head_secs;   /* the head must be complete this long after the accept (408)         */
    int         body_secs;   /* the body must be complete this long after the head (408)           */
    int         send_secs;   /* a response write that sees no byte taken this long: closed          */
    /* The API key index of an Authorization value (v[0..n), white space around it trimmed; NULL
     * when absent), -1 for a missing or wrong key: 401 before any body is read. NULL: no keys. */
    int (*auth)(const char *v, size_t n);
} http_rules;

/* The verdict on a request head, and what a request that passes is made of (offsets into the
 * head's bytes). */
typedef struct http_head {
    size_t             len;              /* bytes of the head, final CRLF CRLF included            */
    int                status;           /* 0: hand it on; else the HTTP status to answer and close */
    char               code[40];         /* error code of the JSON answer                           */
    char               msg[240];         /* its message                                             */
    int                v11;              /* HTTP/1.1 (else 1.0)                                     */
    int                expect;           /* Expect: 100-continue on HTTP/1.1                        */
    size_t             method_n;         /* the method is bytes [0, method_n)                       */
    size_t             target, target_n; /* the request target                              */
    size_t             auth, auth_n;     /* Authorization's value; auth_n 0: none            */
    int                has_auth;
    unsigned long long body; /* Content-Length (0 without one)                          */
} http_head;

/* Where an incremental check of a head stands: start with {0}. */
typedef struct http_scan {
    size_t pos;      /* bytes already checked                     */
    size_t line_len; /* the request line's length, once its CR is in */
    int    has_line;
} http_scan;

/* Check the first n bytes a client sent (the same bytes as before plus any new ones: bytes
 * before s->pos are not looked at again, so a head trickled byte by byte costs constant work
 * per byte); eof: it will send no more. Returns 0 while the head is incomplete and nothing is
 * wrong yet, 1 when h holds a verdict (status 0 = pass). */
int http_head_scan(const char *p, size_t n, http_scan *s, int eof, const http_rules *r, http_head *h);
/* The same on a whole buffer at once. */
int http_head_check(const char *p, size_t n, int eof, const http_rules *r, http_head *h);

/* Whether a write of the response found its client not reading, and whether that was said. */
typedef enum http_stall {
    HTTP_STALL_NONE,   /* every write was taken (or failed for another reason)                   */
    HTTP_STALL_QUIET,  /* a write saw no byte taken for send_secs: the response was cut, unlogged */
    HTTP_STALL_LOGGED, /* the same, and the handler has logged it (a stream, with its number)     */
} http_stall;

/* A complete request, checked, as the handler gets it. */
typedef struct http_req {
    int         fd;        /* the connection (writes end after send_secs untaken)         */
    int         send_secs; /* the rules' send_secs                                        */
    int         v11;       /* HTTP/1.1                                                   */
    int         head_only; /* HEAD: the response has no body                             */
    int         key;       /* its API key's index (0 when the server has none)           */
    const char *ip;        /* the client's address as text (the per-address limits' key)  */
    const char *method;    /* NUL-terminated                                             */
    const char *path;      /* the target's path, %-decoded, without the query            */
    char       *body;      /* (body_n) malloc'd; the handler may free it and set NULL    */
    size_t      body_n;
    int         sent;             /* the response has begun                                       */
    int         chunked;          /* the stream is chunked (HTTP/1.1)                             */
    int         failed;           /* a write failed: the client is gone                           */
    http_stall  stalled;          /* set by a write that saw no byte taken for send_secs          */
    void       *rec;              /* the gate's record of the connection (serve-gate.c)            */
    char       *rest;             /* (rest_n) a whole response the gate writes once the handler returns */
    size_t      rest_off, rest_n; /* of which sent by the thread                          */
    char       *pend;             /* (pend_n of pend_cap) a stream's bytes, framed, sent up to pend_off */
    size_t      pend_off, pend_n, pend_cap;
    double      t_taken;    /* monotonic seconds a byte of the response was last taken          */
    int         outq;       /* the socket's unacknowledged bytes when it last took none (-1: unknown) */
    char        req_id[48]; /* the handler's X-Request-Id for the response ("": none)       */
} http_req;

/* Answers q (a thread of the layer's; may block). Returns when the response is written. */
typedef void (*http_handler)(void *cls, http_req *q);

/* One whole response: status, Content-Type, extra header lines (each ending CRLF, or NULL),
 * body. Connection: close. What the socket does not take at once is written by the gate's event
 * loop after the handler returns (its thread is free; within the gate's budget of such bytes,
 * else written here as a stream is), so a client that reads slowly holds no thread. 0, or -1
 * when the client is gone. */
int http_respond(http_req *q, int status, const char *ctype, const char *extra, const char *body, size_t n);
/* A response whose body comes in pieces: chunked on HTTP/1.1, until the close on 1.0. Nothing
 * waits for the client: begin and write queue the bytes and send what the socket takes now;
 * http_stream_flush sends more of them (when the socket has room: poll the fd for POLLOUT while
 * http_stream_left says bytes wait); http_stream_end queues the last bytes p[0..n) and the end,
 * and what the socket does not take then is written by the gate's event loop after the handler
 * returns (as http_respond's: its thread is free), so a client that reads a finished stream
 * slowly holds no thread. Each returns -1 once the client is gone or took no byte of the bytes
 * waiting for send_secs (q->stalled), else 0. */
int    http_stream_begin(http_req *q, int status, const char *ctype, const char *extra);
int    http_stream_write(http_req *q, const char *p, size_t n);
int    http_stream_flush(http_req *q);
size_t http_stream_left(const http_req *q);
int    http_stream_end(http_req *q, const char *p, size_t n);

typedef struct http_gate http_gate;

/* Bind and listen on addr (no SO_REUSEPORT: a port in use is refused; IPv6 also takes IPv4,
 * IPV6_V6ONLY off). NULL with errno set and *step the failed step as a verb ("bind", "listen on",
 * "open a socket for", "set up"). */
http_gate *http_gate_open(const struct sockaddr *addr, socklen_t alen, const http_rules *r,
                          const char **step);
unsigned   http_gate_port(const http_gate *g);
/* Start the event loop thread, handing each complete request to h (a thread per request). 0 or -1. */
int http_gate_start(http_gate *g, http_handler h, void *cls);
/* Stop accepting (the socket closes) and answer every request not yet handed on with 503
 * shutting_down. Then http_gate_drain waits up to secs for the handed-on ones to finish
 * (then closes their connections and waits a little more). */
void http_gate_stop(http_gate *g);
int  http_gate_drain(http_gate *g, double secs);
void http_gate_free(http_gate *g);

/* A peer during a request (the request's thread, before the response starts): 0 still there,
 * 1 gone. Bytes it sent after the request are read and dropped (never served). A peer that closed its sending
 * side (EOF) may still read: on HTTP/1.1 (can_probe) an interim "100 Continue" is sent at most once a second,
 * which a closed peer answers with a reset, seen at the next check; *t_probe keeps the time of the last one
 * (start with 0). */
int http_peer_gone(int fd, int can_probe, double *t_probe);

/* Copy src[0..n) into dst (cap >= 1 bytes, always terminated) as valid UTF-8: control
 * characters (C0, DEL, C1, bidi overrides, line separators) as \n \t \xHH \u202E escapes,
 * invalid bytes as \xHH; an incomplete character at the end of src (a cut) is dropped; stops
 * at a character boundary when dst is full. Returns strlen. Text is escaped once: a backslash
 * stays one backslash. */
size_t http_clean(char *dst, size_t cap, const char *src, size_t n);

/* One line to stderr, "k3chat: serve: " + the formatted text, control characters escaped. */
void serve_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The JSON error body {"error":{"message","type","param","code"}} (message cleaned; param: the
 * request field at fault, NULL for none: null, as OpenAI writes it), malloc'd. */
char *http_error_json(const char *type, const char *code, const char *param, const char *msg);
