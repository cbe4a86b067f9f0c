/* input.h: the chat's input line: libedit driven key by key from the UI thread.
 *
 * DESIGN
 * libedit and curses must never both write to the terminal. libedit gets its keys from us
 * (EL_GETCFN), in unbuffered mode (el_wgets returns after each editing command), and its own
 * output and terminal-mode changes go to a private pseudo-terminal and /dev/null, never to the
 * real one: the UI draws el_wline()'s buffer in its curses input window. When a libedit command
 * needs more keys than we handed it (an escape sequence, Ctrl-R incremental search), it calls
 * back the `more` hook, which keeps the UI alive (events, drawing) until the next key comes.
 * History is kept in the XDG state directory ($XDG_STATE_HOME/k3chat/history).
 */
#pragma once
#include <stddef.h>
#include <wchar.h>

typedef struct inp inp;

/* more(ud, &key): wait for the next key for libedit; return 1, or 0 to abort the command. */
typedef int (*inp_more_fn)(void *ud, wchar_t *key);

/* histfile NULL = no history file. NULL when libedit cannot start (err says why). */
inp *inp_new(const char *histfile, inp_more_fn more, void *ud, char *err, size_t errn);
void inp_free(inp *in);

/* Hand one key to libedit. Returns 1 when the user submitted a line: *line gets it (UTF-8,
 * malloc'd, without the final newline) and the editor is empty again. */
int inp_key(inp *in, wchar_t key, char **line);
/* Queue a key to be read before the one given to the next inp_key (for ESC + key). */
void inp_prefeed(inp *in, wchar_t key);
void inp_insert(inp *in, const char *utf8); /* insert text at the cursor (paste, newline)  */
void inp_clear(inp *in);
/* Ctrl-_ undoes the last change to the line (a word typed, a deletion, a libedit command), Alt-_
 * redoes it (inp_key). Changes made by the calls above (inp_insert, inp_clear) are not recorded
 * by themselves: call this first, and the line as it is now is one undo away. */
void inp_undo_mark(inp *in);
/* Bind Backspace, Ctrl-D and Delete, Ctrl-B, Ctrl-F and the arrows of an EditLine (the chat's
 * input line, line mode's) to commands that act on a whole grapheme cluster (an emoji sequence,
 * a letter with its accents). */
typedef struct editline EditLine;
void                    inp_bind_clusters(EditLine *el);
int                     inp_empty(inp *in);
/* The text to draw (UTF-8, valid until the next inp_* call) and the cursor's byte offset. */
const char *inp_text(inp *in, size_t *cursor);
void        inp_history_add(inp *in, const char *line);
/* /undo: the newest history entry that is line (its trailing newline aside) leaves the history
 * and its file, so an undone message leaves no trace (k3chat(5)). */
void inp_history_drop(inp *in, const char *line);
/* History search (Ctrl-R in the UI): the first entry containing pat (UTF-8, case-sensitive)
 * at *pos or older (dir > 0) or newer than *pos (dir < 0), entries counted from 0 = newest.
 * Returns it (valid until the next call) and sets *pos, or NULL when there is none. */
const char *inp_history_find(inp *in, const char *pat, int *pos, int dir);
/* A one-line hint from the last completion (e.g. the matching commands), or "". */
const char *inp_hint(inp *in);
void        inp_set_hint(inp *in, const char *hint);
/* Default history path in the XDG state directory (created); buf untouched and -1 when unknown. */
int inp_history_path(char *buf, size_t n);
