/* chat-format.c: the XTML chat format: conversation -> ids, and the output channel parser.
 *
 * DESIGN
 * Encoder (doc/chat-format.md section 2). Only <|open|>, <|close|>, <|sep|> and
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
 *
 * Tools (doc/tool-calls.md): the encoder writes the tool-declare message
 * (tools canonicalised by json.c: keys sorted, compact, Python numbers), assistant calls
 * with typed arguments, tool results re-sorted by call id, and the tool-choice message.
 * With tools on, the parser also reads <|open|>tools<|sep|> blocks: call markers carry
 * attributes, so they may be TAG_MAXT bytes long; inside an argument value only a
 * <|close|> id can end the value (an <|open|> or <|sep|> there is text). Arguments are
 * built as the JSON string json.dumps would write, streamed as they are read: `{"K": "`,
 * the escaped text, `"`; a typed value once it closes; `}` at the call's close. The
 * leniency of spec 2.1 (tools right after the think close, missing closes) is kept, and a
 * call left open is closed by the next call's marker. Names, keys and typed values are read
 * as text decoded with replacement (U+FFFD), as the release's parsers read them.
 */
#include "json.h"
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

/* attribute escaping: & -> &amp;  " -> &quot; (len bytes of v: a JSON key may hold NUL) */
static k3_status seg_escaped(chat_enc *e, const char *v, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += v[i] == '&' ? 5 : v[i] == '"' ? 6 : 1;
    char *b = malloc(n + 1);
    if (!b)
        return k3_err(K3_ERR_NOMEM, "chat: out of memory");
    char *o = b;
    for (size_t i = 0; i < len; i++) {
        if (v[i] == '&') {
            memcpy(o, "&amp;", 5);
            o += 5;
        } else if (v[i] == '"') {
            memcpy(o, "&quot;", 6);
            o += 6;
        } else
            *o++ = v[i];
    }
    *o           = 0;
    k3_status st = k3_tok_encode(e->t, b, n, 0, e->out);
    free(b);
    return st;
}

/* attrs: NULL-terminated key, value pairs; lens: the values' byte lengths (NULL: strlen) */
static k3_status open_tag_n(chat_enc *e, const char *tag, const char *const *attrs, const size_t *lens) {
    k3_status st;
    if ((st = k3_ids_push(e->out, e->open)) || (st = seg(e, tag)))
        return st;
    for (int k = 0; attrs && attrs[2 * k]; k++) {
        char key[64];
        snprintf(key, sizeof key, " %s", attrs[2 * k]);
        const char *v = attrs[2 * k + 1];
        if ((st = seg(e, key)) || (st = seg(e, "=\"")) ||
            (st = seg_escaped(e, v, lens ? lens[k] : strlen(v))) || (st = seg(e, "\"")))
            return st;
    }
    return k3_ids_push(e->out, e->sep);
}

static k3_status open_tag(chat_enc *e, const char *tag, const char *const *attrs) {
    return open_tag_n(e, tag, attrs, NULL);
}

k3_status chat_test_open_tag(const k3_tok *t, const char *tag, const char *const *attrs, k3_ids *out) {
    chat_enc e = {
        t, out, k3_tok_special(t, "<|open|>"), k3_tok_special(t, "<|close|>"), k3_tok_special(t, "<|sep|>"),
        0};
    return open_tag(&e, tag, attrs);
}

static k3_status close_tag(chat_enc *e, const char *tag) {
    k3_status st;
    if ((st = k3_ids_push(e->out, e->close)) || (st = seg(e, tag)))
        return st;
    return k3_ids_push(e->out, e->sep);
}

static k3_status text(chat_enc *e, const char *s) {
    return s ? seg(e, s) : K3_OK;
}

/* A message's content: one segment per text part when m has parts that make up the whole
 * content (the release's encoder writes each part as its own segment), else one. */
static k3_status content(chat_enc *e, const k3_chat_msg *m) {
    size_t n = m->content ? strlen(m->content) : 0, sum = 0;
    for (int k = 0; m->parts && k < m->n_parts; k++)
        sum += m->parts[k];
    if (!m->parts || m->n_parts < 2 || sum != n)
        return text(e, m->content);
    k3_status st = K3_OK;
    size_t    at = 0;
    for (int k = 0; !st && k < m->n_parts; at += m->parts[k++])
        st = m->parts[k] ? k3_tok_encode(e->t, m->content + at, m->parts[k], 0, e->out) : K3_OK;
    return st;
}

/* Only whitespace (Python's str.isspace, as the release's strip() sees it)? */
static int blank(const char *s) {
    if (!s)
        return 1;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int      len;
        uint32_t c = tok_utf8_next((const uint8_t *)s, n, i, &len);
        if (c == TOK_CP_INVALID || !tok_is_py_space(c))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* ---- tools (doc/tool-calls.md section 1) ---- */

/* One argument value (1.3): a string raw, anything else as json.dumps writes it. */
static k3_status arg_value(chat_enc *e, const jv *v) {
    if (v->kind == JV_STRING)
        return v->n ? k3_tok_encode(e->t, v->s, v->n, 0, e->out) : K3_OK;
    jbuf      b  = {0};
    k3_status st = jv_dump(v, JV_PY_DEFAULT, &b);
    if (!st)
        st = k3_tok_encode(e->t, b.p, b.n, 0, e->out);
    free(b.p);
    return st;
}

static const char *arg_type(const jv *v) {
    switch (v->kind) { /* the spec's order: boolean, null, number, string, object, array */
    case JV_TRUE:
    case JV_FALSE:
        return "boolean";
    case JV_NULL:
        return "null";
    case JV_INT:
    case JV_FLOAT:
        return "number";
    case JV_STRING:
        return "string";
    case JV_OBJECT:
        return "object";
    default:
        return "array";
    }
}

/* <|open|>call tool="NAME" index="N"<|sep|> ARGS <|close|>call<|sep|> */
static k3_status call(chat_enc *e, size_t mi, int ci, const k3_tool_call *c) {
    if (!c->name || !*c->name)
        return k3_err(K3_ERR_ARG, "message %zu: tool_calls[%d]: the function name is missing", mi, ci);
    char idx[16];
    snprintf(idx, sizeof idx, "%d", ci + 1);
    const char *attrs[] = {"tool", c->name, "index", idx, NULL};
    k3_status   st      = open_tag(e, "call", attrs);
    if (st)
        return st;
    const char *a = c->arguments;
    if (a && !blank(a)) {
        jv *v = NULL;
        if (jv_parse(a, strlen(a), &v) != K3_OK) { /* not JSON: the raw json block */
            const char *ja[] = {"type", "object", NULL};
            if ((st = open_tag(e, "json", ja)) || (st = seg(e, a)) || (st = close_tag(e, "json")))
                return st;
        } else if (v->kind != JV_OBJECT) {
            st = k3_err(K3_ERR_ARG, "message %zu: tool_calls[%d].arguments: expected a JSON object, got %s",
                        mi, ci, arg_type(v));
            jv_free(v);
            return st;
        } else {
            for (size_t k = 0; !st && k < v->n; k++) {
                const char *aa[]   = {"key", v->keys[k].s, "type", arg_type(&v->items[k]), NULL};
                size_t      lens[] = {v->keys[k].n, strlen(aa[3])};
                if (!(st = open_tag_n(e, "argument", aa, lens)) && !(st = arg_value(e, &v->items[k])))
                    st = close_tag(e, "argument");
            }
            jv_free(v);
            if (st)
                return st;
        }
    }
    return close_tag(e, "call");
}

/* TOOLS of a tool-declare message: the array with every object's keys sorted, compact. */
static k3_status tools_json(const char *tools, const char *where, jbuf *out, int *n_tools) {
    jv       *v  = NULL;
    k3_status st = jv_parse(tools, strlen(tools), &v);
    if (st) {
        k3_err_prefix("%s", where);
        return K3_ERR_ARG;
    }
    if (v->kind != JV_ARRAY) {
        jv_free(v);
        return k3_err(K3_ERR_ARG, "%s: expected a JSON array of tool declarations", where);
    }
    for (size_t k = 0; k < v->n; k++)
        if (v->items[k].kind != JV_OBJECT) {
            jv_free(v);
            return k3_err(K3_ERR_ARG,
                          "%s[%zu]: expected an object ({\"type\":\"function\",\"function\":{...}})", where,
                          k);
        }
    *n_tools = (int)v->n;
    st       = v->n ? jv_dump(v, JV_SORTED_COMPACT, out) : K3_OK;
    jv_free(v);
    return st;
}

static k3_status tool_declare(chat_enc *e, const char *tools, int dynamic, const char *where, int *rendered) {
    static const char
        head[]   = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n",
        dyn[]    = "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
                   "You have access to all existing and extended tools.\nHere are the specs for the "
                   "extended tools.\n\n```json\n";
    jbuf      b  = {0};
    int       n  = 0;
    k3_status st = jbuf_add(&b, dynamic ? dyn : head, strlen(dynamic ? dyn : head));
    if (!st)
        st = tools_json(tools, where, &b, &n);
    if (!st)
        st = jbuf_add(&b, "\n```", 4);
    *rendered = n > 0;
    if (!st && n > 0) {
        const char *attrs[] = {"role", "system", "type", "tool-declare", NULL};
        if (!(st = open_tag(e, "message", attrs)) && !(st = k3_tok_encode(e->t, b.p, b.n, 0, e->out)) &&
            !(st = close_tag(e, "message")))
            st = k3_ids_push(e->out, e->eom);
    }
    free(b.p);
    return st;
}

/* <|open|>message role=..<|sep|> BODY <|close|>message<|sep|><|end_of_msg|>, where BODY
 * is plain text, or for assistant turns the think/response blocks (and the calls).
 * tool_name/tool_index: the attributes of a tool result (1.4). */
static k3_status message(chat_enc *e, size_t mi, const char *role, const char *type, const k3_chat_msg *m,
                         int think, const char *tool_name, int tool_index) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", tool_index);
    /* role, then: a tool result's tool and index; an internal message's type; else name="..."
     * when the message has a non-empty name (the release's encoder, k3-tools.md 1.4) */
    const char *key     = tool_name ? "tool" : type ? "type" : "name";
    const char *val     = tool_name ? tool_name : type ? type : m->name && *m->name ? m->name : NULL;
    const char *attrs[] = {"role", role, val ? key : NULL, val, tool_name ? "index" : NULL, idx, NULL};
    k3_status   st      = open_tag(e, "message", attrs);
    if (st)
        return st;
    if (!strcmp(role, "assistant")) {
        if (think) {
            if ((st = open_tag(e, "think", NULL)))
                return st;
            if (!blank(m->reasoning) && (st = text(e, m->reasoning)))
                return st;
            if ((st = close_tag(e, "think")))
                return st;
        }
        if ((st = open_tag(e, "response", NULL)) || (st = content(e, m)) || (st = close_tag(e, "response")))
            return st;
        if (m->n_tool_calls > 0) {
            if ((st = open_tag(e, "tools", NULL)))
                return st;
            for (int k = 0; k < m->n_tool_calls; k++)
                if ((st = call(e, mi, k, &m->tool_calls[k])))
                    return st;
            if ((st = close_tag(e, "tools")))
                return st;
        }
    } else if ((st = content(e, m))) {
        return st;
    }
    if ((st = close_tag(e, "message")))
        return st;
    return k3_ids_push(e->out, e->eom);
}

/* Position of the call that a tool result answers (by id) in the assistant message a, or -1. */
static int call_pos(const k3_chat_msg *a, const k3_chat_msg *t) {
    if (!a || !t->tool_call_id)
        return -1;
    for (int k = 0; k < a->n_tool_calls; k++)
        if (a->tool_calls[k].id && !strcmp(a->tool_calls[k].id, t->tool_call_id))
            return k;
    return -1;
}

/* Renders the run of tool results msgs[i, j) after the assistant message a (NULL: none):
 * re-sorted by call position when every one matches a call (1.5), indexes going on from
 * *index (1.4). */
static k3_status tool_run(chat_enc *e, const k3_chat_msg *msgs, size_t i, size_t j, const k3_chat_msg *a,
                          int think, int *index) {
    size_t n = j - i, *ord = malloc(n * sizeof *ord);
    int   *pos = malloc(n * sizeof *pos), all = a != NULL;
    if (!ord || !pos) {
        free(ord);
        free(pos);
        return k3_err(K3_ERR_NOMEM, "chat: out of memory");
    }
    for (size_t k = 0; k < n; k++) {
        ord[k] = i + k;
        pos[k] = call_pos(a, &msgs[i + k]);
        all &= pos[k] >= 0;
    }
    for (size_t k = 1; all && k < n; k++) /* stable insertion sort by call position */
        for (size_t z = k; z > 0 && pos[z - 1] > pos[z]; z--) {
            int tp     = pos[z];
            pos[z]     = pos[z - 1];
            pos[z - 1] = tp;
            size_t to  = ord[z];
            ord[z]     = ord[z - 1];
            ord[z - 1] = to;
        }
    k3_status st = K3_OK;
    for (size_t k = 0; !st && k < n; k++) {
        const k3_chat_msg *m    = &msgs[ord[k]];
        int                I    = ++*index;
        const char        *name = all                            ? a->tool_calls[pos[k]].name
                                  : m->name && *m->name          ? m->name
                                  : a && I - 1 < a->n_tool_calls ? a->tool_calls[I - 1].name
                                                                 : NULL;
        if (!name || !*name)
            st = k3_err(K3_ERR_ARG,
                        "message %zu: tool result: no tool name (give its name, or a tool_call_id of the "
                        "preceding assistant message's calls)",
                        ord[k]);
        else
            st = message(e, ord[k], "tool", NULL, m, think, name, I);
    }
    free(ord);
    free(pos);
    return st;
}

static k3_status need_special(const k3_tok *t, const char *name, int32_t *id) {
    *id = k3_tok_special(t, name);
    if (*id < 0)
        return k3_err(K3_ERR_FORMAT, "vocabulary has no special token '%s' (needed by the chat format)",
                      name);
    return K3_OK;
}

k3_status k3_chat_think_close(const k3_tok *t, k3_ids *out) {
    chat_enc  e = {t, out, 0, 0, 0, 0};
    k3_status st;
    if ((st = need_special(t, "<|open|>", &e.open)) || (st = need_special(t, "<|close|>", &e.close)) ||
        (st = need_special(t, "<|sep|>", &e.sep)) || (st = close_tag(&e, "think")))
        return st;
    return open_tag(&e, "response", NULL);
}

k3_status k3_chat_encode(const k3_tok *t, const k3_chat_msg *msgs, size_t n_msgs, const k3_chat_opts *o,
                         k3_ids *out) {
    static const k3_chat_opts defaults = {1, NULL, 1, NULL, NULL, NULL, NULL};
    if (!o)
        o = &defaults;
    const char *effort =
        o->effort ? o->effort : k3_setting_choice(K3_SETTING_EFFORT, (int)k3_setting(K3_SETTING_EFFORT)->def);
    double eff;
    char   want[64];
    if (k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_API, effort, &eff, NULL, 0))
        return k3_err(K3_ERR_ARG, "thinking effort '%s' is not supported: use %s%s", effort,
                      k3_setting_expect(K3_SETTING_EFFORT, K3_SRC_API, want, sizeof want),
                      !strcmp(effort, "medium") ? " (the release's encoder rejects medium)" : "");
    const char *choice = o->tool_choice ? o->tool_choice : "auto";
    if (strcmp(choice, "auto") && strcmp(choice, "required") && strcmp(choice, "none"))
        return k3_err(K3_ERR_ARG, "tool_choice '%.40s': expected auto, required or none", choice);
    for (size_t i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role ? msgs[i].role : "(null)";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer") &&
            strcmp(r, "tool"))
            return k3_err(K3_ERR_ARG,
                          "message %zu: role '%s': expected system, user, assistant, tool or developer", i,
                          r);
        if (msgs[i].n_images > 0)
            return k3_err(K3_ERR_UNSUPPORTED, "message %zu: images are not supported yet", i);
        if (msgs[i].n_tool_calls > 0 && strcmp(r, "assistant"))
            return k3_err(K3_ERR_ARG,
                          "message %zu: tool_calls on a '%s' message (only assistant messages call tools)", i,
                          r);
    }
    chat_enc  e = {t, out, 0, 0, 0, 0};
    k3_status st;
    if ((st = need_special(t, "<|open|>", &e.open)) || (st = need_special(t, "<|close|>", &e.close)) ||
        (st = need_special(t, "<|sep|>", &e.sep)) || (st = need_special(t, "<|end_of_msg|>", &e.eom)))
        return st;
    size_t n0 = out->n;
    int    declared;
    if (o->tools && (st = tool_declare(&e, o->tools, 0, "tools", &declared)))
        goto fail;
    if (o->think) {
        char body[512];
        snprintf(body, sizeof body,
                 "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                 "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
                 "Now the system is invoked with `thinking_effort=%s`.",
                 effort);
        k3_chat_msg em = {.role = "system", .content = body};
        if ((st = message(&e, 0, "system", "thinking-effort", &em, 0, NULL, 0)))
            goto fail;
    }
    const k3_chat_msg *last_asst  = NULL;
    int                tool_index = 0;
    for (size_t i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "developer"))
            r = "system"; /* Decision in the spec: render, never drop */
        if (!strcmp(r, "tool")) {
            size_t j = i;
            while (j < n_msgs && !strcmp(msgs[j].role, "tool"))
                j++;
            if ((st = tool_run(&e, msgs, i, j, last_asst, o->think, &tool_index)))
                goto fail;
            i = j - 1;
            continue;
        }
        if (!strcmp(r, "assistant")) {
            last_asst  = &msgs[i];
            tool_index = 0;
        }
        if (!strcmp(r, "system") && msgs[i].tools) {
            char where[48];
            snprintf(where, sizeof where, "message %zu: tools", i);
            if ((st = tool_declare(&e, msgs[i].tools, 1, where, &declared)))
                goto fail;
            if (declared)
                continue; /* an empty list: an ordinary system message */
        }
        if ((st = message(&e, i, r, NULL, &msgs[i], o->think, NULL, 0)))
            goto fail;
    }
    if (strcmp(choice, "auto")) {
        char body[160];
        snprintf(body, sizeof body,
                 "The system is invoked with `tool_choice=%s`.\nYou %s in the next message.", choice,
                 !strcmp(choice, "required") ? "MUST call tools" : "MUST NOT call any tools");
        k3_chat_msg cm = {.role = "system", .content = body};
        if ((st = message(&e, 0, "system", "tool-choice", &cm, 0, NULL, 0)))
            goto fail;
    }
    if (o->response_format && strcmp(o->response_format, "text")) {
        int schema = !strcmp(o->response_format, "json_schema");
        if (!schema && strcmp(o->response_format, "json_object")) {
            st = k3_err(K3_ERR_ARG, "response_format '%.40s': expected text, json_object or json_schema",
                        o->response_format);
            goto fail;
        }
        jbuf b   = {0};
        jv  *sch = NULL;
        st       = jbuf_add(&b, "The system is invoked with `response_format=",
                            strlen("The system is invoked with `response_format="));
        if (!st)
            st = jbuf_add(&b, o->response_format, strlen(o->response_format));
        static const char raw[] =
            "`.\nYour response must be raw JSON data without markdown code blocks (```json) "
            "or any additional formatting.";
        if (!st)
            st = jbuf_add(&b, raw, strlen(raw));
        if (!st && schema) {
            static const char must[] = "\nThe JSON data must match the following schema:\n```json\n";
            const char       *txt    = o->response_schema ? o->response_schema : "{}";
            if (!(st = jv_parse(txt, strlen(txt), &sch)) && !(st = jbuf_add(&b, must, strlen(must))) &&
                !(st = jv_dump(sch, JV_SORTED_COMPACT, &b)))
                st = jbuf_add(&b, "\n```", 4);
            jv_free(sch);
        }
        if (!st && !(st = jbuf_add(&b, "", 1))) {
            k3_chat_msg rm = {.role = "system", .content = b.p};
            st             = message(&e, 0, "system", "response-format", &rm, 0, NULL, 0);
        }
        free(b.p);
        if (st)
            goto fail;
    }
    if (o->gen_prompt) {
        const char *attrs[] = {"role", "assistant", NULL};
        if ((st = open_tag(&e, "message", attrs)) ||
            (st = open_tag(&e, o->think ? "think" : "response", NULL)))
            goto fail;
    }
    return K3_OK;
fail:
    out->n = n0;
    return st;
}

/* ==== output parser ====================================================== */

#define TAG_MAX 32    /* longer "tag names" are text: the format's tags are short words  */
#define TAG_MAXT 4096 /* with tools on: call/argument markers carry names and keys        */

typedef jbuf obuf;

enum pmode {
    PM_TEXT = 0, /* think / response channels                                       */
    PM_TOOLS,    /* inside <|open|>tools<|sep|>, between calls                       */
    PM_CALL,     /* inside a call, between arguments                                 */
    PM_VALUE,    /* inside an argument value or a json block: only <|close|> ends it */
};
enum vkind { V_STRING = 0, V_TYPED, V_JSON };

typedef struct pcall {
    char *name; /* NUL-terminated                                  */
    obuf  args; /* the arguments JSON so far                       */
    int   done; /* <|close|>call<|sep|> (or a leniently closed one) */
} pcall;

struct k3_chat_parser {
    const k3_tok *t;
    int32_t       open, close, sep, eom;
    int           chan;          /* K3_CHAN_THINK / K3_CHAN_RESPONSE                 */
    int           in_tag;        /* after <|open|> / <|close|>, waiting for <|sep|>   */
    int32_t       tag_kind;      /* the id that opened the pending tag                */
    char          tag[TAG_MAXT]; /* (tag_n) name and attribute bytes so far           */
    int           tag_n;
    int           ended;
    k3_detok     *dt[3];  /* streaming decoders: think, response, string value */
    obuf          out[2]; /* text produced by the current call, per channel    */
    /* tool calls (tools on) */
    int         tools;
    int         think_closed; /* <|close|>think<|sep|> was read                    */
    int         mode;         /* enum pmode                                        */
    pcall      *calls;        /* (n_calls, cap_calls)                              */
    int         n_calls, cap_calls;
    int         in_call; /* a call is open; cur NULL when it has no name      */
    pcall      *cur;
    int         brace, members; /* the current call's "{" was written; members so far */
    int         vkind;          /* enum vkind of the open value                       */
    obuf        vkey;           /* typed value: its key                               */
    obuf        val;            /* typed value / json block: raw bytes                */
    obuf        args_out;       /* arguments appended in the current feed             */
    int         ev_call, ev_done;
    const char *ev_name;
    int         pend_open; /* 1 + a call whose open is reported by the next feed, 0: none */
};

k3_status k3_chat_parser_new(const k3_tok *t, int think, k3_chat_parser **out) {
    *out              = NULL;
    k3_chat_parser *p = calloc(1, sizeof *p);
    if (!p)
        return k3_err(K3_ERR_NOMEM, "chat parser: out of memory");
    p->t    = t;
    p->chan = think ? K3_CHAN_THINK : K3_CHAN_RESPONSE;
    k3_status st;
    chat_enc  ids = {0};
    if ((st = need_special(t, "<|open|>", &ids.open)) || (st = need_special(t, "<|close|>", &ids.close)) ||
        (st = need_special(t, "<|sep|>", &ids.sep)) || (st = need_special(t, "<|end_of_msg|>", &ids.eom)) ||
        (st = k3_detok_new(t, &p->dt[0])) || (st = k3_detok_new(t, &p->dt[1])) ||
        (st = k3_detok_new(t, &p->dt[2]))) {
        k3_chat_parser_free(p);
        return st;
    }
    p->open  = ids.open;
    p->close = ids.close;
    p->sep   = ids.sep;
    p->eom   = ids.eom;
    *out     = p;
    return K3_OK;
}

void k3_chat_parser_set_tools(k3_chat_parser *p, int on) {
    p->tools = on != 0;
}

void k3_chat_parser_free(k3_chat_parser *p) {
    if (!p)
        return;
    for (int k = 0; k < 3; k++)
        k3_detok_free(p->dt[k]);
    free(p->out[0].p);
    free(p->out[1].p);
    for (int k = 0; k < p->n_calls; k++) {
        free(p->calls[k].name);
        free(p->calls[k].args.p);
    }
    free(p->calls);
    free(p->vkey.p);
    free(p->val.p);
    free(p->args_out.p);
    free(p);
}

int k3_chat_parser_channel(const k3_chat_parser *p) {
    return p->chan;
}

int k3_chat_parser_in_text(const k3_chat_parser *p) {
    return p->chan == K3_CHAN_RESPONSE && !p->in_tag && p->mode == PM_TEXT && !p->ended;
}

int k3_chat_parser_n_calls(const k3_chat_parser *p) {
    return p->n_calls;
}

int k3_chat_parser_call(const k3_chat_parser *p, int i, const char **name, const char **args) {
    if (i < 0 || i >= p->n_calls)
        return -1;
    *name = p->calls[i].name;
    *args = p->calls[i].args.p ? p->calls[i].args.p : "";
    return p->calls[i].done;
}

/* bytes shown as text in the current channel */
static k3_status emit(k3_chat_parser *p, const char *s, size_t n) {
    const char *txt;
    size_t      len;
    k3_status   st = k3_detok_feed_bytes(p->dt[p->chan], s, n, &txt, &len);
    return st ? st : jbuf_add(&p->out[p->chan], txt, len);
}

static k3_status emit_id(k3_chat_parser *p, int32_t id) {
    size_t      n;
    const char *s = k3_tok_piece(p->t, id, &n);
    return emit(p, s, n);
}

static k3_status flush_chan(k3_chat_parser *p, int chan) {
    const char *txt;
    size_t      len;
    k3_detok_flush(p->dt[chan], &txt, &len);
    return jbuf_add(&p->out[chan], txt, len);
}

/* The pending tag was not structure after all: show what was read, as text. */
static k3_status replay_tag(k3_chat_parser *p) {
    if (!p->in_tag)
        return K3_OK;
    p->in_tag    = 0;
    k3_status st = emit_id(p, p->tag_kind);
    return st ? st : emit(p, p->tag, (size_t)p->tag_n);
}

/* The tag's name: its bytes up to the first space. */
static int tag_is(const k3_chat_parser *p, const char *name) {
    size_t n = strlen(name);
    return (size_t)p->tag_n >= n && !memcmp(p->tag, name, n) &&
           ((size_t)p->tag_n == n || (p->tools && p->tag[n] == ' '));
}

/* b with each byte sequence that is not UTF-8 replaced by U+FFFD: the text the release's
 * parsers read (decoded with replacement; the channels get the same from their decoders), so
 * names, keys and arguments are always UTF-8 and the arguments JSON text. */
static k3_status utf8_fix(obuf *b) {
    char  *s;
    size_t n;
    if (!b->n || !k3_utf8_repair(b->p, b->n, NULL, NULL))
        return K3_OK;
    k3_status st = tok_utf8_sanitize((const uint8_t *)(b->p ? b->p : ""), b->n, &s, &n);
    if (st)
        return st;
    free(b->p);
    b->p   = s;
    b->n   = n;
    b->cap = n + 1;
    return K3_OK;
}

/* The value of attribute key in the pending tag (` key="value"`), unescaped in one pass
 * (&quot; -> ", &amp; -> &) into out, made UTF-8 (utf8_fix). 1 when present. */
static int tag_attr(const k3_chat_parser *p, const char *key, obuf *out) {
    const char *s = p->tag, *end = p->tag + p->tag_n;
    size_t      kn = strlen(key);
    out->n         = 0;
    if (jbuf_add(out, "", 0))
        return 0;
    while (s < end && *s != ' ')
        s++; /* the tag name */
    while (s < end) {
        while (s < end && *s == ' ')
            s++;
        const char *k = s;
        while (s < end && *s != '=')
            s++;
        if (end - s < 2 || s[1] != '"')
            return 0;
        size_t      this_n = (size_t)(s - k);
        const char *v = s + 2, *ve = v;
        while (ve < end && *ve != '"')
            ve++;
        if (ve == end)
            return 0;
        s = ve + 1;
        if (this_n != kn || memcmp(k, key, kn))
            continue;
        for (const char *q = v; q < ve;) {
            if (ve - q >= 6 && !memcmp(q, "&quot;", 6)) {
                if (jbuf_add(out, "\"", 1))
                    return 0;
                q += 6;
            } else if (ve - q >= 5 && !memcmp(q, "&amp;", 5)) {
                if (jbuf_add(out, "&", 1))
                    return 0;
                q += 5;
            } else {
                if (jbuf_add(out, q, 1))
                    return 0;
                q++;
            }
        }
        return utf8_fix(out) == K3_OK;
    }
    return 0;
}

/* ---- tool calls ---- */

static k3_status add_args(k3_chat_parser *p, const char *s, size_t n) {
    if (!p->cur)
        return K3_OK;
    p->ev_call   = (int)(p->cur - p->calls);
    k3_status st = jbuf_add(&p->cur->args, s, n);
    return st ? st : jbuf_add(&p->args_out, s, n);
}

/* `{"K": ` or `, "K": ` before a member (json.dumps' separators). */
static k3_status add_key(k3_chat_parser *p, const char *k, size_t n) {
    jbuf      b = {0};
    k3_status st =
        jbuf_add(&b, p->brace ? (p->members ? ", " : "") : "{", p->brace ? (p->members ? 2 : 0) : 1);
    if (!st)
        st = jv_dump_str(k, n, &b);
    if (!st)
        st = jbuf_add(&b, ": ", 2);
    if (!st)
        st = add_args(p, b.p, b.n);
    free(b.p);
    p->brace = 1;
    p->members++;
    return st;
}

static k3_status add_escaped(k3_chat_parser *p, const char *s, size_t n) {
    if (!n || !p->cur)
        return K3_OK;
    jbuf      b  = {0};
    k3_status st = jv_escape(s, n, &b);
    if (!st)
        st = add_args(p, b.p ? b.p : "", b.n);
    free(b.p);
    return st;
}

static k3_status open_call(k3_chat_parser *p) {
    obuf name  = {0};
    p->in_call = 1;
    p->cur     = NULL;
    p->brace = p->members = 0;
    p->mode               = PM_CALL;
    if (!tag_attr(p, "tool", &name) || !name.n) { /* no tool name: the call is dropped (2.3) */
        free(name.p);
        return K3_OK;
    }
    if (memchr(name.p, 0, name.n)) { /* the name is a C string: a NUL is U+FFFD, as in text */
        obuf fixed = {0};
        for (size_t i = 0; i < name.n && !fixed.oom; i++)
            (void)jbuf_add(&fixed, name.p[i] ? name.p + i : "\xEF\xBF\xBD", name.p[i] ? 1 : 3);
        free(name.p);
        if (fixed.oom) {
            free(fixed.p);
            return k3_err(K3_ERR_NOMEM, "chat parser: out of memory");
        }
        name = fixed;
    }
    pcall *nc = k3_grow(p->calls, &p->cap_calls, (size_t)p->n_calls + 1, sizeof *nc, 4);
    if (!nc) {
        free(name.p);
        return k3_err(K3_ERR_NOMEM, "chat parser: out of memory");
    }
    p->calls = nc;
    pcall *c = &p->calls[p->n_calls++];
    memset(c, 0, sizeof *c);
    c->name    = name.p;
    p->cur     = c;
    p->ev_call = p->n_calls - 1;
    p->ev_name = c->name;
    return K3_OK;
}

static k3_status close_call(k3_chat_parser *p) {
    k3_status st = K3_OK;
    if (p->cur) {
        st           = add_args(p, p->brace ? "}" : "{}", p->brace ? 1 : 2);
        p->cur->done = 1;
        p->ev_call   = (int)(p->cur - p->calls);
        p->ev_done   = 1;
    }
    p->cur     = NULL;
    p->in_call = 0;
    p->mode    = PM_TOOLS;
    return st;
}

static k3_status open_value(k3_chat_parser *p, int json_block) {
    obuf type = {0};
    p->mode   = PM_VALUE;
    p->val.n  = 0;
    if (json_block) {
        p->vkind = V_JSON;
        return K3_OK;
    }
    if (!tag_attr(p, "key", &p->vkey))
        p->vkey.n = 0;
    int has_type = tag_attr(p, "type", &type);
    p->vkind     = !has_type || !strcmp(type.p, "string") ? V_STRING : V_TYPED;
    free(type.p);
    k3_status st = K3_OK;
    if (p->vkind == V_STRING && !(st = add_key(p, p->vkey.p ? p->vkey.p : "", p->vkey.n)))
        st = add_args(p, "\"", 1);
    return st;
}

static k3_status value_bytes(k3_chat_parser *p, const char *s, size_t n) {
    if (p->vkind != V_STRING)
        return jbuf_add(&p->val, s, n);
    const char *txt;
    size_t      len;
    k3_status   st = k3_detok_feed_bytes(p->dt[2], s, n, &txt, &len);
    return st ? st : add_escaped(p, txt, len);
}

static k3_status value_id(k3_chat_parser *p, int32_t id) {
    size_t      n;
    const char *s = k3_tok_piece(p->t, id, &n);
    return value_bytes(p, s, n);
}

static k3_status close_value(k3_chat_parser *p) {
    k3_status st = K3_OK;
    p->mode      = PM_CALL;
    if (p->vkind == V_STRING) {
        const char *txt;
        size_t      len;
        k3_detok_flush(p->dt[2], &txt, &len);
        if (!(st = add_escaped(p, txt, len)))
            st = add_args(p, "\"", 1);
        return st;
    }
    if ((st = utf8_fix(&p->val)))
        return st;
    jv  *v  = NULL;
    int  ok = jv_parse(p->val.p ? p->val.p : "", p->val.n, &v) == K3_OK;
    jbuf b  = {0};
    if (p->vkind == V_TYPED) { /* the decoded value, else the raw text as a string (2.3) */
        st = ok ? jv_dump(v, JV_PY_DEFAULT, &b) : jv_dump_str(p->val.p ? p->val.p : "", p->val.n, &b);
        if (!st)
            st = add_key(p, p->vkey.p ? p->vkey.p : "", p->vkey.n);
        if (!st)
            st = add_args(p, b.p, b.n);
    } else if (ok && v->kind == JV_OBJECT && !p->brace) { /* a json block: its members */
        st = jv_dump(v, JV_PY_DEFAULT, &b);
        if (!st && v->n) {
            st         = add_args(p, b.p, b.n - 1); /* without the closing brace */
            p->brace   = 1;
            p->members = (int)v->n;
        }
    }
    jv_free(v);
    free(b.p);
    return st;
}

/* <|sep|> ended a pending tag in a tool mode: act on it, else ignore it (value mode:
 * replay it as value text). */
static k3_status end_tag_tools(k3_chat_parser *p) {
    int       open = p->tag_kind == p->open;
    k3_status st   = K3_OK;
    p->in_tag      = 0;
    if (p->mode == PM_VALUE) {
        if (!open && (tag_is(p, "argument") || tag_is(p, "json")))
            return close_value(p);
        if (open || (!tag_is(p, "call") && !tag_is(p, "tools") && !tag_is(p, "message"))) {
            if (!(st = value_id(p, p->tag_kind)) && !(st = value_bytes(p, p->tag, (size_t)p->tag_n)))
                st = value_id(p, p->sep);
            return st;
        }
        if ((st = close_value(p)))
            return st; /* lenient: the argument was left open */
    }
    if (p->mode == PM_CALL) {
        if (open && tag_is(p, "argument"))
            return open_value(p, 0);
        if (open && tag_is(p, "json"))
            return open_value(p, 1);
        if (open && tag_is(p, "call")) { /* lenient: the open call had no <|close|>call */
            int old = p->cur ? (int)(p->cur - p->calls) : -1;
            if ((st = close_call(p)) || (st = open_call(p)))
                return st;
            if (old >= 0 && p->ev_name) { /* one call per feed: the new one opens in the next */
                p->pend_open = p->ev_call + 1;
                p->ev_call   = old;
                p->ev_name   = NULL;
            }
            return K3_OK;
        }
        if (!open && (tag_is(p, "call") || tag_is(p, "tools") || tag_is(p, "message")))
            st = close_call(p);
        if (st || tag_is(p, "call"))
            return st;
    }
    if (p->mode == PM_TOOLS && open && tag_is(p, "call"))
        return open_call(p);
    if (!open && (tag_is(p, "tools") || tag_is(p, "message")))
        p->mode = PM_TEXT;
    return K3_OK;
}

/* <|sep|> ended a pending tag: hide it when expected, else replay it. */
static k3_status end_tag(k3_chat_parser *p) {
    if (p->mode != PM_TEXT)
        return end_tag_tools(p);
    int open  = p->tag_kind == p->open;
    int think = p->chan == K3_CHAN_THINK;
    if (!open && tag_is(p, "think") && think) {
        p->think_closed = 1;
        goto hide;
    }
    if (open && tag_is(p, "response") && think) {
        k3_status st = flush_chan(p, K3_CHAN_THINK);
        p->chan      = K3_CHAN_RESPONSE;
        if (st)
            return st;
        goto hide;
    }
    if (!open && tag_is(p, "response") && !think)
        goto hide;
    if (!open && tag_is(p, "message"))
        goto hide;
    if (p->tools && open && tag_is(p, "tools") && (!think || p->think_closed)) {
        k3_status st = think ? flush_chan(p, K3_CHAN_THINK) : K3_OK;
        p->chan      = K3_CHAN_RESPONSE;
        p->mode      = PM_TOOLS;
        if (st)
            return st;
        goto hide;
    }
    k3_status st = replay_tag(p);
    return st ? st : emit_id(p, p->sep);
hide:
    p->in_tag = 0;
    return K3_OK;
}

static void out_reset(k3_chat_parser *p) {
    for (int c = 0; c < 2; c++) {
        p->out[c].n = 0;
        if (p->out[c].p)
            p->out[c].p[0] = 0;
    }
    p->args_out.n = 0;
    if (p->args_out.p)
        p->args_out.p[0] = 0;
    p->ev_call   = p->pend_open - 1;
    p->ev_done   = 0;
    p->ev_name   = p->pend_open ? p->calls[p->pend_open - 1].name : NULL;
    p->pend_open = 0;
}

static void out_fill(const k3_chat_parser *p, k3_chat_out *o) {
    o->think         = p->out[0].p ? p->out[0].p : "";
    o->think_len     = p->out[0].n;
    o->response      = p->out[1].p ? p->out[1].p : "";
    o->response_len  = p->out[1].n;
    o->end           = p->ended;
    o->call_index    = p->ev_call;
    o->call_name     = p->ev_name;
    o->call_args     = p->args_out.p ? p->args_out.p : "";
    o->call_args_len = p->args_out.n;
    o->call_done     = p->ev_done;
}

/* One id in a tool mode (tools, call, value). */
static k3_status feed_tools(k3_chat_parser *p, int32_t id, const char *piece, size_t pl) {
    if (p->in_tag && id != p->sep && id != p->open && id != p->close && !k3_tok_is_special(p->t, id)) {
        if ((size_t)p->tag_n + pl <= TAG_MAXT) {
            memcpy(p->tag + p->tag_n, piece, pl);
            p->tag_n += (int)pl;
            return K3_OK;
        }
        /* too long for a marker: in a value it was text; elsewhere it is dropped */
        p->in_tag = 0;
        if (p->mode != PM_VALUE)
            return K3_OK;
        k3_status st = value_id(p, p->tag_kind);
        if (!st)
            st = value_bytes(p, p->tag, (size_t)p->tag_n);
        return st ? st : value_bytes(p, piece, pl);
    }
    if (p->in_tag && id == p->sep)
        return end_tag_tools(p);
    if (p->in_tag) { /* another control id inside a marker: the marker was not one */
        p->in_tag = 0;
        if (p->mode == PM_VALUE) {
            k3_status st = value_id(p, p->tag_kind);
            if (!st)
                st = value_bytes(p, p->tag, (size_t)p->tag_n);
            if (st)
                return st;
        }
    }
    if (id == p->close || (id == p->open && p->mode != PM_VALUE)) {
        p->in_tag   = 1;
        p->tag_kind = id;
        p->tag_n    = 0;
        return K3_OK;
    }
    if (p->mode == PM_VALUE)
        return value_bytes(p, piece, pl); /* ordinary, <|open|>, <|sep|>: text */
    return K3_OK;                         /* between tool elements the format has no text: ignore it */
}

k3_status k3_chat_parser_feed(k3_chat_parser *p, int32_t id, k3_chat_out *o) {
    out_reset(p);
    size_t      pl;
    const char *piece = k3_tok_piece(p->t, id, &pl);
    if (!piece)
        return k3_err(K3_ERR_ARG, "chat parser: id %d is outside 0..%d", id, k3_tok_n_vocab(p->t) - 1);
    k3_status st = K3_OK;
    if (id == p->eom) {
        p->in_tag = p->mode == PM_TEXT && p->in_tag;
        if (!(st = replay_tag(p)) && !(st = flush_chan(p, K3_CHAN_THINK)))
            st = flush_chan(p, K3_CHAN_RESPONSE);
        p->ended = 1;
    } else if (p->mode != PM_TEXT) {
        st = feed_tools(p, id, piece, pl);
    } else if (id == p->open || id == p->close) {
        if (!(st = replay_tag(p))) {
            p->in_tag   = 1;
            p->tag_kind = id;
            p->tag_n    = 0;
        }
    } else if (id == p->sep) {
        st = p->in_tag ? end_tag(p) : emit_id(p, id);
    } else if (k3_tok_is_special(p->t, id)) {
        if (!(st = replay_tag(p)))
            st = emit_id(p, id);
    } else if (p->in_tag) {
        if ((size_t)p->tag_n + pl <= (size_t)(p->tools ? TAG_MAXT : TAG_MAX)) {
            memcpy(p->tag + p->tag_n, piece, pl);
            p->tag_n += (int)pl;
        } else if (!(st = replay_tag(p))) {
            st = emit(p, piece, pl);
        }
    } else {
        st = emit(p, piece, pl);
    }
    out_fill(p, o);
    return st;
}

/* The pending tag's bytes so far begin a marker that end_tag would hide in this state. */
static int tag_starts_hidden(const k3_chat_parser *p) {
    int         open = p->tag_kind == p->open, think = p->chan == K3_CHAN_THINK;
    const char *names[3];
    int         n = 0;
    if (open && think)
        names[n++] = "response";
    if (open && p->tools && (!think || p->think_closed))
        names[n++] = "tools";
    if (!open)
        names[n++] = think ? "think" : "response";
    if (!open)
        names[n++] = "message";
    for (int k = 0; k < n; k++)
        if ((size_t)p->tag_n <= strlen(names[k]) && !memcmp(p->tag, names[k], (size_t)p->tag_n))
            return 1;
    return 0;
}

void k3_chat_parser_finish(k3_chat_parser *p, k3_chat_out *o) {
    out_reset(p);
    /* a marker the limit cut (the answer's closing <|close|>r...) is structure, not text:
     * hidden like the whole one; anything else left open is shown */
    if (p->mode == PM_TEXT && !(p->in_tag && tag_starts_hidden(p)))
        (void)replay_tag(p);
    p->in_tag = 0;
    (void)flush_chan(p, K3_CHAN_THINK);
    (void)flush_chan(p, K3_CHAN_RESPONSE);
    out_fill(p, o);
}
