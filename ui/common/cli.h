/* cli.h: k3chat's command-line modes. main.c parses options into cli_opts and calls one
 * entry point; each returns the process exit status (0 ok, 1 error, 2 usage). */
#pragma once
#include <stddef.h>
#include <stdint.h>

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

typedef struct cli_opts {
    enum cli_mode mode;
    const char   *dir;        /* model or vocabulary directory                     */
    const char   *file;       /* FILE / TRANSCRIPT argument                        */
    const char   *prompt;     /* --prompt                                          */
    const char   *ids;        /* --ids                                             */
    const char   *pattern;    /* --pattern kimi|o200k (NULL = from the directory)  */
    const char   *load;       /* --load FILE                                       */
    const char   *theme;      /* --theme NAME                                      */
    const char   *system;     /* --system TEXT                                     */
    const char   *json_schema; /* --json-schema FILE: the answer follows this schema */
    int           json;        /* --json: the answer is one JSON object              */
    int           max_tokens; /* --max-tokens, -1 = default                        */
    float         temp;       /* --temp, NAN = generation_config.json default       */
    float         top_p;      /* --top-p, NAN = default                             */
    uint64_t      seed;       /* --seed                                            */
    int           has_seed;
    int           think;       /* --think on|off: 1/0, -1 = default (on)             */
    const char   *effort;      /* --effort low|high|max                              */
    int           plain;       /* --plain                                           */
    const char   *serve;       /* --serve [ADDR:]PORT                               */
    const char   *endpoint;    /* --endpoint URL: chat with a remote server (no MODEL_DIR) */
    const char   *api_key;     /* --api-key KEY, else $K3_API_KEY (NULL = none)     */
    const char   *model_name;  /* --model NAME: served / requested model name       */
    const char   *allow_hosts; /* --allow-host NAMES: Host names a keyless --serve answers */
    int           parallel;    /* --parallel N: turns --serve runs at once (0 = default 4) */
    int           measure;     /* --measure (with --inspect): the speed figures measured again */
} cli_opts;

int cli_inspect(const cli_opts *o);    /* cli-inspect.c */
int cli_tokenize(const cli_opts *o);   /* cli-tok.c     */
int cli_detokenize(const cli_opts *o); /* cli-tok.c     */
int cli_chat_ids(const cli_opts *o);   /* cli-chatids.c */
int cli_oneshot(const cli_opts *o);    /* cli-gen.c     */
int cli_replay(const cli_opts *o);     /* replay.c      */
int cli_plain(const cli_opts *o);      /* plain.c       */
int cli_serve(const cli_opts *o);      /* serve.c       */
int ui_tui_run(const cli_opts *o);     /* tui.c         */

/* serve.c: parse an OpenAI chat request body as the server would; 0 ok, -1 with err set. */
int serve_check_body(const char *body, size_t n, char *err, size_t errn);
