/* test-settings.c: the table of settings (include/k3-settings.h, src/base/settings.c): one parser
 * per type with one message format, and the table held against what users read: `/help`,
 * `k3chat --help` and the man page's OPTIONS, SLASH COMMANDS and ENVIRONMENT lists (every slash
 * command of cmd.c, settings or not, tagged with /help's usage, and no entry that is not one; the
 * figures of ENVIRONMENT; the color roles of THEMES; the keys of KEYS and /help); and against
 * the sources: no K3_ variable is read around the table (engine, front ends, tools, k3-bench). */
#include "cmd.h"
#include "config.h"
#include "conv-impl.h"
#include "k3-impl.h"
#include "kern-impl.h"
#include "settings.h"
#include "test.h"
#include "theme.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[256];

static int parse_ok(enum k3_setting_id id, enum k3_setting_src src, const char *text, double want) {
    double v = -12345;
    return k3_setting_parse(id, src, text, &v, err, sizeof err) == 0 && v == want;
}

static int parse_bad(enum k3_setting_id id, enum k3_setting_src src, const char *text, const char *msg) {
    double v = -12345;
    return k3_setting_parse(id, src, text, &v, err, sizeof err) != 0 && v == -12345 && !strcmp(err, msg);
}

static void check_parsers(void) {
    /* NUM: plain decimals only, the row's range, the source's name */
    T_CHECK(parse_ok(K3_SETTING_TEMP, K3_SRC_FLAG, "0.5", 0.5) &&
                parse_ok(K3_SETTING_TEMP, K3_SRC_FLAG, ".5", 0.5) &&
                parse_ok(K3_SETTING_TEMP, K3_SRC_FLAG, "2.", 2) &&
                parse_ok(K3_SETTING_TEMP, K3_SRC_FLAG, "0", 0),
            "NUM takes plain decimals");
    static const char *nums[] = {"-0", "0x1", "1e0", "inf", "nan", ".", "", " 1", "+1", "1 ", "2.01"};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        char want[128];
        snprintf(want, sizeof want, "--temp: '%s' is not a number in 0..2", nums[i]);
        T_CHECK(parse_bad(K3_SETTING_TEMP, K3_SRC_FLAG, nums[i], want), "NUM refuses '%s': %s", nums[i], err);
    }
    T_CHECK(parse_bad(K3_SETTING_TEMP, K3_SRC_SLASH, "9", "/temp: '9' is not a number in 0..2") &&
                parse_bad(K3_SETTING_TEMP, K3_SRC_API, "9", "temperature: '9' is not a number in 0..2") &&
                parse_bad(K3_SETTING_EXPERT_GB, K3_SRC_ENV, "x",
                          "K3_EXPERT_GB: 'x' is not a number in 0..1000000"),
            "one format, each source named its way (%s)", err);
    /* INT: digits, the range; choices where the row has them */
    T_CHECK(
        parse_ok(K3_SETTING_CHUNK, K3_SRC_ENV, "4096", 4096) &&
            parse_bad(K3_SETTING_CHUNK, K3_SRC_ENV, "0", "K3_CHUNK: '0' is not an integer in 1..4096") &&
            parse_bad(K3_SETTING_CHUNK, K3_SRC_ENV, "1.5", "K3_CHUNK: '1.5' is not an integer in 1..4096") &&
            parse_bad(K3_SETTING_CHUNK, K3_SRC_ENV, "-1", "K3_CHUNK: '-1' is not an integer in 1..4096") &&
            parse_bad(K3_SETTING_CHUNK, K3_SRC_ENV, "99999999999999999999999",
                      "K3_CHUNK: '99999999999999999999999' is not an integer in 1..4096"),
        "INT: digits in the range (%s)", err);
    T_CHECK(parse_ok(K3_SETTING_BITS, K3_SRC_ENV, "4", 4) &&
                parse_ok(K3_SETTING_BITS, K3_SRC_ENV, "32", 32) &&
                parse_bad(K3_SETTING_BITS, K3_SRC_ENV, "16", "K3_BITS: '16' is not 4, 8 or 32"),
            "INT with choices: only those (%s)", err);
    /* BOOL: 0|1 from the environment, on|off from a flag or a command */
    T_CHECK(parse_ok(K3_SETTING_THINK, K3_SRC_FLAG, "on", 1) &&
                parse_ok(K3_SETTING_THINK, K3_SRC_SLASH, "off", 0) &&
                parse_ok(K3_SETTING_PIPE, K3_SRC_ENV, "0", 0) &&
                parse_bad(K3_SETTING_THINK, K3_SRC_FLAG, "1", "--think: '1' is not on or off") &&
                parse_bad(K3_SETTING_PIPE, K3_SRC_ENV, "on", "K3_PIPE: 'on' is not 0 or 1"),
            "BOOL: the source's spelling (%s)", err);
    /* ENUM: the index of the choice; effort's names once, in the table */
    T_CHECK(
        parse_ok(K3_SETTING_EFFORT, K3_SRC_FLAG, "low", 0) &&
            parse_ok(K3_SETTING_EFFORT, K3_SRC_API, "max", 2) &&
            parse_bad(K3_SETTING_EFFORT, K3_SRC_API, "medium",
                      "reasoning_effort: 'medium' is not low, high or max (the release rejects medium)") &&
            parse_bad(K3_SETTING_EFFORT, K3_SRC_SLASH, "MAX", "/effort: 'MAX' is not low, high or max"),
        "ENUM: choices by name (%s)", err);
    T_CHECK(!strcmp(k3_setting_choice(K3_SETTING_EFFORT, 0), "low") &&
                !strcmp(k3_setting_choice(K3_SETTING_EFFORT, 2), "max") &&
                !strcmp(k3_setting_choice(K3_SETTING_EFFORT, 3), "?") &&
                !strcmp(k3_setting_choice(K3_SETTING_TEMP, 0), "?") &&
                k3_setting_choice(K3_SETTING_EFFORT, 1) == k3_setting_choice(K3_SETTING_EFFORT, 1),
            "k3_setting_choice: the words, '?' out of range, the same text each time");
    /* U64: digits up to INT64_MAX (what a transcript stores) */
    uint64_t u = 7;
    T_CHECK(k3_setting_parse_u64(K3_SETTING_SEED, K3_SRC_FLAG, "9223372036854775807", &u, err, sizeof err) ==
                    0 &&
                u == 9223372036854775807ull,
            "U64: INT64_MAX");
    T_CHECK(k3_setting_parse_u64(K3_SETTING_SEED, K3_SRC_FLAG, "9223372036854775808", &u, err, sizeof err) &&
                !strcmp(err, "--seed: '9223372036854775808' is not an integer in 0..9223372036854775807") &&
                k3_setting_parse_u64(K3_SETTING_SEED, K3_SRC_FLAG, "-1", &u, err, sizeof err) &&
                u == 9223372036854775807ull,
            "U64: past INT64_MAX and signs refused, value kept (%s)", err);
    /* a number from JSON: the same range and message, the shortest text of the value */
    T_CHECK(k3_setting_check(K3_SETTING_TEMP, K3_SRC_API, 2, err, sizeof err) == 0 &&
                k3_setting_check(K3_SETTING_TEMP, K3_SRC_API, 2.0000001, err, sizeof err) &&
                !strcmp(err, "temperature: '2.0000001' is not a number in 0..2") &&
                k3_setting_check(K3_SETTING_PARALLEL, K3_SRC_API, 2.5, err, sizeof err),
            "k3_setting_check (%s)", err);
    /* the environment: unset and empty keep the value; a bad one is K3_ERR_ARG with the message */
    int v = 42;
    unsetenv("K3_LOAD_THREADS");
    T_CHECK(k3_setting_env_int(K3_SETTING_LOAD_THREADS, &v) == K3_OK && v == 42, "env unset keeps the value");
    setenv("K3_LOAD_THREADS", "", 1);
    T_CHECK(k3_setting_env_int(K3_SETTING_LOAD_THREADS, &v) == K3_OK && v == 42, "env empty keeps the value");
    setenv("K3_LOAD_THREADS", "300", 1);
    T_CHECK(k3_setting_env_int(K3_SETTING_LOAD_THREADS, &v) == K3_ERR_ARG && v == 42 &&
                !strcmp(k3_errmsg(), "K3_LOAD_THREADS: '300' is not an integer in 1..256"),
            "env bad: K3_ERR_ARG, value kept (%s)", k3_errmsg());
    setenv("K3_LOAD_THREADS", "8", 1);
    T_CHECK(k3_setting_env_int(K3_SETTING_LOAD_THREADS, &v) == K3_OK && v == 8, "env good");
    unsetenv("K3_LOAD_THREADS");
    /* k3_params_default: the table's defaults, its rows' variables */
    k3_params p;
    setenv("K3_EXPERT_GB", "5000", 1); /* was refused by /experts (0..4096), taken by the variable */
    T_CHECK(k3_params_default(&p) == K3_OK && p.expert_gb == 5000 && (p.set & K3_SET_EXPERT_GB) &&
                p.chunk == (int)k3_setting(K3_SETTING_CHUNK)->def && p.bits == 8,
            "k3_params_default: defaults from the table, K3_EXPERT_GB=5000 (the range /experts takes too)");
    unsetenv("K3_EXPERT_GB");
    setenv("K3_TOPP", "0", 1);
    T_CHECK(k3_params_default(&p) == K3_ERR_ARG &&
                !strcmp(k3_errmsg(), "K3_TOPP: '0' is not a number in 0.001..1"),
            "K3_TOPP=0 refused (%s)", k3_errmsg());
    unsetenv("K3_TOPP");
    /* issue 35 item 2: the parameters' defaults are not the process init */
    setenv("K3_HUGEPAGES", "yes", 1);
    setenv("K3_VERBOSE", "2", 1);
    T_CHECK(k3_params_default(&p) == K3_OK, "k3_params_default does not read the process variables");
    T_CHECK(k3_init() == K3_ERR_ARG && !strcmp(k3_errmsg(), "K3_VERBOSE: '2' is not 0 or 1"),
            "k3_init checks them (%s)", k3_errmsg());
    unsetenv("K3_VERBOSE");
    T_CHECK(k3_init() == K3_ERR_ARG && !strcmp(k3_errmsg(), "K3_HUGEPAGES: 'yes' is not 0 or 1"),
            "k3_init: K3_HUGEPAGES (%s)", k3_errmsg());
    unsetenv("K3_HUGEPAGES");
    T_CHECK(k3_init() == K3_OK, "k3_init with good variables");
}

/* The rows: every name set at most once per source, every row documented, sane ranges. */
static void check_rows(void) {
    int dup = 0;
    for (int i = 0; i < K3_SETTING_N; i++) {
        const k3_setting_row *a = k3_setting(i);
        T_CHECK(a->doc && a->doc[0] && (a->env || a->flag || a->slash || a->api) && a->lo <= a->hi &&
                    (isnan(a->def) || a->type == K3_TYPE_TEXT || (a->def >= a->lo && a->def <= a->hi)) &&
                    ((a->type == K3_TYPE_ENUM) <= (a->choices != NULL)),
                "row %s: documented, reachable, default in its range", a->id);
        for (int j = 0; j < i; j++) {
            const k3_setting_row *b = k3_setting(j);
#define SAME(f) (a->f && b->f && !strcmp(a->f, b->f))
            if (SAME(env) || SAME(flag) || SAME(slash) || SAME(api)) {
                fprintf(stderr, "rows %s and %s give a setting the same name\n", a->id, b->id);
                dup++;
            }
#undef SAME
        }
    }
    T_CHECK(dup == 0, "one row per variable, flag, command and API field (%d shared)", dup);
    /* the constants the engine needs at compile time are the rows' figures */
    T_CHECK(k3_setting(K3_SETTING_CONV_SNAPSHOTS)->hi == CONV_MAX_SNAPSHOTS &&
                k3_setting(K3_SETTING_PREFETCH)->def == KERN_PREFETCH &&
                k3_setting(K3_SETTING_KBLOCK)->def == KERN_KBLOCK &&
                k3_setting(K3_SETTING_MV_AHEAD)->def == KERN_MV_AHEAD &&
                k3_setting(K3_SETTING_LAYERS)->hi == K3_MAX_LAYERS,
            "CONV_MAX_SNAPSHOTS, KERN_PREFETCH, KERN_KBLOCK, KERN_MV_AHEAD, K3_MAX_LAYERS are the table's "
            "figures");
    /* the slash commands that set a setting take their name from its row */
    for (int k = 0; k < CMD_N; k++) {
        int s = cmd_setting(k);
        if (s >= 0)
            T_CHECK(k3_setting(s)->slash && !strcmp(cmd_name(k), k3_setting(s)->slash), "/%s is row %s",
                    cmd_name(k), k3_setting(s)->id);
    }
}

/* The section of the man page from ".SH NAME" to the next ".SH", with "\-" as "-". */
static char *man_section(const char *man, const char *name) {
    char head[64];
    snprintf(head, sizeof head, "\n.SH %s\n", name);
    const char *a = strstr(man, head);
    if (!a)
        return NULL;
    a += strlen(head);
    const char *b   = strstr(a, "\n.SH ");
    size_t      n   = b ? (size_t)(b - a) : strlen(a);
    char       *out = malloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == '\\' && a[i + 1] == '-'))
            *o++ = a[i];
    *o = 0;
    return out;
}

/* s contains word as a whole option/variable name (not followed by a name character). */
static int has_word(const char *s, const char *word) {
    size_t n = strlen(word);
    for (const char *p = s; (p = strstr(p, word)); p++) {
        char c = p[n];
        if (!(c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return 1;
    }
    return 0;
}

/* The tag of each ".TP" entry of a man section, as it renders: the macro (.B, .BI, .BR) dropped,
 * quotes removed, runs of spaces made one ("/save [--force] [FILE]"); n tags at most. */
static int man_tags(const char *sec, char tags[][128], int n) {
    int k = 0;
    for (const char *p = sec; k < n && (p = strstr(p, "\n.TP\n")); p += 4) {
        const char *q = p + 5, *eol = strchr(q, '\n');
        if (*q != '.' || !eol)
            continue;
        q += strcspn(q, " ");
        size_t o = 0;
        for (; q < eol && o < sizeof tags[k] - 1; q++)
            if (*q != '"' && !(*q == ' ' && (o == 0 || tags[k][o - 1] == ' ')))
                tags[k][o++] = *q;
        while (o > 0 && tags[k][o - 1] == ' ')
            o--;
        tags[k++][o] = 0;
    }
    return k;
}

/* Every slash command cmd.c knows has its entry in the man page's SLASH COMMANDS, tagged with its
 * usage as /help gives it ("/copy [N] [code [K]]"), and a line of /help; every entry there is a
 * command. */
static void check_man_commands(const char *slash, const char *help) {
    static char tags[64][128];
    int         n = man_tags(slash, tags, 64);
    for (int k = 0; k < CMD_N; k++) {
        char usage[128], w[160];
        cmd_usage(k, usage, sizeof usage);
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= !strcmp(tags[i], usage);
        T_CHECK(found, "man SLASH COMMANDS has an entry '%s', /help's usage", usage);
        snprintf(w, sizeof w, "\n  %s ", usage);
        T_CHECK(strstr(help, w) != NULL, "/help has a line for %s", usage);
    }
    for (int i = 0; i < n; i++) {
        char   name[64];
        size_t k = strcspn(tags[i] + 1, " ");
        snprintf(name, sizeof name, "%.*s", (int)k, tags[i] + 1);
        int known = 0;
        for (int c = 0; c < CMD_N; c++)
            known |= !strcmp(cmd_name(c), name);
        T_CHECK(tags[i][0] == '/' && known, "man SLASH COMMANDS' entry '%s' is a command of cmd.c", tags[i]);
    }
    T_CHECK(n >= CMD_N, "man SLASH COMMANDS: %d entries for %d commands", n, CMD_N);
}

/* The text of the ENVIRONMENT entry whose tag names variable name (".B K3_X", ".BI K3_X= N"), up
 * to the next .TP or .PP; *len its length. NULL when the variable has no entry of its own. */
static const char *man_env_entry(const char *env, const char *name, size_t *len) {
    size_t n = strlen(name);
    for (const char *p = env; (p = strstr(p, "\n.TP\n")); p += 4) {
        const char *q = p + 5;
        q += strcspn(q, " \n");
        if (*q != ' ' || strncmp(q + 1, name, n))
            continue;
        char c = q[1 + n];
        if (c == '_' || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            continue;
        const char *e = strstr(q, "\n.TP\n"), *pp = strstr(q, "\n.PP\n");
        if (!e || (pp && pp < e))
            e = pp;
        *len = e ? (size_t)(e - q) : strlen(q);
        return q;
    }
    return NULL;
}

/* The figures the man page's ENVIRONMENT states for a numeric variable are the table's: every
 * range "LO..HI" in its entry is the row's, every "default N" the row's default. */
static void check_man_env_figures(const char *env) {
    int n_checked = 0;
    for (int i = 0; i < K3_SETTING_N; i++) {
        const k3_setting_row *r = k3_setting(i);
        size_t                len;
        const char           *t = r->env ? man_env_entry(env, r->env, &len) : NULL;
        if (!t || !(r->type == K3_TYPE_NUM || (r->type == K3_TYPE_INT && !r->choices)))
            continue;
        char *entry = strndup(t, len);
        for (const char *p = entry; (p = strstr(p, "..")); p += 2) {
            const char *a = p;
            while (a > entry && ((a[-1] >= '0' && a[-1] <= '9') || a[-1] == '.'))
                a--;
            if (a == p || !(p[2] >= '0' && p[2] <= '9'))
                continue;
            double lo = strtod(a, NULL), hi = strtod(p + 2, NULL);
            T_CHECK(lo == r->lo && hi == r->hi,
                    "man ENVIRONMENT: %s's range %.15g..%.15g is the table's %.15g..%.15g", r->env, lo, hi,
                    r->lo, r->hi);
            n_checked++;
        }
        for (const char *p = entry; !isnan(r->def) && (p = strstr(p, "default ")); p += 8)
            if (p[8] >= '0' && p[8] <= '9') {
                double d = strtod(p + 8, NULL);
                T_CHECK(d == r->def, "man ENVIRONMENT: %s's default %.15g is the table's %.15g", r->env, d,
                        r->def);
                n_checked++;
            }
        free(entry);
    }
    T_CHECK(n_checked >= 20, "man ENVIRONMENT: %d ranges and defaults compared with the table", n_checked);
}

/* The keys a text names: "Ctrl-X", "Alt-X", "Fn", "PgUp", "PgDn", "Enter", "Tab", with the short
 * forms /help uses spelt out ("Ctrl-A/E/B" is Ctrl-A, Ctrl-E, Ctrl-B); each key once, "|" after
 * each, into out. */
static void key_names(const char *s, char *out, size_t n) {
    out[0] = 0;
    for (const char *p = s; *p; p++) {
        char   key[32], pre[8] = "";
        size_t k = 0;
        if (p > s && ((p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= 'a' && p[-1] <= 'z')))
            continue; /* inside a word */
        if (!strncmp(p, "Ctrl-", 5) || !strncmp(p, "Alt-", 4))
            snprintf(pre, sizeof pre, "%.*s", *p == 'C' ? 5 : 4, p);
        else if (!(*p == 'F' && p[1] >= '1' && p[1] <= '9') && strncmp(p, "PgUp", 4) &&
                 strncmp(p, "PgDn", 4) && strncmp(p, "Enter", 5) && strncmp(p, "Tab", 3))
            continue;
        const char *q = p + strlen(pre);
        for (;;) { /* the key, then each "/Y" that adds the same modifier to Y */
            k = 0;
            while (k < 16 && ((q[k] >= 'A' && q[k] <= 'Z') || (q[k] >= 'a' && q[k] <= 'z') ||
                              (q[k] >= '0' && q[k] <= '9')))
                k++;
            snprintf(key, sizeof key, "%s%.*s|", pre, (int)k, q);
            if (k && !strstr(out, key) && strlen(out) + strlen(key) < n)
                strcat(out, key);
            q += k;
            if (!pre[0] || *q != '/' || !strncmp(q + 1, "Ctrl-", 5) || !strncmp(q + 1, "Alt-", 4))
                break;
            q++;
        }
        p = q - 1;
    }
}

/* The keys /help lists and the ones the man page's KEYS section names are the same: each key of
 * /help is in KEYS, each key a KEYS entry is tagged with is in /help. */
static void check_man_keys(const char *keys, const char *help) {
    char        hk[1024], mk[1024], tk[1024], tags[1024] = "";
    const char *at = strstr(help, "\nKeys:\n");
    T_CHECK(at != NULL, "/help has a Keys: list");
    if (!at)
        return;
    key_names(at, hk, sizeof hk);
    key_names(keys, mk, sizeof mk);
    for (const char *p = keys; *p; p++) { /* each ".TP" line, the section's first one included */
        if (strncmp(p, ".TP\n", 4) || (p > keys && p[-1] != '\n'))
            continue;
        const char *q = p + 4, *eol = strchr(q, '\n');
        if (eol && strlen(tags) + (size_t)(eol - q) + 2 < sizeof tags)
            strncat(tags, q, (size_t)(eol - q)), strcat(tags, "\n");
    }
    key_names(tags, tk, sizeof tk);
    int n = 0;
    for (char *k = hk, *e; (e = strchr(k, '|')); k = e + 1, n++) {
        *e = 0;
        char w[40];
        snprintf(w, sizeof w, "%.32s|", k);
        T_CHECK(strstr(mk, w) != NULL, "man KEYS names /help's key %s", k);
        *e = '|';
    }
    for (char *k = tk, *e; (e = strchr(k, '|')); k = e + 1) {
        *e = 0;
        char w[40];
        snprintf(w, sizeof w, "%.32s|", k);
        T_CHECK(strstr(hk, w) != NULL, "/help lists the man KEYS entry %s", k);
        *e = '|';
    }
    T_CHECK(n >= 25, "/help's Keys: %d keys compared with the man page", n);
}

/* README.md's figures for variables ("`K3_SERVE_QUEUE`, default 32") are the table's defaults:
 * the README restates a few of them, and a default changed in the table left it behind. */
static void check_readme_defaults(void) {
    char *readme = t_read_file("README.md", NULL);
    int   n      = 0;
    T_CHECK(readme != NULL, "README.md read");
    for (const char *p = readme; p && (p = strstr(p, "`K3_")); p++) {
        size_t len = strspn(p + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (p[1 + len] != '`' || strncmp(p + 2 + len, ", default ", 10))
            continue;
        double want = strtod(p + 12 + len, NULL);
        int    row  = -1;
        for (int i = 0; i < K3_SETTING_N; i++)
            if (k3_setting(i)->env && strlen(k3_setting(i)->env) == len &&
                !strncmp(k3_setting(i)->env, p + 1, len))
                row = i;
        n++;
        T_CHECK(row >= 0 && k3_setting(row)->def == want, "README: %.*s's default %g is the table's %g",
                (int)len, p + 1, want, row >= 0 ? k3_setting(row)->def : -1.0);
    }
    T_CHECK(n >= 3, "README: %d variables' defaults compared with the table", n);
    free(readme);
}

static void check_docs(void) {
    /* /help: every setting command, with its row's doc */
    const char *help = chat_help_text();
    for (int i = 0; i < K3_SETTING_N; i++) {
        const k3_setting_row *r = k3_setting(i);
        char                  w[64];
        if (!r->slash)
            continue;
        snprintf(w, sizeof w, "/%s", r->slash);
        T_CHECK(has_word(help, w), "/help lists %s", w);
        if (cmd_of_setting(i) != CMD_UNKNOWN) { /* the doc whole, a range inside its closing ')' */
            size_t      n = strlen(r->doc), paren = n && r->doc[n - 1] == ')';
            const char *h = cmd_help(cmd_of_setting(i));
            T_CHECK(h && !strncmp(h, r->doc, n - paren) && strstr(help, h) != NULL,
                    "/help gives %s the table's doc '%s' ('%s')", w, r->doc, h ? h : "(none)");
        }
    }
    /* k3chat --help: every flag with its value and doc; every option it lists is a flag or a mode */
    char path[512];
    snprintf(path, sizeof path, "%s/settings-help.txt", t_tmp());
    if (t_sh("'%s/k3chat' --help >'%s' 2>&1", t_build(), path)) {
        T_CHECK(0, "k3chat --help runs (%s/k3chat)", t_build());
        return;
    }
    size_t n;
    char  *usage = t_read_file(path, &n);
    T_CHECK(usage != NULL, "--help output read");
    if (!usage)
        return;
    for (int i = 0; i < K3_SETTING_N; i++) {
        const k3_setting_row *r = k3_setting(i);
        char                  line[256];
        if (!r->flag)
            continue;
        snprintf(line, sizeof line, "\n  --%s %s", r->flag, k3_setting_arg(i, K3_SRC_FLAG));
        const char *at = strstr(usage, line); /* an entry of the options list */
        /* the entry: its line and the lines after it indented past the option column (the help
         * fills the doc to 80 columns), white space runs as one space */
        char   entry[1024], doc[512];
        size_t k = 0;
        for (const char *p = at ? at + 1 : ""; *p && k < sizeof entry - 1; p++) {
            if (*p == '\n' && strncmp(p + 1, "                         ", 25))
                break;
            if ((*p == ' ' || *p == '\n') && k && entry[k - 1] == ' ')
                continue;
            entry[k++] = *p == '\n' ? ' ' : *p;
        }
        entry[k] = 0;
        k        = 0;
        for (const char *p = r->doc; *p && k < sizeof doc - 1; p++)
            if (!(*p == ' ' && k && doc[k - 1] == ' '))
                doc[k++] = *p;
        doc[k] = 0;
        T_CHECK(at && strstr(entry, doc), "--help: '%s' with '%s'", line + 3, r->doc);
        /* the sampling defaults are the model's generation_config.json (k3-nano's temperature
         * is 0); the help said "default 1" */
        if (i == K3_SETTING_TEMP || i == K3_SETTING_TOP_P)
            T_CHECK(strstr(entry, "default: generation_config.json, else 1)") != NULL,
                    "--help: --%s's default is the model's generation_config.json ('%s')", r->flag, entry);
    }
    static const char *modes[] = {"--prompt",   "--ids",     "--inspect", "--tokenize", "--detokenize",
                                  "--chat-ids", "--replay",  "--serve",   "--endpoint", "--plain",
                                  "--help",     "--version", "--model",   "--json",     "--measure"};
    for (const char *p = usage; (p = strstr(p, "--")); p += 2) {
        char   opt[64];
        size_t k = 0;
        while (k < sizeof opt - 1 &&
               (p[k] == '-' || (p[k] >= 'a' && p[k] <= 'z') || (p[k] >= '0' && p[k] <= '9')))
            opt[k] = p[k], k++;
        opt[k]    = 0;
        int known = 0;
        for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
            known |= !strcmp(opt, modes[m]);
        for (int i = 0; i < K3_SETTING_N; i++)
            known |= k3_setting(i)->flag && !strcmp(opt + 2, k3_setting(i)->flag);
        T_CHECK(known, "--help's %s is a mode or a setting's flag", opt);
    }
    free(usage);
    remove(path);

    /* the man page: each flag in OPTIONS, each command in SLASH COMMANDS, each variable in
     * ENVIRONMENT; and each K3_ entry of ENVIRONMENT is a row */
    char *man = t_read_file("man/k3chat.1", &n);
    T_CHECK(man != NULL, "man/k3chat.1 read");
    if (!man)
        return;
    char *opts = man_section(man, "OPTIONS"), *slash = man_section(man, "SLASH COMMANDS"),
         *env = man_section(man, "ENVIRONMENT"), *themes = man_section(man, "THEMES");
    /* THEMES: every color role of the theme table is named, and every md- word is a role */
    T_CHECK(themes != NULL, "man page section THEMES");
    for (int r = 0; themes && r < THM_N; r++)
        T_CHECK(has_word(themes, thm_role_name((enum thm_role)r)), "man THEMES names the role %s",
                thm_role_name((enum thm_role)r));
    for (const char *p = themes; p && (p = strstr(p, "md-")); p += 3) {
        char   w[64];
        size_t k = 0;
        while (k < sizeof w - 1 && ((p[k] >= 'a' && p[k] <= 'z') || p[k] == '-'))
            w[k] = p[k], k++;
        w[k]      = 0;
        int known = 0;
        for (int r = 0; r < THM_N; r++)
            known |= !strcmp(w, thm_role_name((enum thm_role)r));
        T_CHECK(known, "man THEMES' %s is a role of the theme table", w);
    }
    free(themes);
    T_CHECK(opts && slash && env, "man page sections OPTIONS, SLASH COMMANDS, ENVIRONMENT");
    if (opts && slash && env) {
        for (int i = 0; i < K3_SETTING_N; i++) {
            const k3_setting_row *r = k3_setting(i);
            char                  w[64];
            if (r->flag) { /* ".B --x", ".BI --x " X"", ".BR --x " on|off"" */
                const char *at = NULL;
                for (int f = 0; f < 3 && !at; f++) {
                    snprintf(w, sizeof w, "%s --%s", f == 0 ? ".B" : f == 1 ? ".BI" : ".BR", r->flag);
                    at = has_word(opts, w) ? strstr(opts, w) : NULL;
                }
                T_CHECK(at != NULL, "man OPTIONS has --%s", r->flag);
                if (at && (r->type == K3_TYPE_NUM || (r->type == K3_TYPE_INT && !r->choices))) {
                    char range[64];
                    snprintf(range, sizeof range, "%.15g..%.15g", r->lo, r->hi);
                    const char *end = at ? strstr(at + 1, "\n.TP") : NULL;
                    T_CHECK(at && memmem(at, end ? (size_t)(end - at) : strlen(at), range, strlen(range)),
                            "man OPTIONS gives --%s the range %s", r->flag, range);
                }
            }
            if (r->slash) {
                snprintf(w, sizeof w, "/%s", r->slash);
                T_CHECK(has_word(slash, w), "man SLASH COMMANDS has %s", w);
            }
            if (r->env)
                T_CHECK(has_word(env, r->env), "man ENVIRONMENT has %s", r->env);
        }
        /* every tagged K3_ entry (".TP" then ".B K3_X", ".BI K3_X=", ".BR K3_X=") is a row */
        for (const char *p = env; (p = strstr(p, "\n.TP\n")); p += 4) {
            const char *q = p + 5;
            q += strcspn(q, " ");
            while (*q == ' ')
                q++;
            if (strncmp(q, "K3_", 3))
                continue;
            char   name[64];
            size_t k = 0;
            while (k < sizeof name - 1 &&
                   (q[k] == '_' || (q[k] >= 'A' && q[k] <= 'Z') || (q[k] >= '0' && q[k] <= '9')))
                name[k] = q[k], k++;
            name[k] = 0;
            int row = 0;
            for (int i = 0; i < K3_SETTING_N; i++)
                row |= k3_setting(i)->env && !strcmp(k3_setting(i)->env, name);
            T_CHECK(row, "man ENVIRONMENT's %s is a row of the settings table", name);
        }
        check_man_commands(slash, help);
        check_man_env_figures(env);
        char *keys = man_section(man, "KEYS");
        T_CHECK(keys != NULL, "man page section KEYS");
        if (keys)
            check_man_keys(keys, help);
        free(keys);
    }
    free(opts);
    free(slash);
    free(env);
    free(man);
}

/* ---- the sources read their K3_ variables through the table ---- */

static int n_sources, n_bench_names;

static int env_row(const char *name, size_t len) {
    for (int i = 0; i < K3_SETTING_N; i++) {
        const char *e = k3_setting(i)->env;
        if (e && strlen(e) == len && !strncmp(e, name, len))
            return 1;
    }
    return 0;
}

/* nftw callback: a .c or .h file must not call getenv on a K3_ name (settings.c, the table's
 * reader, excepted), and every K3_BENCH_ name k3-bench's sources mention is a row. */
static int scan_source(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)ftw;
    size_t n = strlen(path), len;
    if (type != FTW_F || n < 2 || (strcmp(path + n - 2, ".c") && strcmp(path + n - 2, ".h")))
        return 0;
    char *text = t_read_file(path, &n);
    T_CHECK(text != NULL, "%s read", path);
    if (!text)
        return 0;
    n_sources++;
    if (strcmp(path, "src/base/settings.c"))
        for (const char *p = text; (p = strstr(p, "getenv(\"K3_")); p++) {
            len = strcspn(p + 8, "\"");
            T_CHECK(0, "%s reads %.*s with getenv, not through its row of the settings table", path, (int)len,
                    p + 8);
        }
    if (!strncmp(path, "bench/", 6))
        for (const char *p = text; (p = strstr(p, "K3_BENCH_")); p += len) {
            len = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            n_bench_names++;
            if (!env_row(p, len))
                T_CHECK(0, "%s names %.*s, which is not a row of the settings table", path, (int)len, p);
        }
    free(text);
    return 0;
}

static void check_sources(void) {
    static const char *const dirs[] = {"src", "ui", "tools", "bench", "include"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        T_CHECK(nftw(dirs[i], scan_source, 16, FTW_PHYS) == 0, "%s/ walked", dirs[i]);
    T_CHECK(
        n_sources > 100 && n_bench_names >= 20,
        "no getenv(\"K3_...\") outside settings.c in %d sources; %d mentions of K3_BENCH_ names in bench/, "
        "each a row",
        n_sources, n_bench_names);
}

int main(void) {
    check_parsers();
    check_rows();
    check_docs();
    check_readme_defaults();
    check_sources();
    return t_done();
}
