/* tui-md.c: Markdown in the full-screen chat (ui/common/md.c renders; this file places the lines).
 *
 * Earlier answers: each assistant entry keeps its rendered lines (entry.md) for the width they
 * were made at, so the conversation pane re-renders an answer only after a resize. The streaming
 * response: an md_stream renders finished chunks once and the open one per frame (md.h).
 * /raw on shows the text as it came (the code role for ``` blocks, as before); the text kept in
 * the entries, transcripts, /export and the API is always the raw Markdown.
 *
 * Hyperlinks: curses has no notion of OSC 8, so after doupdate() the links drawn in this frame
 * are written again over themselves, wrapped in ESC ] 8 ; ; URL ESC \ ... ESC ] 8 ; ; ESC \,
 * between a cursor save and restore (ESC 7 / ESC 8), with underline (ESC [ 4 m). Only where
 * md_term_osc8() says the terminal supports it; elsewhere the URL is shown after the text.
 */
#include "clip.h"
#include "tui-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned md_flags(const tui *t) {
    return t->osc8 ? MD_OSC8 : 0;
}

int tui_md_count(tui *t, int ent, int width) {
    entry *e = &t->ents[ent];
    if (e->md && e->md_width == width && e->md_len == e->text.n)
        return e->md->n_lines;
    md_doc_reset(&t->md_count);
    if (md_render(&t->md_count, e->text.p ? e->text.p : "", e->text.n, width, THM_ASSISTANT, md_flags(t)) &&
        t->md_count.n_lines == 0)
        return -1;
    return t->md_count.n_lines;
}

int tui_md_entry(tui *t, int ent, int width) {
    entry *e = &t->ents[ent];
    if (!e->md) {
        e->md = calloc(1, sizeof *e->md);
        if (!e->md)
            return -1;
        e->md_width = -1;
        t->n_md++;
    }
    if (e->md_width != width || e->md_len != e->text.n) {
        md_doc_reset(e->md);
        if (md_render(e->md, e->text.p ? e->text.p : "", e->text.n, width, THM_ASSISTANT, md_flags(t)) &&
            e->md->n_lines == 0)
            return -1;
        e->md_width = width;
        e->md_len   = e->text.n;
    }
    for (int i = 0; i < e->md->n_lines; i++) {
        if (tui_dl_push(t, ent, "", 0, THM_ASSISTANT, 0, 0))
            return 0;
        t->dl[t->n_dl - 1].md  = e->md;
        t->dl[t->n_dl - 1].mdl = i;
    }
    return 0;
}

static void note_link(tui *t, int y, int x, const md_doc *d, size_t run) {
    struct tui_link *l = k3_grow(t->links, &t->cap_links, (size_t)t->n_links + 1, sizeof *l, 32);
    if (!l)
        return;
    t->links               = l;
    t->links[t->n_links++] = (struct tui_link){y, x, d, run};
}

/* The links of line i of d as drawn at (y, 0) within w columns, for a row not drawn again: a
 * scrolled or repainted row may have lost its OSC 8 attribute on the terminal. */
static void note_row_links(tui *t, int y, int w, const md_doc *d, int i) {
    const md_line *l   = &d->lines[i];
    int            col = 0;
    for (int k = 0; k < l->n_runs && col < w; k++) {
        const md_run *r = &d->runs[l->run0 + (size_t)k];
        if (r->link >= 0)
            note_link(t, y, col, d, l->run0 + (size_t)k);
        col += txt_width(d->text.p + r->off, r->len, col);
    }
}

int tui_md_draw(tui *t, int y, int x, int w, const md_doc *d, int i) {
    const md_line *l   = &d->lines[i];
    int            col = 0;
    for (int k = 0; k < l->n_runs && col < w; k++) {
        const md_run *r = &d->runs[l->run0 + (size_t)k];
        if (r->link >= 0 && t->osc8)
            note_link(t, y, x + col, d, l->run0 + (size_t)k);
        col += tui_text(y, x + col, w - col, d->text.p + r->off, r->len, r->role);
    }
    return col;
}

/* What line i of d shows: each run's role, bytes and (drawn as OSC 8) link target. */
static uint64_t line_hash(const tui *t, const md_doc *d, int i) {
    const md_line *l = &d->lines[i];
    uint64_t       h = TUI_HASH0;
    for (int k = 0; k < l->n_runs; k++) {
        const md_run *r    = &d->runs[l->run0 + (size_t)k];
        int           a[2] = {r->role, r->link >= 0 && t->osc8};
        h                  = tui_hash(tui_hash(h, a, sizeof a), d->text.p + r->off, r->len);
        if (a[1])
            h = tui_hash(h, d->text.p + d->links[r->link].off, d->links[r->link].len);
    }
    return h;
}

int tui_md_tail(tui *t, int y0, int h, const txt_buf *b) {
    if (t->raw)
        return -1;
    md_stream *st = &t->ms_resp;
    if (md_stream_update(st, b->p ? b->p : "", b->n, t->cols - 1, THM_ASSISTANT,
                         MD_STREAMING | md_flags(t)) &&
        st->fin.n_lines + st->open.n_lines == 0)
        return -1;
    int      nf = st->fin.n_lines, total = nf + st->open.n_lines;
    int      first = total > h ? total - h : 0;
    uint64_t hs[TUI_PANE_MAX];
    if (h > TUI_PANE_MAX)
        h = TUI_PANE_MAX;
    for (int r = 0; r < h; r++) {
        int k = first + r;
        hs[r] = k >= total ? TUI_HASH0 : k < nf ? line_hash(t, &st->fin, k) : line_hash(t, &st->open, k - nf);
    }
    tui_rows_scroll(t, y0, h, hs);
    for (int r = 0; r < h; r++) { /* rows that show what they showed last frame are left alone */
        int           k = first + r, used = 0;
        const md_doc *d = k < nf ? &st->fin : &st->open;
        int           i = k < nf ? k : k - nf;
        if (tui_row_same(t, y0 + r, hs[r])) {
            if (t->osc8 && k < total) /* its links are written again after doupdate all the same */
                note_row_links(t, y0 + r, t->cols, d, i);
            continue;
        }
        if (k < total)
            used = tui_md_draw(t, y0 + r, 0, t->cols, d, i);
        if (used < t->cols)
            tui_fill(y0 + r, used, t->cols - used, THM_NORMAL);
    }
    return 0;
}

void tui_md_frame(tui *t) {
    t->n_links = 0;
}

void tui_md_links(tui *t) {
    if (!t->osc8 || !t->n_links)
        return;
    txt_buf b = {0};
    txt_buf_add(&b, "\0337", 2);
    for (int k = 0; k < t->n_links; k++) {
        const struct tui_link *l = &t->links[k];
        const md_run          *r = &l->d->runs[l->run];
        const md_link         *u = &l->d->links[r->link];
        const char            *s = l->d->text.p + r->off;
        size_t                 n = txt_col_to_off(s, r->len, t->cols - l->x); /* the part that was drawn */
        char                   pos[32];
        snprintf(pos, sizeof pos, "\033[%d;%dH\033]8;;", l->y + 1, l->x + 1);
        txt_buf_add(&b, pos, strlen(pos));
        /* the model's URL and text reach the terminal only through text.c: the URL
         * percent-encoded (no ESC, BEL or C1 terminator ends the sequence early), the text as
         * curses drew it (no control character, U+FFFD for bytes that are not UTF-8) */
        txt_term_uri(&b, l->d->text.p + u->off, u->len);
        txt_buf_add(&b, "\033\\\033[4m", 6);
        txt_term_drawn(&b, s, n);
        txt_buf_add(&b, "\033[0m\033]8;;\033\\", 11);
    }
    txt_buf_add(&b, "\0338", 2);
    fflush(stdout);
    for (size_t off = 0; b.p && off < b.n;) {
        ssize_t w = write(1, b.p + off, b.n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(b.p);
}

void tui_md_entry_free(tui *t, entry *e) {
    if (e->md) {
        md_doc_free(e->md);
        free(e->md);
        e->md = NULL;
        t->n_md--;
    }
}

/* /copy: the finished answers of the conversation, oldest first. */
static void copy_cmd(tui *t, const cmd_result *r, char *msg, size_t n, int *role) {
    clip_req q;
    *role = ROLE_ERROR;
    if (clip_parse(r->arg, &q, msg, n))
        return;
    const char **ans  = malloc((size_t)(t->n_ents + 1) * sizeof *ans);
    size_t      *lens = malloc((size_t)(t->n_ents + 1) * sizeof *lens);
    int          na   = 0;
    txt_buf      out  = {0};
    if (!ans || !lens) {
        snprintf(msg, n, "/copy: out of memory");
        goto done;
    }
    for (int i = 0; i < t->n_ents; i++)
        if (t->ents[i].role == UE_ROLE_ASSISTANT && !(t->streaming && i == t->cur)) {
            ans[na]    = t->ents[i].text.p ? t->ents[i].text.p : "";
            lens[na++] = t->ents[i].text.n;
        }
    if (clip_select(&q, ans, lens, na, &out, msg, n))
        goto done;
    if (clip_send(1, out.p, out.n, msg, n) == 0)
        *role = ROLE_INFO;
done:
    free(ans);
    free(lens);
    free(out.p);
}

int tui_md_command(tui *t, const cmd_result *r, char *msg, size_t n, int *role) {
    msg[0] = 0;
    *role  = ROLE_INFO;
    switch (r->id) {
    case CMD_RAW:
        t->raw      = r->flag;
        t->dl_valid = 0;
        memset(&t->tc_resp, 0, sizeof t->tc_resp);
        t->dirty |= DIRTY_ALL;
        snprintf(msg, n, "%s",
                 t->raw ? "answers shown as raw Markdown (/raw off renders them)"
                        : "answers rendered as Markdown (/raw on shows the raw text)");
        return 1;
    case CMD_COPY:
        copy_cmd(t, r, msg, n, role);
        return 1;
    default:
        return 0;
    }
}
