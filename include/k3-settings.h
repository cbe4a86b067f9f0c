/* k3-settings.h: every setting of k3chat, one row each (included by k3.h).
 *
 * DESIGN
 * One X-macro row per setting holds its type, range, default, the ways to give it (environment
 * variable, command-line flag, slash command, API field; NULL where there is none) and one line
 * of help. The engine reads its K3_* variables through the row (k3_setting_env), the front ends
 * parse flags, slash commands and API fields through the same row (k3_setting_parse), so a
 * setting has one range and one error message everywhere:
 *     SOURCE: 'VALUE' is not EXPECTED
 * SOURCE is the variable (K3_CHUNK), the flag (--temp), the command (/temp) or the API field
 * (temperature); EXPECTED says the type and range ("an integer in 1..4096", "a number in 0..2",
 * "0 or 1", "on or off", "low, high or max"). `--help`, `/help` and the man page's lists are
 * held against this table by tests/test-settings.c.
 *
 * Types: NUM a plain decimal number ("0.5", ".5", "5."; no sign, exponent, hex, inf or nan);
 * INT digits (a leading '-' where the range is negative), one of CHOICES ("4|8|32") when those
 * are given; BOOL 0|1 from the environment, on|off elsewhere, a JSON boolean in the API; ENUM
 * one of CHOICES, the value its index; TEXT any text (not parsed); U64 digits in 0..INT64_MAX.
 * Ranges are inclusive. DEF is the default (NAN: none, the code that reads it says what happens).
 *
 * ARG names the value in help texts ("X", "N", "FILE"); NULL for BOOL and ENUM, whose words
 * say it (on|off, low|high|max).
 *
 * Rows whose help ends in "(tests)" are hooks of the test suite; "(benchmarks)" rows are read by
 * k3-bench (bench/) alone. Both are documented with the other variables (man page ENVIRONMENT).
 *
 * X(ID, TYPE, LO, HI, DEF, CHOICES, ARG, ENV, FLAG, SLASH, API, DOC)
 */
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define K3_SETTINGS(X)                                                                                       \
    /* ---- the conversation: flags, slash commands, API fields ---- */                                      \
    X(TEMP, NUM, 0, 2, 1, NULL, "X", NULL, "temp", "temp", "temperature",                                    \
      "sampling temperature, 0 = greedy")                                                                    \
    X(TOP_P, NUM, 0, 1, 1, NULL, "X", NULL, "top-p", "top-p", "top_p",                                       \
      "nucleus sampling: keep the smallest set of tokens with probability >= X")                             \
    X(PRESENCE_PENALTY, NUM, -2, 2, 0, NULL, "X", NULL, NULL, NULL, "presence_penalty",                      \
      "subtract X from the logit of each token the answer has used (OpenAI's)")                              \
    X(FREQUENCY_PENALTY, NUM, -2, 2, 0, NULL, "X", NULL, NULL, NULL, "frequency_penalty",                    \
      "subtract X times its count in the answer from each token's logit (OpenAI's)")                         \
    X(REPETITION_PENALTY, NUM, 0.01, 2, 1, NULL, "X", NULL, NULL, NULL, "repetition_penalty",                \
      "divide a positive logit by X, a negative one times X, of the prompt's and answer's tokens (vLLM's)")  \
    X(TOP_LOGPROBS, INT, 0, 20, 0, NULL, "N", NULL, NULL, NULL, "top_logprobs",                              \
      "with logprobs: the N most likely tokens at each position of the answer")                              \
    X(THINK, BOOL, 0, 1, 1, NULL, NULL, NULL, "think", "think", "enable_thinking", "thinking mode")          \
    X(EFFORT, ENUM, 0, 2, 2, "low|high|max", NULL, NULL, "effort", "effort", "reasoning_effort",             \
      "thinking effort")                                                                                     \
    X(MAX_TOKENS, INT, 0, 1000000000, 0, NULL, "N", NULL, "max-tokens", NULL, "max_tokens",                  \
      "stop each answer after N generated tokens; 0: no limit")                                              \
    X(THINK_BUDGET, INT, 0, 1000000000, 0, NULL, "N", NULL, "think-budget", NULL, "thinking_budget",         \
      "close the thinking channel after N reasoning tokens, then answer; 0: no limit")                       \
    X(SEED, U64, 0, 9223372036854775807.0, NAN, NULL, "N", NULL, "seed", NULL, "seed",                       \
      "random seed for reproducible sampling")                                                               \
    X(SYSTEM, TEXT, 0, 0, NAN, NULL, "TEXT", NULL, "system", "system", NULL, "system prompt")                \
    X(SHOW_THINKING, BOOL, 0, 1, 1, NULL, NULL, NULL, NULL, "show-thinking", NULL,                           \
      "show or hide the think pane (the model still thinks)")                                                \
    X(RAW, BOOL, 0, 1, 0, NULL, NULL, NULL, NULL, "raw", NULL,                                               \
      "show answers as raw Markdown (on) or rendered (off)")                                                 \
    X(THEME, TEXT, 0, 0, NAN, NULL, "NAME", "K3_THEME", "theme", "theme", NULL, "color theme")               \
    X(JSON_SCHEMA, TEXT, 0, 0, NAN, NULL, "FILE", NULL, "json-schema", NULL, NULL,                           \
      "--prompt's answer is one JSON document valid against FILE's schema")                                  \
    X(LOAD, TEXT, 0, 0, NAN, NULL, "FILE", NULL, "load", NULL, NULL,                                         \
      "continue a saved conversation (transcript)")                                                          \
    X(PATTERN, ENUM, 0, 1, NAN, "kimi|o200k", NULL, NULL, "pattern", NULL, NULL,                             \
      "pre-tokenizer family for --tokenize/--detokenize")                                                    \
    /* ---- the server and remote chat ---- */                                                               \
    X(API_KEY, TEXT, 0, 0, NAN, NULL, "KEY", "K3_API_KEY", "api-key", NULL, NULL,                            \
      "bearer token --serve demands of clients, --endpoint sends")                                           \
    X(MODEL_NAME, TEXT, 0, 0, NAN, NULL, "NAME", NULL, "model", NULL, "model",                               \
      "model name served (--serve) or requested (--endpoint)")                                               \
    X(ALLOW_HOST, TEXT, 0, 0, NAN, NULL, "NAMES", NULL, "allow-host", NULL, NULL,                            \
      "Host names (comma-separated) a --serve without a key answers")                                        \
    X(ENDPOINT_IDLE_SECS, INT, 1, 86400, 300, NULL, "N", "K3_ENDPOINT_IDLE_SECS", NULL, NULL, NULL,          \
      "longest an --endpoint answer may go with no part of it (reasoning, text, tool call), in seconds")     \
    X(PARALLEL, INT, 1, 64, 4, NULL, "N", NULL, "parallel", NULL, NULL,                                      \
      "requests --serve generates at once")                                                                  \
    X(SERVE_QUEUE, INT, 0, 100000, 32, NULL, "N", "K3_SERVE_QUEUE", NULL, NULL, NULL,                        \
      "requests --serve keeps waiting for a slot")                                                           \
    X(SERVE_SHARE, INT, 1, 100000, 16, NULL, "N", "K3_SERVE_SHARE", NULL, NULL, NULL,                        \
      "choices a client address may hold in --serve once its queue is full")                                 \
    X(SERVE_QUEUE_SECS, INT, 1, 86400, 600, NULL, "N", "K3_SERVE_QUEUE_SECS", NULL, NULL, NULL,              \
      "longest wait of a request for a slot, in seconds")                                                    \
    X(SERVE_GRAMMAR_MB, INT, 0, 1048576, 0, NULL, "MB", "K3_SERVE_GRAMMAR_MB", NULL, NULL, NULL,             \
      "megabytes the grammars of the requests --serve holds (queued and running, with their matchers) may "  \
      "take together; 0: 1/32 of the machine's memory, from 64 to 4096")                                     \
    X(SERVE_HEAD_SECS, INT, 1, 86400, 10, NULL, "N", "K3_SERVE_HEAD_SECS", NULL, NULL, NULL,                 \
      "longest time a request head may take to arrive after the connection, in seconds")                     \
    X(SERVE_BODY_SECS, INT, 1, 86400, 60, NULL, "N", "K3_SERVE_BODY_SECS", NULL, NULL, NULL,                 \
      "longest time a request body may take to arrive after its head, in seconds")                           \
    X(SERVE_SEND_SECS, INT, 1, 86400, 10, NULL, "N", "K3_SERVE_SEND_SECS", NULL, NULL, NULL,                 \
      "longest a response write may wait with no byte taken by the client, in seconds")                      \
    X(SERVE_CHUNK, INT, 0, 1048576, 0, NULL, "N", "K3_SERVE_CHUNK", NULL, NULL, NULL,                        \
      "prompt tokens per prefill step of a --serve slot (0: the prefill window)")                            \
    X(SERVE_SCRIPT, TEXT, 0, 0, NAN, NULL, "FILE", "K3_SERVE_SCRIPT", NULL, NULL, NULL,                      \
      "--serve takes its answers' tokens from FILE, not sampled (tests)")                                    \
    /* ---- the model: weights, memory, experts ---- */                                                      \
    X(BITS, INT, 4, 32, 8, "4|8|32", "N", "K3_BITS", NULL, NULL, NULL,                                       \
      "weight format of the KDA, latent, shared and dense matrices")                                         \
    X(MLA_BITS, INT, 4, 32, 8, "4|8|32", "N", "K3_MLA_BITS", NULL, NULL, NULL,                               \
      "weight format of the MLA matrices")                                                                   \
    X(HEAD_BITS, INT, 4, 32, 8, "4|8|32", "N", "K3_HEAD_BITS", NULL, NULL, NULL,                             \
      "weight format of the output head")                                                                    \
    X(CHUNK, INT, 1, 4096, 128, NULL, "N", "K3_CHUNK", NULL, NULL, NULL, "prefill chunk in tokens")          \
    X(WINDOW, INT, 0, 16777216, 0, NULL, "N", "K3_WINDOW", NULL, NULL, NULL,                                 \
      "prefill window in tokens; 0: the whole prompt, as far as memory allows")                              \
    X(ROUTE, ENUM, 0, 1, 0, "model|uniform", NULL, "K3_ROUTE", NULL, NULL, NULL,                             \
      "expert routing: the model's, or uniform draws (benchmarks only)")                                     \
    X(ROUTE_SEED, INT, 0, 2147483647, 1, NULL, "N", "K3_ROUTE_SEED", NULL, NULL, NULL,                       \
      "seed of K3_ROUTE=uniform")                                                                            \
    X(MAXT, INT, 1, 16777216, 8192, NULL, "N", "K3_MAXT", NULL, NULL, NULL, "context capacity in tokens")    \
    X(THREADS, INT, 0, 4096, 0, NULL, "N", "K3_THREADS", NULL, NULL, NULL,                                   \
      "OpenMP threads (0 = the default)")                                                                    \
    X(LAYERS, INT, 0, 1024, 0, NULL, "N", "K3_LAYERS", NULL, NULL, NULL,                                     \
      "run only the first N layers (0 = all)")                                                               \
    X(EXPERT_GB, NUM, 0, 1000000, NAN, NULL, "GB", "K3_EXPERT_GB", NULL, "experts", NULL,                    \
      "routed-expert cache budget in GB (unset: from the memory available)")                                 \
    X(MEM_GB, NUM, 0.001, 1000000, NAN, NULL, "GB", "K3_MEM_GB", NULL, NULL, NULL,                           \
      "memory the fit plans for, in GB (unset: MemAvailable or the cgroup limit)")                           \
    X(TOPP, NUM, 0.001, 1, 1, NULL, "X", "K3_TOPP", NULL, NULL, NULL,                                        \
      "share of the routing weight the selected experts keep")                                               \
    X(DIRECT, BOOL, 0, 1, 1, NULL, NULL, "K3_DIRECT", NULL, NULL, NULL,                                      \
      "O_DIRECT reads of experts and large tensors")                                                         \
    X(PIPE, BOOL, 0, 1, 1, NULL, NULL, "K3_PIPE", NULL, NULL, NULL,                                          \
      "read the next expert while one computes")                                                             \
    X(LOAD_THREADS, INT, 1, 256, 4, NULL, "N", "K3_LOAD_THREADS", NULL, NULL, NULL, "expert reader threads") \
    X(MMAP, BOOL, 0, 1, 0, NULL, NULL, "K3_MMAP", NULL, NULL, NULL, "map a container's matrices read-only")  \
    X(HUGEPAGES, BOOL, 0, 1, 1, NULL, NULL, "K3_HUGEPAGES", NULL, NULL, NULL,                                \
      "2 MiB pages for large blocks")                                                                        \
    X(DIRS, TEXT, 0, 0, NAN, NULL, "DIR:DIR...", "K3_DIRS", NULL, NULL, NULL,                                \
      "more directories holding the shards")                                                                 \
    X(CONV_SNAPSHOTS, INT, 0, 64, 3, NULL, "N", "K3_CONV_SNAPSHOTS", NULL, NULL, NULL,                       \
      "saved decode states (3 in the chat, 16 with --serve)")                                                \
    X(CONV_SNAPSHOT_MB, NUM, 0, 1000000000, NAN, NULL, "MB", "K3_CONV_SNAPSHOT_MB", NULL, NULL, NULL,        \
      "megabytes the saved decode states may take (unset: no limit in the chat, 2000 with --serve)")         \
    /* ---- the kernels and the Vulkan tier ---- */                                                          \
    X(ISA, ENUM, 0, 3, NAN, "scalar|avx2|avx512|amx", NULL, "K3_ISA", NULL, NULL, NULL,                      \
      "instruction set of the CPU kernels (unset: the best this CPU runs)")                                  \
    X(IDOT, BOOL, 0, 1, 1, NULL, NULL, "K3_IDOT", NULL, NULL, NULL, "int8-activation dot products")          \
    X(ACT, ENUM, 0, 1, 0, "float|double", NULL, "K3_ACT", NULL, NULL, NULL, "activation arithmetic")         \
    X(AMX_EMU, BOOL, 0, 1, 0, NULL, NULL, "K3_AMX_EMU", NULL, NULL, NULL, "emulate the AMX tiles (tests)")   \
    X(AMX_DENY, BOOL, 0, 1, 0, NULL, NULL, "K3_AMX_DENY", NULL, NULL, NULL,                                  \
      "act as if Linux refused the tiles")                                                                   \
    X(NOAVX2, BOOL, 0, 1, 0, NULL, NULL, "K3_NOAVX2", NULL, NULL, NULL, "no AVX2 kernels")                   \
    X(NOVNNI, BOOL, 0, 1, 0, NULL, NULL, "K3_NOVNNI", NULL, NULL, NULL, "no VNNI integer dots")              \
    X(PREFETCH, INT, 0, 1048576, 4096, NULL, "N", "K3_PREFETCH", NULL, NULL, NULL,                           \
      "prefetch distance in bytes")                                                                          \
    X(MV_AHEAD, INT, 0, 64, 1, NULL, "N", "K3_MV_AHEAD", NULL, NULL, NULL,                                   \
      "tiles of four rows the matrix-vector kernels prefetch ahead")                                         \
    X(MV_SPLIT, BOOL, 0, 1, 0, NULL, NULL, "K3_MV_SPLIT", NULL, NULL, NULL,                                  \
      "split a matrix-vector product's rows")                                                                \
    X(KBLOCK, INT, 0, 1048576, 16, NULL, "N", "K3_KBLOCK", NULL, NULL, NULL,                                 \
      "K block of the few-column AVX-512 matmul, in 64-byte steps of a row")                                 \
    X(ROWSPLIT, BOOL, 0, 1, 0, NULL, NULL, "K3_ROWSPLIT", NULL, NULL, NULL,                                  \
      "threads take the next free block of rows, not fixed shares")                                          \
    X(VK, BOOL, 0, 1, NAN, NULL, NULL, "K3_VK", NULL, NULL, NULL, "the Vulkan tier (unset: on with a GPU)")  \
    X(VK_GB, NUM, 0, 1000000, 0, NULL, "GB", "K3_VK_GB", NULL, NULL, NULL,                                   \
      "device memory budget in GB (0: all)")                                                                 \
    X(VK_UP, INT, 0, 1000000, 16, NULL, "N", "K3_VK_UP", NULL, NULL, NULL,                                   \
      "routed experts uploaded per step")                                                                    \
    X(VK_DEVICE, INT, 0, 15, NAN, NULL, "N", "K3_VK_DEVICE", NULL, NULL, NULL, "index of the Vulkan device") \
    /* ---- diagnostics, validation hooks, the terminal ---- */                                              \
    X(PROFILE, BOOL, 0, 1, 0, NULL, NULL, "K3_PROFILE", NULL, NULL, NULL, "time the engine's phases")        \
    X(VERBOSE, BOOL, 0, 1, 0, NULL, NULL, "K3_VERBOSE", NULL, NULL, NULL,                                    \
      "log the engine's information messages")                                                               \
    X(LOGITS, TEXT, 0, 0, NAN, NULL, "FILE", "K3_LOGITS", NULL, NULL, NULL,                                  \
      "write every position's logits (f32)")                                                                 \
    X(TRACE, TEXT, 0, 0, NAN, NULL, "FILE", "K3_TRACE", NULL, NULL, NULL,                                    \
      "write every layer's hidden state (f32)")                                                              \
    X(X0, TEXT, 0, 0, NAN, NULL, "FILE", "K3_X0", NULL, NULL, NULL,                                          \
      "read the input rows instead of embeddings")                                                           \
    X(THEME_DIR, TEXT, 0, 0, NAN, NULL, "DIR", "K3_THEME_DIR", NULL, NULL, NULL, "more themes")              \
    X(EMOJI, ENUM, 0, 2, 0, "auto|whole|fallback", NULL, "K3_EMOJI", NULL, NULL, NULL,                       \
      "how emoji are drawn")                                                                                 \
    X(NO_MOUSE, TEXT, 0, 0, NAN, NULL, "ANY", "K3_NO_MOUSE", NULL, NULL, NULL, "set: no mouse capture")      \
    X(HYPERLINKS, BOOL, 0, 1, NAN, NULL, NULL, "K3_HYPERLINKS", NULL, NULL, NULL,                            \
      "OSC 8 links (unset: detected)")                                                                       \
    X(MOCK, TEXT, 0, 0, NAN, NULL, "FILE", "K3_MOCK", NULL, NULL, NULL, "a scripted engine (tests)")         \
    X(UI_STATS, TEXT, 0, 0, NAN, NULL, "FILE", "K3_UI_STATS", NULL, NULL, NULL,                              \
      "write the screen's statistics (tests)")                                                               \
    X(TEST_DIRECT_EINVAL, BOOL, 0, 1, 0, NULL, NULL, "K3_TEST_DIRECT_EINVAL", NULL, NULL, NULL,              \
      "act as if O_DIRECT were refused (tests)")                                                             \
    X(TEST_PREFILL_DELAY, INT, 0, 10000, 0, NULL, "MS", "K3_TEST_PREFILL_DELAY", NULL, NULL, NULL,           \
      "milliseconds each layer of a prefill pass waits (tests)")                                             \
    X(TEST_DECODE_DELAY, INT, 0, 10000, 0, NULL, "MS", "K3_TEST_DECODE_DELAY", NULL, NULL, NULL,             \
      "milliseconds each decoded token waits (tests)")                                                       \
    X(TEST_NAN_TOKEN, INT, 0, 16777216, NAN, NULL, "ID", "K3_TEST_NAN_TOKEN", NULL, NULL, NULL,              \
      "a session fed this token id gets a NaN hidden state (tests)")                                         \
    X(TEST_WINDOW_MAX, INT, 0, 16777216, 0, NULL, "N", "K3_TEST_WINDOW_MAX", NULL, NULL, NULL,               \
      "a prefill window buffer of more tokens fails as out of memory (tests)")                               \
    X(TEST_DIRECT_MIN, INT, 1, 1073741824, NAN, NULL, "N", "K3_TEST_DIRECT_MIN", NULL, NULL, NULL,           \
      "O_DIRECT from this many bytes (tests)")                                                               \
    X(TEST_LOAD, NUM, 0, 1000000, NAN, NULL, "X", "K3_TEST_LOAD", NULL, NULL, NULL,                          \
      "the 1-minute load average speed figures are measured under and compared with (tests)")                \
    X(TEST_CGROUP, TEXT, 0, 0, NAN, NULL, "DIR", "K3_TEST_CGROUP", NULL, NULL, NULL,                         \
      "read DIR/self for /proc/self/cgroup and DIR/fs for /sys/fs/cgroup (tests)")                           \
    X(REPACK_KILL_AT, INT, 0, 2147483647, NAN, NULL, "N", "K3_REPACK_KILL_AT", NULL, NULL, NULL,             \
      "k3-repack kills itself halfway through the N-th shard it writes (tests)")                             \
    /* ---- k3-bench's knobs, read by bench/ only ---- */                                                    \
    X(BENCH_DIR, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_DIR", NULL, NULL, NULL,                             \
      "where k3-bench generates models (unset: /var/tmp; repack: /var/tmp/k3-bench-repack) (benchmarks)")    \
    X(BENCH_KEEP, BOOL, 0, 1, 0, NULL, NULL, "K3_BENCH_KEEP", NULL, NULL, NULL,                              \
      "keep the models k3-bench decode_batch and repack generated (benchmarks)")                             \
    X(MKMODEL, TEXT, 0, 0, NAN, NULL, "FILE", "K3_MKMODEL", NULL, NULL, NULL,                                \
      "the k3-mkmodel k3-bench runs (unset: build/k3-mkmodel) (benchmarks)")                                 \
    X(BENCH_MB, INT, 1, 1048576, NAN, NULL, "N", "K3_BENCH_MB", NULL, NULL, NULL,                            \
      "arena of the kernel benchmarks in MiB (unset: from the last-level cache) (benchmarks)")               \
    X(BENCH_SLICE, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_SLICE", NULL, NULL, NULL,                         \
      "a slice model for the expert and grammar_decode benchmarks (unset: generated) (benchmarks)")          \
    X(BENCH_GRAMMAR, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_GRAMMAR", NULL, NULL, NULL,                     \
      "a model for the grammar benchmark (unset: generated) (benchmarks)")                                   \
    X(BENCH_BATCH, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_BATCH", NULL, NULL, NULL,                         \
      "a model for decode_batch (unset: generated) (benchmarks)")                                            \
    X(BENCH_SERVE, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_SERVE", NULL, NULL, NULL,                         \
      "a model for serve_batch, serve_ttft and serve_chunk (unset: generated) (benchmarks)")                 \
    X(BENCH_REF_K3CHAT, TEXT, 0, 0, NAN, NULL, "FILE", "K3_BENCH_REF_K3CHAT", NULL, NULL, NULL,              \
      "an older k3chat ui_paste measures beside this one, rounds alternating (unset: none) (benchmarks)")    \
    X(BENCH_RELEASE, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_RELEASE", NULL, NULL, NULL,                     \
      "a model for the release benchmarks (unset: generated) (benchmarks)")                                  \
    X(BENCH_PSCALE, TEXT, 0, 0, NAN, NULL, "DIR", "K3_BENCH_PSCALE", NULL, NULL, NULL,                       \
      "a one-layer slice for prefill_scale (unset: generated) (benchmarks)")                                 \
    X(BENCH_PSCALE_EXPERTS, INT, 1, 4096, 64, NULL, "N", "K3_BENCH_PSCALE_EXPERTS", NULL, NULL, NULL,        \
      "routed experts of prefill_scale's generated slice (benchmarks)")                                      \
    X(BENCH_PSCALE_PROMPTS, TEXT, 0, 0, NAN, NULL, "N...", "K3_BENCH_PSCALE_PROMPTS", NULL, NULL, NULL,      \
      "prompt lengths of prefill_scale, space separated (unset: 128 1024) (benchmarks)")                     \
    X(BENCH_PSCALE_PATHS, ENUM, 0, 2, 2, "window|chunk|both", NULL, "K3_BENCH_PSCALE_PATHS", NULL, NULL,     \
      NULL, "the prefills prefill_scale runs (benchmarks)")                                                  \
    X(BENCH_ROUNDS, INT, 1, 64, NAN, NULL, "N", "K3_BENCH_ROUNDS", NULL, NULL, NULL,                         \
      "rounds of grammar_decode (unset: 5) and of the release benchmarks (unset: 3) (benchmarks)")           \
    X(BENCH_TOKENS, INT, 1, 100000, 8, NULL, "N", "K3_BENCH_TOKENS", NULL, NULL, NULL,                       \
      "tokens per round of grammar_decode (benchmarks)")                                                     \
    X(BENCH_COLD_S, INT, 1, 600, 30, NULL, "N", "K3_BENCH_COLD_S", NULL, NULL, NULL,                         \
      "seconds the cold benchmark leaves its memory untouched (benchmarks)")                                 \
    X(TIKTOKEN_JS, TEXT, 0, 0, NAN, NULL, "DIR", "K3_TIKTOKEN_JS", NULL, NULL, NULL,                         \
      "the tiktoken check's sources (tests)")                                                                \
    X(FUZZ_RUNS, INT, 1, 2147483647, NAN, NULL, "N", "K3_FUZZ_RUNS", NULL, NULL, NULL,                       \
      "runs per fuzz target (tests)")

enum k3_setting_type {
    K3_TYPE_NUM,
    K3_TYPE_INT,
    K3_TYPE_BOOL,
    K3_TYPE_ENUM,
    K3_TYPE_TEXT,
    K3_TYPE_U64,
};

enum k3_setting_id {
#define X(id, type, lo, hi, def, choices, arg, env, flag, slash, api, doc) K3_SETTING_##id,
    K3_SETTINGS(X)
#undef X
        K3_SETTING_N
};

/* Where a value came from: picks the spelling of a switch (0|1 or on|off) and the name in the
 * error message. */
enum k3_setting_src { K3_SRC_ENV, K3_SRC_FLAG, K3_SRC_SLASH, K3_SRC_API };

typedef struct k3_setting_row {
    const char          *id; /* "TEMP" */
    enum k3_setting_type type;
    double               lo, hi, def; /* def NAN: none */
    const char          *choices;     /* "low|high|max" (ENUM, or INT restricted to these), else NULL */
    const char          *arg;         /* "X", "FILE": the value in help texts; NULL: the words    */
    const char          *env, *flag, *slash, *api, *doc;
} k3_setting_row;

/* The row of setting id (NULL for an id out of range). */
const k3_setting_row *k3_setting(enum k3_setting_id id);
/* The i-th choice of an ENUM setting ("max" for K3_SETTING_EFFORT, 2), "?" out of range; the
 * text lives as long as the process. */
const char *k3_setting_choice(enum k3_setting_id id, int i);
/* "X", "on|off" (0|1 from the environment), "low|high|max": the value as help texts name it. */
const char *k3_setting_arg(enum k3_setting_id id, enum k3_setting_src src);
/* What a value must be, as the error messages say it: "a number in 0..2", "on or off",
 * "low, high or max", "4, 8 or 32". */
const char *k3_setting_expect(enum k3_setting_id id, enum k3_setting_src src, char *buf, size_t n);
/* Parse text as setting id given through src: 0 with *out (ENUM: the index; BOOL: 0/1; U64:
 * see k3_setting_parse_u64) or -1 with err = "SOURCE: 'TEXT' is not EXPECTED". */
int k3_setting_parse(enum k3_setting_id id, enum k3_setting_src src, const char *text, double *out, char *err,
                     size_t n);
int k3_setting_parse_u64(enum k3_setting_id id, enum k3_setting_src src, const char *text, uint64_t *out,
                         char *err, size_t n);
/* A value that is already a number (an API field): 0 when in range, else -1 with err as above. */
int k3_setting_check(enum k3_setting_id id, enum k3_setting_src src, double v, char *err, size_t n);
/* The setting's environment variable: unset or empty leaves *out as it is and returns 0 (K3_OK);
 * a bad value returns K3_ERR_ARG (a k3_status) with k3_errmsg() = "K3_X: 'TEXT' is not EXPECTED". */
k3_status k3_setting_env(enum k3_setting_id id, double *out);
k3_status k3_setting_env_int(enum k3_setting_id id, int *out);
/* The variable's text, NULL when unset or empty. */
const char *k3_setting_env_str(enum k3_setting_id id);
