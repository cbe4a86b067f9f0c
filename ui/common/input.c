/* input.c: libedit fed key by key, its output kept off the screen (see input.h). */
#include "input.h"
#include "cmd.h"
#include "text.h"
#include "xdg.h"

#include <errno.h>
#include <fcntl.h>
#include <histedit.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>
#include <utf8proc.h>

struct inp {
    EditLine   *el;
    HistoryW   *hist;
    FILE       *pty_in, *null_out; /* libedit's terminal: a private pty slave, and /dev/null */
    int         pty_master;
    char       *histfile;
    inp_more_fn more;
    void       *ud;
    wchar_t     feed[64]; /* keys handed over, not yet read by libedit */
    int         nfeed;
    int         nonblock;  /* getc: return EOF instead of asking for more */
    int         saw_enter; /* getc handed libedit a newline in this inp_key */
    char       *text;      /* UTF-8 copy of the line for drawing */
    size_t      text_cap;
    char        hint[1024];
    char       *found; /* the last history entry inp_history_find returned (UTF-8) */
    /* Undo (Ctrl-_) and redo (Alt-_): the line as it was before each change, newest last */
    struct snap {
        wchar_t *s; /* (n) the line                            */
        size_t   n, cur;
    } * undo, *redo;
    int    n_undo, cap_undo, n_redo, cap_redo;
    size_t snap_bytes; /* held in both stacks (UNDO_BYTES at most)  */
    int    typing;     /* the last change typed a character of a word: the next such one joins it */
};

enum { UNDO_MAX = 200 };
#define UNDO_BYTES ((size_t)64 << 20)

static int getc_fn(EditLine *el, wchar_t *c) {
    inp *in;
    el_wget(el, EL_CLIENTDATA, (void **)&in);
    if (in->nfeed > 0) {
        *c = in->feed[0];
        memmove(in->feed, in->feed + 1, (size_t)--in->nfeed * sizeof *in->feed);
    } else if (in->nonblock || !in->more || !in->more(in->ud, c)) {
        return 0;
    }
    if (*c == '\r' || *c == '\n')
        in->saw_enter = 1;
    return 1;
}

/* Tab: complete a slash command's name, or on|off / low|high|max arguments. */
static unsigned char complete_fn(EditLine *el, int ch) {
    inp             *in;
    const LineInfoW *li = el_wline(el);
    el_wget(el, EL_CLIENTDATA, (void **)&in);
    in->hint[0] = 0;
    size_t cur  = (size_t)(li->cursor - li->buffer);
    if (cur == 0 || li->buffer[0] != L'/' || cur > 200)
        return CC_ERROR;
    char line[256];
    for (size_t k = 0; k < cur; k++)
        line[k] = li->buffer[k] < 128 ? (char)li->buffer[k] : '?';
    line[cur]         = 0;
    const char *space = strchr(line, ' ');
    const char *cands[32];
    int         n;
    const char *word;
    if (!space) {
        word = line + 1;
        n    = cmd_complete(word, cands, 32);
    } else {
        /* a setting's words: on|off, or its choices (low|high|max) */
        static char words[8][32];
        const char *set[8];
        int         ns = 0;
        word           = space + 1;
        while (*word == ' ')
            word++;
        cmd_result r; /* the command is known even when its argument is not complete yet */
        cmd_parse(line, &r);
        const int             sid = r.id == CMD_UNKNOWN ? -1 : cmd_setting(r.id);
        const k3_setting_row *row = sid >= 0 ? k3_setting(sid) : NULL;
        for (int k = 0; row && (row->type == K3_TYPE_BOOL || row->type == K3_TYPE_ENUM) && k < 8; k++) {
            const char *w = row->type == K3_TYPE_BOOL ? (k == 0   ? "on"
                                                         : k == 1 ? "off"
                                                                  : "?")
                                                      : k3_setting_choice(sid, k);
            if (!strcmp(w, "?"))
                break;
            snprintf(words[k], sizeof words[k], "%s", w);
            set[ns++] = words[k];
        }
        n = 0;
        for (int k = 0; k < ns; k++)
            if (!strncmp(set[k], word, strlen(word)))
                cands[n++] = set[k];
    }
    if (n == 0)
        return CC_ERROR;
    size_t lw = strlen(word), common = strlen(cands[0]);
    for (int k = 1; k < n && k < 32; k++) {
        size_t j = 0;
        while (j < common && cands[k][j] == cands[0][j])
            j++;
        common = j;
    }
    wchar_t add[72];
    size_t  na = 0;
    for (size_t j = lw; j < common && na < 64; j++)
        add[na++] = (wchar_t)cands[0][j];
    if (n == 1)
        add[na++] = L' ';
    add[na] = 0;
    if (na)
        el_winsertstr(el, add);
    if (n > 1) {
        size_t u = 0;
        for (int k = 0; k < n && k < 32 && u + 40 < sizeof in->hint; k++)
            u += (size_t)snprintf(in->hint + u, sizeof in->hint - u, "%s%s%s", k ? "  " : "",
                                  space ? "" : "/", cands[k]);
    }
    (void)ch;
    return CC_REFRESH;
}

int inp_history_path(char *buf, size_t n) {
    char dir[PATH_MAX];
    if (xdg_dir("XDG_STATE_HOME", ".local/state", "", 1, dir, sizeof dir) != 0)
        return -1;
    snprintf(buf, n, "%.*s/history", (int)(n > 16 ? n - 16 : 0), dir);
    return 0;
}

inp *inp_new(const char *histfile, inp_more_fn more, void *ud, char *err, size_t errn) {
    inp *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->more       = more;
    in->ud         = ud;
    in->pty_master = -1;
    /* libedit edits only on a terminal and sets that terminal's modes itself: give it a private
     * pseudo-terminal, so the real one stays entirely curses'. */
    in->pty_master    = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    const char *sname = in->pty_master >= 0 && grantpt(in->pty_master) == 0 && unlockpt(in->pty_master) == 0
                            ? ptsname(in->pty_master)
                            : NULL;
    int         sfd   = sname ? open(sname, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (sfd < 0) {
        snprintf(err, errn, "cannot open a pseudo-terminal for the line editor: %s", strerror(errno));
        goto fail;
    }
    struct winsize ws = {.ws_row = 24, .ws_col = 1000};
    ioctl(sfd, TIOCSWINSZ, &ws);
    in->pty_in   = fdopen(sfd, "r+");
    in->null_out = fopen("/dev/null", "w");
    if (!in->pty_in || !in->null_out) {
        snprintf(err, errn, "cannot open /dev/null: %s", strerror(errno));
        goto fail;
    }
    in->el = el_init("k3chat", in->pty_in, in->pty_in, in->null_out);
    if (!in->el) {
        snprintf(err, errn, "libedit: el_init failed");
        goto fail;
    }
    el_wset(in->el, EL_SETFP, 1, in->null_out); /* output: nowhere (we draw the line) */
    el_wset(in->el, EL_CLIENTDATA, (void *)in);
    el_wset(in->el, EL_GETCFN, getc_fn);
    el_wset(in->el, EL_EDITOR, L"emacs");
    el_wset(in->el, EL_UNBUFFERED, 1);
    el_wset(in->el, EL_SIGNAL, 0);
    in->hist = history_winit();
    if (in->hist) {
        HistEventW ev;
        history_w(in->hist, &ev, H_SETSIZE, 1000);
        history_w(in->hist, &ev, H_SETUNIQUE, 1);
        if (histfile) {
            in->histfile = strdup(histfile);
            history_w(in->hist, &ev, H_LOAD, histfile);
        }
        el_wset(in->el, EL_HIST, history_w, in->hist);
    }
    el_wset(in->el, EL_ADDFN, L"k3-complete", L"complete a slash command", complete_fn);
    el_wset(in->el, EL_BIND, L"^I", L"k3-complete", NULL);
    el_wset(in->el, EL_BIND, L"^W", L"ed-delete-prev-word", NULL);
    inp_bind_clusters(in->el);
    return in;
fail:
    inp_free(in);
    return NULL;
}

void inp_free(inp *in) {
    if (!in)
        return;
    if (in->hist) {
        HistEventW ev;
        if (in->histfile)
            history_w(in->hist, &ev, H_SAVE, in->histfile);
        history_wend(in->hist);
    }
    if (in->el)
        el_end(in->el);
    if (in->pty_in)
        fclose(in->pty_in);
    if (in->null_out)
        fclose(in->null_out);
    if (in->pty_master >= 0)
        close(in->pty_master);
    for (int k = 0; k < in->n_undo; k++)
        free(in->undo[k].s);
    for (int k = 0; k < in->n_redo; k++)
        free(in->redo[k].s);
    free(in->undo);
    free(in->redo);
    free(in->histfile);
    free(in->text);
    free(in->found);
    free(in);
}

/* ==== undo and redo =========================================================================
 * Whole-line snapshots: a line is short next to what a snapshot per change costs to get right
 * through every libedit command (kill, yank, transpose, completion, history). Words typed go as
 * one change; a deletion, a paste, a clear (Ctrl-C) each are one. Both stacks together hold at
 * most UNDO_BYTES (the oldest snapshots go first), so a pasted megabyte edited many times does
 * not keep a copy per edit. */

static int line_is(inp *in, const struct snap *sn) {
    const LineInfoW *li = el_wline(in->el);
    return (size_t)(li->lastchar - li->buffer) == sn->n && !wmemcmp(li->buffer, sn->s, sn->n);
}

static int snap_take(inp *in, struct snap *sn) {
    const LineInfoW *li = el_wline(in->el);
    sn->n               = (size_t)(li->lastchar - li->buffer);
    sn->cur             = (size_t)(li->cursor - li->buffer);
    sn->s               = malloc((sn->n + 1) * sizeof *sn->s);
    if (!sn->s)
        return -1;
    wmemcpy(sn->s, li->buffer, sn->n);
    return 0;
}

static void snap_drop(inp *in, struct snap *stack, int *n, int k) {
    in->snap_bytes -= stack[k].n * sizeof(wchar_t);
    free(stack[k].s);
    memmove(stack + k, stack + k + 1, (size_t)(*n - k - 1) * sizeof *stack);
    (*n)--;
}

/* Push sn (taken) on a stack; the oldest snapshots go while over the limits. */
static void snap_push(inp *in, struct snap **stack, int *n, int *cap, struct snap *sn) {
    struct snap *st = k3_grow(*stack, cap, (size_t)*n + 1, sizeof *st, 16);
    if (!st) {
        free(sn->s);
        return;
    }
    *stack           = st;
    (*stack)[(*n)++] = *sn;
    in->snap_bytes += sn->n * sizeof(wchar_t);
    while (*n > 1 && (*n > UNDO_MAX || in->snap_bytes > UNDO_BYTES))
        snap_drop(in, *stack, n, 0);
}

static void redo_clear(inp *in) {
    while (in->n_redo)
        snap_drop(in, in->redo, &in->n_redo, in->n_redo - 1);
}

/* The line as it was (before a change): sn, taken before it. */
static void undo_record(inp *in, struct snap *sn) {
    snap_push(in, &in->undo, &in->n_undo, &in->cap_undo, sn);
    redo_clear(in);
}

void inp_undo_mark(inp *in) {
    struct snap sn;
    in->typing = 0;
    if (in->n_undo && line_is(in, &in->undo[in->n_undo - 1]))
        return; /* nothing changed since the last mark */
    if (snap_take(in, &sn) == 0)
        undo_record(in, &sn);
}

/* Put the line back as sn has it (sn's text stays sn's). */
static void snap_restore(inp *in, const struct snap *sn) {
    wchar_t *w = malloc((sn->n + 1) * sizeof *w);
    if (!w)
        return;
    wmemcpy(w, sn->s, sn->n);
    w[sn->n] = 0;
    el_reset(in->el);
    in->nfeed = 0;
    if (sn->n)
        el_winsertstr(in->el, w);
    free(w);
    el_cursor(in->el, -(int)(sn->n - sn->cur));
}

/* Ctrl-_ (redo 0) or Alt-_ (redo 1): the line one change back or on; 0 when there is none. */
static int undo_step(inp *in, int redo) {
    struct snap *from = redo ? in->redo : in->undo, now;
    int         *n    = redo ? &in->n_redo : &in->n_undo;
    in->typing        = 0;
    while (*n && line_is(in, &from[*n - 1]))
        snap_drop(in, from, n, *n - 1); /* a mark with no change after it */
    if (!*n || snap_take(in, &now) != 0)
        return 0;
    snap_restore(in, &from[*n - 1]);
    snap_drop(in, from, n, *n - 1);
    if (redo)
        snap_push(in, &in->undo, &in->n_undo, &in->cap_undo, &now);
    else
        snap_push(in, &in->redo, &in->n_redo, &in->cap_redo, &now);
    return 1;
}

/* The line as UTF-8 (into in->text); cursor byte offset. */
static size_t line_utf8(inp *in, const wchar_t *b, const wchar_t *e, const wchar_t *cur, size_t *cursor) {
    size_t need = (size_t)(e - b) * 4 + 1, n = 0;
    char  *t = k3_grow_z(in->text, &in->text_cap, need, 1, 256); /* not a realloc per key typed */
    if (!t)
        return 0;
    in->text = t;
    for (const wchar_t *p = b; p < e; p++) {
        if (p == cur)
            *cursor = n;
        utf8proc_int32_t cp = (utf8proc_int32_t)*p;
        if (!utf8proc_codepoint_valid(cp))
            cp = 0xFFFD;
        n += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)in->text + n);
    }
    if (cur >= e)
        *cursor = n;
    in->text[n] = 0;
    return n;
}

const char *inp_text(inp *in, size_t *cursor) {
    const LineInfoW *li = el_wline(in->el);
    size_t           c  = 0;
    line_utf8(in, li->buffer, li->lastchar, li->cursor, &c);
    if (cursor)
        *cursor = c;
    return in->text ? in->text : "";
}

/* ==== editing by grapheme cluster ==========================================================
 * libedit moves and deletes one code point at a time: Backspace after an emoji ZWJ sequence took
 * its last emoji and left the joiner, Left stopped inside it (a letter typed there split it), and
 * Backspace after an accented letter took the accent alone. These commands take the whole cluster
 * (text.h's rules) and replace libedit's on the keys that move and delete a character. */

/* Code points from the cursor to the next cluster boundary before it (dir < 0) or after it
 * (dir > 0); 0 at the start or end of the line. */
static int cluster_span(EditLine *el, int dir) {
    const LineInfoW *li = el_wline(el);
    size_t           n = (size_t)(li->lastchar - li->buffer), cur = (size_t)(li->cursor - li->buffer);
    if (dir < 0)
        return cur ? (int)(cur - txt_wcluster_prev(li->buffer, n, cur)) : 0;
    return cur < n ? (int)(txt_wcluster_next(li->buffer, n, cur) - cur) : 0;
}

/* the cursor over one cluster, back (dir < 0) or on */
static unsigned char cl_move(EditLine *el, int dir) {
    int k = cluster_span(el, dir);
    if (!k)
        return CC_ERROR;
    el_cursor(el, dir * k);
    return CC_CURSOR;
}
static unsigned char cl_left(EditLine *el, int ch) {
    (void)ch;
    return cl_move(el, -1);
}
static unsigned char cl_right(EditLine *el, int ch) {
    (void)ch;
    return cl_move(el, 1);
}

static unsigned char cl_backspace(EditLine *el, int ch) {
    int k = cluster_span(el, -1);
    (void)ch;
    if (!k)
        return CC_ERROR;
    el_wdeletestr(el, k);
    return CC_REFRESH;
}

/* Ctrl-D and Delete: the cluster under the cursor; on an empty line the end of input, as
 * libedit's em-delete-or-list */
static unsigned char cl_delete(EditLine *el, int ch) {
    const LineInfoW *li = el_wline(el);
    int              k  = cluster_span(el, 1);
    (void)ch;
    if (li->lastchar == li->buffer)
        return CC_EOF;
    if (!k)
        return CC_ERROR;
    el_cursor(el, k);
    el_wdeletestr(el, k);
    return CC_REFRESH;
}

void inp_bind_clusters(EditLine *el) {
    static const struct {
        const wchar_t *name, *help;
        unsigned char (*fn)(EditLine *, int);
        const wchar_t *keys[4];
    } cmds[] = {
        {L"k3-cluster-left",
         L"move back a character (a grapheme cluster)",
         cl_left,
         {L"^B", L"\033[D", L"\033OD"}},
        {L"k3-cluster-right",
         L"move on a character (a grapheme cluster)",
         cl_right,
         {L"^F", L"\033[C", L"\033OC"}},
        {L"k3-cluster-backspace", L"delete the character before the cursor", cl_backspace, {L"^?", L"^H"}},
        {L"k3-cluster-delete",
         L"delete the character under the cursor, or end",
         cl_delete,
         {L"^D", L"\033[3~"}},
    };
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        el_wset(el, EL_ADDFN, cmds[c].name, cmds[c].help, cmds[c].fn);
        for (int k = 0; k < 4 && cmds[c].keys[k]; k++)
            el_wset(el, EL_BIND, cmds[c].keys[k], cmds[c].name, NULL);
    }
}

int inp_empty(inp *in) {
    const LineInfoW *li = el_wline(in->el);
    return li->lastchar == li->buffer;
}

void inp_clear(inp *in) {
    el_reset(in->el);
    in->nfeed = 0;
}

void inp_insert(inp *in, const char *s) {
    size_t   n = strlen(s), k = 0;
    wchar_t *w = malloc((n + 1) * sizeof *w);
    if (!w)
        return;
    for (utf8proc_ssize_t off = 0; off < (utf8proc_ssize_t)n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + off, (utf8proc_ssize_t)n - off, &cp);
        if (l <= 0) {
            cp = 0xFFFD;
            l  = 1;
        }
        if (cp != '\r')
            w[k++] = (wchar_t)cp;
        off += l;
    }
    w[k] = 0;
    el_winsertstr(in->el, w);
    free(w);
}

void inp_history_add(inp *in, const char *line) {
    if (!in->hist || !*line)
        return;
    HistEventW ev;
    size_t     n = strlen(line) + 1;
    wchar_t   *w = malloc(n * sizeof *w);
    if (!w)
        return;
    mbstate_t st;
    memset(&st, 0, sizeof st);
    const char *src = line;
    if (mbsrtowcs(w, &src, n, &st) != (size_t)-1) {
        history_w(in->hist, &ev, H_ENTER, w);
        if (in->histfile)
            history_w(in->hist, &ev, H_SAVE, in->histfile);
    }
    free(w);
}

void inp_history_drop(inp *in, const char *line) {
    HistEventW ev;
    size_t     n = strlen(line) + 1, lw;
    wchar_t   *w = malloc(n * sizeof *w);
    mbstate_t  st;
    memset(&st, 0, sizeof st);
    const char *src = line;
    if (!in->hist || !w || (lw = mbsrtowcs(w, &src, n, &st)) == (size_t)-1) {
        free(w);
        return;
    }
    for (int r = history_w(in->hist, &ev, H_FIRST); r == 0; r = history_w(in->hist, &ev, H_NEXT)) {
        size_t le = wcslen(ev.str);
        while (le > 0 && ev.str[le - 1] == L'\n')
            le--;
        if (le == lw && !wmemcmp(ev.str, w, lw)) {
            /* H_DEL unlinks the entry and hands its text back: freeing it is the caller's
             * (editline(3), H_DEL) */
            if (history_w(in->hist, &ev, H_DEL, ev.num) == 0)
                free((void *)(uintptr_t)ev.str);
            if (in->histfile)
                history_w(in->hist, &ev, H_SAVE, in->histfile);
            break;
        }
    }
    free(w);
}

const char *inp_history_find(inp *in, const char *pat, int *pos, int dir) {
    HistEventW ev;
    if (!in->hist || history_w(in->hist, &ev, H_FIRST) != 0)
        return NULL;
    /* entries newest first: walk to the first candidate, then on in the direction asked */
    int want = dir < 0 ? *pos - 1 : *pos, k = 0;
    if (want < 0)
        return NULL;
    for (; k < want; k++)
        if (history_w(in->hist, &ev, H_NEXT) != 0)
            return NULL;
    for (;;) {
        size_t n = wcslen(ev.str);
        char  *u = realloc(in->found, n * 4 + 1);
        if (!u)
            return NULL;
        in->found = u;
        size_t b  = 0;
        for (size_t j = 0; j < n; j++) {
            utf8proc_int32_t cp =
                utf8proc_codepoint_valid((utf8proc_int32_t)ev.str[j]) ? (utf8proc_int32_t)ev.str[j] : 0xFFFD;
            b += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)u + b);
        }
        while (b > 0 && u[b - 1] == '\n') /* history keeps the line's newline */
            b--;
        u[b] = 0;
        if (strstr(u, pat)) {
            *pos = k;
            return u;
        }
        if (dir < 0) {
            if (--k < 0 || history_w(in->hist, &ev, H_PREV) != 0)
                return NULL;
        } else if (k++, history_w(in->hist, &ev, H_NEXT) != 0) {
            return NULL;
        }
    }
}

const char *inp_hint(inp *in) {
    return in->hint;
}

void inp_set_hint(inp *in, const char *hint) {
    snprintf(in->hint, sizeof in->hint, "%s", hint ? hint : "");
}

void inp_prefeed(inp *in, wchar_t key) {
    if (in->nfeed < (int)(sizeof in->feed / sizeof *in->feed) - 1)
        in->feed[in->nfeed++] = key;
}

int inp_key(inp *in, wchar_t key, char **line) {
    int nread;
    *line         = NULL;
    in->saw_enter = 0;
    if (key == 31 || (key == L'_' && in->nfeed == 1 && in->feed[0] == 27)) { /* Ctrl-_, Alt-_ */
        in->nfeed = 0;
        undo_step(in, key != 31);
        return 0;
    }
    struct snap before;
    int         have = snap_take(in, &before) == 0;
    /* a character of a word typed (not a control key, Backspace or a meta key's second one) */
    int word = key > L' ' && key != 127 && !(key >= 0x80 && key < 0xA0) && in->nfeed == 0;
    if (in->nfeed < (int)(sizeof in->feed / sizeof *in->feed))
        in->feed[in->nfeed++] = key;
    el_wgets(in->el, &nread);
    int changed = have && !line_is(in, &before);
    if (changed && !(word && in->typing))
        undo_record(in, &before);
    else if (have)
        free(before.s);
    if (changed)
        in->typing = word;
    if (in->saw_enter) {
        /* a command that ended on Enter (Ctrl-R search) pushes the Enter back as input:
         * let libedit run it now rather than at the next key */
        in->nonblock = 1;
        el_wgets(in->el, &nread);
        in->nonblock = 0;
    }
    in->nfeed           = 0;
    const LineInfoW *li = el_wline(in->el);
    if (!in->saw_enter || li->lastchar == li->buffer || li->lastchar[-1] != L'\n')
        return 0;
    size_t c;
    line_utf8(in, li->buffer, li->lastchar - 1, li->lastchar, &c);
    *line = strdup(in->text ? in->text : "");
    el_reset(in->el);
    in->typing = 0; /* the line sent: undo and redo are the next draft's */
    while (in->n_undo)
        snap_drop(in, in->undo, &in->n_undo, in->n_undo - 1);
    redo_clear(in);
    return *line != NULL;
}
