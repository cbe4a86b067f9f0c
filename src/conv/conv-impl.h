/* conv-impl.h: the conversation object shared by conv.c (messages, settings), conv-gen.c
 * (rendering, prompt cache, generation) and transcript.c (files). Not for ui/.
 *
 * The message array is the conversation's single source of truth; the prompt cache and
 * the autosave file are derived from it and track it with two counters:
 *   - n_saved:    messages [0, n_saved) are already in the autosave file, in order;
 *                 an edit below n_saved sets rewrite so the next autosave replaces the file.
 *   - cache:      the ids the session has processed (see conv-gen.c), compared by prefix
 *                 with each new rendering, so edits need no bookkeeping there.
 */
#pragma once
#include "k3-impl.h"

#include <sys/types.h>

#include <stdatomic.h>

#define CONV_MIN_ROOM K3_CONV_MIN_ROOM /* tokens a turn must be able to generate to start (k3.h) */

/* saved decode states (prompt cache, /retry, /undo), at most: the CONV_SNAPSHOTS row's top in
 * include/k3-settings.h (test-settings.c holds them equal) */
#define CONV_MAX_SNAPSHOTS 64

/* Only the tests look at these (not in k3.h): the abandoned messages, oldest branch first
 * (their count is k3.h's k3_conv_abandoned_count): message i, with the index of the active
 * message it was written before (its branch point) and its branch number (1-based). */
const k3_msg *k3_conv_abandoned(const k3_conv *c, int i, int *at, int *branch);

/* A saved decode state and the ids that produced it. */
typedef struct conv_snap {
    k3_snapshot *snap;
    int32_t     *ids; /* (n) */
    int          n;
    uint64_t     owner; /* k3_conv_set_cache_owner of the conversation that saved it */
    uint64_t     used;  /* LRU clock of its last use (or of its saving) */
    size_t       bytes; /* k3_snapshot_bytes + the ids                   */
} conv_snap;

/* The saved states (prompt cache): owned by one conversation, or shared by several
 * (k3_conv_share_prompt_cache, driven by one thread); freed with the last of them. */
typedef struct conv_store {
    conv_snap snaps[CONV_MAX_SNAPSHOTS];
    int       n_snaps, max_snaps; /* max_snaps: K3_CONV_SNAPSHOTS, default 3          */
    size_t    budget;             /* bytes the snapshots may hold, 0 = no limit       */
    size_t    bytes;              /* bytes they hold                                  */
    uint64_t  clock;              /* LRU clock                                        */
    int       refs;               /* conversations using it                           */
} conv_store;

/* A message of an abandoned branch (/edit): kept for the transcript, never in the prompt. */
typedef struct conv_aban {
    k3_msg m;
    int    at;         /* index of the active message it is written before (the branch point) */
    int    branch;     /* branch number, 1-based; the messages of one /edit share it            */
    int    before_sys; /* it was answered before a mid-chat system prompt (counted in sys_since) */
} conv_aban;

struct k3_conv {
    k3_msg              *msgs;        /* (n_msgs) msgs[0] is the system prompt when it has that role */
    char                *tools;       /* tool declarations (JSON array text), NULL when none         */
    char                 rf_type[16]; /* response_format: "" (text), "json_object", "json_schema"  */
    char                *rf_schema;   /* json_schema: the schema (JSON text), NULL otherwise        */
    const k3_grammar    *grammar;     /* answers drawn under its masks (k3_conv_set_grammar), NULL  */
    const k3_logit_bias *bias;        /* (n_bias) k3_conv_set_logit_bias's (not owned), NULL: none  */
    int                  n_bias;
    int                  n_msgs, cap_msgs;
    int                  sys_since; /* the system prompt was set after this many of the other messages
                                       (a /system mid-chat): those were answered without it
                                       (transcript "since"; 0: from the start)                     */
    conv_aban       *aban;          /* (n_aban) abandoned branches, in the order they were made    */
    int              n_aban, cap_aban, n_branches;
    k3_conv_settings set;
    uint64_t         n_turns_started; /* turns generated (seed derivation; never reset)   */
    uint64_t         next_seed;       /* k3_conv_set_turn_seed, when has_next_seed        */
    int              has_next_seed;

    /* model identity for transcript headers */
    char *model_dir; /* NULL when unknown                                          */
    char  config_fnv64[17];
    int   bits, mla_bits, head_bits; /* K3_BITS, K3_MLA_BITS, K3_HEAD_BITS (0 unknown)  */
    char *hdr_extra;                 /* the loaded header's members a save would not write (JSON object
                                        text, written back as they were; k3_msg.extra), NULL when none  */

    /* autosave */
    int              autosave_on;
    char            *autosave_dir;  /* directory (created on first write)                         */
    char            *autosave_path; /* current file, NULL until the first write                   */
    int              n_saved;       /* messages already in the autosave file                      */
    int              rewrite;       /* history below n_saved changed: rewrite the whole file      */
    k3_conv_settings saved_set;     /* settings in the autosave file's header                  */
    dev_t            as_dev;        /* the autosave file as this conversation left it (st_dev,  */
    ino_t            as_ino;        /*   st_ino, st_size): it writes to no other (file_is_ours) */
    off_t            as_size;
    int              tail_only;         /* k3_conv_copy_unsaved's copy of the newest messages only */
    char             autosave_err[768]; /* "" when the last autosave worked                       */
    int (*gate)(void *ud);              /* k3_conv_set_autosave_gate: asked before a write, NULL: none */
    void *gate_ud;

    /* prompt cache (conv-gen.c) */
    const k3_session *cache_sess; /* session the cache describes                           */
    int32_t          *cache_ids;  /* (n_cache, cap_cache) ids the session has processed    */
    int               n_cache, cap_cache;
    conv_store       *sn;         /* saved states (never NULL; maybe shared)              */
    uint64_t          owner;      /* k3_conv_set_cache_owner: whose snapshots it may use   */
    void             *render;     /* chat-encoder state (conv-gen.c), NULL until needed    */
    void (*gen_free)(k3_conv *c); /* frees the cache, snapshots and render state  */

    int32_t *forced; /* (n_forced) k3_conv_force_reply: the next reply's ids  */
    int      n_forced;

    /* cancellation */
    atomic_int            cancel;
    _Atomic(k3_session *) active; /* session being fed, for k3_conv_cancel           */
    _Atomic(k3_conv *)    child;  /* conversation a replay runs, cancelled with this one */
};

/* conv-gen.c: a new store of saved states (NULL on out of memory); drops one reference. */
conv_store *conv_store_new(void);
void        conv_store_unref(conv_store *sn);

/* conv.c */
void conv_msg_clear(k3_msg *m);
/* Appends a copy of m (strings and ids duplicated). */
k3_status conv_push(k3_conv *c, const k3_msg *m);
/* Room for `need` elements of `elem` bytes in *arr (capacity *cap, doubling from `first`: k3_grow);
 * K3_ERR_NOMEM names `what`. */
k3_status conv_grow(void **arr, int *cap, int need, size_t elem, int first, const char *what);
/* Validates settings; K3_ERR_ARG naming the field (prefix "where" in the message). */
k3_status conv_check_settings(const k3_conv_settings *s, const char *where);
/* Validates sampling parameters: temperature and top_p by their rows of the settings table
 * (k3-settings.h, the same range as --temp, /temp and the API), min_p 0..1, top_k >= 0. Used
 * for a conversation's settings and for a turn's recorded sampling alike. */
k3_status conv_check_sampling(const k3_sampler_params *p, const char *where);
/* Marks that messages from index i on changed (autosave bookkeeping). */
void        conv_touched(k3_conv *c, int i);
const char *conv_role_str(k3_role r);
/* conv-gen.c: m's tokenizer (borrowed, k3_model_tok), with c->render set up for it. */
k3_status conv_get_tok(k3_conv *c, const k3_model *m, const k3_tok **out);
/* conv-gen.c: the ids generation prefills: k3_conv_render, except that replies generated
 * here whose ids decode to their text are rendered as generated (see conv-gen.c). */
k3_status conv_render_prompt(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out);
/* conv-gen.c: messages [i, ...) changed (or went): the rendering kept between turns forgets
 * their parts (from the start of i's segment on). Every change to a message that is not the
 * last appended goes through here (conv_touched, k3_conv_clear, conv_swap_content). */
void conv_render_forget(k3_conv *c, int i);
/* conv_render_prompt(c, tok, 1, out)'s ids (out may be NULL: only counted) and their number
 * (*n), from the parts kept by earlier calls and the messages after them (conv-gen.c, "the
 * rendering kept between turns"); c->render must be tok's (conv_get_tok). */
k3_status conv_render_kept(k3_conv *c, const k3_tok *tok, k3_ids *out, int *n);
/* Appends a copy of m to the abandoned branch `branch` at position at. */
k3_status conv_push_abandoned(k3_conv *c, const k3_msg *m, int at, int branch);
/* transcript.c: 1 when c's next autosave appends messages [n_saved, n) to its file (the file
 * exists, nothing below n_saved changed, the header's settings are c's), 0 when it writes the
 * whole file. */
int conv_autosave_appends(const k3_conv *c);
/* conv-gen.c: msgs[from, to) as chat-format messages (pointers into c; out has to - from). */
void conv_chat_msgs(const k3_conv *c, int from, int to, k3_chat_msg *out);
/* conv-gen.c: the chat-format options of c (think, effort, tools, tool_choice). */
void conv_chat_opts(const k3_conv *c, int gen_prompt, k3_chat_opts *o);
/* Exchange contents of two conversations' messages + settings + tools (transcript loading). */
void conv_swap_content(k3_conv *a, k3_conv *b);
/* Messages [i, i + n) are about to leave the history: sys_since keeps counting the messages
 * that came before the system prompt was set. */
void conv_since_removed(k3_conv *c, int i, int n);
