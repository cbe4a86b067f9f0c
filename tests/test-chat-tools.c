/* test-chat-tools.c: tool calling in the chat format (doc/tool-calls.md).
 *
 * Rendering: the spec's worked examples and rules, byte for byte as text (control ids
 * shown as \x01O \x01C \x01S \x01E so a literal "<|close|>" in a value can be told from
 * the id), plus one id-for-id golden of a call and a result on a small vocabulary
 * (each attribute piece its own segment). Parsing: the S10 fixtures (canitoolcall
 * fixtures/kimi/k3-render.jsonl, rendered by the release encoder) fed id for id with the
 * real token ids, on a vocabulary that has those ids at their ranks (GPT-2 byte order for
 * the single bytes, the fixtures' tokens at their ids, unique filler elsewhere); then the
 * leniency and edge cases on the small vocabulary. Every parse also checks that the
 * streamed argument fragments concatenate to the final string.
 */
#include "json.h"
#include "test.h"
#include "tok.h"
#include "tok-vocab.h"

#include <stdlib.h>

/* ==== vocabularies =========================================================== */

/* Small vocabulary: 256 single bytes, the format's words, and traps that would only form
 * if two pieces were encoded as one segment. */
static const char *WORDS[] = {"message", " role",    "=\"",       "system", "user",   "assistant",
                              "tool",    "think",    "response",  " type",  "tools",  "call",
                              " tool",   " index",   "argument",  " key",   "string", "json",
                              "=\"1\"",  "\" index", "call tool", "Paris"};

static k3_tok *small_vocab(void) {
    t_vocab v = {0};
    size_t  n = sizeof WORDS / sizeof WORDS[0];
    t_vocab_bytes_words(&v, WORDS, n);
    return t_vocab_chat(&v, 256 + (int)n, "tools");
}

/* The real vocabulary's ranks for the ids the S10 fixtures use. */
typedef struct idtext {
    int         id;
    const char *text;
} idtext;
static const idtext REAL[] = {
    /* markup (spec 1.3) */
    {10257, "call"},
    {4453, " tool"},
    {878, "=\""},
    {4002, " index"},
    {25385, "tools"},
    {47185, "argument"},
    {2355, " key"},
    {1798, " type"},
    {2033, "string"},
    {10006, "number"},
    {16849, "boolean"},
    {6562, "null"},
    {3721, "object"},
    {4392, "array"},
    {12092, "response"},
    {39964, "think"},
    {2778, "message"},
    /* the fixtures' text */
    {17285, "Two"},
    {14509, " cities"},
    {2069, " two"},
    {138897, " lookups"},
    {618, "get"},
    {21055, "_we"},
    {2800, "ather"},
    {37666, "city"},
    {113476, "Paris"},
    {39818, "Tok"},
    {18009, "yo"},
    {51532, "Stand"},
    {771, "up"},
    {472, " with"},
    {1495, " no"},
    {35114, " reminder"},
    {7788, "create"},
    {12411, "_event"},
    {6621, "title"},
    {35548, "duration"},
    {13030, "_min"},
    {4840, "utes"},
    {1308, "15"},
    {639, "all"},
    {43167, "_day"},
    {8092, "false"},
    {2636, "rem"},
    {8195, "inder"},
    {14752, "Just"},
    {922, " get"},
    {276, " the"},
    {1169, " time"},
    {6618, "_time"},
    {13744, "Save"},
    {7234, " note"},
    {157023, " verbatim"},
    {8124, "write"},
    {6101, "_file"},
    {4953, "path"},
    {10001, ":\\"},
    {12984, "Users"},
    {5060, "ana"},
    {2423, "\\n"},
    {9817, "otes"},
    {8842, ".txt"},
    {4204, "content"},
    {1611, "line"},
    {37179, "\tline"},
    {414, " \""},
    {79530, "quoted"},
    {1272, " \\"},
    {1565, " end"},
    {9570, "Write"},
    {34459, " literal"},
    {115921, " XT"},
    {4920, "ML"},
    {24894, " marker"},
    {2913, " text"},
    {10794, "close"},
    {40433, "sep"},
    {387, " is"},
    {1632, " how"},
    {5924, " args"},
    {13115, "Keys"},
    {1362, " need"},
    {89625, " escaping"},
    {15450, "save"},
    {91494, "_answer"},
    {42055, "&amp"},
    {77360, ";a"},
    {25048, "fish"},
    {841, " &"},
    {28510, " chips"},
    {69586, "say"},
    {13847, "quot"},
    {9663, "hi"},
    {39877, "&quot"},
    {47941, "she"},
    {2531, " said"},
    {873, "ome"},
    {12708, "adr"},
    {338, "id"},
    {8175, "unit"},
    {78841, "cel"},
    {14211, "sius"},
    {6431, "Create"},
    {2940, " event"},
    {261, " a"},
    {36068, " structured"},
    {5802, " location"},
    {5329, "Off"},
    {19535, "site"},
    {2534, "att"},
    {105194, "endees"},
    {3530, "[\""},
    {17480, "example"},
    {1304, ".com"},
    {665, "\","},
    {6917, "bo"},
    {3956, "\"]"},
    {5791, "location"},
    {8264, "{\""},
    {1152, "name"},
    {1289, "\":"},
    {73028, "HQ"},
    {43957, "geo"},
    {9392, " {\""},
    {18293, "lat"},
    {4934, "47"},
    {40278, "376"},
    {29087, "lon"},
    {43150, "541"},
    {3589, "},"},
    {147411, "flo"},
    {1118, "ors"},
    {793, " ["},
    {24216, "]}"},
    {10048, "Now"},
    {9101, " convert"},
    {483, " it"},
    {22573, "convert"},
    {51629, "_units"},
    {2035, "value"},
    {2714, "21"},
    {3701, "from"},
    {26505, "_unit"},
    {1753, "to"},
    {101942, "ahrenheit"},
};
#define REAL_N_BASE 163584

static k3_tok *real_ids_vocab(void) {
    /* single bytes in GPT-2 order: '!'..'~', 0xA1..0xAC, 0xAE..0xFF, then the rest */
    int order[256], k = 0, used[256] = {0};
    for (int b = 33; b < 127; b++)
        order[k++] = b, used[b] = 1;
    for (int b = 161; b < 256; b++)
        if (b != 173)
            order[k++] = b, used[b] = 1;
    for (int b = 0; b < 256; b++)
        if (!used[b])
            order[k++] = b;
    const char **text = calloc(REAL_N_BASE, sizeof *text);
    for (size_t i = 0; i < sizeof REAL / sizeof REAL[0]; i++)
        text[REAL[i].id] = REAL[i].text;
    t_vocab v = {0};
    for (long r = 0; r < REAL_N_BASE; r++) {
        char    fill[24];
        uint8_t b;
        if (r < 256) {
            b = (uint8_t)order[r];
            t_vocab_line(&v, &b, 1, r);
        } else if (text[r]) {
            t_vocab_line(&v, text[r], strlen(text[r]), r);
        } else {
            int n = snprintf(fill, sizeof fill, "\x7f\x7f%ld", r);
            t_vocab_line(&v, fill, (size_t)n, r);
        }
    }
    free(text);
    return t_vocab_chat(&v, REAL_N_BASE, "tools");
}

/* ==== helpers ================================================================= */

/* Ids as text, control ids as \x01O \x01C \x01S \x01E, other ids as their bytes. */
static char *show(const k3_tok *t, const k3_ids *ids) {
    size_t  cap = 64 + 16 * ids->n, n = 0;
    char   *s = malloc(cap);
    int32_t O = k3_tok_special(t, "<|open|>"), C = k3_tok_special(t, "<|close|>"),
            S = k3_tok_special(t, "<|sep|>"), E = k3_tok_special(t, "<|end_of_msg|>");
    for (size_t i = 0; i < ids->n; i++) {
        int32_t     id = ids->v[i];
        size_t      pl;
        const char *p = id == O ? "\1O" : id == C ? "\1C" : id == S ? "\1S" : id == E ? "\1E" : NULL;
        if (p)
            pl = 2;
        else
            p = k3_tok_piece(t, id, &pl);
        if (n + pl + 1 > cap)
            s = realloc(s, cap = 2 * (n + pl + 1));
        memcpy(s + n, p, pl);
        n += pl;
    }
    s[n] = 0;
    return s;
}

/* Spec notation -> show() notation; "«" and "»" stand for literal "<|" and "|>" text. */
static char *ctl(const char *spec) {
    static const char *const mk[][2] = {{"<|open|>", "\1O"},       {"<|close|>", "\1C"}, {"<|sep|>", "\1S"},
                                        {"<|end_of_msg|>", "\1E"}, {"\xc2\xab", "<|"},   {"\xc2\xbb", "|>"}};
    char                    *o = malloc(strlen(spec) + 1), *w = o;
    for (const char *p = spec; *p;) {
        size_t k;
        for (k = 0; k < 6; k++)
            if (!strncmp(p, mk[k][0], strlen(mk[k][0])))
                break;
        if (k < 6) {
            memcpy(w, mk[k][1], strlen(mk[k][1]));
            w += strlen(mk[k][1]);
            p += strlen(mk[k][0]);
        } else {
            *w++ = *p++;
        }
    }
    *w = 0;
    return o;
}

static int render_is(const k3_tok *t, const k3_chat_msg *m, size_t n, const k3_chat_opts *o,
                     const char *want_spec) {
    k3_ids    ids = {0};
    k3_status st  = k3_chat_encode(t, m, n, o, &ids);
    char     *got = show(t, &ids), *want = ctl(want_spec);
    int       ok = !st && !strcmp(got, want);
    if (!ok) {
        printf("  status %d (%s)\n  got:  ", st, k3_errmsg());
        for (char *p = got; *p; p++)
            printf(*p == 1 ? "^" : "%c", *p);
        printf("\n  want: ");
        for (char *p = want; *p; p++)
            printf(*p == 1 ? "^" : "%c", *p);
        printf("\n");
    }
    free(got);
    free(want);
    k3_ids_free(&ids);
    return ok;
}

/* Spec notation -> ids on t: control markers become their ids, the text between them is
 * encoded as ordinary text (so "«close»" style literal text stays ordinary). */
static void ids_of(const k3_tok *t, const char *spec, k3_ids *out) {
    static const char *const mk[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    const char              *p    = spec;
    while (*p) {
        const char *best = NULL;
        int         bk   = -1;
        for (int k = 0; k < 4; k++) {
            const char *q = strstr(p, mk[k]);
            if (q && (!best || q < best))
                best = q, bk = k;
        }
        const char *end = best ? best : p + strlen(p);
        if (end > p) {
            char *lit = ctl(""); /* "«»" -> "<|" "|>" in ordinary text */
            free(lit);
            size_t n   = (size_t)(end - p);
            char  *seg = malloc(n + 1), *w = seg;
            for (size_t i = 0; i < n;) {
                if (!strncmp(p + i, "\xc2\xab", 2)) {
                    memcpy(w, "<|", 2);
                    w += 2;
                    i += 2;
                } else if (!strncmp(p + i, "\xc2\xbb", 2)) {
                    memcpy(w, "|>", 2);
                    w += 2;
                    i += 2;
                } else
                    *w++ = p[i++];
            }
            k3_tok_encode(t, seg, (size_t)(w - seg), 0, out);
            free(seg);
        }
        if (!best)
            break;
        k3_ids_push(out, k3_tok_special(t, mk[bk]));
        p = best + strlen(mk[bk]);
    }
}

typedef struct parsed {
    char think[4096], resp[4096];
    char names[8][64];
    char args[8][8192];     /* final strings */
    char streamed[8][8192]; /* concatenated deltas */
    int  complete[8], opened[8];
    int  n_calls, end, bad_event;
} parsed;

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    size_t l = strlen(dst);
    if (l + n < cap) {
        memcpy(dst + l, s, n);
        dst[l + n] = 0;
    }
}

static void parse_ids(const k3_tok *t, int think, const int32_t *ids, size_t n, int finish, parsed *r) {
    memset(r, 0, sizeof *r);
    k3_chat_parser *p;
    if (k3_chat_parser_new(t, think, &p))
        return;
    k3_chat_parser_set_tools(p, 1);
    k3_chat_out o;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            k3_chat_parser_feed(p, ids[i], &o);
        } else if (finish && !r->end) {
            k3_chat_parser_finish(p, &o);
        } else {
            break;
        }
        cat(r->think, sizeof r->think, o.think, o.think_len);
        cat(r->resp, sizeof r->resp, o.response, o.response_len);
        if (o.call_name || o.call_args_len || o.call_done) {
            if (o.call_index < 0 || o.call_index >= 8) {
                r->bad_event = 1;
                continue;
            }
            if (o.call_name) {
                r->bad_event |= r->opened[o.call_index]++;
                snprintf(r->names[o.call_index], sizeof r->names[0], "%s", o.call_name);
            }
            r->bad_event |= !r->opened[o.call_index]; /* arguments before the name */
            cat(r->streamed[o.call_index], sizeof r->streamed[0], o.call_args, o.call_args_len);
        }
        if (o.end)
            r->end = 1;
    }
    r->n_calls = k3_chat_parser_n_calls(p);
    for (int k = 0; k < r->n_calls && k < 8; k++) {
        const char *nm, *a;
        r->complete[k] = k3_chat_parser_call(p, k, &nm, &a);
        r->bad_event |= strcmp(nm, r->names[k]) != 0;
        snprintf(r->args[k], sizeof r->args[0], "%s", a);
    }
    k3_chat_parser_free(p);
}

/* Checks one parse: calls (name, args) given as NULL-terminated pairs. */
static int parsed_is(const parsed *r, const char *think, const char *resp, const char *const *calls) {
    int ok = !r->bad_event && !strcmp(r->think, think) && !strcmp(r->resp, resp);
    int n  = 0;
    for (; calls && calls[2 * n]; n++)
        ok = ok && n < r->n_calls && !strcmp(r->names[n], calls[2 * n]) &&
             !strcmp(r->args[n], calls[2 * n + 1]) && !strcmp(r->streamed[n], r->args[n]);
    ok = ok && n == r->n_calls;
    if (!ok) {
        printf("  think [%s] resp [%s] calls %d bad_event %d\n", r->think, r->resp, r->n_calls, r->bad_event);
        for (int k = 0; k < r->n_calls && k < 8; k++)
            printf("  call %d %s(%s) streamed (%s) complete %d\n", k, r->names[k], r->args[k], r->streamed[k],
                   r->complete[k]);
    }
    return ok;
}

/* ==== rendering ================================================================= */

#define EFFORT_MAX                                                                                           \
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>`thinking_effort` guides on how much "   \
    "to "                                                                                                    \
    "think in your thinking channel (not including the response channel), supported values include `low`, "  \
    "`medium`, `high`, and `max`.\nNow the system is invoked with "                                          \
    "`thinking_effort=max`.<|close|>message<|sep|>"                                                          \
    "<|end_of_msg|>"

static const char WEATHER_TOOLS[] = /* keys out of order on purpose: the render sorts them */
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the "
    "weather.\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
    "\"required\": "
    "[\"city\"]}}}]";
#define WEATHER_DECLARE                                                                                      \
    "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the available tools, "    \
    "described in JSONSchema.\n\n```json\n[{\"function\":{\"description\":\"Get the weather.\",\"name\":"    \
    "\"get_weather\",\"parameters\":{\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":["         \
    "\"city\"],"                                                                                             \
    "\"type\":\"object\"}},\"type\":\"function\"}]\n```<|close|>message<|sep|><|end_of_msg|>"

static void test_examples(const k3_tok *t) {
    /* Ex. 1: one tool, thinking on, effort max: the prompt up to the final answer */
    k3_tool_call c1[] = {{.id = "call_1", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"}};
    k3_chat_msg  m1[] = {{.role = "user", .content = "Weather in Paris?"},
                         {.role         = "assistant",
                          .content      = "",
                          .reasoning    = "Need live data.",
                          .tool_calls   = c1,
                          .n_tool_calls = 1},
                         {.role = "tool", .content = "18 C, clear", .tool_call_id = "call_1"}};
    k3_chat_opts o    = {.think = 1, .gen_prompt = 1, .tools = WEATHER_TOOLS};
    T_CHECK(
        render_is(
            t, m1, 3, &o,
            WEATHER_DECLARE EFFORT_MAX
            "<|open|>message role=\"user\"<|sep|>Weather in Paris?<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>Need live "
            "data.<|close|>think<|sep|>"
            "<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
            "tool=\"get_weather\" "
            "index=\"1\"<|sep|><|open|>argument key=\"city\" "
            "type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
            "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C, clear<|close|>message"
            "<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"),
        "Ex. 1: tool-declare (keys sorted, compact), effort, call, result, prompt: byte for byte");
    /* Ex. 1 with thinking off: no effort message, no think blocks, prompt opens the response */
    o.think = 0;
    T_CHECK(
        render_is(
            t, m1, 3, &o,
            WEATHER_DECLARE
            "<|open|>message role=\"user\"<|sep|>Weather in Paris?<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
            "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument "
            "key=\"city\" "
            "type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools"
            "<|sep|><|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C, clear<|close|>message"
            "<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"),
        "Ex. 1, thinking off: tool-declare stays, think blocks and effort go");

    /* Ex. 2 results (derived): two calls, results given in reverse order, re-sorted by id */
    k3_tool_call c2[] = {{.id = "a", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"},
                         {.id = "b", .name = "get_weather", .arguments = "{\"city\": \"Tokyo\"}"}};
    k3_chat_msg  m2[] = {{.role = "assistant", .content = NULL, .tool_calls = c2, .n_tool_calls = 2},
                         {.role = "tool", .content = "25 C", .tool_call_id = "b"},
                         {.role = "tool", .content = "18 C", .tool_call_id = "a"}};
    k3_chat_opts off  = {.think = 0};
    T_CHECK(
        render_is(
            t, m2, 3, &off,
            "<|open|>message "
            "role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools"
            "<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
            "type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|open|>call "
            "tool=\"get_weather\" index=\"2\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Tokyo"
            "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_"
            "of_msg|>"
            "<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C<|close|>message<|sep|>"
            "<|end_of_msg|><|open|>message role=\"tool\" tool=\"get_weather\" index=\"2\"<|sep|>25 C<|close|>"
            "message<|sep|><|end_of_msg|>"),
        "Ex. 2: parallel calls index 1..n; results re-sorted by call id (given b, a)");

    /* Ex. 3 and k3-nested-json: typed arguments in the object's own order, spaced JSON */
    k3_tool_call c3[] = {
        {.id        = "x",
         .name      = "create_event",
         .arguments = "{\"title\":\"Standup\",\"duration_minutes\":15,\"all_day\":false,"
                      "\"reminder_minutes\":null,\"attendees\":[\"ana@example.com\",\"bo@example.com\"],"
                      "\"location\":{\"name\":\"HQ\",\"geo\":{\"lat\":47.3769,\"lon\":8.5417},"
                      "\"floors\":[1,2]},\"v\":21.5,\"w\":1e2,\"big\":12345678901234567890,"
                      "\"e\":\"\"}"}};
    k3_chat_msg m3[] = {{.role = "assistant", .content = "", .tool_calls = c3, .n_tool_calls = 1}};
    T_CHECK(
        render_is(
            t, m3, 1, &off,
            "<|open|>message "
            "role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools"
            "<|sep|><|open|>call tool=\"create_event\" index=\"1\"<|sep|>"
            "<|open|>argument key=\"title\" type=\"string\"<|sep|>Standup<|close|>argument<|sep|>"
            "<|open|>argument key=\"duration_minutes\" type=\"number\"<|sep|>15<|close|>argument<|sep|>"
            "<|open|>argument key=\"all_day\" type=\"boolean\"<|sep|>false<|close|>argument<|sep|>"
            "<|open|>argument key=\"reminder_minutes\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
            "<|open|>argument key=\"attendees\" type=\"array\"<|sep|>[\"ana@example.com\", "
            "\"bo@example.com\"]"
            "<|close|>argument<|sep|><|open|>argument key=\"location\" type=\"object\"<|sep|>{\"name\": "
            "\"HQ\", "
            "\"geo\": {\"lat\": 47.3769, \"lon\": 8.5417}, \"floors\": [1, 2]}<|close|>argument<|sep|>"
            "<|open|>argument key=\"v\" type=\"number\"<|sep|>21.5<|close|>argument<|sep|>"
            "<|open|>argument key=\"w\" type=\"number\"<|sep|>100.0<|close|>argument<|sep|>"
            "<|open|>argument key=\"big\" type=\"number\"<|sep|>12345678901234567890<|close|>argument<|sep|>"
            "<|open|>argument key=\"e\" type=\"string\"<|sep|><|close|>argument<|sep|>"
            "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
        "Ex. 3 + k3-nested-json: string/number/boolean/null/array/object, 1e2 -> 100.0, big int, empty "
        "string");

    /* k3-xtml-attr-escaping, k3-string-escapes, k3-control-marker-text-in-value */
    k3_tool_call c4[] = {
        {.id        = "1",
         .name      = "save_answer",
         .arguments = "{\"q&a\": \"fish & chips\", \"say \\\"hi\\\"\": \"she said \\\"hi\\\"\"}"},
        {.id        = "2",
         .name      = "write_file",
         .arguments = "{\"path\": \"C:\\\\Users\\\\ana\\\\notes.txt\", \"content\": \"line 1\\n\\tline 2 "
                      "\\\"quoted\\\" \\\\ end\"}"},
        {.id        = "3",
         .name      = "write_file",
         .arguments = "{\"content\": \"<|close|>argument<|sep|> is how args end\"}"}};
    k3_chat_msg m4[] = {{.role = "assistant", .content = "", .tool_calls = c4, .n_tool_calls = 3}};
    T_CHECK(
        render_is(
            t, m4, 1, &off,
            "<|open|>message "
            "role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools"
            "<|sep|><|open|>call tool=\"save_answer\" index=\"1\"<|sep|><|open|>argument key=\"q&amp;a\" "
            "type=\"string\"<|sep|>fish & chips<|close|>argument<|sep|><|open|>argument key=\"say "
            "&quot;hi&quot;\" "
            "type=\"string\"<|sep|>she said \"hi\"<|close|>argument<|sep|><|close|>call<|sep|>"
            "<|open|>call tool=\"write_file\" index=\"2\"<|sep|><|open|>argument key=\"path\" "
            "type=\"string\"<|sep|>"
            "C:\\Users\\ana\\notes.txt<|close|>argument<|sep|><|open|>argument key=\"content\" "
            "type=\"string\"<|sep|>"
            "line 1\n\tline 2 \"quoted\" \\ end<|close|>argument<|sep|><|close|>call<|sep|>"
            "<|open|>call tool=\"write_file\" index=\"3\"<|sep|><|open|>argument key=\"content\" "
            "type=\"string\""
            "<|sep|>\xc2\xab"
            "close\xc2\xbb"
            "argument\xc2\xab"
            "sep\xc2\xbb is how args end<|close|>argument<|sep|>"
            "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
        "attribute escaping (&amp; &quot;), raw string values, marker text in a value stays ordinary tokens");

    /* k3-empty-arguments and the json fallback: None, {}, blank -> no ARGS; invalid JSON -> raw block */
    k3_tool_call c5[] = {{.id = "1", .name = "get_time", .arguments = NULL},
                         {.id = "2", .name = "get_time", .arguments = "{}"},
                         {.id = "3", .name = "get_time", .arguments = "  "},
                         {.id = "4", .name = "f", .arguments = "{\"a\": 1"}};
    k3_chat_msg  m5[] = {{.role = "assistant", .content = "Checking.", .tool_calls = c5, .n_tool_calls = 4}};
    T_CHECK(
        render_is(t, m5, 1, &off,
                  "<|open|>message "
                  "role=\"assistant\"<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
                  "<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|close|>call<|sep|>"
                  "<|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>"
                  "<|open|>call tool=\"get_time\" index=\"3\"<|sep|><|close|>call<|sep|>"
                  "<|open|>call tool=\"f\" index=\"4\"<|sep|><|open|>json type=\"object\"<|sep|>{\"a\": 1"
                  "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_"
                  "of_msg|>"),
        "empty arguments (NULL, {}, blank) write nothing; invalid JSON becomes the raw json block; content "
        "kept");

    /* k3-empty-think: thinking on, no reasoning: the think block is empty */
    k3_tool_call c6[] = {{.id = "1", .name = "get_weather", .arguments = "{\"city\": \"Rome\"}"}};
    k3_chat_msg  m6[] = {
         {.role = "assistant", .content = "", .reasoning = NULL, .tool_calls = c6, .n_tool_calls = 1}};
    k3_chat_opts on0 = {.think = 1};
    T_CHECK(render_is(t, m6, 1, &on0,
                      EFFORT_MAX
                      "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
                      "<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                      "tool=\"get_weather\" "
                      "index=\"1\"<|sep|><|open|>argument key=\"city\" "
                      "type=\"string\"<|sep|>Rome<|close|>argument<|sep|>"
                      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
            "k3-empty-think: empty think block before the calls");
}

static void test_rules(const k3_tok *t) {
    k3_chat_opts off = {.think = 0};
    /* 1.4: results for calls 1 and 3 only: the second renders index 2 with call 3's name */
    k3_tool_call c[] = {{.id = "1", .name = "a"}, {.id = "2", .name = "b"}, {.id = "3", .name = "c"}};
    k3_chat_msg  m[] = {{.role = "assistant", .content = "", .tool_calls = c, .n_tool_calls = 3},
                        {.role = "tool", .content = "R3", .tool_call_id = "3"},
                        {.role = "tool", .content = "R1", .tool_call_id = "1"},
                        {.role = "user", .content = "u"}};
    T_CHECK(
        render_is(
            t, m, 4, &off,
            "<|open|>message "
            "role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools"
            "<|sep|><|open|>call tool=\"a\" index=\"1\"<|sep|><|close|>call<|sep|><|open|>call tool=\"b\" "
            "index=\"2\"<|sep|><|close|>call<|sep|><|open|>call tool=\"c\" "
            "index=\"3\"<|sep|><|close|>call<|sep|>"
            "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"a\" "
            "index=\"1\"<|sep|>R1<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"c\" "
            "index=\"2\"<|sep|>R3<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|><|end_of_msg|>"),
        "results for calls 3 and 1: sorted, index is the position (1, 2), name from the call");
    /* a run that does not all match stays as given; names from `name`, else call I */
    k3_chat_msg m2[] = {{.role = "assistant", .content = "", .tool_calls = c, .n_tool_calls = 3},
                        {.role = "tool", .content = "R3", .tool_call_id = "3"},
                        {.role = "tool", .content = "Rx", .tool_call_id = "nope", .name = "given"},
                        {.role = "tool", .content = "Ry"}};
    T_CHECK(render_is(t, m2 + 1, 3, &off, "") == 0,
            "a tool result before any assistant call and with no name is an error");
    T_CHECK(
        render_is(
            t, m2, 4, &off,
            "<|open|>message "
            "role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools"
            "<|sep|><|open|>call tool=\"a\" index=\"1\"<|sep|><|close|>call<|sep|><|open|>call tool=\"b\" "
            "index=\"2\"<|sep|><|close|>call<|sep|><|open|>call tool=\"c\" "
            "index=\"3\"<|sep|><|close|>call<|sep|>"
            "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"a\" "
            "index=\"1\"<|sep|>R3<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"given\" "
            "index=\"2\"<|sep|>Rx<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"tool\" tool=\"c\" "
            "index=\"3\"<|sep|>Ry<|close|>message<|sep|><|end_of_msg|>"),
        "an unmatched id leaves the run in order: names from name, else call I of the last assistant");

    /* 1.4's note, the release's encoder: system, user and assistant messages carry
     * name="..." (escaped as every attribute) when name is non-empty; tool results do not */
    k3_tool_call c1[] = {{.id = "k", .name = "a"}};
    k3_chat_msg  nm[] = {
         {.role = "system", .content = "s", .name = "Bo & \"Al\""},
         {.role = "developer", .content = "d", .name = "dev"},
         {.role = "user", .content = "u", .name = ""},
         {.role = "assistant", .content = "", .name = "x<|sep|>", .tool_calls = c1, .n_tool_calls = 1},
         {.role = "tool", .content = "r", .tool_call_id = "k", .name = "a"}};
    T_CHECK(
        render_is(t, nm, 5, &off,
                  "<|open|>message role=\"system\" name=\"Bo &amp; &quot;Al&quot;\"<|sep|>s<|close|>message"
                  "<|sep|><|end_of_msg|><|open|>message role=\"system\" name=\"dev\"<|sep|>d<|close|>message"
                  "<|sep|><|end_of_msg|><|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|>"
                  "<|end_of_msg|><|open|>message role=\"assistant\" name=\"x\xc2\xabsep\xc2\xbb\"<|sep|>"
                  "<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                  "tool=\"a\" index=\"1\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message"
                  "<|sep|><|end_of_msg|><|open|>message role=\"tool\" tool=\"a\" index=\"1\"<|sep|>r"
                  "<|close|>message<|sep|><|end_of_msg|>"),
        "name=\"...\" on system, developer and assistant messages (escaped; marker text stays text), "
        "none when empty or on a tool result");

    /* 1.6 tool_choice: after the last message, before the prompt; independent of tools */
    k3_chat_msg  u[] = {{.role = "user", .content = "u"}};
    k3_chat_opts req = {.think = 0, .gen_prompt = 1, .tool_choice = "required"};
    T_CHECK(render_is(t, u, 1, &req,
                      "<|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|><|end_of_msg|>"
                      "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with "
                      "`tool_choice=required`.\nYou MUST call tools in the next "
                      "message.<|close|>message<|sep|><|end_of_msg|>"
                      "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"),
            "tool_choice required: the tool-choice message before the generation prompt");
    req.tool_choice = "none";
    T_CHECK(render_is(
                t, u, 1, &req,
                "<|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|><|end_of_msg|>"
                "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with "
                "`tool_choice=none`.\nYou MUST NOT call any tools in the next message.<|close|>message<|sep|>"
                "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"),
            "tool_choice none: its own body");
    req.tool_choice = "auto";
    req.tools       = "[]";
    T_CHECK(render_is(t, u, 1, &req,
                      "<|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|><|end_of_msg|>"
                      "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"),
            "tool_choice auto and an empty tools list add nothing");
    k3_ids ids      = {0};
    req.tool_choice = "any";
    k3_status st    = k3_chat_encode(t, u, 1, &req, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "tool_choice") && ids.n == 0,
            "unknown tool_choice: error (%s)", k3_errmsg());

    /* dynamic variant: a system message with tools, in place; keys sorted by code point */
    k3_chat_msg d[] = {{.role = "user", .content = "u"},
                       {.role    = "system",
                        .content = "dropped",
                        .tools   = "[{\"alpha\":1,\"_x\":2,\"Zeta\":3,\"$ref\":4,"
                                   "\"s\":\"\xc3\xa9\\u0001\\n\"}]"}};
    T_CHECK(
        render_is(
            t, d, 2, &off,
            "<|open|>message role=\"user\"<|sep|>u<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|>## New Tools Available\nThe system "
            "dynamically extends the toolset via lazy-loading.\nYou have access to all existing and extended "
            "tools.\nHere are the specs for the extended tools.\n\n```json\n[{\"$ref\":4,\"Zeta\":3,\"_x\":2,"
            "\"alpha\":1,\"s\":\"\xc3\xa9\\u0001\\n\"}]\n```<|close|>message<|sep|><|end_of_msg|>"),
        "dynamic tool-declare in place (content dropped); $ref < Zeta < _x < alpha; non-ASCII raw, \\u0001");

    /* bad input: arguments that are JSON but not an object; a tool that is not an object; bad JSON */
    k3_tool_call bad[] = {{.id = "1", .name = "f", .arguments = "[1, 2]"}};
    k3_chat_msg  mb[]  = {{.role = "assistant", .content = "", .tool_calls = bad, .n_tool_calls = 1}};
    st                 = k3_chat_encode(t, mb, 1, &off, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "message 0: tool_calls[0].arguments") && ids.n == 0,
            "arguments that parse to an array: error naming the call (%s)", k3_errmsg());
    k3_chat_opts bt = {.think = 0, .tools = "[{\"type\":\"function\"}, 5]"};
    st              = k3_chat_encode(t, u, 1, &bt, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "tools[1]: expected an object"),
            "a tool that is not an object: %s", k3_errmsg());
    bt.tools = "[{\"type\":";
    st       = k3_chat_encode(t, u, 1, &bt, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "tools") && strstr(k3_errmsg(), "invalid JSON"),
            "tools that are not JSON: %s", k3_errmsg());
    k3_tool_call noname[] = {{.id = "1", .name = "", .arguments = NULL}};
    mb[0].tool_calls      = noname;
    st                    = k3_chat_encode(t, mb, 1, &off, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "tool_calls[0]") && ids.n == 0, "a call with no name: %s",
            k3_errmsg());
    k3_chat_msg ut[] = {{.role = "user", .content = "u", .tool_calls = c, .n_tool_calls = 1}};
    st               = k3_chat_encode(t, ut, 1, &off, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "message 0"), "tool_calls on a user message: %s",
            k3_errmsg());

    /* 1,000 tools render (the array is one segment of sorted, compact JSON) */
    size_t cap = 1 << 20, n = 0;
    char  *many = malloc(cap);
    n += (size_t)sprintf(many + n, "[");
    for (int k = 0; k < 1000; k++)
        n += (size_t)sprintf(many + n,
                             "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\",\"parameters\":{}}}",
                             k ? "," : "", k);
    sprintf(many + n, "]");
    k3_chat_opts mt = {.think = 0, .tools = many};
    st              = k3_chat_encode(t, u, 1, &mt, &ids);
    char *s         = show(t, &ids);
    T_CHECK(!st &&
                strstr(s, "{\"function\":{\"name\":\"f999\",\"parameters\":{}},\"type\":\"function\"}]\n```"),
            "1,000 tools render (%s)", st ? k3_errmsg() : "ok");
    free(s);
    free(many);
    k3_ids_free(&ids);
}

/* The ids of a list of pieces: "<|x|>" a control token, "#text" the text's bytes one id each
 * (a word the pre-tokenizer splits), anything else one token's text. */
static void push_pieces(const k3_tok *t, const char *const *pc, size_t n, k3_ids *out) {
    for (size_t i = 0; i < n; i++) {
        const char *s = pc[i];
        if (!strncmp(s, "<|", 2))
            k3_ids_push(out, k3_tok_special(t, s));
        else if (*s == '#')
            for (s++; *s; s++)
                k3_ids_push(out, tok_rank(t, (const uint8_t *)s, 1));
        else
            k3_ids_push(out, tok_rank(t, (const uint8_t *)s, strlen(s)));
    }
}

/* Id for id on the small vocabulary: each attribute piece is its own segment (the trap
 * words '="1"', '" index' and 'call tool' never form; "get_weather" is two pre-tokenizer
 * pieces, so bytes here, while the whole word "Paris" is one token). */
static void test_ids(const k3_tok *t) {
    k3_tool_call c[] = {{.id = "1", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"}};
    k3_chat_msg  m[] = {{.role = "assistant", .content = "", .tool_calls = c, .n_tool_calls = 1},
                        {.role = "tool", .content = "ok", .tool_call_id = "1"}};
    k3_chat_opts off = {.think = 0};
    k3_ids       got = {0}, want = {0};
    k3_status    st = k3_chat_encode(t, m, 2, &off, &got);
    /* one row per tag, as the renderer writes it (clang-format would put one piece a line) */
    // clang-format off
    static const char *const w[] = {
        "<|open|>", "message", " role", "=\"", "assistant", "\"", "<|sep|>",        /* <message role=.. */
        "<|open|>", "response", "<|sep|>", "<|close|>", "response", "<|sep|>",       /* <response></..   */
        "<|open|>", "tools", "<|sep|>",                                              /* <tools>          */
        "<|open|>", "call", " tool", "=\"", "#get_weather", "\"",                    /* <call tool=..    */
        " index", "=\"", "1", "\"", "<|sep|>",                                       /* index=..>        */
        "<|open|>", "argument", " key", "=\"", "#city", "\"",                        /* <argument key=.. */
        " type", "=\"", "string", "\"", "<|sep|>",                                   /* type=..>         */
        "Paris", "<|close|>", "argument", "<|sep|>",                                 /* Paris</argument> */
        "<|close|>", "call", "<|sep|>", "<|close|>", "tools", "<|sep|>",             /* </call></tools>  */
        "<|close|>", "message", "<|sep|>", "<|end_of_msg|>",                         /* </message>       */
        "<|open|>", "message", " role", "=\"", "tool", "\"",                         /* <message role=.. */
        " tool", "=\"", "#get_weather", "\"", " index", "=\"", "1", "\"", "<|sep|>", /* tool=, index=> */
        "#ok", "<|close|>", "message", "<|sep|>", "<|end_of_msg|>",                  /* ok</message>     */
    };
    // clang-format on
    push_pieces(t, w, sizeof w / sizeof *w, &want);
    if (got.n != want.n || memcmp(got.v, want.v, got.n * sizeof *got.v))
        for (size_t k = 0; k < got.n || k < want.n; k++)
            printf("  %zu: got %d want %d\n", k, k < got.n ? got.v[k] : -1, k < want.n ? want.v[k] : -1);
    T_CHECK(!st && got.n == want.n && !memcmp(got.v, want.v, got.n * sizeof *got.v),
            "call and result id for id: every attribute piece its own segment (%zu ids)", got.n);
    k3_ids_free(&got);
    k3_ids_free(&want);

    /* a content of text parts: each part its own segment, as the release's encoder writes a
     * list of parts ("Par" + "is" never forms the word "Paris"); parts that do not add up to
     * the content (it was edited since) are ignored: one segment */
    size_t                   pp[] = {3, 2}, bad[] = {3, 9};
    k3_chat_msg              um[] = {{.role = "user", .content = "Paris", .parts = pp, .n_parts = 2}};
    static const char *const wp[] = {"<|open|>", "message", " role",         "=\"", "user",
                                     "\"",       "<|sep|>", "#Par",          "#is", "<|close|>",
                                     "message",  "<|sep|>", "<|end_of_msg|>"};
    push_pieces(t, wp, sizeof wp / sizeof *wp, &want);
    st = k3_chat_encode(t, um, 1, &off, &got);
    T_CHECK(!st && got.n == want.n && !memcmp(got.v, want.v, got.n * sizeof *got.v),
            "text parts: one segment each (%zu ids, want %zu)", got.n, want.n);
    k3_ids_free(&got);
    um[0].parts = bad;
    st          = k3_chat_encode(t, um, 1, &off, &got);
    T_CHECK(!st && got.n == want.n - 4 && got.v[7] == tok_rank(t, (const uint8_t *)"Paris", 5),
            "parts that do not add up to the content: one segment, \"Paris\" one token (%zu ids)", got.n);
    k3_ids_free(&got);
    k3_ids_free(&want);
}

/* ==== parsing ==================================================================== */

typedef struct fixture {
    const char *name;
    int         think;
    int32_t     ids[160];
    const char *reasoning, *content;
    const char *calls[7]; /* name, arguments pairs, NULL-terminated */
} fixture;

#define EOM 163586
/* S10: canitoolcall fixtures/kimi/k3-render.jsonl @ e15b82c3, output_token_ids (then <|end_of_msg|>) */
static const fixture FIX[] = {
    {"k3-parallel-same-tool",
     1,
     {17285,  14509,  11,     2069,   138897, 13,     163588, 39964,  163589, 163587, 12092,  163589, 163588,
      12092,  163589, 163587, 25385,  163589, 163587, 10257,  4453,   878,    618,    21055,  2800,   1,
      4002,   878,    16,     1,      163589, 163587, 47185,  2355,   878,    37666,  1,      1798,   878,
      2033,   1,      163589, 113476, 163588, 47185,  163589, 163588, 10257,  163589, 163587, 10257,  4453,
      878,    618,    21055,  2800,   1,      4002,   878,    17,     1,      163589, 163587, 47185,  2355,
      878,    37666,  1,      1798,   878,    2033,   1,      163589, 39818,  18009,  163588, 47185,  163589,
      163588, 10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Two cities, two lookups.",
     "",
     {"get_weather", "{\"city\": \"Paris\"}", "get_weather", "{\"city\": \"Tokyo\"}", NULL}},
    {"k3-typed-values",
     1,
     {51532,  771,    472,    1495,   35114,  13,     163588, 39964,  163589, 163587, 12092,  163589,
      163588, 12092,  163589, 163587, 25385,  163589, 163587, 10257,  4453,   878,    7788,   12411,
      1,      4002,   878,    16,     1,      163589, 163587, 47185,  2355,   878,    6621,   1,
      1798,   878,    2033,   1,      163589, 51532,  771,    163588, 47185,  163589, 163587, 47185,
      2355,   878,    35548,  13030,  4840,   1,      1798,   878,    10006,  1,      163589, 1308,
      163588, 47185,  163589, 163587, 47185,  2355,   878,    639,    43167,  1,      1798,   878,
      16849,  1,      163589, 8092,   163588, 47185,  163589, 163587, 47185,  2355,   878,    2636,
      8195,   13030,  4840,   1,      1798,   878,    6562,   1,      163589, 6562,   163588, 47185,
      163589, 163588, 10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Standup with no reminder.",
     "",
     {"create_event",
      "{\"title\": \"Standup\", \"duration_minutes\": 15, \"all_day\": false, \"reminder_minutes\": null}",
      NULL}},
    {"k3-empty-arguments",
     1,
     {14752,  922,    276,    1169,   13,     163588, 39964,  163589, 163587, 12092,
      163589, 163588, 12092,  163589, 163587, 25385,  163589, 163587, 10257,  4453,
      878,    618,    6618,   1,      4002,   878,    16,     1,      163589, 163588,
      10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Just get the time.",
     "",
     {"get_time", "{}", NULL}},
    {"k3-string-escapes",
     1,
     {13744,  276,    7234,   157023, 13,     163588, 39964, 163589, 163587, 12092,  163589, 163588, 12092,
      163589, 163587, 25385,  163589, 163587, 10257,  4453,  878,    8124,   6101,   1,      4002,   878,
      16,     1,      163589, 163587, 47185,  2355,   878,   4953,   1,      1798,   878,    2033,   1,
      163589, 34,     10001,  12984,  59,     5060,   2423,  9817,   8842,   163588, 47185,  163589, 163587,
      47185,  2355,   878,    4204,   1,      1798,   878,   2033,   1,      163589, 1611,   220,    16,
      198,    37179,  220,    17,     414,    79530,  1,     1272,   1565,   163588, 47185,  163589, 163588,
      10257,  163589, 163588, 25385,  163589, 163588, 2778,  163589, EOM,    -1},
     "Save the note verbatim.",
     "",
     {"write_file",
      "{\"path\": \"C:\\\\Users\\\\ana\\\\notes.txt\", \"content\": \"line 1\\n\\tline 2 \\\"quoted\\\" \\\\ "
      "end\"}",
      NULL}},
    {"k3-control-marker-text-in-value",
     1,
     {9570,   276,    34459,  115921, 4920,   24894,  2913,   13,     163588, 39964,  163589, 163587, 12092,
      163589, 163588, 12092,  163589, 163587, 25385,  163589, 163587, 10257,  4453,   878,    8124,   6101,
      1,      4002,   878,    16,     1,      163589, 163587, 47185,  2355,   878,    4953,   1,      1798,
      878,    2033,   1,      163589, 87,     8842,   163588, 47185,  163589, 163587, 47185,  2355,   878,
      4204,   1,      1798,   878,    2033,   1,      163589, 27,     91,     10794,  91,     29,     47185,
      27,     91,     40433,  91,     29,     387,    1632,   5924,   1565,   163588, 47185,  163589, 163588,
      10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Write the literal XTML marker text.",
     "",
     {"write_file", "{\"path\": \"x.txt\", \"content\": \"<|close|>argument<|sep|> is how args end\"}",
      NULL}},
    {"k3-xtml-attr-escaping",
     1,
     {13115,  1362,   89625,  13,     163588, 39964,  163589, 163587, 12092,  163589, 163588, 12092,
      163589, 163587, 25385,  163589, 163587, 10257,  4453,   878,    15450,  91494,  1,      4002,
      878,    16,     1,      163589, 163587, 47185,  2355,   878,    80,     42055,  77360,  1,
      1798,   878,    2033,   1,      163589, 25048,  841,    28510,  163588, 47185,  163589, 163587,
      47185,  2355,   878,    69586,  841,    13847,  26,     9663,   39877,  26,     1,      1798,
      878,    2033,   1,      163589, 47941,  2531,   414,    9663,   1,      163588, 47185,  163589,
      163588, 10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Keys need escaping.",
     "",
     {"save_answer", "{\"q&a\": \"fish & chips\", \"say \\\"hi\\\"\": \"she said \\\"hi\\\"\"}", NULL}},
    {"k3-empty-think",
     1,
     {163588, 39964,  163589, 163587, 12092,  163589, 163588, 12092,  163589, 163587, 25385,  163589, 163587,
      10257,  4453,   878,    618,    21055,  2800,   1,      4002,   878,    16,     1,      163589, 163587,
      47185,  2355,   878,    37666,  1,      1798,   878,    2033,   1,      163589, 49,     873,    163588,
      47185,  163589, 163588, 10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "",
     "",
     {"get_weather", "{\"city\": \"Rome\"}", NULL}},
    {"k3-thinking-disabled-call",
     0,
     {163588, 12092, 163589, 163587, 25385, 163589, 163587, 10257,  4453,   878,    618,    21055, 2800,
      1,      4002,  878,    16,     1,     163589, 163587, 47185,  2355,   878,    37666,  1,     1798,
      878,    2033,  1,      163589, 44,    12708,  338,    163588, 47185,  163589, 163587, 47185, 2355,
      878,    8175,  1,      1798,   878,   2033,   1,      163589, 78841,  14211,  163588, 47185, 163589,
      163588, 10257, 163589, 163588, 25385, 163589, 163588, 2778,   163589, EOM,    -1},
     "",
     "",
     {"get_weather", "{\"city\": \"Madrid\", \"unit\": \"celsius\"}", NULL}},
    {"k3-nested-json",
     1,
     {6431,   276,    2940,   472,    261,    36068,  5802,   13,     163588, 39964,  163589, 163587, 12092,
      163589, 163588, 12092,  163589, 163587, 25385,  163589, 163587, 10257,  4453,   878,    7788,   12411,
      1,      4002,   878,    16,     1,      163589, 163587, 47185,  2355,   878,    6621,   1,      1798,
      878,    2033,   1,      163589, 5329,   19535,  163588, 47185,  163589, 163587, 47185,  2355,   878,
      2534,   105194, 1,      1798,   878,    4392,   1,      163589, 3530,   5060,   31,     17480,  1304,
      665,    414,    6917,   31,     17480,  1304,   3956,   163588, 47185,  163589, 163587, 47185,  2355,
      878,    5791,   1,      1798,   878,    3721,   1,      163589, 8264,   1152,   1289,   414,    73028,
      665,    414,    43957,  1289,   9392,   18293,  1289,   220,    4934,   13,     40278,  24,     11,
      414,    29087,  1289,   220,    23,     13,     43150,  22,     3589,   414,    147411, 1118,   1289,
      793,    16,     11,     220,    17,     24216,  163588, 47185,  163589, 163588, 10257,  163589, 163588,
      25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Create the event with a structured location.",
     "",
     {"create_event",
      "{\"title\": \"Offsite\", \"attendees\": [\"ana@example.com\", \"bo@example.com\"], \"location\": "
      "{\"name\": \"HQ\", \"geo\": {\"lat\": 47.3769, \"lon\": 8.5417}, \"floors\": [1, 2]}}",
      NULL}},
    {"k3-multi-turn-second-call",
     1,
     {10048,  9101,   483,    13,     163588, 39964,  163589, 163587, 12092,  163589, 163588, 12092,  163589,
      163587, 25385,  163589, 163587, 10257,  4453,   878,    22573,  51629,  1,      4002,   878,    16,
      1,      163589, 163587, 47185,  2355,   878,    2035,   1,      1798,   878,    10006,  1,      163589,
      2714,   13,     20,     163588, 47185,  163589, 163587, 47185,  2355,   878,    3701,   26505,  1,
      1798,   878,    2033,   1,      163589, 78841,  14211,  163588, 47185,  163589, 163587, 47185,  2355,
      878,    1753,   26505,  1,      1798,   878,    2033,   1,      163589, 69,     101942, 163588, 47185,
      163589, 163588, 10257,  163589, 163588, 25385,  163589, 163588, 2778,   163589, EOM,    -1},
     "Now convert it.",
     "",
     {"convert_units", "{\"value\": 21.5, \"from_unit\": \"celsius\", \"to_unit\": \"fahrenheit\"}", NULL}},
};

static void test_fixtures(const k3_tok *t) {
    for (size_t f = 0; f < sizeof FIX / sizeof FIX[0]; f++) {
        size_t n = 0;
        while (FIX[f].ids[n] >= 0)
            n++;
        parsed r;
        parse_ids(t, FIX[f].think, FIX[f].ids, n, 0, &r);
        int all_done = 1;
        for (int k = 0; k < r.n_calls; k++)
            all_done &= r.complete[k] == 1;
        T_CHECK(parsed_is(&r, FIX[f].reasoning, FIX[f].content, FIX[f].calls) && r.end && all_done,
                "S10 %s: id for id -> reasoning, content, calls; streamed deltas == final", FIX[f].name);
    }
    /* and the same ids with tools off: the markup is shown as text, nothing is lost */
    size_t n = 0;
    while (FIX[0].ids[n] >= 0)
        n++;
    k3_chat_parser *p;
    k3_chat_parser_new(t, 1, &p);
    k3_chat_out o;
    char        resp[2048] = "";
    for (size_t i = 0; i < n; i++) {
        k3_chat_parser_feed(p, FIX[0].ids[i], &o);
        cat(resp, sizeof resp, o.response, o.response_len);
    }
    T_CHECK(strstr(resp, "<|open|>tools<|sep|>") && strstr(resp, "Tokyo") && k3_chat_parser_n_calls(p) == 0,
            "tools off: a tools block is text in the response, no calls");
    k3_chat_parser_free(p);
}

static void parse_spec(const k3_tok *t, int think, const char *spec, int finish, parsed *r) {
    k3_ids ids = {0};
    ids_of(t, spec, &ids);
    parse_ids(t, think, ids.v, ids.n, finish, r);
    k3_ids_free(&ids);
}

#define CALL_HEAD "<|open|>call tool=\"f\" index=\"1\"<|sep|>"
#define ARG(k, ty, v) "<|open|>argument key=\"" k "\" type=\"" ty "\"<|sep|>" v "<|close|>argument<|sep|>"
#define TAIL "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"

static void test_cases(const k3_tok *t) {
    parsed      r;
    const char *pre = "<|close|>response<|sep|><|open|>tools<|sep|>";
    char        buf[2048];
#define CASE(desc, body, want_args)                                                                          \
    do {                                                                                                     \
        snprintf(buf, sizeof buf, "%s" CALL_HEAD body TAIL, pre);                                            \
        parse_spec(t, 0, buf, 0, &r);                                                                        \
        const char *w[] = {"f", want_args, NULL};                                                            \
        T_CHECK(parsed_is(&r, "", "", w) && r.complete[0] == 1 && r.end, desc);                              \
    } while (0)
    CASE("string value: raw, JSON-escaped in the arguments", ARG("s", "string", "a \"b\" \\ c\n\x01"),
         "{\"s\": \"a \\\"b\\\" \\\\ c\\n\\u0001\"}");
    CASE("string value keeps &quot; literal (no unescaping inside values)",
         ARG("s", "string", "say &quot;hi&quot;"), "{\"s\": \"say &quot;hi&quot;\"}");
    CASE("number: compact or spaced, 1e2 -> 100.0, big integers kept",
         ARG("a", "number", "1e2") ARG("b", "number", " 12345678901234567890 ") ARG("c", "number", "-0.5"),
         "{\"a\": 100.0, \"b\": 12345678901234567890, \"c\": -0.5}");
    CASE("boolean and null", ARG("t", "boolean", "true") ARG("n", "null", "null"),
         "{\"t\": true, \"n\": null}");
    CASE("object and array, compact JSON re-spaced in order",
         ARG("o", "object", "{\"z\":1,\"a\":[1,{\"b\":null}]}") ARG("l", "array", "[\"x\",2.50]"),
         "{\"o\": {\"z\": 1, \"a\": [1, {\"b\": null}]}, \"l\": [\"x\", 2.5]}");
    CASE("a typed value that is not JSON is kept as a string", ARG("n", "number", "twelve"),
         "{\"n\": \"twelve\"}");
    CASE("no type attribute: a string", "<|open|>argument key=\"k\"<|sep|>v<|close|>argument<|sep|>",
         "{\"k\": \"v\"}");
    CASE("escaped attributes: key unescaped in one pass (&amp;quot; -> &quot;)",
         ARG("a&amp;quot;b&quot;", "string", "v"), "{\"a&quot;b\\\"\": \"v\"}");
    CASE("empty string value", ARG("e", "string", ""), "{\"e\": \"\"}");
    CASE("empty arguments", "", "{}");
    CASE("json block: RAW when it parses to an object",
         "<|open|>json type=\"object\"<|sep|>{\"x\": [1,2]}<|close|>json<|sep|>", "{\"x\": [1, 2]}");
    CASE("json block that is not an object is ignored",
         "<|open|>json type=\"object\"<|sep|>[1]<|close|>json<|sep|>", "{}");
    CASE("marker text and an <|open|> id inside a value are value text",
         ARG("s", "string",
             "\xc2\xab"
             "close\xc2\xbb"
             "argument<|open|>x<|sep|>"),
         "{\"s\": \"<|close|>argument<|open|>x<|sep|>\"}");
    CASE("a close tag inside a value that is not a marker stays text",
         ARG("s", "string", "a<|close|>b<|sep|>c"), "{\"s\": \"a<|close|>b<|sep|>c\"}");
#undef CASE
    /* attribute escaping in the tool name */
    parse_spec(
        t, 0,
        "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"a&quot;&amp;b\" index=\"1\"<|sep|>"
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
        0, &r);
    const char *wn[] = {"a\"&b", "{}", NULL};
    T_CHECK(parsed_is(&r, "", "", wn), "tool name attribute unescaped");
    /* leniency: tools right after the think close; missing <|close|>tools and <|close|>message */
    parse_spec(t, 1,
               "hmm<|close|>think<|sep|><|open|>tools<|sep|>" CALL_HEAD ARG(
                   "x", "number", "1") "<|close|>call<|sep|><|end_of_msg|>",
               0, &r);
    const char *w1[] = {"f", "{\"x\": 1}", NULL};
    T_CHECK(parsed_is(&r, "hmm", "", w1) && r.complete[0] && r.end,
            "lenient: tools right after the think close, no closes of tools/message before the stop");
    /* a call closed by </tools> with its argument left open; then content after the tools */
    parse_spec(
        t, 0,
        "Sure.<|close|>response<|sep|><|open|>tools<|sep|>" CALL_HEAD
        "<|open|>argument key=\"s\" type=\"string\"<|sep|>v<|close|>tools<|sep|><|close|>message<|sep|>"
        "<|end_of_msg|>",
        0, &r);
    const char *w2[] = {"f", "{\"s\": \"v\"}", NULL};
    T_CHECK(parsed_is(&r, "", "Sure.", w2) && r.complete[0],
            "lenient: a close of tools ends the open argument and call");
    /* a call without a tool attribute is dropped; the next one is index 0 */
    parse_spec(t, 0,
               "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call index=\"1\"<|sep|>" ARG(
                   "a", "string",
                   "x") "<|close|>call<|sep|><|open|>call tool=\"g\" index=\"2\"<|sep|><|close|>call<|sep|>"
                        "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
               0, &r);
    const char *w3[] = {"g", "{}", NULL};
    T_CHECK(parsed_is(&r, "", "", w3), "a call without a tool name is dropped; indexes are by appearance");
    /* a call left open (no <|close|>call) before the next call's open: the next call's
     * arguments are its own, never the open call's */
    parse_spec(t, 0,
               "<|close|>response<|sep|><|open|>tools<|sep|>" CALL_HEAD ARG(
                   "a", "string", "1") "<|open|>call tool=\"g\" index=\"2\"<|sep|>" ARG("b", "number", "2")
                   TAIL,
               0, &r);
    const char *w6[] = {"f", "{\"a\": \"1\"}", "g", "{\"b\": 2}", NULL};
    T_CHECK(parsed_is(&r, "", "", w6) && r.complete[0] == 1 && r.complete[1] == 1,
            "a call left open is closed by the next call's open; the arguments stay with their call");
    parse_spec(t, 0,
               "<|close|>response<|sep|><|open|>tools<|sep|>" CALL_HEAD ARG(
                   "a", "string", "1") "<|open|>call tool=\"g\" index=\"2\"<|sep|>",
               1, &r);
    const char *w7[] = {"f", "{\"a\": \"1\"}", "g", "", NULL};
    T_CHECK(parsed_is(&r, "", "", w7) && r.opened[1] == 1 && r.complete[1] == 0,
            "the stream stops right after that next call's open: its name is still reported");
    /* bytes that are not UTF-8 in a tool name, a key, a typed value that is not JSON and one
     * that is: U+FFFD, as the release's parsers see the decoded text (never invalid JSON text) */
    parse_spec(
        t, 0,
        "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\xff\" index=\"1\"<|sep|>" ARG(
            "k\xc3", "number", "\xff") ARG("o", "object", "{\"a\": \"\xe4\xbd\"}") TAIL,
        0, &r);
    const char *w8[] = {"f\xef\xbf\xbd",
                        "{\"k\xef\xbf\xbd\": \"\xef\xbf\xbd\", \"o\": {\"a\": \"\xef\xbf\xbd\"}}", NULL};
    T_CHECK(parsed_is(&r, "", "", w8), "bytes that are not UTF-8 in a name, a key or a typed value: U+FFFD");
    /* a NUL byte in a tool name: the name is a C string, so it ended there, and the call went to
     * another tool ("f"); now U+FFFD, as a NUL is shown in text */
    k3_ids nul = {0};
    ids_of(t, "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f", &nul);
    k3_ids_push(&nul, 0);
    ids_of(t, "g\" index=\"1\"<|sep|>" TAIL, &nul);
    parse_ids(t, 0, nul.v, nul.n, 0, &r);
    k3_ids_free(&nul);
    const char *w9[] = {"f\xef\xbf\xbdg", "{}", NULL};
    T_CHECK(parsed_is(&r, "", "", w9), "a NUL byte in a tool name: U+FFFD, never a shorter name");
    /* truncated stream: the stream stops inside a string value and inside a call */
    parse_spec(t, 0,
               "<|close|>response<|sep|><|open|>tools<|sep|>" CALL_HEAD ARG(
                   "a", "number", "1") "<|open|>argument key=\"s\" type=\"string\"<|sep|>hel",
               1, &r);
    T_CHECK(r.n_calls == 1 && r.complete[0] == 0 && !r.end && !strcmp(r.args[0], "{\"a\": 1, \"s\": \"hel") &&
                !strcmp(r.streamed[0], r.args[0]) && !r.bad_event,
            "truncated stream: the call is incomplete, what was streamed is kept (%s)", r.args[0]);
    /* UTF-8 split across tokens inside a string value is streamed whole */
    k3_ids ids = {0};
    ids_of(t,
           "<|close|>response<|sep|><|open|>tools<|sep|>" CALL_HEAD
           "<|open|>argument key=\"s\" type=\"string\"<|sep|>",
           &ids);
    k3_ids_push(&ids, 0xC3);
    k3_ids_push(&ids, 0xA9);
    ids_of(t, "<|close|>argument<|sep|>" TAIL, &ids);
    parse_ids(t, 0, ids.v, ids.n, 0, &r);
    k3_ids_free(&ids);
    const char *w4[] = {"f", "{\"s\": \"\xc3\xa9\"}", NULL};
    T_CHECK(parsed_is(&r, "", "", w4), "a character split across two ids arrives whole (ensure_ascii=False)");
    /* two calls, content before them, reasoning */
    parse_spec(
        t, 1,
        "why<|close|>think<|sep|><|open|>response<|sep|>Let me check.<|close|>response<|sep|><|open|>tools"
        "<|sep|>" CALL_HEAD ARG("a", "string", "1") "<|close|>call<|sep|><|open|>call tool=\"h\" index=\"2\""
                                                    "<|sep|>" ARG("b", "boolean", "false") TAIL,
        0, &r);
    const char *w5[] = {"f", "{\"a\": \"1\"}", "h", "{\"b\": false}", NULL};
    T_CHECK(parsed_is(&r, "why", "Let me check.", w5), "reasoning, content, then two calls");
}

/* Random tool blocks (call N is named fN and its argument keys start kN: strings with marker
 * text and split characters, typed values valid or not, json blocks), then mutated id by id
 * between markers (ordinary ids dropped, control ids and pieces inserted, closing markers
 * dropped), fed up to the first
 * <|end_of_msg|> with tools on: the events are
 * well formed (a call's name before its arguments, one open per call), the streamed arguments
 * equal the final ones, names and arguments are UTF-8, every closed call's arguments are one
 * JSON object, and no call holds another's argument (a key kM in call fN, M != N). */
static uint32_t rnd_next(uint32_t *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return *seed >> 8;
}

/* The call number N of "fN" / "kN..." (a digit after the letter), else 0. */
static int call_no(const char *s, char letter) {
    return s[0] == letter && s[1] >= '1' && s[1] <= '9' ? s[1] - '0' : 0;
}

/* 1 when call r->names[c] is fN and its arguments (a JSON object) hold a key kM, M != N. */
static int foreign_key(const parsed *r, int c) {
    int n = call_no(r->names[c], 'f'), bad = 0;
    jv *v = NULL;
    if (!n || jv_parse(r->args[c], strlen(r->args[c]), &v) != K3_OK)
        return 0;
    for (size_t k = 0; v->kind == JV_OBJECT && k < v->n; k++) {
        int m = call_no(v->keys[k].s, 'k');
        bad |= m && m != n;
    }
    jv_free(v);
    return bad;
}

static void test_random_tools(const k3_tok *t) {
    static const char *const keys[]    = {"", "&amp;b", "&quot;"};
    static const char *const vals[][2] = {{"string", "a \"b\" \\ \xc3\xa9\n"},
                                          {"string", "x<|close|>argument<|sep|>y"},
                                          {"string", ""},
                                          {"number", "1e2"},
                                          {"number", "twelve"},
                                          {"object", "{\"x\": [1, 2]}"},
                                          {"array", "[1,"},
                                          {"boolean", "true"},
                                          {NULL, NULL}, /* a json block {"kN": 1} */
                                          {NULL, "[1]"}};
    static const char *const pc[]      = {"tools", "call",    " tool=\"h\"", "argument",
                                          "json",  "message", "1",           "\xc3"};
    int32_t                  ctl[]     = {k3_tok_special(t, "<|open|>"), k3_tok_special(t, "<|close|>"),
                                          k3_tok_special(t, "<|sep|>"), k3_tok_special(t, "<|end_of_msg|>")};
    uint32_t                 seed      = 0x6b33;
    int                      n_bad = 0, n_closed = 0, runs = 2000;
    parsed                  *r = malloc(sizeof *r);
    char                     spec[4096], raw[64];
    for (int run = 0; run < runs; run++) {
        size_t at = (size_t)snprintf(spec, sizeof spec, "%s<|close|>response<|sep|><|open|>tools<|sep|>",
                                     run % 2 ? "hm<|close|>think<|sep|><|open|>response<|sep|>" : "");
        for (int c = 1, nc = 1 + (int)(rnd_next(&seed) % 3); c <= nc; c++) {
            at += (size_t)snprintf(spec + at, sizeof spec - at,
                                   "<|open|>call tool=\"f%d\" index=\"%d\"<|sep|>", c, c);
            for (int a = 0, na = (int)(rnd_next(&seed) % 4); a < na; a++) {
                const char *const *v = vals[rnd_next(&seed) % (sizeof vals / sizeof *vals)];
                if (v[1])
                    snprintf(raw, sizeof raw, "%s", v[1]);
                else
                    snprintf(raw, sizeof raw, "{\"k%d\": 1}", c);
                if (v[0])
                    at += (size_t)snprintf(
                        spec + at, sizeof spec - at,
                        "<|open|>argument key=\"k%d%s\" type=\"%s\"<|sep|>%s<|close|>argument<|sep|>", c,
                        keys[rnd_next(&seed) % 3], v[0], raw);
                else
                    at += (size_t)snprintf(spec + at, sizeof spec - at,
                                           "<|open|>json type=\"object\"<|sep|>%s<|close|>json<|sep|>", raw);
            }
            at += (size_t)snprintf(spec + at, sizeof spec - at, "<|close|>call<|sep|>");
        }
        snprintf(spec + at, sizeof spec - at, "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
        k3_ids clean = {0}, ids = {0};
        ids_of(t, spec, &clean);
        int    in_marker = 0, skip = 0;
        size_t cut = SIZE_MAX;
        for (size_t i = 0; i < clean.n; i++) { /* mutations: 1 in 25 ids each way, outside markers */
            int32_t  id = clean.v[i];
            uint32_t x  = rnd_next(&seed) % 100;
            if (skip || (!in_marker && id == ctl[1] && x < 3)) { /* a whole closing marker dropped */
                skip = id != ctl[2];
                continue;
            }
            if (in_marker || x >= 12) {
            } else if (x < 4 && !k3_tok_is_special(t, id)) {
                continue;
            } else if (x >= 4 && x < 8) {
                k3_ids_push(&ids, ctl[x % 4]);
            } else if (x >= 8) {
                const char *s = pc[rnd_next(&seed) % (sizeof pc / sizeof *pc)];
                k3_tok_encode(t, s, strlen(s), 0, &ids);
            }
            in_marker = id == ctl[0] || id == ctl[1] ? 1 : id == ctl[2] ? 0 : in_marker;
            k3_ids_push(&ids, id);
        }
        for (size_t i = 0; i < ids.n && cut == SIZE_MAX; i++)
            if (ids.v[i] == ctl[3])
                cut = i + 1; /* generation stops at the end of message */
        parse_ids(t, run % 2, ids.v, cut < ids.n ? cut : ids.n, 1, r);
        int ok = !r->bad_event && r->n_calls <= 8;
        for (int c = 0; ok && c < r->n_calls; c++) {
            ok = !strcmp(r->streamed[c], r->args[c]) && !foreign_key(r, c) &&
                 !k3_utf8_repair(r->names[c], strlen(r->names[c]), NULL, NULL) &&
                 !k3_utf8_repair(r->args[c], strlen(r->args[c]), NULL, NULL);
            if (ok && r->complete[c] == 1) {
                jv *v = NULL;
                ok    = jv_parse(r->args[c], strlen(r->args[c]), &v) == K3_OK && v->kind == JV_OBJECT;
                jv_free(v);
                n_closed++;
            }
        }
        if (!ok && n_bad++ < 2) {
            char *sh = show(t, &ids);
            for (char *q = sh; *q; q++)
                *q = *q == 1 ? '^' : *q;
            printf("  stream: %s\n", sh);
            free(sh);
            parsed_is(r, "", "", NULL);
        }
        k3_ids_free(&clean);
        k3_ids_free(&ids);
    }
    free(r);
    T_CHECK(
        !n_bad && n_closed > 1000,
        "%d random mutated tool blocks: events well formed, streamed arguments equal the final ones, UTF-8 "
        "names and arguments, every closed call's arguments one JSON object, no argument in another call (%d "
        "closed calls; %d bad)",
        runs, n_closed, n_bad);
}

/* Every text a conversation carries, with every special token's name in it (and near misses,
 * and a name split over two text parts): the render holds exactly the control ids of the same
 * conversation without it. The release's encoder writes all these as ordinary text (S1). */
static void render_with(const k3_tok *t, const char *s, k3_ids *out) {
    char tools[1024], args[256], f[64], u[256], a[5][128];
    snprintf(f, sizeof f, "f%s", s);
    snprintf(
        tools, sizeof tools,
        "[{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"description\":\"d%s\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"p%s\":{\"type\":\"string\",\"description\":\"q%s\"}}}}}]",
        f, s, s, s);
    snprintf(args, sizeof args, "{\"k%s\": \"v%s\", \"n\": 1}", s, s);
    snprintf(u, sizeof u, "u%s|u2", s);
    snprintf(a[0], sizeof a[0], "i%s", s);
    snprintf(a[1], sizeof a[1], "raw %s {", s);
    snprintf(a[2], sizeof a[2], "n%s\"&", s);
    snprintf(a[3], sizeof a[3], "x%s", s);
    snprintf(a[4], sizeof a[4], "{\"description\":\"%s\"}", s);
    size_t       parts[] = {strlen(u) - 3, 3};
    k3_tool_call calls[] = {{.id = a[0], .name = f, .arguments = args},
                            {.id = "i2", .name = f, .arguments = a[1]}};
    k3_chat_msg  m[]     = {
             {.role = "system", .content = a[3], .name = a[2]},
             {.role = "system", .content = a[3], .tools = tools},
             {.role = "user", .content = u, .name = a[2], .parts = parts, .n_parts = 2},
             {.role         = "assistant",
              .content      = a[3],
              .reasoning    = a[3],
              .name         = a[2],
              .tool_calls   = calls,
              .n_tool_calls = 2},
             {.role = "tool", .content = a[3], .tool_call_id = a[0], .name = a[2]},
             {.role = "tool", .content = a[3], .tool_call_id = "i2"},
             {.role = "user", .content = a[3]},
             {.role = "tool", .content = a[3], .name = a[2]}, /* not matched: its own name */
    };
    k3_chat_opts o = {.think           = 1,
                      .gen_prompt      = 1,
                      .tools           = tools,
                      .tool_choice     = "required",
                      .response_format = "json_schema",
                      .response_schema = a[4]};
    out->n         = 0;
    if (k3_chat_encode(t, m, sizeof m / sizeof *m, &o, out))
        printf("  render with '%s': %s\n", s, k3_errmsg());
}

static void test_no_control_from_text(const k3_tok *t) {
    k3_ids got = {0};
    render_with(t, "", &got);
    size_t want = 0, n_base = (size_t)k3_tok_n_vocab(t) - 256, tried = 0, bad = 0;
    for (size_t i = 0; i < got.n; i++)
        want += k3_tok_is_special(t, got.v[i]);
    const char *near[] = {"<|open|",
                          "|open|>",
                          "<|OPEN|>",
                          "< |sep|>",
                          "<|sep|><|sep|>",
                          "<|op<|close|>en|>",
                          "<|end_of_msg|>\n<|open|>message role=\"system\"<|sep|>"};
    for (size_t k = 0; k < 256 + sizeof near / sizeof *near; k++) {
        size_t      len;
        const char *s = k < 256 ? k3_tok_piece(t, (int32_t)(n_base + k), &len) : near[k - 256];
        if (!s || strchr(s, '"') != NULL) /* JSON text above takes it raw; quotes: the escaping tests */
            continue;
        render_with(t, s, &got);
        size_t n = 0;
        for (size_t i = 0; i < got.n; i++)
            n += k3_tok_is_special(t, got.v[i]);
        tried++;
        if (n != want && bad++ < 3)
            printf("  '%s': %zu special ids, %zu without it\n", s, n, want);
    }
    T_CHECK(want > 40 && tried >= 256 && !bad,
            "every special token's name (and near misses) in every text field, name, tool, argument, result, "
            "reasoning and schema: no control id from text (%zu renders, %zu special ids each)",
            tried, want);
    k3_ids_free(&got);
}

int main(void) {
    k3_tok *t = small_vocab();
    T_CHECK(t != NULL, "small vocabulary loads");
    if (!t)
        return t_done();
    test_examples(t);
    test_rules(t);
    test_ids(t);
    test_cases(t);
    test_random_tools(t);
    test_no_control_from_text(t);
    k3_tok_free(t);
    k3_tok *rt = real_ids_vocab();
    T_CHECK(rt != NULL, "vocabulary with the release's ids for the S10 fixtures loads");
    if (rt)
        test_fixtures(rt);
    k3_tok_free(rt);
    return t_done();
}
