/* main.c: k3chat's entry point: parse the command line, pick a mode (cli.h), run it.
 * Only main and the CLI modes may exit; the engine returns statuses. */
#include "settings.h"
#include "cli.h"
#include "cmd.h"
#include "k3.h"
#include "text.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: k3chat [OPTIONS] MODEL_DIR          full-screen chat (line mode if not a terminal)\n"
        "       k3chat MODEL_DIR --prompt TEXT       one-shot answer (response to stdout, reasoning to "
        "stderr)\n"
        "       k3chat MODEL_DIR --ids \"1 2 3\"       one-shot from raw token ids\n"
        "       k3chat --inspect MODEL_DIR          describe a checkpoint, or its first error\n"
        "       k3chat --tokenize VOCAB_DIR FILE    print the token ids of FILE\n"
        "       k3chat --detokenize VOCAB_DIR FILE  write the bytes of the ids in FILE\n"
        "       k3chat --chat-ids MODEL_DIR TRANSCRIPT  ids the chat encoder makes for a transcript\n"
        "       k3chat MODEL_DIR --replay FILE      re-run a transcript's user turns and compare\n"
        "       k3chat MODEL_DIR --serve [ADDR:]PORT  OpenAI-compatible HTTP server (127.0.0.1 by default)\n"
        "       k3chat --endpoint URL [--model NAME]  chat with a remote OpenAI-compatible server\n"
        "\n"
        "options:\n"
        "  --plain             line-mode REPL instead of the full-screen interface\n"
        "  --load FILE         continue a saved conversation (transcript)\n"
        "  --system TEXT       system prompt\n"
        "  --max-tokens N      stop after N generated tokens\n"
        "  --temp T            sampling temperature (0 = greedy)\n"
        "  --top-p P           nucleus sampling threshold\n"
        "  --seed S            random seed for reproducible sampling\n"
        "  --think on|off      thinking mode (default on)\n"
        "  --effort low|high|max  thinking effort (default max)\n"
        "  --json-schema FILE  --prompt's answer is one JSON document valid against FILE's schema\n"
        "  --json              --prompt's answer is one JSON object\n"
        "  --pattern kimi|o200k   pre-tokenizer family for --tokenize/--detokenize\n"
        "  --theme NAME        color theme\n"
        "  --api-key KEY       bearer token --serve demands of clients, --endpoint sends (or K3_API_KEY)\n"
        "  --model NAME        model name served (--serve) or requested (--endpoint)\n"
        "  --allow-host NAMES  Host names (comma-separated) a --serve without a key answers\n"
        "  --parallel N        requests --serve generates at once (1..64, default 4)\n"
        "  --measure           with --inspect: measure this machine's speed figures again\n"
        "  -h, --help          this help;  -V, --version  the version\n"
        "\nSee k3chat(1) for slash commands, keys and the K3_* environment variables.\n");
}

/* Each mode option (--prompt, --ids, --serve, --inspect, ...) picks what k3chat does: two
 * different ones are a usage error (the last one used to win silently: --prompt X --serve P
 * served and dropped the prompt); the same one again replaces its argument. */
static int set_mode(cli_opts *o, enum cli_mode mode, const char *opt) {
    static const char *first;
    if (first && strcmp(first, opt)) {
        fprintf(stderr, "k3chat: %s and %s are different modes; give one of them (try --help)\n", first, opt);
        return 2;
    }
    first   = opt;
    o->mode = mode;
    return 0;
}

/* An option's number: cmd_num, the parser and range the slash commands use (cmd.h). */
static int parse_num(const char *opt, const char *s, double lo, double hi, int integer, double *out) {
    char range[64];
    if (cmd_num(s, lo, hi, integer, out) == 0)
        return 0;
    fprintf(stderr, "k3chat: %s: '%s' is not %s in %s\n", opt, s, integer ? "an integer" : "a number",
            cmd_range_str(lo, hi, range, sizeof range));
    return -1;
}

static int parse_cmd_num(const char *opt, enum cmd_id id, const char *s, double *out) {
    double lo, hi;
    cmd_range(id, &lo, &hi);
    return parse_num(opt, s, lo, hi, 0, out);
}

/* A closed standard descriptor would be taken by the next open() (a shard, the autosave
 * file) and the answer written into that file: hold it with /dev/null opened the other way,
 * so that using it fails with EBADF as it would on the closed descriptor. */
static void hold_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", fd ? O_RDONLY : O_WRONLY);
        if (n >= 0 && n != fd)
            close(n); /* a lower one was closed too: the loop reaches it first */
    }
}

static int run_mode(const cli_opts *o) {
    switch (o->mode) {
    case CLI_INSPECT:
        return cli_inspect(o);
    case CLI_TOKENIZE:
        return cli_tokenize(o);
    case CLI_DETOKENIZE:
        return cli_detokenize(o);
    case CLI_CHAT_IDS:
        return cli_chat_ids(o);
    case CLI_ONESHOT:
        return cli_oneshot(o);
    case CLI_REPLAY:
        return cli_replay(o);
    case CLI_SERVE:
        return cli_serve(o);
    case CLI_CHAT:
        if (o->plain || !isatty(0) || !isatty(1))
            return cli_plain(o);
        return ui_tui_run(o);
    }
    return 2;
}

/* A transcript given to --load is read before anything starts (a bad one is a usage error, as
 * a bad --theme is); the chat reads it again when the engine is up. */
static int check_load(const char *path) {
    k3_conv *c  = k3_conv_new();
    int      rc = 0;
    if (!c || k3_conv_load(c, path, NULL) != K3_OK) {
        txt_term_printf(stderr, "k3chat: --load: %s\n", c ? k3_errmsg() : "out of memory");
        rc = -1;
    }
    k3_conv_free(c);
    return rc;
}

/* The one rule for invalid UTF-8 (chat_utf8_in): an option's text gets U+FFFD where it is
 * not UTF-8, and the user is told. *own holds the copy to free. */
static int utf8_arg(const char *what, const char **s, char **own) {
    char note[256];
    if (!*s)
        return 0;
    if (!(*own = chat_utf8_in(what, *s, strlen(*s), note, sizeof note))) {
        fprintf(stderr, "k3chat: %s: out of memory\n", what);
        return -1;
    }
    if (note[0])
        fprintf(stderr, "k3chat: %s\n", note);
    *s = *own;
    return 0;
}

/* An answer that could not be written is a failure (plain mode reports its own). */
static int stdout_done(int rc) {
    if ((fflush(stdout) || ferror(stdout)) && !rc) {
        fprintf(stderr, "k3chat: cannot write to standard output: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    enum {
        O_INSPECT = 256,
        O_TOKENIZE,
        O_DETOKENIZE,
        O_CHAT_IDS,
        O_PROMPT,
        O_IDS,
        O_PATTERN,
        O_LOAD,
        O_REPLAY,
        O_THEME,
        O_SYSTEM,
        O_MAXTOK,
        O_TEMP,
        O_TOPP,
        O_SEED,
        O_THINK,
        O_EFFORT,
        O_PLAIN,
        O_SERVE,
        O_ENDPOINT,
        O_APIKEY,
        O_MODEL,
        O_ALLOWHOST,
        O_PARALLEL,
        O_MEASURE,
        O_JSONSCHEMA,
        O_JSON
    };
    static const struct option lo[] = {{"inspect", no_argument, 0, O_INSPECT},
                                       {"tokenize", no_argument, 0, O_TOKENIZE},
                                       {"detokenize", no_argument, 0, O_DETOKENIZE},
                                       {"chat-ids", no_argument, 0, O_CHAT_IDS},
                                       {"prompt", required_argument, 0, O_PROMPT},
                                       {"ids", required_argument, 0, O_IDS},
                                       {"pattern", required_argument, 0, O_PATTERN},
                                       {"load", required_argument, 0, O_LOAD},
                                       {"replay", required_argument, 0, O_REPLAY},
                                       {"theme", required_argument, 0, O_THEME},
                                       {"system", required_argument, 0, O_SYSTEM},
                                       {"max-tokens", required_argument, 0, O_MAXTOK},
                                       {"temp", required_argument, 0, O_TEMP},
                                       {"top-p", required_argument, 0, O_TOPP},
                                       {"seed", required_argument, 0, O_SEED},
                                       {"think", required_argument, 0, O_THINK},
                                       {"effort", required_argument, 0, O_EFFORT},
                                       {"plain", no_argument, 0, O_PLAIN},
                                       {"serve", required_argument, 0, O_SERVE},
                                       {"endpoint", required_argument, 0, O_ENDPOINT},
                                       {"api-key", required_argument, 0, O_APIKEY},
                                       {"model", required_argument, 0, O_MODEL},
                                       {"allow-host", required_argument, 0, O_ALLOWHOST},
                                       {"parallel", required_argument, 0, O_PARALLEL},
                                       {"measure", no_argument, 0, O_MEASURE},
                                       {"json-schema", required_argument, 0, O_JSONSCHEMA},
                                       {"json", no_argument, 0, O_JSON},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    hold_std_fds();
    /* a reader that went away (k3chat ... | head) is a write error reported with a message and
     * status 1, not a silent death by SIGPIPE (141) */
    signal(SIGPIPE, SIG_IGN);
    cli_opts o = {.max_tokens = -1, .temp = NAN, .top_p = NAN, .think = -1};
    double   v;
    int      c;
    while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("k3chat %s\n", k3_version());
            return 0;
        case O_INSPECT:
            if (set_mode(&o, CLI_INSPECT, "--inspect"))
                return 2;
            break;
        case O_TOKENIZE:
            if (set_mode(&o, CLI_TOKENIZE, "--tokenize"))
                return 2;
            break;
        case O_DETOKENIZE:
            if (set_mode(&o, CLI_DETOKENIZE, "--detokenize"))
                return 2;
            break;
        case O_CHAT_IDS:
            if (set_mode(&o, CLI_CHAT_IDS, "--chat-ids"))
                return 2;
            break;
        case O_PROMPT:
            if (set_mode(&o, CLI_ONESHOT, "--prompt"))
                return 2;
            o.prompt = optarg;
            break;
        case O_JSONSCHEMA:
            o.json_schema = optarg;
            break;
        case O_JSON:
            o.json = 1;
            break;
        case O_IDS:
            if (set_mode(&o, CLI_ONESHOT, "--ids"))
                return 2;
            o.ids = optarg;
            break;
        case O_REPLAY:
            if (set_mode(&o, CLI_REPLAY, "--replay"))
                return 2;
            o.file = optarg;
            break;
        case O_PATTERN:
            if (strcmp(optarg, "kimi") && strcmp(optarg, "o200k")) {
                fprintf(stderr, "k3chat: --pattern: '%s' is not kimi or o200k\n", optarg);
                return 2;
            }
            o.pattern = optarg;
            break;
        case O_LOAD:
            o.load = optarg;
            break;
        case O_THEME:
            o.theme = optarg;
            break;
        case O_SYSTEM:
            o.system = optarg;
            break;
        case O_MAXTOK:
            if (parse_num("--max-tokens", optarg, 0, 1e9, 1, &v))
                return 2;
            o.max_tokens = (int)v;
            break;
        case O_TEMP:
            if (parse_cmd_num("--temp", CMD_TEMP, optarg, &v))
                return 2;
            o.temp = (float)v;
            break;
        case O_TOPP:
            if (parse_cmd_num("--top-p", CMD_TOPP, optarg, &v))
                return 2;
            o.top_p = (float)v;
            break;
        case O_SEED: {
            /* digits only (strtoull would take "-1" as 2^64-1), and what a transcript stores */
            char *end;
            errno  = 0;
            o.seed = strtoull(optarg, &end, 10);
            if (!optarg[0] || optarg[strspn(optarg, "0123456789")] || errno || o.seed > (uint64_t)INT64_MAX) {
                fprintf(stderr, "k3chat: --seed: '%s' is not an integer in 0..%lld\n", optarg,
                        (long long)INT64_MAX);
                return 2;
            }
            o.has_seed = 1;
            break;
        }
        case O_THINK:
            if (!strcmp(optarg, "on"))
                o.think = 1;
            else if (!strcmp(optarg, "off"))
                o.think = 0;
            else {
                fprintf(stderr, "k3chat: --think: '%s' is not on or off\n", optarg);
                return 2;
            }
            break;
        case O_EFFORT:
            if (strcmp(optarg, "low") && strcmp(optarg, "high") && strcmp(optarg, "max")) {
                fprintf(stderr, "k3chat: --effort: '%s' is not low, high or max%s\n", optarg,
                        strcmp(optarg, "medium") ? "" : " (the release rejects medium)");
                return 2;
            }
            o.effort = optarg;
            break;
        case O_PLAIN:
            o.plain = 1;
            break;
        case O_SERVE:
            if (set_mode(&o, CLI_SERVE, "--serve"))
                return 2;
            o.serve = optarg;
            break;
        case O_ENDPOINT:
            o.endpoint = optarg;
            break;
        case O_APIKEY:
            o.api_key = optarg;
            break;
        case O_MODEL:
            o.model_name = optarg;
            break;
        case O_ALLOWHOST:
            o.allow_hosts = optarg;
            break;
        case O_PARALLEL:
            if (parse_num("--parallel", optarg, 1, 64, 1, &v))
                return 2;
            o.parallel = (int)v;
            break;
        case O_MEASURE:
            o.measure = 1;
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!o.api_key && getenv("K3_API_KEY") && *getenv("K3_API_KEY"))
        o.api_key = getenv("K3_API_KEY");
    if (o.measure && o.mode != CLI_INSPECT) {
        fprintf(stderr, "k3chat: --measure goes with --inspect (k3chat --inspect --measure MODEL_DIR)\n");
        return 2;
    }
    if (o.endpoint && o.mode != CLI_CHAT) {
        fprintf(stderr, "k3chat: --endpoint works with the chat (TUI or --plain) only\n");
        return 2;
    }
    if (o.endpoint && strstr(o.endpoint, "://") && strncasecmp(o.endpoint, "http://", 7) &&
        strncasecmp(o.endpoint, "https://", 8)) { /* libcurl would try ftp://, file://, ... */
        txt_term_printf(stderr, "k3chat: --endpoint: '%s' is not an http:// or https:// URL\n", o.endpoint);
        return 2;
    }
    int nargs = argc - optind,
        want  = (o.mode == CLI_TOKENIZE || o.mode == CLI_DETOKENIZE || o.mode == CLI_CHAT_IDS) ? 2
                : o.endpoint                                                                   ? 0
                                                                                               : 1;
    if (nargs != want) {
        fprintf(stderr, "k3chat: expected %d argument%s, got %d (try --help)\n", want, want != 1 ? "s" : "",
                nargs);
        return 2;
    }
    o.dir = want ? argv[optind] : NULL;
    if (want == 2)
        o.file = argv[optind + 1];
    if (o.load && o.mode != CLI_CHAT) {
        fprintf(stderr, "k3chat: --load continues a conversation in the chat only (not with --prompt, --ids, "
                        "--replay, --serve or the tools); to ask one question after it, pipe the message in: "
                        "echo TEXT | k3chat --load FILE MODEL_DIR\n");
        return 2;
    }
    if ((o.json_schema || o.json) && !o.prompt) {
        fprintf(stderr, "k3chat: %s shapes the answer of --prompt only\n", o.json ? "--json" : "--json-schema");
        return 2;
    }
    if (o.json_schema && o.json) {
        fprintf(stderr, "k3chat: --json and --json-schema exclude each other (--json is any JSON object)\n");
        return 2;
    }
    if (o.load && check_load(o.load) != 0)
        return 2;

    char *prompt = NULL, *system = NULL;
    if (utf8_arg("--prompt", &o.prompt, &prompt) || utf8_arg("--system", &o.system, &system)) {
        free(prompt);
        return 1;
    }
    int rc = stdout_done(run_mode(&o));
    free(prompt);
    free(system);
    return rc;
}
