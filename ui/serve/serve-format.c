/* serve-format.c: response_format for `--serve` (design: serve-format.h).
 *
 *   {"type":"text"} or absent        nothing
 *   {"type":"json_object"}           the response-format message; the answer is one JSON object
 *   {"type":"json_schema","json_schema":{"name":..,"schema":{..},"strict":..}}
 *                                    the message with the schema; the answer validates against it
 *
 * The schema is json_schema.schema, else json_schema.json_schema, else the json_schema object
 * itself (k3-tools.md 1.7). It is compiled when the request is read, so an unsupported keyword
 * or an empty schema is a 400 before the request queues. strict false is enforced too (as vLLM
 * and SGLang do): a format the server was asked for is a format it keeps. The json_object
 * grammar is compiled once and shared (its mask cache is locked inside the engine).
 * sformat_tools: tool_choice required, a named function or parallel_tool_calls false compile
 * the tool-call grammar (k3-tools.md 1.3, 1.6): required and named allow no text before the
 * calls, parallel false at most one call (else up to STOOLS_MAX_CALLS).
 */
#include "serve-format.h"

#include <stdlib.h>
#define STOOLS_MAX_CALLS 8 /* calls in one answer when parallel calls are allowed */
#include <string.h>

static const k3_tok *tok;  /* the model's tokenizer (borrowed) */
static k3_gvocab    *voc;  /* its ids as bytes, mask width     */
static k3_grammar   *gobj; /* json_object, shared              */

k3_status sformat_init(const k3_model *m, const k3_model_info *info) {
    k3_status st = k3_model_tok(m, &tok);
    if (!st)
        st = k3_gvocab_new(tok, info->vocab, info->eos_id, &voc);
    if (!st)
        st = k3_grammar_json_object(voc, &gobj);
    return st;
}

void sformat_done(void) {
    k3_grammar_free(gobj);
    k3_gvocab_free(voc);
    gobj = NULL;
    voc  = NULL;
    tok  = NULL;
}

int sformat_parse(json_t *b, k3_gmeter *meter, sformat_req *r, stools_err *e) {
    json_t *v = json_object_get(b, "response_format"), *js, *sch;
    memset(r, 0, sizeof *r);
    if (!v || json_is_null(v))
        return 0;
    const char *t = json_string_value(json_object_get(v, "type"));
    if (!json_is_object(v) || !t)
        return serve_bad(e, "invalid_type", "response_format: expected an object with a string type");
    if (!strcmp(t, "text"))
        return 0;
    if (!strcmp(t, "json_object")) {
        snprintf(r->type, sizeof r->type, "json_object");
        r->g = gobj;
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return serve_bad(e, "invalid_value",
                         "response_format.type: '%.40s' is not text, json_object or json_schema", t);
    if (!json_is_object(js = json_object_get(v, "json_schema")))
        return serve_bad(e, "invalid_type", "response_format.json_schema: expected an object");
    json_t *st = json_object_get(js, "strict");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return serve_bad(e, "invalid_type", "response_format.json_schema.strict: expected true or false");
    r->strict       = st && json_is_true(st);
    const char *key = "schema";
    if (!(sch = json_object_get(js, "schema")) || json_is_null(sch))
        sch = json_object_get(js, key = "json_schema");
    if (!sch || json_is_null(sch))
        sch = js, key = NULL;
    if (!json_is_object(sch) && !json_is_boolean(sch))
        return serve_bad(e, "invalid_type", "response_format.json_schema%s%s: expected a JSON Schema object",
                         key ? "." : "", key ? key : "");
    if (!(r->schema = json_dumps(sch, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)))
        return serve_bad(e, "out_of_memory", "out of memory");
    snprintf(r->type, sizeof r->type, "json_schema");
    if (!voc) /* serve_check_body without a model: the shape only */
        return 0;
    k3_status cs = k3_grammar_json_schema(voc, r->schema, strlen(r->schema), meter, &r->g);
    if (cs) {
        int rc =
            serve_bad(e, cs == K3_ERR_UNSUPPORTED ? "unsupported_value" : "invalid_value",
                      "response_format.json_schema%s%s: %s", key ? "." : "", key ? key : "", k3_errmsg());
        sformat_free(r);
        return rc;
    }
    r->own = 1;
    return 0;
}

int sformat_tools(const stools_req *tl, k3_gmeter *meter, sformat_req *r, stools_err *e) {
    int required = !strcmp(tl->tool_choice, "required");
    if (!tl->tools || !strcmp(tl->tool_choice, "none") || !(required || tl->named || tl->single))
        return 0;
    if (r->g)
        return serve_bad(
            e, "unsupported_value",
            "response_format %s with tool_choice required or named, or parallel_tool_calls false, is not "
            "supported",
            r->type);
    if (!voc)
        return 0;
    k3_status st = k3_grammar_tool_calls(voc, tl->tools, tl->named, tl->single ? 1 : STOOLS_MAX_CALLS,
                                         !required && !tl->named, meter, &r->g);
    if (st)
        return serve_bad(e, st == K3_ERR_UNSUPPORTED ? "unsupported_value" : "invalid_value", "tools: %s",
                         k3_errmsg());
    r->own = 1;
    return 0;
}

void sformat_free(sformat_req *r) {
    if (r->own)
        k3_grammar_free(r->g);
    free(r->schema);
    memset(r, 0, sizeof *r);
}
