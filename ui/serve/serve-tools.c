/* serve-tools.c: OpenAI tool calling for `--serve` (doc/tool-calls.md).
 *
 * DESIGN
 * The request side checks what the chat format cannot take and answers a 400 naming the
 * field: tools must be {"type":"function","function":{"name", ...}} with a plain name
 * (letters, digits, _ - . : up to 128 bytes: no quotes or markers) and an object for
 * "parameters"; tool_choice is auto, required, none or a named function (required, named and
 * parallel_tool_calls=false are enforced by the tool-call grammar, serve-format.c); an assistant message's
 * calls carry an id, a name and string arguments (an object is accepted and written as JSON; JSON that is not
 * an object is refused, text that is not JSON becomes the format's raw json block); a tool result's
 * tool_call_id must name a call of the nearest assistant message before it.
 * The answer side (the final message's tool_calls, the stream's delta.tool_calls) is in
 * tool-json.c, which the remote backend shares.
 * K3_SERVE_SCRIPT (tests): each turn's ids come from a script instead of the sampler
 * (k3_conv_force_reply), so the real parser, conversation and prompt cache run end to end.
 */
#include "serve-tools.h"
#include "serve-http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STOOLS_MAX_NAME 128
#define bad serve_bad

int serve_bad(stools_err *e, const char *code, const char *fmt, ...) {
    char    raw[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* the text may echo the client's (cut inside a character, control characters) */
    http_clean(e->msg, sizeof e->msg, raw, n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1);
    snprintf(e->code, sizeof e->code, "%s", code);
    size_t p = strspn(e->msg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
    snprintf(e->param, sizeof e->param, "%.*s", p && e->msg[p] == ':' && p < sizeof e->param ? (int)p : 0,
             e->msg);
    return -1;
}

/* A function name the format can carry as written: [A-Za-z0-9_.:-]{1,128}. */
static int name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.' || c == ':'))
            return 0;
    }
    return n > 0 && n <= STOOLS_MAX_NAME;
}

/* A tools array (where: its field, "tools" or "messages[i].tools"): checked, then written
 * compactly into *out (NULL when empty). */
static int parse_tools(json_t *v, const char *where, char **out, stools_err *e) {
    if (!json_is_array(v))
        return bad(e, "invalid_type",
                   "%s: expected an array of {\"type\": \"function\", \"function\": {...}}", where);
    size_t  i;
    json_t *t;
    json_array_foreach(v, i, t) {
        json_t     *f = json_object_get(t, "function"), *p = json_object_get(f, "parameters");
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!json_is_object(t))
            return bad(e, "invalid_type", "%s[%zu]: expected an object", where, i);
        if (!type || strcmp(type, "function"))
            return bad(e, "invalid_value", "%s[%zu].type: expected \"function\"", where, i);
        if (!json_is_object(f))
            return bad(e, "invalid_type", "%s[%zu].function: expected an object", where, i);
        if (!name)
            return bad(e, "invalid_type", "%s[%zu].function.name: expected a string", where, i);
        if (!name_ok(name))
            return bad(
                e, "invalid_value",
                "%s[%zu].function.name: '%.60s' is not a plain name (letters, digits, _ - . :, 1..%d bytes)",
                where, i, name, STOOLS_MAX_NAME);
        if (p && !json_is_null(p) && !json_is_object(p))
            return bad(e, "invalid_type", "%s[%zu].function.parameters: expected a JSON Schema object", where,
                       i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, json_string_value(json_object_get(
                                  json_object_get(json_array_get(v, j), "function"), "name"))))
                return bad(e, "duplicate_tool_name",
                           "%s[%zu].function.name: '%.60s' is also the name of %s[%zu] (each tool needs its "
                           "own name)",
                           where, i, name, where, j);
    }
    if (json_array_size(v) && !(*out = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        return bad(e, "out_of_memory", "out of memory");
    return 0;
}

/* parallel_tool_calls: false limits the answer to one call (the tool-call grammar). */
static int parse_parallel(json_t *b, stools_req *r, stools_err *e) {
    json_t *v = json_object_get(b, "parallel_tool_calls");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return bad(e, "invalid_type", "parallel_tool_calls: expected true or false");
        r->single = json_is_false(v);
    }
    return 0;
}

int stools_parse_request(json_t *b, stools_req *r, stools_err *e) {
    snprintf(r->tool_choice, sizeof r->tool_choice, "auto");
    json_t *v = json_object_get(b, "tools");
    if (v && !json_is_null(v) && parse_tools(v, "tools", &r->tools, e))
        return -1;
    if ((v = json_object_get(b, "tool_choice")) && !json_is_null(v)) {
        const char *s = json_string_value(v);
        if (json_is_object(v)) { /* a named function: enforced by the tool-call grammar (serve-format.c) */
            const char *n = json_string_value(json_object_get(json_object_get(v, "function"), "name"));
            const char *t = json_string_value(json_object_get(v, "type"));
            if (!n || (t && strcmp(t, "function")))
                return bad(e, "invalid_type",
                           "tool_choice: expected {\"type\":\"function\",\"function\":{\"name\":..}}");
            json_t *tl    = json_object_get(b, "tools");
            int     found = 0;
            for (size_t i = 0; r->tools && i < json_array_size(tl); i++) {
                const char *tn = json_string_value(
                    json_object_get(json_object_get(json_array_get(tl, i), "function"), "name"));
                found |= tn && !strcmp(n, tn);
            }
            if (!found)
                return bad(e, "invalid_value", "tool_choice: function '%.60s' is not in tools", n);
            if (!(r->named = strdup(n)))
                return bad(e, "out_of_memory", "out of memory");
            return parse_parallel(b, r, e);
        }
        if (!s)
            return bad(e, "invalid_type", "tool_choice: expected \"auto\", \"required\" or \"none\"");
        if (strcmp(s, "auto") && strcmp(s, "required") && strcmp(s, "none"))
            return bad(e, "invalid_value", "tool_choice: '%.40s' is not auto, required or none", s);
        snprintf(r->tool_choice, sizeof r->tool_choice, "%s", s);
    }
    return parse_parallel(b, r, e);
}

void stools_req_free(stools_req *r) {
    free(r->tools);
    free(r->named);
    r->tools = NULL;
    r->named = NULL;
}

static char *dup_str(json_t *v) {
    return strndup(json_string_value(v), json_string_length(v));
}

/* A system, user or assistant message's "name" (the speaker's, rendered name="..." when
 * non-empty: k3-tools.md 1.4): any string, escaped by the chat format. */
static int speaker_name(json_t *m, size_t i, stools_msg *x, stools_err *e) {
    json_t *v = json_object_get(m, "name");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return bad(e, "invalid_type", "messages[%zu].name: expected a string", i);
    if (!json_string_length(v))
        return 0;
    return (x->name = dup_str(v)) ? 0 : bad(e, "out_of_memory", "out of memory");
}

int stools_parse_message(json_t *m, size_t i, k3_role role, stools_msg *x, stools_err *e) {
    json_t *v;
    if (role != K3_ROLE_TOOL && speaker_name(m, i, x, e))
        return -1;
    if (role == K3_ROLE_SYSTEM) { /* tools declared in place (k3-tools.md 1.2) */
        char where[48];
        snprintf(where, sizeof where, "messages[%zu].tools", i);
        v = json_object_get(m, "tools");
        return v && !json_is_null(v) ? parse_tools(v, where, &x->tools, e) : 0;
    }
    if (role == K3_ROLE_USER)
        return 0;
    if (role == K3_ROLE_TOOL) {
        v = json_object_get(m, "tool_call_id");
        if (!json_is_string(v))
            return bad(e, v ? "invalid_type" : "missing_field",
                       "messages[%zu].tool_call_id: expected a string", i);
        if (!(x->tool_call_id = dup_str(v)))
            return bad(e, "out_of_memory", "out of memory");
        v = json_object_get(m, "name");
        if (v && !json_is_null(v) && (!json_is_string(v) || !name_ok(json_string_value(v))))
            return bad(e, "invalid_value", "messages[%zu].name: expected a plain tool name", i);
        if (v && !json_is_null(v) && !(x->name = dup_str(v)))
            return bad(e, "out_of_memory", "out of memory");
        return 0;
    }
    v = json_object_get(m, "tool_calls");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return bad(e, "invalid_type", "messages[%zu].tool_calls: expected an array", i);
    size_t n = json_array_size(v);
    if (!n)
        return 0;
    if (!(x->calls = calloc(n, sizeof *x->calls)))
        return bad(e, "out_of_memory", "out of memory");
    for (size_t k = 0; k < n; k++) {
        json_t       *c = json_array_get(v, k), *f = json_object_get(c, "function");
        json_t       *id = json_object_get(c, "id"), *a = json_object_get(f, "arguments");
        const char   *name = json_string_value(json_object_get(f, "name"));
        k3_tool_call *d    = &x->calls[k];
        if (!json_is_object(c) || !json_is_object(f))
            return bad(e, "invalid_type",
                       "messages[%zu].tool_calls[%zu]: expected {\"id\", \"type\": \"function\", "
                       "\"function\": {\"name\", \"arguments\"}}",
                       i, k);
        if (!json_is_string(id))
            return bad(e, "invalid_type", "messages[%zu].tool_calls[%zu].id: expected a string", i, k);
        if (!name || !name_ok(name))
            return bad(e, "invalid_value",
                       "messages[%zu].tool_calls[%zu].function.name: expected a plain tool name", i, k);
        x->n_calls = (int)k + 1;
        d->id      = dup_str(id);
        d->name    = strdup(name);
        if (json_is_string(a)) {
            d->arguments   = dup_str(a);
            json_t *parsed = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL);
            int     not_object = parsed && !json_is_object(parsed);
            json_decref(parsed);
            if (not_object) /* valid JSON that is no object: the format cannot carry it */
                return bad(e, "invalid_value",
                           "messages[%zu].tool_calls[%zu].function.arguments: expected a JSON "
                           "object (as a string)",
                           i, k);
        } else if (json_is_object(a)) {
            d->arguments = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
        } else if (a && !json_is_null(a)) {
            return bad(e, "invalid_type",
                       "messages[%zu].tool_calls[%zu].function.arguments: expected a string", i, k);
        }
        if (!d->id || !d->name || (a && !json_is_null(a) && !d->arguments))
            return bad(e, "out_of_memory", "out of memory");
    }
    return 0;
}

/* The calls of assistant message a: ids unique, each answered exactly once by the tool results
 * after it (up to the next assistant message, at end). */
static int check_answers(const k3_role *roles, const stools_msg *x, size_t a, size_t end, stools_err *e) {
    const stools_msg *c  = &x[a];
    size_t           *by = calloc((size_t)c->n_calls, sizeof *by); /* the answering message + 1 */
    if (!by)
        return bad(e, "out_of_memory", "out of memory");
    int rc = 0;
    for (int k = 0; k < c->n_calls && !rc; k++)
        for (int j = 0; j < k && !rc; j++)
            if (!strcmp(c->calls[k].id, c->calls[j].id))
                rc = bad(
                    e, "duplicate_tool_call_id",
                    "messages[%zu].tool_calls[%d].id: '%.60s' is also the id of tool_calls[%d] (each call "
                    "needs its own id)",
                    a, k, c->calls[k].id, j);
    for (size_t i = a + 1; i < end && !rc; i++) {
        if (roles[i] != K3_ROLE_TOOL)
            continue;
        int k = 0;
        while (k < c->n_calls && strcmp(c->calls[k].id, x[i].tool_call_id))
            k++;
        if (k == c->n_calls)
            rc = bad(
                e, "invalid_value",
                "messages[%zu].tool_call_id: '%.60s' matches no tool call of the preceding assistant message",
                i, x[i].tool_call_id);
        else if (by[k])
            rc = bad(e, "duplicate_tool_result",
                     "messages[%zu].tool_call_id: '%.60s' was already answered by messages[%zu] (one result "
                     "per call)",
                     i, x[i].tool_call_id, by[k] - 1);
        else
            by[k] = i + 1;
    }
    char   missing[300] = "";
    size_t at = 0, n_missing = 0;
    for (int k = 0; k < c->n_calls && !rc; k++)
        if (!by[k] && ++n_missing && at < sizeof missing - 80)
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s'%.60s'", at ? ", " : "",
                                   c->calls[k].id);
    if (n_missing && !rc)
        rc =
            bad(e, "missing_tool_result",
                "messages[%zu].tool_calls: %zu call%s without a tool result: %s%s (an assistant message with "
                "tool_calls must be followed by a tool message for each tool_call_id)",
                a, n_missing, n_missing > 1 ? "s" : "", missing, at >= sizeof missing - 80 ? ", ..." : "");
    free(by);
    return rc;
}

int stools_check_results(const k3_role *roles, const stools_msg *x, size_t n, stools_err *e) {
    size_t a = n; /* the assistant message the results answer */
    for (size_t i = 0; i < n; i++) {
        if (roles[i] == K3_ROLE_TOOL && a == n)
            return bad(e, "invalid_value",
                       "messages[%zu].tool_call_id: '%.60s' matches no tool call of the preceding assistant "
                       "message",
                       i, x[i].tool_call_id);
        if (roles[i] != K3_ROLE_ASSISTANT)
            continue;
        a          = i;
        size_t end = i + 1;
        while (end < n && roles[end] != K3_ROLE_ASSISTANT)
            end++;
        if (check_answers(roles, x, a, end, e))
            return -1;
    }
    return 0;
}

/* Does the tools array text (compact JSON, NULL: none) declare name? */
static int declares(const char *tools, const char *name) {
    json_t *v   = tools ? json_loads(tools, 0, NULL) : NULL;
    int     hit = 0;
    size_t  i;
    json_t *t;
    json_array_foreach(v, i, t) {
        const char *nm = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        hit |= nm && !strcmp(nm, name);
    }
    json_decref(v);
    return hit;
}

int stools_check_calls(const stools_req *r, const stools_msg *x, size_t n, stools_err *e) {
    int any = r->tools != NULL;
    for (size_t i = 0; i < n; i++)
        any |= x[i].tools != NULL;
    if (!any && !strcmp(r->tool_choice, "required"))
        return bad(e, "invalid_value",
                   "tool_choice: \"required\" needs tools, and the request declares none");
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < x[i].n_calls; k++) {
            const char *name = x[i].calls[k].name;
            int         ok   = declares(r->tools, name);
            for (size_t j = 0; j < n && !ok; j++)
                ok = declares(x[j].tools, name);
            if (!ok)
                return bad(e, "undeclared_tool",
                           "messages[%zu].tool_calls[%d].function.name: '%.60s' is not a declared tool (%s)",
                           i, k, name, any ? "not in tools" : "the request declares no tools");
        }
    return 0;
}

void stools_msg_free(stools_msg *x) {
    for (int k = 0; k < x->n_calls; k++) {
        free((char *)(uintptr_t)x->calls[k].id);
        free((char *)(uintptr_t)x->calls[k].name);
        free((char *)(uintptr_t)x->calls[k].arguments);
    }
    free(x->calls);
    free(x->tool_call_id);
    free(x->name);
    free(x->tools);
    memset(x, 0, sizeof *x);
}

static int eq0(const char *a, const char *b) {
    return !strcmp(a ? a : "", b ? b : "");
}

int stools_msg_same(const k3_msg *m, const stools_msg *x) {
    if (m->n_tool_calls != x->n_calls || !eq0(m->tool_call_id, x->tool_call_id) ||
        !eq0(m->tool_name, x->name) || !eq0(m->tools, x->tools))
        return 0;
    for (int k = 0; k < x->n_calls; k++)
        if (!eq0(m->tool_calls[k].id, x->calls[k].id) || strcmp(m->tool_calls[k].name, x->calls[k].name) ||
            !eq0(m->tool_calls[k].arguments, x->calls[k].arguments))
            return 0;
    return 1;
}

/* ---- scripted output (K3_SERVE_SCRIPT) ------------------------------------------------- */

static struct {
    k3_ids *turns; /* (n) */
    int     n, cap, next;
} script;

int stools_script_load(const char *path, const k3_model *m, stools_err *e) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return bad(e, "script", "K3_SERVE_SCRIPT: %s: cannot open: %s", path, strerror(errno));
    const k3_tok *tok = NULL;
    if (k3_model_tok(m, &tok)) {
        fclose(f);
        return bad(e, "script", "K3_SERVE_SCRIPT: %s", k3_errmsg());
    }
    char  *line = NULL;
    k3_buf text = {0};
    size_t cap  = 0;
    int    rc = 0, more = 1;
    while (more) {
        ssize_t len = getline(&line, &cap, f);
        more        = len >= 0;
        if (!more && ferror(f)) { /* a directory (EISDIR) ends getline as the end of a file does */
            rc = bad(e, "script", "K3_SERVE_SCRIPT: %s: cannot read: %s", path, strerror(errno));
            break;
        }
        if (more && strcmp(line, "---\n") && strcmp(line, "---")) {
            if (k3_buf_add(&text, line, (size_t)len)) {
                rc = bad(e, "script", "out of memory");
                break;
            }
            continue;
        }
        if (text.n && text.p[text.n - 1] == '\n') /* the separator's line break is not output */
            text.n--;
        k3_ids *tt = k3_grow(script.turns, &script.cap, (size_t)script.n + 1, sizeof *tt, 4);
        if (!tt) {
            rc = bad(e, "script", "out of memory");
            break;
        }
        script.turns = tt;
        memset(&tt[script.n], 0, sizeof tt[0]);
        if (k3_tok_encode(tok, text.p ? text.p : "", text.n, 1, &tt[script.n++])) {
            rc = bad(e, "script", "K3_SERVE_SCRIPT: %s", k3_errmsg());
            break;
        }
        text.n = 0;
    }
    free(line);
    free(text.p);
    fclose(f);
    return rc;
}

int stools_script_next(k3_conv *c) {
    if (!script.n)
        return 0;
    const k3_ids *t = &script.turns[script.next < script.n ? script.next : script.n - 1];
    if (script.next < script.n)
        script.next++;
    return k3_conv_force_reply(c, t->v, (int)t->n) ? -1 : 1;
}
