/* serve-http.h: the server's front door (serve-http.c): its own listening socket and accept
 * loop, checks of the raw request head, connection limits, and the text rules (UTF-8, escaping)
 * of what the server echoes and logs. serve.c keeps the routes, the jobs and libmicrohttpd's
 * request handler; connections reach libmicrohttpd only through http_gate (MHD_add_connection).
 */
#pragma once
#include <microhttpd.h>
#include <stddef.h>
#include <sys/socket.h>

#define HTTP_MAX_CONN 64     /* connections handed to libmicrohttpd at once             */
#define HTTP_PER_ADDR 16     /* of which from one client address                       */
#define HTTP_RESERVED 16     /* of which kept for addresses that have none yet         */
#define HTTP_MAX_PENDING 256 /* connections whose head is being read or that wait      */
#define HTTP_PENDING_ADDR 32 /* of which from one client address                       */
#define HTTP_HEAD_SECS 10    /* the whole request head must arrive within this         */
#define HTTP_QUEUE_SECS 10   /* a complete request waits this long for a slot, then 503 */
#define HTTP_BODY_SECS 60    /* the body must be complete this long after the head     */
#define HTTP_IDLE_SECS 30    /* libmicrohttpd's idle timeout                           */
#define HTTP_MAX_HEAD 16384  /* bytes of a request head (431 beyond)                  */
#define HTTP_MAX_TARGET 8192 /* bytes of a request line (414 beyond)                   */
#define HTTP_MAX_FIELDS 100  /* header fields of a request (431 beyond)                */

/* What the head checks enforce beyond HTTP itself. */
typedef struct http_rules {
    int         keyless;     /* no API key: Host must be an IP, localhost or allowed; POST needs JSON */
    const char *allow_hosts; /* comma-separated extra Host names for a keyless server, or NULL     */
    size_t      max_body;    /* Content-Length above this: 413 from the head                       */
} http_rules;

/* The verdict on a request head. */
typedef struct http_head {
    size_t len;      /* bytes of the head, final CRLF CRLF included            */
    int    status;   /* 0: hand it on; else the HTTP status to answer and close */
    char   code[40]; /* error code of the JSON answer                           */
    char   msg[240]; /* its message                                             */
} http_head;

/* Check the first n bytes a client sent; eof: it will send no more. Returns 0 while the head
 * is incomplete and nothing is wrong yet, 1 when h holds a verdict (status 0 = pass). */
int http_head_check(const char *p, size_t n, int eof, const http_rules *r, http_head *h);

typedef struct http_gate http_gate;

/* Bind and listen on addr (no SO_REUSEPORT: a port in use is refused). NULL with errno set. */
http_gate *http_gate_open(const struct sockaddr *addr, socklen_t alen, const http_rules *r);
unsigned   http_gate_port(const http_gate *g);
/* Start the accept thread, handing checked connections to d (started with
 * MHD_USE_NO_LISTEN_SOCKET and MHD_OPTION_NOTIFY_CONNECTION http_gate_notify, g). 0 or -1. */
int  http_gate_start(http_gate *g, struct MHD_Daemon *d);
void http_gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe);
/* Stop accepting (the socket closes) and answer every connection not yet handed on with 503
 * shutting_down. Then http_gate_drain waits up to secs for the handed-on ones to close. */
void http_gate_stop(http_gate *g);
int  http_gate_drain(http_gate *g, double secs);
void http_gate_free(http_gate *g);

/* A peer during a request (the connection thread, before the response starts): 0 still there,
 * 1 gone. A peer that closed its sending side (EOF) may still read: on HTTP/1.1 (can_probe)
 * an interim "100 Continue" is sent at most once a second, which a closed peer answers with a
 * reset, seen at the next check; *t_probe keeps the time of the last one (start with 0). */
int http_peer_gone(int fd, int can_probe, double *t_probe);

/* Copy src[0..n) into dst (cap >= 1 bytes, always terminated) as valid UTF-8: control
 * characters (C0, DEL, C1, bidi overrides, line separators) as \n \t \xHH \u202E escapes,
 * invalid bytes as \xHH, backslash doubled when log != 0; an incomplete character at the end
 * of src (a cut) is dropped; stops at a character boundary when dst is full. Returns strlen. */
size_t http_clean(char *dst, size_t cap, const char *src, size_t n, int log);

/* One line to stderr, "k3chat: serve: " + the formatted text, control characters escaped. */
void serve_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The JSON error body {"error":{"message","type","code"}} (message cleaned), malloc'd. */
char *http_error_json(const char *type, const char *code, const char *msg);
