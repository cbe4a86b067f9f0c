/* test-conv-memo.c: the rendering kept between turns (conv-gen.c) on k3-nano. After every kind of
 * change a chat makes (greedy turns whose replies render from their ids, /undo, /retry, /edit and
 * its branch restored, /forget, /forget --fit, a system prompt set, changed and removed, think
 * and effort changed, tool declarations, calls and a run of results that grows, /clear, /load),
 * the kept rendering's ids equal a rendering from scratch (conv_render_prompt; k3_conv_render's
 * when no reply has ids), and k3_conv_context counts them: a part kept past the change it
 * depended on would show here as a differing id. */
#include "conv-impl.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static k3_model     *m;
static const k3_tok *tok;
static int           step;

/* The kept rendering of c equals one from scratch, and the context figure counts it. */
static int same_render(k3_conv *c, const char *what) {
    k3_ids a = {0}, b = {0}, r = {0};
    int    n = -1, used = -1, cap = 0, any = 0;
    K3_ASSERT(conv_get_tok(c, m, &tok) == K3_OK);
    k3_status sa = conv_render_kept(c, tok, &a, &n), sb = conv_render_prompt(c, tok, 1, &b);
    k3_status sc = k3_conv_context(c, m, &used, &cap);
    for (int i = 0; i < k3_conv_count(c); i++)
        any |= k3_conv_msg(c, i)->n_ids > 0;
    if (!any) /* then the scratch rendering is the encoder's in one piece */
        K3_ASSERT(k3_conv_render(c, tok, 1, &r) == K3_OK);
    size_t d = 0;
    while (d < a.n && d < b.n && a.v[d] == b.v[d])
        d++;
    int ok = !sa && !sb && !sc && a.n == b.n && d == a.n && n == (int)a.n && used == n &&
             (any || (r.n == b.n && !memcmp(r.v, b.v, r.n * sizeof *r.v)));
    T_CHECK(ok,
            "step %d, %s: kept rendering %zu ids, from scratch %zu (first difference at %zu), counted %d, "
            "context %d",
            ++step, what, a.n, b.n, d, n, used);
    k3_ids_free(&a);
    k3_ids_free(&b);
    k3_ids_free(&r);
    return ok;
}

static void ask(k3_conv *c, k3_session *s, const char *q) {
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, q, NULL) == K3_OK);
    same_render(c, q);
    T_CHECK(k3_conv_generate(c, m, s, NULL) == K3_OK, "a turn on '%s' (%s)", q, k3_errmsg());
    same_render(c, "after the reply");
}

/* The fit test's conversation without its first `drop` exchanges: a system prompt; a reply that
 * calls `add` ten times and nine results; a user message answered by the tenth result alone (no
 * reply between: the encoder names it, orders and numbers it from the first exchange's calls,
 * index 10, the call's name, or from its own name, index 1, once that exchange is gone); a last
 * exchange. name10: the tenth result's own name (NULL: none, it has only its call id). */
static void fit_conv(k3_conv *c, int drop, const char *name10) {
    static char  ids[10][16], args[10][48], res[10][16];
    k3_tool_call calls[10];
    for (int k = 0; k < 10; k++) {
        snprintf(ids[k], sizeof ids[k], "c%d", k + 1);
        snprintf(args[k], sizeof args[k], "{\"a\": %d, \"b\": 1}", k);
        snprintf(res[k], sizeof res[k], "%d", k + 1);
        calls[k] = (k3_tool_call){.id = ids[k], .name = "add", .arguments = args[k]};
    }
    K3_ASSERT(k3_conv_set_system(c, "You add numbers.") == K3_OK);
    if (drop < 1) {
        K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "Add each number to one.", NULL) == K3_OK);
        k3_msg am       = {.role = K3_ROLE_ASSISTANT, .content = (char *)(uintptr_t) "", .tool_calls = calls};
        am.n_tool_calls = 10;
        K3_ASSERT(!k3_conv_add_msg(c, &am));
        for (int k = 0; k < 9; k++) {
            k3_msg r = {.role = K3_ROLE_TOOL, .content = res[k], .tool_call_id = ids[k], .tool_name = "add"};
            K3_ASSERT(!k3_conv_add_msg(c, &r));
        }
    }
    if (drop < 2) {
        K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "And the last one?", NULL) == K3_OK);
        k3_msg r = {.role         = K3_ROLE_TOOL,
                    .content      = res[9],
                    .tool_call_id = ids[9],
                    .tool_name    = (char *)(uintptr_t)name10};
        K3_ASSERT(!k3_conv_add_msg(c, &r));
    }
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "Thanks.", NULL) == K3_OK);
    K3_ASSERT(k3_conv_add(c, K3_ROLE_ASSISTANT, "You are welcome.", NULL) == K3_OK);
}

/* /forget --fit on fit_conv at every room from "fits" to "only the last exchange fits": the fewest
 * exchanges dropped whose prompt leaves the room, the figure it reports that prompt's. */
static void fit_exact(const char *name10, const char *what) {
    int need[4], cap = 0, bad = 0;
    for (int d = 0; d < 3; d++) {
        k3_conv *v = k3_conv_new();
        K3_ASSERT(v);
        fit_conv(v, d, name10);
        need[d] = -1;
        if (k3_conv_context(v, m, &need[d], &cap) != K3_OK)
            need[d] = cap + 1; /* it cannot be rendered: never a fit */
        k3_conv_free(v);
    }
    k3_conv *c = k3_conv_new();
    K3_ASSERT(c);
    fit_conv(c, 0, name10);
    int lo = cap - need[0] + 1, hi = cap - need[2], n = 0;
    for (int room = lo; room <= hi; room++, n++) {
        k3_fit_info fi;
        if (k3_conv_fit(c, m, room, 0, &fi) != K3_OK) {
            T_CHECK(0, "%s: /forget --fit leaving %d tokens: %s", what, room, k3_errmsg());
            bad++;
            break;
        }
        int d = fi.drop;
        int ok =
            d >= 1 && d <= 2 && need[d] + room <= cap && need[d - 1] + room > cap && fi.used_after == need[d];
        if (!ok && bad++ < 3)
            T_CHECK(0,
                    "%s: leaving %d tokens it drops %d exchange(s) and reports %d tokens; without 0, 1, 2 "
                    "the prompt takes %d, %d, %d of %d",
                    what, room, d, fi.used_after, need[0], need[1], need[2], cap);
    }
    T_CHECK(!bad && n > 0 && need[2] < need[0],
            "%s: /forget --fit drops the fewest exchanges that leave the room "
            "and reports the prompt it leaves, at each of %d rooms (%d, %d, %d tokens without 0, 1, 2)",
            what, n, need[0], need[1], need[2]);
    k3_conv_free(c);
}

int main(void) {
    k3_params p;
    K3_ASSERT(k3_params_default(&p) == K3_OK);
    p.max_ctx = 4096;
    p.threads = 1;
    K3_ASSERT(k3_model_open("models/k3-nano", &p, &m) == K3_OK);
    k3_session      *s;
    k3_conv         *c = k3_conv_new();
    k3_conv_settings set;
    K3_ASSERT(c && k3_session_new(m, &s) == K3_OK);
    k3_conv_get_settings(c, &set);
    set.think         = 1;
    set.sampling.temp = 0;
    set.max_tokens    = 24;
    K3_ASSERT(k3_conv_set_settings(c, &set) == K3_OK);

    same_render(c, "empty");
    ask(c, s, "What is 2 + 3?");
    ask(c, s, "hi");
    ask(c, s, "Reverse the word apple.");
    T_CHECK(k3_conv_msg(c, 1)->n_ids > 0, "the replies carry their ids (rendered as generated)");

    K3_ASSERT(k3_conv_undo(c) == 2);
    same_render(c, "/undo");
    K3_ASSERT(k3_conv_retry_last(c) > 0);
    same_render(c, "/retry took the answer back");
    T_CHECK(k3_conv_generate(c, m, s, NULL) == K3_OK, "the retried turn");
    same_render(c, "/retry answered");
    K3_ASSERT(k3_conv_edit_last(c) > 0);
    same_render(c, "/edit took the exchange back");
    K3_ASSERT(k3_conv_restore_branch(c) > 0);
    same_render(c, "its branch restored");

    K3_ASSERT(k3_conv_set_system(c, "You are terse.") == K3_OK);
    same_render(c, "a system prompt set before the history");
    K3_ASSERT(k3_conv_set_system(c, "You are kind.") == K3_OK);
    same_render(c, "the system prompt changed");
    ask(c, s, "Sort 5 3 9 1.");
    K3_ASSERT(k3_conv_set_system(c, NULL) == K3_OK);
    same_render(c, "the system prompt removed");

    set.think = 0;
    K3_ASSERT(k3_conv_set_settings(c, &set) == K3_OK);
    same_render(c, "think off");
    ask(c, s, "What is 12 - 7?");
    set.think = 1;
    snprintf(set.effort, sizeof set.effort, "low");
    K3_ASSERT(k3_conv_set_settings(c, &set) == K3_OK);
    same_render(c, "think on, effort low");

    K3_ASSERT(k3_conv_drop_oldest(c) > 0);
    same_render(c, "/forget");

    /* tools: declared, a reply that calls two, a run of results that grows */
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\"}}}]";
    K3_ASSERT(k3_conv_set_tools(c, tools) == K3_OK);
    same_render(c, "tools declared");
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "Add 2 and 3, then 4 and 5.", NULL) == K3_OK);
    k3_tool_call calls[] = {{.id = "c1", .name = "add", .arguments = "{\"a\": 2, \"b\": 3}"},
                            {.id = "c2", .name = "add", .arguments = "{\"a\": 4, \"b\": 5}"}};
    k3_msg       am = {.role = K3_ROLE_ASSISTANT, .content = (char *)(uintptr_t) "", .tool_calls = calls};
    am.n_tool_calls = 2;
    k3_msg r1 = {.role = K3_ROLE_TOOL}, r2 = {.role = K3_ROLE_TOOL};
    r1.content = (char *)(uintptr_t) "5", r1.tool_call_id = (char *)(uintptr_t) "c1";
    r2.content = (char *)(uintptr_t) "9", r2.tool_call_id = (char *)(uintptr_t) "c2";
    K3_ASSERT(!k3_conv_add_msg(c, &am));
    same_render(c, "a reply with two calls");
    K3_ASSERT(!k3_conv_add_msg(c, &r1));
    same_render(c, "the first result");
    K3_ASSERT(!k3_conv_add_msg(c, &r2));
    same_render(c, "the run of results grown by the second");
    T_CHECK(k3_conv_generate(c, m, s, NULL) == K3_OK, "a turn after the results (%s)", k3_errmsg());
    same_render(c, "the answer to the results");
    /* /forget --fit measures the prompt the next turn sends: the declarations in it */
    k3_fit_info fi;
    int         used, cap;
    K3_ASSERT(k3_conv_context(c, m, &used, &cap) == K3_OK && k3_conv_fit(c, m, 0, 0, &fi) == K3_OK);
    T_CHECK(fi.used == used && fi.used_after == used && fi.drop == 0,
            "with tools declared the fit counts what the context figure counts (%d, %d tokens; %d)", fi.used,
            used, fi.used_after);
    K3_ASSERT(k3_conv_fit(c, m, cap - used + 1, 1, &fi) == K3_OK);
    int after = -1;
    K3_ASSERT(k3_conv_context(c, m, &after, &cap) == K3_OK);
    T_CHECK(fi.drop == 1 && fi.used_after == after,
            "... and after it dropped %d exchanges, the figure it promised (%d) is the context's (%d)",
            fi.drop, fi.used_after, after);
    same_render(c, "/forget --fit with tools declared");
    K3_ASSERT(k3_conv_set_tools(c, NULL) == K3_OK);
    same_render(c, "tools removed");
    ask(c, s, "What is 2 + 3?");
    ask(c, s, "hi");

    K3_ASSERT(k3_conv_context(c, m, &used, &cap) == K3_OK);
    K3_ASSERT(k3_conv_fit(c, m, cap - used + 1, 1, &fi) == K3_OK); /* room for all but a token */
    K3_ASSERT(k3_conv_context(c, m, &after, &cap) == K3_OK);
    T_CHECK(fi.drop == 1 && fi.drop < fi.n_exchanges && fi.used_after == after,
            "/forget --fit dropped %d of %d exchanges, the figure it promised (%d) the context's (%d)",
            fi.drop, fi.n_exchanges, fi.used_after, after);
    same_render(c, "/forget --fit");

    fit_exact("add_one_to_the_number_given_and_return_the_sum_as_a_string",
              "a result named longer than its call");
    fit_exact("a", "a result named shorter than its call");
    fit_exact(NULL, "a result with only its call id");

    char path[600];
    snprintf(path, sizeof path, "%s/memo.jsonl", t_tmp());
    K3_ASSERT(k3_conv_save(c, path) == K3_OK);
    ask(c, s, "hi");
    k3_load_info li;
    K3_ASSERT(k3_conv_load(c, path, &li) == K3_OK);
    same_render(c, "/load of the file saved a turn before");
    k3_conv_clear(c);
    same_render(c, "/clear");
    ask(c, s, "Count the letters in banana.");

    k3_conv_free(c);
    k3_session_free(s);
    k3_model_free(m);
    return t_done();
}
