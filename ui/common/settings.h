/* settings.h: chat settings and the slash commands both front ends (TUI, plain) apply the same way.
 * The TUI and plain.c handle the commands that touch their display (clear, retry, undo, help,
 * theme, stats, quit); chat_apply does the rest: settings and commands posted to the engine. */
#pragma once
#include "cmd.h"
#include "engine.h"

typedef struct chat_settings {
    ue_gen   gen;
    int      temp_set, top_p_set; /* chosen by the user: the model's defaults do not override */
    int      show_thinking;
    double   expert_gb; /* < 0 = engine default */
    char     system[4096];
    unsigned keep;            /* CHAT_KEEP_*: options given with --load, which win over its transcript's */
    int      server_sampling; /* --endpoint (a remote server): what the user did not set is the
                                 server's default, and /experts does not apply                */
} chat_settings;
enum { CHAT_KEEP_TEMP = 1, CHAT_KEEP_TOP_P = 2, CHAT_KEEP_THINK = 4, CHAT_KEEP_EFFORT = 8 };

/* Defaults from the command line (NAN = model default). */
void chat_settings_init(chat_settings *s, const ui_opts *o);
/* The model's defaults (EV_READY gen) for what the user did not set. */
void chat_settings_model(chat_settings *s, const ue_gen *model);
/* A loaded transcript's settings (EV_SETTINGS) become the ones the next turns use, as if the
 * user had chosen them, except those given on the command line with --load (the first load
 * only); msg says which. */
void chat_settings_loaded(chat_settings *s, const ue_gen *g, char *msg, size_t n);
/* Apply r when it is a settings/engine command: returns 1 and a message for the user in msg
 * (info), or 0 when the caller must handle r itself. */
int chat_apply(chat_settings *s, ue *eng, const cmd_result *r, char *msg, size_t n);
/* K3_VERBOSE is set (and not 0): the engine's info messages are shown too. */
int chat_verbose(void);
/* The whole /help text (commands and keys), newline-separated. */
const char *chat_help_text(void);
/* The temperature (top_p = 0) or top-p in force as shown: "0.60", or "server's" where an
 * --endpoint server's own default applies (nothing is sent for it). buf: 16 bytes. */
const char *chat_sampling_str(const chat_settings *s, int top_p, char *buf, size_t n);
/* "temp 0.60 · top-p 0.95 · think on · effort max" */
void chat_settings_str(const chat_settings *s, char *buf, size_t n);
/* Text from outside (a typed or piped line, a paste, --prompt, --system): a malloc'ed copy
 * with each invalid UTF-8 sequence replaced by U+FFFD, the one rule at every entry point.
 * note gets what the user is told ("" when s was valid), naming `what` and the first byte.
 * NULL when out of memory. */
char *chat_utf8_in(const char *what, const char *s, size_t n, char *note, size_t nn);
/* A new transcript path in the XDG data directory (created), claimed for this process: the file
 * is made empty with O_EXCL, so two processes never get the same name. -1 (errno) when there is
 * no home or the directory cannot be written. */
int chat_default_save_path(char *buf, size_t n);
