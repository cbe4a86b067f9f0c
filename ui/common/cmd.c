/* cmd.c: slash-command table, parsing and suggestions (see cmd.h). */
#include "cmd.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int         kind;
    double      lo, hi;
    const char *usage, *help;
} defs[CMD_N] = {
#define X(id, name, kind, lo, hi, usage, help) {name, kind, lo, hi, usage, help},
    CMD_TABLE(X)
#undef X
};

const char *cmd_name(enum cmd_id id) {
    return id >= 0 && id < CMD_N ? defs[id].name : "?";
}

const char *cmd_usage(enum cmd_id id, char *buf, size_t n) {
    if (id < 0 || id >= CMD_N)
        return "";
    snprintf(buf, n, "/%s%s%s", defs[id].name, defs[id].usage[0] ? " " : "", defs[id].usage);
    return buf;
}

const char *cmd_help(enum cmd_id id) {
    return id >= 0 && id < CMD_N ? defs[id].help : "";
}

int cmd_num(const char *s, double lo, double hi, int integer, double *out) {
    size_t digits = strspn(s, "0123456789"), frac = 0;
    if (s[digits] == '.' && !integer)
        frac = 1 + strspn(s + digits + 1, "0123456789");
    if (digits + frac == 0 || (digits == 0 && frac == 1) || s[digits + frac])
        return -1; /* empty, a lone ".", or anything after the number */
    double v = strtod(s, NULL);
    if (!(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

const char *cmd_range_str(double lo, double hi, char *buf, size_t n) {
    snprintf(buf, n, "%.15g..%.15g", lo, hi);
    return buf;
}

void cmd_range(enum cmd_id id, double *lo, double *hi) {
    *lo = id >= 0 && id < CMD_N ? defs[id].lo : 0;
    *hi = id >= 0 && id < CMD_N ? defs[id].hi : 0;
}

/* Optimal string alignment distance (edits: insert, delete, substitute, swap neighbours). */
static int distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 30 || lb > 30)
        return 99;
    int d[32][32];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = a[i - 1] != b[j - 1], v = d[i - 1][j - 1] + c;
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *cmd_nearest(const char *name_in) {
    const char *best = NULL;
    int         bd   = 99;
    char        name[64]; /* commands are lower case: /HELP is /help */
    size_t      ln = 0;
    for (; name_in[ln] && ln < sizeof name - 1; ln++)
        name[ln] = (char)tolower((unsigned char)name_in[ln]);
    name[ln] = 0;
    for (int k = 0; k < CMD_N; k++) {
        /* a prefix of a command ("/sa" -> "/save") is as near as it gets */
        int d = ln && !strncmp(defs[k].name, name, ln) ? 0 : distance(name, defs[k].name);
        if (d < bd) {
            bd   = d;
            best = defs[k].name;
        }
    }
    int limit = ln <= 3 ? 1 : ln <= 6 ? 2 : 3;
    return bd <= limit ? best : NULL;
}

int cmd_complete(const char *prefix, const char **out, int max) {
    int    n  = 0;
    size_t lp = strlen(prefix);
    for (int k = 0; k < CMD_N; k++)
        if (!strncmp(defs[k].name, prefix, lp)) {
            if (n < max)
                out[n] = defs[k].name;
            n++;
        }
    return n;
}

int cmd_parse(const char *line, cmd_result *r) {
    memset(r, 0, sizeof *r);
    r->id = CMD_UNKNOWN;
    while (isspace((unsigned char)*line))
        line++;
    if (*line != '/') {
        snprintf(r->msg, sizeof r->msg, "not a command (commands start with '/')");
        return -1;
    }
    line++;
    char   name[64];
    size_t nl = strcspn(line, " \t\n");
    if (nl >= sizeof name)
        nl = sizeof name - 1;
    memcpy(name, line, nl);
    name[nl]         = 0;
    const char *args = line + strcspn(line, " \t\n");
    while (isspace((unsigned char)*args))
        args++;
    size_t al = strlen(args);
    while (al && isspace((unsigned char)args[al - 1]))
        al--;
    if (al >= sizeof r->arg) {
        snprintf(r->msg, sizeof r->msg, "/%s: the argument is too long (%zu bytes, at most %zu)", name, al,
                 sizeof r->arg - 1);
        return -1;
    }
    int k;
    for (k = 0; k < CMD_N; k++)
        if (!strcmp(name, defs[k].name))
            break;
    if (k == CMD_N) {
        const char *near = cmd_nearest(name);
        if (near)
            snprintf(r->msg, sizeof r->msg,
                     "unknown command /%s; did you mean /%s? (/help lists the commands)", name, near);
        else
            snprintf(r->msg, sizeof r->msg, "unknown command /%s (/help lists the commands)", name);
        return -1;
    }
    r->id = (enum cmd_id)k;
    memcpy(r->arg, args, al);
    r->arg[al] = 0;
    char usage[128];
    cmd_usage(r->id, usage, sizeof usage);
    switch (defs[k].kind) {
    case CMD_ARG_NONE:
        if (al) {
            snprintf(r->msg, sizeof r->msg, "/%s takes no argument (got '%.60s')", name, r->arg);
            return -1;
        }
        break;
    case CMD_ARG_NUM: {
        char range[64];
        if (!al) {
            snprintf(r->msg, sizeof r->msg, "%s: missing the value (%s)", usage, defs[k].help);
            return -1;
        }
        if (cmd_num(r->arg, defs[k].lo, defs[k].hi, 0, &r->num) != 0) {
            snprintf(r->msg, sizeof r->msg, "%s: '%.60s' is not a number in %s", usage, r->arg,
                     cmd_range_str(defs[k].lo, defs[k].hi, range, sizeof range));
            return -1;
        }
        break;
    }
    case CMD_ARG_ONOFF:
        if (!strcmp(r->arg, "on"))
            r->flag = 1;
        else if (!strcmp(r->arg, "off"))
            r->flag = 0;
        else {
            snprintf(r->msg, sizeof r->msg, "%s: %s%.60s%s", usage, al ? "'" : "missing on or off",
                     al ? r->arg : "", al ? "' is not on or off" : "");
            return -1;
        }
        break;
    case CMD_ARG_EFFORT:
        if (!strcmp(r->arg, "low"))
            r->flag = 0;
        else if (!strcmp(r->arg, "high"))
            r->flag = 1;
        else if (!strcmp(r->arg, "max"))
            r->flag = 2;
        else if (!al) {
            snprintf(r->msg, sizeof r->msg, "%s: missing the effort (low, high or max)", usage);
            return -1;
        } else {
            snprintf(r->msg, sizeof r->msg, "%s: '%.60s' is not low, high or max%s", usage, r->arg,
                     strcmp(r->arg, "medium") ? "" : " (the release rejects medium)");
            return -1;
        }
        break;
    case CMD_ARG_FORGET:
        if (al && strcmp(r->arg, "--fit")) {
            snprintf(r->msg, sizeof r->msg, "%s: '%.60s' is not --fit", usage, r->arg);
            return -1;
        }
        break;
    case CMD_ARG_FILE:
        if (!al) {
            snprintf(r->msg, sizeof r->msg, "%s: missing the file name", usage);
            return -1;
        }
        break;
    case CMD_ARG_OPT_WORD:
        if (strpbrk(r->arg, " \t")) {
            snprintf(r->msg, sizeof r->msg, "%s: expected one word, got '%.60s'", usage, r->arg);
            return -1;
        }
        if (r->id == CMD_HELP && al) {
            const char *w = r->arg[0] == '/' ? r->arg + 1 : r->arg;
            int         j;
            for (j = 0; j < CMD_N; j++)
                if (!strcmp(w, defs[j].name))
                    break;
            if (j == CMD_N) {
                const char *near = cmd_nearest(w);
                snprintf(r->msg, sizeof r->msg, "/help: no command /%.60s%s%s%s", w,
                         near ? "; did you mean /" : "", near ? near : "", near ? "?" : "");
                return -1;
            }
            r->flag = j;
        }
        break;
    default:
        break;
    }
    return 0;
}
