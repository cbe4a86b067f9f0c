/* ev.h: the event queue between the engine worker and the UI thread (style.md point 11).
 *
 * A mutex + condvar queue of small value events (redis bio.c style). Producers never block on
 * the consumer: ev_push copies the event in, and when the consumer said it is about to sleep on the
 * self-pipe (ev_arm, with the queue empty) it writes one byte there so the UI's poll() on
 * {stdin, pipe} wakes up. A consumer that is busy, or sleeps until a frame is due without
 * watching the pipe, costs the producer no write and itself no read. Consecutive
 * EV_TOKEN events of one channel that the consumer has not taken yet are merged into one
 * (the UI draws at most every ~16-33 ms anyway), keeping the first token's timestamp.
 * The same queue type carries commands to the worker (ev_wait blocks on the condvar).
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

enum ev_type {
    EV_NONE = 0,
    EV_PROGRESS, /* text = what is loading, a = bytes done, b = bytes total (0 = unknown)   */
    EV_READY,    /* model loaded; text = one-line model description (any length): the model's
                    name, its first a bytes (0: all of it), then what else (" · 3 layers ·
                    2.4 GB", " · remote URL"); i = context capacity,
                    st.ctx_used = the empty conversation's context (0 where not counted),
                    gen = the model's default sampling settings                          */
    EV_FATAL,    /* loading failed; text = message. The engine accepts no more commands.    */
    EV_TURN,     /* a turn starts (after the user message was accepted)                     */
    EV_TOKEN,    /* ch = channel, text = UTF-8 bytes (may end inside a character)           */
    EV_STATS,    /* st = live statistics                                                    */
    EV_DONE,     /* turn finished; i = UE_DONE_*, st = final statistics                     */
    EV_ERROR,    /* a command failed; text = one-line message                               */
    EV_INFO,     /* text = one-line notice (saved, loaded, ...)                             */
    EV_RESET,    /* conversation cleared (before EV_MSG replay of a loaded transcript)      */
    EV_MSG,      /* i = role (UE_ROLE_*), text = content, text2 = reasoning (may be NULL);
                    assistant: ch = UE_DONE_* it ended with, st.think_s (< 0 unknown) and
                    st.n_think its reasoning figures                                        */
    EV_UNDO,     /* the last exchange was dropped                                           */
    EV_ACK,      /* the worker finished command i (EV_CMD_*); after its other events        */
    EV_PREFILL,  /* a turn's prefill that runs past a second: a = prompt tokens done (whole
                    layers: a window's tokens finish together at its last layer), b = tokens
                    to prefill, x = routed-expert bytes read so far                          */
    EV_SETTINGS, /* a loaded transcript's settings (gen: temp, top_p, think, effort), which the
                    next turns use                                                            */
    EV_STOPPED,  /* the worker runs no more commands (after ue_stop): it closes the engine
                    and ends; ue_close joins it                                               */
    /* commands to the worker (ue_* in engine.h) */
    EV_CMD_SEND,
    EV_CMD_RETRY,
    EV_CMD_UNDO,
    EV_CMD_FORGET,
    EV_CMD_CLEAR,
    EV_CMD_SYSTEM,
    EV_CMD_SAVE,
    EV_CMD_LOAD,
    EV_CMD_REPLAY,
    EV_CMD_EXPORT,
    EV_CMD_EXPERTS,
    EV_CMD_STATS,
    EV_CMD_EDIT,
    EV_CMD_SETTINGS, /* gen: the settings in force now (ue_settings)                          */
    EV_CMD_QUIT,
};

enum { EV_CH_THINK = 0, EV_CH_RESPONSE = 1 };

/* Statistics the status bar shows; -1 (or < 0) = unknown. */
typedef struct ue_stats {
    double      tok_s;         /* decode tokens per second of the current/last turn            */
    double      prefill_tok_s; /* prefill tokens per second                                    */
    double      ttft_s;        /* time from sending to the first generated token               */
    double      think_s;       /* seconds spent in the think channel                           */
    int         n_think;       /* tokens generated in the think channel                        */
    int         n_response;    /* tokens generated in the response channel                     */
    int         n_prefill;     /* prompt tokens processed for this turn (prompt cache misses)  */
    int         ctx_used;      /* tokens in the context                                        */
    int         ctx_max;       /* context capacity                                             */
    double      expert_hit;    /* expert-cache hit rate 0..1                                   */
    double      expert_gb;     /* expert-cache budget in GB                                    */
    double      vk_used_gb;    /* Vulkan tier: device GB holding weights (0: tier off)         */
    double      vk_budget_gb;  /* Vulkan tier: its budget in GB                                */
    long        vk_hits;       /* Vulkan tier: routed experts computed on the device           */
    double      mem_gb;        /* resident memory of the process                               */
    const char *kernels;       /* instruction set of the engine's CPU kernels (NULL: unknown)  */
} ue_stats;

/* Generation settings, copied into each command (the worker never reads UI state). */
typedef struct ue_gen {
    float    temp, top_p;
    int      think;        /* 1 on, 0 off                   */
    int      effort;       /* 0 low, 1 high, 2 max          */
    int      max_tokens;   /* -1 = until end of message     */
    int      think_budget; /* reasoning tokens, 0 = no limit */
    uint64_t seed;
    int      has_seed;
    /* 1: not chosen by the user, so the backend uses the model's generation defaults (a message
     * sent while the model loads is copied before the UI learns them) */
    int model_temp, model_top_p;
} ue_gen;

typedef struct ui_ev {
    int      type, ch, i;
    char    *text, *text2; /* heap, owned by the event (ev_free releases them) */
    uint64_t a, b;
    double   t; /* ev_now() when pushed (first token of a merged run) */
    double   x; /* number argument (commands)                        */
    ue_stats st;
    ue_gen   gen;
} ui_ev;

typedef struct ev_queue ev_queue;

ev_queue *ev_queue_new(int with_pipe);
void      ev_queue_free(ev_queue *q);
/* Copy e into the queue; text/text2 are duplicated. Returns 0, or -1 when out of memory. */
int ev_push(ev_queue *q, const ui_ev *e);
int ev_push_text(ev_queue *q, int type, const char *text);
/* Take the oldest event (caller frees with ev_free). 1 = got one, 0 = empty. */
int ev_pop(ev_queue *q, ui_ev *out);
/* Like ev_pop but waits up to timeout_s (< 0: forever). */
int ev_wait(ev_queue *q, ui_ev *out, double timeout_s);
int ev_fd(const ev_queue *q); /* read end of the wake-up pipe (-1 without)  */
/* Before poll() on ev_fd: 1 when events wait already (do not sleep); 0, and the next push
 * writes the wake-up byte. */
int ev_arm(ev_queue *q);
/* Before popping: disarm, and read the wake-up byte if one was written or poll() found the
 * pipe readable. */
void   ev_drain_fd(ev_queue *q, int readable);
void   ev_free(ui_ev *e);
double ev_now(void); /* CLOCK_MONOTONIC seconds                    */
