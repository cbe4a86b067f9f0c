/* cli.h: k3chat's command-line modes (ui/cli). main.c parses the options into ui_opts (opts.h)
 * and runs one mode: one of these, the full-screen chat (ui/tui/tui.h) or the server
 * (ui/serve/serve.h). Each returns the process exit status (0 ok, 1 error, 2 usage). */
#pragma once
#include "opts.h"

enum cli_mode {
    CLI_CHAT = 0,   /* TUI, or plain line mode                    */
    CLI_INSPECT,    /* --inspect MODEL_DIR                         */
    CLI_TOKENIZE,   /* --tokenize VOCAB_DIR FILE                   */
    CLI_DETOKENIZE, /* --detokenize VOCAB_DIR FILE                 */
    CLI_CHAT_IDS,   /* --chat-ids MODEL_DIR TRANSCRIPT             */
    CLI_ONESHOT,    /* MODEL_DIR --prompt TEXT | --ids "1 2 3"     */
    CLI_REPLAY,     /* MODEL_DIR --replay FILE                     */
    CLI_SERVE,      /* MODEL_DIR --serve [ADDR:]PORT               */
};

int cli_inspect(const ui_opts *o);    /* cli-inspect.c */
int cli_tokenize(const ui_opts *o);   /* cli-tok.c     */
int cli_detokenize(const ui_opts *o); /* cli-tok.c     */
int cli_chat_ids(const ui_opts *o);   /* cli-chatids.c */
int cli_oneshot(const ui_opts *o);    /* cli-gen.c     */
int cli_replay(const ui_opts *o);     /* replay.c      */
int cli_plain(const ui_opts *o);      /* plain.c: the line-mode chat */
