/* opts.h: the settings a front end starts with (ui_opts), filled by main from the command line
 * and the environment through the settings table (include/k3-settings.h). The shared layer
 * (engine.h, settings.h) and the front ends take this struct; which front end runs is main's
 * choice (ui/cli/main.c), and the front ends do not call each other. */
#pragma once
#include <stdint.h>

typedef struct ui_opts {
    const char *dir;          /* model or vocabulary directory                           */
    const char *file;         /* FILE / TRANSCRIPT argument                              */
    const char *prompt;       /* --prompt                                                */
    const char *ids;          /* --ids                                                   */
    const char *pattern;      /* --pattern kimi|o200k (NULL = from the directory)        */
    const char *load;         /* --load FILE                                             */
    const char *theme;        /* --theme NAME, else K3_THEME                             */
    const char *system;       /* --system TEXT                                           */
    const char *json_schema;  /* --json-schema FILE: the answer follows this schema      */
    int         json;         /* --json: the answer is one JSON object                   */
    int         measure;      /* --measure (with --inspect): the speed figures measured again */
    int         max_tokens;   /* --max-tokens, -1 = default                              */
    int         think_budget; /* --think-budget N: reasoning tokens, 0 = no limit       */
    float       temp;         /* --temp, NAN = generation_config.json default            */
    float       top_p;        /* --top-p, NAN = default                                  */
    uint64_t    seed;         /* --seed                                                  */
    int         has_seed;
    int         think;       /* --think on|off: 1/0, -1 = default (on)                  */
    const char *effort;      /* --effort low|high|max                                   */
    const char *serve;       /* --serve [ADDR:]PORT                                     */
    const char *endpoint;    /* --endpoint URL: chat with a remote server (no MODEL_DIR) */
    const char *api_key;     /* --api-key KEY, else $K3_API_KEY (NULL = none)           */
    const char *model_name;  /* --model NAME: served / requested model name             */
    const char *allow_hosts; /* --allow-host NAMES: Host names a keyless --serve answers */
    int         parallel;    /* --parallel N: turns --serve runs at once (0 = default)  */
} ui_opts;
