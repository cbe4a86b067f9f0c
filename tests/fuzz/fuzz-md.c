/* fuzz-md.c: the Markdown renderer (ui/common/md.c) on random bytes at random widths: it never
 * crashes, every line fits the width, the streaming renderer agrees on the lines it finished,
 * its shortcuts (a plain paragraph, an open code block laid out line by line, an unchanged view)
 * show at every step what md4c alone shows (MD_EXACT), and the input is left as it was (the raw
 * text is never touched). Also /copy's code blocks. */
#include "fuzz.h"
#include "md.h"

#include <stdlib.h>

/* Line i of the stream (finished lines, then open ones). */
static const md_line *st_line(const md_stream *st, int i, const md_doc **d) {
    *d = i < st->fin.n_lines ? &st->fin : &st->open;
    return &(*d)->lines[i < st->fin.n_lines ? i : i - st->fin.n_lines];
}

/* st shows what a fresh stream of s[0..n) through md4c alone shows, run for run. */
static void check_exact(const md_stream *st, const char *s, size_t n, int width, unsigned flags) {
    md_stream ref = {0};
    md_stream_update(&ref, s, n, width, THM_ASSISTANT, flags | MD_EXACT);
    int na = st->fin.n_lines + st->open.n_lines;
    FZ_CHECK(na == ref.fin.n_lines + ref.open.n_lines);
    for (int i = 0; i < na; i++) {
        const md_doc  *da, *db;
        const md_line *a = st_line(st, i, &da), *b = st_line(&ref, i, &db);
        FZ_CHECK(a->n_runs == b->n_runs && a->width == b->width);
        for (int k = 0; k < a->n_runs; k++) {
            const md_run *x = &da->runs[a->run0 + (size_t)k], *y = &db->runs[b->run0 + (size_t)k];
            FZ_CHECK(x->role == y->role && x->len == y->len && (x->link < 0) == (y->link < 0));
            FZ_CHECK(!memcmp(da->text.p + x->off, db->text.p + y->off, x->len));
        }
    }
    md_stream_free(&ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    int         width = 1 + data[0] % 160;
    unsigned    flags = data[1] & (MD_OSC8 | MD_STREAMING);
    const char *s     = (const char *)data + 2;
    size_t      n     = size - 2;
    char       *copy  = malloc(n + 1);
    if (!copy)
        return 0;
    memcpy(copy, s, n);
    md_doc d = {0};
    if (md_render(&d, s, n, width, THM_ASSISTANT, flags) == 0) {
        for (int i = 0; i < d.n_lines; i++) {
            FZ_CHECK(d.lines[i].width <= (width < 2 ? 2 : width));
            for (int k = 0; k < d.lines[i].n_runs; k++) {
                const md_run *r = &d.runs[d.lines[i].run0 + (size_t)k];
                FZ_CHECK(r->off + r->len <= d.text.n);
                FZ_CHECK(r->link < d.n_links);
                for (uint32_t j = 0; j < r->len; j++)
                    FZ_CHECK((unsigned char)d.text.p[r->off + j] >= 0x20 && d.text.p[r->off + j] != 0x7f);
            }
        }
    }
    /* streaming: the text arrives in three pieces */
    md_stream st   = {0};
    size_t    cut  = n ? data[0] * n / 256 : 0;
    size_t    cut2 = cut + (n - cut) * (data[1] >> 2) / 64;
    memcpy(copy, s, cut);
    md_stream_update(&st, copy, cut, width, THM_ASSISTANT, MD_STREAMING);
    check_exact(&st, copy, cut, width, MD_STREAMING);
    memcpy(copy + cut, s + cut, cut2 - cut);
    md_stream_update(&st, copy, cut2, width, THM_ASSISTANT, MD_STREAMING);
    check_exact(&st, copy, cut2, width, MD_STREAMING);
    memcpy(copy + cut2, s + cut2, n - cut2);
    md_stream_update(&st, copy, n, width, THM_ASSISTANT, flags);
    check_exact(&st, copy, n, width, flags);
    for (int i = 0; i < st.fin.n_lines; i++)
        FZ_CHECK(st.fin.lines[i].width <= (width < 2 ? 2 : width));
    for (int i = 0; i < st.open.n_lines; i++)
        FZ_CHECK(st.open.lines[i].width <= (width < 2 ? 2 : width));
    FZ_CHECK(memcmp(copy, s, n) == 0);
    txt_buf b = {0};
    int     k = md_code_block(s, n, 1 + data[1] % 4, &b);
    FZ_CHECK(k >= 0 || k == -1);
    free(b.p);
    md_stream_free(&st);
    md_doc_free(&d);
    free(copy);
    return 0;
}
