/* cmd.h: slash commands: the table, parsing with clear messages for bad arguments, /help text,
 * nearest-command suggestions and completion. Shared by the TUI and the plain mode; this module
 * only parses and validates, the caller applies the result. */
#pragma once
#include "k3.h"

#include <stddef.h>

/* X(ID, NAME, KIND, SETTING, USAGE, HELP). A CMD_ARG_SETTING command sets a row of the settings
 * table (k3-settings.h): its name is the row's slash name, its help the row's doc, its argument
 * parsed by k3_setting_parse (NAME, USAGE and HELP are NULL here). */
#define CMD_TABLE(X)                                                                                         \
    X(CMD_HELP, "help", CMD_ARG_OPT_WORD, -1, "[COMMAND]",                                                   \
      "list the commands and keys, or explain one command")                                                  \
    X(CMD_TEMP, NULL, CMD_ARG_SETTING, K3_SETTING_TEMP, NULL, NULL)                                          \
    X(CMD_TOPP, NULL, CMD_ARG_SETTING, K3_SETTING_TOP_P, NULL, NULL)                                         \
    X(CMD_THINK, NULL, CMD_ARG_SETTING, K3_SETTING_THINK, NULL, NULL)                                        \
    X(CMD_EFFORT, NULL, CMD_ARG_SETTING, K3_SETTING_EFFORT, NULL, NULL)                                      \
    X(CMD_SHOWTHINK, NULL, CMD_ARG_SETTING, K3_SETTING_SHOW_THINKING, NULL, NULL)                            \
    X(CMD_EXPERTS, NULL, CMD_ARG_SETTING, K3_SETTING_EXPERT_GB, NULL, NULL)                                  \
    X(CMD_SYSTEM, "system", CMD_ARG_TEXT_OPT, -1, "[TEXT|--clear]",                                          \
      "set the system prompt (no text: show it; --clear or \"\": remove it)")                                \
    X(CMD_CLEAR, "clear", CMD_ARG_NONE, -1, "", "start a new conversation")                                  \
    X(CMD_RETRY, "retry", CMD_ARG_NONE, -1, "", "regenerate the last answer")                                \
    X(CMD_UNDO, "undo", CMD_ARG_NONE, -1, "", "drop the last exchange (your message and the answer)")        \
    X(CMD_FORGET, "forget", CMD_ARG_FORGET, -1, "[--fit]",                                                   \
      "drop the oldest exchange, to make room in the context (--fit: keep the newest exchanges that leave "  \
      "a quarter of it free)")                                                                               \
    X(CMD_SAVE, "save", CMD_ARG_FILE_OPT, -1, "[--force] [FILE]",                                            \
      "save the conversation as a transcript (default: a new file in the data directory)")                   \
    X(CMD_LOAD, "load", CMD_ARG_FILE, -1, "FILE", "continue a saved conversation")                           \
    X(CMD_REPLAY, "replay", CMD_ARG_FILE, -1, "FILE",                                                        \
      "re-run a transcript's user turns and compare the answers")                                            \
    X(CMD_EXPORT, "export", CMD_ARG_FILE, -1, "[--force] FILE.md", "write the conversation as Markdown")     \
    X(CMD_STATS, "stats", CMD_ARG_NONE, -1, "", "show the statistics of the last turn and the session")      \
    X(CMD_THEME, "theme", CMD_ARG_OPT_WORD, -1, "[NAME]", "switch the color theme (no name: list them)")     \
    X(CMD_RAW, NULL, CMD_ARG_SETTING, K3_SETTING_RAW, NULL, NULL)                                            \
    X(CMD_COPY, "copy", CMD_ARG_TEXT_OPT, -1, "[N] [code [K]]",                                              \
      "copy the last answer, answer N or its K-th code block (OSC 52)")                                      \
    X(CMD_EDIT, "edit", CMD_ARG_NONE, -1, "",                                                                \
      "edit your last message; sending it replaces the last exchange")                                       \
    X(CMD_QUIT, "quit", CMD_ARG_NONE, -1, "", "leave k3chat")

enum cmd_arg {
    CMD_ARG_NONE,
    CMD_ARG_SETTING,
    CMD_ARG_TEXT_OPT,
    CMD_ARG_FILE,
    CMD_ARG_FILE_OPT,
    CMD_ARG_OPT_WORD,
    CMD_ARG_FORGET
};

enum cmd_id {
#define X(id, name, kind, setting, usage, help) id,
    CMD_TABLE(X)
#undef X
        CMD_N,
    CMD_UNKNOWN = -1
};

typedef struct cmd_result {
    enum cmd_id id;
    double      num;       /* CMD_ARG_SETTING: the value (a number, on/off 1/0, effort's index) */
    int         flag;      /* CMD_ARG_SETTING on/off or effort: num as an int; /help: the command */
    char        arg[4096]; /* text / file / word argument ("" when none)   */
    char        msg[512];  /* the error message when cmd_parse fails       */
} cmd_result;

/* The setting a command sets (K3_SETTING_TEMP for CMD_TEMP), -1 when none. */
int cmd_setting(enum cmd_id id);
/* The command that sets a setting, CMD_UNKNOWN when none. */
enum cmd_id cmd_of_setting(enum k3_setting_id s);

/* Parse "/name args". 0 ok; -1 with r->msg set (bad argument, unknown command + suggestion). */
int         cmd_parse(const char *line, cmd_result *r);
const char *cmd_name(enum cmd_id id);
/* "/temp X" and its help, one line each. */
const char *cmd_usage(enum cmd_id id, char *buf, size_t n);
const char *cmd_help(enum cmd_id id);
/* The command closest to name (edit distance), or NULL when nothing is near. */
const char *cmd_nearest(const char *name);
/* Commands whose name starts with prefix (without '/'): count, names into out[0..max). */
int cmd_complete(const char *prefix, const char **out, int max);
