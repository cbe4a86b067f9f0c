/* settings.c: settings and engine-side slash commands shared by the TUI and plain mode (settings.h). */
#include "settings.h"
#include "chatfile.h"
#include "k3.h"
#include "xdg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void chat_settings_init(chat_settings *s, const ui_opts *o) {
    memset(s, 0, sizeof *s);
    s->gen.temp         = (float)k3_setting(K3_SETTING_TEMP)->def;
    s->gen.top_p        = (float)k3_setting(K3_SETTING_TOP_P)->def;
    s->gen.think        = o->think >= 0 ? o->think : (int)k3_setting(K3_SETTING_THINK)->def;
    s->gen.effort       = (int)k3_setting(K3_SETTING_EFFORT)->def;
    s->gen.max_tokens   = o->max_tokens;
    s->gen.think_budget = o->think_budget;
    s->gen.seed         = o->seed;
    s->gen.has_seed     = o->has_seed;
    s->gen.model_temp   = 1;
    s->gen.model_top_p  = 1;
    s->server_sampling  = o->endpoint != NULL; /* known from the start, before the server answers */
    s->show_thinking    = (int)k3_setting(K3_SETTING_SHOW_THINKING)->def;
    s->expert_gb        = -1;
    if (!isnan(o->temp)) {
        s->gen.temp       = o->temp;
        s->gen.model_temp = 0;
        s->temp_set       = 1;
    }
    if (!isnan(o->top_p)) {
        s->gen.top_p       = o->top_p;
        s->gen.model_top_p = 0;
        s->top_p_set       = 1;
    }
    double eff; /* main checked it */
    if (o->effort && !k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_FLAG, o->effort, &eff, NULL, 0))
        s->gen.effort = (int)eff;
    if (o->system)
        snprintf(s->system, sizeof s->system, "%s", o->system);
    if (o->load) /* explicit options win over the transcript's settings */
        s->keep = (!isnan(o->temp) ? CHAT_KEEP_TEMP : 0) | (!isnan(o->top_p) ? CHAT_KEEP_TOP_P : 0) |
                  (o->think >= 0 ? CHAT_KEEP_THINK : 0) | (o->effort ? CHAT_KEEP_EFFORT : 0);
}

void chat_settings_model(chat_settings *s, const ue_gen *m) {
    if (!s->temp_set && m->temp >= 0)
        s->gen.temp = m->temp;
    if (!s->top_p_set && m->top_p > 0)
        s->gen.top_p = m->top_p;
    s->server_sampling = m->temp < 0; /* a remote server's own defaults, not known here */
}

const char *chat_sampling_str(const chat_settings *s, int top_p, char *buf, size_t n) {
    if (s->server_sampling && !(top_p ? s->top_p_set : s->temp_set))
        return "server's";
    snprintf(buf, n, "%.2f", (double)(top_p ? s->gen.top_p : s->gen.temp));
    return buf;
}

void chat_settings_loaded(chat_settings *s, const ue_gen *g, char *msg, size_t n) {
    unsigned k = s->keep;
    if (!(k & CHAT_KEEP_TEMP))
        s->gen.temp = g->temp;
    if (!(k & CHAT_KEEP_TOP_P))
        s->gen.top_p = g->top_p;
    if (!(k & CHAT_KEEP_THINK))
        s->gen.think = g->think;
    if (!(k & CHAT_KEEP_EFFORT))
        s->gen.effort = g->effort;
    s->gen.model_temp = s->gen.model_top_p = 0;
    s->temp_set = s->top_p_set      = 1;
    s->keep                         = 0;
    static const char *const flag[] = {"--temp", "--top-p", "--think", "--effort"}; /* CHAT_KEEP_* order */
    char                     set[256], won[64] = "";
    for (int b = 0; b < 4; b++)
        if (k & 1u << b)
            snprintf(won + strlen(won), sizeof won - strlen(won), "%s%s", won[0] ? ", " : "", flag[b]);
    chat_settings_str(s, set, sizeof set);
    snprintf(msg, n, "settings from the transcript: %s%s%s", set,
             won[0] ? "; as given on the command line: " : "", won);
}

void chat_settings_str(const chat_settings *s, char *buf, size_t n) {
    char t[16], p[16];
    snprintf(buf, n, "temp %s · top-p %s · think %s · effort %s", chat_sampling_str(s, 0, t, sizeof t),
             chat_sampling_str(s, 1, p, sizeof p), s->gen.think ? "on" : "off",
             ue_effort_name(s->gen.effort));
}

char *chat_utf8_in(const char *what, const char *s, size_t n, char *note, size_t nn) {
    char  *out   = NULL;
    size_t first = 0;
    long   bad   = k3_utf8_repair(s, n, &out, &first);
    note[0]      = 0;
    if (bad > 0)
        snprintf(note, nn,
                 "%s: invalid UTF-8 (byte %zu is 0x%02x%s) replaced with U+FFFD; k3chat reads UTF-8 text",
                 what, first + 1, (unsigned char)s[first], bad > 1 ? ", and more after it" : "");
    return out;
}

int chat_default_save_path(char *buf, size_t n) {
    char dir[PATH_MAX];
    if (xdg_dir("XDG_DATA_HOME", ".local/share", "transcripts", 1, dir, sizeof dir) != 0)
        return -1;
    time_t    now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    /* never an earlier save's name, nor another process's: the name is claimed by creating it
     * (O_EXCL, empty until the save replaces it); a second /save in the same second gets -2,
     * -3, ... */
    for (int k = 1; k < 10000; k++) {
        if (k == 1)
            snprintf(buf, n, "%.3900s/chat-%s.jsonl", dir, stamp);
        else
            snprintf(buf, n, "%.3900s/chat-%s-%d.jsonl", dir, stamp, k);
        int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

int chat_apply(chat_settings *s, ue *eng, const cmd_result *r, char *msg, size_t n) {
    char file[PATH_MAX];
    msg[0] = 0;
    switch (r->id) {
    case CMD_TEMP:
        s->gen.temp       = (float)r->num;
        s->gen.model_temp = 0;
        s->temp_set       = 1;
        snprintf(msg, n, "temperature %.2f%s", r->num, r->num == 0 ? " (greedy)" : "");
        return 1;
    case CMD_TOPP:
        s->gen.top_p       = (float)r->num;
        s->gen.model_top_p = 0;
        s->top_p_set       = 1;
        snprintf(msg, n, "top-p %.2f", r->num);
        return 1;
    case CMD_THINK:
        s->gen.think = r->flag;
        snprintf(msg, n, "thinking %s for the next turns", r->flag ? "on" : "off");
        return 1;
    case CMD_EFFORT:
        s->gen.effort = r->flag;
        snprintf(msg, n, "thinking effort %s%s", ue_effort_name(r->flag),
                 s->gen.think ? "" : " (thinking is off: /think on)");
        return 1;
    case CMD_SHOWTHINK:
        s->show_thinking = r->flag;
        snprintf(msg, n, "think pane %s (the model still thinks when /think is on)",
                 r->flag ? "shown" : "hidden");
        return 1;
    case CMD_EXPERTS:
        s->expert_gb = r->num;
        if (eng)
            ue_experts(eng, r->num);
        if (s->server_sampling) /* a remote server: the engine says why the budget does not apply */
            msg[0] = 0;
        else
            snprintf(msg, n, "expert-cache budget %g GB requested", r->num);
        return 1;
    case CMD_SYSTEM:
        if (!r->arg[0]) {
            snprintf(msg, n, "system prompt: %s", s->system[0] ? s->system : "(none)");
            return 1;
        }
        if (!strcmp(r->arg, "--clear") || !strcmp(r->arg, "\"\"") || !strcmp(r->arg, "''")) {
            int had      = s->system[0] != 0;
            s->system[0] = 0;
            if (eng)
                ue_system(eng, "");
            snprintf(msg, n,
                     had ? "system prompt removed; it applies from the next turn"
                         : "there was no system prompt");
            return 1;
        }
        snprintf(s->system, sizeof s->system, "%s", r->arg);
        if (eng)
            ue_system(eng, s->system);
        snprintf(msg, n, "system prompt set (%zu byte%s); it applies from the next turn", strlen(s->system),
                 strlen(s->system) == 1 ? "" : "s");
        return 1;
    case CMD_SAVE: {
        char path[PATH_MAX];
        int  force = 0;
        if (r->arg[0]) {
            if (chat_file_arg("/save", r->arg, path, sizeof path, &force, msg, n))
                return 1;
        } else if (chat_default_save_path(path, sizeof path) != 0) {
            int  e = errno;
            char dir[PATH_MAX];
            if (xdg_dir("XDG_DATA_HOME", ".local/share", "transcripts", 0, dir, sizeof dir) != 0)
                snprintf(msg, n, "/save: no data directory (set XDG_DATA_HOME or HOME, or give a FILE)");
            else { /* the variables are set: say which folder could not be made, and why */
                char at[PATH_MAX];
                xdg_first_missing(dir, at, sizeof at);
                if (strcmp(at, dir))
                    snprintf(msg, n, "/save: cannot make %.2000s (at %.1900s): %s (give a FILE)", dir, at,
                             strerror(e));
                else
                    snprintf(msg, n, "/save: cannot make %.3900s: %s (give a FILE)", dir, strerror(e));
            }
            return 1;
        }
        if (eng)
            ue_save(eng, path, r->arg[0] ? force : UE_SAVE_CLAIMED);
        return 1;
    }
    case CMD_LOAD:
    case CMD_EXPORT:
    case CMD_REPLAY: { /* the engine says "replaying FILE" once it has read the file */
        int force = 0;
        if (chat_file_arg(r->id == CMD_LOAD     ? "/load"
                          : r->id == CMD_EXPORT ? "/export"
                                                : "/replay",
                          r->arg, file, sizeof file, r->id == CMD_EXPORT ? &force : NULL, msg, n))
            return 1;
        if (eng && r->id == CMD_LOAD)
            ue_load(eng, file);
        else if (eng && r->id == CMD_EXPORT)
            ue_export(eng, file, force);
        else if (eng)
            ue_replay(eng, file, &s->gen);
        return 1;
    }
    case CMD_FORGET:
        if (!r->arg[0])
            return 0; /* the front end drops the oldest exchange from its display too */
        if (eng)
            ue_forget_fit(eng);
        return 1;
    default:
        return 0;
    }
}

int chat_verbose(void) {
    return k3_log_verbose();
}

const char *chat_help_text(void) {
    static char buf[8192];
    if (buf[0])
        return buf;
    size_t u = (size_t)snprintf(buf, sizeof buf, "Commands:\n");
    for (int k = 0; k < CMD_N; k++) {
        char usage[96];
        cmd_usage((enum cmd_id)k, usage, sizeof usage);
        /* at least two spaces before the description: the full-screen chat finds its second
         * column (the hanging indent of a wrapped description) by them */
        int col = strlen(usage) < 22 ? 22 : (int)strlen(usage) + 1;
        u += (size_t)snprintf(buf + u, sizeof buf - u, "  %-*s %s\n", col, usage, cmd_help((enum cmd_id)k));
    }
    snprintf(buf + u, sizeof buf - u,
             "Keys:\n"
             "  Enter                  send the message\n"
             "  Alt-Enter, trailing \\  new line in the message\n"
             "  Tab                    complete a command\n"
             "  Up/Down, Ctrl-P/N      history;  Ctrl-R/Ctrl-S search it (older/newer), Ctrl-G gives up\n"
             "  Ctrl-A/E/B/F/K/U/W/Y/T, Alt-B/F  Emacs editing keys\n"
             "  Ctrl-C                 stop the answer; with a typed line (or /edit): clear it; else quit\n"
             "  Ctrl-D, Ctrl-Z         quit at an empty prompt (twice while an answer streams); suspend\n"
             "  PgUp/PgDn, wheel       scroll the conversation;  Ctrl-Home/End: top/bottom\n"
             "  F2                     expand/collapse all reasoning\n"
             "  F3                     mouse capture on/off (off: the terminal selects text)\n"
             "  Ctrl-L                 redraw the screen\n"
             "A line starting with // sends a message that starts with /.");
    return buf;
}
