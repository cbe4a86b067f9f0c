/* mock.c: a scripted engine for testing the UI without a model (K3_MOCK=FILE).
 *
 * The script is plain text, one directive per line ('#' starts a comment line):
 *     load MS          simulate loading the model for MS milliseconds (progress events)
 *     load-until FILE  the load, after its progress, waits until FILE exists (a test creates it
 *                      once what it does during the load is seen: no guess of how long that takes)
 *     delay MS         milliseconds between tokens (default 20)
 *     prefill MS       milliseconds before the first token (default 0)
 *     hold MS          this turn stays open MS milliseconds after its last token (Ctrl-C ends it)
 *     stall MS         this turn's worker blocks MS milliseconds after its first token, deaf to
 *                      Ctrl-C and quit (as in a read from a hung file system or server)
 *     stall-end MS     this turn's worker blocks so after its end of turn is autosaved, before it
 *                      tells the UI the turn is done
 *     stall-rescue MS  this turn's worker blocks after its first token until a quit's rescue took
 *                      the turn (ue_rescue), or MS milliseconds, then ends the turn
 *     autosave         the conversation autosaves (in $XDG_DATA_HOME/k3chat), as a model's does
 *     think TEXT       reasoning text of the current turn (several lines join with newlines)
 *     response TEXT    answer text of the current turn
 *     call NAME ARGS   a tool call of the current turn, after its text: ARGS (the rest of the
 *                      line) are its arguments, byte for byte (no {user} or \n there)
 *     error TEXT       the turn fails with this message
 *     stderr TEXT      the turn starts by writing TEXT and a newline to fd 2 (as a library's
 *                      message would come)
 *     ---              next turn; turns are used in order and the last one repeats
 * In TEXT, "{user}" is replaced by the user's message and "\n" by a newline. Tokens are cut
 * every 3 bytes, deliberately inside UTF-8 characters, as a real tokenizer's byte tokens can be.
 * The conversation is a k3_conv with no model attached, as in the remote backend (remote.c):
 * /undo, /edit, /forget, /clear, /system, /save, /load and /export run the engine's transcript
 * code (ue_conv_cmd), so the UI tests exercise it; a /load adopts the transcript's settings.
 * No autosave unless the script asks for one: the mock writes only the files it is asked to.
 * What a model-less engine can show, it shows as a local model does (remote.c has no expert
 * cache, no layers): the status bar's "3 layers", an expert cache of 4 GB with 90% hits, and
 * /experts GB, which sets that cache figure and says "expert-cache budget now GB" as the local
 * engine does (the remote backend refuses /experts: its server places its own experts). What
 * needs the model's weights (/replay) it refuses.
 */
#include "engine.h"
#include "k3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct mcall {
    char *name, *args;
} mcall;

typedef struct mturn {
    char  *think, *response, *error, *err_line;
    mcall *calls; /* (n_calls) its tool calls */
    int    n_calls, cap_calls;
    int    delay_ms, prefill_ms, hold_ms, stall_ms, stall_end_ms, stall_rescue_ms;
} mturn;

typedef struct mock {
    mturn   *turns; /* (n_turns) scripted turns */
    int      n_turns, cap_turns, next;
    k3_conv *c; /* the conversation (no model) */
    double   expert_gb;
    int      ctx_used;
    int      autosave;   /* the script's "autosave" */
    char    *load_until; /* the script's "load-until FILE" */
} mock;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void append(char **dst, const char *s) {
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(s);
    char  *d = realloc(*dst, a + b + 2);
    if (!d)
        return;
    if (a)
        d[a++] = '\n';
    memcpy(d + a, s, b + 1);
    *dst = d;
}

/* "NAME ARGS" of a call directive into t; -1 without a name or out of memory. */
static int add_call(mturn *t, const char *arg) {
    size_t nl = strcspn(arg, " ");
    if (!nl)
        return -1;
    mcall *c = k3_grow(t->calls, &t->cap_calls, (size_t)t->n_calls + 1, sizeof *c, 4);
    if (!c)
        return -1;
    t->calls = c;
    c += t->n_calls;
    c->name = strndup(arg, nl);
    c->args = strdup(arg[nl] ? arg + nl + 1 : "");
    if (!c->name || !c->args) {
        free(c->name);
        free(c->args);
        return -1;
    }
    t->n_calls++;
    return 0;
}

/* A new scripted turn (zeroed, at the script's delays so far); NULL out of memory. */
static mturn *add_turn(mock *m, int delay, int prefill) {
    mturn *t = k3_grow(m->turns, &m->cap_turns, (size_t)m->n_turns + 1, sizeof *t, 4);
    if (!t)
        return NULL;
    m->turns = t;
    t += m->n_turns++;
    memset(t, 0, sizeof *t);
    t->delay_ms   = delay;
    t->prefill_ms = prefill;
    return t;
}

static int parse_script(mock *m, const char *path, int *load_ms, char *err, size_t errn) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errn, "K3_MOCK: %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char  *line   = NULL; /* a line of any length (getline): a long answer is one directive */
    size_t cap    = 0;
    int    lineno = 0, delay = 20, prefill = 0;
    if (!add_turn(m, delay, prefill)) {
        fclose(f);
        return -1;
    }
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        mturn      *t             = &m->turns[m->n_turns - 1];
        char       *sp            = strchr(line, ' ');
        const char *arg           = sp ? sp + 1 : "";
        size_t      kw            = sp ? (size_t)(sp - line) : strlen(line);
        if (!line[0] || line[0] == '#')
            continue;
        if (!strcmp(line, "---")) {
            if (!add_turn(m, delay, prefill))
                break;
        } else if ((kw == 4 && (!strncmp(line, "load", 4) || !strncmp(line, "hold", 4))) ||
                   (kw == 5 && !strncmp(line, "stall", 5)) || (kw == 9 && !strncmp(line, "stall-end", 9)) ||
                   (kw == 12 && !strncmp(line, "stall-rescue", 12)) ||
                   (kw == 5 && !strncmp(line, "delay", 5)) || (kw == 7 && !strncmp(line, "prefill", 7))) {
            char *end;
            long  ms = strtol(arg, &end, 10);
            if (end == arg || *end || ms < 0 || ms > 3600000) {
                snprintf(err, errn, "K3_MOCK: %s:%d: %.*s '%s': expected milliseconds in 0..3600000", path,
                         lineno, (int)kw, line, arg);
                fclose(f);
                free(line);
                return -1;
            }
            if (line[0] == 'l')
                *load_ms = (int)ms;
            else if (line[0] == 'h')
                t->hold_ms = (int)ms;
            else if (kw == 9)
                t->stall_end_ms = (int)ms;
            else if (kw == 12)
                t->stall_rescue_ms = (int)ms;
            else if (line[0] == 's')
                t->stall_ms = (int)ms;
            else if (kw == 5)
                t->delay_ms = delay = (int)ms;
            else
                t->prefill_ms = prefill = (int)ms;
        } else if (kw == 10 && !strncmp(line, "load-until", 10)) {
            free(m->load_until);
            m->load_until = *arg ? strdup(arg) : NULL;
            if (!m->load_until) {
                snprintf(err, errn, "K3_MOCK: %s:%d: load-until: expected a file name", path, lineno);
                fclose(f);
                free(line);
                return -1;
            }
        } else if (kw == 8 && !sp && !strncmp(line, "autosave", 8)) {
            m->autosave = 1;
        } else if (kw == 5 && !strncmp(line, "think", 5)) {
            append(&t->think, arg);
        } else if (kw == 8 && !strncmp(line, "response", 8)) {
            append(&t->response, arg);
        } else if (kw == 4 && !strncmp(line, "call", 4)) {
            if (add_call(t, arg)) {
                snprintf(err, errn, "K3_MOCK: %s:%d: call '%s': expected a tool name, then its arguments",
                         path, lineno, arg);
                fclose(f);
                free(line);
                return -1;
            }
        } else if (kw == 5 && !strncmp(line, "error", 5)) {
            append(&t->error, arg);
        } else if (kw == 6 && !strncmp(line, "stderr", 6)) {
            append(&t->err_line, arg);
        } else {
            snprintf(err, errn, "K3_MOCK: %s:%d: unknown directive '%.*s'", path, lineno, (int)kw, line);
            fclose(f);
            free(line);
            return -1;
        }
    }
    /* a read error ends getline as the end of the file does: a directory (EISDIR) was an empty
     * script, and the chat ran on it without a word */
    int rerr = ferror(f) ? errno : 0;
    free(line);
    fclose(f);
    if (rerr) {
        snprintf(err, errn, "K3_MOCK: %s: cannot read: %s", path, strerror(rerr));
        return -1;
    }
    return 0;
}

/* Expand {user} and \n. Returns a heap string. */
static char *expand(const char *s, const char *user) {
    if (!s)
        return strdup("");
    size_t cap = strlen(s) + 1 + 16 * strlen(user) + 64, n = 0;
    char  *d = malloc(cap);
    if (!d)
        return NULL;
    for (const char *p = s; *p;) {
        if (!strncmp(p, "{user}", 6)) {
            size_t ul = strlen(user);
            if (n + ul + 1 >= cap) {
                cap      = (n + ul + 1) * 2;
                char *nd = realloc(d, cap);
                if (!nd)
                    break;
                d = nd;
            }
            memcpy(d + n, user, ul);
            n += ul;
            p += 6;
        } else if (p[0] == '\\' && p[1] == 'n') {
            d[n++] = '\n';
            p += 2;
        } else {
            if (n + 2 >= cap) {
                cap *= 2;
                char *nd = realloc(d, cap);
                if (!nd)
                    break;
                d = nd;
            }
            d[n++] = *p++;
        }
    }
    d[n] = 0;
    return d;
}

static void mock_close(void *self);

static int mock_open(ue *u, void **self, char *err, size_t errn) {
    mock *m       = calloc(1, sizeof *m);
    int   load_ms = 0;
    if (!m)
        return -1;
    if (!(m->c = k3_conv_new()) ||
        parse_script(m, k3_setting_env_str(K3_SETTING_MOCK), &load_ms, err, errn) != 0) {
        if (!m->c)
            snprintf(err, errn, "K3_MOCK: out of memory");
        mock_close(m);
        return -1;
    }
    m->expert_gb = 4.0;
    if (m->autosave)
        ue_conv_autosave_enable(u, m->c);
    /* simulated loading: 20 steps over load_ms, 3 files of 100 MB each */
    uint64_t total = 300u << 20;
    for (int k = 0; k <= 20 && load_ms > 0; k++) {
        uint64_t done = total * (uint64_t)k / 20;
        char     what[64];
        snprintf(what, sizeof what, "model-%05d-of-00003.safetensors", 1 + (int)(done * 3 / (total + 1)));
        ui_ev e = {.type = EV_PROGRESS, .text = what, .a = done, .b = total};
        ev_push(u->out, &e);
        if (k < 20)
            sleep_ms(load_ms / 20);
    }
    while (m->load_until && access(m->load_until, F_OK) != 0)
        sleep_ms(20);
    ui_ev r = {.type = EV_READY, .text = (char *)"mock · 3 layers · scripted", .a = 4, .i = 4096};
    r.gen   = (ue_gen){.temp       = (float)k3_setting(K3_SETTING_TEMP)->def,
                       .top_p      = (float)k3_setting(K3_SETTING_TOP_P)->def,
                       .think      = (int)k3_setting(K3_SETTING_THINK)->def,
                       .effort     = (int)k3_setting(K3_SETTING_EFFORT)->def,
                       .max_tokens = -1};
    ev_push(u->out, &r);
    *self = m;
    return 0;
}

/* The mock's context accounting: 3 bytes a token, 8 tokens of framing a message. */
static int mock_ctx(const mock *m) {
    size_t n = 0;
    for (int k = 0; k < k3_conv_count(m->c); k++) {
        const k3_msg *x = k3_conv_msg(m->c, k);
        n += (strlen(x->content) + (x->reasoning ? strlen(x->reasoning) : 0)) / 3 + 8;
    }
    return (int)n;
}

static void fill_stats(mock *m, ue_stats *st, double t0, double t_first, int n_think, int n_resp,
                       double think_s) {
    double now        = ev_now();
    st->tok_s         = (t_first > 0 && now > t_first && n_think + n_resp > 1)
                            ? (n_think + n_resp - 1) / (now - t_first)
                            : -1;
    st->prefill_tok_s = -1;
    st->ttft_s        = t_first > 0 ? t_first - t0 : -1;
    st->think_s       = think_s;
    st->n_think       = n_think;
    st->n_response    = n_resp;
    st->ctx_used      = m->ctx_used;
    st->ctx_max       = 4096;
    st->expert_hit    = 0.9;
    st->expert_gb     = m->expert_gb;
    st->mem_gb        = ue_mem_gb();
}

/* Stream one channel, 3 bytes per token. Returns 1 when cancelled. */
static int stream(ue *u, mock *m, mturn *t, int ch, const char *s, double t0, double *t_first, int *n_think,
                  int *n_resp, double *think_s, double t_think0) {
    size_t n          = strlen(s);
    double last_stats = 0;
    for (size_t k = 0; k < n; k += 3) {
        if (ue_cancelled(u))
            return 1;
        if (t->delay_ms)
            sleep_ms(t->delay_ms);
        ue_emit_token(u, ch, s + k, n - k < 3 ? n - k : 3);
        if (*t_first == 0) {
            *t_first = ev_now();
            for (double end = ev_now() + t->stall_ms / 1e3; ev_now() < end;)
                sleep_ms(50); /* whatever the UI asks meanwhile */
            for (double end = ev_now() + t->stall_rescue_ms / 1e3; ev_now() < end && !ue_turn_rescued(u);)
                sleep_ms(20);
        }
        if (ch == EV_CH_THINK) {
            (*n_think)++;
            *think_s = ev_now() - t_think0;
        } else {
            (*n_resp)++;
        }
        m->ctx_used++;
        if (ev_now() - last_stats > 0.1) {
            ui_ev e = {.type = EV_STATS};
            fill_stats(m, &e.st, t0, *t_first, *n_think, *n_resp, *think_s);
            ev_push(u->out, &e);
            last_stats = ev_now();
        }
    }
    return 0;
}

static void gen_turn(ue *u, mock *m, const char *user, const ue_gen *g) {
    mturn *t = &m->turns[m->next < m->n_turns ? m->next : m->n_turns - 1];
    if (m->next < m->n_turns - 1)
        m->next++;
    char  *think = expand(t->think, user), *resp = expand(t->response, user);
    double t0 = ev_now(), t_first = 0, think_s = 0;
    int    n_think = 0, n_resp = 0, cancelled = 0;
    ui_ev  e = {.type = EV_TURN};
    ev_push(u->out, &e);
    if (t->err_line) {
        char *s = expand(t->err_line, user);
        fprintf(stderr, "%s\n", s ? s : "");
        fflush(stderr);
        free(s);
    }
    k3_conv_settings set; /* for the transcript, as a model would have run the turn */
    ue_gen_settings(m->c, g, g->temp, g->top_p, &set);
    k3_conv_set_settings(m->c, &set);
    ue_turn_begin(u, m->c);
    m->ctx_used = mock_ctx(m);
    for (int k = 0; k < t->prefill_ms / 10 && !ue_cancelled(u); k++)
        sleep_ms(10);
    if (t->error) {
        ue_emitf(u, EV_ERROR, "%s", t->error);
        ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
        ev_push(u->out, &d);
        goto out;
    }
    cancelled = ue_cancelled(u);
    if (!cancelled && g->think && think[0])
        cancelled = stream(u, m, t, EV_CH_THINK, think, t0, &t_first, &n_think, &n_resp, &think_s, ev_now());
    if (!cancelled)
        cancelled = stream(u, m, t, EV_CH_RESPONSE, resp, t0, &t_first, &n_think, &n_resp, &think_s, 0);
    int           n_calls = 0; /* the calls streamed whole (a call stopped inside is not kept) */
    k3_tool_call *calls   = t->n_calls ? calloc((size_t)t->n_calls, sizeof *calls) : NULL;
    char(*ids)[24]        = t->n_calls ? calloc((size_t)t->n_calls, sizeof *ids) : NULL;
    for (int k = 0; k < t->n_calls && calls && ids && !cancelled; k++) {
        const char *a = t->calls[k].args;
        size_t      n = strlen(a);
        ue_emit_call(u, t->calls[k].name, NULL, 0, 0);
        for (size_t o = 0; o < n && !cancelled; o += 3) { /* 3 bytes a token, as the text */
            if (t->delay_ms)
                sleep_ms(t->delay_ms);
            ue_emit_call(u, NULL, a + o, n - o < 3 ? n - o : 3, 0);
            n_resp++;
            cancelled = ue_cancelled(u);
        }
        if (cancelled)
            break;
        ue_emit_call(u, NULL, NULL, 0, 1);
        snprintf(ids[k], sizeof ids[k], "call_%d", k);
        calls[n_calls++] = (k3_tool_call){.id = ids[k], .name = t->calls[k].name, .arguments = a};
    }
    for (int k = 0; k < t->hold_ms / 10 && !cancelled; k++) {
        sleep_ms(10);
        cancelled = ue_cancelled(u);
    }
    /* keep what was streamed: the partial answer stays in the conversation */
    size_t rl       = (size_t)n_resp * 3 < strlen(resp) ? (size_t)n_resp * 3 : strlen(resp);
    size_t tl       = (size_t)n_think * 3 < strlen(think) ? (size_t)n_think * 3 : strlen(think);
    resp[rl]        = 0;
    think[tl]       = 0;
    k3_msg a        = {.role         = K3_ROLE_ASSISTANT,
                       .content      = resp,
                       .reasoning    = g->think ? think : NULL,
                       .interrupted  = cancelled,
                       .has_stats    = 1,
                       .tool_calls   = calls,
                       .n_tool_calls = n_calls};
    a.stats.n_gen   = n_think + n_resp;
    a.stats.n_think = n_think;
    a.stats.ttft    = t_first > 0 ? t_first - t0 : 0;
    a.stats.t_think = think_s > 0 ? a.stats.ttft + think_s : 0;
    a.stats.think   = g->think;
    a.stats.stop    = cancelled ? K3_STOP_CANCEL : K3_STOP_EOS;
    if (k3_conv_add_msg(m->c, &a) != K3_OK)
        ue_emitf(u, EV_ERROR, "%s", k3_errmsg());
    else if (m->autosave)
        ue_conv_autosave(u, m->c);
    for (double end = ev_now() + t->stall_end_ms / 1e3; ev_now() < end;)
        sleep_ms(50); /* deaf, as stall */
    ui_ev d = {.type = EV_DONE, .i = cancelled ? UE_DONE_CANCELLED : UE_DONE_OK};
    fill_stats(m, &d.st, t0, t_first, n_think, n_resp, think_s);
    ev_push(u->out, &d);
    free(calls);
    free(ids);
out:
    free(think);
    free(resp);
}

static void done_error(ue *u, const char *msg) {
    ue_emitf(u, EV_ERROR, "%s", msg);
    ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
    ev_push(u->out, &d);
}

/* A partial EV_STATS: only the context, cache and memory fields are meaningful. */
static void ctx_stats(ue *u, mock *m) {
    m->ctx_used = mock_ctx(m);
    ui_ev e     = {.type = EV_STATS, .i = 1};
    fill_stats(m, &e.st, 0, 0, 0, 0, 0);
    e.st.tok_s = e.st.ttft_s = e.st.think_s = -1;
    ev_push(u->out, &e);
}

static void mock_cmd(ue *u, void *self, const ui_ev *c) {
    mock *m = self;
    int   n = k3_conv_count(m->c);
    if (ue_conv_cmd(u, m->c, c)) { /* /undo /forget /clear /system /save /load /export */
        if (c->type == EV_CMD_UNDO || c->type == EV_CMD_FORGET || c->type == EV_CMD_CLEAR ||
            c->type == EV_CMD_LOAD)
            ctx_stats(u, m); /* the context figure follows */
        return;
    }
    switch (c->type) {
    case EV_CMD_EDIT: /* ue_conv_cmd moved the old exchange to a branch */
    case EV_CMD_SEND:
        if (k3_conv_add(m->c, K3_ROLE_USER, c->text, NULL) != K3_OK)
            done_error(u, k3_errmsg());
        else
            gen_turn(u, m, c->text, &c->gen);
        break;
    case EV_CMD_RETRY: {
        if (!(n && k3_conv_msg(m->c, n - 1)->role == K3_ROLE_USER) && k3_conv_retry_last(m->c) <= 0) {
            done_error(u, "/retry: there is no answer to regenerate");
            break;
        }
        const k3_msg *last = k3_conv_msg(m->c, k3_conv_count(m->c) - 1);
        char         *user = last ? strdup(last->content) : NULL;
        gen_turn(u, m, user ? user : "", &c->gen);
        free(user);
        break;
    }
    case EV_CMD_REPLAY:
        done_error(u, "/replay: the mock engine cannot replay transcripts");
        break;
    case EV_CMD_EXPERTS: /* as a local model: the budget is the cache figure the mock reports */
        m->expert_gb = c->x;
        ue_experts_now(u, m->expert_gb);
        /* FALLTHROUGH */
    case EV_CMD_STATS:
        ctx_stats(u, m);
        break;
    default:
        break;
    }
}

static void mock_close(void *self) {
    mock *m = self;
    for (int k = 0; k < m->n_turns; k++) {
        free(m->turns[k].think);
        free(m->turns[k].response);
        free(m->turns[k].error);
        free(m->turns[k].err_line);
        for (int c = 0; c < m->turns[k].n_calls; c++) {
            free(m->turns[k].calls[c].name);
            free(m->turns[k].calls[c].args);
        }
        free(m->turns[k].calls);
    }
    free(m->turns);
    free(m->load_until);
    k3_conv_free(m->c);
    free(m);
}

const ue_backend ue_backend_mock = {"mock", mock_open, mock_cmd, NULL, NULL, mock_close};
