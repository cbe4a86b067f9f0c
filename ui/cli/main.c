/* main.c: k3chat's entry point: parse the command line (the settings' flags come from the table,
 * include/k3-settings.h), pick a mode, run it: a CLI mode (cli.h), the full-screen chat (tui.h),
 * the line mode when the terminal cannot run it, or the server (serve.h). The modes do not call
 * each other.
 * Only main and the CLI modes may exit; the engine returns statuses. */
#include "settings.h"
#include "cli.h"
#include "cmd.h"
#include "k3.h"
#include "serve.h"
#include "tui.h"
#include "text.h"
#include "theme.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* " (0..2, default 1; or K3_X)": what the help says after a setting's doc ("" when nothing); n of
 * at least 192 holds every part whole (64 + 64 + 48 and the separators). The sampling defaults
 * are the model's generation_config.json, the table's only without one. */
static const char *settings_note(int id, char *buf, size_t n) {
    const k3_setting_row *r         = k3_setting(id);
    char                  range[64] = "", def[64] = "", env[48] = "";
    if (r->type == K3_TYPE_NUM || (r->type == K3_TYPE_INT && !r->choices))
        snprintf(range, sizeof range, "%.15g..%.15g", r->lo, r->hi);
    if (id == K3_SETTING_TEMP || id == K3_SETTING_TOP_P) /* "default 1" was wrong for k3-nano (0) */
        snprintf(def, sizeof def, "default: generation_config.json, else %g", r->def);
    else if (!isnan(r->def) && r->type == K3_TYPE_BOOL)
        snprintf(def, sizeof def, "default %s", r->def ? "on" : "off");
    else if (!isnan(r->def) && r->type == K3_TYPE_ENUM)
        snprintf(def, sizeof def, "default %s", k3_setting_choice(id, (int)r->def));
    else if (!isnan(r->def))
        snprintf(def, sizeof def, "default %g", r->def);
    if (r->env)
        snprintf(env, sizeof env, "or %s", r->env);
    if (!range[0] && !def[0] && !env[0])
        return "";
    snprintf(buf, n, " (%s%s%s%s%s)", range, range[0] && def[0] ? ", " : "", def,
             (range[0] || def[0]) && env[0] ? "; " : "", env);
    return buf;
}

/* One entry of the help: "  OPT" padded to column 25, then doc filled to 80 columns, its further
 * lines indented to column 25 (an OPT too long for its column puts doc on the next line). Every
 * line of --help fits an 80-column terminal (the table's docs are up to 100 characters, and the
 * help used to print them on one line, up to 129 columns: tests/t-docs.py checks the width). */
static void help_item(FILE *f, const char *opt, const char *doc) {
    enum { INDENT = 25, WIDTH = 80 };
    int col = fprintf(f, "  %s", opt);
    if (col > INDENT - 1) {
        fputc('\n', f);
        col = 0;
    }
    fprintf(f, "%*s", INDENT - col, "");
    col = INDENT;
    for (const char *p = doc; *p;) {
        while (*p == ' ')
            p++;
        size_t w = strcspn(p, " ");
        if (!w)
            break;
        if (col > INDENT && col + 1 + (int)w > WIDTH) {
            fprintf(f, "\n%*s", INDENT, "");
            col = INDENT;
        } else if (col > INDENT) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += (int)w;
        p += w;
    }
    fputc('\n', f);
}

static void usage(FILE *f) {
    fprintf(f, "usage: k3chat [OPTIONS] MODEL_DIR\n"
               "       k3chat MODEL_DIR --prompt TEXT | --ids \"1 2 3\"\n"
               "       k3chat --inspect [--measure] MODEL_DIR\n"
               "       k3chat --tokenize | --detokenize VOCAB_DIR FILE\n"
               "       k3chat --chat-ids MODEL_DIR TRANSCRIPT\n"
               "       k3chat MODEL_DIR --replay FILE\n"
               "       k3chat MODEL_DIR --serve [ADDR:]PORT\n"
               "       k3chat --endpoint URL [OPTIONS]\n"
               "\nmodes (one at most; without one: the chat, line mode when not on a terminal):\n");
    static const char *const modes[][2] = {
        {"--plain", "the chat as a line-mode REPL, also on a terminal"},
        {"--prompt TEXT", "one-shot answer (response to stdout, reasoning to stderr)"},
        {"--ids \"1 2 3\"", "one-shot from raw token ids; prints the generated ids (up to 256 "
                            "without --max-tokens)"},
        {"--inspect", "describe a checkpoint, or name its first error"},
        {"--tokenize", "print the token ids of FILE"},
        {"--detokenize", "write the bytes of the ids in FILE"},
        {"--chat-ids", "the ids the chat encoder makes for a transcript"},
        {"--replay FILE", "re-run a transcript's user turns and compare the answers"},
        {"--serve [ADDR:]PORT", "OpenAI-compatible HTTP server (127.0.0.1 by default)"},
        {"--endpoint URL", "the chat (full-screen or --plain) with a remote OpenAI-compatible server instead "
                           "of MODEL_DIR"}};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        help_item(f, modes[i][0], modes[i][1]);
    fprintf(f, "\noptions (the settings table, k3-settings.h):\n");
    for (int id = 0; id < K3_SETTING_N; id++) { /* "  --temp X  doc (0..2, default 1)" */
        const k3_setting_row *r = k3_setting(id);
        if (r->flag) {
            char opt[64], note[192], doc[512];
            snprintf(opt, sizeof opt, "--%s %s", r->flag, k3_setting_arg(id, K3_SRC_FLAG));
            snprintf(doc, sizeof doc, "%s%s", r->doc, settings_note(id, note, sizeof note));
            help_item(f, opt, doc);
        }
    }
    help_item(f, "--json", "--prompt's answer is one JSON object");
    help_item(f, "--measure", "with --inspect: measure this machine's speed figures again");
    help_item(f, "-h, --help", "this help");
    help_item(f, "-V, --version", "the version");
    fprintf(f, "\nSee k3chat(1) for slash commands, keys and the K3_* environment variables.\n");
}

/* Each mode option (--prompt, --ids, --serve, --inspect, ...) picks what k3chat does: two
 * different ones are a usage error (the last one used to win silently: --prompt X --serve P
 * served and dropped the prompt); the same one again replaces its argument. */
static int set_mode(enum cli_mode *o, enum cli_mode mode, const char *opt) {
    static const char *first; /* opt: the option's name, without its "--" */
    if (first && strcmp(first, opt)) {
        fprintf(stderr, "k3chat: --%s and --%s are different modes; give one of them (try --help)\n", first,
                opt);
        return 2;
    }
    first = opt;
    *o    = mode;
    return 0;
}

/* A setting's flag (--temp X): parsed by its row of the settings table into o. 0 ok; 2 (a usage
 * error) with the table's message. */
static unsigned char flag_given[K3_SETTING_N]; /* the settings given as flags (check_args) */

static int set_flag(ui_opts *o, enum k3_setting_id id, const char *arg) {
    char     err[256];
    double   v = 0;
    uint64_t u = 0;
    if ((id == K3_SETTING_SEED ? k3_setting_parse_u64(id, K3_SRC_FLAG, arg, &u, err, sizeof err)
                               : k3_setting_parse(id, K3_SRC_FLAG, arg, &v, err, sizeof err))) {
        txt_term_printf(stderr, "k3chat: %s\n", err); /* err quotes the argument */
        return 2;
    }
    switch (id) {
    case K3_SETTING_TEMP:
        o->temp = (float)v;
        break;
    case K3_SETTING_TOP_P:
        o->top_p = (float)v;
        break;
    case K3_SETTING_THINK:
        o->think = (int)v;
        break;
    case K3_SETTING_EFFORT:
        o->effort = arg;
        break;
    case K3_SETTING_MAX_TOKENS:
        o->max_tokens = (int)v;
        break;
    case K3_SETTING_THINK_BUDGET:
        o->think_budget = (int)v;
        break;
    case K3_SETTING_SEED:
        o->seed     = u;
        o->has_seed = 1;
        break;
    case K3_SETTING_SYSTEM:
        o->system = arg;
        break;
    case K3_SETTING_THEME:
        o->theme = arg;
        break;
    case K3_SETTING_LOAD:
        o->load = arg;
        break;
    case K3_SETTING_PATTERN:
        o->pattern = arg;
        break;
    case K3_SETTING_API_KEY:
        o->api_key = arg;
        break;
    case K3_SETTING_MODEL_NAME:
        o->model_name = arg;
        break;
    case K3_SETTING_ALLOW_HOST:
        o->allow_hosts = arg;
        break;
    case K3_SETTING_PARALLEL:
        o->parallel = (int)v;
        break;
    case K3_SETTING_JSON_SCHEMA:
        o->json_schema = arg;
        break;
    default:
        fprintf(stderr, "k3chat: --%s: not an option of k3chat\n", k3_setting(id)->flag);
        return 2;
    }
    return 0;
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

/* main picks the mode; the modes do not call each other (the full-screen chat on a terminal that
 * cannot run it is the line mode, chosen here). */
static int run_mode(enum cli_mode mode, int plain, const ui_opts *o) {
    char why[160];
    switch (mode) {
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
        if (plain || !isatty(0) || !isatty(1))
            return cli_plain(o);
        if (!tui_usable(why, sizeof why)) {
            if (why[0])
                txt_term_printf(stderr, "k3chat: %s: using line mode\n", why); /* why names TERM */
            return cli_plain(o);
        }
        return ui_tui_run(o);
    }
    return 2;
}

/* A pipe given to --load (--load <(zcat chat.jsonl.gz)) can be read once, and the transcript is
 * read twice (check_load, then the chat): its bytes go to a temporary file that is unlinked at
 * once and kept open, and *path becomes /dev/fd/N, which reads that file from its start each
 * time. Before, the chat's read found the pipe drained ('empty file') and nothing was loaded.
 * 0, or -1 after saying why. */
static int load_pipe(const char **path) {
    static char fdpath[32];
    const char *dir = getenv("TMPDIR");
    char        tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/k3chat-load-XXXXXX", dir && *dir ? dir : "/tmp");
    int in  = k3_open_read(*path, 0); /* a FIFO with no writer reads as empty, as in k3_conv_load */
    int out = in >= 0 ? mkstemp(tmp) : -1, err = 0;
    if (out >= 0)
        unlink(tmp);
    char    buf[65536];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write(out, buf, (size_t)n) != n) {
            err = errno ? errno : EIO;
            break;
        }
    }
    if (in < 0 || out < 0 || err) {
        txt_term_printf(stderr, "k3chat: --load: %s: %s: %s\n", in < 0 || n < 0 ? *path : tmp,
                        in < 0    ? "cannot open"
                        : out < 0 ? "cannot make a temporary copy"
                                  : "cannot copy",
                        strerror(in < 0 || out < 0 ? errno : err));
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
        return -1;
    }
    close(in);
    snprintf(fdpath, sizeof fdpath, "/dev/fd/%d", out);
    *path = fdpath;
    return 0;
}

/* A transcript given to --load is read before anything starts (a bad one is a usage error, as
 * a bad --theme is); the chat reads it again when the engine is up (a pipe: from a copy). */
static int check_load(const char **path) {
    struct stat sb;
    const char *given = *path;
    if (stat(*path, &sb) == 0 && S_ISFIFO(sb.st_mode) && load_pipe(path) != 0)
        return -1;
    k3_conv *c  = k3_conv_new();
    int      rc = 0;
    if (!c || k3_conv_load(c, *path, NULL) != K3_OK) {
        txt_term_printf(stderr, "k3chat: --load: %s%s%s%s\n", c ? k3_errmsg() : "out of memory",
                        *path != given ? " (the copy of " : "", *path != given ? given : "",
                        *path != given ? ")" : "");
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

/* An answer that could not be written is a failure, said here for every mode that ran to its end:
 * status 0, and --replay's 3 (a turn differs), whose report was lost with the write (the tools
 * returned 1 without a word, --replay 3). A mode's own failure (1) was said by the mode; line mode
 * reports its own write errors. */
static int stdout_done(int rc, enum cli_mode mode) {
    if ((fflush(stdout) || ferror(stdout)) && (!rc || (rc == 3 && mode == CLI_REPLAY))) {
        fprintf(stderr, "k3chat: cannot write to standard output: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return rc;
}

/* The command line into o, *mode and *plain (the option table: the modes, then a flag per
 * setting). -1 to go on, else the exit status (0 after --help or --version, 2 on a usage error). */
static int parse_args(int argc, char **argv, ui_opts *o, enum cli_mode *mode, int *plain) {
    /* each mode option: the mode it picks and the field of o its argument goes to (arg: it has one) */
    static const struct mode_pick {
        const char   *name;
        enum cli_mode mode;
        int           arg;
        size_t        field;
    } picks[] = {
        {"inspect", CLI_INSPECT, 0, 0},
        {"tokenize", CLI_TOKENIZE, 0, 0},
        {"detokenize", CLI_DETOKENIZE, 0, 0},
        {"chat-ids", CLI_CHAT_IDS, 0, 0},
        {"prompt", CLI_ONESHOT, 1, offsetof(ui_opts, prompt)},
        {"ids", CLI_ONESHOT, 1, offsetof(ui_opts, ids)},
        {"replay", CLI_REPLAY, 1, offsetof(ui_opts, file)},
        {"serve", CLI_SERVE, 1, offsetof(ui_opts, serve)},
    };
    enum { N_PICKS = sizeof picks / sizeof *picks };
    enum {
        O_PICK  = 256 /* + the row of picks */,
        O_PLAIN = O_PICK + N_PICKS,
        O_ENDPOINT,
        O_MEASURE,
        O_JSON,
        O_SETTING
    };
    /* the modes, the other options, then every setting with a flag (k3-settings.h), O_SETTING + its id */
    static const struct option others[] = {
        {"plain", no_argument, 0, O_PLAIN},     {"endpoint", required_argument, 0, O_ENDPOINT},
        {"measure", no_argument, 0, O_MEASURE}, {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, 'h'},          {"version", no_argument, 0, 'V'}};
    enum { N_OTHERS = sizeof others / sizeof *others };
    struct option lo[N_PICKS + N_OTHERS + K3_SETTING_N + 1];
    int           nlo = 0;
    for (int i = 0; i < N_PICKS; i++)
        lo[nlo++] =
            (struct option){picks[i].name, picks[i].arg ? required_argument : no_argument, 0, O_PICK + i};
    for (int i = 0; i < N_OTHERS; i++)
        lo[nlo++] = others[i];
    for (int id = 0; id < K3_SETTING_N; id++)
        if (k3_setting(id)->flag)
            lo[nlo++] = (struct option){k3_setting(id)->flag, required_argument, 0, O_SETTING + id};
    lo[nlo] = (struct option){0, 0, 0, 0};
    int c;
    opterr = 0; /* txt_getopt_error says what is wrong, escaped (glibc quotes the argument raw) */
    while ((c = getopt_long(argc, argv, ":hV", lo, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("k3chat %s\n", k3_version());
            return 0;
        case O_JSON:
            o->json = 1;
            break;
        case O_PLAIN:
            *plain = 1;
            break;
        case O_ENDPOINT:
            o->endpoint = optarg;
            break;
        case O_MEASURE:
            o->measure = 1;
            break;
        default:
            if (c >= O_PICK && c < O_PICK + N_PICKS) {
                const struct mode_pick *m = &picks[c - O_PICK];
                if (set_mode(mode, m->mode, m->name))
                    return 2;
                if (m->arg)
                    *(const char **)((char *)o + m->field) = optarg;
                break;
            }
            if (c >= O_SETTING && c < O_SETTING + K3_SETTING_N) {
                if (set_flag(o, (enum k3_setting_id)(c - O_SETTING), optarg))
                    return 2;
                flag_given[c - O_SETTING] = 1;
                break;
            }
            if (c == '?' || c == ':')
                txt_getopt_error(stderr, c, argv, lo);
            usage(stderr);
            return 2;
        }
    }
    if (!o->api_key) /* the flags that have a variable too: the flag wins */
        o->api_key = k3_setting_env_str(K3_SETTING_API_KEY);
    if (!o->theme)
        o->theme = k3_setting_env_str(K3_SETTING_THEME);
    return -1;
}

/* Each mode's name in a usage error, and the setting flags it reads (a bit per setting id): a flag
 * the mode does not read changed nothing and was taken without a word (--tokenize V F --temp 0.5,
 * --serve P --temp 0 (a request brings its own sampling), --prompt X --parallel 8, --replay F
 * --system S, --endpoint's server never got --think-budget), so check_mode_flags refuses it. A row
 * is a mode and its variant: --prompt or --ids (o->ids), the chat on a model or an --endpoint. */
#define READS(x) (1u << K3_SETTING_##x)
#define READS_SAMPLING (READS(TEMP) | READS(TOP_P) | READS(MAX_TOKENS) | READS(SEED))
#define READS_CHAT (READS_SAMPLING | READS(THINK) | READS(EFFORT) | READS(THINK_BUDGET) | READS(SYSTEM))
static const struct mode_row {
    enum cli_mode mode;
    int           variant; /* --ids (not --prompt), --endpoint (not the chat on a model) */
    const char   *name;
    uint32_t      reads;
} mode_rows[] = {
    {CLI_INSPECT, 0, "--inspect", 0},
    {CLI_TOKENIZE, 0, "--tokenize", READS(PATTERN)},
    {CLI_DETOKENIZE, 0, "--detokenize", READS(PATTERN)},
    {CLI_CHAT_IDS, 0, "--chat-ids", READS(PATTERN) | READS(THINK) | READS(EFFORT)},
    {CLI_ONESHOT, 0, "--prompt", READS_CHAT | READS(JSON_SCHEMA)},
    {CLI_ONESHOT, 1, "--ids", READS_SAMPLING},
    {CLI_REPLAY, 0, "--replay", READS_SAMPLING | READS(THINK) | READS(EFFORT)},
    {CLI_SERVE, 0, "--serve", READS(API_KEY) | READS(MODEL_NAME) | READS(ALLOW_HOST) | READS(PARALLEL)},
    {CLI_CHAT, 0, "the chat on MODEL_DIR", READS_CHAT | READS(THEME) | READS(LOAD)},
    {CLI_CHAT, 1, "--endpoint", READS_CHAT | READS(THEME) | READS(LOAD) | READS(API_KEY) | READS(MODEL_NAME)},
};

/* The row of the mode that o and mode describe (every mode and variant has one). */
static const struct mode_row *mode_row(const ui_opts *o, enum cli_mode mode) {
    int    variant = mode == CLI_ONESHOT ? o->ids != NULL : mode == CLI_CHAT ? o->endpoint != NULL : 0;
    size_t i       = 0;
    while (mode_rows[i].mode != mode || mode_rows[i].variant != variant)
        i++;
    return &mode_rows[i];
}

/* The options that belong to one mode (--plain, --measure, --endpoint), and --endpoint's URL and
 * key: 0, or 2 (a usage error, reported). */
static int check_mode_options(const ui_opts *o, enum cli_mode mode, int plain) {
    if (plain && mode != CLI_CHAT) { /* it was taken and ignored: --plain --serve P served */
        fprintf(stderr, "k3chat: --plain is the chat's line mode; it does not go with %s\n",
                mode_row(o, mode)->name);
        return 2;
    }
    if (o->measure && mode != CLI_INSPECT) {
        fprintf(stderr, "k3chat: --measure goes with --inspect (k3chat --inspect --measure MODEL_DIR)\n");
        return 2;
    }
    if (o->endpoint && mode != CLI_CHAT) {
        fprintf(stderr, "k3chat: --endpoint works with the chat (TUI or --plain) only\n");
        return 2;
    }
    if (o->endpoint && strstr(o->endpoint, "://") && strncasecmp(o->endpoint, "http://", 7) &&
        strncasecmp(o->endpoint, "https://", 8)) { /* libcurl would try ftp://, file://, ... */
        /* the scheme only: the rest may hold a user:password@ (never shown) */
        txt_term_printf(stderr, "k3chat: --endpoint: a URL of scheme '%.*s' is not http:// or https://\n",
                        (int)(strstr(o->endpoint, "://") - o->endpoint), o->endpoint);
        return 2;
    }
    for (const char *k = o->endpoint && o->api_key ? o->api_key : ""; *k; k++)
        if (*k < ' ' || *k > '~') { /* libcurl would cut the header there and send the rest as another */
            fprintf(stderr,
                    "k3chat: --api-key (or K3_API_KEY): a key is printable ASCII (byte %zu is 0x%02X)\n",
                    (size_t)(k - o->api_key), (unsigned char)*k);
            return 2;
        }
    return 0;
}

/* The operands the mode takes after the options (o->dir, o->file taken from them): 0, or 2. */
static int check_operands(int argc, char **argv, ui_opts *o, enum cli_mode mode) {
    int nargs = argc - optind, want = (mode == CLI_TOKENIZE || mode == CLI_DETOKENIZE || mode == CLI_CHAT_IDS)
                                          ? 2
                                      : o->endpoint ? 0
                                                    : 1;
    if (nargs != want) { /* which arguments: a bare 'k3chat' said only "expected 1 argument, got 0" */
        const char *what = mode == CLI_CHAT_IDS ? "MODEL_DIR TRANSCRIPT"
                           : want == 2          ? "VOCAB_DIR FILE"
                           : want == 1          ? "MODEL_DIR"
                                                : "no MODEL_DIR with --endpoint";
        fprintf(stderr, "k3chat: expected %d argument%s (%s), got %d (try --help)\n", want,
                want != 1 ? "s" : "", what, nargs);
        return 2;
    }
    o->dir = want ? argv[optind] : NULL;
    if (want == 2)
        o->file = argv[optind + 1];
    return 0;
}

/* The setting flags given against the mode's row (mode_rows) and --load, --json and --think-budget
 * where the mode does not use them: 0, or 2. */
static int check_mode_flags(const ui_opts *o, enum cli_mode mode) {
    if (o->load && mode != CLI_CHAT) {
        fprintf(stderr, "k3chat: --load continues a conversation in the chat only (not with --prompt, --ids, "
                        "--replay, --serve or the tools); to ask one question after it, pipe the message in: "
                        "echo TEXT | k3chat --load FILE MODEL_DIR\n");
        return 2;
    }
    if ((o->json_schema || o->json) && !o->prompt) {
        fprintf(stderr, "k3chat: %s shapes the answer of --prompt only\n",
                o->json ? "--json" : "--json-schema");
        return 2;
    }
    const struct mode_row *row = mode_row(o, mode);
    for (int id = 0; id < K3_SETTING_N; id++) {
        if (!flag_given[id] || (id < 32 && row->reads >> id & 1))
            continue;
        if (id == K3_SETTING_PATTERN && mode != CLI_INSPECT) {
            fprintf(stderr, "k3chat: --pattern goes with --tokenize, --detokenize and --chat-ids only\n");
            return 2;
        }
        const char *api = mode == CLI_SERVE ? k3_setting((enum k3_setting_id)id)->api : NULL;
        fprintf(stderr, "k3chat: --%s has no effect with %s%s%s%s\n",
                k3_setting((enum k3_setting_id)id)->flag, row->name, api ? " (a request gives it as '" : "",
                api ? api : "", api ? "')" : "");
        return 2;
    }
    /* --prompt's one answer with thinking off never reads the budget (the chat's /think on does) */
    if (mode == CLI_ONESHOT && flag_given[K3_SETTING_THINK_BUDGET] && o->think == 0) {
        fprintf(stderr, "k3chat: --think-budget has no effect with --think off (--prompt does not think)\n");
        return 2;
    }
    return 0;
}

/* Values taken as given that mean nothing or clash: an empty --model or --api-key, --allow-host
 * with a key, --json with --json-schema: 0, or 2. */
static int check_values(const ui_opts *o, enum cli_mode mode) {
    /* an empty name or key was taken as given: --serve listed a model called '', --endpoint sent
     * "Authorization: Bearer " (--serve refuses an empty key itself, with its key list) */
    if (o->model_name && !*o->model_name) {
        fprintf(stderr, "k3chat: --model: the name is empty (give a name, or no --model for %s)\n",
                mode == CLI_SERVE ? "the model directory's name" : "the first one the server lists");
        return 2;
    }
    if (o->endpoint && o->api_key && !*o->api_key) {
        fprintf(
            stderr,
            "k3chat: --api-key: the key is empty (give a key, or no --api-key for a server without one)\n");
        return 2;
    }
    if (mode == CLI_SERVE && o->allow_hosts && o->api_key) { /* the Host gate is the keyless server's */
        fprintf(stderr,
                "k3chat: --allow-host has no effect with %s: a --serve with a key answers every Host "
                "name that brings the key\n",
                flag_given[K3_SETTING_API_KEY] ? "--api-key" : "K3_API_KEY");
        return 2;
    }
    if (o->json_schema && o->json) {
        fprintf(stderr, "k3chat: --json and --json-schema exclude each other (--json is any JSON object)\n");
        return 2;
    }
    return 0;
}

/* What is read from files and the environment before any mode runs: a --load transcript, the
 * drawing variables and the theme, refused in every mode: 0, or 2. */
static int check_files(ui_opts *o) {
    if (o->load && check_load(&o->load) != 0)
        return 2;
    /* K3_EMOJI and K3_HYPERLINKS only change the full-screen drawing, but a value they would
     * refuse is refused in every mode, so a script learns of the typo before it moves to a
     * terminal (K3_HYPERLINKS=yes used to count as unset without a word) */
    static const enum k3_setting_id drawing[] = {K3_SETTING_EMOJI, K3_SETTING_HYPERLINKS};
    for (size_t i = 0; i < sizeof drawing / sizeof *drawing; i++) {
        const char *v = k3_setting_env_str(drawing[i]);
        double      x;
        char        err[256];
        if (v && k3_setting_parse(drawing[i], K3_SRC_ENV, v, &x, err, sizeof err)) {
            txt_term_printf(stderr, "k3chat: %s\n", err);
            return 2;
        }
    }
    /* so is a --theme (or K3_THEME) the full-screen chat could not load: line mode used to
     * ignore it, and the same command on a terminal then stopped with status 2 */
    thm_spec th[THM_N];
    char     err[512];
    if (o->theme && *o->theme && thm_load(o->theme, th, err, sizeof err)) {
        txt_term_printf(stderr, "k3chat: %s: %s\n",
                        o->theme == k3_setting_env_str(K3_SETTING_THEME) ? "K3_THEME" : "--theme", err);
        return 2;
    }
    return 0;
}

/* The options that do not go together, the number of arguments for the mode (o->dir, o->file
 * taken from them) and what files and variables the run reads: 0, or 2 (a usage error, reported).
 * The steps run in this order, so the first problem of a command line is the one reported. */
static int check_args(int argc, char **argv, ui_opts *o, enum cli_mode mode, int plain) {
    if (check_mode_options(o, mode, plain) || check_operands(argc, argv, o, mode) ||
        check_mode_flags(o, mode) || check_values(o, mode) || check_files(o))
        return 2;
    return 0;
}

/* The engine's log on stderr (--prompt, --serve, --inspect, ...): the engine's own lines, but its
 * messages quote the model directory's file and tensor names, so a terminal gets them through the
 * escaping function. The engine's own logger (no callback) wrote them raw. */
static void cli_log(int level, const char *msg, void *ud) {
    (void)ud;
    if (level <= K3_LOG_LEVEL_WARN || chat_verbose())
        txt_term_printf(stderr, "k3: %s: %s\n", k3_log_level_name(level), msg);
}

int main(int argc, char **argv) {
    hold_std_fds();
    /* a reader that went away (k3chat ... | head) is a write error reported with a message and
     * status 1, not a silent death by SIGPIPE (141) */
    signal(SIGPIPE, SIG_IGN);
    ui_opts       o     = {.max_tokens = -1, .temp = NAN, .top_p = NAN, .think = -1};
    enum cli_mode mode  = CLI_CHAT;
    int           plain = 0;
    int           rc    = parse_args(argc, argv, &o, &mode, &plain);
    if (rc >= 0)
        return stdout_done(rc, mode); /* --help, --version: their text written, or said why not */
    if (check_args(argc, argv, &o, mode, plain))
        return 2;
    /* the process settings (kernels, K3_VERBOSE, K3_MEM_GB, ...), once, for the modes that run a
     * model: a malformed one stops here, before a terminal is taken over */
    int runs_model = mode == CLI_ONESHOT || mode == CLI_REPLAY || mode == CLI_SERVE || mode == CLI_INSPECT ||
                     (mode == CLI_CHAT && !o.endpoint && !k3_setting_env_str(K3_SETTING_MOCK));
    k3_log_set_callback(cli_log, NULL); /* the TUI and --plain set their own */
    if (runs_model && k3_init() != K3_OK) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return 1;
    }

    char *prompt = NULL, *system = NULL;
    if (utf8_arg("--prompt", &o.prompt, &prompt) || utf8_arg("--system", &o.system, &system)) {
        free(prompt);
        return 1;
    }
    rc = stdout_done(run_mode(mode, plain, &o), mode);
    free(prompt);
    free(system);
    return rc;
}
