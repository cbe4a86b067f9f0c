/* test-conv-edit.c: /edit's (and /retry's) abandoned branches in the conversation (k3_conv_edit_last): the
 * old exchange leaves the history but stays in transcripts marked "abandoned": N before the
 * message it was replaced at; save/load/save is byte-identical; autosave rewrites the file;
 * later edits and drops keep the branch points right; a bad "abandoned" value is an error
 * naming the line, memory untouched. (No model needed.) */
#include "conv-impl.h"
#include "k3.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

/* line k (0-based) of text contains needle */
static int line_has(const char *text, int k, const char *needle) {
    const char *p = text;
    for (int i = 0; i < k && p; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p)
        return 0;
    const char *e = strchr(p, '\n');
    size_t      n = e ? (size_t)(e - p) : strlen(p);
    char       *l = strndup(p, n);
    int         r = l && strstr(l, needle) != NULL;
    free(l);
    return r;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/k3-conv-edit.%d", (int)getpid());
    char cmd[700], path[512], path2[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd) != 0)
        return 1;
    k3_conv *c = k3_conv_new();
    k3_conv_set_system(c, "sys");
    k3_conv_add(c, K3_ROLE_USER, "u1", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "a1", "r1");
    k3_conv_add(c, K3_ROLE_USER, "u2 old", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "a2 old", NULL);
    T_CHECK(k3_conv_edit_last(c) == 2, "/edit moves the last exchange (2 messages)");
    T_CHECK(k3_conv_count(c) == 3, "the history ends before it (%d messages)", k3_conv_count(c));
    int           at = -1, br = -1;
    const k3_msg *m = k3_conv_abandoned(c, 0, &at, &br);
    T_CHECK(k3_conv_abandoned_count(c) == 2 && m && !strcmp(m->content, "u2 old") && at == 3 && br == 1,
            "kept as branch 1 at message 3");
    k3_conv_add(c, K3_ROLE_USER, "u2 new", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "a2 new", NULL);
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    T_CHECK(k3_conv_save(c, path) == K3_OK, "save");
    char *t = t_read_file(path, NULL);
    T_CHECK(t && line_has(t, 4, "\"u2 old\"") && line_has(t, 4, "\"abandoned\":1") &&
                line_has(t, 5, "\"a2 old\"") && line_has(t, 5, "\"abandoned\":1") &&
                line_has(t, 6, "\"u2 new\"") && !line_has(t, 6, "abandoned") && line_has(t, 7, "\"a2 new\""),
            "the transcript holds both branches, the old one marked, before the new one");

    k3_conv     *d = k3_conv_new();
    k3_load_info li;
    T_CHECK(k3_conv_load(d, path, &li) == K3_OK, "load: %s", k3_errmsg());
    T_CHECK(k3_conv_count(d) == 5 && k3_conv_abandoned_count(d) == 2, "loaded: 5 active, 2 abandoned");
    m = k3_conv_abandoned(d, 1, &at, &br);
    T_CHECK(m && !strcmp(m->content, "a2 old") && at == 3 && br == 1,
            "branch point and number survive a load");
    snprintf(path2, sizeof path2, "%s/t2.jsonl", dir);
    k3_conv_save(d, path2);
    char *t2 = t_read_file(path2, NULL);
    /* the header has the time of writing: compare the messages */
    T_CHECK(t && t2 && strchr(t, '\n') && strchr(t2, '\n') && !strcmp(strchr(t, '\n'), strchr(t2, '\n')),
            "save, load, save: the same message lines, byte for byte");
    free(t2);

    /* a second edit at an earlier point, after an undo */
    k3_conv_undo(d);
    T_CHECK(k3_conv_edit_last(d) == 2 && k3_conv_count(d) == 1, "edit of the first exchange");
    m = k3_conv_abandoned(d, 2, &at, &br);
    T_CHECK(m && !strcmp(m->content, "u1") && at == 1 && br == 2, "branch 2 at message 1");
    k3_conv_add(d, K3_ROLE_USER, "u1 new", NULL);
    k3_conv_save(d, path2);
    t2 = t_read_file(path2, NULL);
    T_CHECK(t2 && line_has(t2, 2, "\"abandoned\":2") && line_has(t2, 4, "\"u1 new\"") &&
                line_has(t2, 5, "\"abandoned\":1"),
            "branches in order of their branch points; one past the end goes last");
    free(t2);
    /* dropping the oldest exchange moves branch points back */
    k3_conv_add(d, K3_ROLE_ASSISTANT, "a1 new", NULL);
    k3_conv_add(d, K3_ROLE_USER, "u3", NULL);
    k3_conv_edit_last(d);
    int before = -1;
    k3_conv_abandoned(d, k3_conv_abandoned_count(d) - 1, &before, NULL);
    k3_conv_drop_oldest(d);
    k3_conv_abandoned(d, k3_conv_abandoned_count(d) - 1, &at, NULL);
    T_CHECK(before == 3 && at == 1, "/forget shifts a later branch point (3 -> %d)", at);
    k3_conv_clear(d);
    T_CHECK(k3_conv_abandoned_count(d) == 0, "/clear drops the branches with the conversation");

    /* autosave: an edit rewrites the file so the branch is in it */
    k3_conv *a = k3_conv_new();
    char     ad[300];
    snprintf(ad, sizeof ad, "%s/auto", dir);
    k3_conv_autosave_enable(a, ad);
    k3_conv_add(a, K3_ROLE_USER, "q old", NULL);
    k3_conv_add(a, K3_ROLE_ASSISTANT, "ans old", NULL);
    T_CHECK(k3_conv_autosave(a) == K3_OK && k3_conv_autosave_path(a), "autosave");
    k3_conv_edit_last(a);
    k3_conv_add(a, K3_ROLE_USER, "q new", NULL);
    k3_conv_add(a, K3_ROLE_ASSISTANT, "ans new", NULL);
    T_CHECK(k3_conv_autosave(a) == K3_OK, "autosave after the edit");
    char *at3 = t_read_file(k3_conv_autosave_path(a), NULL);
    T_CHECK(at3 && line_has(at3, 1, "q old") && line_has(at3, 1, "abandoned") && line_has(at3, 3, "q new") &&
                !line_has(at3, 3, "abandoned"),
            "the autosave file holds both branches");
    free(at3);

    /* bad marker */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    FILE *f = fopen(bad, "w");
    fprintf(f, "{\"role\":\"user\",\"content\":\"x\"}\n{\"role\":\"assistant\",\"content\":\"y\","
               "\"abandoned\":\"yes\"}\n");
    fclose(f);
    int n0 = k3_conv_count(c);
    T_CHECK(k3_conv_load(c, bad, NULL) != K3_OK && strstr(k3_errmsg(), ":2:") &&
                strstr(k3_errmsg(), "abandoned"),
            "a bad \"abandoned\" names the line and the field: %s", k3_errmsg());
    T_CHECK(k3_conv_count(c) == n0 && k3_conv_abandoned_count(c) == 2, "and memory is untouched");
    /* a directory: the reason and what to give instead, not a bare "read failed" (then only
     * "Is a directory (errno 21)") */
    T_CHECK(k3_conv_load(c, dir, NULL) == K3_ERR_IO && strstr(k3_errmsg(), dir) &&
                strstr(k3_errmsg(), "is a directory, not a transcript") && strstr(k3_errmsg(), "/NAME.jsonl"),
            "loading a directory says it is one and what to name: %s", k3_errmsg());
    T_CHECK(k3_conv_count(c) == n0, "and memory is untouched");

    /* /retry keeps the answer it replaces as an abandoned branch at its place, not the question */
    k3_conv *r = k3_conv_new();
    k3_conv_add(r, K3_ROLE_USER, "q", NULL);
    T_CHECK(k3_conv_retry_last(r) == 0 && k3_conv_abandoned_count(r) == 0,
            "/retry without an answer moves nothing");
    k3_conv_add(r, K3_ROLE_ASSISTANT, "answer one", NULL);
    T_CHECK(k3_conv_retry_last(r) == 1 && k3_conv_count(r) == 1,
            "/retry takes the answer out of the history");
    m = k3_conv_abandoned(r, 0, &at, &br);
    T_CHECK(k3_conv_abandoned_count(r) == 1 && m && !strcmp(m->content, "answer one") && at == 1 && br == 1,
            "... and keeps it as branch 1 at message 1");
    k3_conv_add(r, K3_ROLE_ASSISTANT, "answer two", NULL);
    snprintf(path2, sizeof path2, "%s/r.jsonl", dir);
    k3_conv_save(r, path2);
    char *tr = t_read_file(path2, NULL);
    T_CHECK(tr && line_has(tr, 1, "\"q\"") && line_has(tr, 2, "\"answer one\"") &&
                line_has(tr, 2, "\"abandoned\":1") && line_has(tr, 3, "\"answer two\"") &&
                !line_has(tr, 3, "abandoned"),
            "the transcript keeps both answers, the first marked abandoned");
    free(tr);
    k3_conv_free(r);

    /* a /system set mid-conversation: the transcript says after how many messages ("since"),
     * the export puts it there, a load keeps it, dropping earlier exchanges moves it */
    k3_conv *y = k3_conv_new();
    k3_conv_add(y, K3_ROLE_USER, "q1", NULL);
    k3_conv_add(y, K3_ROLE_ASSISTANT, "a1", NULL);
    k3_conv_set_system(y, "be terse");
    k3_conv_add(y, K3_ROLE_USER, "q2", NULL);
    k3_conv_add(y, K3_ROLE_ASSISTANT, "a2", NULL);
    snprintf(path2, sizeof path2, "%s/sys.jsonl", dir);
    T_CHECK(k3_conv_save(y, path2) == K3_OK, "save with a late system prompt");
    char *ts = t_read_file(path2, NULL);
    T_CHECK(ts && line_has(ts, 1, "\"be terse\"") && line_has(ts, 1, "\"since\":2"),
            "the system line says it came after 2 messages");
    free(ts);
    k3_conv *y2 = k3_conv_new();
    T_CHECK(k3_conv_load(y2, path2, NULL) == K3_OK, "load: %s", k3_errmsg());
    snprintf(path, sizeof path, "%s/sys2.jsonl", dir);
    k3_conv_save(y2, path);
    ts = t_read_file(path, NULL);
    T_CHECK(ts && line_has(ts, 1, "\"since\":2"), "a load keeps it");
    free(ts);
    snprintf(path, sizeof path, "%s/sys.md", dir);
    T_CHECK(k3_conv_export_md(y2, path) == K3_OK, "export");
    ts              = t_read_file(path, NULL);
    const char *ps  = ts ? strstr(ts, "## System (set here") : NULL;
    const char *pa1 = ts ? strstr(ts, "a1") : NULL;
    const char *pq2 = ts ? strstr(ts, "q2") : NULL;
    T_CHECK(ps && pa1 && pq2 && pa1 < ps && ps < pq2, "the export shows the system prompt between a1 and q2");
    free(ts);
    T_CHECK(k3_conv_drop_oldest(y2) == 2, "drop the oldest exchange");
    k3_conv_save(y2, path2);
    ts = t_read_file(path2, NULL);
    T_CHECK(ts && line_has(ts, 1, "\"be terse\"") && !line_has(ts, 1, "since"),
            "with the exchanges before it gone, it applies from the start");
    free(ts);
    k3_conv_set_system(y2, "be kind");
    k3_conv_save(y2, path2);
    ts = t_read_file(path2, NULL);
    T_CHECK(ts && line_has(ts, 1, "\"since\":2"),
            "a new system prompt mid-chat: since the 2 messages so far");
    free(ts);
    FILE *fb = fopen(path2, "w");
    fputs("{\"role\":\"user\",\"content\":\"x\",\"since\":1}\n", fb);
    fclose(fb);
    T_CHECK(k3_conv_load(y2, path2, NULL) != K3_OK && strstr(k3_errmsg(), ":1:") &&
                strstr(k3_errmsg(), "since"),
            "\"since\" on a user message is an error naming the line: %s", k3_errmsg());
    k3_conv_free(y);
    k3_conv_free(y2);

    /* a regeneration that fails before its turn begins is taken back (k3_conv_restore_branch): the
     * /retry's answer, or the /edit's exchange, is active again as it was, the branch gone, the
     * system prompt's "since" as before, and the autosave file says so (no "abandoned" line) */
    k3_conv *b = k3_conv_new();
    snprintf(path, sizeof path, "%s/auto-b", dir);
    k3_conv_autosave_enable(b, path);
    k3_conv_add(b, K3_ROLE_USER, "q1", NULL);
    k3_conv_add(b, K3_ROLE_ASSISTANT, "a1", "r1");
    k3_conv_set_system(b, "late");
    T_CHECK(k3_conv_autosave(b) == K3_OK && k3_conv_restore_branch(b) == 0,
            "nothing abandoned: nothing to restore");
    T_CHECK(k3_conv_retry_last(b) == 1 && b->sys_since == 1, "/retry: the answer leaves (since 2 -> %d)",
            b->sys_since);
    char *tb = k3_conv_autosave(b) == K3_OK ? t_read_file(k3_conv_autosave_path(b), NULL) : NULL;
    T_CHECK(tb && strstr(tb, "\"abandoned\":1"), "the autosave file holds it as abandoned");
    free(tb);
    T_CHECK(k3_conv_restore_branch(b) == 1 && k3_conv_count(b) == 3 && k3_conv_abandoned_count(b) == 0 &&
                !strcmp(k3_conv_msg(b, 2)->content, "a1") && !strcmp(k3_conv_msg(b, 2)->reasoning, "r1") &&
                b->sys_since == 2 && b->n_branches == 0,
            "restored: the answer is back in place, no branch, since 2 again (%d messages, %d abandoned, "
            "since %d)",
            k3_conv_count(b), k3_conv_abandoned_count(b), b->sys_since);
    T_CHECK(k3_conv_autosave(b) == K3_OK, "autosave after the restore");
    tb = t_read_file(k3_conv_autosave_path(b), NULL);
    T_CHECK(tb && line_has(tb, 1, "\"late\"") && line_has(tb, 1, "\"since\":2") &&
                line_has(tb, 2, "\"q1\"") && line_has(tb, 3, "\"a1\"") && !strstr(tb, "abandoned"),
            "the autosave file holds the exchange as before, nothing abandoned");
    free(tb);
    k3_conv_add(b, K3_ROLE_USER, "q2", NULL);
    k3_conv_add(b, K3_ROLE_ASSISTANT, "a2", NULL);
    T_CHECK(k3_conv_edit_last(b) == 2 && k3_conv_add(b, K3_ROLE_USER, "q2 edited", NULL) == K3_OK &&
                k3_conv_restore_branch(b) == 0,
            "an /edit's branch is not restored while its new message stands");
    T_CHECK(k3_conv_undo(b) == 1 && k3_conv_restore_branch(b) == 2 && k3_conv_count(b) == 5 &&
                !strcmp(k3_conv_msg(b, 3)->content, "q2") && !strcmp(k3_conv_msg(b, 4)->content, "a2") &&
                k3_conv_abandoned_count(b) == 0,
            "the edited message undone: the old exchange is back (%d messages)", k3_conv_count(b));
    T_CHECK(k3_conv_retry_last(b) == 1 && k3_conv_add(b, K3_ROLE_ASSISTANT, "a2 new", NULL) == K3_OK &&
                k3_conv_restore_branch(b) == 0 && k3_conv_abandoned_count(b) == 1,
            "a /retry that got its answer keeps the old one abandoned");
    k3_conv_free(b);

    free(t);
    k3_conv_free(a);
    k3_conv_free(c);
    k3_conv_free(d);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return t_done();
}
