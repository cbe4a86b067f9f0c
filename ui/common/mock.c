/* mock.c: a scripted engine for testing the UI without a model (K3_MOCK=FILE).
 *
 * The script is plain text, one directive per line ('#' starts a comment line):
 *     load MS          simulate loading the model for MS milliseconds (progress events)
 *     delay MS         milliseconds between tokens (default 20)
 *     prefill MS       milliseconds before the first token (default 0)
 *     think TEXT       reasoning text of the current turn (several lines join with newlines)
 *     response TEXT    answer text of the current turn
 *     error TEXT       the turn fails with this message
 *     ---              next turn; turns are used in order and the last one repeats
 * In TEXT, "{user}" is replaced by the user's message and "\n" by a newline. Tokens are cut
 * every 3 bytes, deliberately inside UTF-8 characters, as a real tokenizer's byte tokens can be.
 * The mock keeps the conversation (for /undo, /retry, /save, /load) in memory.
 */
#include "engine.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mturn {
    char *think, *response, *error;
    int   delay_ms, prefill_ms;
} mturn;

typedef struct mmsg {
    int    role;
    char  *content, *reasoning;
    int    abandoned; /* branch number of an exchange replaced by /edit, 0 when active */
    double think_s;   /* assistant: seconds of reasoning (0 = unknown)  */
    int    n_think;   /* reasoning tokens                               */
    int    status;    /* UE_DONE_* (UE_DONE_CANCELLED: interrupted)      */
} mmsg;

typedef struct mock {
    mturn   *turns; /* (n_turns) scripted turns */
    int      n_turns, next;
    mmsg    *msgs;  /* (n_msgs) the conversation */
    int      n_msgs, cap_msgs, n_branches;
    char    *system;
    double   expert_gb;
    int      ctx_used;
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

static int parse_script(mock *m, const char *path, int *load_ms, char *err, size_t errn) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errn, "K3_MOCK: %s: cannot open", path);
        return -1;
    }
    char line[4096];
    int  lineno = 0, delay = 20, prefill = 0;
    m->turns    = calloc(1, sizeof *m->turns);
    if (!m->turns) {
        fclose(f);
        return -1;
    }
    m->n_turns           = 1;
    m->turns[0].delay_ms = delay;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        mturn *t = &m->turns[m->n_turns - 1];
        char  *sp = strchr(line, ' ');
        const char *arg = sp ? sp + 1 : "";
        size_t kw = sp ? (size_t)(sp - line) : strlen(line);
        if (!line[0] || line[0] == '#')
            continue;
        if (!strcmp(line, "---")) {
            mturn *nt = realloc(m->turns, (size_t)(m->n_turns + 1) * sizeof *nt);
            if (!nt)
                break;
            m->turns = nt;
            memset(&m->turns[m->n_turns++], 0, sizeof *nt);
            m->turns[m->n_turns - 1].delay_ms   = delay;
            m->turns[m->n_turns - 1].prefill_ms = prefill;
        } else if (kw == 4 && !strncmp(line, "load", 4)) {
            *load_ms = atoi(arg);
        } else if (kw == 5 && !strncmp(line, "delay", 5)) {
            t->delay_ms = delay = atoi(arg);
        } else if (kw == 7 && !strncmp(line, "prefill", 7)) {
            t->prefill_ms = prefill = atoi(arg);
        } else if (kw == 5 && !strncmp(line, "think", 5)) {
            append(&t->think, arg);
        } else if (kw == 8 && !strncmp(line, "response", 8)) {
            append(&t->response, arg);
        } else if (kw == 5 && !strncmp(line, "error", 5)) {
            append(&t->error, arg);
        } else {
            snprintf(err, errn, "K3_MOCK: %s:%d: unknown directive '%.*s'", path, lineno, (int)kw, line);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

/* Expand {user} and \n. Returns a heap string. */
static char *expand(const char *s, const char *user) {
    if (!s)
        return strdup("");
    size_t cap = strlen(s) + 1 + 16 * strlen(user) + 64, n = 0;
    char  *d   = malloc(cap);
    if (!d)
        return NULL;
    for (const char *p = s; *p;) {
        if (!strncmp(p, "{user}", 6)) {
            size_t ul = strlen(user);
            if (n + ul + 1 >= cap) {
                cap = (n + ul + 1) * 2;
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

static int mock_open(ue *u, void **self, char *err, size_t errn) {
    mock *m = calloc(1, sizeof *m);
    int   load_ms = 0;
    if (!m)
        return -1;
    if (parse_script(m, getenv("K3_MOCK"), &load_ms, err, errn) != 0) {
        free(m);
        return -1;
    }
    m->expert_gb = 4.0;
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
    ui_ev r = {.type = EV_READY, .text = (char *)"mock · 3 layers · scripted", .i = 4096};
    r.gen    = (ue_gen){.temp = 0.6f, .top_p = 0.95f, .think = 1, .effort = 2, .max_tokens = -1};
    ev_push(u->out, &r);
    *self = m;
    return 0;
}

static void add_msg(mock *m, int role, const char *content, const char *reasoning) {
    if (m->n_msgs == m->cap_msgs) {
        int   cap = m->cap_msgs ? m->cap_msgs * 2 : 16;
        mmsg *nm  = realloc(m->msgs, (size_t)cap * sizeof *nm);
        if (!nm)
            return;
        m->msgs     = nm;
        m->cap_msgs = cap;
    }
    m->msgs[m->n_msgs++] = (mmsg){role, strdup(content ? content : ""), reasoning ? strdup(reasoning) : NULL, 0, 0, 0, 0};
}

static void drop_msgs(mock *m, int keep) {
    while (m->n_msgs > keep) {
        mmsg *x = &m->msgs[--m->n_msgs];
        free(x->content);
        free(x->reasoning);
    }
}

/* The mock's context accounting: 3 bytes a token, 8 tokens of framing a message. */
static int mock_ctx(const mock *m) {
    size_t n = 0;
    for (int k = 0; k < m->n_msgs; k++)
        n += (strlen(m->msgs[k].content) + (m->msgs[k].reasoning ? strlen(m->msgs[k].reasoning) : 0)) / 3 + 8;
    return (int)n;
}

static void fill_stats(mock *m, ue_stats *st, double t0, double t_first, int n_think, int n_resp,
                       double think_s) {
    double now  = ev_now();
    st->tok_s   = (t_first > 0 && now > t_first && n_think + n_resp > 1)
                      ? (n_think + n_resp - 1) / (now - t_first) : -1;
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
static int stream(ue *u, mock *m, mturn *t, int ch, const char *s, double t0, double *t_first,
                  int *n_think, int *n_resp, double *think_s, double t_think0) {
    size_t n = strlen(s);
    double last_stats = 0;
    for (size_t k = 0; k < n; k += 3) {
        if (ue_cancelled(u))
            return 1;
        if (t->delay_ms)
            sleep_ms(t->delay_ms);
        ue_emit_token(u, ch, s + k, n - k < 3 ? n - k : 3);
        if (*t_first == 0)
            *t_first = ev_now();
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
    char *think = expand(t->think, user), *resp = expand(t->response, user);
    double t0 = ev_now(), t_first = 0, think_s = 0;
    int    n_think = 0, n_resp = 0, cancelled = 0;
    ui_ev  e = {.type = EV_TURN};
    ev_push(u->out, &e);
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
    /* keep what was streamed: the partial answer stays in the conversation */
    size_t rl = (size_t)n_resp * 3 < strlen(resp) ? (size_t)n_resp * 3 : strlen(resp);
    size_t tl = (size_t)n_think * 3 < strlen(think) ? (size_t)n_think * 3 : strlen(think);
    resp[rl] = 0;
    think[tl] = 0;
    add_msg(m, UE_ROLE_ASSISTANT, resp, g->think ? think : NULL);
    m->msgs[m->n_msgs - 1].think_s = think_s;
    m->msgs[m->n_msgs - 1].n_think = n_think;
    m->msgs[m->n_msgs - 1].status  = cancelled ? UE_DONE_CANCELLED : UE_DONE_OK;
    ui_ev d = {.type = EV_DONE, .i = cancelled ? UE_DONE_CANCELLED : UE_DONE_OK};
    fill_stats(m, &d.st, t0, t_first, n_think, n_resp, think_s);
    ev_push(u->out, &d);
out:
    free(think);
    free(resp);
}

/* The display's copy of the conversation: EV_RESET, then one EV_MSG a message (engine.h). */
static void send_history(ue *u, const mock *m) {
    ui_ev r = {.type = EV_RESET};
    ev_push(u->out, &r);
    for (int k = 0; k < m->n_msgs; k++) {
        const mmsg *x = &m->msgs[k];
        if (x->abandoned)
            continue;
        ui_ev       e = {.type = EV_MSG, .i = x->role, .ch = x->status, .text = x->content, .text2 = x->reasoning};
        e.st.think_s  = x->think_s > 0 ? x->think_s : -1;
        e.st.n_think  = x->n_think;
        ev_push(u->out, &e);
    }
}

/* ---- transcripts (a minimal JSON Lines writer/reader for the mock) ---- */

static void mock_save(ue *u, mock *m, const char *path) {
    char  tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        ue_emitf(u, EV_ERROR, "/save: %s: cannot write", path);
        return;
    }
    json_t *h = json_pack("{s:s,s:i,s:s}", "type", "k3chat-transcript", "version", 1, "model", "mock");
    char   *s = json_dumps(h, JSON_COMPACT);
    fprintf(f, "%s\n", s);
    free(s);
    json_decref(h);
    static const char *roles[] = {"user", "assistant", "system"};
    for (int k = 0; k < m->n_msgs; k++) {
        json_t *o = json_pack("{s:s,s:s}", "role", roles[m->msgs[k].role], "content", m->msgs[k].content);
        if (m->msgs[k].reasoning)
            json_object_set_new(o, "reasoning_content", json_string(m->msgs[k].reasoning));
        if (m->msgs[k].abandoned)
            json_object_set_new(o, "abandoned", json_integer(m->msgs[k].abandoned));
        if (m->msgs[k].role == UE_ROLE_ASSISTANT) { /* k3chat(5)'s keys, the few the mock knows */
            if (m->msgs[k].status == UE_DONE_CANCELLED)
                json_object_set_new(o, "interrupted", json_true());
            json_object_set_new(o, "stats", json_pack("{s:i,s:f,s:s}", "think_tokens", m->msgs[k].n_think, "think_s",
                                                      m->msgs[k].think_s, "stop",
                                                      m->msgs[k].status == UE_DONE_CANCELLED ? "cancel" : "eos"));
        }
        s = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(o);
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        ue_emitf(u, EV_ERROR, "/save: %s: write failed", path);
        remove(tmp);
        return;
    }
    ue_emitf(u, EV_INFO, "saved %d messages to %s", m->n_msgs, path);
}

static void mock_load(ue *u, mock *m, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        ue_emitf(u, EV_ERROR, "/load: %s: cannot open", path);
        return;
    }
    mock  tmp = {0};
    char  line[65536];
    int   lineno = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        lineno++;
        json_t *o = json_loads(line, 0, &je);
        const char *role = o ? json_string_value(json_object_get(o, "role")) : NULL;
        const char *content = o ? json_string_value(json_object_get(o, "content")) : NULL;
        if (lineno == 1 && o && json_object_get(o, "type")) {
            json_decref(o);
            continue;
        }
        if (!o || !role || !content) {
            ue_emitf(u, EV_ERROR, "/load: %s:%d: %s", path, lineno,
                     !o ? je.text : "expected a message with string 'role' and 'content'");
            json_decref(o);
            drop_msgs(&tmp, 0);
            free(tmp.msgs);
            fclose(f);
            return;
        }
        const char *rs = json_string_value(json_object_get(o, "reasoning_content"));
        add_msg(&tmp, !strcmp(role, "assistant") ? UE_ROLE_ASSISTANT : !strcmp(role, "system") ? UE_ROLE_SYSTEM : UE_ROLE_USER,
                content, rs);
        json_t *ab = json_object_get(o, "abandoned");
        if (ab && json_is_integer(ab) && tmp.n_msgs)
            tmp.msgs[tmp.n_msgs - 1].abandoned = (int)json_integer_value(ab);
        json_t *st = json_object_get(o, "stats");
        if (tmp.n_msgs && st) {
            mmsg *x    = &tmp.msgs[tmp.n_msgs - 1];
            x->think_s = json_number_value(json_object_get(st, "think_s"));
            x->n_think = (int)json_integer_value(json_object_get(st, "think_tokens"));
        }
        if (tmp.n_msgs && json_is_true(json_object_get(o, "interrupted")))
            tmp.msgs[tmp.n_msgs - 1].status = UE_DONE_CANCELLED;
        json_decref(o);
    }
    fclose(f);
    drop_msgs(m, 0);
    free(m->msgs);
    m->msgs     = tmp.msgs;
    m->n_msgs   = tmp.n_msgs;
    m->cap_msgs = tmp.cap_msgs;
    send_history(u, m);
    ue_emitf(u, EV_INFO, "loaded %d messages from %s", m->n_msgs, path);
}

static void mock_export(ue *u, mock *m, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        ue_emitf(u, EV_ERROR, "/export: %s: cannot write", path);
        return;
    }
    fprintf(f, "# k3chat conversation\n\n");
    for (int k = 0; k < m->n_msgs; k++) {
        const mmsg *x = &m->msgs[k];
        if (x->abandoned)
            continue;
        if (x->role == UE_ROLE_USER)
            fprintf(f, "## You\n\n%s\n\n", x->content);
        else {
            fprintf(f, "## Assistant\n\n");
            if (x->reasoning && *x->reasoning)
                fprintf(f, "<details><summary>Reasoning</summary>\n\n%s\n\n</details>\n\n", x->reasoning);
            fprintf(f, "%s\n\n", x->content);
        }
    }
    if (fclose(f) != 0)
        ue_emitf(u, EV_ERROR, "/export: %s: write failed", path);
    else
        ue_emitf(u, EV_INFO, "exported %d messages to %s", m->n_msgs, path);
}

static void mock_cmd(ue *u, void *self, const ui_ev *c) {
    mock *m = self;
    switch (c->type) {
    case EV_CMD_EDIT: {
        int k = m->n_msgs;
        while (k > 0 && (m->msgs[k - 1].role != UE_ROLE_USER || m->msgs[k - 1].abandoned))
            k--;
        if (k > 0)
            m->n_branches++;
        for (int j = k - 1; k > 0 && j < m->n_msgs; j++)
            m->msgs[j].abandoned = m->n_branches;
    }
        /* FALLTHROUGH */
    case EV_CMD_SEND:
        add_msg(m, UE_ROLE_USER, c->text, NULL);
        gen_turn(u, m, c->text, &c->gen);
        break;
    case EV_CMD_RETRY: {
        int k = m->n_msgs;
        while (k > 0 && m->msgs[k - 1].role != UE_ROLE_USER)
            k--;
        if (k == 0) {
            ue_emitf(u, EV_ERROR, "/retry: there is no answer to regenerate");
            ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
            ev_push(u->out, &d);
            break;
        }
        drop_msgs(m, k);
        char *user = strdup(m->msgs[k - 1].content);
        gen_turn(u, m, user ? user : "", &c->gen);
        free(user);
        break;
    }
    case EV_CMD_UNDO: {
        int k = m->n_msgs;
        while (k > 0 && (m->msgs[k - 1].role != UE_ROLE_USER || m->msgs[k - 1].abandoned))
            k--;
        if (k == 0) {
            ue_emitf(u, EV_ERROR, "/undo: the conversation is empty");
            break;
        }
        drop_msgs(m, k - 1);
        ui_ev e = {.type = EV_UNDO};
        ev_push(u->out, &e);
        goto stats;
    }
    case EV_CMD_FORGET: {
        int a = 0;
        while (a < m->n_msgs && m->msgs[a].role != UE_ROLE_USER)
            a++;
        int b = a + 1;
        while (b < m->n_msgs && m->msgs[b].role != UE_ROLE_USER)
            b++;
        if (a >= m->n_msgs) {
            ue_emitf(u, EV_ERROR, "/forget: there is no exchange to drop");
            break;
        }
        for (int k = a; k < b; k++) {
            free(m->msgs[k].content);
            free(m->msgs[k].reasoning);
        }
        memmove(m->msgs + a, m->msgs + b, (size_t)(m->n_msgs - b) * sizeof *m->msgs);
        m->n_msgs -= b - a;
        send_history(u, m);
        ue_emitf(u, EV_INFO, "dropped the oldest exchange (%d messages)", b - a);
        goto stats;
    }
    case EV_CMD_CLEAR: {
        drop_msgs(m, 0);
        ui_ev e = {.type = EV_RESET};
        ev_push(u->out, &e);
        goto stats;
    }
    case EV_CMD_SYSTEM:
        free(m->system);
        m->system = strdup(c->text ? c->text : "");
        break;
    case EV_CMD_SAVE: mock_save(u, m, c->text); break;
    case EV_CMD_LOAD: mock_load(u, m, c->text); goto stats; /* the context figure follows */
    case EV_CMD_REPLAY: {
        ue_emitf(u, EV_ERROR, "/replay: the mock engine cannot replay transcripts");
        ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
        ev_push(u->out, &d);
        break;
    }
    case EV_CMD_EXPORT: mock_export(u, m, c->text); break;
    case EV_CMD_EXPERTS: m->expert_gb = c->x; /* FALLTHROUGH */
    case EV_CMD_STATS:
    stats: {
        m->ctx_used = mock_ctx(m);
        ui_ev e = {.type = EV_STATS};
        fill_stats(m, &e.st, 0, 0, 0, 0, 0);
        e.st.tok_s = e.st.ttft_s = e.st.think_s = -1;
        e.i = 1; /* partial: only the context/cache/memory fields are meaningful */
        ev_push(u->out, &e);
        break;
    }
    default: break;
    }
}

static void mock_close(void *self) {
    mock *m = self;
    for (int k = 0; k < m->n_turns; k++) {
        free(m->turns[k].think);
        free(m->turns[k].response);
        free(m->turns[k].error);
    }
    free(m->turns);
    drop_msgs(m, 0);
    free(m->msgs);
    free(m->system);
    free(m);
}

const ue_backend ue_backend_mock = {"mock", mock_open, mock_cmd, NULL, NULL, mock_close};
