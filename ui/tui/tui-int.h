/* tui-int.h: the state of the full-screen chat, shared by its two halves: tui.c (events,
 * commands, keys, the main loop) and tui-draw.c (layout and drawing). Private to ui/. */
#ifndef K3_TUI_INT_H
#define K3_TUI_INT_H

#include "settings.h"
#include "opts.h"
#include "engine.h"
#include "input.h"
#include "k3.h"
#include "md.h"
#include "text.h"
#include "theme.h"

#include <curses.h>
#include <stddef.h>
#include <stdint.h>

#define MIN_COLS 40
#define MIN_ROWS 12
#define FRAME_S 0.020

enum { ROLE_INFO = 10, ROLE_ERROR };
enum { DIRTY_HIST = 1, DIRTY_THINK = 2, DIRTY_RESP = 4, DIRTY_STATUS = 8, DIRTY_INPUT = 16, DIRTY_ALL = 31 };
#define DIRTY_PANES (DIRTY_THINK | DIRTY_RESP)
enum { KEY_PASTE_BEGIN = KEY_MAX + 1, KEY_PASTE_END, KEY_CTRL_HOME, KEY_CTRL_END };

/* ==== state ================================================================= */

typedef struct entry {
    int     role;     /* UE_ROLE_* or ROLE_INFO / ROLE_ERROR               */
    txt_buf text;     /* content                                            */
    txt_buf think;    /* reasoning (assistant)                              */
    double  think_s;  /* seconds of reasoning                               */
    int     n_think;  /* reasoning tokens                                   */
    int     expanded; /* reasoning unfolded in the conversation pane        */
    int     status;   /* UE_DONE_* of an assistant turn                     */
    int     queued;   /* user message waiting for the model to load         */
    char   *summary;  /* the folded-reasoning line as drawn (reasoning only) */
    md_doc *md;       /* text rendered as Markdown at md_width (tui-md.c);
                         kept only near the lines on screen (TUI_MD_KEEP)   */
    int    md_width;
    size_t md_len; /* bytes of text rendered                             */
    int    nl;     /* lines it takes in the conversation pane, with the
                      blank after it; valid while nl_key matches         */
    uint64_t nl_key;
} entry;

/* Final lines of a streaming pane (byte ranges of its buffer), and where wrapping resumes. */
#define TAIL_N 512
#define TUI_PANE_MAX TAIL_N /* rows of a streaming pane drawn at most */
typedef struct tail_line {
    size_t off, len;
    int    role;
} tail_line;
typedef struct wrap_state wrap_state;
struct wrap_state {
    int    in_code;   /* inside a ``` block at the start of the raw line           */
    int    mid;       /* resuming inside a raw line                                */
    int    mid_fence; /* that raw line is a fence line                              */
    size_t last_off;  /* out: offset of the last line produced (where to resume)    */
};
typedef struct tail_cache {
    const char *base;       /* the buffer wrapped (a realloc or a new turn resets)   */
    size_t      len, start; /* its length last time; where wrapping resumes          */
    int         width;
    wrap_state  ws;           /* state at start                                        */
    tail_line   ring[TAIL_N]; /* final lines before start, oldest first from head      */
    int         head, n;
} tail_cache;

/* One drawn line of the conversation pane. */
typedef struct dline {
    int           ent; /* entry index                           */
    const char   *s;   /* bytes (into the entry) or a static    */
    size_t        len;
    int           role; /* thm role                              */
    int           indent;
    int           fold; /* the reasoning summary line (clickable) */
    const md_doc *md;   /* a rendered Markdown line: line mdl of md */
    int           mdl;
} dline;

typedef struct tui {
    const ui_opts *o;
    ue            *eng;
    ev_queue      *q;
    inp           *in;
    chat_settings  cs;
    thm_spec       theme[THM_N];
    char           theme_name[THM_NAME_MAX + 1];

    entry *ents; /* (n_ents) the conversation as displayed */
    int    n_ents, cap_ents;
    int    cur;       /* entry being streamed, -1 when none */
    int    streaming; /* a turn is in progress              */
    int    replaying;
    int    ignore_done; /* the EV_DONE of a turn already taken back by EV_UNDO */
    /* commands the display applied at once; the worker's echo of them is ignored until its
     * EV_ACK, so a message typed right after them is not dropped */
    int      clear_pending, undo_pending, load_pending;
    int      stats_pending; /* /stats waits for the worker's fresh figures */
    double   turn_t0, think_t0, think_t1;
    int      pf_on; /* a prefill's progress shows in the status bar (EV_PREFILL) */
    uint64_t pf_done, pf_total;
    double   pf_bytes;

    /* model and statistics */
    int      ready, fatal;
    char    *fatal_msg;     /* why the engine did not start (EV_FATAL text), NULL: it did  */
    char     model[1024];   /* what the backend says it runs (EV_READY text), whole characters */
    size_t   model_name;    /* its first model_name bytes are the model's name (EV_READY a) */
    char     fit[128];      /* the memory fit in a few words (EV_READY text2; status bar, /stats) */
    char     estimate[128]; /* expected speed while loading (EV_ESTIMATE)                     */
    ue_stats st;
    char     load_what[256];
    uint64_t load_done, load_total;
    double   load_t0, load_rate;

    /* layout */
    int rows, cols, too_small;
    int small_from; /* entries there were when the terminal became too small: a notice after
                       them (a refused quit) shows on the too-small screen */
    /* (n_held) keys typed while too small from the first Enter on: what they do (send, run a
     * command) is to be seen, so they wait for a window large enough and are then read again
     * in order (tui.c next_key), before any key typed later; held_at: the next one to give */
    struct held_key {
        wint_t k;
        int    fn;
    } * held;
    int n_held, cap_held, held_at;
    int hist_y, hist_h, think_y, think_h, resp_y, resp_h, status_y, input_y, input_h;
    int dirty;
    int scroll;       /* conversation lines scrolled up from the bottom */
    int scroll_shown; /* the scroll the status bar shows ("scrolled ↑N")  */
    int mouse;
    int paste; /* inside a bracketed paste */
    /* the paste's bytes read in blocks from stdin, not by curses (tui.c, paste_read): set only
     * while curses holds no key read ahead */
    int           paste_raw;
    unsigned char paste_carry[128]; /* a cut end marker or UTF-8 sequence; after a paste, the
                                     * start of the next one read with it */
    int         n_carry;
    double      paste_shown; /* when the paste so far last went into the input line */
    double      paste_last;  /* when the paste's last byte came (PASTE_IDLE_S) */
    signed char solo[256];   /* per byte: 0 text, 1 begins a key (key_defined) */
    int         bad_utf8;    /* invalid UTF-8 sequences read (as U+FFFD) since the last notice */
    /* Ctrl-R: the history search the UI runs itself (label in the hint rows above the line) */
    int     srch;          /* searching                                   */
    char    srch_pat[256]; /* the pattern typed (UTF-8)                   */
    int     srch_pos;      /* history index of the match shown, -1: none  */
    char   *srch_draft;    /* the line before the search, put back on Esc */
    txt_buf paste_buf;
    double  last_draw, next_tick;
    int     quit;
    int     unsaved_warned; /* 1 + UE_DROP_* of the last refusal (unsaved turns, tui.c) */
    int     quit_warned;    /* a quit while an answer streamed was refused (request_quit) */
    /* Quitting waits for the worker to end (EV_STOPPED), QUIT_GRACE_S at most, or until the
     * user asks again: then k3chat quits without it (abandon; tui.c request_quit) */
    double quitting;  /* when the quit began (0: not quitting)                    */
    int    quit_told; /* the wait was told (quit_tick)                             */
    int    stopped;   /* EV_STOPPED came: the worker has ended                     */
    int    abandon;   /* quit without waiting for the worker                       */
    double stop_t;    /* when Ctrl-C asked the answer to stop (0: not asked)       */
    int    stop_told; /* a second Ctrl-C was told the stop does not come           */
    /* epoll sets the main loop sleeps on (tui.c wait_input): [0] stdin, [1] stdin and the event
     * pipe; -1 before the first sleep, -2 when epoll is not available (poll() then) */
    int ep[2];

    /* (n_dl) the conversation pane's lines: only those of the entries on screen (tui-draw.c
     * build_window), rebuilt when dirty, at another width or scroll */
    dline     *dl;
    int        n_dl, cap_dl, dl_width, dl_valid, dl_scroll, dl_rows;
    int        vis_first;         /* dline index drawn on the pane's first row */
    int        n_md;              /* entries holding a rendered Markdown doc       */
    md_doc     md_count;          /* scratch: an answer rendered to count its lines */
    tail_cache tc_think, tc_resp; /* incremental wrapping of the streaming panes */
    /* what each screen row shows (a hash of its content, 0: unknown): drawing that would put the
     * same again is skipped, so a streaming frame touches only the rows that changed. Valid
     * while only the routine that drew a row draws there: tui_render forgets it all on
     * DIRTY_ALL (layout, theme, Ctrl-L, resume) */
    uint64_t *row_sig;
    int       n_row_sig;

    /* Markdown (tui-md.c) */
    int       raw;          /* /raw on: answers as unrendered text                   */
    int       osc8;         /* links as OSC 8 hyperlinks (md_term_osc8)              */
    int       edit_pending; /* /edit: the next message replaces the last exchange    */
    int       flowing;      /* the last frame showed new tokens (tui.c next_key)     */
    md_stream ms_resp;      /* the streaming response, chunk by chunk                */
    struct tui_link {
        int           y, x;
        const md_doc *d;
        size_t        run;
    } * links; /* drawn this frame */
    int n_links, cap_links;

    /* latency bookkeeping (K3_UI_STATS) */
    double tok_t_pending; /* oldest undisplayed token's push time, 0 = none */
    double lat_sum, lat_max;
    long   lat_n;
    double ui_cpu0, decode_wall;
    /* the UI thread's CPU time while turns stream (first token to EV_DONE), user and system
     * (getrusage), and the wake-ups from its sleep and frames in that time */
    double turn_ru0[2], turn_user, turn_sys;
    long   turn_wakes, turn_frames;
    /* the UI thread's CPU time of each frame drawn (tui_render): all of them and the most */
    double draw_cpu, draw_max;
    long   draw_n;
} tui;

/* tui-draw.c */
void tui_layout(tui *t);            /* pane geometry from the terminal size; marks all dirty */
void tui_render(tui *t, int force); /* redraw the dirty regions (coalesced while streaming) */
/* Draw s[0..n) at (y, x) within w columns in role; returns the columns used. */
int  tui_text(int y, int x, int w, const char *s, size_t n, int role);
void tui_fill(int y, int x, int w, int role);
int  tui_dl_push(tui *t, int ent, const char *s, size_t len, int role, int indent, int fold); /* 0, -1 */
/* A 64-bit hash of p[0..n) continuing from h (start with TUI_HASH0), 8 bytes a step (the tail
 * as FNV-1a): the content of a screen row. */
#define TUI_HASH0 1469598103934665603ull
uint64_t tui_hash(uint64_t h, const void *p, size_t n);
/* 1 when row y shows h already (skip drawing it); otherwise records h and returns 0. */
int tui_row_same(tui *t, int y, uint64_t h);
/* A pane of rows [y0, y0 + h) is about to show hs[0..h): when that is what it shows now moved up
 * by some rows (a streaming pane that gained lines), scroll the rows in the window instead of
 * drawing them all again (curses sends the terminal a scroll, idlok) and move their hashes. */
void tui_rows_scroll(tui *t, int y0, int h, const uint64_t *hs);

/* tui-stderr.c: while the screen is ours, fd 2 (a terminal) is a pipe whose lines become notices
 * (EV_INFO on q); end puts the terminal back and writes there what was not shown. begin: 0, or -1
 * (fd 2 is not a terminal, or no pipe or thread: stderr stays as it was). */
int  tui_stderr_begin(ev_queue *q);
void tui_stderr_end(void);
/* A fatal signal (abort, crash, SIGQUIT) puts terminal fd back as found (the settings before
 * curses) and leaves curses' modes, once armed (after initscr); disarm before endwin. */
struct termios;
void tui_fatal_arm(int fd, const struct termios *found);
void tui_fatal_disarm(void);

/* tui-md.c: Markdown in the panes, /raw, /copy */
/* Lines of an assistant entry's text as rendered Markdown (cached per width); 0, or -1 when it
 * could not be rendered (the caller shows the raw text). */
int tui_md_entry(tui *t, int ent, int width);
/* The number of lines tui_md_entry would give, without keeping a doc for the entry (its own when
 * it has one at width, else rendered in a scratch doc); -1 as there. */
int tui_md_count(tui *t, int ent, int width);
/* Docs kept at most (more: those of entries off screen are freed after a window is built). */
#define TUI_MD_KEEP 256
/* Draw line i of d at (y, x) within w columns; returns the columns used. */
int tui_md_draw(tui *t, int y, int x, int w, const md_doc *d, int i);
/* The streaming response's last h lines in rows [y0, y0 + h); -1 when not rendered. */
int  tui_md_tail(tui *t, int y0, int h, const txt_buf *b);
void tui_md_frame(tui *t); /* before drawing: forget last frame's links */
void tui_md_links(tui *t); /* after doupdate: OSC 8 over the links drawn */
void tui_md_entry_free(tui *t, entry *e);
/* tui-emoji.c: multi-emoji clusters (ZWJ sequences, flags, skin tones) drawn whole where the
 * terminal can, over a stand-in curses holds (emoji.h) */
int  tui_emoji_setup(char *err, size_t n); /* K3_EMOJI, before initscr; -1 with a message */
void tui_emoji_probe(void);                /* after the first refresh: measure the terminal */
/* Before curses reads keys: the probe's late replies taken off the terminal's input (keys typed
 * go back to curses); 1 when they changed which kinds are drawn whole (repaint). */
int tui_emoji_late(void);
/* While the probe waits: milliseconds until a lone Esc it holds (the start of a reply, or a
 * key) is given to curses as a key (ESCDELAY after it came), 0 when due now, -1 when none. */
int tui_emoji_esc_wait(void);
/* Draw the cluster s[0..n) at (y, x) in w columns in role when it is a multi-emoji one;
 * returns 1 when it did, 0 for other clusters. */
int tui_emoji_cell(int y, int x, int w, const char *s, size_t n, int role);
/* Draw the cluster s[0..n) that txt_cluster flagged TXT_F_NARROW at (y, x), one column. */
void tui_emoji_narrow(int y, int x, const char *s, size_t n, int role);
void tui_emoji_scroll(int y0, int h, int k); /* rows [y0, y0 + h) were scrolled up k (wscrl) */
void tui_emoji_before(void);                 /* before wnoutrefresh/refresh */
void tui_emoji_after(void);                  /* after doupdate */
void tui_emoji_free(void);

/* /raw and /copy: 1 when r was one of them, with a message (role ROLE_INFO or ROLE_ERROR). */
int tui_md_command(tui *t, const cmd_result *r, char *msg, size_t n, int *role);

#endif
