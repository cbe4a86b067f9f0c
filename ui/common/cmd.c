/* cmd.c: slash-command table, parsing and suggestions (see cmd.h). */
#include "cmd.h"
#include "text.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int         kind, setting;
    const char *usage, *help;
} defs[CMD_N] = {
#define X(id, name, kind, setting, usage, help) {name, kind, setting, usage, help},
    CMD_TABLE(X)
#undef X
};

int cmd_setting(enum cmd_id id) {
    return id >= 0 && id < CMD_N ? defs[id].setting : -1;
}

enum cmd_id cmd_of_setting(enum k3_setting_id s) {
    for (int k = 0; k < CMD_N; k++)
        if (defs[k].setting == (int)s)
            return (enum cmd_id)k;
    return CMD_UNKNOWN;
}

/* The name: a setting command's is its row's slash name. */
static const char *name_of(int k) {
    return defs[k].setting >= 0 ? k3_setting(defs[k].setting)->slash : defs[k].name;
}

const char *cmd_name(enum cmd_id id) {
    return id >= 0 && id < CMD_N ? name_of(id) : "?";
}

const char *cmd_usage(enum cmd_id id, char *buf, size_t n) {
    if (id < 0 || id >= CMD_N)
        return "";
    const char *arg = defs[id].setting >= 0 ? k3_setting_arg(defs[id].setting, K3_SRC_SLASH) : defs[id].usage;
    snprintf(buf, n, "/%s%s%s", name_of(id), arg[0] ? " " : "", arg);
    return buf;
}

/* A setting command's help: the row's doc, and the range of a number ("(0..2)"; inside the doc's
 * closing parenthesis when it ends in one: /experts read "... (unset: from the memory available)
 * (0..1000000)"). */
const char *cmd_help(enum cmd_id id) {
    static char help[CMD_N][256];
    if (id < 0 || id >= CMD_N)
        return "";
    if (defs[id].setting < 0)
        return defs[id].help;
    if (!help[id][0]) {
        const k3_setting_row *r = k3_setting(defs[id].setting);
        size_t                n = strlen(r->doc), paren = n && r->doc[n - 1] == ')';
        if (r->type == K3_TYPE_NUM)
            snprintf(help[id], sizeof help[id], "%.*s%s%.15g..%.15g)", (int)(n - paren), r->doc,
                     paren ? "; " : " (", r->lo, r->hi);
        else
            snprintf(help[id], sizeof help[id], "%s", r->doc);
    }
    return help[id];
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
        int d = ln && !strncmp(name_of(k), name, ln) ? 0 : distance(name, name_of(k));
        if (d < bd) {
            bd   = d;
            best = name_of(k);
        }
    }
    int limit = ln <= 3 ? 1 : ln <= 6 ? 2 : 3;
    return bd <= limit ? best : NULL;
}

int cmd_complete(const char *prefix, const char **out, int max) {
    int    n  = 0;
    size_t lp = strlen(prefix);
    for (int k = 0; k < CMD_N; k++)
        if (!strncmp(name_of(k), prefix, lp)) {
            if (n < max)
                out[n] = name_of(k);
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
        if (!strcmp(name, name_of(k)))
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
    char usage[128], q[64]; /* q: the argument quoted in a message, cut (txt_clip) */
    cmd_usage(r->id, usage, sizeof usage);
    switch (defs[k].kind) {
    case CMD_ARG_NONE:
        if (al) {
            snprintf(r->msg, sizeof r->msg, "/%s takes no argument (got '%s')", name,
                     txt_clip(q, sizeof q, r->arg));
            return -1;
        }
        break;
    case CMD_ARG_SETTING: {
        char want[96];
        if (!al) {
            snprintf(r->msg, sizeof r->msg, "%s: missing the value (%s)", usage,
                     k3_setting_expect(defs[k].setting, K3_SRC_SLASH, want, sizeof want));
            return -1;
        }
        if (k3_setting_parse(defs[k].setting, K3_SRC_SLASH, r->arg, &r->num, r->msg, sizeof r->msg))
            return -1;
        r->flag = (int)r->num;
        break;
    }
    case CMD_ARG_FORGET:
        if (al && strcmp(r->arg, "--fit")) {
            snprintf(r->msg, sizeof r->msg, "%s: '%s' is not --fit", usage, txt_clip(q, sizeof q, r->arg));
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
            snprintf(r->msg, sizeof r->msg, "%s: expected one word, got '%s'", usage,
                     txt_clip(q, sizeof q, r->arg));
            return -1;
        }
        if (r->id == CMD_HELP && al) {
            const char *w = r->arg[0] == '/' ? r->arg + 1 : r->arg;
            int         j;
            for (j = 0; j < CMD_N; j++)
                if (!strcmp(w, name_of(j)))
                    break;
            if (j == CMD_N) {
                const char *near = cmd_nearest(w);
                snprintf(r->msg, sizeof r->msg, "/help: no command /%s%s%s%s", txt_clip(q, sizeof q, w),
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
