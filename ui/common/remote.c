/* remote.c: the UI seam's third backend (engine.h): `k3chat --endpoint URL` chats with a remote
 * OpenAI-compatible server (vLLM, SGLang, `k3chat --serve`) over libcurl.
 *
 * DESIGN
 * The conversation lives here, in a k3_conv (no model attached): messages, settings, /undo,
 * /retry, /system, transcripts (/save, /load, /export) and the autosave work exactly as with a
 * local model. Each turn POSTs the whole history to URL/chat/completions with "stream": true;
 * assistant turns carry their reasoning back (Kimi's preserved reasoning) under both of its
 * names, "reasoning" (vLLM since 0.16, which drops "reasoning_content") and "reasoning_content"
 * (DeepSeek, older vLLM, SGLang): a server ignores the field it does not know. The answer is parsed
 * incrementally as server-sent events: bytes are cut into lines (any split across network reads is fine),
 * "data:" lines are joined per event and each event is one JSON chunk; the think channel comes from
 * delta.reasoning_content, .reasoning or .thinking, the answer from delta.content. A server that answers with
 * one JSON body instead of a stream is accepted too. A lone UTF-16 surrogate escape in a server's
 * JSON is one U+FFFD (server_json), as invalid UTF-8 is everywhere else (raw in a server's JSON
 * too), but the halves of a pair split between two events of one field are joined (halves_join);
 * a tool call that a finish_reason "length" cut is shown but not kept (doc/tool-calls.md), and
 * arguments sent as an object are that object's text. No compression is asked for, but a body
 * compressed anyway is decoded; a server on this machine is reached without the environment's
 * proxy.
 *
 * Failures (cannot connect, timeouts, HTTP errors with the server's error message, an error in a
 * 200 answer, a malformed stream, a stream cut short) become one EV_ERROR line; the user's message
 * stays in the conversation (with what was streamed, as an interrupted reply) and /retry sends it
 * again. An answer that the server ended before the model did (finish_reason "content_filter",
 * "abort") is kept, marked interrupted, with a line saying so.
 * Ctrl-C aborts the transfer from libcurl's progress callback. What only a local engine can do
 * (/experts, /replay) says so.
 */
#include "engine.h"
#include "text.h"
#include "k3.h"
#include "tool-json.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REMOTE_MAX_BODY (1u << 20)    /* bytes kept of a non-stream body (errors, JSON answers) */
#define REMOTE_MAX_LIST (16u << 20)   /* bytes of the /models list (OpenRouter's runs past 1 MiB) */
#define REMOTE_MAX_EVENT (1u << 20)   /* bytes of one stream event (its line, its data lines)    */
#define REMOTE_MAX_ANSWER (64u << 20) /* bytes of one answer: reasoning, text, tool calls         */
#define REMOTE_MAX_CALLS 128          /* tool calls in one answer                              */
#define REMOTE_MAX_TOKENS (1 << 29)   /* a token count past this is not believed (two add up in an int) */
#define REMOTE_CONNECT_S 10L
#define REMOTE_END_WAIT_S 3 /* seconds the body may go on after the answer's end (on_xfer) */

typedef struct rcall { /* a tool call of the answer, as it streams */
    char   *id, *name; /* NULL until the server names them */
    txt_buf args;      /* the arguments' JSON text so far   */
    int     shown;     /* "-> name(" went to the UI (its box: remote.box) */
    long    half;      /* the high surrogate that ended the last piece of args, 0 if none (halves_join) */
} rcall;

typedef struct remote {
    ue         *u;
    k3_conv    *c;
    CURLU      *url;      /* --endpoint as libcurl reads it; each request sets its path (url_read) */
    int         loopback; /* its host is this machine's (url_loopback): reached directly, never by a proxy */
    const char *req;      /* the request's path under the base: "/models", "/chat/completions" (http) */
    char       *path;     /* the API base's path: "/v1", "" for the root (no trailing slash)      */
    char       *shown;    /* the base without user:password@ or query (messages, the status bar)  */
    char       *model;    /* NULL = not known yet (heap: a server's id may be long) */
    char       *auth;     /* "Authorization: Bearer KEY" or NULL (heap: a JWT may run to kilobytes) */
    int         ctx_max;  /* from /models max_model_len, -1 unknown */
    int         ctx_used; /* prompt + completion tokens of the last answered turn (usage) */
    int         idle_s;   /* K3_ENDPOINT_IDLE_SECS: an answer without progress this long is stopped */
    double      progress_at; /* when the transfer began or last brought a part of the answer (ev_now) */
    double      end_at;      /* when "[DONE]" or the first finish_reason came, 0: not yet (on_xfer) */
    CURL       *curl;
    char        cerr[CURL_ERROR_SIZE];
    /* one turn */
    int         http; /* status of the response being read */
    int         is_sse;
    txt_buf     line;        /* partial SSE line                   */
    txt_buf     data;        /* data lines of the current event    */
    int         ev_error;    /* the current event is "event: error" */
    int         after_cr;    /* the last read ended with a line's CR  */
    int         n_events;    /* events read (data: lines ended)       */
    int         at_end;      /* the body ended: an event left is its last, perhaps cut */
    txt_buf     body;        /* a non-stream body                  */
    txt_buf     think, resp; /* the answer so far                  */
    long        half[2];     /* per channel (EV_CH_THINK, EV_CH_RESPONSE): halves_join's pending high */
    txt_buf     joined;      /* halves_join's text of one piece    */
    rcall      *calls;       /* (n_calls) its tool calls           */
    int         n_calls, cap_calls;
    int         box; /* the call whose box is open in the UI (ue_emit_call), -1: none */
    int         done, n_prompt, n_completion;
    int         n_reason; /* usage.completion_tokens_details.reasoning_tokens, -1 when not said */
    ue_tokstats tok;
    char        finish[32];
    char        err[600]; /* why the stream was rejected        */

} remote;

/* ---- HTTP ----------------------------------------------------------------------------- */

static size_t on_body(char *p, size_t sz, size_t nm, void *ud);

/* Ctrl-C, or no progress for idle_s: counted in parts of the answer, not bytes (a server that sends
 * keep-alive comments or empty deltas without end held a --plain chat for ever); a body that is
 * not a stream progresses by its bytes. */
static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    remote *r = ud;
    /* the answer's end came ("[DONE]", or a finish_reason) but not the body's: a server or proxy
     * that left the connection open held a whole answer until the idle limit, which then called it
     * interrupted. REMOTE_END_WAIT_S after the end and the last part (usage may follow a finish)
     * the transfer stops as the answer's end (http); a server that ends its body as it should
     * keeps the connection for the next turn. */
    if (r->end_at > 0 && ev_now() - fmax(r->end_at, r->progress_at) > REMOTE_END_WAIT_S)
        return 1;
    if (ue_cancelled(r->u))
        return 1;
    if (ev_now() - r->progress_at <= r->idle_s)
        return 0;
    snprintf(r->err, sizeof r->err,
             "no part of the answer came for %d s (K3_ENDPOINT_IDLE_SECS) and the request was stopped",
             r->idle_s);
    return 1;
}

/* GET or POST (body != NULL) the base's path + path; the answer goes through on_body. */
static CURLcode http(remote *r, const char *path, const char *body, long timeout_s) {
    k3_buf at = {0};
    r->req    = path;
    k3_buf_printf(&at, "%s%s", r->path, path);
    CURLUcode uc = at.p ? curl_url_set(r->url, CURLUPART_PATH, at.p, 0) : CURLUE_OUT_OF_MEMORY;
    free(at.p);
    if (uc != CURLUE_OK)
        return CURLE_OUT_OF_MEMORY;
    struct curl_slist *h = NULL;
    h                    = curl_slist_append(h, "Content-Type: application/json");
    h                    = curl_slist_append(h,
                          body ? "Accept: text/event-stream, application/json" : "Accept: application/json");
    /* no compression asked (a compressor buffers a stream: no token shows until a block fills), but
     * a body compressed anyway (a proxy's gzip, an error page) is decoded (CURLOPT_ACCEPT_ENCODING):
     * it was read as the compressed bytes, a stream 'without one data: event' */
    h = curl_slist_append(h, "Accept-Encoding: identity");
    if (r->auth)
        h = curl_slist_append(h, r->auth);
    CURL *c = r->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_CURLU, r->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* http and https only (url_read gives a URL without a scheme http://) */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* decode all libcurl knows; the header above asks */
    /* libcurl takes a proxy from the environment (http_proxy, https_proxy, all_proxy; no_proxy)
     * for any host: a server on this machine went through it, the key in the clear to the proxy,
     * which reached its own loopback or failed ('answered 502') */
    if (r->loopback)
        curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, REMOTE_CONNECT_S);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->cerr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "k3chat/" K3_VERSION);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    r->cerr[0] = 0;
    r->http    = 0;
    r->is_sse  = -1;
    r->body.n = r->line.n = r->data.n = 0;
    r->ev_error = r->after_cr = r->n_events = r->at_end = 0;
    r->progress_at                                      = ev_now();
    r->end_at                                           = 0;
    CURLcode rc                                         = curl_easy_perform(c);
    long     code                                       = 0;
    if (rc == CURLE_ABORTED_BY_CALLBACK && r->end_at > 0 && !r->err[0]) /* after the end (on_xfer) */
        rc = CURLE_OK;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    r->http = (int)code;
    curl_slist_free_all(h);
    return rc;
}

/* The 16-bit value of the \uXXXX escape at s[0..n) (s[0] is its backslash), or -1. */
static long u_escape(const char *s, size_t n) {
    if (n < 6 || s[0] != '\\' || s[1] != 'u')
        return -1;
    long v = 0;
    for (int k = 2; k < 6; k++) {
        int c = (unsigned char)s[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Where the next lone surrogate escape at or after from (an escape's start or a byte outside
 * one) begins: a \uD800..\uDBFF without a \uDC00..\uDFFF right after it, or a low half alone;
 * n if none. In valid JSON every backslash begins an escape inside a string, so the scan needs
 * no string state. */
static size_t lone_surrogate(const char *s, size_t n, size_t from) {
    for (size_t i = from; i + 1 < n;) {
        const char *b = memchr(s + i, '\\', n - i);
        if (!b)
            break;
        i      = (size_t)(b - s);
        long v = u_escape(s + i, n - i);
        if (v < 0xd800 || v > 0xdfff) {
            i += v < 0 ? 2 : 6;
            continue;
        }
        long lo = v < 0xdc00 ? u_escape(s + i + 6, n - i - 6) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return i;
        i += 12; /* a pair: one character */
    }
    return n;
}

/* 1 when the lone surrogate escape at s[at] stands at an edge of its string: a high half right
 * before the closing quote, or a low half right after the opening one (a quote with an even run of
 * backslashes before it is no escaped quote). Those are the halves of a pair that a server split
 * between two events (a token that ends between them, JavaScript's string cut at a UTF-16 unit). */
static int at_edge(const char *s, size_t n, size_t at) {
    if (u_escape(s + at, n - at) < 0xdc00)
        return at + 6 < n && s[at + 6] == '"';
    if (!at || s[at - 1] != '"')
        return 0;
    size_t k = at - 1;
    while (k && s[k - 1] == '\\')
        k--;
    return (at - 1 - k) % 2 == 0;
}

/* halves_join's marks: a lone half at an edge, value v (0xD800..0xDFFF), is parsed as the code
 * point U+100000 + (v - 0xD800) (private use), UTF-8 F4 80 [80..9F] [80..BF]; marks are made only
 * in a text that holds none of those code points itself (marks_free), so each in the parsed
 * strings is one. The value of a mark at s[0..n), or -1. */
static long mark_of(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n < 4 || u[0] != 0xf4 || u[1] != 0x80 || (u[2] & 0xe0) != 0x80 || (u[3] & 0xc0) != 0x80)
        return -1;
    return 0xd800 + ((long)(u[2] & 0x1f) << 6 | (u[3] & 0x3f));
}

/* 1 when s[0..n) holds nothing that parses as a mark: no bytes F4 80, no escape \uDBC0 or \uDBC1
 * (the high halves of U+100000..U+1007FF); conservative (any F4 80 counts). */
static int marks_free(const char *s, size_t n) {
    if (memmem(s, n, "\xf4\x80", 2))
        return 0;
    for (size_t i = 0; i + 1 < n;) {
        const char *b = memchr(s + i, '\\', n - i);
        if (!b)
            break;
        i      = (size_t)(b - s);
        long v = u_escape(s + i, n - i);
        if (v == 0xdbc0 || v == 0xdbc1)
            return 0;
        i += v < 0 ? 2 : 6;
    }
    return 1;
}

/* A server's JSON text s[0..n), parsed (NUL allowed). A lone UTF-16 surrogate escape is no
 * character, and jansson refuses the whole text for one: one in a token's delta refused the whole
 * turn as a "malformed stream". Servers write them (Python's json.dumps of a string decoded with
 * surrogateescape, as a token that ends inside a character can be; a proxy that cuts a string
 * between the halves of a pair), so each becomes \ufffd, U+FFFD, as invalid UTF-8 shows
 * everywhere else; the rewrite is a copy, made only when there is one. mark: one at an edge of its
 * string becomes its mark instead (mark_of; the caller checked marks_free), for halves_join. */
static json_t *server_json(const char *s, size_t n, json_error_t *je, int mark) {
    /* bytes that are not UTF-8 (a server that writes a token's bytes raw, cut inside a character)
     * are U+FFFD too: jansson refused the whole event for one and the turn failed. A raw NUL is
     * no JSON anyway (the copy is a C string): the parse names it. */
    char *good = NULL;
    if (!memchr(s, 0, n) && k3_utf8_repair(s, n, NULL, NULL) > 0) {
        if (k3_utf8_repair(s, n, &good, NULL) < 0) {
            if (je)
                snprintf(je->text, sizeof je->text, "out of memory");
            return NULL;
        }
        json_t *obj = server_json(good, strlen(good), je, mark);
        free(good);
        return obj;
    }
    size_t at = lone_surrogate(s, n, 0);
    if (at == n)
        return json_loadb(s, n, JSON_ALLOW_NUL, je);
    char *fix = malloc(n); /* a mark (4 bytes) and \ufffd (6) are no longer than the escape */
    if (!fix) {
        if (je)
            snprintf(je->text, sizeof je->text, "out of memory");
        return NULL;
    }
    size_t o = 0, from = 0;
    for (; at < n; at = lone_surrogate(s, n, from)) {
        memcpy(fix + o, s + from, at - from);
        o += at - from;
        long v = u_escape(s + at, n - at) - 0xd800;
        if (mark && at_edge(s, n, at)) {
            unsigned char m[4] = {0xf4, 0x80, (unsigned char)(0x80 | v >> 6),
                                  (unsigned char)(0x80 | (v & 0x3f))};
            memcpy(fix + o, m, 4);
            o += 4;
        } else {
            memcpy(fix + o, "\\ufffd", 6);
            o += 6;
        }
        from = at + 6;
    }
    memcpy(fix + o, s + from, n - from);
    json_t *obj = json_loadb(fix, o + n - from, JSON_ALLOW_NUL, je);
    free(fix);
    return obj;
}

/* 1 when s[0..n) has a lone surrogate escape at an edge of a string (at_edge). */
static int edge_halves(const char *s, size_t n) {
    for (size_t at = lone_surrogate(s, n, 0); at < n; at = lone_surrogate(s, n, at + 6))
        if (at_edge(s, n, at))
            return 1;
    return 0;
}

/* vLLM before 0.10 answered errors as one flat object, {"object":"error","message":...}. */
static int is_error_object(json_t *o) {
    const char *t = json_string_value(json_object_get(o, "object"));
    return t && !strcmp(t, "error");
}

/* The words of an error body: {"error":{"message":...}} (OpenAI, vLLM, SGLang), {"error":"..."},
 * vLLM's older flat {"object":"error","message":...}, or FastAPI's {"detail":...}; NULL if none. */
static const char *error_message(json_t *o) {
    json_t     *e = json_object_get(o, "error");
    const char *m = json_string_value(json_is_object(e) ? json_object_get(e, "message") : e);
    if (!m && is_error_object(o))
        m = json_string_value(json_object_get(o, "message"));
    return m ? m : json_string_value(json_object_get(o, "detail"));
}

/* The failure that a 2xx body or a stream's event reports instead of an answer: {"error": ...}
 * (an "error": null beside an answer is none) or vLLM's flat error object; its message, "(no
 * message)" when it gives none; NULL when o is no failure. */
static const char *failure_of(json_t *o) {
    json_t *e = json_object_get(o, "error");
    if ((!e || json_is_null(e)) && !is_error_object(o))
        return NULL;
    const char *m = error_message(o);
    return m ? m : "(no message)";
}

/* The API base that a redirect's target means for the request req ("/models", "/chat/completions"):
 * the target without req at its path's end, its query kept (an http:// base sent to https:// for
 * /v1/models is https://.../v1: the whole target, the line's advice, read as a base asked
 * /v1/models/models); an API at the root is named by its /chat/completions (url_read). NULL
 * when the path does not end with req (curl_free). */
static char *redirect_base(const char *to, const char *req) {
    CURLU *u    = curl_url();
    char  *path = NULL, *base = NULL;
    if (u && req && curl_url_set(u, CURLUPART_URL, to, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK) {
        size_t pn = strlen(path), rn = strlen(req);
        while (pn > 1 && path[pn - 1] == '/') /* ".../models/", a server's slash redirect */
            path[--pn] = 0;
        if (pn >= rn && !strcmp(path + pn - rn, req)) {
            path[pn - rn] = 0;
            if (curl_url_set(u, CURLUPART_PATH, pn > rn ? path : "/chat/completions", 0) == CURLUE_OK)
                curl_url_get(u, CURLUPART_URL, &base, 0);
        }
    }
    curl_free(path);
    curl_url_cleanup(u);
    return base;
}

/* One line for a transfer that failed: curl's reason, or the server's error message. */
static void describe_failure(remote *r, CURLcode rc, char *out, size_t n) {
    if (r->err[0]) {
        snprintf(out, n, "%.300s: %.600s", r->shown, r->err);
    } else if (rc == CURLE_ABORTED_BY_CALLBACK) { /* curl says 'Callback aborted' */
        snprintf(out, n, "%.300s: stopped (Ctrl-C) before the server answered", r->shown);
    } else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
        snprintf(out, n, "cannot connect to %.300s: %.300s", r->shown,
                 r->cerr[0] ? r->cerr : curl_easy_strerror(rc));
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(out, n, "%.300s timed out: %.300s", r->shown, r->cerr[0] ? r->cerr : curl_easy_strerror(rc));
    } else if (rc != CURLE_OK) {
        /* OpenSSL's words alone ('error:0A00010B:SSL routines::wrong version number' for https://
         * to a server that speaks plain HTTP, as vLLM and SGLang do by default) said nothing of
         * the cause */
        snprintf(out, n, "%.300s: %.300s%s", r->shown, r->cerr[0] ? r->cerr : curl_easy_strerror(rc),
                 rc == CURLE_SSL_CONNECT_ERROR ? " (the TLS handshake failed: a server that speaks plain "
                                                 "HTTP, as vLLM and SGLang do unless given a certificate, "
                                                 "needs http://)"
                 : rc == CURLE_PEER_FAILED_VERIFICATION
                     ? " (the server's certificate was refused: it must name the URL's host, and a "
                       "private CA's must be among the system's certificates, update-ca-certificates(8))"
                     : "");
    } else {
        /* this body's bytes only: body.p keeps an earlier answer's text past body.n (a 502 without
         * a body showed the error before it); an error sent as an event ("data: {...}") is its data
         * (the line showed "data: " and the JSON raw), and the line ends after the body's text */
        const char *b  = r->body.p, *nl;
        size_t      bn = r->body.n;
        if (bn > 5 && !memcmp(b, "data:", 5)) {
            size_t skip = 5 + (b[5] == ' ');
            b += skip, bn -= skip;
            if ((nl = memchr(b, '\n', bn)))
                bn = (size_t)(nl - b);
        }
        while (bn && strchr(" \t\r\n", b[bn - 1]))
            bn--;
        json_t     *o   = bn ? server_json(b, bn, NULL, 0) : NULL;
        const char *msg = error_message(o);
        char       *to  = NULL; /* redirects are not followed (the key would go along): say where to */
        if (r->http >= 300 && r->http < 400 &&
            curl_easy_getinfo(r->curl, CURLINFO_REDIRECT_URL, &to) == CURLE_OK && to) {
            char *base = redirect_base(to, r->req);
            if (base)
                snprintf(out, n,
                         "the server answered %d, a redirect to %.300s, which k3chat does not follow: "
                         "give --endpoint %.300s to use it",
                         r->http, to, base);
            else
                snprintf(out, n,
                         "the server answered %d, a redirect to %.300s, which k3chat does not follow "
                         "(not the API's path: is --endpoint the API base?)",
                         r->http, to);
            curl_free(base);
        } else
            snprintf(out, n, "the server answered %d: %.*s", r->http,
                     msg || !bn ? 400 : (int)(bn < 400 ? bn : 400),
                     msg  ? msg
                     : bn ? b
                          : "(no message)");
        curl_off_t wait = -1;
        if (curl_easy_getinfo(r->curl, CURLINFO_RETRY_AFTER, &wait) == CURLE_OK && wait > 0)
            snprintf(out + strlen(out), n - strlen(out), " (it asks to wait %lld s before retrying)",
                     (long long)wait);
        if (r->http == 401 && !r->auth)
            snprintf(out + strlen(out), n - strlen(out),
                     " (an API key is needed: --api-key KEY or K3_API_KEY)");
        json_decref(o);
    }
}

/* ---- the answer -------------------------------------------------------------------------- */

static int answer_room(remote *r, size_t n);

/* One piece of the answer to its channel; -1 (r->err set) past REMOTE_MAX_ANSWER: a server that
 * streams without end took all the memory it sent, in the answer and the UI's copy of it. */
static int piece(remote *r, int ch, const char *s, size_t n) {
    if (!n)
        return 0;
    if (answer_room(r, n))
        return -1;
    txt_buf_add(ch == EV_CH_THINK ? &r->think : &r->resp, s, n);
    ue_emit_token(r->u, ch, s, n);
    ui_ev e = {.type = EV_STATS};
    if (ue_tok_piece(&r->tok, ch, &e.st)) {
        e.st.ctx_used = r->ctx_used;
        e.st.ctx_max  = r->ctx_max;
        ev_push(r->u->out, &e);
    }
    return 0;
}

/* The answer's bytes so far: reasoning, text and tool calls' arguments. */
static size_t answer_size(const remote *r) {
    size_t have = r->think.n + r->resp.n;
    for (int k = 0; k < r->n_calls; k++)
        have += r->calls[k].args.n;
    return have;
}

/* The answer's bytes so far, with n more; -1 (r->err set) past REMOTE_MAX_ANSWER. */
static int answer_room(remote *r, size_t n) {
    if (answer_size(r) + n <= REMOTE_MAX_ANSWER)
        return 0;
    snprintf(r->err, sizeof r->err,
             "the answer went past %u MiB (reasoning, text and tool calls together) and was stopped",
             REMOTE_MAX_ANSWER >> 20);
    return -1;
}

/* Call k's arguments end: a high half that still waits (halves_join) is U+FFFD in them, and in
 * the call's box when that is the one open (a box is the UI's only open call: one closed takes
 * no more text, and another call's box must not get it). */
static void call_half_end(remote *r, int k) {
    rcall *c = &r->calls[k];
    if (c->half && !answer_room(r, 3) && !txt_buf_add(&c->args, "\xef\xbf\xbd", 3) && r->box == k)
        ue_emit_call(r->u, NULL, "\xef\xbf\xbd", 3, 0); /* the call's text path, as its pieces */
    c->half = 0;
}

/* The open call box ends: its pending half first, then the box closes. */
static void box_close(remote *r) {
    if (r->box < 0)
        return;
    call_half_end(r, r->box);
    ue_emit_call(r->u, NULL, NULL, 0, 1);
    r->box = -1;
}

/* 1 when a call's arguments are a whole JSON object (those of a call cut short are not); parsed
 * only when they end with '}', as a whole object does (calls_show asks at each piece). */
static int args_whole(const txt_buf *a) {
    size_t e = a->n;
    while (e && (a->p[e - 1] == ' ' || a->p[e - 1] == '\t' || a->p[e - 1] == '\r' || a->p[e - 1] == '\n'))
        e--;
    if (!e || a->p[e - 1] != '}')
        return 0;
    json_t *o     = json_loadb(a->p, a->n, 0, NULL);
    int     whole = json_is_object(o);
    json_decref(o);
    return whole;
}

/* The calls are shown in the response as the local engine shows them (ue_emit_call), each once it
 * has a name, in a box of its own, in the order of their indexes. A box stays open while its
 * call's arguments are not yet a whole JSON object: a server that interleaves its calls' pieces
 * sends more of it after the next call began (the box had closed at the next call, and the pieces
 * after never showed: '-> one({"x": )' for a call kept as {"x": 1}); the calls named meanwhile
 * wait, their text kept, and open after it. end: the answer ended, every named call is shown. */
static void calls_show(remote *r, int end) {
    for (int k = 0; k < r->n_calls; k++) {
        rcall         *c = &r->calls[k];
        const txt_buf *a = r->box >= 0 ? &r->calls[r->box].args : NULL;
        if (c->shown || !c->name)
            continue;
        if (!end && a && !args_whole(a))
            return;
        if (r->half[1] && !piece(r, EV_CH_RESPONSE, "\xef\xbf\xbd", 3)) /* the text ends before the call */
            r->half[1] = 0;
        box_close(r);
        c->shown = 1;
        r->box   = k;
        ue_emit_call(r->u, c->name, c->args.p, c->args.n, 0);
    }
}

static void calls_free(remote *r) {
    for (int k = 0; k < r->n_calls; k++) {
        free(r->calls[k].id);
        free(r->calls[k].name);
        free(r->calls[k].args.p);
    }
    free(r->calls);
    r->calls   = NULL;
    r->n_calls = r->cap_calls = 0;
    r->box                    = -1;
}

/* A field of a call that a later piece may repeat but not change (its id, its name). */
static int call_field(remote *r, int idx, const char *what, char **have, json_t *v) {
    const char *s = json_string_value(v);
    if (!s || !*s)
        return 0;
    if (*have) {
        if (strcmp(*have, s)) {
            snprintf(r->err, sizeof r->err,
                     "malformed stream: tool call %d's %s changed from '%.60s' to '%.60s'", idx, what, *have,
                     s);
            return -1;
        }
        return 0;
    }
    if (!(*have = strdup(s))) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    return 0;
}

/* The text of one piece of a field (the reasoning, the content, a call's arguments) into
 * r->joined, with the halves of a surrogate pair that a server split between two events joined (a
 * JavaScript client shows the character; each half alone was one U+FFFD). *half is the field's
 * pending high half, 0 if none: a low half that begins this piece completes it; a pending one
 * without it, or a low one without a pending one, is U+FFFD; a high half that ends this piece
 * waits in *half for the field's next piece (an empty piece leaves it waiting, as a string's
 * concatenation would). marked: str came from a parse with marks (server_json). 0, or -1 when
 * memory runs out. */
static int halves_join(remote *r, long *half, json_t *str, int marked) {
    const char *s = json_string_value(str);
    size_t      n = json_string_length(str);
    r->joined.n   = 0;
    if (!n)
        return 0;
    long lo = marked ? mark_of(s, n) : -1;
    if (lo >= 0xdc00 || *half) {
        long cp = lo >= 0xdc00 && *half ? 0x10000 + ((*half - 0xd800) << 10) + (lo - 0xdc00) : 0xfffd;
        unsigned char u[4] = {0xf0 | (unsigned char)(cp >> 18), 0x80 | (cp >> 12 & 0x3f),
                              0x80 | (cp >> 6 & 0x3f), 0x80 | (cp & 0x3f)};
        if (cp == 0xfffd ? txt_buf_add(&r->joined, "\xef\xbf\xbd", 3) : txt_buf_add(&r->joined, (char *)u, 4))
            return -1;
        if (lo >= 0xdc00)
            s += 4, n -= 4;
        *half = 0;
    }
    long hi = marked && n >= 4 ? mark_of(s + n - 4, 4) : -1;
    if (hi >= 0 && hi < 0xdc00)
        *half = hi, n -= 4;
    return txt_buf_add(&r->joined, s, n);
}

/* The call that a delta without an "index" belongs to, id its "id": a server that streams each
 * call whole, one to a chunk, may send none (Gemini's OpenAI compatibility; the turn failed as a
 * malformed stream). The last call when the delta names no other id, else a new one. */
static long long call_of_unindexed(const remote *r, json_t *id) {
    const char *s    = json_string_value(id);
    const char *last = r->n_calls ? r->calls[r->n_calls - 1].id : NULL;
    return r->n_calls && (!s || !*s || (last && !strcmp(s, last))) ? r->n_calls - 1 : r->n_calls;
}

/* The tool_calls of a stream delta (whole = 0: pieces by "index") or of a whole message; texts:
 * the same array from the parse with marks, or arr (halves_join). */
static int on_calls(remote *r, json_t *arr, json_t *texts, int marked, int whole) {
    size_t  i;
    json_t *t;
    json_array_foreach(arr, i, t) {
        json_t   *ix  = json_object_get(t, "index");
        long long idx = whole                 ? r->n_calls
                        : json_is_integer(ix) ? json_integer_value(ix)
                                              : call_of_unindexed(r, json_object_get(t, "id"));
        if (idx < 0 || idx > r->n_calls || idx >= REMOTE_MAX_CALLS) {
            snprintf(r->err, sizeof r->err,
                     "malformed stream: tool call index %lld out of order (calls open in order from 0, %d "
                     "came so far, at most %d)",
                     idx, r->n_calls, REMOTE_MAX_CALLS);
            return -1;
        }
        if (idx == r->n_calls) {
            rcall *c = k3_grow(r->calls, &r->cap_calls, (size_t)r->n_calls + 1, sizeof *c, 4);
            if (!c) {
                snprintf(r->err, sizeof r->err, "out of memory");
                return -1;
            }
            r->calls = c;
            memset(&c[r->n_calls++], 0, sizeof *c);
        }
        rcall  *c    = &r->calls[idx];
        json_t *fn   = json_object_get(t, "function");
        json_t *args = json_object_get(fn, "arguments");
        if (call_field(r, (int)idx, "id", &c->id, json_object_get(t, "id")) ||
            call_field(r, (int)idx, "name", &c->name, json_object_get(fn, "name")))
            return -1;
        /* arguments as an object, not its JSON text (some servers): that object's text (they were
         * dropped: a call of get() kept with arguments "", which is no JSON) */
        char *obj    = json_is_object(args) ? json_dumps(args, JSON_COMPACT) : NULL;
        int   is_obj = json_is_object(args);
        args         = json_object_get(json_object_get(json_array_get(texts, i), "function"), "arguments");
        r->joined.n  = 0;
        if (is_obj ? !obj : json_is_string(args) && halves_join(r, &c->half, args, marked)) {
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        const char *a = obj ? obj : r->joined.p;
        size_t      n = obj ? strlen(obj) : r->joined.n;
        if (n && (answer_room(r, n) || txt_buf_add(&c->args, a, n))) {
            free(obj);
            return -1;
        }
        if (n && r->box == idx)
            ue_emit_call(r->u, NULL, a, n, 0);
        free(obj);
        calls_show(r, 0);
    }
    return 0;
}

static json_t *reasoning_of(json_t *o) {
    static const char *keys[] = {"reasoning_content", "reasoning", "thinking"};
    for (int k = 0; k < 3; k++) {
        json_t *s = json_object_get(o, keys[k]);
        if (json_is_string(s))
            return s;
    }
    return NULL;
}

/* A message's (or delta's) reasoning and content to their channels, whole: a model may write a
 * NUL byte (JSON "\u0000", parsed with JSON_ALLOW_NUL), which the text path escapes like any
 * other control character instead of cutting the piece there. texts: the same object from the
 * parse with marks, or m (halves_join). */
static int message_pieces(remote *r, json_t *m, json_t *texts, int marked, int whole) {
    json_t *t = reasoning_of(texts), *c = json_object_get(texts, "content"),
           *tc = json_object_get(m, "tool_calls");
    for (int k = 0; k < 2; k++) {
        json_t *s  = k ? c : t;
        int     ch = k ? EV_CH_RESPONSE : EV_CH_THINK;
        if (!json_is_string(s))
            continue;
        if (halves_join(r, &r->half[ch == EV_CH_RESPONSE], s, marked)) {
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        if (piece(r, ch, r->joined.p, r->joined.n))
            return -1;
    }
    return json_is_array(tc) ? on_calls(r, tc, json_object_get(texts, "tool_calls"), marked, whole) : 0;
}

/* At the answer's end: a high half that still waits (halves_join) is U+FFFD in its field. */
static void halves_end(remote *r) {
    for (int k = 0; k < 2; k++)
        if (r->half[k] && !piece(r, k ? EV_CH_RESPONSE : EV_CH_THINK, "\xef\xbf\xbd", 3))
            r->half[k] = 0;
    for (int k = 0; k < r->n_calls; k++)
        call_half_end(r, k);
}

/* A token count the server reports: 0 when absent or out of any real range (a negative or huge
 * figure made prompt + completion overflow an int). */
static int count_of(json_t *v) {
    json_int_t x = json_integer_value(v);
    return x > 0 && x <= REMOTE_MAX_TOKENS ? (int)x : 0;
}

static void usage_of(remote *r, json_t *o) {
    json_t *u = json_object_get(o, "usage");
    if (json_is_object(u)) {
        r->n_prompt     = count_of(json_object_get(u, "prompt_tokens"));
        r->n_completion = count_of(json_object_get(u, "completion_tokens"));
        /* the reasoning's share as the server counted it (OpenAI, vLLM, k3chat --serve); the
         * pieces streamed are no token count where a server sends several tokens in one */
        json_t *rt = json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
        if (json_is_integer(rt) && json_integer_value(rt) >= 0 && json_integer_value(rt) <= r->n_completion)
            r->n_reason = (int)json_integer_value(rt);
    }
}

/* One SSE event's data. Returns -1 (r->err set) to abort the transfer. */
static int on_event(remote *r, const char *d, size_t n) {
    r->n_events++;
    if (n == 6 && !memcmp(d, "[DONE]", 6)) {
        r->done   = 1;
        r->end_at = ev_now();
        return 0;
    }
    json_error_t je;
    json_t      *o = server_json(d, n, &je, 0);
    if (r->ev_error) { /* "event: error": its data is the reason, JSON or text */
        const char *m = json_is_object(o) ? error_message(o) : NULL;
        if (!m && json_is_object(o))
            m = json_string_value(json_object_get(o, "message"));
        snprintf(r->err, sizeof r->err, "the server failed mid-answer: %.400s",
                 m   ? m
                 : n ? d
                     : "(no message)");
        json_decref(o);
        return -1;
    }
    if (!json_is_object(o)) { /* at the body's end, text that does not parse: the connection closed
                               * inside the last event (that was a 'malformed stream') */
        snprintf(r->err, sizeof r->err,
                 !o && r->at_end
                     ? "the stream ended inside an event, before the answer was complete (%s): %.60s"
                     : "malformed stream: an event is not a JSON object (%s): %.60s",
                 o ? "wrong type" : je.text, d);
        json_decref(o);
        return -1;
    }
    const char *fail = failure_of(o);
    if (fail) {
        snprintf(r->err, sizeof r->err, "the server failed mid-answer: %.400s", fail);
        json_decref(o);
        return -1;
    }
    usage_of(r, o);
    json_t *ch  = json_array_get(json_object_get(o, "choices"), 0);
    json_t *dl  = json_object_get(ch, "delta");
    size_t  had = answer_size(r), calls = (size_t)r->n_calls;
    /* the texts from a second parse with marks when a pair's half stands at a string's edge */
    int     marked = marks_free(d, n);
    json_t *om     = marked && edge_halves(d, n) ? server_json(d, n, NULL, 1) : NULL;
    json_t *texts  = om ? json_object_get(json_array_get(json_object_get(om, "choices"), 0), "delta") : dl;
    int rc = json_is_object(dl) ? message_pieces(r, dl, json_is_object(texts) ? texts : dl, marked, 0) : 0;
    json_decref(om);
    if (rc) {
        json_decref(o);
        return -1;
    }
    if (answer_size(r) != had || (size_t)r->n_calls != calls) /* a part of the answer: progress */
        r->progress_at = ev_now();
    const char *f = json_string_value(json_object_get(ch, "finish_reason"));
    if (f && *f) {
        snprintf(r->finish, sizeof r->finish, "%s", f);
        r->end_at = r->end_at > 0 ? r->end_at : ev_now();
    }
    json_decref(o);
    return 0;
}

/* Refuses an event that grows past REMOTE_MAX_EVENT (a server that sends one endless line took
 * all the memory it sent): -1 with the reason, 0 while it fits. */
static int event_room(remote *r, size_t have, size_t more) {
    if (have + more <= REMOTE_MAX_EVENT)
        return 0;
    snprintf(r->err, sizeof r->err, "malformed stream: an event over %u bytes", REMOTE_MAX_EVENT);
    return -1;
}

/* One complete line of the event stream (without its end of line). */
static int on_line(remote *r, const char *s, size_t n) {
    if (n && s[n - 1] == '\r')
        n--;
    if (n == 0) { /* end of an event */
        int rc      = r->data.n ? on_event(r, r->data.p, r->data.n) : r->ev_error ? on_event(r, "", 0) : 0;
        r->data.n   = 0;
        r->ev_error = 0;
        return rc;
    }
    if (s[0] == ':')
        return 0;                            /* comment / keep-alive */
    if (n >= 6 && !memcmp(s, "event:", 6)) { /* "event: error" (an SSE event type) carries a failure */
        s += 6, n -= 6;
        if (n && *s == ' ')
            s++, n--;
        r->ev_error = n == 5 && !memcmp(s, "error", 5);
        return 0;
    }
    if (n >= 5 && !memcmp(s, "data:", 5)) {
        s += 5, n -= 5;
        if (n && *s == ' ')
            s++, n--;
        if (event_room(r, r->data.n, n + 1))
            return -1;
        if (r->data.n)
            txt_buf_add(&r->data, "\n", 1);
        return txt_buf_add(&r->data, s, n);
    }
    return 0; /* id:, retry: */
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    remote *r = ud;
    size_t  n = sz * nm;
    if (r->done) /* after the stream's "[DONE]" (on_xfer) */
        return n;
    if (r->is_sse < 0) {
        long  code = 0;
        char *ct   = NULL;
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(r->curl, CURLINFO_CONTENT_TYPE, &ct);
        r->is_sse = code < 300 && ct && strstr(ct, "text/event-stream") != NULL;
        /* a proxy that labels the stream otherwise (text/plain, none): a body that starts as an
         * event stream is read as one (it failed as 'not JSON', or past 1 MiB as 'not a stream') */
        if (!r->is_sse && code < 300 && !(ct && strstr(ct, "json")))
            r->is_sse = (n >= 5 && !memcmp(p, "data:", 5)) || (n >= 6 && !memcmp(p, "event:", 6)) ||
                        (n >= 1 && p[0] == ':');
    }
    if (!r->is_sse) {
        r->progress_at = ev_now(); /* a JSON answer or an error: its bytes are its progress */
        long code      = 0;
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &code);
        int list = code < 300 && !strcmp(r->req, "/models");
        if (r->body.n + n > (list ? REMOTE_MAX_LIST : REMOTE_MAX_BODY)) {
            if (code >= 300) /* an error's body: the status is the news (it was called an answer) */
                snprintf(r->err, sizeof r->err,
                         "the server answered %ld with a body of over %u bytes, not read", code,
                         REMOTE_MAX_BODY);
            else if (list)
                snprintf(r->err, sizeof r->err, "the model list is over %u bytes, not read", REMOTE_MAX_LIST);
            else
                snprintf(r->err, sizeof r->err, "the answer is over %u bytes and is not a stream",
                         REMOTE_MAX_BODY);
            return 0;
        }
        return txt_buf_add(&r->body, p, n) ? 0 : n;
    }
    for (size_t k = 0; k < n;) {
        if (r->after_cr) { /* the LF of a CR LF that a read cut */
            r->after_cr = 0;
            if (p[k] == '\n' && ++k == n)
                break;
        }
        /* a line ends at LF, CR LF or a lone CR (the event-stream format allows all three) */
        const char *nl  = memchr(p + k, '\n', n - k);
        const char *cr  = memchr(p + k, '\r', nl ? (size_t)(nl - (p + k)) : n - k);
        const char *end = cr ? cr : nl;                          /* the line's end, NULL: not in this read */
        size_t      m   = end ? (size_t)(end - (p + k)) : n - k; /* the line's length               */
        size_t      adv = m + 1;                                 /* what it takes with its end      */
        if (cr && cr + 1 == p + n)
            r->after_cr = 1;
        else if (cr && cr[1] == '\n')
            adv++;
        if (!end) { /* incomplete: keep for the next read */
            if (event_room(r, r->line.n, m) || txt_buf_add(&r->line, p + k, m))
                return 0;
            break;
        }
        int rc;
        if (r->line.n) {
            if (event_room(r, r->line.n, m) || txt_buf_add(&r->line, p + k, m))
                return 0;
            rc        = on_line(r, r->line.p, r->line.n);
            r->line.n = 0;
        } else {
            rc = on_line(r, p + k, m);
        }
        if (rc)
            return 0;
        k += adv;
        if (r->done) /* "data: [DONE]" ends the answer: what follows is not read (on_xfer) */
            return n;
    }
    return n;
}

/* A 2xx answer to path that is not JSON (a web page: URL names a site, not its API): the line.
 * je: the parser's reason; a body that starts as JSON is named by it instead (a server's JSON
 * with one bad string: the API base is right, and the line said it might not be). */
static void not_api(remote *r, const char *path, const json_error_t *je, char *out, size_t n) {
    char       *ct   = NULL;
    const char *b    = r->body.p;
    size_t      lead = 0; /* the body's first byte after white space (body.p may hold an older one's) */
    while (lead < r->body.n && strchr(" \t\r\n", b[lead]))
        lead++;
    curl_easy_getinfo(r->curl, CURLINFO_CONTENT_TYPE, &ct);
    int at = path[0] ? snprintf(out, n, "%.300s%.20s ", r->shown, path) : 0;
    if (lead < r->body.n && (b[lead] == '{' || b[lead] == '['))
        snprintf(out + at, n - (size_t)at, "answered JSON that does not parse (line %d column %d: %.200s)",
                 je->line, je->column, je->text);
    else
        snprintf(out + at, n - (size_t)at,
                 "answered %.80s, not JSON: is %.300s the server's API base (it usually ends in /v1)?",
                 ct ? ct : "without a content type", r->shown);
}

/* A complete JSON answer (a server that ignored "stream"). */
static int on_json_answer(remote *r) {
    json_error_t je;
    json_t      *o    = server_json(r->body.p ? r->body.p : "", r->body.n, &je, 0);
    json_t      *ch   = json_array_get(json_object_get(o, "choices"), 0);
    json_t      *msg  = json_object_get(ch, "message");
    const char  *fail = failure_of(o);
    if (!o) {
        not_api(r, "", &je, r->err, sizeof r->err);
        return -1;
    }
    if (fail) { /* a gateway's error with status 200 (it was 'malformed answer: no choices[0]...') */
        snprintf(r->err, sizeof r->err, "the server answered %d with an error: %.400s", r->http, fail);
        json_decref(o);
        return -1;
    }
    if (!json_is_object(msg)) {
        snprintf(r->err, sizeof r->err, "malformed answer: no choices[0].message in %.80s",
                 r->body.p ? r->body.p : "");
        json_decref(o);
        return -1;
    }
    if (message_pieces(r, msg, msg, 0, 1)) {
        json_decref(o);
        return -1;
    }
    const char *f = json_string_value(json_object_get(ch, "finish_reason"));
    snprintf(r->finish, sizeof r->finish, "%s", f ? f : "stop");
    usage_of(r, o);
    r->done = 1;
    json_decref(o);
    return 0;
}

/* ---- turns --------------------------------------------------------------------------------- */

/* GET /models: the model name (unless given) and its context length when the server says; -1
 * with msg, -2 when Ctrl-C stopped it. */
static int discover(remote *r, char *msg, size_t n) {
    r->err[0]   = 0;
    CURLcode rc = http(r, "/models", NULL, 20);
    if (rc == CURLE_OK && (r->http == 404 || r->http == 405) && r->model)
        return 0; /* no model list (some servers, proxies), and none needed: --model named it (each
                   * start showed 'the server answered 404' for a chat that worked) */
    if (rc != CURLE_OK || r->http >= 300 || r->http == 0) {
        char why[1000];
        describe_failure(r, rc, why, sizeof why);
        if (rc == CURLE_OK && r->http >= 300) /* the line named no request, nor the way on */
            snprintf(msg, n, "%.300s/models: %.800s%s", r->shown, why,
                     r->http == 404 || r->http == 405
                         ? " (is that the API base? a server without a model list needs --model NAME)"
                         : "");
        else
            snprintf(msg, n, "%s", why);
        return rc == CURLE_ABORTED_BY_CALLBACK && !r->err[0] ? -2 : -1;
    }
    /* NUL allowed as everywhere else in a server's JSON: another model's id may hold one */
    json_error_t je;
    json_t      *o  = json_loadb(r->body.p ? r->body.p : "", r->body.n, JSON_ALLOW_NUL, &je);
    json_t      *m0 = json_array_get(json_object_get(o, "data"), 0), *jid = json_object_get(m0, "id");
    const char  *id = json_string_value(jid), *fail = failure_of(o);
    if (fail) { /* status 200 with an error: that error (it was 'names no model: use --model') */
        snprintf(msg, n, "%s/models answered %d with an error: %.400s", r->shown, r->http, fail);
        json_decref(o);
        return -1;
    }
    if (!r->model && id && strlen(id) != json_string_length(jid)) {
        json_decref(o);
        snprintf(msg, n, "%s/models names a model whose id holds a NUL byte: use --model NAME", r->shown);
        return -1;
    }
    if (!r->model && id && !(r->model = strdup(id))) {
        json_decref(o);
        snprintf(msg, n, "out of memory");
        return -1;
    }
    json_t *len = json_object_get(m0, "max_model_len");
    if (count_of(len))
        r->ctx_max = count_of(len);
    int json = o != NULL;
    json_decref(o);
    if (!r->model) {
        if (json)
            snprintf(msg, n, "%s/models names no model: use --model NAME", r->shown);
        else
            not_api(r, "/models", &je, msg, n);
        return -1;
    }
    return 0;
}

static char *request_body(remote *r, const ue_gen *g) {
    json_t *msgs = json_array();
    for (int k = 0; k < k3_conv_count(r->c); k++) {
        const k3_msg *m    = k3_conv_msg(r->c, k);
        const char   *role = m->role == K3_ROLE_SYSTEM ? "system"
                             : m->role == K3_ROLE_USER ? "user"
                             : m->role == K3_ROLE_TOOL ? "tool"
                                                       : "assistant";
        /* text parts go as parts */
        json_t *o = json_pack("{s:s,s:o}", "role", role, "content",
                              k3_content_json(m->content, m->parts, m->n_parts));
        if (m->role == K3_ROLE_ASSISTANT && m->reasoning && m->reasoning[0]) {
            json_object_set_new(o, "reasoning", json_string(m->reasoning));
            json_object_set_new(o, "reasoning_content", json_string(m->reasoning));
        }
        json_t *calls = stools_calls_json(m); /* tool turns of a loaded transcript go as they are */
        if (calls)
            json_object_set_new(o, "tool_calls", calls);
        if (m->tool_call_id)
            json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
        if (m->tool_name) /* a tool's name, or the speaker's */
            json_object_set_new(o, "name", json_string(m->tool_name));
        json_array_append_new(msgs, o);
    }
    json_t *b = json_pack("{s:s,s:o,s:b,s:{s:b},s:{s:b}}", "model", r->model, "messages", msgs, "stream", 1,
                          "stream_options", "include_usage", 1, "chat_template_kwargs", "thinking", g->think);
    if (!b)
        return NULL;
    /* the sampling the user chose; what they did not choose is left to the server's defaults */
    if (!g->model_temp)
        json_object_set_new(b, "temperature", json_real(g->temp));
    if (!g->model_top_p)
        json_object_set_new(b, "top_p", json_real(g->top_p));
    if (g->max_tokens > 0)
        json_object_set_new(b, "max_tokens", json_integer(g->max_tokens));
    json_t *tools = k3_conv_tools(r->c) ? json_loads(k3_conv_tools(r->c), 0, NULL) : NULL;
    if (tools)
        json_object_set_new(b, "tools", tools);
    if (g->has_seed)
        json_object_set_new(b, "seed", json_integer((json_int_t)g->seed));
    if (g->think && g->think_budget > 0) /* --think-budget, as k3chat --serve reads it (was never sent) */
        json_object_set_new(b, "thinking_budget", json_integer(g->think_budget));
    if (g->think &&
        g->effort != (int)k3_setting(K3_SETTING_EFFORT)
                         ->def) /* the default (max) is not sent: other servers know low/high only */
        json_object_set_new(b, "reasoning_effort", json_string(ue_effort_name(g->effort)));
    char *s = json_dumps(b, JSON_COMPACT | JSON_REAL_PRECISION(6)); /* 0.6, not 0.6000000238418579 */
    json_decref(b);
    return s;
}

static void record_settings(remote *r, const ue_gen *g) {
    k3_conv_settings set;
    ue_gen_settings(r->c, g, g->temp, g->top_p, &set);
    k3_conv_set_settings(r->c, &set); /* only for the transcript: invalid values are the server's to judge */
}

/* Why the server ended the answer before the model did, from a finish_reason: NULL for the
 * model's own ends (a stop, a length limit, tool calls, and the names other servers give them).
 * An answer that a content filter or an abort cut looked complete: no line said why it stopped
 * mid-sentence, and it was kept as whole. */
static const char *cut_by_server(const char *f) {
    static const char *own[] = {"",    "stop",      "length",       "tool_calls", "function_call",
                                "eos", "eos_token", "stop_sequence"};
    for (size_t k = 0; k < sizeof own / sizeof *own; k++)
        if (!strcmp(f, own[k]))
            return NULL;
    return !strcmp(f, "content_filter") ? "the server's content filter withheld the rest of the answer"
                                        : "the server ended the answer before the model did";
}

/* Answer the history (which ends with a user message). retry: a /retry moved the answer to an
 * abandoned branch just before (k3.h); a failure that brought no text puts it back. */
static void turn(remote *r, const ue_gen *g, int retry) {
    ui_ev e = {.type = EV_TURN};
    ev_push(r->u->out, &e);
    record_settings(r, g);
    ue_turn_begin(r->u, r->c); /* what a quit that cannot wait for this turn saves (ue_rescue) */
    ue_tok_begin(&r->tok);
    r->n_prompt = r->n_completion = r->done = 0;
    r->n_reason                             = -1;
    /* emptied as strings too: the reply below reads them as C strings, and a turn that brings
     * no text (tool calls alone) saved the previous turn's answer and reasoning as its own */
    r->think.n = r->resp.n = 0;
    if (r->think.p)
        r->think.p[0] = 0;
    if (r->resp.p)
        r->resp.p[0] = 0;
    r->half[0] = r->half[1] = 0;
    calls_free(r);
    r->finish[0] = r->err[0] = 0;
    char     msg[1200]       = "";
    CURLcode rc              = CURLE_OK;
    int      failed          = 0;
    char    *body            = NULL;
    int      found           = r->model ? 0 : discover(r, msg, sizeof msg);
    if (found == -2) {
        rc = CURLE_ABORTED_BY_CALLBACK; /* Ctrl-C while asking for the model's name: stopped */
    } else if (found) {
        failed = 1;
    } else if (!(body = request_body(r, g))) {
        json_t *name = json_string(r->model); /* jansson takes only UTF-8 */
        snprintf(msg, sizeof msg, name ? "out of memory" : "the model name (--model) is not valid UTF-8");
        json_decref(name);
        failed = 1;
    } else {
        rc        = http(r, "/chat/completions", body, 0);
        r->at_end = 1;
        if (rc == CURLE_OK && r->is_sse && r->line.n) /* a last line without its newline */
            on_line(r, r->line.p, r->line.n);
        if (rc == CURLE_OK && r->is_sse && r->data.n) /* a last event without its blank line */
            on_line(r, "", 0);
        if (rc == CURLE_OK && r->http < 300 && r->is_sse == 0)
            on_json_answer(r);
        if (rc == CURLE_ABORTED_BY_CALLBACK && !r->err[0]) {
            /* Ctrl-C: not a failure */
        } else if (rc != CURLE_OK || r->http >= 300 || r->err[0]) {
            describe_failure(r, rc, msg, sizeof msg);
            failed = 1;
        } else if (!r->done && !r->finish[0]) {
            if (r->is_sse < 0) /* not one byte (it was called a stream without one 'data:' event) */
                snprintf(msg, sizeof msg, "%s: the server answered %d with an empty body", r->shown, r->http);
            else if (r->n_events)
                snprintf(msg, sizeof msg, "%s: the stream ended before the answer was complete", r->shown);
            else /* lines, but none of them "data:": JSON lines, say, not an event stream */
                snprintf(msg, sizeof msg,
                         "%s: the stream ended without one 'data:' event: is it an OpenAI-compatible server?",
                         r->shown);
            failed = 1;
        }
    }
    free(body);
    /* the tool calls: shown closed, kept with the reply when the server named them, but for one
     * that a length finish cut (its arguments are no JSON object): the local engine keeps only
     * whole calls, and one cut would go back to the server in every later request */
    halves_end(r);
    calls_show(r, 1); /* the calls that waited for an open box's call (calls_show) */
    box_close(r);
    k3_tool_call *tc = r->n_calls ? calloc((size_t)r->n_calls, sizeof *tc) : NULL;
    int           nt = 0;
    for (int k = 0; k < r->n_calls; k++) {
        if (!strcmp(r->finish, "length") && !args_whole(&r->calls[k].args))
            continue;
        if (r->calls[k].name && tc)
            tc[nt++] = (k3_tool_call){r->calls[k].id, r->calls[k].name, r->calls[k].args.p};
        else if (!failed) {
            snprintf(msg, sizeof msg, "%s: malformed stream: tool call %d has no name", r->shown, k);
            failed = 1;
        }
    }
    int         cancelled = !failed && rc == CURLE_ABORTED_BY_CALLBACK;
    const char *early     = failed || cancelled ? NULL : cut_by_server(r->finish);
    if (r->think.n || r->resp.n || nt || (!failed && !cancelled)) {
        /* a reply cut short (Ctrl-C, a failure mid-stream) is marked, as the local engine does */
        k3_msg a = {.role         = K3_ROLE_ASSISTANT,
                    .content      = r->resp.p ? r->resp.p : "",
                    .reasoning    = g->think ? (r->think.p ? r->think.p : "") : NULL,
                    .interrupted  = failed || cancelled || early,
                    .tool_calls   = tc,
                    .n_tool_calls = nt};
        if (k3_conv_add_msg(r->c, &a) != K3_OK)
            ue_emitf(r->u, EV_ERROR, "%s", k3_errmsg());
    } else if (failed && retry) { /* the answer the /retry replaced stays, as with a local model */
        int from = k3_conv_count(r->c);
        if ((retry = k3_conv_restore_branch(r->c) > 0))
            ue_send_msgs(r->u, r->c, from);
    } else {
        retry = 0;
    }
    free(tc);
    ui_ev  d           = {.type = EV_DONE,
                          .i    = failed                         ? UE_DONE_ERROR
                                  : cancelled                    ? UE_DONE_CANCELLED
                                  : !strcmp(r->finish, "length") ? UE_DONE_LENGTH
                                                                 : UE_DONE_OK};
    double now         = ev_now();
    d.st.ttft_s        = r->tok.t_first > 0 ? r->tok.t_first - r->tok.t0 : -1;
    d.st.tok_s         = r->tok.t_first > 0 && now > r->tok.t_first && r->n_completion > 1
                             ? (r->n_completion - 1) / (now - r->tok.t_first)
                             : -1;
    d.st.prefill_tok_s = d.st.think_s = d.st.expert_hit = d.st.expert_gb = -1;
    d.st.n_think    = r->n_reason >= 0 ? r->n_reason : r->tok.n_think;
    d.st.n_response = r->n_completion > d.st.n_think ? r->n_completion - d.st.n_think : r->tok.n_resp;
    d.st.n_prefill  = r->n_prompt;
    if (r->n_prompt)
        r->ctx_used = r->n_prompt + r->n_completion;
    d.st.ctx_used = r->ctx_used;
    d.st.ctx_max  = r->ctx_max;
    d.st.mem_gb   = ue_mem_gb();
    k3_conv_autosave(r->c);
    ue_note_saved(r->u, r->c); /* before EV_DONE: a quit right after it sees the state */
    ev_push(r->u->out, &d);
    if (early) /* the answer ended as an answer does, marked interrupted, with the reason */
        ue_emitf(r->u, EV_ERROR, "%s: %s (finish_reason '%.31s'; /retry asks again)", r->shown, early,
                 r->finish);
    if (failed) /* after EV_DONE: the UI drops an empty failed turn, not this line */
        ue_emitf(r->u, EV_ERROR, "%s (the conversation is kept%s: /retry sends the message again)", msg,
                 retry ? ", with the previous answer" : "");
    const char *ae = k3_conv_autosave_error(r->c);
    if (ae)
        ue_emitf(r->u, EV_ERROR, "autosave: %s (the conversation is kept in memory)", ae);
}

static void done_error(ue *u, const char *msg) {
    ue_emitf(u, EV_ERROR, "%s", msg);
    ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
    ev_push(u->out, &d);
}

static void remote_cmd(ue *u, void *self, const ui_ev *c) {
    remote *r = self;
    int     n = k3_conv_count(r->c);
    if (ue_conv_cmd(u, r->c, c)) /* /undo /forget /clear /system /save /load /export */
        return;
    switch (c->type) {
    case EV_CMD_EDIT:
    case EV_CMD_SEND:
        if (k3_conv_add(r->c, K3_ROLE_USER, c->text, NULL) != K3_OK)
            done_error(u, k3_errmsg());
        else
            turn(r, &c->gen, 0);
        break;
    case EV_CMD_RETRY: /* after a failed turn the history already ends with the user's message */
        if (n && k3_conv_msg(r->c, n - 1)->role == K3_ROLE_USER)
            turn(r, &c->gen, 0);
        else if (k3_conv_retry_last(r->c) > 0)
            turn(r, &c->gen, 1);
        else
            done_error(u, "/retry: there is no answer to regenerate");
        break;
    case EV_CMD_REPLAY:
        done_error(u, "/replay needs the model on this machine: k3chat MODEL_DIR --replay FILE");
        break;
    case EV_CMD_EXPERTS:
        ue_emitf(
            u, EV_ERROR,
            "/experts: the remote server places its own experts; the budget applies to a local model only");
        /* FALLTHROUGH */
    case EV_CMD_STATS: {
        ui_ev e    = {.type = EV_STATS, .i = 1};
        e.st.tok_s = e.st.ttft_s = e.st.think_s = e.st.prefill_tok_s = e.st.expert_hit = e.st.expert_gb = -1;
        e.st.ctx_used = r->ctx_used;
        e.st.ctx_max  = r->ctx_max;
        e.st.mem_gb   = ue_mem_gb();
        ev_push(u->out, &e);
        break;
    }
    default:
        break;
    }
}

/* ---- the URL ---------------------------------------------------------------------------- */

/* --endpoint read by libcurl's URL parser, the one that connects (a second reading by hand beside
 * it put a query or a fragment before each request's path, "http://h:1?x=1" asked for
 * "/?x=1/v1/models", and took "127.1" for a host that is not loopback). The API base is the
 * URL's path without trailing slashes and without "/chat/completions"; a URL without a path gets
 * "/v1". Each request's path goes after the base, its query (Azure's api-version) stays the
 * query, a fragment is dropped, a user:password goes as Basic authentication. A URL without a
 * scheme is http (libcurl alone guessed FTP for ftp.HOST, DICT for dict.HOST, and its URL parser
 * takes https). Sets r->url, r->path and r->shown (the base without user:password or query, for
 * messages and the status bar); 1 with the reason in why when libcurl cannot read the URL or it
 * names no host (the URL is not repeated: it may hold a password; "http://u:p@" went on to a
 * plain-http warning naming an empty host and a failed turn). */
static int url_read(remote *r, const char *url, char *why, size_t n) {
    k3_buf full = {0};
    k3_buf_printf(&full, "%s%s", strstr(url, "://") ? "" : "http://", url);
    char     *host = NULL, *path = NULL;
    CURLUcode rc = !full.p || !(r->url = curl_url()) ? CURLUE_OUT_OF_MEMORY
                                                     : curl_url_set(r->url, CURLUPART_URL, full.p, 0);
    free(full.p);
    if (rc == CURLUE_OK)
        rc = curl_url_get(r->url, CURLUPART_HOST, &host, 0);
    if (rc == CURLUE_OK)
        rc = curl_url_get(r->url, CURLUPART_PATH, &path, 0);
    if (rc == CURLUE_OK)
        rc = curl_url_set(r->url, CURLUPART_FRAGMENT, NULL, 0);
    if (rc == CURLUE_OK) {
        static const char tail[] = "/chat/completions";
        size_t            len = strlen(path), t = sizeof tail - 1;
        while (len && path[len - 1] == '/')
            len--;
        int named = len >= t && !memcmp(path + len - t, tail, t); /* the URL of the chat itself */
        for (len -= named ? t : 0; len && path[len - 1] == '/';)
            len--;
        r->path  = len || named ? strndup(path, len) : strdup("/v1");
        CURLU *s = r->path ? curl_url_dup(r->url) : NULL;
        rc = !s || curl_url_set(s, CURLUPART_USER, NULL, 0) || curl_url_set(s, CURLUPART_PASSWORD, NULL, 0) ||
                     curl_url_set(s, CURLUPART_QUERY, NULL, 0) ||
                     curl_url_set(s, CURLUPART_PATH, r->path, 0) ||
                     curl_url_get(s, CURLUPART_URL, &r->shown, 0)
                 ? CURLUE_OUT_OF_MEMORY
                 : CURLUE_OK;
        if (rc == CURLUE_OK && !r->path[0]) /* the API at the root: no "/" to put before "/models" */
            r->shown[strlen(r->shown) - 1] = 0;
        curl_url_cleanup(s);
    }
    if (rc != CURLUE_OK)
        snprintf(why, n, "the URL cannot be used (%s); the form is http[s]://HOST[:PORT][/PATH]",
                 curl_url_strerror(rc));
    curl_free(host);
    curl_free(path);
    return rc != CURLUE_OK;
}

/* 1 when the URL's host is a loopback address or name: 127.0.0.0/8, ::1, the IPv4-mapped
 * ::ffff:127.x.y.z, localhost and *.localhost. The host is libcurl's reading, the address it
 * connects to ("127.1" is 127.0.0.1). */
static int url_loopback(CURLU *url) {
    char *host = NULL;
    int   loop = 0;
    if (curl_url_get(url, CURLUPART_HOST, &host, 0) == CURLUE_OK && host) {
        char          h[256];
        unsigned char ip[16];
        size_t        k = strlen(host);
        snprintf(h, sizeof h, "%.*s", (int)(host[0] == '[' && k >= 2 ? k - 2 : k), host + (host[0] == '['));
        k                                 = strlen(h);
        static const unsigned char v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        loop = !strcasecmp(h, "localhost") || (k > 10 && !strcasecmp(h + k - 10, ".localhost")) ||
               (inet_pton(AF_INET, h, ip) == 1 && ip[0] == 127) ||
               (inet_pton(AF_INET6, h, ip) == 1 &&
                (!memcmp(ip, in6addr_loopback.s6_addr, 16) || (!memcmp(ip, v4, 12) && ip[12] == 127)));
    }
    curl_free(host);
    return loop;
}

/* What the URL sends in the clear, NULL if nothing: http:// to a host that is not a loopback
 * one (r->loopback) carrying an API key, a password, or a user name alone (Basic authentication
 * with a key as the user, as some APIs take one); *host_out gets the host as shown. */
static const char *secret_in_clear(const remote *r, int has_key, char *host_out, size_t hn) {
    char       *sch = NULL, *host = NULL, *user = NULL, *pw = NULL;
    const char *what = NULL;
    curl_url_get(r->url, CURLUPART_SCHEME, &sch, 0);
    curl_url_get(r->url, CURLUPART_HOST, &host, 0);
    curl_url_get(r->url, CURLUPART_USER, &user, 0);
    curl_url_get(r->url, CURLUPART_PASSWORD, &pw, 0);
    if (sch && host && !strcasecmp(sch, "http")) {
        what = r->loopback     ? NULL
               : has_key       ? "the API key"
               : pw && *pw     ? "the password in the URL"
               : user && *user ? "the user name in the URL"
                               : NULL;
        snprintf(host_out, hn, "%s", host);
    }
    curl_free(sch);
    curl_free(host);
    curl_free(user);
    curl_free(pw);
    return what;
}

static void url_free(remote *r) {
    curl_url_cleanup(r->url);
    free(r->path);
    curl_free(r->shown);
}

static int remote_open(ue *u, void **self, char *err, size_t errn) {
    remote *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    r->u       = u;
    r->ctx_max = -1;
    r->idle_s  = (int)k3_setting(K3_SETTING_ENDPOINT_IDLE_SECS)->def;
    if (k3_setting_env_int(K3_SETTING_ENDPOINT_IDLE_SECS, &r->idle_s)) {
        snprintf(err, errn, "%s", k3_errmsg());
        free(r);
        return -1;
    }
    char why[200];
    if (url_read(r, u->opts->endpoint, why, sizeof why)) {
        snprintf(err, errn, "--endpoint: %s", why);
        url_free(r);
        free(r);
        return -1;
    }
    r->loopback = url_loopback(r->url);
    if (u->opts->model_name)
        r->model = strdup(u->opts->model_name);
    if (u->opts->api_key && (r->auth = malloc(strlen(u->opts->api_key) + 32)))
        sprintf(r->auth, "Authorization: Bearer %s", u->opts->api_key);
    if ((u->opts->api_key && !r->auth) || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
        !(r->curl = curl_easy_init()) || !(r->c = k3_conv_new())) {
        snprintf(err, errn, "cannot start libcurl");
        if (r->curl)
            curl_easy_cleanup(r->curl);
        url_free(r);
        free(r->model);
        free(r->auth);
        free(r);
        return -1;
    }
    ue_conv_autosave_enable(u, r->c);
    char msg[1200];
    int  down = discover(r, msg, sizeof msg);
    /* the id whole (the status bar fits it to its width, txt_fit), escaped: the server names it,
     * and the status bar leaves out the control characters it draws ("m\x07x" read "mx") */
    k3_buf      desc  = {0};
    const char *model = r->model ? r->model : "?";
    k3_escape(&desc, NULL, model, strlen(model));
    size_t n_model = desc.n;
    k3_buf_printf(&desc, " · remote %s", r->shown);
    ui_ev e = {.type = EV_READY,
               .text = desc.p ? desc.p : (char *)(uintptr_t) "remote",
               .a    = n_model,
               .i    = r->ctx_max > 0 ? r->ctx_max : 0};
    e.gen   = (ue_gen){
          .temp = -1, .top_p = -1, .think = 1, .effort = 2, .max_tokens = -1}; /* the server's, unknown */
    ev_push(u->out, &e);
    free(desc.p);
    char        host[300];
    const char *open = secret_in_clear(r, r->auth != NULL, host, sizeof host);
    if (open)
        ue_emitf(u, EV_ERROR,
                 "warning: %s goes to %s over plain http://, which anyone on the network between can read: "
                 "use https:// (a server on this machine is reached safely through 127.0.0.1 or localhost)",
                 open, host);
    if (down) /* not fatal: the server may come up; each turn tries again */
        ue_emitf(u, EV_ERROR, "%s", msg);
    *self = r;
    return 0;
}

static void remote_close(void *self) {
    remote *r = self;
    curl_easy_cleanup(r->curl);
    curl_global_cleanup();
    k3_conv_free(r->c);
    url_free(r);
    free(r->model);
    free(r->auth);
    calls_free(r);
    free(r->line.p);
    free(r->data.p);
    free(r->body.p);
    free(r->think.p);
    free(r->resp.p);
    free(r->joined.p);
    free(r);
}

const ue_backend ue_backend_remote = {
    .name = "remote", .open = remote_open, .cmd = remote_cmd, .close = remote_close};
