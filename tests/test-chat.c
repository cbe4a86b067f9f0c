/* test-chat.c: golden chat encodings and the output channel parser.
 *
 * The vocabulary is built here: the 256 single bytes (rank = byte value, and no pairs,
 * so text outside the listed tokens stays one id per byte) plus whole words the format
 * uses, plus a trap token '="&' that would only appear if an attribute value were not
 * its own segment. Golden sequences are written by hand from doc/chat-format.md
 * as token texts: "<O>" "<C>" "<S>" "<E>" are <|open|> <|close|> <|sep|> <|end_of_msg|>,
 * "b:TEXT" is TEXT byte by byte, "sp:NAME" a special by name, anything else must be
 * exactly one vocabulary token. */
#include "test.h"
#include "tok.h"
#include "tok-vocab.h"

#include <stdlib.h>

static const char *WORDS[] = {"message", " role",    "=\"",   "system",   "user",    "assistant",
                              "think",   "response", " type", "thinking", "-effort", "=\"&",
                              "Hi",      "amp",      " k",    "Yo",       "hmm"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static k3_tok *vocab(void) {
    /* specials at the release's offsets: 2 end_of_msg, 3 open, 4 close, 5 sep */
    t_vocab v = {0};
    t_vocab_bytes_words(&v, WORDS, N_WORDS);
    return t_vocab_chat(&v, 256 + (int)N_WORDS, "chat");
}

/* Expand a hand-written golden list (terminated by NULL) into ids. */
static void golden(const k3_tok *t, const char *const *items, k3_ids *out) {
    for (; *items; items++) {
        const char *it = *items;
        if (!strcmp(it, "<O>"))
            k3_ids_push(out, k3_tok_special(t, "<|open|>"));
        else if (!strcmp(it, "<C>"))
            k3_ids_push(out, k3_tok_special(t, "<|close|>"));
        else if (!strcmp(it, "<S>"))
            k3_ids_push(out, k3_tok_special(t, "<|sep|>"));
        else if (!strcmp(it, "<E>"))
            k3_ids_push(out, k3_tok_special(t, "<|end_of_msg|>"));
        else if (!strncmp(it, "sp:", 3))
            k3_ids_push(out, k3_tok_special(t, it + 3));
        else if (!strncmp(it, "b:", 2))
            for (const char *p = it + 2; *p; p++)
                k3_ids_push(out, (uint8_t)*p);
        else {
            int32_t r = tok_rank(t, (const uint8_t *)it, strlen(it));
            if (r == TOK_RANK_NONE)
                printf("golden item '%s' is not one token\n", it);
            k3_ids_push(out, r);
        }
    }
}

static int same(const k3_tok *t, const k3_ids *got, const k3_ids *want) {
    if (got->n == want->n && !memcmp(got->v, want->v, got->n * sizeof *got->v))
        return 1;
    printf("  got  (%zu):", got->n);
    for (size_t i = 0; i < got->n; i++)
        printf(" %d", got->v[i]);
    printf("\n  want (%zu):", want->n);
    for (size_t i = 0; i < want->n; i++)
        printf(" %d", want->v[i]);
    printf("\n");
    (void)t;
    return 0;
}

#define MSG_OPEN(role) "<O>", "message", " role", "=\"", role, "\"", "<S>"
#define MSG_CLOSE "<C>", "message", "<S>", "<E>"

static const char BODY_MAX[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
    "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=max`.";

static void test_think_off(const k3_tok *t) {
    k3_chat_msg  m[]          = {{.role = "system", .content = "Be brief.", .reasoning = NULL, .n_images = 0},
                                 {.role = "user", .content = "Hi", .reasoning = NULL, .n_images = 0},
                                 {.role = "assistant", .content = "Yo", .reasoning = "hmm", .n_images = 0},
                                 {.role = "developer", .content = "Hi", .reasoning = NULL, .n_images = 0},
                                 {.role = "user", .content = "Hi", .reasoning = NULL, .n_images = 0}};
    k3_chat_opts o            = {.think = 0, .effort = NULL, .gen_prompt = 1, .tools = NULL};
    const char  *want_items[] = {
         MSG_OPEN("system"), "b:Be brief.", MSG_CLOSE, MSG_OPEN("user"), "Hi", MSG_CLOSE,
         /* thinking off: past assistant turns have no think block, reasoning dropped */
         MSG_OPEN("assistant"), "<O>", "response", "<S>", "Yo", "<C>", "response", "<S>", MSG_CLOSE,
         MSG_OPEN("system"), "Hi", MSG_CLOSE, /* developer is rendered as system */
         MSG_OPEN("user"), "Hi", MSG_CLOSE, MSG_OPEN("assistant"), "<O>", "response", "<S>", NULL};
    k3_ids    got = {0}, want = {0};
    k3_status st = k3_chat_encode(t, m, 5, &o, &got);
    golden(t, want_items, &want);
    T_CHECK(!st && same(t, &got, &want),
            "golden: thinking off, system + multi-turn + developer, generation prompt (%s)", k3_errmsg());
    k3_ids_free(&got);
    k3_ids_free(&want);
}

static void test_think_on(const k3_tok *t) {
    k3_chat_msg  m[] = {{.role = "user", .content = "Hi", .reasoning = NULL, .n_images = 0},
                        {.role = "assistant", .content = "Yo", .reasoning = "hmm", .n_images = 0},
                        {.role = "user", .content = "Hi", .reasoning = NULL, .n_images = 0},
                        {.role      = "assistant",
                         .content   = "Yo",
                         .reasoning = " \n\t\xe3\x80\x80",
                         .n_images  = 0}, /* only whitespace (incl. U+3000) */
                        {.role = "user", .content = "Hi", .reasoning = NULL, .n_images = 0}};
    k3_chat_opts o   = {.think = 1, .effort = NULL, .gen_prompt = 1, .tools = NULL};
    k3_ids       got = {0}, want = {0};
    k3_status    st     = k3_chat_encode(t, m, 5, &o, &got);
    const char  *head[] = {"<O>", "message",  " role",   "=\"", "system", "\"", " type",
                           "=\"", "thinking", "-effort", "\"",  "<S>",    NULL};
    golden(t, head, &want);
    k3_tok_encode(t, BODY_MAX, strlen(BODY_MAX), 0, &want);
    const char *rest[] = {MSG_CLOSE, MSG_OPEN("user"), "Hi", MSG_CLOSE, MSG_OPEN("assistant"), "<O>", "think",
                          "<S>", "hmm", "<C>", "think", "<S>", "<O>", "response", "<S>", "Yo", "<C>",
                          "response", "<S>", MSG_CLOSE, MSG_OPEN("user"), "Hi", MSG_CLOSE,
                          /* whitespace-only reasoning: the block is emitted empty */
                          MSG_OPEN("assistant"), "<O>", "think", "<S>", "<C>", "think", "<S>", "<O>",
                          "response", "<S>", "Yo", "<C>", "response", "<S>", MSG_CLOSE, MSG_OPEN("user"),
                          "Hi", MSG_CLOSE, MSG_OPEN("assistant"), "<O>", "think", "<S>", NULL};
    golden(t, rest, &want);
    T_CHECK(!st && same(t, &got, &want),
            "golden: thinking on (effort max default), preserved reasoning, empty think block (%s)",
            k3_errmsg());
    /* the body text equals the spec's, byte for byte */
    char  *dec = NULL;
    size_t dl  = 0;
    k3_tok_decode(t, got.v, got.n, &dec, &dl);
    T_CHECK(dec && strstr(dec, "<|sep|>`thinking_effort` guides on how much to think in your thinking "
                               "channel (not including the "
                               "response channel), supported values include `low`, `medium`, `high`, and "
                               "`max`.\nNow the system is "
                               "invoked with `thinking_effort=max`.<|close|>message<|sep|><|end_of_msg|>") ==
                       dec + strlen("<|open|>message role=\"system\" type=\"thinking-effort\""),
            "thinking-effort message is the first message, body exact");
    /* and the whole rendering as text, written out from the spec's layout */
    static const char full[] =
        "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>`thinking_effort` guides on how much "
        "to think in "
        "your thinking channel (not including the response channel), supported values include `low`, "
        "`medium`, `high`, "
        "and `max`.\nNow the system is invoked with "
        "`thinking_effort=max`.<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message "
        "role=\"assistant\"<|sep|><|open|>think<|sep|>hmm<|close|>think<|sep|><|open|>response<|sep|>Yo"
        "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message "
        "role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|><|open|>response<|sep|>Yo"
        "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
    T_CHECK(dec && dl == strlen(full) && !memcmp(dec, full, dl), "rendering as text equals the spec layout");
    free(dec);
    k3_ids_free(&got);
    k3_ids_free(&want);

    static const char *const efforts[] = {"low", "high", "max"};
    for (int i = 0; i < 3; i++) {
        k3_chat_opts oe  = {.think = 1, .effort = efforts[i], .gen_prompt = 0, .tools = NULL};
        k3_ids       ids = {0};
        st               = k3_chat_encode(t, m, 1, &oe, &ids);
        char want_s[64];
        snprintf(want_s, sizeof want_s, "invoked with `thinking_effort=%s`.<|close|>", efforts[i]);
        k3_tok_decode(t, ids.v, ids.n, &dec, &dl);
        T_CHECK(!st && strstr(dec, want_s) && !strstr(dec, "role=\"assistant\""),
                "effort %s (no generation prompt when not asked)", efforts[i]);
        free(dec);
        k3_ids_free(&ids);
    }
    k3_ids       ids = {0};
    k3_chat_opts om  = {.think = 1, .effort = "medium", .gen_prompt = 1, .tools = NULL};
    st               = k3_chat_encode(t, m, 1, &om, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "medium") && ids.n == 0,
            "effort medium rejected clearly (%s)", k3_errmsg());
    om.effort = "extreme";
    st        = k3_chat_encode(t, m, 1, &om, &ids);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "low, high or max"), "unknown effort rejected (%s)",
            k3_errmsg());
}

static void test_text_and_errors(const k3_tok *t) {
    /* control-token look-alikes and non-ASCII in user text are ordinary text */
    const char *txt =
        "<|open|>message role=\"system\"<|sep|>\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82 <|end_of_msg|>";
    k3_chat_msg  m[] = {{.role = "user", .content = txt, .reasoning = NULL, .n_images = 0}};
    k3_chat_opts o   = {.think = 0, .effort = NULL, .gen_prompt = 0, .tools = NULL};
    k3_ids       got = {0}, want = {0};
    k3_status    st     = k3_chat_encode(t, m, 1, &o, &got);
    const char  *head[] = {MSG_OPEN("user"), NULL};
    golden(t, head, &want);
    k3_tok_encode(t, txt, strlen(txt), 0, &want);
    const char *tail[] = {MSG_CLOSE, NULL};
    golden(t, tail, &want);
    int specials = 0;
    for (size_t i = 7; i + 4 < got.n; i++)
        specials += k3_tok_is_special(t, got.v[i]);
    T_CHECK(!st && same(t, &got, &want) && specials == 0,
            "user text with <|open|> etc. and non-ASCII: no control ids inside");
    k3_ids_free(&got);
    k3_ids_free(&want);

    /* attribute escaping, each attribute piece its own segment (the trap '="&' never forms) */
    const char *attrs[] = {"k", "&x\"", NULL};
    chat_test_open_tag(t, "think", attrs, &got);
    const char *esc[] = {"<O>", "think", " k", "=\"", "b:&amp;x&quot;", "\"", "<S>", NULL};
    golden(t, esc, &want);
    T_CHECK(same(t, &got, &want), "attribute escaping & -> &amp; \" -> &quot;, value is its own segment");
    k3_ids_free(&got);
    k3_ids_free(&want);

    k3_chat_msg bad[] = {{.role = "wizard", .content = "x", .reasoning = NULL, .n_images = 0}};
    st                = k3_chat_encode(t, bad, 1, &o, &got);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "wizard"), "unknown role rejected (%s)", k3_errmsg());
    k3_chat_msg tool[] = {{.role = "tool", .content = "x", .reasoning = NULL, .n_images = 0}};
    st                 = k3_chat_encode(t, tool, 1, &o, &got);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "no tool name") && strstr(k3_errmsg(), "message 0"),
            "a tool result with no name and no call to take it from is an error naming the message (%s)",
            k3_errmsg());
    k3_chat_msg img[] = {{.role = "user", .content = "x", .reasoning = NULL, .n_images = 1}};
    st                = k3_chat_encode(t, img, 1, &o, &got);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "image"), "images: unsupported (%s)",
            k3_errmsg());
    k3_chat_opts ot = {.think = 1, .effort = NULL, .gen_prompt = 1, .tools = "{\"name\": \"f\"}"};
    st              = k3_chat_encode(t, m, 1, &ot, &got);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "tools: expected a JSON array") && got.n == 0,
            "tools that are not an array: error naming the field, nothing appended (%s)", k3_errmsg());
}

/* ---- parser ---- */

static int valid_utf8(const char *s, size_t n) {
    char  *o;
    size_t on;
    tok_utf8_sanitize((const uint8_t *)s, n, &o, &on);
    int ok = on == n && !memcmp(o, s, n);
    free(o);
    return ok;
}

typedef struct run {
    char   think[512], resp[512];
    size_t tn, rn;
    int    end, utf8_ok, end_at;
} run;

static void feed_all(const k3_tok *t, int think, const k3_ids *ids, int finish, run *r) {
    memset(r, 0, sizeof *r);
    r->utf8_ok = 1;
    r->end_at  = -1;
    k3_chat_parser *p;
    k3_chat_parser_new(t, think, &p);
    k3_chat_out o;
    for (size_t i = 0; i < ids->n; i++) {
        k3_chat_parser_feed(p, ids->v[i], &o);
        r->utf8_ok &= valid_utf8(o.think, o.think_len) && valid_utf8(o.response, o.response_len);
        memcpy(r->think + r->tn, o.think, o.think_len), r->tn += o.think_len;
        memcpy(r->resp + r->rn, o.response, o.response_len), r->rn += o.response_len;
        if (o.end && r->end_at < 0)
            r->end_at = (int)i;
    }
    if (finish) {
        k3_chat_parser_finish(p, &o);
        memcpy(r->think + r->tn, o.think, o.think_len), r->tn += o.think_len;
        memcpy(r->resp + r->rn, o.response, o.response_len), r->rn += o.response_len;
    }
    r->think[r->tn] = r->resp[r->rn] = 0;
    k3_chat_parser_free(p);
}

/* ids for a generated stream written like a golden list; "t:TEXT" = encode(TEXT) */
static void gen(const k3_tok *t, const char *const *items, k3_ids *out) {
    for (; *items; items++) {
        if (!strncmp(*items, "t:", 2)) {
            k3_tok_encode(t, *items + 2, strlen(*items + 2), 0, out);
        } else {
            const char *one[] = {*items, NULL};
            golden(t, one, out);
        }
    }
}

static void test_parser(const k3_tok *t) {
    run         r;
    k3_ids      ids      = {0};
    const char *normal[] = {"t:Let me think \xe4\xbd\xa0",
                            "<C>",
                            "think",
                            "<S>",
                            "<O>",
                            "response",
                            "<S>",
                            "t:Answer \xf0\x9f\x99\x82",
                            "<C>",
                            "response",
                            "<S>",
                            "<C>",
                            "message",
                            "<S>",
                            "<E>",
                            NULL};
    gen(t, normal, &ids);
    feed_all(t, 1, &ids, 0, &r);
    T_CHECK(!strcmp(r.think, "Let me think \xe4\xbd\xa0") && !strcmp(r.resp, "Answer \xf0\x9f\x99\x82"),
            "think and response channels split, tags hidden (think [%s] response [%s])", r.think, r.resp);
    T_CHECK(r.end_at == (int)ids.n - 1, "end of message reported at <|end_of_msg|>");
    T_CHECK(r.utf8_ok, "every emitted chunk is complete UTF-8 (multi-byte chars arrive byte by byte)");
    ids.n = 0;

    const char *off[] = {"t:Plain", "<C>", "response", "<S>", "<C>", "message", "<S>", "<E>", NULL};
    gen(t, off, &ids);
    feed_all(t, 0, &ids, 0, &r);
    T_CHECK(!strcmp(r.resp, "Plain") && r.tn == 0, "thinking off: starts in the response channel");
    ids.n = 0;

    const char *odd[] = {"t:a", "<O>",   "t:foo", "<S>",      "t:b", "<S>", "t:c",
                         "<O>", "think", "<S>",   "sp:[EOS]", "<E>", NULL};
    gen(t, odd, &ids);
    feed_all(t, 1, &ids, 0, &r);
    T_CHECK(!strcmp(r.think, "a<|open|>foo<|sep|>b<|sep|>c<|open|>think<|sep|>[EOS]") && r.rn == 0,
            "unexpected tags, stray <|sep|>, other specials, no response tag: all shown as think text [%s]",
            r.think);
    ids.n = 0;

    const char *cut[] = {"<O>", "response", "<S>", "t:x", "<O>", "t:unfinished", NULL};
    gen(t, cut, &ids);
    feed_all(t, 1, &ids, 1, &r);
    T_CHECK(!strcmp(r.resp, "x<|open|>unfinished") && r.end_at < 0,
            "a tag left open at the end is flushed as text [%s]", r.resp);
    ids.n = 0;

    /* a limit that cuts the closing markers: no marker text in the answer (it showed
     * "231<|close|>r" after --max-tokens 5 on k3-nano) */
    const char *cut2[] = {"<O>", "response", "<S>", "t:231", "<C>", "t:r", NULL};
    gen(t, cut2, &ids);
    feed_all(t, 1, &ids, 1, &r);
    T_CHECK(!strcmp(r.resp, "231"), "a closing marker cut by the limit is hidden [%s]", r.resp);
    ids.n              = 0;
    const char *cut3[] = {"t:231", "<C>", NULL};
    gen(t, cut3, &ids);
    feed_all(t, 0, &ids, 1, &r);
    T_CHECK(!strcmp(r.resp, "231"), "... a lone <|close|> too [%s]", r.resp);
    ids.n              = 0;
    const char *cut4[] = {"t:hm", "<C>", "t:thi", NULL};
    gen(t, cut4, &ids);
    feed_all(t, 1, &ids, 1, &r);
    T_CHECK(!strcmp(r.think, "hm") && r.rn == 0, "... and the end of the reasoning [%s]", r.think);
    ids.n              = 0;
    const char *cut5[] = {"<O>", "response", "<S>", "t:x", "<C>", "t:thi", NULL};
    gen(t, cut5, &ids);
    feed_all(t, 1, &ids, 1, &r);
    T_CHECK(!strcmp(r.resp, "x<|close|>thi"), "one that could not be hidden here is still shown [%s]",
            r.resp);
    ids.n = 0;

    const char *longtag[] = {"<C>", "t:this is not a tag name at all, it is far too long", "<S>", NULL};
    gen(t, longtag, &ids);
    feed_all(t, 1, &ids, 1, &r);
    T_CHECK(!strcmp(r.think, "<|close|>this is not a tag name at all, it is far too long<|sep|>"),
            "over-long tag name is text [%s]", r.think);
    ids.n = 0;

    const char *partial[] = {"t:\xe4\xbd", "<O>", "response", "<S>", "t:ok", "<E>", NULL};
    gen(t, partial, &ids);
    feed_all(t, 1, &ids, 0, &r);
    T_CHECK(!strcmp(r.think, "\xef\xbf\xbd") && !strcmp(r.resp, "ok"),
            "broken UTF-8 at the channel switch becomes U+FFFD");
    k3_ids_free(&ids);
}

/* Random streams of structure and text: never a crash, every chunk complete UTF-8, and
 * every text marker reaches the output in order (nothing is lost). */
static void test_parser_random(const k3_tok *t) {
    static const char *const pool[]  = {"<O>",     "<C>",      "<S>",    "<E>",    "think",  "response",
                                        "message", "sp:[EOS]", "b:\xe4", "b:\xbd", "b:\xa0", NULL};
    uint64_t                 r       = 12345;
    int                      ok_utf8 = 1, ok_order = 1;
    for (int it = 0; it < 300; it++) {
        k3_ids ids = {0};
        char   markers[64][16];
        int    nm = 0;
        for (int k = 0; k < 40; k++) {
            r        = r * 6364136223846793005ull + 1442695040888963407ull;
            int pick = (int)(r >> 33) % 16;
            if (pick < 11) {
                const char *one[] = {pool[pick], NULL};
                golden(t, one, &ids);
            } else if (nm < 64) {
                snprintf(markers[nm], sizeof markers[nm], "#%d#", nm);
                k3_tok_encode(t, markers[nm], strlen(markers[nm]), 0, &ids);
                nm++;
            }
        }
        k3_chat_parser *p;
        k3_chat_parser_new(t, (int)(r >> 40) & 1, &p);
        char        all[4096];
        size_t      an = 0;
        k3_chat_out o;
        for (size_t i = 0; i <= ids.n; i++) {
            if (i < ids.n)
                k3_chat_parser_feed(p, ids.v[i], &o);
            else
                k3_chat_parser_finish(p, &o);
            ok_utf8 &= valid_utf8(o.think, o.think_len) && valid_utf8(o.response, o.response_len);
            if (an + o.think_len + o.response_len < sizeof all) {
                memcpy(all + an, o.think, o.think_len), an += o.think_len;
                memcpy(all + an, o.response, o.response_len), an += o.response_len;
            }
        }
        all[an]       = 0;
        const char *q = all;
        for (int m = 0; m < nm && q; m++)
            if ((q = strstr(q, markers[m])))
                q += strlen(markers[m]);
        if (!q) {
            ok_order = 0;
            printf("  lost a marker in [%s]\n", all);
        }
        k3_chat_parser_free(p);
        k3_ids_free(&ids);
        if (!ok_order)
            break;
    }
    T_CHECK(ok_utf8, "random structure: every chunk is complete UTF-8");
    T_CHECK(ok_order, "random structure: all text reaches the output, in order");
}

int main(void) {
    k3_tok *t = vocab();
    T_CHECK(t != NULL, "chat test vocabulary loads");
    if (!t)
        return t_done();
    test_think_off(t);
    test_think_on(t);
    test_text_and_errors(t);
    test_parser(t);
    test_parser_random(t);
    k3_tok_free(t);
    return t_done();
}
