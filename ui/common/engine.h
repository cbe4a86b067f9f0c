/* engine.h: the UI's seam to the engine: one chat engine on a worker thread.
 *
 * DESIGN
 * The UI thread never calls the engine directly. ue_* functions post a command (EV_CMD_*) to the
 * worker's queue and return at once; the worker runs commands one after another and answers with
 * events on the UI's queue (ev.h): EV_PROGRESS while the model loads, EV_READY or EV_FATAL, then
 * per turn EV_TURN, EV_TOKEN (think or response channel), EV_STATS, EV_DONE. Commands posted
 * while the model loads simply wait their turn, so the user can type (and send) during loading.
 * ue_cancel is the one call that acts immediately: an atomic flag the backend checks per token
 * (and k3_session_cancel for a prefill in progress).
 *
 * Three backends implement struct ue_backend: the real one over include/k3.h (worker.c), a client
 * of an OpenAI-compatible server (remote.c, --endpoint URL), and a scripted mock (mock.c,
 * selected by K3_MOCK=FILE) that streams think/response text with delays, so the whole UI can be
 * built and tested without a model.
 */
#pragma once
#include "opts.h"
#include "ev.h"
#include "k3.h"

#include <pthread.h>
#include <stdatomic.h>

enum { UE_ROLE_USER = 0, UE_ROLE_ASSISTANT, UE_ROLE_SYSTEM };
/* How a turn ended (EV_DONE's i, a loaded message's EV_MSG ch). LENGTH: --max-tokens (or a remote
 * server's "length", which may be either); CONTEXT: the answer filled the local context (K3_MAXT). */
enum { UE_DONE_OK = 0, UE_DONE_CANCELLED, UE_DONE_ERROR, UE_DONE_LENGTH, UE_DONE_CONTEXT };

typedef struct ue ue;

/* A backend runs on the worker thread only. open() loads the model (posting EV_PROGRESS) and
 * returns 0, or posts nothing and returns -1 with a message in err. cmd() runs one command. */
typedef struct ue_backend {
    const char *name;
    int (*open)(ue *u, void **self, char *err, size_t errn);
    void (*cmd)(ue *u, void *self, const ui_ev *c);
    void (*cancel)(void *self); /* optional: called from the UI thread, must be thread-safe */
    /* optional, UI thread, thread-safe: note a new expert budget to apply between tokens */
    void (*experts)(void *self, double gb);
    void (*close)(void *self);
} ue_backend;

extern const ue_backend ue_backend_mock;   /* mock.c   */
extern const ue_backend ue_backend_real;   /* worker.c */
extern const ue_backend ue_backend_remote; /* remote.c: --endpoint URL */

struct ue {
    const ue_backend *be;
    void             *self;
    const ui_opts    *opts;        /* options of the process (read-only)          */
    ev_queue         *out;         /* events to the UI                            */
    ev_queue         *cmds;        /* commands to the worker                      */
    atomic_int        cancel;      /* set by ue_cancel, cleared when a turn starts */
    atomic_uint       cancel_upto; /* ue_cancel stops every command posted so far, a message
                                      still waiting for the model included: the worker
                                      starts command number <= cancel_upto cancelled */
    atomic_int ready;              /* model loaded                                */
    atomic_int busy;               /* a command is running                        */
    atomic_int unsaved;            /* the conversation holds turns that are on no disk: the
                                      autosave failed (or is off) and no /save since
                                      (ue_note_saved); the UI asks before dropping it */
    int no_autosave;               /* the autosave could not be enabled (worker only) */
    int no_input_line;             /* line mode off a terminal: a refused message is not offered
                                      again (set by the front end before its first command) */
    /* The tool call streaming now (ue_emit_call, worker thread only; ue_turn_begin
     * resets it): */
    int      call_open;  /* a call was opened and not closed                             */
    int      call_after; /* the response's last text is a call's end                      */
    k3_esc   call_esc;   /* a character of its arguments cut between two pieces            */
    unsigned posted;     /* commands posted so far (UI thread only); each is
                            answered by one EV_ACK, EV_CMD_QUIT excepted  */
    int       started;
    int       stopping; /* ue_stop posted the quit (UI thread only) */
    pthread_t th;
    /* What a quit that does not wait for the worker (ue_rescue) needs, kept by the worker: */
    pthread_mutex_t mu;        /* guards the fields below                                   */
    int             run_type;  /* the command it runs (EV_CMD_*), 0: none                */
    struct k3_conv *turn_conv; /* the conversation as the turn in progress began, with its
                                  autosave state: the messages its autosave lacks
                                  (k3_conv_copy_unsaved, ue_turn_begin), NULL: none      */
    int turn_saved;            /* who wrote the turn's end to the autosave: 0 nobody yet, 1
                                  the worker, 2 ue_rescue (then the worker writes no more):
                                  the two writers are exclusive (ue_conv_autosave_enable) */
    int turn_wrote;            /* the worker's write of the turn (turn_saved 1): 0 under way,
                                  1 done, -1 failed (ue_note_saved), for ue_rescue to say */
    char turn_err[600];        /* why it failed (k3_conv_autosave_error), or the file written */
    int  autosave_on;          /* the conversation autosaves (worker.c, remote.c)      */
};

/* A thread of the front end's (the worker, the TUI's stderr reader) started with the UI's
 * signals blocked (SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT, SIGWINCH; the threads it starts,
 * OpenMP's and libcurl's, inherit that): the kernel gives a process's signal to any thread that
 * does not block it, and a SIGCONT whose handler ran on the worker (the UI thread still marked
 * stopped when it came) left line mode's read uninterrupted, so fg showed no prompt about every
 * second time; a SIGWINCH there did not wake the full-screen chat's wait. pthread_create's
 * result. */
int ue_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
/* Start the worker (mock when K3_MOCK is set, else the real engine). NULL when out of memory. */
ue  *ue_start(const ui_opts *o, ev_queue *out);
void ue_close(ue *u); /* cancel, stop and join the worker, free */
void ue_cancel(ue *u);
/* Quitting without waiting on a worker that may never come back (blocked in a read from a hung
 * file system, a server that does not answer, a test's "stall"): ue_stop cancels, asks the
 * worker to end after the command it runs and returns at once; EV_STOPPED says it runs no
 * more commands (ue_close then joins it once the engine is closed). If it never says so, the
 * front end may give up on it:
 * ue_rescue saves what the user saw of the command it runs, ue_abandon leaves the worker
 * behind (detached, its memory and queues kept) for the process to exit. */
void ue_stop(ue *u);
void ue_abandon(ue *u);
/* On the UI thread, the worker blocked in a turn (a message, a /retry or an /edit): writes the
 * conversation as the turn began (ue_turn_begin) with answer / think (what the UI was shown;
 * think NULL: no reasoning) as an interrupted answer to the conversation's autosave, as the
 * turn's end would have: appended, the file rewritten (a /retry's or an /edit's branch), or a
 * new file holding the whole conversation (the first turn, or the first after a /load). The
 * worker's own end of turn, should it come back, then writes nothing (u->turn_saved), and one
 * it wrote already is not written again. Waits at most wait_s for the file system (which may
 * be what blocks the worker). Returns 0 when saved, 1 when there is nothing to save (no
 * autosave, no turn in progress), -1 on failure; msg says which, in words for the user. */
int ue_rescue(ue *u, const char *answer, const char *think, double wait_s, char *msg, size_t n);

void ue_send(ue *u, const char *user_text, const ue_gen *g);
void ue_retry(ue *u, const ue_gen *g);
/* /edit: the last exchange becomes an abandoned branch (kept in the transcript) and
 * user_text is sent in its place. */
void ue_edit(ue *u, const char *user_text, const ue_gen *g);
void ue_undo(ue *u);
void ue_forget(ue *u); /* drop the oldest exchange; answers EV_RESET + EV_MSG (or EV_ERROR) */
/* drop the oldest exchanges until a quarter of the context is free (a local model only) */
void ue_forget_fit(ue *u);
void ue_clear(ue *u);
void ue_system(ue *u, const char *text);
/* force: replace any file (chatfile.h); UE_SAVE_CLAIMED: path is the empty file
 * chat_default_save_path made for this save, removed when the save fails */
void ue_save(ue *u, const char *path, int force);
#define UE_SAVE_CLAIMED 2
void ue_load(ue *u, const char *path);
void ue_replay(ue *u, const char *path, const ue_gen *g);
void ue_export(ue *u, const char *path, int force);
void ue_experts(ue *u, double gb);
/* Engine side (worker thread): says that the expert-cache budget is now gb GB (EV_INFO), the
 * one wording of the local engine and of the mock that imitates it. */
void ue_experts_now(ue *u, double gb);
void ue_stats_req(ue *u);
/* The settings in force now (after a settings command, a load, at start): the conversation
 * takes them at once, so every context figure (the status bar, /stats, /load's "needs",
 * /forget --fit) is measured as the next turn will render it. */
void ue_settings(ue *u, const ue_gen *g);
/* How a replayed turn differs from the saved one, the same words for --replay and /replay:
 * "DIFFERS at token 3 (saved 12 tokens, new 12): saved 77 'x', new 78 'y'" (1-based). */
struct k3_replay_turn;
void ue_replay_diff(const struct k3_replay_turn *t, char *buf, size_t n);
/* What k3_conv_load set aside, the same words for /load, /replay, --replay and --chat-ids:
 * "" or "line 3, a torn final line (an interrupted write), was ignored: invalid JSON at ...;
 * invalid UTF-8 replaced with U+FFFD: 1 sequence, the first at line 2, byte 5", and that the file
 * was made with another model configuration than c's (its config.json fingerprint; c NULL or
 * without a model: not compared). The text may quote the file: it reaches a terminal escaped. */
struct k3_load_info;
void ue_load_notes(const struct k3_load_info *li, const struct k3_conv *c, char *buf, size_t n);

/* For backends: has the UI asked to stop? */
static inline int ue_cancelled(ue *u) {
    return atomic_load(&u->cancel);
}
/* Post a token / message / text event (helpers for backends). */
void ue_emit_token(ue *u, int ch, const char *text, size_t n);
/* A tool call of the answer, to the front end as part of the response's text (the one display
 * of a call, engine.c "tool calls in an answer"): name (non-NULL) opens it, args[0..n) is a
 * piece of its arguments as the model writes them, done closes it. Calls come one after another
 * (one opens after the one before closed). Every backend streams its calls so. */
void ue_emit_call(ue *u, const char *name, const char *args, size_t n, int done);
void ue_emitf(ue *u, int type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* For backends that keep the conversation in a k3_conv (worker.c, remote.c): */
struct k3_conv;
/* EV_RESET, then one EV_MSG per message of c. */
void ue_send_history(ue *u, const struct k3_conv *c);
/* One EV_MSG each for messages [from, count) of c (messages that came back: a failed /retry). */
void ue_send_msgs(ue *u, const struct k3_conv *c, int from);
/* Handle the conversation edits (/undo /forget /clear /system /save /load /export) the same way in
 * every backend; 1 when cmd was one of them (2: a /load that succeeded; 3: one that also sent
 * the transcript's settings as EV_SETTINGS, which the front end answers with the settings in
 * force), 0 when the backend must handle it. EV_CMD_EDIT
 * moves the last exchange to an abandoned branch and returns 0: the backend sends as for
 * EV_CMD_SEND. */
int    ue_conv_cmd(ue *u, struct k3_conv *c, const ui_ev *cmd);
double ue_mem_gb(void); /* resident set size of the process */
/* Bring c's autosave file up to date now, reporting a failure as EV_ERROR. */
void ue_conv_autosave(ue *u, struct k3_conv *c);
/* Turn c's autosave on (in $XDG_DATA_HOME/k3chat), reporting a failure as EV_ERROR; its writes
 * then ask u->turn_saved first (k3_conv_set_autosave_gate), so ue_rescue and they never both
 * write one turn. */
void ue_conv_autosave_enable(ue *u, struct k3_conv *c);
/* On the worker, once a turn's history and settings are in c (the user's message added, or a
 * /retry's or an /edit's branch made): autosaves c (the user's message is on disk before the
 * answer begins) and keeps a copy of c for ue_rescue. The command's end drops it (worker_main). */
void ue_turn_begin(ue *u, struct k3_conv *c);
/* 1 once ue_rescue has taken the turn in progress (the worker's end of turn then writes nothing);
 * any thread. */
int ue_turn_rescued(ue *u);
/* After an autosave attempt (a turn's or an edit's): u->unsaved says whether c's turns are on
 * disk, and a turn's write that the worker took from ue_rescue is noted done or failed (with
 * the error) for the rescue to tell. Call it before the events that end the command, so the UI
 * sees the state with them. */
void ue_note_saved(ue *u, const struct k3_conv *c);

/* For the UI: would quitting (or /clear) now lose turns that are on no disk? */
static inline int ue_unsaved(ue *u) {
    return u && atomic_load(&u->unsaved);
}
/* Quitting (WHAT = UE_DROP_QUIT), /clear or /load while turns are on no disk: the first request
 * is refused (returns 1, msg says why and what to do), the same request again goes ahead (0).
 * *warned is the UI's memory of the last refusal (0 none, else 1 + WHAT; a new turn resets it). */
enum { UE_DROP_QUIT = 0, UE_DROP_CLEAR, UE_DROP_LOAD };
int ue_unsaved_refuse(ue *u, int *warned, int what, char *msg, size_t n);

/* The conversation settings of a turn's command g (think, effort, max_tokens, seed) with the
 * sampling temp / top_p the backend chose, over c's current settings: the same in every backend. */
struct k3_conv_settings;
void ue_gen_settings(struct k3_conv *c, const ue_gen *g, float temp, float top_p,
                     struct k3_conv_settings *set);
/* "low", "high" or "max": ue_gen.effort as the chat format and the OpenAI API name it. */
const char *ue_effort_name(int effort);

/* Token statistics of a turn as it streams, the same for every backend (worker.c, remote.c). */
#define UE_STATS_EVERY 0.2 /* seconds between two live EV_STATS */
typedef struct ue_tokstats {
    double t0;              /* the turn began (ev_now)              */
    double t_first;         /* its first piece; 0 before            */
    double t_last;          /* the last live EV_STATS               */
    int    n_think, n_resp; /* pieces per channel                   */
} ue_tokstats;
/* A new turn begins now. */
void ue_tok_begin(ue_tokstats *t);
/* Count one piece of channel ch. When a live EV_STATS is due (every UE_STATS_EVERY s) fills st
 * (time to first token, tokens/s, counts, memory; the engine-only figures -1; the backend adds
 * the context) and returns 1. */
int ue_tok_piece(ue_tokstats *t, int ch, ue_stats *st);
