/* conv.c: the conversation model: messages, system prompt, settings, edits.
 *
 * DESIGN
 * A conversation is an array of k3_msg in chat order; the system prompt, when set, is
 * message 0. Every edit goes through this file so two derived things stay right:
 *   - the autosave file (transcript.c): appends are cheap, so an edit that touches
 *     messages already written (undo, retry, system prompt, drop) only flags a rewrite;
 *   - the prompt cache (conv-gen.c) needs no flag: it compares rendered ids by prefix.
 * Rendering and generation live in conv-gen.c, files in transcript.c.
 */
#include "conv-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *k3_stop_str(k3_stop s) {
    switch (s) {
    case K3_STOP_NONE:
        return "";
    case K3_STOP_EOS:
        return "eos";
    case K3_STOP_MAX_TOKENS:
        return "max_tokens";
    case K3_STOP_CONTEXT:
        return "context";
    case K3_STOP_CANCEL:
        return "cancel";
    case K3_STOP_ERROR:
        return "error";
    }
    return "";
}

const char *conv_role_str(k3_role r) {
    switch (r) {
    case K3_ROLE_SYSTEM:
        return "system";
    case K3_ROLE_USER:
        return "user";
    case K3_ROLE_ASSISTANT:
        return "assistant";
    case K3_ROLE_TOOL:
        return "tool";
    }
    return "?";
}

void k3_conv_settings_default(k3_conv_settings *s) {
    memset(s, 0, sizeof *s);
    s->think = 1;
    snprintf(s->effort, sizeof s->effort, "%s",
             k3_setting_choice(K3_SETTING_EFFORT, (int)k3_setting(K3_SETTING_EFFORT)->def));
    s->max_tokens     = 0;
    s->sampling.temp  = (float)k3_setting(K3_SETTING_TEMP)->def;
    s->sampling.top_p = (float)k3_setting(K3_SETTING_TOP_P)->def;
    s->sampling.min_p = 0.0f;
    s->sampling.top_k = 0;
    s->sampling.seed  = 0;
}

k3_status conv_check_settings(const k3_conv_settings *s, const char *where) {
    if (s->think != 0 && s->think != 1)
        return k3_err(K3_ERR_ARG, "%s: think = %d, expected 0 or 1", where, s->think);
    if (!memchr(s->tool_choice, 0, sizeof s->tool_choice) ||
        (s->tool_choice[0] && strcmp(s->tool_choice, "auto") && strcmp(s->tool_choice, "required") &&
         strcmp(s->tool_choice, "none")))
        return k3_err(K3_ERR_ARG, "%s: tool_choice '%.*s' is not auto, required or none", where,
                      (int)sizeof s->tool_choice, s->tool_choice);
    char   err[256];
    double eff;
    if (!memchr(s->effort, 0, sizeof s->effort) ||
        k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_API, s->effort, &eff, err, sizeof err))
        return k3_err(K3_ERR_ARG, "%s: effort '%.*s' is not %s%s", where, (int)sizeof s->effort, s->effort,
                      k3_setting_expect(K3_SETTING_EFFORT, K3_SRC_API, err, sizeof err),
                      strncmp(s->effort, "medium", sizeof s->effort) ? "" : " (the release rejects medium)");
    if (s->logprobs != 0 && s->logprobs != 1)
        return k3_err(K3_ERR_ARG, "%s: logprobs = %d, expected 0 or 1", where, s->logprobs);
    if (k3_setting_check(K3_SETTING_TOP_LOGPROBS, K3_SRC_API, s->top_logprobs, err, sizeof err))
        return k3_err(K3_ERR_ARG, "%s: %s", where, err);
    if (k3_setting_check(K3_SETTING_MAX_TOKENS, K3_SRC_API, s->max_tokens, err, sizeof err) ||
        k3_setting_check(K3_SETTING_THINK_BUDGET, K3_SRC_API, s->think_budget, err, sizeof err))
        return k3_err(K3_ERR_ARG, "%s: %s", where, err); /* --max-tokens's and --think-budget's rows */
    return conv_check_sampling(&s->sampling, where);
}

k3_status conv_check_sampling(const k3_sampler_params *p, const char *where) {
    char err[256];
    if (k3_setting_check(K3_SETTING_TEMP, K3_SRC_API, p->temp, err, sizeof err) ||
        k3_setting_check(K3_SETTING_TOP_P, K3_SRC_API, p->top_p, err, sizeof err))
        return k3_err(K3_ERR_ARG, "%s: %s", where, err);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return k3_err(K3_ERR_ARG, "%s: min_p %g is outside 0..1", where, (double)p->min_p);
    if (p->top_k < 0)
        return k3_err(K3_ERR_ARG, "%s: top_k %d is negative", where, p->top_k);
    if (k3_setting_check(K3_SETTING_PRESENCE_PENALTY, K3_SRC_API, p->presence_penalty, err, sizeof err) ||
        k3_setting_check(K3_SETTING_FREQUENCY_PENALTY, K3_SRC_API, p->frequency_penalty, err, sizeof err) ||
        (p->repetition_penalty != 0.0f && /* 0: a zeroed struct's, off as 1 */
         k3_setting_check(K3_SETTING_REPETITION_PENALTY, K3_SRC_API, p->repetition_penalty, err, sizeof err)))
        return k3_err(K3_ERR_ARG, "%s: %s", where, err);
    return K3_OK;
}

static void drop_abandoned(k3_conv *c) {
    for (int i = 0; i < c->n_aban; i++)
        conv_msg_clear(&c->aban[i].m);
    c->n_aban = c->n_branches = 0;
}

k3_conv *k3_conv_new(void) {
    k3_conv *c = k3_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (!(c->sn = conv_store_new())) {
        free(c);
        return NULL;
    }
    k3_conv_settings_default(&c->set);
    atomic_init(&c->cancel, 0);
    atomic_init(&c->active, NULL);
    atomic_init(&c->child, NULL);
    /* Snapshots cost the whole decode state each (for the release: KDA states plus the
     * MLA cache so far, hundreds of MB). Three cover /retry (after the prompt) and /undo
     * (end of the turn before). K3_CONV_SNAPSHOTS=0 turns them off. */
    /* a malformed value is k3_init's error; here it keeps the default */
    double      snaps = k3_setting(K3_SETTING_CONV_SNAPSHOTS)->def, mb = -1;
    const char *e = k3_setting_env_str(K3_SETTING_CONV_SNAPSHOTS);
    if (e)
        (void)k3_setting_parse(K3_SETTING_CONV_SNAPSHOTS, K3_SRC_ENV, e, &snaps, NULL, 0);
    if ((e = k3_setting_env_str(K3_SETTING_CONV_SNAPSHOT_MB)) &&
        !k3_setting_parse(K3_SETTING_CONV_SNAPSHOT_MB, K3_SRC_ENV, e, &mb, NULL, 0))
        c->sn->budget = (size_t)(mb * 1e6);
    c->sn->max_snaps = (int)snaps;
    return c;
}

static void calls_free(k3_tool_call *tc, int n) {
    for (int k = 0; k < n; k++) {
        free((char *)(uintptr_t)tc[k].id);
        free((char *)(uintptr_t)tc[k].name);
        free((char *)(uintptr_t)tc[k].arguments);
    }
    free(tc);
}

void conv_msg_clear(k3_msg *m) {
    free(m->content);
    free(m->reasoning);
    free(m->ids);
    calls_free(m->tool_calls, m->n_tool_calls);
    free(m->tool_name);
    free(m->tool_call_id);
    free(m->tools);
    free(m->parts);
    free(m->extra);
    memset(m, 0, sizeof *m);
}

void k3_conv_free(k3_conv *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n_msgs; i++)
        conv_msg_clear(&c->msgs[i]);
    free(c->msgs);
    drop_abandoned(c);
    free(c->aban);
    free(c->tools);
    free(c->rf_schema);
    free(c->forced);
    free(c->model_dir);
    free(c->hdr_extra);
    free(c->autosave_dir);
    free(c->autosave_path);
    if (c->gen_free) /* conv-gen.c's state: prompt cache, snapshots, chat encoder */
        c->gen_free(c);
    conv_store_unref(c->sn);
    free(c);
}

k3_status k3_conv_set_settings(k3_conv *c, const k3_conv_settings *s) {
    k3_status st = conv_check_settings(s, "settings");
    if (st)
        return st;
    c->set = *s;
    return K3_OK;
}

void k3_conv_get_settings(const k3_conv *c, k3_conv_settings *out) {
    *out = c->set;
}

/* FNV-1a 64 over the bytes of DIR/config.json: identifies the model configuration. */
k3_status k3_conv_set_model(k3_conv *c, const char *dir, const k3_params *p) {
    size_t plen  = strlen(dir) + sizeof "/config.json";
    char  *path  = k3_malloc(plen);
    char  *dcopy = k3_strdup(dir);
    if (!path || !dcopy) {
        free(path);
        free(dcopy);
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    }
    snprintf(path, plen, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        k3_status st = k3_err(K3_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        free(path);
        free(dcopy);
        return st;
    }
    uint64_t      h = 0xcbf29ce484222325ull;
    unsigned char buf[4096];
    size_t        n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        k3_status st = k3_err(K3_ERR_IO, "%s: read failed", path);
        free(path);
        free(dcopy);
        return st;
    }
    free(path);
    free(c->model_dir);
    c->model_dir = dcopy;
    snprintf(c->config_fnv64, sizeof c->config_fnv64, "%016llx", (unsigned long long)h);
    c->bits      = p ? p->bits : 0;
    c->mla_bits  = p ? p->mla_bits : 0;
    c->head_bits = p ? p->head_bits : 0;
    return K3_OK;
}

const char *k3_conv_model_fingerprint(const k3_conv *c) {
    return c->config_fnv64;
}

/* ---- messages ------------------------------------------------------------ */

void conv_touched(k3_conv *c, int i) {
    conv_render_forget(c, i);
    if (i < c->n_saved) {
        c->rewrite = 1;
        c->n_saved = i;
    }
}

k3_status conv_grow(void **arr, int *cap, int need, size_t elem, int first, const char *what) {
    if (need <= *cap)
        return K3_OK;
    void *p = k3_grow(*arr, cap, (size_t)need, elem, first);
    if (!p)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory for %d %s", need, what);
    *arr = p;
    return K3_OK;
}

static k3_status grow(k3_conv *c) {
    void     *p  = c->msgs;
    k3_status st = conv_grow(&p, &c->cap_msgs, c->n_msgs + 1, sizeof *c->msgs, 16, "messages");
    c->msgs      = p;
    return st;
}

/* Room for n more abandoned messages. */
static k3_status grow_aban(k3_conv *c, int n) {
    void     *p  = c->aban;
    k3_status st = conv_grow(&p, &c->cap_aban, c->n_aban + n, sizeof *c->aban, 8, "abandoned messages");
    c->aban      = p;
    return st;
}

/* Copies src's strings and ids into *dst (which is overwritten). */
static k3_status msg_copy(k3_msg *dst, const k3_msg *src) {
    *dst           = *src;
    dst->content   = k3_strdup(src->content ? src->content : "");
    dst->reasoning = src->reasoning ? k3_strdup(src->reasoning) : NULL;
    dst->ids       = NULL;
    if (src->ids && src->n_ids > 0) {
        dst->ids = k3_malloc((size_t)src->n_ids * sizeof *dst->ids);
        if (dst->ids)
            memcpy(dst->ids, src->ids, (size_t)src->n_ids * sizeof *dst->ids);
    } else {
        dst->n_ids = 0;
    }
    int bad           = 0;
    dst->tool_calls   = NULL;
    dst->n_tool_calls = 0;
    dst->tool_name    = src->tool_name ? k3_strdup(src->tool_name) : NULL;
    dst->tool_call_id = src->tool_call_id ? k3_strdup(src->tool_call_id) : NULL;
    dst->tools        = src->tools ? k3_strdup(src->tools) : NULL;
    dst->extra        = src->extra ? k3_strdup(src->extra) : NULL;
    dst->parts        = NULL;
    dst->n_parts      = src->parts && src->n_parts > 0 ? src->n_parts : 0;
    if (dst->n_parts && (dst->parts = k3_malloc((size_t)dst->n_parts * sizeof *dst->parts)))
        memcpy(dst->parts, src->parts, (size_t)dst->n_parts * sizeof *dst->parts);
    bad |= (src->tool_name && !dst->tool_name) || (src->tool_call_id && !dst->tool_call_id) ||
           (src->tools && !dst->tools) || (src->extra && !dst->extra) || (dst->n_parts && !dst->parts);
    if (src->tool_calls && src->n_tool_calls > 0) {
        dst->tool_calls = k3_calloc((size_t)src->n_tool_calls, sizeof *dst->tool_calls);
        bad |= !dst->tool_calls;
        for (int k = 0; dst->tool_calls && k < src->n_tool_calls; k++) {
            const k3_tool_call *sc = &src->tool_calls[k];
            k3_tool_call       *dc = &dst->tool_calls[k];
            dst->n_tool_calls      = k + 1;
            dc->id                 = k3_strdup(sc->id ? sc->id : "");
            dc->name               = k3_strdup(sc->name ? sc->name : "");
            dc->arguments          = sc->arguments ? k3_strdup(sc->arguments) : NULL;
            bad |= !dc->id || !dc->name || (sc->arguments && !dc->arguments);
        }
    }
    if (bad || !dst->content || (src->reasoning && !dst->reasoning) ||
        (src->ids && src->n_ids > 0 && !dst->ids)) {
        conv_msg_clear(dst);
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory copying a message");
    }
    return K3_OK;
}

k3_status conv_push(k3_conv *c, const k3_msg *m) {
    k3_status st = grow(c);
    if (st)
        return st;
    st = msg_copy(&c->msgs[c->n_msgs], m);
    if (st)
        return st;
    c->n_msgs++;
    return K3_OK;
}

/* Strings are UTF-8 by contract (k3.h): a caller's invalid text is refused here, with the
 * byte, rather than failing later as a transcript that cannot be written. */
static k3_status check_utf8(const char *what, const char *s) {
    size_t at = 0;
    if (s && k3_utf8_repair(s, strlen(s), NULL, &at) > 0)
        return k3_err(K3_ERR_ARG, "conversation: the %s is not valid UTF-8 (byte %zu is 0x%02x)", what,
                      at + 1, (unsigned char)s[at]);
    return K3_OK;
}

k3_status k3_conv_add(k3_conv *c, k3_role role, const char *content, const char *reasoning) {
    if (role != K3_ROLE_SYSTEM && role != K3_ROLE_USER && role != K3_ROLE_ASSISTANT)
        return k3_err(K3_ERR_ARG, "conversation: role %d is not system, user or assistant", (int)role);
    k3_status st = check_utf8("message", content);
    if (!st)
        st = check_utf8("reasoning", reasoning);
    if (st)
        return st;
    k3_msg m = {.role      = role,
                .content   = (char *)(uintptr_t)(content ? content : ""),
                .reasoning = (char *)(uintptr_t)reasoning};
    return conv_push(c, &m);
}

k3_status k3_conv_add_msg(k3_conv *c, const k3_msg *m) {
    if (m->role != K3_ROLE_SYSTEM && m->role != K3_ROLE_USER && m->role != K3_ROLE_ASSISTANT &&
        m->role != K3_ROLE_TOOL)
        return k3_err(K3_ERR_ARG, "conversation: role %d is not system, user, assistant or tool",
                      (int)m->role);
    if (m->n_tool_calls > 0 && m->role != K3_ROLE_ASSISTANT)
        return k3_err(K3_ERR_ARG, "conversation: only assistant messages carry tool calls");
    if (m->tools && m->role != K3_ROLE_SYSTEM)
        return k3_err(K3_ERR_ARG, "conversation: only system messages declare tools in place");
    for (int k = 0; k < m->n_tool_calls; k++)
        if (!m->tool_calls[k].name || !*m->tool_calls[k].name)
            return k3_err(K3_ERR_ARG, "conversation: tool_calls[%d] has no function name", k);
    return conv_push(c, m);
}

k3_status k3_conv_set_response_format(k3_conv *c, const char *type, const char *schema) {
    int none = !type || !*type || !strcmp(type, "text");
    if (!none && strcmp(type, "json_object") && strcmp(type, "json_schema"))
        return k3_err(K3_ERR_ARG,
                      "conversation: response_format '%.40s' is not text, json_object or json_schema", type);
    char *copy = NULL;
    if (!none && !strcmp(type, "json_schema") && !(copy = k3_strdup(schema ? schema : "{}")))
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    free(c->rf_schema);
    c->rf_schema = copy;
    snprintf(c->rf_type, sizeof c->rf_type, "%s", none ? "" : type);
    return K3_OK;
}

void k3_conv_set_grammar(k3_conv *c, const k3_grammar *g) {
    c->grammar = g;
}

k3_status k3_conv_set_logit_bias(k3_conv *c, const k3_logit_bias *b, int n) {
    k3_status st = k3_sampler_set_bias(NULL, b, n); /* checked only: each turn's sampler copies it */
    if (st)
        return st;
    c->bias   = n ? b : NULL;
    c->n_bias = n;
    return K3_OK;
}

k3_status k3_conv_set_tools(k3_conv *c, const char *json) {
    const char *p = json;
    while (p && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    char *copy = NULL;
    if (p && *p && strncmp(p, "[]", 2) && !(copy = k3_strdup(json)))
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    if ((copy == NULL) != (c->tools == NULL) || (copy && strcmp(copy, c->tools)))
        conv_touched(c, 0); /* the transcript header changes */
    free(c->tools);
    c->tools = copy;
    return K3_OK;
}

const char *k3_conv_tools(const k3_conv *c) {
    return c->tools;
}

int k3_conv_count(const k3_conv *c) {
    return c->n_msgs;
}

const k3_msg *k3_conv_msg(const k3_conv *c, int i) {
    return i >= 0 && i < c->n_msgs ? &c->msgs[i] : NULL;
}

const char *k3_conv_system(const k3_conv *c) {
    return c->n_msgs && c->msgs[0].role == K3_ROLE_SYSTEM ? c->msgs[0].content : NULL;
}

/* Removes messages [i, i+n). */
void conv_since_removed(k3_conv *c, int i, int n) {
    int sys = k3_conv_system(c) != NULL, before = 0;
    for (int k = i; k < i + n && k < c->n_msgs; k++) {
        if (k == 0 && sys) {
            c->sys_since = 0; /* the system prompt itself goes */
            return;
        }
        before += k - sys < c->sys_since;
    }
    c->sys_since -= before;
}

static void remove_range(k3_conv *c, int i, int n) {
    if (n <= 0)
        return;
    conv_since_removed(c, i, n);
    for (int k = i; k < i + n; k++)
        conv_msg_clear(&c->msgs[k]);
    memmove(&c->msgs[i], &c->msgs[i + n], (size_t)(c->n_msgs - i - n) * sizeof *c->msgs);
    c->n_msgs -= n;
    /* abandoned branches after the removed messages move with their neighbours */
    for (int k = 0; k < c->n_aban; k++)
        if (c->aban[k].at > i)
            c->aban[k].at = c->aban[k].at - i > n ? c->aban[k].at - n : i;
    conv_touched(c, i);
}

k3_status k3_conv_set_system(k3_conv *c, const char *text) {
    int has = k3_conv_system(c) != NULL;
    if (!text || !*text) {
        if (has)
            remove_range(c, 0, 1);
        return K3_OK;
    }
    if (has && !strcmp(c->msgs[0].content, text))
        return K3_OK;
    /* set (or changed) now: the messages so far were answered without it, and the transcript
     * says so ("since"), so a save, an export or a replay does not claim otherwise */
    int       since = c->n_msgs - has;
    k3_status st    = check_utf8("system prompt", text);
    if (st)
        return st;
    char *copy = k3_strdup(text);
    if (!copy)
        return k3_err(K3_ERR_NOMEM, "conversation: out of memory");
    if (!has) {
        st = grow(c);
        if (st) {
            free(copy);
            return st;
        }
        memmove(&c->msgs[1], &c->msgs[0], (size_t)c->n_msgs * sizeof *c->msgs);
        memset(&c->msgs[0], 0, sizeof c->msgs[0]);
        c->msgs[0].role = K3_ROLE_SYSTEM;
        c->n_msgs++;
    }
    free(c->msgs[0].content);
    free(c->msgs[0].parts); /* the old text's parts */
    c->msgs[0].content = copy;
    c->msgs[0].parts   = NULL;
    c->msgs[0].n_parts = 0;
    c->sys_since       = since;
    conv_touched(c, 0);
    return K3_OK;
}

void k3_conv_clear(k3_conv *c) {
    int keep = k3_conv_system(c) != NULL;
    for (int i = keep; i < c->n_msgs; i++)
        conv_msg_clear(&c->msgs[i]);
    c->n_msgs = keep;
    conv_render_forget(c, keep);
    c->sys_since = 0; /* every turn from now on has it */
    drop_abandoned(c);
    free(c->hdr_extra); /* the old file keeps them; the new conversation has its own header */
    c->hdr_extra = NULL;
    /* a new conversation gets a new autosave file; the old file stays as it is */
    free(c->autosave_path);
    c->autosave_path = NULL;
    c->n_saved       = 0;
    c->rewrite       = 0;
}

/* Index of the last user message, -1 when none. */
static int last_user(const k3_conv *c) {
    int i = c->n_msgs - 1;
    while (i >= 0 && c->msgs[i].role != K3_ROLE_USER)
        i--;
    return i;
}

int k3_conv_undo(k3_conv *c) {
    int i = last_user(c);
    if (i < 0)
        return 0;
    int n = c->n_msgs - i;
    remove_range(c, i, n);
    return n;
}

k3_status conv_push_abandoned(k3_conv *c, const k3_msg *m, int at, int branch) {
    k3_status st = grow_aban(c, 1);
    if (st)
        return st;
    conv_aban *a = &c->aban[c->n_aban];
    if ((st = msg_copy(&a->m, m)))
        return st;
    a->at     = at;
    a->branch = branch;
    c->n_aban++;
    if (branch > c->n_branches)
        c->n_branches = branch;
    return K3_OK;
}

/* Messages [i, n_msgs) become a new abandoned branch at i (/edit, /retry); returns how many. */
static int abandon_from(k3_conv *c, int i) {
    int n = c->n_msgs - i;
    if (grow_aban(c, n))
        return -1;
    int sys = k3_conv_system(c) != NULL, since = c->sys_since; /* before conv_since_removed */
    conv_since_removed(c, i, n);
    c->n_branches++;
    for (int k = i; k < c->n_msgs; k++) /* moved, not copied */
        c->aban[c->n_aban++] = (conv_aban){c->msgs[k], i, c->n_branches, k - sys < since};
    c->n_msgs = i;
    conv_touched(c, i);
    if (c->autosave_path)
        c->rewrite = 1; /* the branch goes into the file before the new exchange */
    return n;
}

int k3_conv_edit_last(k3_conv *c) {
    int i = last_user(c);
    return i < 0 ? 0 : abandon_from(c, i);
}

int k3_conv_retry_last(k3_conv *c) {
    int i = c->n_msgs;
    while (i > 0 && c->msgs[i - 1].role == K3_ROLE_ASSISTANT)
        i--;
    if (i == 0 || i == c->n_msgs ||
        (c->msgs[i - 1].role != K3_ROLE_USER && c->msgs[i - 1].role != K3_ROLE_TOOL))
        return 0;
    return abandon_from(c, i);
}

int k3_conv_restore_branch(k3_conv *c) {
    int n = 0, nb = c->n_branches;
    while (n < c->n_aban && c->aban[c->n_aban - 1 - n].branch == nb &&
           c->aban[c->n_aban - 1 - n].at == c->n_msgs)
        n++;
    if (!n || (n < c->n_aban && c->aban[c->n_aban - 1 - n].branch == nb))
        return 0; /* not the newest branch, or not cut where the history now ends */
    void *p = c->msgs;
    if (conv_grow(&p, &c->cap_msgs, c->n_msgs + n, sizeof *c->msgs, 16, "messages"))
        return -1;
    c->msgs = p;
    for (int k = c->n_aban - n; k < c->n_aban; k++) { /* moved back, not copied */
        c->sys_since += c->aban[k].before_sys;
        c->msgs[c->n_msgs++] = c->aban[k].m;
    }
    c->n_aban -= n;
    c->n_branches--;
    if (c->autosave_path)
        c->rewrite = 1; /* the file may hold them as a branch */
    return n;
}

int k3_conv_abandoned_count(const k3_conv *c) {
    return c->n_aban;
}

const k3_msg *k3_conv_abandoned(const k3_conv *c, int i, int *at, int *branch) {
    if (i < 0 || i >= c->n_aban)
        return NULL;
    if (at)
        *at = c->aban[i].at;
    if (branch)
        *branch = c->aban[i].branch;
    return &c->aban[i].m;
}

int k3_conv_pop_reply(k3_conv *c) {
    int i = c->n_msgs;
    while (i > 0 && c->msgs[i - 1].role == K3_ROLE_ASSISTANT)
        i--;
    if (i == 0 || (c->msgs[i - 1].role != K3_ROLE_USER && c->msgs[i - 1].role != K3_ROLE_TOOL))
        return 0;
    int n = c->n_msgs - i;
    remove_range(c, i, n);
    return n;
}

int k3_conv_drop_oldest(k3_conv *c) {
    int i = 0;
    while (i < c->n_msgs && c->msgs[i].role != K3_ROLE_USER)
        i++;
    if (i == c->n_msgs)
        return 0;
    int j = i + 1;
    while (j < c->n_msgs && c->msgs[j].role != K3_ROLE_USER)
        j++;
    remove_range(c, i, j - i);
    return j - i;
}

/* *dst becomes a copy of src (NULL stays NULL); nonzero when out of memory. */
static int copy_str(char **dst, const char *src) {
    *dst = src ? k3_strdup(src) : NULL;
    return src && !*dst;
}

/* k3_conv_copy of messages [from, n) only. from > 0 (k3_conv_copy_unsaved: c's autosave appends
 * and the file holds [0, from)) leaves out what only a whole file writes: the abandoned branches
 * and the system prompt's "since" (a line of message 0); the copy's autosave appends its messages
 * [0, n - from), which are c's [from, n). */
static k3_conv *copy_from(const k3_conv *c, int from) {
    k3_conv *d = k3_conv_new();
    if (!d)
        return NULL;
    int bad = 0;
    for (int i = from; i < c->n_msgs && !bad; i++)
        bad = conv_push(d, &c->msgs[i]) != K3_OK;
    for (int k = 0; k < c->n_aban && !bad && !from; k++)
        if (!(bad = conv_push_abandoned(d, &c->aban[k].m, c->aban[k].at, c->aban[k].branch) != K3_OK))
            d->aban[k].before_sys = c->aban[k].before_sys;
    d->n_branches      = c->n_branches;
    d->sys_since       = from ? 0 : c->sys_since;
    d->set             = c->set;
    d->n_turns_started = c->n_turns_started;
    memcpy(d->rf_type, c->rf_type, sizeof d->rf_type);
    memcpy(d->config_fnv64, c->config_fnv64, sizeof d->config_fnv64);
    d->bits      = c->bits;
    d->mla_bits  = c->mla_bits;
    d->head_bits = c->head_bits;
    /* the autosave as it stands: the copy's next autosave writes what c's would */
    d->autosave_on = c->autosave_on;
    d->n_saved     = c->n_saved - from;
    d->rewrite     = c->rewrite;
    d->saved_set   = c->saved_set;
    d->as_dev      = c->as_dev;
    d->as_ino      = c->as_ino;
    d->as_size     = c->as_size;
    d->tail_only   = c->tail_only || from > 0;
    bad |= copy_str(&d->tools, c->tools) || copy_str(&d->rf_schema, c->rf_schema) ||
           copy_str(&d->model_dir, c->model_dir) || copy_str(&d->hdr_extra, c->hdr_extra) ||
           copy_str(&d->autosave_dir, c->autosave_dir) || copy_str(&d->autosave_path, c->autosave_path);
    if (bad) {
        k3_conv_free(d);
        k3_err(K3_ERR_NOMEM, "conversation: out of memory copying it");
        return NULL;
    }
    return d;
}

k3_conv *k3_conv_copy(const k3_conv *c) {
    return copy_from(c, 0);
}

k3_conv *k3_conv_copy_unsaved(const k3_conv *c) {
    int from = c->autosave_on && conv_autosave_appends(c) && c->n_saved <= c->n_msgs ? c->n_saved : 0;
    return copy_from(c, from);
}

void k3_conv_set_autosave_gate(k3_conv *c, int (*may_write)(void *ud), void *ud) {
    c->gate    = may_write;
    c->gate_ud = ud;
}

void conv_swap_content(k3_conv *a, k3_conv *b) {
    k3_msg          *m = a->msgs;
    int              n = a->n_msgs, cap = a->cap_msgs;
    k3_conv_settings s     = a->set;
    char            *tools = a->tools;
    a->tools               = b->tools;
    b->tools               = tools;
    char *hx               = a->hdr_extra;
    a->hdr_extra           = b->hdr_extra;
    b->hdr_extra           = hx;
    a->msgs                = b->msgs;
    a->n_msgs              = b->n_msgs;
    a->cap_msgs            = b->cap_msgs;
    a->set                 = b->set;
    int since              = a->sys_since;
    a->sys_since           = b->sys_since;
    b->sys_since           = since;
    conv_aban *ab          = a->aban;
    int        na = a->n_aban, ca = a->cap_aban, nb = a->n_branches;
    a->aban       = b->aban;
    a->n_aban     = b->n_aban;
    a->cap_aban   = b->cap_aban;
    a->n_branches = b->n_branches;
    b->aban       = ab;
    b->n_aban     = na;
    b->cap_aban   = ca;
    b->n_branches = nb;
    b->msgs       = m;
    b->n_msgs     = n;
    b->cap_msgs   = cap;
    b->set        = s;
    conv_render_forget(a, 0);
    conv_render_forget(b, 0);
}
