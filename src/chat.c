/* chat.c: the XTML chat format: conversation -> ids, and the output channel parser.
 *
 * DESIGN
 * Encoder (../shared/spec/k3-chat.md section 2). Only <|open|>, <|close|>, <|sep|> and
 * <|end_of_msg|> are structural ids; every other piece (tag name, " key", "=\"", the
 * escaped value, "\"", message text) is encoded on its own with specials disallowed,
 * so piece boundaries are token boundaries and user text can never forge a control id:
 *     open_tag(tag, attrs) = OPEN "tag" {" key" "=\"" escaped-value "\""} SEP
 *     close_tag(tag)       = CLOSE "tag" SEP
 * Thinking on: the thinking-effort system message first, every earlier assistant turn
 * with its think block (empty when the reasoning is empty or only whitespace), and the
 * prompt <|open|>message role="assistant"<|sep|><|open|>think<|sep|>. Thinking off: no
 * think blocks, prompt ends <|open|>response<|sep|>.
 *
 * Parser: a small state machine over generated ids. Ordinary tokens go to the current
 * channel's streaming decoder (so text is always complete UTF-8). <|open|>/<|close|>
 * start a pending tag whose name is collected until <|sep|>; the expected tags
 * (close think, open response, close response, close message) are hidden and may
 * switch think -> response; anything else (unknown tag, stray <|sep|>, other specials,
 * a tag that never closes) is replayed as its literal text into the current channel.
 */
#include "tok.h"

#include <stdlib.h>

/* ==== encoder ============================================================ */

typedef struct chat_enc {
    const k3_tok *t;
    k3_ids       *out;
    int32_t       open, close, sep, eom;
} chat_enc;

static k3_status seg(chat_enc *e, const char *s) {
    return k3_tok_encode(e->t, s, strlen(s), 0, e->out);
}

/* attribute escaping: & -> &amp;  " -> &quot; */
static k3_status seg_escaped(chat_enc *e, const char *v) {
    size_t n = 0;
    for (const char *p = v; *p; p++) n += *p == '&' ? 5 : *p == '"' ? 6 : 1;
    char *b = malloc(n + 1);
    if (!b) return k3_err(K3_ERR_NOMEM, "chat: out of memory");
    char *o = b;
    for (const char *p = v; *p; p++) {
        if (*p == '&') { memcpy(o, "&amp;", 5); o += 5; }
        else if (*p == '"') { memcpy(o, "&quot;", 6); o += 6; }
        else *o++ = *p;
    }
    *o = 0;
    k3_status st = k3_tok_encode(e->t, b, n, 0, e->out);
    free(b);
    return st;
}

/* attrs: NULL-terminated key, value pairs */
static k3_status open_tag(chat_enc *e, const char *tag, const char *const *attrs) {
    k3_status st;
    if ((st = k3_ids_push(e->out, e->open)) || (st = seg(e, tag))) return st;
    for (; attrs && attrs[0]; attrs += 2) {
        char key[64];
        snprintf(key, sizeof key, " %s", attrs[0]);
        if ((st = seg(e, key)) || (st = seg(e, "=\"")) || (st = seg_escaped(e, attrs[1])) || (st = seg(e, "\"")))
            return st;
    }
    return k3_ids_push(e->out, e->sep);
}

k3_status chat_test_open_tag(const k3_tok *t, const char *tag, const char *const *attrs, k3_ids *out) {
    chat_enc e = {t, out, k3_tok_special(t, "<|open|>"), k3_tok_special(t, "<|close|>"), k3_tok_special(t, "<|sep|>"), 0};
    return open_tag(&e, tag, attrs);
}

static k3_status close_tag(chat_enc *e, const char *tag) {
    k3_status st;
    if ((st = k3_ids_push(e->out, e->close)) || (st = seg(e, tag))) return st;
    return k3_ids_push(e->out, e->sep);
}

static k3_status text(chat_enc *e, const char *s) { return s ? seg(e, s) : K3_OK; }

/* Only whitespace (Python's str.isspace, as the release's strip() sees it)? */
static int blank(const char *s) {
    if (!s) return 1;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int len;
        uint32_t c = tok_utf8_next((const uint8_t *)s, n, i, &len);
        if (c == TOK_CP_INVALID || !tok_is_py_space(c)) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* <|open|>message role=..<|sep|> BODY <|close|>message<|sep|><|end_of_msg|>, where BODY
 * is plain text, or for assistant turns the think/response blocks. */
static k3_status message(chat_enc *e, const char *role, const char *type, const k3_chat_msg *m, int think) {
    const char *attrs[] = {"role", role, type ? "type" : NULL, type, NULL};
    k3_status st = open_tag(e, "message", attrs);
    if (st) return st;
    if (!strcmp(role, "assistant")) {
        if (think) {
            if ((st = open_tag(e, "think", NULL))) return st;
            if (!blank(m->reasoning) && (st = text(e, m->reasoning))) return st;
            if ((st = close_tag(e, "think"))) return st;
        }
        if ((st = open_tag(e, "response", NULL)) || (st = text(e, m->content)) || (st = close_tag(e, "response")))
            return st;
    } else if ((st = text(e, m->content))) {
        return st;
    }
    if ((st = close_tag(e, "message"))) return st;
    return k3_ids_push(e->out, e->eom);
}

static k3_status need_special(const k3_tok *t, const char *name, int32_t *id) {
    *id = k3_tok_special(t, name);
    if (*id < 0) return k3_err(K3_ERR_FORMAT, "vocabulary has no special token '%s' (needed by the chat format)", name);
    return K3_OK;
}

k3_status k3_chat_encode(const k3_tok *t, const k3_chat_msg *msgs, size_t n_msgs, const k3_chat_opts *o,
                         k3_ids *out) {
    static const k3_chat_opts defaults = {1, NULL, 1, NULL};
    if (!o) o = &defaults;
    const char *effort = o->effort ? o->effort : "max";
    if (strcmp(effort, "low") && strcmp(effort, "high") && strcmp(effort, "max"))
        return k3_err(K3_ERR_ARG, "thinking effort '%s' is not supported: use low, high or max%s", effort,
                      !strcmp(effort, "medium") ? " (the release's encoder rejects medium)" : "");
    if (o->tools) return k3_err(K3_ERR_UNSUPPORTED, "tools are not supported yet");
    for (size_t i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role ? msgs[i].role : "(null)";
        if (!strcmp(r, "tool")) return k3_err(K3_ERR_UNSUPPORTED, "message %zu: role 'tool' (tool results) is not supported yet", i);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer"))
            return k3_err(K3_ERR_ARG, "message %zu: role '%s': expected system, user, assistant or developer", i, r);
        if (msgs[i].n_images > 0) return k3_err(K3_ERR_UNSUPPORTED, "message %zu: images are not supported yet", i);
    }
    chat_enc e = {t, out, 0, 0, 0, 0};
    k3_status st;
    if ((st = need_special(t, "<|open|>", &e.open)) || (st = need_special(t, "<|close|>", &e.close)) ||
        (st = need_special(t, "<|sep|>", &e.sep)) || (st = need_special(t, "<|end_of_msg|>", &e.eom)))
        return st;
    size_t n0 = out->n;
    if (o->think) {
        char body[512];
        snprintf(body, sizeof body,
                 "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                 "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
                 "Now the system is invoked with `thinking_effort=%s`.",
                 effort);
        k3_chat_msg em = {"system", body, NULL, 0};
        if ((st = message(&e, "system", "thinking-effort", &em, 0))) goto fail;
    }
    for (size_t i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "developer")) r = "system"; /* Decision in the spec: render, never drop */
        if ((st = message(&e, r, NULL, &msgs[i], o->think))) goto fail;
    }
    if (o->gen_prompt) {
        const char *attrs[] = {"role", "assistant", NULL};
        if ((st = open_tag(&e, "message", attrs)) || (st = open_tag(&e, o->think ? "think" : "response", NULL)))
            goto fail;
    }
    return K3_OK;
fail:
    out->n = n0;
    return st;
}

/* ==== output parser ====================================================== */

#define TAG_MAX 32 /* longer "tag names" are text: the format's tags are short words */


struct k3_chat_parser {
    const k3_tok *t;
    int32_t   open, close, sep, eom;
    int       chan;            /* K3_CHAN_THINK / K3_CHAN_RESPONSE                 */
    int       in_tag;          /* after <|open|> / <|close|>, waiting for <|sep|>   */
    int32_t   tag_kind;        /* the id that opened the pending tag                */
    char      tag[TAG_MAX];    /* (tag_n) name bytes so far                         */
    int       tag_n;
    int       ended;
    k3_detok *dt[2];           /* one streaming decoder per channel                 */
    k3_buf    out[2];          /* text produced by the current call, per channel    */
};

k3_status k3_chat_parser_new(const k3_tok *t, int think, k3_chat_parser **out) {
    *out = NULL;
    k3_chat_parser *p = calloc(1, sizeof *p);
    if (!p) return k3_err(K3_ERR_NOMEM, "chat parser: out of memory");
    p->t = t;
    p->chan = think ? K3_CHAN_THINK : K3_CHAN_RESPONSE;
    k3_status st;
    chat_enc ids = {0};
    if ((st = need_special(t, "<|open|>", &ids.open)) || (st = need_special(t, "<|close|>", &ids.close)) ||
        (st = need_special(t, "<|sep|>", &ids.sep)) || (st = need_special(t, "<|end_of_msg|>", &ids.eom)) ||
        (st = k3_detok_new(t, &p->dt[0])) || (st = k3_detok_new(t, &p->dt[1]))) {
        k3_chat_parser_free(p);
        return st;
    }
    p->open = ids.open;
    p->close = ids.close;
    p->sep = ids.sep;
    p->eom = ids.eom;
    *out = p;
    return K3_OK;
}

void k3_chat_parser_free(k3_chat_parser *p) {
    if (!p) return;
    k3_detok_free(p->dt[0]);
    k3_detok_free(p->dt[1]);
    free(p->out[0].p);
    free(p->out[1].p);
    free(p);
}

int k3_chat_parser_channel(const k3_chat_parser *p) { return p->chan; }

static k3_status obuf_add(k3_buf *o, const char *s, size_t n) {
    return k3_buf_add(o, s, n) ? k3_err(K3_ERR_NOMEM, "chat parser: out of memory") : K3_OK;
}

/* bytes shown as text in the current channel */
static k3_status emit(k3_chat_parser *p, const char *s, size_t n) {
    const char *txt;
    size_t len;
    k3_status st = k3_detok_feed_bytes(p->dt[p->chan], s, n, &txt, &len);
    return st ? st : obuf_add(&p->out[p->chan], txt, len);
}

static k3_status emit_id(k3_chat_parser *p, int32_t id) {
    size_t n;
    const char *s = k3_tok_piece(p->t, id, &n);
    return emit(p, s, n);
}

static k3_status flush_chan(k3_chat_parser *p, int chan) {
    const char *txt;
    size_t len;
    k3_detok_flush(p->dt[chan], &txt, &len);
    return obuf_add(&p->out[chan], txt, len);
}

/* The pending tag was not structure after all: show what was read, as text. */
static k3_status replay_tag(k3_chat_parser *p) {
    if (!p->in_tag) return K3_OK;
    p->in_tag = 0;
    k3_status st = emit_id(p, p->tag_kind);
    return st ? st : emit(p, p->tag, (size_t)p->tag_n);
}

static int tag_is(const k3_chat_parser *p, const char *name) {
    size_t n = strlen(name);
    return (size_t)p->tag_n == n && !memcmp(p->tag, name, n);
}

/* <|sep|> ended a pending tag: hide it when expected, else replay it. */
static k3_status end_tag(k3_chat_parser *p) {
    int open = p->tag_kind == p->open;
    int think = p->chan == K3_CHAN_THINK;
    if (!open && tag_is(p, "think") && think) goto hide;
    if (open && tag_is(p, "response") && think) {
        k3_status st = flush_chan(p, K3_CHAN_THINK);
        p->chan = K3_CHAN_RESPONSE;
        if (st) return st;
        goto hide;
    }
    if (!open && tag_is(p, "response") && !think) goto hide;
    if (!open && tag_is(p, "message")) goto hide;
    k3_status st = replay_tag(p);
    return st ? st : emit_id(p, p->sep);
hide:
    p->in_tag = 0;
    return K3_OK;
}

static void out_reset(k3_chat_parser *p) {
    for (int c = 0; c < 2; c++) {
        p->out[c].n = 0;
        if (p->out[c].p) p->out[c].p[0] = 0;
    }
}

k3_status k3_chat_parser_feed(k3_chat_parser *p, int32_t id, k3_chat_out *o) {
    out_reset(p);
    size_t pl;
    const char *piece = k3_tok_piece(p->t, id, &pl);
    if (!piece) return k3_err(K3_ERR_ARG, "chat parser: id %d is outside 0..%d", id, k3_tok_n_vocab(p->t) - 1);
    k3_status st = K3_OK;
    if (id == p->open || id == p->close) {
        if (!(st = replay_tag(p))) {
            p->in_tag = 1;
            p->tag_kind = id;
            p->tag_n = 0;
        }
    } else if (id == p->sep) {
        st = p->in_tag ? end_tag(p) : emit_id(p, id);
    } else if (id == p->eom) {
        if (!(st = replay_tag(p)) && !(st = flush_chan(p, K3_CHAN_THINK))) st = flush_chan(p, K3_CHAN_RESPONSE);
        p->ended = 1;
    } else if (k3_tok_is_special(p->t, id)) {
        if (!(st = replay_tag(p))) st = emit_id(p, id);
    } else if (p->in_tag) {
        if ((size_t)p->tag_n + pl <= TAG_MAX) {
            memcpy(p->tag + p->tag_n, piece, pl);
            p->tag_n += (int)pl;
        } else if (!(st = replay_tag(p))) {
            st = emit(p, piece, pl);
        }
    } else {
        st = emit(p, piece, pl);
    }
    o->think = p->out[0].p ? p->out[0].p : "";
    o->think_len = p->out[0].n;
    o->response = p->out[1].p ? p->out[1].p : "";
    o->response_len = p->out[1].n;
    o->end = p->ended;
    return st;
}

void k3_chat_parser_finish(k3_chat_parser *p, k3_chat_out *o) {
    out_reset(p);
    (void)replay_tag(p);
    (void)flush_chan(p, K3_CHAN_THINK);
    (void)flush_chan(p, K3_CHAN_RESPONSE);
    o->think = p->out[0].p ? p->out[0].p : "";
    o->think_len = p->out[0].n;
    o->response = p->out[1].p ? p->out[1].p : "";
    o->response_len = p->out[1].n;
    o->end = p->ended;
}
