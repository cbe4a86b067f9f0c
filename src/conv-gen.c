/* conv-gen.c: rendering a conversation to token ids, the prompt cache, and the turn
 * runner (k3_conv_generate).
 *
 * DESIGN
 * Rendering goes through the chat encoder (k3_chat_encode, chat.c) with the
 * conversation's think mode and effort; the tokenizer is loaded once per model
 * directory and kept in c->render.
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

#include <stdlib.h>
#include <string.h>

#define CONV_MIN_ROOM 8 /* tokens a turn must be able to generate for it to start */

/* ==== chat encoder ============================================================== */

typedef struct conv_render {
    char   *dir; /* model directory the tokenizer came from */
    k3_tok *tok;
} conv_render;

void k3_conv_drop_cache(k3_conv *c) {
    for (int i = 0; i < c->n_snaps; i++) {
        k3_snapshot_free(c->snaps[i].snap);
        free(c->snaps[i].ids);
    }
    c->n_snaps = 0;
    c->n_cache = 0;
    c->cache_sess = NULL;
}

static void gen_free(k3_conv *c) {
    conv_render *r = c->render;
    if (r) {
        k3_tok_free(r->tok);
        free(r->dir);
        free(r);
    }
    c->render = NULL;
    k3_conv_drop_cache(c);
    free(c->cache_ids);
    c->cache_ids = NULL;
    c->cap_cache = 0;
}

/* The tokenizer of m's directory (loaded on first use). */
k3_status conv_get_tok(k3_conv *c, const k3_model *m, k3_tok **out) {
    k3_model_info info;
    k3_model_get_info(m, &info);
    conv_render *r = c->render;
    if (r && !strcmp(r->dir, info.dir)) {
        *out = r->tok;
        return K3_OK;
    }
    k3_tok   *tok;
    k3_status st = k3_tok_load(info.dir, NULL, &tok);
    if (st)
        return st;
    conv_render *nr = k3_calloc(1, sizeof *nr);
    char        *dir = k3_strdup(info.dir);
    if (!nr || !dir) {
        free(nr);
        free(dir);
        k3_tok_free(tok);
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    }
    if (r) {
        k3_tok_free(r->tok);
        free(r->dir);
        free(r);
    }
    nr->dir = dir;
    nr->tok = tok;
    c->render = nr;
    c->gen_free = gen_free;
    *out = tok;
    return K3_OK;
}

k3_status k3_conv_render(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out) {
    k3_chat_msg *cm = k3_calloc((size_t)c->n_msgs + 1, sizeof *cm);
    if (!cm)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory rendering %d messages", c->n_msgs);
    for (int i = 0; i < c->n_msgs; i++) {
        cm[i].role = conv_role_str(c->msgs[i].role);
        cm[i].content = c->msgs[i].content;
        cm[i].reasoning = c->msgs[i].reasoning;
    }
    k3_chat_opts o = {.think = c->set.think, .effort = c->set.effort, .gen_prompt = gen_prompt};
    k3_status    st = k3_chat_encode(tok, cm, (size_t)c->n_msgs, &o, out);
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
 * k3_conv_render (tools, --chat-ids) stays exactly the spec's encoding. */

static k3_status push_tag(const k3_tok *tok, const char *ctl, const char *tag, k3_ids *out) {
    k3_status st = k3_ids_push(out, k3_tok_special(tok, ctl));
    if (!st)
        st = k3_tok_encode(tok, tag, strlen(tag), 0, out);
    if (!st)
        st = k3_ids_push(out, k3_tok_special(tok, "<|sep|>"));
    return st;
}

/* Appends G + m's ids (+ closing tags) when m qualifies (see above); *used = 1 then. */
static k3_status faithful_reply(const k3_tok *tok, const k3_msg *m, int think, const k3_ids *G, k3_ids *out,
                                int *used) {
    *used = 0;
    if (m->role != K3_ROLE_ASSISTANT || !m->ids || m->n_ids <= 0 || !m->has_stats || m->stats.think != think)
        return K3_OK;
    k3_chat_parser *p;
    k3_status       st = k3_chat_parser_new(tok, think, &p);
    if (st)
        return st;
    k3_buf    th = {0}, re = {0};
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
    ok = ok && !strcmp(th.p ? th.p : "", m->reasoning ? m->reasoning : "") && !strcmp(re.p ? re.p : "", m->content);
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
    if (st)
        out->n = n0;
    *used = !st;
    return st;
}

/* The prompt generation uses: k3_conv_render, with qualifying replies as generated. */
k3_status conv_render_prompt(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out) {
    int any = 0;
    for (int i = 0; i < c->n_msgs; i++)
        any |= c->msgs[i].role == K3_ROLE_ASSISTANT && c->msgs[i].n_ids > 0;
    if (!any)
        return k3_conv_render(c, tok, gen_prompt, out);
    /* the encoding is a concatenation: [effort message] + each message + [prompt] */
    const k3_conv_settings *set = &c->set;
    k3_chat_opts      o = {.think = set->think, .effort = set->effort, .gen_prompt = 0};
    k3_ids            E = {0}, G = {0}, one = {0};
    size_t            n0 = out->n;
    k3_status         st = k3_chat_encode(tok, NULL, 0, &o, &E);
    o.gen_prompt = 1;
    if (!st)
        st = k3_chat_encode(tok, NULL, 0, &o, &G);
    K3_ASSERT(st || (G.n >= E.n && (!E.n || !memcmp(G.v, E.v, E.n * sizeof *E.v))));
    if (!st) { /* G = the generation prompt alone */
        memmove(G.v, G.v + E.n, (G.n - E.n) * sizeof *G.v);
        G.n -= E.n;
    }
    for (size_t k = 0; !st && k < E.n; k++)
        st = k3_ids_push(out, E.v[k]);
    o.gen_prompt = 0;
    for (int i = 0; !st && i < c->n_msgs; i++) {
        int used;
        if ((st = faithful_reply(tok, &c->msgs[i], set->think, &G, out, &used)) || used)
            continue;
        const k3_msg *m = &c->msgs[i];
        k3_chat_msg   cm = {.role = conv_role_str(m->role), .content = m->content, .reasoning = m->reasoning};
        one.n = 0;
        if ((st = k3_chat_encode(tok, &cm, 1, &o, &one)))
            break;
        K3_ASSERT(one.n >= E.n && (!E.n || !memcmp(one.v, E.v, E.n * sizeof *E.v)));
        for (size_t k = E.n; !st && k < one.n; k++)
            st = k3_ids_push(out, one.v[k]);
    }
    for (size_t k = 0; !st && gen_prompt && k < G.n; k++)
        st = k3_ids_push(out, G.v[k]);
    if (st)
        out->n = n0;
    k3_ids_free(&E);
    k3_ids_free(&G);
    k3_ids_free(&one);
    return st;
}

k3_status k3_conv_context(k3_conv *c, k3_model *m, int *used, int *capacity) {
    k3_tok       *tok;
    k3_ids        r = {0};
    k3_model_info info;
    k3_status     st = conv_get_tok(c, m, &tok);
    if (!st)
        st = conv_render_prompt(c, tok, 1, &r);
    int           n = (int)r.n;
    k3_ids_free(&r);
    if (st)
        return st;
    k3_model_get_info(m, &info);
    *used = n;
    *capacity = info.max_ctx;
    return K3_OK;
}

/* Tokens the next turn's prompt needs when the first `drop` exchanges are left out: the
 * system prompt and messages [start[drop], n) rendered as a view (shallow copies). */
static k3_status need_without(const k3_conv *c, const k3_tok *tok, const int *start, int n_exch, int drop, int *need) {
    int      sys = k3_conv_system(c) != NULL, from = !drop ? sys : drop < n_exch ? start[drop] : c->n_msgs;
    k3_msg  *v = k3_calloc((size_t)(sys + c->n_msgs - from) + 1, sizeof *v);
    k3_conv *view = k3_calloc(1, sizeof *view);
    k3_ids   r = {0};
    k3_status st = v && view ? K3_OK : k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    if (!st) {
        int n = 0;
        if (sys)
            v[n++] = c->msgs[0];
        for (int i = from; i < c->n_msgs; i++)
            v[n++] = c->msgs[i];
        view->msgs = v;
        view->n_msgs = n;
        view->set = c->set;
        st = conv_render_prompt(view, tok, 1, &r);
        *need = (int)r.n;
    }
    k3_ids_free(&r);
    free(v);
    free(view);
    return st;
}

k3_status k3_conv_fit(k3_conv *c, k3_model *m, int room, int apply, k3_fit_info *fi) {
    k3_tok       *tok;
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
    fi->capacity = info.max_ctx;
    fi->n_exchanges = n_exch;
    int lo = 0, hi = n_exch, need = 0; /* the answer is in [lo, hi]: need(hi) fits or hi = n_exch */
    if (!(st = need_without(c, tok, start, n_exch, 0, &fi->used)) && fi->used + room > info.max_ctx) {
        lo = 1;
        while (!st && lo < hi) { /* need() only shrinks as exchanges go */
            int mid = lo + (hi - lo) / 2;
            if ((st = need_without(c, tok, start, n_exch, mid, &need)))
                break;
            if (need + room <= info.max_ctx)
                hi = mid;
            else
                lo = mid + 1;
        }
    } else {
        hi = 0;
    }
    if (!st && hi)
        st = need_without(c, tok, start, n_exch, hi, &fi->used_after);
    else if (!st)
        fi->used_after = fi->used;
    fi->drop = hi;
    if (!st && apply && hi > 0) {
        int n = (hi < n_exch ? start[hi] : c->n_msgs) - start[0];
        for (int i = start[0]; i < start[0] + n; i++)
            conv_msg_clear(&c->msgs[i]);
        memmove(&c->msgs[start[0]], &c->msgs[start[0] + n], (size_t)(c->n_msgs - start[0] - n) * sizeof *c->msgs);
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

static k3_status cache_reserve(k3_conv *c, int n) {
    if (n <= c->cap_cache)
        return K3_OK;
    int      cap = c->cap_cache ? c->cap_cache : 1024;
    while (cap < n)
        cap *= 2;
    int32_t *p = realloc(c->cache_ids, (size_t)cap * sizeof *p);
    if (!p)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory for a %d-token cache", cap);
    c->cache_ids = p;
    c->cap_cache = cap;
    return K3_OK;
}

/* Records that the session processed ids[0, n) after the cached ones (n may be the part
 * of a feed that was applied before a cancel or error). */
static void cache_append(k3_conv *c, const int32_t *ids, int n) {
    if (n <= 0 || cache_reserve(c, c->n_cache + n)) {
        if (n > 0) /* cannot record: forget everything (the next turn re-prefills) */
            c->cache_sess = NULL;
        return;
    }
    memcpy(c->cache_ids + c->n_cache, ids, (size_t)n * sizeof *ids);
    c->n_cache += n;
}

/* Saves the session's state with the ids that produced it; the oldest snapshot goes when
 * all slots are used. Failure (memory) only costs a later re-prefill. */
static void snap_take(k3_conv *c, k3_session *s) {
    if (c->cache_sess != s || c->n_cache == 0 || c->max_snaps == 0)
        return;
    for (int i = 0; i < c->n_snaps; i++) /* already saved */
        if (c->snaps[i].n == c->n_cache && !memcmp(c->snaps[i].ids, c->cache_ids, (size_t)c->n_cache * 4))
            return;
    conv_snap ns = {0};
    ns.ids = k3_malloc((size_t)c->n_cache * sizeof *ns.ids);
    if (!ns.ids || k3_session_save(s, &ns.snap) != K3_OK) {
        free(ns.ids);
        K3_LOG_DEBUG("%s: no snapshot at %d tokens", __func__, c->n_cache);
        return;
    }
    memcpy(ns.ids, c->cache_ids, (size_t)c->n_cache * sizeof *ns.ids);
    ns.n = c->n_cache;
    if (c->n_snaps == c->max_snaps) {
        k3_snapshot_free(c->snaps[0].snap);
        free(c->snaps[0].ids);
        memmove(&c->snaps[0], &c->snaps[1], (size_t)(c->max_snaps - 1) * sizeof c->snaps[0]);
        c->n_snaps--;
    }
    c->snaps[c->n_snaps++] = ns;
}

/* Brings the session to the longest usable prefix of R (see DESIGN) and returns its
 * length k: the caller feeds R[k, n). k == n only when the state's logits are those of
 * R's last position (a snapshot taken right after prefilling R: /retry). */
static int cache_prepare(k3_conv *c, k3_session *s, const int32_t *R, int n) {
    int live = c->cache_sess == s && k3_session_pos(s) == c->n_cache && c->n_cache <= n &&
                       common_prefix(c->cache_ids, c->n_cache, R, n) == c->n_cache &&
                       (c->n_cache < n || k3_session_logits(s))
                   ? c->n_cache
                   : 0;
    int best = -1;
    for (int i = 0; i < c->n_snaps; i++)
        if (c->snaps[i].n > live && c->snaps[i].n <= n &&
            common_prefix(c->snaps[i].ids, c->snaps[i].n, R, n) == c->snaps[i].n &&
            (best < 0 || c->snaps[i].n > c->snaps[best].n))
            best = i;
    if (best < 0 && live > 0)
        return live;
    if (best >= 0 && k3_session_restore(s, c->snaps[best].snap) == K3_OK &&
        (c->snaps[best].n < n || k3_session_logits(s))) {
        c->cache_sess = s;
        c->n_cache = 0;
        cache_append(c, c->snaps[best].ids, c->snaps[best].n);
        if (c->cache_sess == s)
            return c->n_cache;
    }
    k3_session_reset(s);
    c->cache_sess = s;
    c->n_cache = 0;
    return 0;
}

/* Feeds ids through the cache; a partial feed (cancel, error) is recorded as applied. */
static k3_status cache_feed(k3_conv *c, k3_session *s, const int32_t *ids, int n) {
    int       pos0 = k3_session_pos(s);
    k3_status st = k3_session_feed(s, ids, n);
    int       done = k3_session_pos(s) - pos0;
    cache_append(c, ids, done < 0 ? 0 : done > n ? n : done);
    return st;
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

void k3_conv_set_turn_seed(k3_conv *c, uint64_t seed) {
    c->next_seed = seed;
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
    return (c->set.sampling.seed + 0x9e3779b97f4a7c15ull * c->n_turns_started) & INT64_MAX; /* a JSON integer */
}

/* Streams the parser's output to the callbacks and the message buffers. */
static k3_status emit(const k3_chat_out *o, const k3_conv_callbacks *cb, k3_buf *think, k3_buf *resp) {
    k3_status st = tb_add(think, o->think, o->think_len);
    if (!st)
        st = tb_add(resp, o->response, o->response_len);
    if (cb && cb->on_think && o->think_len)
        cb->on_think(o->think, o->think_len, cb->ud);
    if (cb && cb->on_response && o->response_len)
        cb->on_response(o->response, o->response_len, cb->ud);
    return st;
}

k3_status k3_conv_generate(k3_conv *c, k3_model *m, k3_session *s, const k3_conv_callbacks *cb) {
    if (!c->n_msgs || c->msgs[c->n_msgs - 1].role != K3_ROLE_USER)
        return k3_err(K3_ERR_ARG, "conversation: nothing to answer (the last message is not the user's)");
    k3_model_info info;
    k3_model_get_info(m, &info);
    double    t0 = k3_time();
    k3_tok   *tok;
    k3_ids    R = {0};
    k3_status st = conv_get_tok(c, m, &tok);
    if (!st)
        st = conv_render_prompt(c, tok, 1, &R);
    if (st) {
        k3_ids_free(&R);
        return st;
    }
    int n = (int)R.n, room = info.max_ctx - n;
    if (room < CONV_MIN_ROOM) {
        k3_ids_free(&R);
        int users = 0; /* the advice depends on whether there are older turns to drop */
        for (int i = 0; i < c->n_msgs; i++)
            users += c->msgs[i].role == K3_ROLE_USER;
        return k3_err(K3_ERR_CONTEXT, "context full: the conversation needs %d tokens and the context holds %d (K3_MAXT)%s",
                      n + CONV_MIN_ROOM, info.max_ctx,
                      users > 1 ? "; start a new conversation or drop the oldest turns" : "");
    }
    atomic_store(&c->cancel, 0);
    atomic_store(&c->active, s);

    /* 1. prefill what the session has not processed yet */
    k3_turn_stats ts = {.n_prompt = n, .think = c->set.think, .sampling = c->set.sampling, .has_sampling = 1};
    ts.sampling.seed = turn_seed(c);
    c->n_turns_started++;
    k3_session_reset_stats(s);
    int k = cache_prepare(c, s, R.v, n);
    ts.n_cached = k;
    if (k < n && !atomic_load(&c->cancel))
        st = cache_feed(c, s, R.v + k, n - k);
    double t1 = k3_time();
    ts.n_prefill = k3_session_pos(s) - k;
    ts.t_prefill = t1 - t0;
    if (!st && atomic_load(&c->cancel))
        st = K3_ABORTED;
    if (!st)
        snap_take(c, s); /* /retry restarts here */
    k3_ids_free(&R);

    /* 2. sample until end of message, max_tokens, capacity or cancel */
    k3_sampler     *smp = st ? NULL : k3_sampler_new(&ts.sampling);
    k3_chat_parser *par = NULL;
    k3_ids          gen = {0};
    k3_buf        think = {0}, resp = {0};
    k3_chat_out     out;
    if (!st && !smp)
        st = k3_err(K3_ERR_NOMEM, "conversation: out of memory for the sampler");
    if (!st)
        st = k3_chat_parser_new(tok, c->set.think, &par);
    ts.stop = K3_STOP_EOS;
    int think_done = !c->set.think;
    while (!st) {
        if (atomic_load(&c->cancel)) {
            st = K3_ABORTED;
            break;
        }
        if (c->set.max_tokens && (int)gen.n >= c->set.max_tokens) {
            ts.stop = K3_STOP_MAX_TOKENS;
            break;
        }
        const float *logits = k3_session_logits(s);
        if (!logits) {
            st = k3_err(K3_ERR_ARG, "conversation: the session has no logits to sample from");
            break;
        }
        int32_t id = k3_sampler_sample(smp, logits, info.vocab);
        if (!gen.n)
            ts.ttft = k3_time() - t0;
        int in_think = k3_chat_parser_channel(par) == K3_CHAN_THINK;
        if ((st = k3_ids_push(&gen, id)) || (st = k3_chat_parser_feed(par, id, &out)) ||
            (st = emit(&out, cb, &think, &resp)))
            break;
        ts.n_think += in_think;
        if (!think_done && k3_chat_parser_channel(par) != K3_CHAN_THINK) {
            think_done = 1;
            ts.t_think = k3_time() - t0;
        }
        if (out.end || id == info.eos_id)
            break;
        if (k3_session_pos(s) + 1 > info.max_ctx) {
            ts.stop = K3_STOP_CONTEXT;
            break;
        }
        st = cache_feed(c, s, &id, 1);
    }
    if (par && !out.end) {
        k3_chat_parser_finish(par, &out);
        k3_status st2 = emit(&out, cb, &think, &resp);
        if (!st)
            st = st2;
    }
    double t2 = k3_time();
    if (!think_done)
        ts.t_think = t2 - t0;
    ts.n_gen = (int)gen.n;
    ts.t_gen = t2 - t1;
    ts.tok_s = ts.t_gen > 0 ? ts.n_gen / ts.t_gen : 0;
    if (st == K3_ABORTED)
        ts.stop = K3_STOP_CANCEL;
    else if (st)
        ts.stop = K3_STOP_ERROR;
    atomic_store(&c->active, NULL);
    if (!st || st == K3_ABORTED)
        snap_take(c, s); /* /undo of the next turn continues from here */

    /* 3. append the reply (kept, marked, when cancelled or failed part way) and autosave */
    char      errmsg[512];
    snprintf(errmsg, sizeof errmsg, "%s", st ? k3_errmsg() : "");
    k3_msg reply = {.role = K3_ROLE_ASSISTANT, .content = resp.p ? resp.p : (char *)(uintptr_t)"",
                    .reasoning = think.n || c->set.think ? (think.p ? think.p : (char *)(uintptr_t)"") : NULL,
                    .interrupted = st != K3_OK, .has_stats = 1, .stats = ts, .ids = gen.v,
                    .n_ids = (int)gen.n};
    k3_status pst = conv_push(c, &reply);
    if (!pst)
        k3_conv_autosave(c); /* failure is kept in k3_conv_autosave_error, the turn stands */
    k3_sampler_free(smp);
    k3_chat_parser_free(par);
    k3_ids_free(&gen);
    free(think.p);
    free(resp.p);
    if (pst)
        return pst;
    if (st)
        return k3_err(st, "%s", errmsg);
    return K3_OK;
}
