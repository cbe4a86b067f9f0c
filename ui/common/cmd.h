/* cmd.h: slash commands: the table, parsing with clear messages for bad arguments, /help text,
 * nearest-command suggestions and completion. Shared by the TUI and the plain mode; this module
 * only parses and validates, the caller applies the result. */
#pragma once
#include <stddef.h>

#define CMD_TABLE(X)                                                                                         \
    X(CMD_HELP, "help", CMD_ARG_OPT_WORD, 0, 0, "[COMMAND]",                                                 \
      "list the commands and keys, or explain one command")                                                  \
    X(CMD_TEMP, "temp", CMD_ARG_NUM, 0, 2, "X", "sampling temperature, 0 = greedy (0..2)")                   \
    X(CMD_TOPP, "top-p", CMD_ARG_NUM, 0, 1, "X",                                                             \
      "nucleus sampling: keep the smallest set of tokens with probability >= X (0..1)")                      \
    X(CMD_THINK, "think", CMD_ARG_ONOFF, 0, 0, "on|off", "thinking mode for the next turns")                 \
    X(CMD_EFFORT, "effort", CMD_ARG_EFFORT, 0, 0, "low|high|max", "thinking effort for the next turns")      \
    X(CMD_SHOWTHINK, "show-thinking", CMD_ARG_ONOFF, 0, 0, "on|off",                                         \
      "show or hide the think pane (the model still thinks)")                                                \
    X(CMD_EXPERTS, "experts", CMD_ARG_NUM, 0, 4096, "GB", "expert-cache budget in GB, applied live")         \
    X(CMD_SYSTEM, "system", CMD_ARG_TEXT_OPT, 0, 0, "[TEXT|--clear]",                                        \
      "set the system prompt (no text: show it; --clear or \"\": remove it)")                                \
    X(CMD_CLEAR, "clear", CMD_ARG_NONE, 0, 0, "", "start a new conversation")                                \
    X(CMD_RETRY, "retry", CMD_ARG_NONE, 0, 0, "", "regenerate the last answer")                              \
    X(CMD_UNDO, "undo", CMD_ARG_NONE, 0, 0, "", "drop the last exchange (your message and the answer)")      \
    X(CMD_FORGET, "forget", CMD_ARG_FORGET, 0, 0, "[--fit]",                                                 \
      "drop the oldest exchange, to make room in the context (--fit: keep the newest exchanges that leave "  \
      "a quarter of it free)")                                                                               \
    X(CMD_SAVE, "save", CMD_ARG_FILE_OPT, 0, 0, "[--force] [FILE]",                                          \
      "save the conversation as a transcript (default: a new file in the data directory)")                   \
    X(CMD_LOAD, "load", CMD_ARG_FILE, 0, 0, "FILE", "continue a saved conversation")                         \
    X(CMD_REPLAY, "replay", CMD_ARG_FILE, 0, 0, "FILE",                                                      \
      "re-run a transcript's user turns and compare the answers")                                            \
    X(CMD_EXPORT, "export", CMD_ARG_FILE, 0, 0, "[--force] FILE.md", "write the conversation as Markdown")   \
    X(CMD_STATS, "stats", CMD_ARG_NONE, 0, 0, "", "show the statistics of the last turn and the session")    \
    X(CMD_THEME, "theme", CMD_ARG_OPT_WORD, 0, 0, "[NAME]", "switch the color theme (no name: list them)")   \
    X(CMD_RAW, "raw", CMD_ARG_ONOFF, 0, 0, "on|off", "show answers as raw Markdown (on) or rendered (off)")  \
    X(CMD_COPY, "copy", CMD_ARG_TEXT_OPT, 0, 0, "[N|code [K]]",                                              \
      "copy the last answer, answer N or its K-th code block (OSC 52)")                                      \
    X(CMD_EDIT, "edit", CMD_ARG_NONE, 0, 0, "",                                                              \
      "edit your last message; sending it replaces the last exchange")                                       \
    X(CMD_QUIT, "quit", CMD_ARG_NONE, 0, 0, "", "leave k3chat")

enum cmd_arg {
    CMD_ARG_NONE,
    CMD_ARG_NUM,
    CMD_ARG_ONOFF,
    CMD_ARG_EFFORT,
    CMD_ARG_TEXT_OPT,
    CMD_ARG_FILE,
    CMD_ARG_FILE_OPT,
    CMD_ARG_OPT_WORD,
    CMD_ARG_FORGET
};

enum cmd_id {
#define X(id, name, kind, lo, hi, usage, help) id,
    CMD_TABLE(X)
#undef X
        CMD_N,
    CMD_UNKNOWN = -1
};

typedef struct cmd_result {
    enum cmd_id id;
    double      num;       /* CMD_ARG_NUM                                  */
    int         flag;      /* on/off: 1/0; effort: 0 low, 1 high, 2 max    */
    char        arg[4096]; /* text / file / word argument ("" when none)   */
    char        msg[512];  /* the error message when cmd_parse fails       */
} cmd_result;

/* Numeric knobs: one parser and one range each, for the command-line options and the slash
 * commands alike (--temp and /temp take the range of the /temp row of CMD_TABLE). A number is
 * plain decimal, "12", "0.5", ".5" or "5.": no sign, exponent, hex, inf or nan (so no "-0",
 * "0x1", "1e9"); integer knobs take digits only. 0 ok, -1 when s is not such a number in
 * lo..hi. */
int cmd_num(const char *s, double lo, double hi, int integer, double *out);
/* "0..2", "0..1000000000": a range as the error messages print it. */
const char *cmd_range_str(double lo, double hi, char *buf, size_t n);
/* The range of a CMD_ARG_NUM command (CMD_TEMP, CMD_TOPP, CMD_EXPERTS). */
void cmd_range(enum cmd_id id, double *lo, double *hi);

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
