/* conv-gen.c: rendering a conversation to token ids, the prompt cache, and the turn
 * runner (k3_conv_generate).
 *
 * DESIGN
 * Rendering goes through the chat encoder (k3_chat_encode, chat-format.c) with the
 * conversation's think mode and effort, with the model's tokenizer (k3_model_tok, read
 * once at the model's open); c->render keeps what rendering memoizes for it.
 *
 * Prompt cache. c->cache_ids holds exactly the ids the session has processed (the
 * session's position equals n_cache). A new turn renders the whole history R and keeps
 * the longest processed prefix of it:
 *   1. the session's state when the processed ids are a prefix of R (the usual case:
 *      the previous turn's prompt + its generated tokens, then the new user message);
 *   2. otherwise the saved snapshot (k3_session_save) with the longest ids that are a
 *      prefix of R: one after each prompt's prefill (/retry samples again from it with no
 *      prefill at all, its logits are in the snapshot) and one at the end of each turn
 *      (/undo continues from the turn before);
 *   3. otherwise a reset and a full prefill.
 * Comparing ids (not message counts) makes this right after any edit with no
 * bookkeeping; the cost is one render per turn. Generated ids that the encoder would
 * tokenize differently (rare for a trained model) only shorten the reused prefix.
 *
 * Cancellation: k3_conv_cancel sets an atomic flag (checked before every token) and
 * cancels the session's current feed, so a long prefill stops within a layer.
 */
#include "conv-impl.h"
#include "json.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== chat encoder ============================================================== */

/* The parts of the history rendered by an earlier call (see "the rendering kept between turns"). */
typedef struct render_memo {
    k3_ids  ids;   /* E + the parts of msgs[0, n)                                 */
    int    *first; /* (cap_first) first[i], i < n: the first message of i's segment */
    size_t *at;    /* (cap_at) at[i]: ids.n where i's segment's part starts       */
    int     n, cap_first, cap_at;
    size_t  last_n, tail_n; /* the last call's: the last segment's part; T less E (the prompt's end) */
    /* the key: what E and every part depend on */
    const k3_tok *tok;
    int           think, tools_on;
    char          effort[sizeof(((k3_conv_settings *)0)->effort)];
    char         *tools;
} render_memo;

typedef struct conv_render {
    char         *dir; /* the directory of the model whose tokenizer it was built for */
    const k3_tok *tok; /* that model's tokenizer (borrowed)                            */
    render_memo   memo;
} conv_render;

static void memo_free(render_memo *mm);

static void store_clear(conv_store *sn) {
    for (int i = 0; i < sn->n_snaps; i++) {
        k3_snapshot_free(sn->snaps[i].snap);
        free(sn->snaps[i].ids);
    }
    sn->n_snaps = 0;
    sn->bytes   = 0;
}

conv_store *conv_store_new(void) {
    conv_store *sn = k3_calloc(1, sizeof *sn);
    if (sn)
        sn->refs = 1;
    return sn;
}

void conv_store_unref(conv_store *sn) {
    if (sn && --sn->refs == 0) {
        store_clear(sn);
        free(sn);
    }
}

void k3_conv_drop_cache(k3_conv *c) {
    store_clear(c->sn);
    c->n_cache    = 0;
    c->cache_sess = NULL;
}

void k3_conv_share_prompt_cache(k3_conv *c, k3_conv *with) {
    if (c->sn == with->sn)
        return;
    conv_store_unref(c->sn);
    c->sn = with->sn;
    c->sn->refs++;
}

void k3_conv_set_cache_owner(k3_conv *c, uint64_t owner) {
    if (c->owner != owner) { /* the live state was built for the other owner */
        c->n_cache    = 0;
        c->cache_sess = NULL;
    }
    c->owner = owner;
}

static void gen_free(k3_conv *c) {
    conv_render *r = c->render;
    if (r) {
        memo_free(&r->memo);
        free(r->dir);
        free(r);
    }
    c->render     = NULL;
    c->n_cache    = 0; /* the snapshots go with the store (k3_conv_free) */
    c->cache_sess = NULL;
    free(c->cache_ids);
    c->cache_ids = NULL;
    c->cap_cache = 0;
}

/* m's tokenizer (k3_model_tok), and c->render set up for it: a new one the first time and for
 * another model (its directory or its tokenizer: a freed model's address may come back), its
 * memo started afresh. */
k3_status conv_get_tok(k3_conv *c, const k3_model *m, const k3_tok **out) {
    k3_model_info info;
    const k3_tok *tok;
    k3_status     st = k3_model_tok(m, &tok);
    if (st)
        return st;
    k3_model_get_info(m, &info);
    conv_render *r = c->render;
    if (r && r->tok == tok && !strcmp(r->dir, info.dir)) {
        *out = tok;
        return K3_OK;
    }
    conv_render *nr  = k3_calloc(1, sizeof *nr);
    char        *dir = k3_strdup(info.dir);
    if (!nr || !dir) {
        free(nr);
        free(dir);
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    }
    if (r) {
        memo_free(&r->memo);
        free(r->dir);
        free(r);
    }
    nr->dir     = dir;
    nr->tok     = tok;
    c->render   = nr;
    c->gen_free = gen_free;
    *out        = tok;
    return K3_OK;
}

/* The encoder's view of one message (shallow). */
static k3_chat_msg chat_msg(const k3_msg *m) {
    return (k3_chat_msg){.role         = conv_role_str(m->role),
                         .content      = m->content,
                         .reasoning    = m->reasoning,
                         .tool_calls   = m->tool_calls,
                         .n_tool_calls = m->n_tool_calls,
                         .name         = m->tool_name,
                         .tool_call_id = m->tool_call_id,
                         .tools        = m->tools,
                         .parts        = m->parts,
                         .n_parts      = m->n_parts};
}

void conv_chat_msgs(const k3_conv *c, int from, int to, k3_chat_msg *out) {
    for (int i = from; i < to; i++)
        out[i - from] = chat_msg(&c->msgs[i]);
}

void conv_chat_opts(const k3_conv *c, int gen_prompt, k3_chat_opts *o) {
    *o = (k3_chat_opts){.think           = c->set.think,
                        .effort          = c->set.effort,
                        .gen_prompt      = gen_prompt,
                        .tools           = c->tools,
                        .tool_choice     = c->set.tool_choice[0] ? c->set.tool_choice : NULL,
                        .response_format = c->rf_type[0] ? c->rf_type : NULL,
                        .response_schema = c->rf_schema};
}

k3_status k3_conv_render(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out) {
    k3_chat_msg *cm = k3_calloc((size_t)c->n_msgs + 1, sizeof *cm);
    if (!cm)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory rendering %d messages", c->n_msgs);
    conv_chat_msgs(c, 0, c->n_msgs, cm);
    k3_chat_opts o;
    conv_chat_opts(c, gen_prompt, &o);
    k3_status st = k3_chat_encode(tok, cm, (size_t)c->n_msgs, &o, out);
    free(cm);
    return st;
}

static k3_status tb_add(k3_buf *b, const char *s, size_t n) {
    return k3_buf_add(b, s, n) ? k3_err(K3_ERR_NOMEM, "conversation: out of memory for the reply") : K3_OK;
}

/* ---- what the model saw: generated replies as generated -------------------------
 *
 * The spec renders an assistant turn from its text. For a turn generated here that is
 * also what the model saw whenever its tokens are the canonical encoding of its text,
 * which a trained model's nearly always are; a test model's random tokens are not. So
 * the prompt for generation renders a reply whose stored ids decode (through the output
 * parser) to exactly its stored text, in the think mode it was generated with, as:
 * generation prompt + those ids (+ the closing tags when it stopped before the end of
 * message). Then the previous turn's decode state is always a prefix of the next prompt.
 * Only when the ids also have the encoder's structure (same_structure): control ids that the
 * parser showed as text would otherwise reach the prompt from a transcript's token_ids.
 * k3_conv_render (tools, --chat-ids) stays exactly the spec's encoding. */

static k3_status push_tag(const k3_tok *tok, const char *ctl, const char *tag, k3_ids *out) {
    k3_status st = k3_ids_push(out, k3_tok_special(tok, ctl));
    if (!st)
        st = k3_tok_encode(tok, tag, strlen(tag), 0, out);
    if (!st)
        st = k3_ids_push(out, k3_tok_special(tok, "<|sep|>"));
    return st;
}

/* Do the parser's complete calls equal m's (names and argument strings)? */
static int same_calls(const k3_chat_parser *p, const k3_msg *m) {
    int n = 0;
    for (int k = 0; k < k3_chat_parser_n_calls(p); k++) {
        const char *name, *args;
        if (k3_chat_parser_call(p, k, &name, &args) != 1)
            return 0; /* an unfinished call: render the stored calls instead */
        if (n >= m->n_tool_calls || strcmp(name, m->tool_calls[n].name) ||
            strcmp(args, m->tool_calls[n].arguments ? m->tool_calls[n].arguments : ""))
            return 0;
        n++;
    }
    return n == m->n_tool_calls;
}

/* The structure of ids as the model reads it: each of the four structural ids (<|open|>,
 * <|close|>, <|sep|>, <|end_of_msg|>: k3-chat.md 2) and the bytes of each tag (what follows an
 * <|open|> or <|close|> up to the next structural id), length-prefixed; the text between tags
 * is left out, and with it any other special id there ([BOS], a reserved id: what the model
 * generated, which cannot open or close a message). Two renderings with the same structure
 * differ only in their text's tokens. */
static k3_status structure(const k3_tok *tok, const int32_t *v, size_t n, k3_buf *sig) {
    int32_t   open = k3_tok_special(tok, "<|open|>"), close = k3_tok_special(tok, "<|close|>");
    int32_t   sep = k3_tok_special(tok, "<|sep|>"), eom = k3_tok_special(tok, "<|end_of_msg|>");
    int       in_tag = 0;
    size_t    run    = 0; /* where the current tag's length goes */
    k3_status st;
    for (size_t i = 0; i < n; i++) {
        size_t      len;
        const char *piece = k3_tok_piece(tok, v[i], &len);
        if (!piece)
            return k3_err(K3_ERR_ARG, "conversation: token id %d is outside the vocabulary", v[i]);
        if (v[i] == open || v[i] == close || v[i] == sep || v[i] == eom) {
            char rec[1 + sizeof(int32_t) + sizeof(uint32_t)] = {'S'};
            memcpy(rec + 1, &v[i], sizeof(int32_t));
            in_tag = v[i] == open || v[i] == close;
            run    = sig->n + 1 + sizeof(int32_t);
            if ((st = tb_add(sig, rec, in_tag ? sizeof rec : 1 + sizeof(int32_t))))
                return st;
        } else if (in_tag) {
            uint32_t tl;
            memcpy(&tl, sig->p + run, sizeof tl);
            tl += (uint32_t)len;
            memcpy(sig->p + run, &tl, sizeof tl);
            if ((st = tb_add(sig, piece, len)))
                return st;
        }
    }
    return K3_OK;
}

/* Do the ids X (the reply as generated, with G and the closing tags) have the structure of
 * the encoder's rendering of m alone? The ids decode to the text also when they hold
 * structural ids that the output parser shows as their letters (a stray
 * <|close|>message role="system"<|sep|>): ids the encoder writes as text. A transcript's
 * token_ids can be forged so, and such a reply is rendered from its text instead. */
static k3_status same_structure(const k3_tok *tok, const k3_msg *m, int think, size_t n_pre, const k3_ids *X,
                                int *same) {
    k3_chat_msg  cm = chat_msg(m);
    k3_chat_opts o  = {.think = think, .gen_prompt = 0};
    k3_ids       F  = {0};
    k3_buf       a = {0}, b = {0};
    k3_status    st = k3_chat_encode(tok, &cm, 1, &o, &F);
    K3_ASSERT(st || F.n >= n_pre); /* the encoding is a concatenation */
    if (!st)
        st = structure(tok, F.v + n_pre, F.n - n_pre, &a);
    if (!st)
        st = structure(tok, X->v, X->n, &b);
    *same = !st && a.n == b.n && (!a.n || !memcmp(a.p, b.p, a.n));
    if (st && st != K3_ERR_NOMEM)
        st = K3_OK; /* not the encoder's (bad arguments): render_part says why, naming the message */
    k3_ids_free(&F);
    free(a.p);
    free(b.p);
    return st;
}

/* Appends G + m's ids (+ closing tags) when m qualifies (see above); *used = 1 then.
 * tools: the reply was generated with tool calls parsed. n_pre: the length of the encoding of
 * no message with thinking as think (the effort message), which same_structure skips. */
static k3_status faithful_reply(const k3_tok *tok, const k3_msg *m, int think, int tools, const k3_ids *G,
                                size_t n_pre, k3_ids *out, int *used) {
    *used = 0;
    if (m->role != K3_ROLE_ASSISTANT || !m->ids || m->n_ids <= 0 || !m->has_stats || m->stats.think != think)
        return K3_OK;
    k3_chat_parser *p;
    k3_status       st = k3_chat_parser_new(tok, think, &p);
    if (st)
        return st;
    k3_chat_parser_set_tools(p, tools || m->n_tool_calls > 0);
    k3_buf      th = {0}, re = {0};
    k3_chat_out o = {0};
    int         i;
    for (i = 0; i < m->n_ids && !o.end; i++)
        if (k3_chat_parser_feed(p, m->ids[i], &o) || tb_add(&th, o.think, o.think_len) ||
            tb_add(&re, o.response, o.response_len))
            break;
    int ok = i == m->n_ids, chan = k3_chat_parser_channel(p);
    if (ok && !o.end) {
        k3_chat_parser_finish(p, &o);
        ok = !tb_add(&th, o.think, o.think_len) && !tb_add(&re, o.response, o.response_len);
    }
    ok = ok && !strcmp(th.p ? th.p : "", m->reasoning ? m->reasoning : "") &&
         !strcmp(re.p ? re.p : "", m->content) && same_calls(p, m) && (o.end || !m->n_tool_calls);
    k3_chat_parser_free(p);
    free(th.p);
    free(re.p);
    if (!ok)
        return K3_OK;
    size_t n0 = out->n;
    for (size_t k = 0; !st && k < G->n; k++)
        st = k3_ids_push(out, G->v[k]);
    for (int k = 0; !st && k < m->n_ids; k++)
        st = k3_ids_push(out, m->ids[k]);
    if (!st && !o.end) { /* close what the model left open, as the encoder would */
        if (chan == K3_CHAN_THINK) {
            if (!(st = push_tag(tok, "<|close|>", "think", out)))
                st = push_tag(tok, "<|open|>", "response", out);
        }
        if (!st && !(st = push_tag(tok, "<|close|>", "response", out)) &&
            !(st = push_tag(tok, "<|close|>", "message", out)))
            st = k3_ids_push(out, k3_tok_special(tok, "<|end_of_msg|>"));
    }
    int same = 0;
    if (!st) { /* kept only when their structure is the encoder's */
        k3_ids X = {.v = out->v + n0, .n = out->n - n0};
        st       = same_structure(tok, m, think, n_pre, &X, &same);
    }
    if (st || !same)
        out->n = n0;
    *used = !st && same;
    return st;
}

/* Appends the rendering of msgs[i, j) alone: the encoding of msgs[a, j) minus that of
 * msgs[a, i), where a (<= i) starts the context the messages need (the assistant message
 * whose calls a run of tool results answers), and minus the prefix E (declarations,
 * effort) every encoding starts with. The encoding is a concatenation, so this is exact. */
static k3_status render_part(const k3_conv *c, const k3_tok *tok, int a, int i, int j, const k3_chat_opts *o,
                             size_t e_n, k3_ids *one, k3_ids *out) {
    k3_chat_msg *cm = k3_calloc((size_t)(j - a) + 1, sizeof *cm);
    if (!cm)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory rendering");
    conv_chat_msgs(c, a, j, cm);
    size_t    skip = e_n;
    k3_status st   = K3_OK;
    one->n         = 0;
    if (a < i) {
        st     = k3_chat_encode(tok, cm, (size_t)(i - a), o, one);
        skip   = one->n;
        one->n = 0;
    }
    if (!st)
        st = k3_chat_encode(tok, cm, (size_t)(j - a), o, one);
    free(cm);
    K3_ASSERT(st || one->n >= skip);
    for (size_t k = skip; !st && k < one->n; k++)
        st = k3_ids_push(out, one->v[k]);
    return st;
}

/* What each part of a rendering is measured against: E, the encoding of no message
 * ([declarations, effort]); G, E + the generation prompt; T, E + [tool-choice] +
 * [response-format] + [the generation prompt when asked]; P, the effort message alone (what
 * same_structure's one-message encodings start with). The encoding is a concatenation: E + each
 * message's part + the rest of T. */
typedef struct render_ctx {
    k3_chat_opts oa; /* tool_choice auto, no response format, no prompt: each part's encoding */
    k3_ids       E, G, T, P, one;
    int          tools; /* replies were generated with tool calls parsed */
} render_ctx;

static void ctx_free(render_ctx *x) {
    k3_ids_free(&x->E);
    k3_ids_free(&x->G);
    k3_ids_free(&x->T);
    k3_ids_free(&x->P);
    k3_ids_free(&x->one);
}

static k3_status ctx_init(const k3_conv *c, const k3_tok *tok, int gen_prompt, render_ctx *x) {
    k3_chat_opts o;
    conv_chat_opts(c, 0, &o);
    *x                    = (render_ctx){.oa = o};
    x->oa.tool_choice     = NULL;
    x->oa.response_format = NULL;
    k3_status st          = k3_chat_encode(tok, NULL, 0, &x->oa, &x->E);
    x->oa.gen_prompt      = 1;
    if (!st)
        st = k3_chat_encode(tok, NULL, 0, &x->oa, &x->G);
    o.gen_prompt = gen_prompt;
    if (!st)
        st = k3_chat_encode(tok, NULL, 0, &o, &x->T);
    x->oa.gen_prompt = 0;
    K3_ASSERT(st || (x->G.n >= x->E.n && x->T.n >= x->E.n &&
                     (!x->E.n || !memcmp(x->G.v, x->E.v, x->E.n * sizeof *x->E.v))));
    k3_chat_opts po = {.think = c->set.think};
    if (!st)
        st = k3_chat_encode(tok, NULL, 0, &po, &x->P);
    x->tools = c->tools && strcmp(c->set.tool_choice, "none");
    if (st)
        ctx_free(x);
    return st;
}

/* Appends the part of the segment that starts at message i: a message, or a run of tool results
 * (rendered with the calls they answer); *j gets the index after it. */
static k3_status render_seg(const k3_conv *c, const k3_tok *tok, render_ctx *x, int i, int *j, k3_ids *out) {
    int    used;
    k3_ids g     = {.v = x->G.v + x->E.n, .n = x->G.n - x->E.n};
    *j           = i + 1;
    k3_status st = faithful_reply(tok, &c->msgs[i], c->set.think, x->tools, &g, x->P.n, out, &used);
    if (st || used)
        return st;
    int a = i;
    if (c->msgs[i].role == K3_ROLE_TOOL) { /* a run of results, with the calls they answer */
        while (*j < c->n_msgs && c->msgs[*j].role == K3_ROLE_TOOL)
            (*j)++;
        while (a > 0 && c->msgs[a].role != K3_ROLE_ASSISTANT)
            a--;
        if (c->msgs[a].role != K3_ROLE_ASSISTANT)
            a = i;
    }
    return render_part(c, tok, a, i, *j, &x->oa, x->E.n, &x->one, out);
}

/* The prompt generation uses: k3_conv_render, with qualifying replies as generated. */
k3_status conv_render_prompt(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out) {
    int any = 0;
    for (int i = 0; i < c->n_msgs; i++)
        any |= c->msgs[i].role == K3_ROLE_ASSISTANT && c->msgs[i].n_ids > 0;
    if (!any)
        return k3_conv_render(c, tok, gen_prompt, out);
    render_ctx x;
    size_t     n0 = out->n;
    k3_status  st = ctx_init(c, tok, gen_prompt, &x);
    if (st)
        return st;
    st = k3_ids_append(out, x.E.v, x.E.n);
    for (int i = 0, j; !st && i < c->n_msgs; i = j)
        st = render_seg(c, tok, &x, i, &j, out);
    if (!st) /* [tool-choice] + [generation prompt] */
        st = k3_ids_append(out, x.T.v + x.E.n, x.T.n - x.E.n);
    if (st)
        out->n = n0;
    ctx_free(&x);
    return st;
}

/* ==== the rendering kept between turns ==========================================
 *
 * A chat turn needs the rendering of the whole history three times: the context figure before
 * it (k3_conv_context), the prompt (k3_conv_generate), the figure after it. Encoding is the cost,
 * linear in the history (each reply is also checked against its ids: k3-bench history measured
 * 1.5 s a turn at 10,000 exchanges), and all but the newest messages render as they did the turn
 * before. So the parts
 * of msgs[0, n) are kept (render_memo, in c->render), E first, and a rendering encodes only the
 * messages after them; the last segment is never kept (a run of tool results can still grow).
 * Any change to messages [i, ...) (conv_touched, k3_conv_clear, a load) cuts the memo back to
 * before i's segment (conv_render_forget); a change of what every part depends on (the
 * tokenizer, think, effort, the declared tools) starts it again. Copying and comparing ids
 * remains linear in the history, at memcpy's speed. Conversations that never ask for the
 * context figure (the server's, one per request) keep no memo: one full encode is cheaper. */

static void memo_free(render_memo *mm) {
    k3_ids_free(&mm->ids);
    free(mm->first);
    free(mm->at);
    free(mm->tools);
    memset(mm, 0, sizeof *mm);
}

void conv_render_forget(k3_conv *c, int i) {
    conv_render *r = c->render;
    if (!r || i >= r->memo.n)
        return;
    int k         = i > 0 ? r->memo.first[i] : 0;
    r->memo.ids.n = r->memo.at[k];
    r->memo.n     = k;
}

/* The memo for c's settings and tok: kept when its key is theirs, else emptied and keyed anew. */
static k3_status memo_key(render_memo *mm, const k3_conv *c, const k3_tok *tok) {
    int tools_on = c->tools && strcmp(c->set.tool_choice, "none");
    if (mm->tok == tok && mm->think == c->set.think && mm->tools_on == tools_on &&
        !strcmp(mm->effort, c->set.effort) && !mm->tools == !c->tools &&
        (!c->tools || !strcmp(mm->tools, c->tools)))
        return K3_OK;
    char *tools = c->tools ? k3_strdup(c->tools) : NULL;
    if (c->tools && !tools)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    free(mm->tools);
    mm->tools    = tools;
    mm->tok      = tok;
    mm->think    = c->set.think;
    mm->tools_on = tools_on;
    snprintf(mm->effort, sizeof mm->effort, "%s", c->set.effort);
    mm->n     = 0;
    mm->ids.n = 0;
    return K3_OK;
}

k3_status conv_render_kept(k3_conv *c, const k3_tok *tok, k3_ids *out, int *n) {
    render_memo *mm = &((conv_render *)c->render)->memo;
    render_ctx   x;
    k3_ids       last = {0};
    k3_status    st   = ctx_init(c, tok, 1, &x);
    if (st)
        return st;
    st = memo_key(mm, c, tok);
    if (!st && mm->n == 0) {
        mm->ids.n = 0;
        st        = k3_ids_append(&mm->ids, x.E.v, x.E.n);
    }
    for (int i = mm->n, j; !st && i < c->n_msgs; i = j) {
        size_t at = mm->ids.n;
        if ((st = render_seg(c, tok, &x, i, &j, &mm->ids))) {
            mm->ids.n = at;
            break;
        }
        if (j == c->n_msgs) { /* the last segment: out of the memo */
            st        = k3_ids_append(&last, mm->ids.v + at, mm->ids.n - at);
            mm->ids.n = at;
            break;
        }
        int *first = k3_grow(mm->first, &mm->cap_first, (size_t)j, sizeof *first, 64);
        if (first)
            mm->first = first;
        size_t *ats = first ? k3_grow(mm->at, &mm->cap_at, (size_t)j, sizeof *ats, 64) : NULL;
        if (ats)
            mm->at = ats;
        if (!first || !ats) {
            mm->ids.n = at;
            st        = k3_err(K3_ERR_NOMEM, "conversation: out of memory");
            break;
        }
        for (int k = i; k < j; k++)
            mm->first[k] = i, mm->at[k] = at;
        mm->n = j;
    }
    if (!st && out) {
        size_t n0 = out->n;
        if ((st = k3_ids_append(out, mm->ids.v, mm->ids.n)) || (st = k3_ids_append(out, last.v, last.n)) ||
            (st = k3_ids_append(out, x.T.v + x.E.n, x.T.n - x.E.n)))
            out->n = n0;
    }
    if (!st) {
        mm->last_n = last.n;
        mm->tail_n = x.T.n - x.E.n;
        *n         = (int)(mm->ids.n + last.n + x.T.n - x.E.n);
    }
    ctx_free(&x);
    k3_ids_free(&last);
    return st;
}

k3_status k3_conv_context(k3_conv *c, k3_model *m, int *used, int *capacity) {
    const k3_tok *tok;
    k3_model_info info;
    int           n  = 0;
    k3_status     st = conv_get_tok(c, m, &tok);
    if (!st)
        st = conv_render_kept(c, tok, NULL, &n);
    if (st)
        return st;
    k3_model_get_info(m, &info);
    *used     = n;
    *capacity = info.max_ctx;
    return K3_OK;
}

/* Tokens the next turn's prompt needs when the first `drop` exchanges are left out: what comes
 * before the first exchange (the system prompt, a greeting: never dropped) and messages
 * [start[drop], n) rendered as a view (shallow copies). */
static k3_status need_without(const k3_conv *c, const k3_tok *tok, const int *start, int n_exch, int drop,
                              int *need) {
    int       lead = n_exch ? start[0] : c->n_msgs, from = drop < n_exch ? start[drop] : c->n_msgs;
    k3_msg   *v    = k3_calloc((size_t)(lead + c->n_msgs - from) + 1, sizeof *v);
    k3_conv  *view = k3_calloc(1, sizeof *view);
    k3_ids    r    = {0};
    k3_status st   = v && view ? K3_OK : k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    if (!st) {
        int n = 0;
        for (int i = 0; i < lead; i++)
            v[n++] = c->msgs[i];
        for (int i = from; i < c->n_msgs; i++)
            v[n++] = c->msgs[i];
        view->msgs      = v;
        view->n_msgs    = n;
        view->set       = c->set;
        view->tools     = c->tools; /* the declarations and the response format go with every prompt */
        view->rf_schema = c->rf_schema;
        memcpy(view->rf_type, c->rf_type, sizeof view->rf_type);
        st    = conv_render_prompt(view, tok, 1, &r);
        *need = (int)r.n;
    }
    k3_ids_free(&r);
    free(v);
    free(view);
    return st;
}

/* Whether the messages from the user message at `from` on read what came before it: a run of tool
 * results after it with no reply between is encoded against the last reply's calls (the names,
 * the order and the index they go on from), which a prompt without the exchanges before `from`
 * does not have, so its parts in the kept rendering are not its parts there. */
static int reads_back(const k3_conv *c, int from) {
    for (int i = from + 1; i < c->n_msgs && c->msgs[i].role != K3_ROLE_ASSISTANT; i++)
        if (c->msgs[i].role == K3_ROLE_TOOL)
            return 1;
    return 0;
}

k3_status k3_conv_fit(k3_conv *c, k3_model *m, int room, int apply, k3_fit_info *fi) {
    const k3_tok *tok;
    k3_model_info info;
    memset(fi, 0, sizeof *fi);
    k3_status st = conv_get_tok(c, m, &tok);
    if (st)
        return st;
    k3_model_get_info(m, &info);
    int *start = k3_calloc((size_t)c->n_msgs + 1, sizeof *start), n_exch = 0;
    if (!start)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    for (int i = 0; i < c->n_msgs; i++)
        if (c->msgs[i].role == K3_ROLE_USER)
            start[n_exch++] = i;
    fi->capacity    = info.max_ctx;
    fi->n_exchanges = n_exch;
    /* need(drop) from the kept rendering's offsets: the whole prompt less the parts of the exchanges
     * dropped (an exchange's parts start at its user message and depend on nothing before it), so
     * the search costs one rendering, not one per probe; where the first exchange kept reads back
     * (reads_back: tool results with no reply between them and its user message), the probe renders
     * that prompt as a view, exactly, and one it cannot render (a result whose name came from a
     * dropped call) does not fit. The figure reported is the view's too. */
    int lo = 0, hi = n_exch, need = 0; /* the answer is in [lo, hi]: need(hi) fits or hi = n_exch */
    int hi_need = -1;                  /* need(hi) when the probe rendered it                      */
    if (!(st = conv_render_kept(c, tok, NULL, &fi->used)) && fi->used + room > info.max_ctx) {
        const render_memo *mm  = &((conv_render *)c->render)->memo;
        size_t             end = mm->ids.n + mm->last_n;              /* where the parts end */
        size_t at0 = start[0] < mm->n ? mm->at[start[0]] : mm->ids.n; /* E + the messages before them */
        lo         = 1;
        while (lo < hi) { /* need() only shrinks as exchanges go */
            int mid = lo + (hi - lo) / 2, exact = mid < n_exch && reads_back(c, start[mid]);
            if (exact) {
                if ((st = need_without(c, tok, start, n_exch, mid, &need)) == K3_ERR_ARG)
                    need = info.max_ctx + 1, st = K3_OK;
                else if (st)
                    break;
            } else {
                size_t from = mid == n_exch ? end : start[mid] < mm->n ? mm->at[start[mid]] : mm->ids.n;
                need        = (int)(at0 + (end - from) + mm->tail_n);
            }
            if (need + room <= info.max_ctx)
                hi = mid, hi_need = exact ? need : -1;
            else
                lo = mid + 1;
        }
    } else {
        hi = 0;
    }
    if (!st && hi_need >= 0)
        fi->used_after = hi_need;
    else if (!st && hi)
        st = need_without(c, tok, start, n_exch, hi, &fi->used_after);
    else if (!st)
        fi->used_after = fi->used;
    fi->drop = hi;
    if (!st && apply && hi > 0) {
        int n = (hi < n_exch ? start[hi] : c->n_msgs) - start[0];
        conv_since_removed(c, start[0], n);
        for (int i = start[0]; i < start[0] + n; i++)
            conv_msg_clear(&c->msgs[i]);
        memmove(&c->msgs[start[0]], &c->msgs[start[0] + n],
                (size_t)(c->n_msgs - start[0] - n) * sizeof *c->msgs);
        c->n_msgs -= n;
        conv_touched(c, start[0]);
        fi->dropped_msgs = n;
    }
    free(start);
    return st;
}

/* ==== prompt cache ============================================================== */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Records that the session processed ids[0, n) after the cached ones (n may be the part
 * of a feed that was applied before a cancel or error). */
static void cache_append(k3_conv *c, const int32_t *ids, int n) {
    void *p   = c->cache_ids;
    int   bad = n > 0 && conv_grow(&p, &c->cap_cache, c->n_cache + n, sizeof *ids, 1024, "cached token ids");
    c->cache_ids = p;
    if (n <= 0 || bad) {
        if (n > 0) /* cannot record: forget everything (the next turn re-prefills) */
            c->cache_sess = NULL;
        return;
    }
    memcpy(c->cache_ids + c->n_cache, ids, (size_t)n * sizeof *ids);
    c->n_cache += n;
}

/* Drops snapshot i (the least recently used one, when called for room). */
static void snap_drop(conv_store *sn, int i) {
    k3_snapshot_free(sn->snaps[i].snap);
    free(sn->snaps[i].ids);
    sn->bytes -= sn->snaps[i].bytes;
    memmove(&sn->snaps[i], &sn->snaps[i + 1], (size_t)(sn->n_snaps - i - 1) * sizeof sn->snaps[0]);
    sn->n_snaps--;
}

static void snap_drop_lru(conv_store *sn) {
    int lru = 0;
    for (int i = 1; i < sn->n_snaps; i++)
        if (sn->snaps[i].used < sn->snaps[lru].used)
            lru = i;
    snap_drop(sn, lru);
}

/* Evicts least recently used snapshots until `extra` more of `bytes` fit (count, budget). */
static void snap_room(conv_store *sn, int extra, size_t bytes) {
    while (sn->n_snaps > 0 &&
           (sn->n_snaps + extra > sn->max_snaps || (sn->budget && sn->bytes + bytes > sn->budget)))
        snap_drop_lru(sn);
}

k3_status k3_conv_set_prompt_cache(k3_conv *c, int max_snapshots, double mb) {
    char err[160]; /* the ranges of K3_CONV_SNAPSHOTS and K3_CONV_SNAPSHOT_MB */
    if (k3_setting_check(K3_SETTING_CONV_SNAPSHOTS, K3_SRC_API, max_snapshots, err, sizeof err) ||
        k3_setting_check(K3_SETTING_CONV_SNAPSHOT_MB, K3_SRC_API, mb, err, sizeof err))
        return k3_err(K3_ERR_ARG, "prompt cache: %s", err);
    c->sn->max_snaps = max_snapshots;
    c->sn->budget    = (size_t)(mb * 1e6);
    snap_room(c->sn, 0, 0);
    return K3_OK;
}

/* Saves the session's state with the ids that produced it; the least recently used
 * snapshots go when the count or the byte budget is reached. Failure (memory) only
 * costs a later re-prefill. */
static void snap_take(k3_conv *c, k3_session *s) {
    conv_store *sn = c->sn;
    if (c->cache_sess != s || c->n_cache == 0 || sn->max_snaps == 0)
        return;
    for (int i = 0; i < sn->n_snaps; i++) /* already saved */
        if (sn->snaps[i].owner == c->owner && sn->snaps[i].n == c->n_cache &&
            !memcmp(sn->snaps[i].ids, c->cache_ids, (size_t)c->n_cache * 4)) {
            sn->snaps[i].used = ++sn->clock;
            return;
        }
    conv_snap ns = {0};
    ns.ids       = k3_malloc((size_t)c->n_cache * sizeof *ns.ids);
    if (!ns.ids || k3_session_save(s, &ns.snap) != K3_OK) {
        free(ns.ids);
        K3_LOG_DEBUG("%s: no snapshot at %d tokens", __func__, c->n_cache);
        return;
    }
    memcpy(ns.ids, c->cache_ids, (size_t)c->n_cache * sizeof *ns.ids);
    ns.n     = c->n_cache;
    ns.owner = c->owner;
    ns.bytes = k3_snapshot_bytes(ns.snap) + (size_t)ns.n * sizeof *ns.ids;
    ns.used  = ++sn->clock;
    if (sn->budget && ns.bytes > sn->budget) { /* bigger than the whole budget */
        k3_snapshot_free(ns.snap);
        free(ns.ids);
        return;
    }
    snap_room(sn, 1, ns.bytes);
    sn->snaps[sn->n_snaps++] = ns;
    sn->bytes += ns.bytes;
}

/* Brings the session to the longest usable prefix of R (see DESIGN) and returns its
 * length k: the caller feeds R[k, n). k == n only when the state's logits are those of
 * R's last position (a snapshot taken right after prefilling R: /retry). */
static int cache_prepare(k3_conv *c, k3_session *s, const int32_t *R, int n) {
    conv_store *sn   = c->sn;
    int         live = c->cache_sess == s && k3_session_pos(s) == c->n_cache && c->n_cache <= n &&
                       common_prefix(c->cache_ids, c->n_cache, R, n) == c->n_cache &&
                       (c->n_cache < n || k3_session_logits(s))
                           ? c->n_cache
                           : 0;
    int         best = -1;
    for (int i = 0; i < sn->n_snaps; i++)
        if (sn->snaps[i].owner == c->owner && sn->snaps[i].n > live && sn->snaps[i].n <= n &&
            common_prefix(sn->snaps[i].ids, sn->snaps[i].n, R, n) == sn->snaps[i].n &&
            (best < 0 || sn->snaps[i].n > sn->snaps[best].n))
            best = i;
    if (best < 0 && live > 0)
        return live;
    if (best >= 0 && k3_session_restore(s, sn->snaps[best].snap) == K3_OK &&
        (sn->snaps[best].n < n || k3_session_logits(s))) {
        sn->snaps[best].used = ++sn->clock;
        c->cache_sess        = s;
        c->n_cache           = 0;
        cache_append(c, sn->snaps[best].ids, sn->snaps[best].n);
        if (c->cache_sess == s)
            return c->n_cache;
    }
    k3_session_reset(s);
    c->cache_sess = s;
    c->n_cache    = 0;
    return 0;
}

/* ==== the turn runner ============================================================ */

void k3_conv_cancel(k3_conv *c) {
    atomic_store(&c->cancel, 1);
    k3_session *s = atomic_load(&c->active);
    if (s)
        k3_session_cancel(s);
    k3_conv *child = atomic_load(&c->child);
    if (child)
        k3_conv_cancel(child);
}

k3_status k3_conv_force_reply(k3_conv *c, const int32_t *ids, int n) {
    int32_t *p = NULL;
    if (n > 0 && !(p = k3_malloc((size_t)n * sizeof *p)))
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    if (n > 0)
        memcpy(p, ids, (size_t)n * sizeof *p);
    free(c->forced);
    c->forced   = p;
    c->n_forced = n > 0 ? n : 0;
    return K3_OK;
}

void k3_conv_set_turn_seed(k3_conv *c, uint64_t seed) {
    c->next_seed     = seed;
    c->has_next_seed = 1;
}

/* Seed of the next turn: the settings' seed for the first, then a fixed odd step per
 * turn, so a retry draws a new answer but a transcript's turns can be re-run exactly. */
static uint64_t turn_seed(k3_conv *c) {
    if (c->has_next_seed) {
        c->has_next_seed = 0;
        return c->next_seed;
    }
    if (!c->n_turns_started)
        return c->set.sampling.seed;
    return (c->set.sampling.seed + 0x9e3779b97f4a7c15ull * c->n_turns_started) &
           INT64_MAX; /* a JSON integer */
}

/* Ids of the reply's tool calls, made as each call opens. */
typedef struct call_ids {
    char (*id)[40]; /* (n, cap) */
    int n, cap;
} call_ids;

/* "call_" + 24 hex digits, unique within the process (time, counter and turn seed mixed). */
static void make_call_id(char out[40], uint64_t seed) {
    static _Atomic uint64_t counter;
    uint64_t                k = atomic_fetch_add(&counter, 1) + 1, t = (uint64_t)(k3_time() * 1e9);
    uint64_t a = (t ^ seed) * 0x9e3779b97f4a7c15ull + k, b = (k * 0xbf58476d1ce4e5b9ull) ^ (a >> 29) ^ seed;
    snprintf(out, 40, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}

/* Streams the parser's output to the callbacks and the message buffers. */
static k3_status emit(const k3_chat_out *o, const k3_conv_callbacks *cb, k3_buf *think, k3_buf *resp,
                      call_ids *ci, uint64_t seed) {
    k3_status st = tb_add(think, o->think, o->think_len);
    if (!st)
        st = tb_add(resp, o->response, o->response_len);
    if (cb && cb->on_think && o->think_len)
        cb->on_think(o->think, o->think_len, cb->ud);
    if (cb && cb->on_response && o->response_len)
        cb->on_response(o->response, o->response_len, cb->ud);
    if (!o->call_name && !o->call_args_len && !o->call_done)
        return st;
    if (o->call_name && o->call_index == ci->n) { /* a new call: its id */
        void *p = k3_grow(ci->id, &ci->cap, (size_t)ci->n + 1, sizeof *ci->id, 4);
        if (!p)
            return k3_err(K3_ERR_NOMEM, "conversation: out of memory for tool calls");
        ci->id = p;
        make_call_id(ci->id[ci->n++], seed);
    }
    if (o->call_index < 0 || o->call_index >= ci->n || !cb || !cb->on_tool_call)
        return st;
    const char *id = ci->id[o->call_index];
    if (o->call_name)
        cb->on_tool_call(o->call_index, id, o->call_name, NULL, 0, 0, cb->ud);
    if (o->call_args_len)
        cb->on_tool_call(o->call_index, id, NULL, o->call_args, o->call_args_len, 0, cb->ud);
    if (o->call_done)
        cb->on_tool_call(o->call_index, id, NULL, NULL, 0, 1, cb->ud);
    return st;
}

/* ---- the steppable turn (k3_conv_gen_*) -------------------------------------------
 *
 * A turn is begin (render, context check, prompt cache), steps, end (the reply appended).
 * A step prepares what the session is fed next: a prefill chunk, or (decode) one sampled
 * token after its callbacks ran; then the feed (one session, or one batched feed of
 * several turns' sessions); then it records what was applied. Sampling, parsing and the
 * callbacks are exactly those of the single-turn loop, so a turn's tokens do not depend
 * on what it was batched with (the engine's batched feed is bit for bit the single one). */

enum { GEN_PREFILL, GEN_DECODE, GEN_DONE };

struct k3_conv_gen {
    k3_conv          *c;
    k3_model         *m;
    k3_session       *s;
    k3_conv_callbacks cb; /* copy; has_cb says whether one was given */
    int               has_cb;
    k3_model_info     info;
    const k3_tok     *tok;
    int32_t          *forced; /* (n_forced) k3_conv_force_reply of this turn */
    int               n_forced;
    k3_ids            R;     /* the prompt (until prefilled)                */
    int               n, k;  /* prompt length; ids of it the session holds   */
    int               chunk; /* prefill ids per step (INT_MAX: all at once)  */
    int               phase; /* GEN_*                                        */
    double            t0, t1;
    k3_turn_stats     ts;
    k3_sampler       *smp;
    k3_chat_parser   *par;
    k3_ids            gen; /* generated ids                                */
    k3_buf            think, resp;
    k3_chat_out       out;
    call_ids          ci;
    int               think_done;
    k3_status         st;   /* the turn's status so far                     */
    const int32_t    *feed; /* this step's feed: (n_feed) ids, pos0 before  */
    int               n_feed, pos0;
    int32_t           tok1;                 /* the decode step's token                      */
    k3_gmatch        *gm;                   /* the answer's grammar position (c->grammar)   */
    uint64_t         *mask;                 /* its token mask                               */
    k3_ids            tclose;               /* set.think_budget: the ids that close the reasoning */
    int               i_close;              /* how many of them were written (0: none yet)     */
    k3_logprob        top[K3_TOP_LOGPROBS]; /* the on_token report's alternatives */
};

/* Engine feed of several sessions (count >= 1), each[i] the status of ss[i]: one batched
 * forward pass (session.c), bit for bit what each k3_session_feed alone gives; a malformed
 * call (never made here: step_batch checks the list) fails every one. */
static void feed_batch(k3_session *const *ss, const int32_t *const *ids, const int *n, int count,
                       k3_status *each) {
    if (count == 1) /* the same thing, without the batch's bookkeeping */
        each[0] = k3_session_feed(ss[0], ids[0], n[0]);
    else
        k3_session_feed_batch(ss, ids, n, count, each);
}

/* The prompt is in: statistics, the /retry snapshot, and the sampler and parser. */
static void prefill_done(k3_conv_gen *g) {
    k3_conv *c      = g->c;
    g->t1           = k3_time();
    g->ts.n_prefill = k3_session_pos(g->s) - g->ts.n_cached;
    g->ts.t_prefill = g->t1 - g->t0;
    if (!g->st && atomic_load(&c->cancel))
        g->st = K3_ABORTED;
    if (!g->st)
        snap_take(c, g->s); /* /retry restarts here */
    g->phase = GEN_DONE;
    if (!g->st && !(g->smp = k3_sampler_new(&g->ts.sampling)))
        g->st = k3_err(K3_ERR_NOMEM, "conversation: out of memory for the sampler");
    if (!g->st) /* the repetition penalty counts the prompt's ids, as vLLM's does */
        g->st = k3_sampler_accept_prompt(g->smp, g->R.v, (int)g->R.n);
    k3_ids_free(&g->R);
    if (g->st)
        return;
    if ((g->st = k3_sampler_set_bias(g->smp, c->bias, c->n_bias)))
        return;
    else if (c->grammar && !g->forced &&
             (!(g->st = k3_gmatch_new(c->grammar, &g->gm)) &&
              !(g->mask = k3_malloc((size_t)k3_grammar_words(c->grammar) * sizeof *g->mask))))
        g->st = k3_err(K3_ERR_NOMEM, "conversation: out of memory for the token mask");
    else if (!(g->st = k3_chat_parser_new(g->tok, c->set.think, &g->par)))
        k3_chat_parser_set_tools(g->par, c->tools && strcmp(c->set.tool_choice, "none"));
    if (!g->st && c->set.think && c->set.think_budget > 0 && !g->forced)
        g->st = k3_chat_think_close(g->tok, &g->tclose);
    g->ts.stop = K3_STOP_EOS;
    if (!g->st)
        g->phase = GEN_DECODE;
}

/* Sets g->feed for this step (n_feed 0: nothing to feed; the turn may be done). */
static void step_prepare(k3_conv_gen *g) {
    k3_conv *c = g->c;
    g->n_feed  = 0;
    if (g->phase == GEN_PREFILL) {
        if (atomic_load(&c->cancel)) {
            prefill_done(g); /* K3_ABORTED */
            return;
        }
        g->feed   = g->R.v + g->k;
        g->n_feed = g->n - g->k < g->chunk ? g->n - g->k : g->chunk;
        g->pos0   = k3_session_pos(g->s);
        return;
    }
    if (g->phase != GEN_DECODE)
        return;
    /* sample until end of message, max_tokens, capacity or cancel */
    g->phase = GEN_DONE;
    if (atomic_load(&c->cancel)) {
        g->st = K3_ABORTED;
        return;
    }
    if ((c->set.max_tokens && (int)g->gen.n >= c->set.max_tokens) ||
        (g->forced && (int)g->gen.n >= g->n_forced)) {
        g->ts.stop = K3_STOP_MAX_TOKENS;
        return;
    }
    const float *logits = k3_session_logits(g->s);
    if (!logits) {
        g->st = k3_err(K3_ERR_ARG, "conversation: the session has no logits to sample from");
        return;
    }
    int32_t id;
    int     chan = k3_chat_parser_channel(g->par);
    k3_sampler_set_adjust(g->smp, chan == K3_CHAN_RESPONSE); /* bias, penalties: the answer's */
    if (g->forced)
        id = g->forced[g->gen.n];
    else if (g->tclose.n && g->i_close < (int)g->tclose.n &&
             (g->i_close > 0 || (chan == K3_CHAN_THINK && g->ts.n_think >= g->c->set.think_budget &&
                                 !(g->gen.n && k3_tok_is_special(g->tok, g->gen.v[g->gen.n - 1])))))
        id = g->tclose.v[g->i_close++]; /* the thinking budget is spent: close the reasoning */
    else if (g->gm && k3_chat_parser_channel(g->par) == K3_CHAN_RESPONSE) { /* reasoning stays free */
        int done;
        if ((g->st = k3_gmatch_mask_bounded(g->gm, g->mask, &done)))
            return;
        if (!done) { /* the grammar's first visits take more than one step's budget: this turn
                      * feeds nothing this step (the others of a batch go on) and goes on with
                      * them at the next; the draw waits for the whole mask */
            g->phase = GEN_DECODE;
            return;
        }
        id = k3_sampler_sample_masked(g->smp, logits, g->info.vocab, g->mask);
        if (id < 0 || (g->st = k3_gmatch_accept(g->gm, id))) {
            g->st =
                g->st ? g->st : k3_err(K3_ERR_ARG, "conversation: the response format allows no token here");
            return;
        }
    } else if ((id = k3_sampler_sample(g->smp, logits, g->info.vocab)) < 0) {
        g->st = k3_err(K3_ERR_NOMEM, "conversation: out of memory for sampling");
        return;
    }
    if (!g->gen.n)
        g->ts.ttft = k3_time() - g->t0;
    int in_think = k3_chat_parser_channel(g->par) == K3_CHAN_THINK;
    int text     = k3_chat_parser_in_text(g->par); /* before the feed: where this id lands */
    if ((g->st = k3_ids_push(&g->gen, id)) || (g->st = k3_chat_parser_feed(g->par, id, &g->out)))
        return;
    /* the answer's text: an ordinary id, or a special one the parser shows as text */
    int content = text && (!k3_tok_is_special(g->tok, id) || g->out.response_len);
    if (content) /* the penalties count the answer's text */
        k3_sampler_accept(g->smp, id);
    if (g->has_cb && g->cb.on_token) {
        k3_gen_token t = {.id = id, .content = content, .tok = g->tok, .logprob = NAN, .top = g->top};
        if (content && c->set.logprobs)
            t.logprob = k3_logprobs(logits, g->info.vocab, id, c->set.top_logprobs, g->top, &t.n_top);
        g->cb.on_token(&t, g->cb.ud);
    }
    if ((g->st = emit(&g->out, g->has_cb ? &g->cb : NULL, &g->think, &g->resp, &g->ci, g->ts.sampling.seed)))
        return;
    g->ts.n_think += in_think;
    if (!g->think_done && k3_chat_parser_channel(g->par) != K3_CHAN_THINK) {
        g->think_done = 1;
        g->ts.t_think = k3_time() - g->t0;
    }
    if (g->out.end || id == g->info.eos_id)
        return;
    if (k3_session_pos(g->s) + 1 > g->info.max_ctx) {
        g->ts.stop = K3_STOP_CONTEXT;
        return;
    }
    g->phase  = GEN_DECODE;
    g->tok1   = id;
    g->feed   = &g->tok1;
    g->n_feed = 1;
    g->pos0   = k3_session_pos(g->s);
}

/* Records the step's feed (the part applied before a cancel or error counts). */
static void step_finish(k3_conv_gen *g, k3_status st) {
    int done = k3_session_pos(g->s) - g->pos0;
    done     = done < 0 ? 0 : done > g->n_feed ? g->n_feed : done;
    cache_append(g->c, g->feed, done);
    if (g->phase == GEN_PREFILL) {
        g->k += done;
        g->st = st;
        if (st || g->k >= g->n)
            prefill_done(g);
    } else if (st) {
        g->st    = st;
        g->phase = GEN_DONE;
    }
}

k3_status k3_conv_gen_begin(k3_conv *c, k3_model *m, k3_session *s, const k3_conv_callbacks *cb, int chunk,
                            k3_conv_gen **out) {
    *out              = NULL;
    int32_t *forced   = c->forced; /* k3_conv_force_reply: for this turn only, whatever happens */
    int      n_forced = c->n_forced;
    c->forced         = NULL;
    c->n_forced       = 0;
    if (!c->n_msgs ||
        (c->msgs[c->n_msgs - 1].role != K3_ROLE_USER && c->msgs[c->n_msgs - 1].role != K3_ROLE_TOOL)) {
        free(forced);
        return k3_err(
            K3_ERR_ARG,
            "conversation: nothing to answer (the last message is not the user's or a tool result)");
    }
    if (chunk < 0) {
        free(forced);
        return k3_err(K3_ERR_ARG, "conversation: prefill chunk %d (expected >= 1, or 0 for the whole prompt)",
                      chunk);
    }
    k3_conv_gen *g = k3_calloc(1, sizeof *g);
    if (!g) {
        free(forced);
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    }
    *g = (k3_conv_gen){.c          = c,
                       .m          = m,
                       .s          = s,
                       .has_cb     = cb != NULL,
                       .forced     = forced,
                       .n_forced   = n_forced,
                       .chunk      = chunk ? chunk : INT_MAX,
                       .phase      = GEN_PREFILL,
                       .think_done = !c->set.think};
    if (cb)
        g->cb = *cb;
    k3_model_get_info(m, &g->info);
    g->t0        = k3_time();
    k3_status st = conv_get_tok(c, m, &g->tok);
    int       n_memo;
    if (!st && ((conv_render *)c->render)->memo.n > 0) /* a chat's: grown by the new messages */
        st = conv_render_kept(c, g->tok, &g->R, &n_memo);
    else if (!st)
        st = conv_render_prompt(c, g->tok, 1, &g->R);
    g->n     = (int)g->R.n;
    int room = g->info.max_ctx - g->n;
    if (!st && room < CONV_MIN_ROOM) {
        int users = 0; /* the advice depends on whether there are older turns to drop */
        for (int i = 0; i < c->n_msgs; i++)
            users += c->msgs[i].role == K3_ROLE_USER;
        /* the prompt as k3_conv_context counts it (the status bar's figure), this message in it */
        st = k3_err(K3_ERR_CONTEXT,
                    "context full: the conversation needs %d tokens (%d with this message, %d more for the "
                    "answer to start) and the context holds %d (K3_MAXT)%s",
                    g->n + CONV_MIN_ROOM, g->n, CONV_MIN_ROOM, g->info.max_ctx,
                    users > 1 ? "; start a new conversation or drop the oldest turns" : "");
    }
    if (st) {
        k3_ids_free(&g->R);
        free(forced);
        free(g);
        return st;
    }
    atomic_store(&c->cancel, 0);
    atomic_store(&c->active, s);

    /* prefill (in steps) what the session has not processed yet */
    g->ts = (k3_turn_stats){
        .n_prompt = g->n, .think = c->set.think, .sampling = c->set.sampling, .has_sampling = 1};
    g->ts.sampling.seed = turn_seed(c);
    c->n_turns_started++;
    k3_session_reset_stats(s);
    g->k           = cache_prepare(c, s, g->R.v, g->n);
    g->ts.n_cached = g->k;
    if (g->k >= g->n)
        prefill_done(g);
    *out = g;
    return K3_OK;
}

k3_status k3_conv_gen_step_batch(k3_conv_gen *const *g, int count) {
    enum { MAX_BATCH = 256 };
    if (count < 1 || count > MAX_BATCH || !g)
        return k3_err(K3_ERR_ARG, "k3_conv_gen_step_batch: %d turns (expected 1..%d)", count, MAX_BATCH);
    for (int i = 0; i < count; i++) {
        if (!g[i])
            return k3_err(K3_ERR_ARG, "k3_conv_gen_step_batch: turn %d is NULL", i);
        for (int j = 0; j < i; j++)
            if (g[j] == g[i] || g[j]->s == g[i]->s || g[j]->c == g[i]->c)
                return k3_err(K3_ERR_ARG, "k3_conv_gen_step_batch: turns %d and %d share a %s", j, i,
                              g[j] == g[i]         ? "turn"
                              : g[j]->s == g[i]->s ? "session"
                                                   : "conversation");
    }
    k3_session    *ss[MAX_BATCH];
    const int32_t *ids[MAX_BATCH];
    int            n[MAX_BATCH], who[MAX_BATCH], nb = 0;
    k3_status      each[MAX_BATCH];
    for (int i = 0; i < count; i++) {
        step_prepare(g[i]);
        if (g[i]->n_feed > 0) {
            ss[nb]    = g[i]->s;
            ids[nb]   = g[i]->feed;
            n[nb]     = g[i]->n_feed;
            who[nb++] = i;
        }
    }
    if (nb > 0)
        feed_batch(ss, ids, n, nb, each);
    for (int b = 0; b < nb; b++)
        step_finish(g[who[b]], each[b]);
    return K3_OK;
}

k3_status k3_conv_gen_step(k3_conv_gen *g) {
    return k3_conv_gen_step_batch(&g, 1);
}

int k3_conv_gen_done(const k3_conv_gen *g) {
    return g->phase == GEN_DONE;
}

size_t k3_conv_gen_grammar_bytes(const k3_conv_gen *g) {
    return g ? k3_gmatch_bytes(g->gm) +
                   (g->gm ? (size_t)k3_grammar_words(g->c->grammar) * sizeof *g->mask : 0)
             : 0;
}

int k3_conv_gen_prefill_left(const k3_conv_gen *g) {
    return g->phase == GEN_PREFILL ? g->n - g->k : 0;
}

k3_status k3_conv_gen_end(k3_conv_gen *g) {
    if (!g)
        return K3_OK;
    k3_conv                 *c  = g->c;
    k3_session              *s  = g->s;
    k3_turn_stats           *ts = &g->ts;
    const k3_conv_callbacks *cb = g->has_cb ? &g->cb : NULL;
    k3_status                st = g->st;
    if (g->phase != GEN_DONE && !st) /* ended early: as a cancel */
        st = K3_ABORTED;
    if (g->phase == GEN_PREFILL) { /* statistics of the part prefilled */
        g->t1         = k3_time();
        ts->n_prefill = k3_session_pos(s) - ts->n_cached;
        ts->t_prefill = g->t1 - g->t0;
        k3_ids_free(&g->R);
    }
    if (g->par && !g->out.end) {
        k3_chat_parser_finish(g->par, &g->out);
        k3_status st2 = emit(&g->out, cb, &g->think, &g->resp, &g->ci, ts->sampling.seed);
        if (!st)
            st = st2;
    }
    double t2 = k3_time();
    if (!g->think_done)
        ts->t_think = t2 - g->t0;
    ts->n_gen = (int)g->gen.n;
    ts->t_gen = t2 - g->t1;
    ts->tok_s = ts->t_gen > 0 ? ts->n_gen / ts->t_gen : 0;
    if (st == K3_ABORTED)
        ts->stop = K3_STOP_CANCEL;
    else if (st)
        ts->stop = K3_STOP_ERROR;
    atomic_store(&c->active, NULL);
    if (!st || st == K3_ABORTED)
        snap_take(c, s); /* /undo of the next turn continues from here */

    /* append the reply (kept, marked, when cancelled or failed part way) and autosave */
    char errmsg[512];
    snprintf(errmsg, sizeof errmsg, "%s", st ? k3_errmsg() : "");
    k3_msg reply = {
        .role        = K3_ROLE_ASSISTANT,
        .content     = g->resp.p ? g->resp.p : (char *)(uintptr_t) "",
        .reasoning   = g->think.n || c->set.think ? (g->think.p ? g->think.p : (char *)(uintptr_t) "") : NULL,
        .interrupted = st != K3_OK,
        .has_stats   = 1,
        .stats       = *ts,
        .ids         = g->gen.v,
        .n_ids       = (int)g->gen.n};
    int           nc    = g->par ? k3_chat_parser_n_calls(g->par) : 0;
    k3_tool_call *calls = nc ? k3_calloc((size_t)nc, sizeof *calls) : NULL;
    for (int q = 0; calls && q < nc && q < g->ci.n; q++) { /* the complete calls */
        const char *name, *args;
        if (k3_chat_parser_call(g->par, q, &name, &args) == 1)
            calls[reply.n_tool_calls++] = (k3_tool_call){.id = g->ci.id[q], .name = name, .arguments = args};
    }
    reply.tool_calls = calls;
    k3_status pst    = nc && !calls ? k3_err(K3_ERR_NOMEM, "conversation: out of memory for tool calls")
                                    : conv_push(c, &reply);
    free(calls);
    free(g->ci.id);
    if (!pst)
        k3_conv_autosave(c); /* failure is kept in k3_conv_autosave_error, the turn stands */
    free(g->forced);
    k3_sampler_free(g->smp);
    k3_gmatch_free(g->gm);
    k3_ids_free(&g->tclose);
    free(g->mask);
    k3_chat_parser_free(g->par);
    k3_ids_free(&g->gen);
    free(g->think.p);
    free(g->resp.p);
    free(g);
    if (pst)
        return pst;
    if (st)
        return k3_err(st, "%s", errmsg);
    return K3_OK;
}

k3_status k3_conv_generate(k3_conv *c, k3_model *m, k3_session *s, const k3_conv_callbacks *cb) {
    k3_conv_gen *g;
    k3_status    st = k3_conv_gen_begin(c, m, s, cb, 0, &g);
    if (st)
        return st;
    while (!k3_conv_gen_done(g))
        k3_conv_gen_step(g);
    return k3_conv_gen_end(g);
}
