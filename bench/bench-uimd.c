/* bench-uimd.c: the response pane's Markdown renderer under long answers (md_stream_update, the
 * call the full-screen chat makes once a frame while an answer streams), without a terminal.
 *
 * Each case hands a long text to md_stream_update in 1 kB steps at 100 columns, as frames would
 * take it from a fast stream, and reports the total time of the updates (reference: one
 * md_render of the whole text, what a single frame that rendered everything would cost) and the
 * slowest update (reference: the 20 ms frame interval). A frame whose cost grows with the answer
 * shows as a total many times the reference and a slowest update that grows with the text.
 *   ui_md_table_*  548 kB of table rows (13,000 rows; one column widens at row 12,000)
 *   ui_md_list_*   10,000 list items, no blank line between them (one chunk)
 *   ui_md_steps_*  a line of text, then 10,000 numbered items right after it (one chunk)
 *   ui_md_code_*   a fenced code block of 20,000 lines, still open
 *   ui_md_paras_*  5 MB of plain paragraphs separated by blank lines
 *   ui_md_lines_*  300 kB of lines with single newlines (one paragraph of soft line breaks)
 *   ui_md_quote_*  300 kB of a block quote (one paragraph of soft line breaks)
 *   ui_md_quotes_* 300 kB of a block quote of short paragraphs with markup, blank quoted lines between
 *   ui_md_item_*   a list whose second item grows to 300 kB without a newline
 *   ui_md_row_*    a table whose second row grows to 300 kB without a newline (a cell still open)
 */
#include "bench.h"
#include "md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_uimd(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_case(const char *name, const k3_buf *t) {
    char total[64], worst[64];
    snprintf(total, sizeof total, "%s_total_s", name);
    snprintf(worst, sizeof worst, "%s_worst_ms", name);
    if (!bench_want(total) && !bench_want(worst))
        return 0;
    md_doc    whole     = {0};
    double    t0        = now_s();
    int       rc        = md_render(&whole, t->p, t->n, 100, THM_ASSISTANT, 0);
    double    ref       = now_s() - t0;
    md_stream st        = {0};
    double    slow      = 0;
    double    slow_kept = 0; /* of the updates that kept a table's rows */
    t0                  = now_s();
    for (size_t at = 1024; rc == 0; at += 1024) {
        size_t k      = at < t->n ? at : t->n;
        long   relaid = st.tb_relaid;
        double a      = now_s();
        rc            = md_stream_update(&st, t->p, k, 100, THM_ASSISTANT, MD_STREAMING);
        double dt     = now_s() - a;
        slow          = dt > slow ? dt : slow;
        if (st.tb_relaid == relaid && dt > slow_kept)
            slow_kept = dt;
        if (k == t->n)
            break;
    }
    double all = now_s() - t0;
    printf("# %s: %zu bytes in %zu updates of 1 kB, %d lines; one md_render of it %.3f s\n", name, t->n,
           (t->n + 1023) / 1024, st.fin.n_lines + st.open.n_lines, ref);
    if (st.tb_relaid)
        printf("# %s: the table's rows laid out whole %ld times (a column's width changed); the slowest "
               "update that kept them %.2f ms\n",
               name, st.tb_relaid, slow_kept * 1e3);
    md_stream_free(&st);
    md_doc_free(&whole);
    if (rc) {
        fprintf(stderr, "bench-uimd: %s: out of memory\n", name);
        return 1;
    }
    if (bench_want(total))
        bench_report(total, all, "s", ref, "s");
    if (bench_want(worst))
        bench_report(worst, slow * 1e3, "ms", 20.0, "ms");
    return 0;
}

int bench_uimd(void) {
    k3_buf t  = {0};
    int    rc = 0;
    k3_buf_printf(&t, "| id | name | value |\n|---:|------|-------|\n");
    for (int i = 0; i < 13000; i++)
        k3_buf_printf(&t, "| %d | item number %d | %s |\n", i, i * 7,
                      i == 12000 ? "a value that is much wider than the others" : "some value");
    rc |= run_case("ui_md_table", &t);
    t.n = 0;
    for (int i = 0; i < 10000; i++)
        k3_buf_printf(&t, "- item %d with **some** words\n", i);
    rc |= run_case("ui_md_list", &t);
    t.n = 0;
    k3_buf_printf(&t, "Here are **the** steps:\n");
    for (int i = 0; i < 10000; i++)
        k3_buf_printf(&t, "%d. step %d with **some** words\n", i + 1, i);
    rc |= run_case("ui_md_steps", &t);
    t.n = 0;
    k3_buf_printf(&t, "```c\n");
    for (int i = 0; i < 20000; i++)
        k3_buf_printf(&t, "    int x%d = f(%d); /* a line of code */\n", i, i);
    rc |= run_case("ui_md_code", &t);
    t.n = 0;
    while (t.n < 5000000)
        k3_buf_printf(&t,
                      "A paragraph of plain words that goes on for a while, about %zu bytes into the "
                      "answer, and then ends.\n\n",
                      t.n);
    rc |= run_case("ui_md_paras", &t);
    t.n = 0;
    while (t.n < 300000)
        k3_buf_printf(&t, "A line of text at %zu bytes, then a single newline\n", t.n);
    rc |= run_case("ui_md_lines", &t);
    t.n = 0;
    while (t.n < 300000)
        k3_buf_printf(&t, "> a quoted line at %zu bytes\n", t.n);
    rc |= run_case("ui_md_quote", &t);
    t.n = 0;
    while (t.n < 300000)
        k3_buf_printf(
            &t, "> A paragraph at %zu bytes with **some** words and `code`\n> and a second line\n>\n", t.n);
    rc |= run_case("ui_md_quotes", &t);
    t.n = 0;
    k3_buf_printf(&t, "- first item\n- ");
    while (t.n < 300000)
        k3_buf_printf(&t, "words of one long item at %zu bytes ", t.n);
    rc |= run_case("ui_md_item", &t);
    t.n = 0;
    k3_buf_printf(&t, "| a | b |\n|---|---|\n| 1 | ");
    while (t.n < 300000)
        k3_buf_printf(&t, "words of one long cell at %zu bytes ", t.n);
    rc |= run_case("ui_md_row", &t);
    free(t.p);
    return rc;
}
