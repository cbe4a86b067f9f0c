/* settings.c: the table of settings (k3-settings.h) and one parser per type.
 *
 * DESIGN
 * Every value k3chat takes from the environment, the command line, a slash command or an API
 * field goes through k3_setting_parse with its row: one range, one default and one error message
 * format ("SOURCE: 'VALUE' is not EXPECTED") for all four. There is no reader for a variable
 * without a row: the test suite's and k3-bench's knobs are rows too.
 */
#include "k3-impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const k3_setting_row rows[K3_SETTING_N] = {
#define X(id, type, lo, hi, def, choices, arg, env, flag, slash, api, doc)                                   \
    {#id, K3_TYPE_##type, lo, hi, def, choices, arg, env, flag, slash, api, doc},
    K3_SETTINGS(X)
#undef X
};

const k3_setting_row *k3_setting(enum k3_setting_id id) {
    return (int)id >= 0 && id < K3_SETTING_N ? &rows[id] : NULL;
}

/* The i-th '|'-separated word of choices into buf; -1 past the end. */
static int choice_at(const char *choices, int i, char *buf, size_t n) {
    const char *p = choices;
    for (int k = 0; p && k < i; k++)
        if ((p = strchr(p, '|')))
            p++;
    if (!p || !*p)
        return -1;
    snprintf(buf, n, "%.*s", (int)strcspn(p, "|"), p);
    return 0;
}

/* The choices split once, so that k3_setting_choice's words stay valid for the process. */
enum { MAX_CHOICES = 8 };
static char           words[K3_SETTING_N][MAX_CHOICES][24];
static pthread_once_t words_once = PTHREAD_ONCE_INIT;

static void split_choices(void) {
    for (int id = 0; id < K3_SETTING_N; id++)
        for (int i = 0; rows[id].choices && i < MAX_CHOICES; i++)
            if (choice_at(rows[id].choices, i, words[id][i], sizeof words[id][i]))
                break;
}

const char *k3_setting_choice(enum k3_setting_id id, int i) {
    pthread_once(&words_once, split_choices);
    return (int)id >= 0 && id < K3_SETTING_N && i >= 0 && i < MAX_CHOICES && words[id][i][0] ? words[id][i]
                                                                                             : "?";
}

const char *k3_setting_arg(enum k3_setting_id id, enum k3_setting_src src) {
    const k3_setting_row *r = k3_setting(id);
    if (!r)
        return "";
    if (r->type == K3_TYPE_BOOL)
        return src == K3_SRC_ENV ? "0|1" : "on|off";
    return r->choices ? r->choices : r->arg ? r->arg : "";
}

/* "low, high or max" from "low|high|max". */
static void choices_str(const char *choices, char *buf, size_t n) {
    char   w[32];
    size_t u = 0;
    int    count;
    for (count = 0; !choice_at(choices, count, w, sizeof w); count++)
        ;
    buf[0] = 0;
    for (int k = 0; k < count && u < n; k++) {
        choice_at(choices, k, w, sizeof w);
        u += (size_t)snprintf(buf + u, n - u, "%s%s", k == 0 ? "" : k == count - 1 ? " or " : ", ", w);
    }
}

const char *k3_setting_expect(enum k3_setting_id id, enum k3_setting_src src, char *buf, size_t n) {
    const k3_setting_row *r = k3_setting(id);
    buf[0]                  = 0;
    if (!r)
        return buf;
    switch (r->type) {
    case K3_TYPE_NUM:
        snprintf(buf, n, "a number in %.15g..%.15g", r->lo, r->hi);
        break;
    case K3_TYPE_U64: /* hi: INT64_MAX, which a double cannot hold */
        snprintf(buf, n, "an integer in %.0f..%lld", r->lo,
                 r->hi >= 0x1p63 ? (long long)INT64_MAX : (long long)r->hi);
        break;
    case K3_TYPE_INT:
        if (r->choices)
            choices_str(r->choices, buf, n);
        else
            snprintf(buf, n, "an integer in %.19g..%.19g", r->lo, r->hi);
        break;
    case K3_TYPE_BOOL:
        snprintf(buf, n, src == K3_SRC_ENV ? "0 or 1" : src == K3_SRC_API ? "true or false" : "on or off");
        break;
    case K3_TYPE_ENUM:
        choices_str(r->choices, buf, n);
        break;
    case K3_TYPE_TEXT:
        snprintf(buf, n, "text");
        break;
    }
    return buf;
}

/* The name a source gives the setting: K3_CHUNK, --temp, /temp, temperature. */
static const char *source_name(const k3_setting_row *r, enum k3_setting_src src, char *buf, size_t n) {
    const char *name = src == K3_SRC_ENV     ? r->env
                       : src == K3_SRC_FLAG  ? r->flag
                       : src == K3_SRC_SLASH ? r->slash
                                             : r->api;
    snprintf(buf, n, "%s%s", src == K3_SRC_FLAG ? "--" : src == K3_SRC_SLASH ? "/" : "", name ? name : r->id);
    return buf;
}

static int fail(enum k3_setting_id id, enum k3_setting_src src, const char *text, char *err, size_t n) {
    char name[64], want[128];
    if (err && n) /* the one format; effort's "medium" (other models' level) says why */
        snprintf(err, n, "%s: '%.60s' is not %s%s", source_name(&rows[id], src, name, sizeof name), text,
                 k3_setting_expect(id, src, want, sizeof want),
                 id == K3_SETTING_EFFORT && !strcmp(text, "medium") ? " (the release rejects medium)" : "");
    return -1;
}

/* Digits only (a leading '-' when negative is allowed): 0 with *out, -1 when not such an integer
 * or out of long long's range. */
static int int_text(const char *s, int neg_ok, long long *out) {
    const char *d = s + (neg_ok && *s == '-');
    if (!*d || d[strspn(d, "0123456789")])
        return -1;
    char *end;
    errno       = 0;
    long long v = strtoll(s, &end, 10);
    if (errno)
        return -1;
    *out = v;
    return 0;
}

/* Plain decimal: "12", "0.5", ".5", "5."; no sign, exponent, hex, inf or nan. */
static int num_text(const char *s, double *out) {
    size_t digits = strspn(s, "0123456789"), frac = 0;
    if (s[digits] == '.')
        frac = 1 + strspn(s + digits + 1, "0123456789");
    if (digits + frac == 0 || (digits == 0 && frac == 1) || s[digits + frac])
        return -1; /* empty, a lone ".", or anything after the number */
    *out = strtod(s, NULL);
    return 0;
}

int k3_setting_parse(enum k3_setting_id id, enum k3_setting_src src, const char *text, double *out, char *err,
                     size_t n) {
    const k3_setting_row *r = k3_setting(id);
    if (!r)
        return -1;
    double    v = 0;
    long long i;
    char      w[32];
    switch (r->type) {
    case K3_TYPE_NUM:
        if (num_text(text, &v) || !(v >= r->lo && v <= r->hi))
            return fail(id, src, text, err, n);
        break;
    case K3_TYPE_INT:
        if (int_text(text, r->lo < 0, &i) || !((double)i >= r->lo && (double)i <= r->hi))
            return fail(id, src, text, err, n);
        if (r->choices) {
            int k;
            for (k = 0; !choice_at(r->choices, k, w, sizeof w) && strcmp(w, text); k++)
                ;
            if (choice_at(r->choices, k, w, sizeof w))
                return fail(id, src, text, err, n);
        }
        v = (double)i;
        break;
    case K3_TYPE_BOOL:
        if (!strcmp(text, src == K3_SRC_ENV ? "1" : "on"))
            v = 1;
        else if (!strcmp(text, src == K3_SRC_ENV ? "0" : "off"))
            v = 0;
        else
            return fail(id, src, text, err, n);
        break;
    case K3_TYPE_ENUM: {
        int k;
        for (k = 0; !choice_at(r->choices, k, w, sizeof w); k++)
            if (!strcmp(w, text))
                break;
        if (choice_at(r->choices, k, w, sizeof w))
            return fail(id, src, text, err, n);
        v = k;
        break;
    }
    case K3_TYPE_U64: {
        uint64_t u;
        if (k3_setting_parse_u64(id, src, text, &u, err, n))
            return -1;
        v = (double)u;
        break;
    }
    case K3_TYPE_TEXT:
        break;
    }
    *out = v;
    return 0;
}

int k3_setting_parse_u64(enum k3_setting_id id, enum k3_setting_src src, const char *text, uint64_t *out,
                         char *err, size_t n) {
    const k3_setting_row *r = k3_setting(id);
    if (!r)
        return -1;
    char *end;
    errno      = 0;
    uint64_t v = strtoull(text, &end, 10); /* digits only: strtoull would take "-1" as 2^64-1 */
    if (!text[0] || text[strspn(text, "0123456789")] || errno || (double)v > r->hi || (double)v < r->lo ||
        v > (uint64_t)INT64_MAX)
        return fail(id, src, text, err, n);
    *out = v;
    return 0;
}

int k3_setting_check(enum k3_setting_id id, enum k3_setting_src src, double v, char *err, size_t n) {
    const k3_setting_row *r = k3_setting(id);
    if (!r)
        return -1;
    if (v >= r->lo && v <= r->hi && (r->type != K3_TYPE_INT || v == (double)(long long)v))
        return 0;
    char num[40]; /* the shortest text that reads back as v: 2.0000001 is not "2" */
    if (v == floor(v) && fabs(v) < 1e17)
        snprintf(num, sizeof num, "%.0f", v); /* a whole number as its digits: not 2e+09 */
    else
        for (int prec = 6; prec <= 17; prec++)
            if (snprintf(num, sizeof num, "%.*g", prec, v), strtod(num, NULL) == v)
                break;
    return fail(id, src, num, err, n);
}

const char *k3_setting_env_str(enum k3_setting_id id) {
    const k3_setting_row *r = k3_setting(id);
    const char           *v = r && r->env ? getenv(r->env) : NULL;
    return v && *v ? v : NULL;
}

k3_status k3_setting_env(enum k3_setting_id id, double *out) {
    const char *v = k3_setting_env_str(id);
    char        err[256];
    double      d;
    if (!v)
        return K3_OK;
    if (k3_setting_parse(id, K3_SRC_ENV, v, &d, err, sizeof err))
        return k3_err(K3_ERR_ARG, "%s", err);
    *out = d;
    return K3_OK;
}

k3_status k3_setting_env_int(enum k3_setting_id id, int *out) {
    double    d  = 0;
    int       ok = k3_setting_env_str(id) != NULL;
    k3_status st = k3_setting_env(id, &d);
    if (!st && ok)
        *out = (int)d;
    return st;
}
