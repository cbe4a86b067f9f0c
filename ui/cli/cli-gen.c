/* cli-gen.c: one-shot generation, `k3chat MODEL_DIR --ids "1 2 3" | --prompt TEXT`.
 *
 * --ids feeds raw token ids, generates up to --max-tokens (default 256; 0: until eos or a full
 * context) and prints the generated ids on one line, decimal, separated by single spaces, then a
 * newline. Generation stops before eos_token_id (which is not printed; the last generated token
 * is not fed, so K3_LOGITS holds prompt + generated - 1 rows). The reference comparison tests
 * rely on exactly this output.
 * --prompt encodes [--system] + the user message with the chat encoder (--think, --effort),
 * generates, and runs the output parser: the response channel streams to stdout, the think
 * channel to stderr. It stops at <|end_of_msg|>, eos, --max-tokens or the context capacity.
 * Sampling defaults come from generation_config.json; --temp/--top-p/--seed override.
 * --json-schema FILE / --json: from the response channel on, every id is drawn under the token
 * mask of the schema's grammar (src/grammar), so stdout gets exactly one JSON document; when
 * generation stops before the document is complete the status is 1 with the reason.
 * Errors go to stderr with exit status 1.
 */
#include "cli.h"
#include "loadprog.h"
#include "text.h"
#include "k3.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The model's text goes out through the one escaping function (text.h); st holds a character
 * cut between two tokens. */
static void emit(FILE *f, txt_esc *st, const char *t, size_t n) {
    if (n) {
        txt_term_put(f, st, t, n);
        fflush(f);
    }
}

/* One step of the parser's output: the reasoning to stderr, the answer to stdout. The reasoning
 * ends with a newline once the answer starts (*thought: 1 while it is open, 2 after), so the two
 * stay apart when both streams go to one file (2>&1). */
static void emit_out(const k3_chat_out *out, txt_esc *err, txt_esc *res, int *thought) {
    emit(stderr, err, out->think, out->think_len);
    if (out->think_len > 0 && !*thought)
        *thought = 1;
    if (out->response_len > 0 && *thought == 1) {
        txt_term_end(stderr, err);
        fputc('\n', stderr);
        fflush(stderr);
        *thought = 2;
    }
    emit(stdout, res, out->response, out->response_len);
}

/* --prompt: [system], user message -> chat encoder -> generate -> output parser; the
 * response channel to stdout, the think channel to stderr. Stops at <|end_of_msg|>,
 * eos_token_id, --max-tokens or the context capacity. */
/* --json-schema FILE's text into *b (nothing without the option), read before the model loads
 * (minutes for the release) so that a wrong file name is said at once. 0, or -1 with the reason
 * said. */
static int read_schema(const ui_opts *o, k3_buf *b) {
    memset(b, 0, sizeof *b);
    if (!o->json_schema)
        return 0;
    FILE *f = fopen(o->json_schema, "rb");
    if (!f) {
        txt_term_printf(stderr, "k3chat: --json-schema: cannot open %s: %s\n", o->json_schema,
                        strerror(errno));
        return -1;
    }
    int err = k3_buf_read(b, f); /* a directory: EISDIR */
    fclose(f);
    if (err) {
        txt_term_printf(stderr, "k3chat: --json-schema: cannot read %s: %s\n", o->json_schema, strerror(err));
        free(b->p);
        memset(b, 0, sizeof *b);
        return -1;
    }
    return 0;
}

/* The grammar of --json-schema (its text: schema, read_schema) or --json (NULL when neither). 0,
 * or -1 with the reason said. */
static int load_grammar(const ui_opts *o, const k3_buf *schema, const k3_tok *tok, int32_t n_vocab,
                        int32_t eos, k3_gvocab **voc, k3_grammar **g) {
    *voc = NULL;
    *g   = NULL;
    if (!o->json_schema && !o->json)
        return 0;
    k3_status st;
    if (!(st = k3_gvocab_new(tok, n_vocab, eos, voc)))
        st = o->json_schema ? k3_grammar_json_schema(*voc, schema->p ? schema->p : "", schema->n, NULL, g)
                            : k3_grammar_json_object(*voc, g);
    if (st) {
        txt_term_printf(stderr, "k3chat: %s%s: %s\n", o->json_schema ? "--json-schema " : "--json",
                        o->json_schema ? o->json_schema : "", k3_errmsg()); /* it quotes the file */
        k3_gvocab_free(*voc);
        *voc = NULL;
        return -1;
    }
    return 0;
}

/* The schema compiled once before the model loads (minutes for the release), on the directory's
 * tokenizer alone, so that a schema the grammar refuses is said at once, as a missing file is;
 * the grammar the answer runs under is compiled again on the model's vocabulary (its width and
 * eos). A tokenizer that does not load is left to the model's load, which names it. 0, or -1
 * with the reason said. */
static int check_schema(const ui_opts *o, const k3_buf *schema) {
    k3_tok     *tok = NULL;
    k3_gvocab  *voc = NULL;
    k3_grammar *g   = NULL;
    if (!o->json_schema || k3_tok_load(o->dir, NULL, &tok) != K3_OK)
        return 0;
    int rc = load_grammar(o, schema, tok, k3_tok_n_vocab(tok), -1, &voc, &g);
    k3_grammar_free(g);
    k3_gvocab_free(voc);
    k3_tok_free(tok);
    return rc;
}

static int oneshot_prompt(const ui_opts *o, const k3_buf *schema, k3_model *m, k3_session *s,
                          const k3_sampler_params *sp) {
    const k3_tok   *tok  = NULL;
    k3_gvocab      *voc  = NULL;
    k3_grammar     *gram = NULL;
    k3_gmatch      *gm   = NULL;
    uint64_t       *mask = NULL;
    k3_chat_parser *prs  = NULL;
    k3_sampler     *smp  = NULL;
    k3_ids          ids = {0}, tclose = {0};
    k3_status       st;
    int             rc = 1, think = o->think >= 0 ? o->think : 1, i_close = 0, n_think = 0;
    k3_chat_msg     msgs[2];
    size_t          nm = 0;
    if (o->system && *o->system)
        msgs[nm++] = (k3_chat_msg){.role = "system", .content = o->system};
    msgs[nm++]        = (k3_chat_msg){.role = "user", .content = o->prompt};
    k3_chat_opts  opt = {.think = think, .effort = o->effort, .gen_prompt = 1};
    k3_model_info info;
    k3_model_get_info(m, &info);
    if ((st = k3_model_tok(m, &tok)) || (st = k3_chat_encode(tok, msgs, nm, &opt, &ids)) ||
        (st = k3_chat_parser_new(tok, think, &prs)) ||
        (think && o->think_budget > 0 && (st = k3_chat_think_close(tok, &tclose)))) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    if (!(smp = k3_sampler_new(sp))) {
        fprintf(stderr, "k3chat: out of memory\n");
        goto done;
    }
    if (load_grammar(o, schema, tok, info.vocab, info.eos_id, &voc, &gram))
        goto done;
    if (gram &&
        ((st = k3_gmatch_new(gram, &gm)) || !(mask = malloc((size_t)k3_gvocab_words(voc) * sizeof *mask)))) {
        txt_term_printf(stderr, "k3chat: %s\n", st ? k3_errmsg() : "out of memory");
        goto done;
    }
    if ((st = k3_session_feed(s, ids.v, (int)ids.n))) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    int max_tokens    = o->max_tokens > 0 ? o->max_tokens : info.max_ctx; /* 0: no limit, as in the chat */
    k3_chat_out out   = {0};
    int         ended = 0, thought = 0, cut = 0;
    txt_esc     esc_out = {0}, esc_err = {0};
    const char *why = "max tokens";
    for (int i = 0, last = -1; i < max_tokens && !ended; i++) {
        int     chan = k3_chat_parser_channel(prs), masked = gm && chan == K3_CHAN_RESPONSE;
        int32_t t;
        if (masked && (st = k3_gmatch_mask(gm, mask)))
            break;
        if (tclose.n && i_close < (int)tclose.n &&
            (i_close > 0 || (chan == K3_CHAN_THINK && n_think >= o->think_budget &&
                             !(last >= 0 && k3_tok_is_special(tok, last)))))
            t = tclose.v[i_close++]; /* --think-budget is spent: close the reasoning */
        else
            t = k3_sampler_sample_masked(smp, k3_session_logits(s), info.vocab, masked ? mask : NULL);
        n_think += chan == K3_CHAN_THINK;
        last = t;
        if (t < 0) {
            why = "the grammar allows no token here";
            break;
        }
        if (masked && (st = k3_gmatch_accept(gm, t)))
            break;
        if ((st = k3_chat_parser_feed(prs, t, &out)))
            break;
        emit_out(&out, &esc_err, &esc_out, &thought);
        ended = out.end || t == info.eos_id;
        cut   = !ended && i + 1 == max_tokens && o->max_tokens > 0;
        if (ended || i + 1 == max_tokens)
            break;
        if (k3_session_pos(s) >= info.max_ctx) {
            why = "the context is full";
            fprintf(stderr, "\nk3chat: stopped: the context (K3_MAXT=%d) is full\n", info.max_ctx);
            break;
        }
        if ((st = k3_session_feed(s, &t, 1)))
            break;
    }
    if (!ended) {
        k3_chat_parser_finish(prs, &out);
        emit_out(&out, &esc_err, &esc_out, &thought);
    }
    txt_term_end(stderr, &esc_err);
    txt_term_end(stdout, &esc_out);
    if (thought == 1)
        fputc('\n', stderr);
    printf("\n");
    if (cut) /* as line mode says it (plain.c report_cut) */
        fprintf(stderr, "k3chat: the answer was cut off at the --max-tokens limit (%d tokens)\n", max_tokens);
    if (st)
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
    else if (gm && !k3_gmatch_complete(gm))
        fprintf(stderr, "k3chat: stopped before the JSON document was complete (%s)\n",
                k3_chat_parser_channel(prs) != K3_CHAN_RESPONSE ? "still thinking" : why);
    else
        rc = 0;
done:
    free(mask);
    k3_gmatch_free(gm);
    k3_grammar_free(gram);
    k3_gvocab_free(voc);
    k3_sampler_free(smp);
    k3_chat_parser_free(prs);
    k3_ids_free(&ids);
    k3_ids_free(&tclose);
    return rc;
}

/* --ids: raw ids in, generated ids out (one line). */
static int oneshot_ids(const ui_opts *o, k3_model *m, k3_session *s, const k3_sampler_params *sp) {
    k3_ids parsed = {0};
    if (k3_ids_parse(o->ids, INT32_MAX, &parsed)) {
        txt_term_printf(stderr, "k3chat: --ids: %s\n", k3_errmsg());
        k3_ids_free(&parsed);
        return 2;
    }
    int32_t      *ids = parsed.v;      /* k3_ids owns a malloc'ed array: take it */
    int           n   = (int)parsed.n; /* > 0: cli_oneshot checked the text before loading */
    k3_model_info info;
    k3_model_get_info(m, &info);
    k3_sampler *smp = k3_sampler_new(sp);
    if (!smp) {
        fprintf(stderr, "k3chat: out of memory\n");
        free(ids);
        return 1;
    }
    /* unset: 256; 0: no limit, as everywhere (it used to generate nothing), up to a full context */
    int       max_tokens = o->max_tokens > 0 ? o->max_tokens : o->max_tokens == 0 ? INT_MAX : 256;
    k3_status st         = k3_session_feed(s, ids, n);
    int       full       = 0;
    for (int i = 0; !st && i < max_tokens; i++) {
        int32_t t = k3_sampler_sample(smp, k3_session_logits(s), info.vocab);
        if (t == info.eos_id)
            break;
        printf(i ? " %d" : "%d", (int)t);
        fflush(stdout);
        if (i + 1 < max_tokens && k3_session_pos(s) >= info.max_ctx) {
            full = 1;
            break;
        }
        if (i + 1 < max_tokens)
            st = k3_session_feed(s, &t, 1);
    }
    printf("\n");
    fflush(stdout);
    if (full) /* as --prompt says it */
        fprintf(stderr, "k3chat: stopped: the context (K3_MAXT=%d) is full\n", info.max_ctx);
    if (st)
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
    k3_sampler_free(smp);
    free(ids);
    return st ? 1 : 0;
}

int cli_oneshot(const ui_opts *o) {
    int         rc = 1;
    k3_params   par;
    k3_model   *m = NULL;
    k3_session *s = NULL;
    k3_status   st;
    if (o->ids && o->prompt) {
        fprintf(stderr, "k3chat: --ids and --prompt exclude each other\n");
        return 2;
    }
    if (o->ids) { /* a typo in the ids is said before a load that may take minutes */
        k3_ids    pre = {0};
        k3_status ps  = k3_ids_parse(o->ids, INT32_MAX, &pre);
        int       n   = (int)pre.n;
        k3_ids_free(&pre);
        if (ps != K3_OK || n == 0) {
            txt_term_printf(stderr, "k3chat: --ids: %s\n", ps != K3_OK ? k3_errmsg() : "no token ids given");
            return 2;
        }
    }
    k3_buf schema;
    if (read_schema(o, &schema))
        return 1;
    if (check_schema(o, &schema)) {
        free(schema.p);
        return 1;
    }
    if ((st = k3_params_default(&par))) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        free(schema.p);
        return 1;
    }
    st = load_model_verbose(o->dir, &par, &m);
    if (st || (st = k3_session_new(m, &s))) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    k3_sampler_params sp;
    k3_sampler_params_default(m, &sp);
    if (!isnan(o->temp))
        sp.temp = o->temp;
    if (!isnan(o->top_p))
        sp.top_p = o->top_p;
    sp.seed = o->has_seed ? o->seed : (uint64_t)time(NULL);
    rc      = o->ids ? oneshot_ids(o, m, s, &sp) : oneshot_prompt(o, &schema, m, s, &sp);
done:
    free(schema.p);
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}
