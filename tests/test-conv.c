/* test-conv.c: the conversation model and its transcripts (no model needed):
 * edits, transcript round trip (save, load, continue), malformed files with line numbers
 * and memory untouched, a torn final line, save/autosave failures that keep memory,
 * Markdown export, and crash safety: a child autosaving turn after turn is killed with
 * SIGKILL at random moments; every file it leaves parses and holds every completed turn.
 * Generation and the prompt cache are tested in test-conv-gen.c (they need a model). */
#include "conv-impl.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[512];

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(text, 1, n, f);
    fclose(f);
}

static int msg_eq(const k3_msg *a, const k3_msg *b) {
    if (a->role != b->role || strcmp(a->content, b->content) || !a->reasoning != !b->reasoning ||
        (a->reasoning && strcmp(a->reasoning, b->reasoning)) || a->interrupted != b->interrupted ||
        a->has_stats != b->has_stats || a->n_ids != b->n_ids)
        return 0;
    if (a->n_ids && memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof *a->ids))
        return 0;
    if (a->has_stats) {
        const k3_turn_stats *x = &a->stats, *y = &b->stats;
        if (x->n_prompt != y->n_prompt || x->n_cached != y->n_cached || x->n_prefill != y->n_prefill ||
            x->n_gen != y->n_gen || x->n_think != y->n_think || x->sampling.seed != y->sampling.seed ||
            x->has_sampling != y->has_sampling || x->sampling.temp != y->sampling.temp ||
            x->sampling.top_p != y->sampling.top_p || x->think != y->think || x->stop != y->stop ||
            fabs(x->tok_s - y->tok_s) > 1e-6 * (1 + fabs(x->tok_s)) || fabs(x->ttft - y->ttft) > 1e-6)
            return 0;
    }
    return 1;
}

static int conv_eq(const k3_conv *a, const k3_conv *b) {
    if (k3_conv_count(a) != k3_conv_count(b))
        return 0;
    for (int i = 0; i < k3_conv_count(a); i++)
        if (!msg_eq(k3_conv_msg(a, i), k3_conv_msg(b, i)))
            return 0;
    return 1;
}

/* a's messages are the first messages of b (a SIGKILL can stop a large append part way:
 * the reader then drops the torn line, leaving a prefix of the turn being written). */
static int prefix_of(const k3_conv *a, const k3_conv *b) {
    if (k3_conv_count(a) > k3_conv_count(b))
        return 0;
    for (int i = 0; i < k3_conv_count(a); i++)
        if (!msg_eq(k3_conv_msg(a, i), k3_conv_msg(b, i)))
            return 0;
    return 1;
}

/* Adds a finished assistant turn with stats and ids (as k3_conv_generate would). */
static void add_reply(k3_conv *c, const char *content, const char *reasoning, int interrupted, int n_ids) {
    k3_msg  m = {.role        = K3_ROLE_ASSISTANT,
                 .content     = (char *)(uintptr_t)content,
                 .reasoning   = (char *)(uintptr_t)reasoning,
                 .interrupted = interrupted,
                 .has_stats   = 1};
    int32_t ids[64];
    for (int i = 0; i < n_ids && i < 64; i++)
        ids[i] = 163584 + i * 7;
    m.ids   = n_ids ? ids : NULL;
    m.n_ids = n_ids;
    m.stats = (k3_turn_stats){.n_prompt     = 40,
                              .n_cached     = 12,
                              .n_prefill    = 28,
                              .n_gen        = n_ids,
                              .n_think      = 3,
                              .t_prefill    = 0.25,
                              .t_gen        = 1.5,
                              .ttft         = 0.3,
                              .t_think      = 0.7,
                              .tok_s        = 12.5,
                              .sampling     = {.temp = 0.7f, .top_p = 0.9f, .seed = 42},
                              .has_sampling = 1,
                              .think        = 1,
                              .stop         = interrupted ? K3_STOP_CANCEL : K3_STOP_EOS};
    K3_ASSERT(conv_push(c, &m) == K3_OK);
}

static void test_edits(void) {
    k3_conv *c = k3_conv_new();
    T_CHECK(k3_conv_set_system(c, "be brief") == K3_OK && k3_conv_count(c) == 1,
            "system prompt is message 0");
    k3_conv_add(c, K3_ROLE_USER, "a", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "A", "thought a");
    k3_conv_add(c, K3_ROLE_USER, "b", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "B", NULL);
    T_CHECK(k3_conv_count(c) == 5, "five messages");
    T_CHECK(k3_conv_pop_reply(c) == 1 && k3_conv_msg(c, k3_conv_count(c) - 1)->role == K3_ROLE_USER,
            "pop_reply removes the last reply (retry)");
    T_CHECK(k3_conv_pop_reply(c) == 0, "pop_reply on a history ending with a user message removes nothing");
    T_CHECK(k3_conv_undo(c) == 1 && k3_conv_count(c) == 3, "undo removes the last user message");
    k3_conv_add(c, K3_ROLE_USER, "c", NULL);
    k3_conv_add(c, K3_ROLE_ASSISTANT, "C", NULL);
    T_CHECK(k3_conv_drop_oldest(c) == 2 && k3_conv_count(c) == 3 && !strcmp(k3_conv_msg(c, 1)->content, "c"),
            "drop_oldest removes the first exchange, keeps the system prompt");
    T_CHECK(k3_conv_set_system(c, "be verbose") == K3_OK && !strcmp(k3_conv_system(c), "be verbose") &&
                k3_conv_count(c) == 3,
            "system prompt replaced in place");
    k3_conv_clear(c);
    T_CHECK(k3_conv_count(c) == 1 && k3_conv_system(c), "clear keeps the system prompt");
    T_CHECK(k3_conv_set_system(c, NULL) == K3_OK && k3_conv_count(c) == 0 && !k3_conv_system(c),
            "system prompt removed");
    T_CHECK(k3_conv_add(c, (k3_role)7, "x", NULL) == K3_ERR_ARG, "unknown role rejected");
    k3_conv_settings s;
    k3_conv_get_settings(c, &s);
    T_CHECK(s.think == 1 && !strcmp(s.effort, "max"), "defaults: think on, effort max");
    strcpy(s.effort, "medium");
    T_CHECK(k3_conv_set_settings(c, &s) == K3_ERR_ARG && strstr(k3_errmsg(), "medium"),
            "effort medium rejected (%s)", k3_errmsg());
    k3_conv_free(c);
}

static k3_conv *sample_conv(void) {
    k3_conv         *c = k3_conv_new();
    k3_conv_settings s;
    k3_conv_settings_default(&s);
    s.think = 0;
    strcpy(s.effort, "low");
    s.sampling.temp  = 0.3f;
    s.sampling.top_p = 0.9f;
    s.sampling.top_k = 40;
    s.sampling.seed  = UINT64_MAX;
    s.max_tokens     = 77;
    K3_ASSERT(k3_conv_set_settings(c, &s) == K3_OK);
    k3_conv_set_system(c, "You are \"K3\".\nBe kind & brief.");
    k3_conv_add(c, K3_ROLE_USER, "Héllo 世界 🎉 <|open|>message role=\"x\"<|sep|>\n\ttab", NULL);
    add_reply(c, "Answer with\nnewlines and \\ backslash", "Let me think… 思考", 0, 9);
    k3_conv_add(c, K3_ROLE_USER, "second", NULL);
    add_reply(c, "partial ans", "half a thou", 1, 3);
    return c;
}

#define HDR "{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"think\":true}}\n"

static void test_round_trip(void) {
    char p1[600], p2[600];
    path_in(p1, sizeof p1, "rt.jsonl");
    path_in(p2, sizeof p2, "rt2.jsonl");
    k3_conv *a = sample_conv(), *b = k3_conv_new();
    T_CHECK(k3_conv_save(a, p1) == K3_OK, "save (%s)", k3_errmsg());
    k3_load_info info;
    T_CHECK(k3_conv_load(b, p1, &info) == K3_OK, "load (%s)", k3_errmsg());
    T_CHECK(conv_eq(a, b) && info.n_messages == 5 && info.torn_line == 0,
            "loaded messages equal the saved ones (roles, text, reasoning, interrupted, ids, stats)");
    k3_conv_settings sa, sb;
    k3_conv_get_settings(a, &sa);
    k3_conv_get_settings(b, &sb);
    T_CHECK(sb.think == 0 && !strcmp(sb.effort, "low") && sb.sampling.temp == 0.3f &&
                sb.sampling.top_p == 0.9f && sb.sampling.top_k == 40 && sb.sampling.seed == UINT64_MAX &&
                sb.max_tokens == 77,
            "settings round trip (seed 2^64-1 too)");
    T_CHECK(!strcmp(info.version, k3_version()), "header records the k3chat version (%s)", info.version);
    /* continue: one more exchange, save, load again */
    k3_conv_add(b, K3_ROLE_USER, "third", NULL);
    add_reply(b, "three", NULL, 0, 0);
    T_CHECK(k3_conv_save(b, p2) == K3_OK, "save the continued conversation");
    k3_conv *c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p2, NULL) == K3_OK && k3_conv_count(c) == 7 && conv_eq(b, c),
            "continued conversation loads with all 7 messages");
    k3_conv_free(a);
    k3_conv_free(b);
    k3_conv_free(c);

    /* no header: messages from line 1 on, default settings */
    static const char bare[] =
        "{\"role\":\"user\",\"content\":\"x\"}\n{\"role\":\"assistant\",\"content\":\"y\"}\n";
    path_in(p1, sizeof p1, "bare.jsonl");
    write_file(p1, bare, sizeof bare - 1);
    c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p1, NULL) == K3_OK && k3_conv_count(c) == 2, "a file without header loads (%s)",
            k3_errmsg());
    k3_conv_free(c);

    /* other writers' spellings: a byte order mark, reasoning / thinking, content parts, null
     * content, developer */
    const char *other =
        "\xEF\xBB\xBF{\"format\":\"k3chat-transcript\",\"version\":1}\n"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"sys "
        "\"},{\"type\":\"text\",\"text\":\"two\"}]}\n"
        "{\"role\":\"user\",\"content\":\"q\"}\n\n"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning\":[{\"type\":\"text\",\"text\":\"r\"},"
        "{\"type\":\"text\",\"text\":\"1\"}]}\r\n"
        "{\"role\":\"user\",\"content\":\"q2\"}\n"
        "{\"role\":\"assistant\",\"content\":\"a2\",\"thinking\":\"r2\"}\n";
    path_in(p1, sizeof p1, "other.jsonl");
    write_file(p1, other, strlen(other));
    c            = k3_conv_new();
    k3_status st = k3_conv_load(c, p1, NULL);
    T_CHECK(st == K3_OK && k3_conv_count(c) == 5 && !strcmp(k3_conv_system(c), "sys two") &&
                !strcmp(k3_conv_msg(c, 2)->reasoning, "r1") && !strcmp(k3_conv_msg(c, 2)->content, "") &&
                !strcmp(k3_conv_msg(c, 4)->reasoning, "r2"),
            "reads a byte order mark, reasoning (as text parts), thinking, content parts, null content, "
            "developer as system, "
            "CRLF, "
            "blank lines (%s)",
            st ? k3_errmsg() : "ok");
    /* the text parts are kept (each is its own segment for the encoder) and written back */
    const k3_msg *sm = k3_conv_msg(c, 0);
    T_CHECK(!st && sm->n_parts == 2 && sm->parts[0] == 4 && sm->parts[1] == 3,
            "content parts: their lengths are kept (%d parts)", st ? -1 : sm->n_parts);
    char p3[600];
    path_in(p3, sizeof p3, "other-saved.jsonl");
    k3_conv  *c2  = k3_conv_new();
    k3_status st2 = k3_conv_save(c, p3);
    if (!st2)
        st2 = k3_conv_load(c2, p3, NULL);
    T_CHECK(!st2 && k3_conv_count(c2) == 5 && k3_conv_msg(c2, 0)->n_parts == 2 &&
                k3_conv_msg(c2, 0)->parts[0] == 4 && k3_conv_msg(c2, 0)->parts[1] == 3 &&
                !strcmp(k3_conv_msg(c2, 0)->content, "sys two") && k3_conv_msg(c2, 1)->n_parts == 0,
            "content parts: saved as parts and read back the same (%s)", st2 ? k3_errmsg() : "ok");
    /* any part but an image's renders its "text", as the release's encoder does ("input_text") */
    const char *typed = HDR "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ab\"},"
                            "{\"type\":\"text\",\"text\":\"c\"}]}\n";
    path_in(p3, sizeof p3, "typed.jsonl");
    write_file(p3, typed, strlen(typed));
    k3_conv  *c3  = k3_conv_new();
    k3_status st3 = k3_conv_load(c3, p3, NULL);
    T_CHECK(!st3 && k3_conv_count(c3) == 1 && !strcmp(k3_conv_msg(c3, 0)->content, "abc") &&
                k3_conv_msg(c3, 0)->n_parts == 2 && k3_conv_msg(c3, 0)->parts[0] == 2,
            "an input_text part is text, its own part (%s)", st3 ? k3_errmsg() : "ok");
    k3_conv_free(c3);
    /* OpenAI's refusal part of an assistant message is its "refusal" text (it was media) */
    const char *refused =
        HDR "{\"role\":\"user\",\"content\":\"x\"}\n{\"role\":\"assistant\",\"content\":["
            "{\"type\":\"text\",\"text\":\"No. \"},{\"type\":\"refusal\",\"refusal\":\"Sorry.\"}]}\n";
    path_in(p3, sizeof p3, "refused.jsonl");
    write_file(p3, refused, strlen(refused));
    c3  = k3_conv_new();
    st3 = k3_conv_load(c3, p3, NULL);
    T_CHECK(!st3 && k3_conv_count(c3) == 2 && !strcmp(k3_conv_msg(c3, 1)->content, "No. Sorry.") &&
                k3_conv_msg(c3, 1)->n_parts == 2 && k3_conv_msg(c3, 1)->parts[1] == 6,
            "a refusal part is its refusal's text, its own part (%s)", st3 ? k3_errmsg() : "ok");
    k3_conv_free(c3);
    k3_conv_set_system(c, "1234567"); /* as long as "sys two": its parts must not split it */
    T_CHECK(k3_conv_msg(c, 0)->n_parts == 0 && !k3_conv_msg(c, 0)->parts,
            "a new system prompt drops the old one's parts");
    k3_conv_free(c2);
    k3_conv_free(c);
}

/* Members this k3chat does not know (a newer k3chat's, a hand edit's), in the header, its
 * settings, a message and its stats, survive load + save and load + autosave as they
 * were; the old load dropped them, and the next save lost them for good. */
static void test_unknown_fields(void) {
    static const char text[] =
        "{\"format\":\"k3chat-transcript\",\"version\":1,\"title\":\"trip\",\"model\":{\"dir\":\"/m\","
        "\"quant\":\"q4\"},\"settings\":{\"temperature\":0.5,\"new_knob\":[1,{\"x\":null}]}}\n"
        "{\"role\":\"user\",\"content\":\"hi\",\"attachments\":[{\"file\":\"a.png\",\"bytes\":12}]}\n"
        "{\"role\":\"assistant\",\"content\":\"yo\",\"feedback\":{\"score\":-1},"
        "\"stats\":{\"completion_tokens\":2,\"energy_j\":1.5}}\n";
    static const char *const kept[] = {"\"title\":\"trip\"", "\"new_knob\":[1,{\"x\":null}]",
                                       "\"attachments\":[{\"file\":\"a.png\",\"bytes\":12}]",
                                       "\"feedback\":{\"score\":-1}", "\"energy_j\":1.5"};
    char                     p1[600], p2[600], dir[600];
    path_in(p1, sizeof p1, "unknown.jsonl");
    path_in(p2, sizeof p2, "unknown-saved.jsonl");
    path_in(dir, sizeof dir, "unknown-auto");
    write_file(p1, text, sizeof text - 1);
    k3_conv *c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p1, NULL) == K3_OK && k3_conv_count(c) == 2, "load with unknown members (%s)",
            k3_errmsg());
    T_CHECK(k3_conv_save(c, p2) == K3_OK, "save (%s)", k3_errmsg());
    T_CHECK(k3_conv_autosave_enable(c, dir) == K3_OK && k3_conv_autosave(c) == K3_OK &&
                k3_conv_autosave_path(c),
            "autosave (%s)", k3_errmsg());
    const char *files[] = {p2, k3_conv_autosave_path(c)};
    for (int f = 0; f < 2; f++) {
        char *saved = files[f] ? t_read_file(files[f], NULL) : NULL;
        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
            T_CHECK(saved && strstr(saved, kept[i]), "%s keeps %s:\n%s", f ? "autosave" : "save", kept[i],
                    saved ? saved : "(unreadable)");
        /* the stats' known members are still this version's: one completion_tokens */
        const char *ct = saved ? strstr(saved, "\"completion_tokens\"") : NULL;
        T_CHECK(ct && !strstr(ct + 1, "\"completion_tokens\""), "%s: known members written once",
                f ? "autosave" : "save");
        free(saved);
    }
    /* and again: a second load + save writes the same members */
    k3_conv *d = k3_conv_new();
    T_CHECK(k3_conv_load(d, p2, NULL) == K3_OK && conv_eq(c, d), "the saved file loads (%s)", k3_errmsg());
    T_CHECK(k3_conv_save(d, p1) == K3_OK, "save again (%s)", k3_errmsg());
    char *again = t_read_file(p1, NULL);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        T_CHECK(again && strstr(again, kept[i]), "second save keeps %s", kept[i]);
    free(again);
    /* a new conversation (/clear) starts a header of its own */
    k3_conv_clear(d);
    T_CHECK(k3_conv_save(d, p2) == K3_OK, "save after clear (%s)", k3_errmsg());
    char *cleared = t_read_file(p2, NULL);
    T_CHECK(cleared && !strstr(cleared, "trip"), "/clear drops the old header's members");
    free(cleared);
    k3_conv_free(d);
    k3_conv_free(c);
}

/* ---- every member survives a load and save ------------------------------------------------ */

/* in's value survives as out: the same JSON, but that an object may have gained members and a
 * number keeps 7 significant digits (k3chat(5): a sampling setting is single precision, as the
 * sampler uses it; other numbers are written with 9). */
static int value_survives(json_t *in, json_t *out) {
    if (json_is_number(in) && json_is_number(out)) {
        double a = json_number_value(in), b = json_number_value(out);
        return fabs(a - b) <= 1e-7 * (fabs(a) > fabs(b) ? fabs(a) : fabs(b));
    }
    if (json_is_object(in) && json_is_object(out)) {
        const char *k;
        json_t     *v;
        json_object_foreach(in, k, v) {
            json_t *w = json_object_get(out, k);
            if (!w || !value_survives(v, w))
                return 0;
        }
        return 1;
    }
    if (json_is_array(in) && json_is_array(out) && json_array_size(in) == json_array_size(out)) {
        for (size_t i = 0; i < json_array_size(in); i++)
            if (!value_survives(json_array_get(in, i), json_array_get(out, i)))
                return 0;
        return 1;
    }
    return json_equal(in, out);
}

/* The rewrites k3chat(5) documents: the header's "model" object and the members that go with it
 * (the model loaded when the file is written), its "created" and "k3chat" (when and by what),
 * "developer" written as "system", a null content as "", "abandoned": true as 1, and reasoning
 * read from "reasoning" or "thinking" written as "reasoning_content". Where the reasoning
 * was read from, the test's own files hold a string (the same text) or parts (their text). */
static int documented_rewrite(int header, const char *key, json_t *in, json_t *line) {
    static const char *const hdr[] = {"model", "created", "k3chat"};
    for (size_t i = 0; header && i < sizeof hdr / sizeof hdr[0]; i++)
        if (!strcmp(key, hdr[i]))
            return 1;
    if (header && !strcmp(key, "settings")) { /* bits, mla_bits, head_bits: the model's */
        json_t *x = json_deep_copy(in), *o = json_object_get(line, "settings");
        json_object_del(x, "bits");
        json_object_del(x, "mla_bits");
        json_object_del(x, "head_bits");
        int ok = value_survives(x, o);
        json_decref(x);
        return ok;
    }
    const char *s   = json_string_value(in);
    json_t     *out = json_object_get(line, key);
    if (!strcmp(key, "role"))
        return s && !strcmp(s, "developer") && !strcmp(json_string_value(out), "system");
    if (!strcmp(key, "content"))
        return json_is_null(in) && !strcmp(json_string_value(out), "");
    if (!strcmp(key, "abandoned"))
        return json_is_true(in) && json_integer_value(out) == 1;
    if (!strcmp(key, "reasoning") || !strcmp(key, "thinking")) {
        const char *r = json_string_value(json_object_get(line, "reasoning_content"));
        if (s)
            return r && !strcmp(r, s);
        size_t  k, at = 0;
        json_t *part;
        json_array_foreach(in, k, part) {
            const char *t = json_string_value(json_object_get(part, "text"));
            if (!r || !t || strncmp(r + at, t, strlen(t)))
                return 0;
            at += strlen(t);
        }
        return r && !r[at];
    }
    return 0;
}

/* Loads text, saves it and compares line by line: every member of every line must be in the
 * saved line with the same value, or be one of k3chat(5)'s documented rewrites. */
static void members_survive(const char *what, const char *text) {
    char p1[600], p2[600];
    path_in(p1, sizeof p1, "members.jsonl");
    path_in(p2, sizeof p2, "members-saved.jsonl");
    write_file(p1, text, strlen(text));
    k3_conv  *c  = k3_conv_new();
    k3_status st = k3_conv_load(c, p1, NULL);
    if (!st)
        st = k3_conv_save(c, p2);
    T_CHECK(!st, "%s: load and save (%s)", what, st ? k3_errmsg() : "ok");
    k3_conv_free(c);
    char *saved = st ? NULL : t_read_file(p2, NULL);
    if (!saved)
        return;
    const char *a = text, *b = saved;
    int         line = 0, lost = 0;
    while (*a && *b) {
        size_t  na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        json_t *in = json_loadb(a, na, 0, NULL), *out = json_loadb(b, nb, 0, NULL);
        line++;
        if (line == 1 && !json_object_get(in, "format")) { /* a file without header gets one */
            json_decref(in);
            json_decref(out);
            b += nb + (b[nb] == '\n');
            continue;
        }
        const char *k;
        json_t     *v;
        json_object_foreach(in, k, v) {
            json_t *w = json_object_get(out, k);
            if ((!w || !value_survives(v, w)) && !documented_rewrite(line == 1, k, v, out)) {
                char *vi = json_dumps(v, JSON_ENCODE_ANY), *vo = w ? json_dumps(w, JSON_ENCODE_ANY) : NULL;
                T_CHECK(0, "%s: line %d: \"%s\": %s was saved as %s", what, line, k, vi,
                        vo ? vo : "nothing (lost)");
                free(vi);
                free(vo);
                lost++;
            }
        }
        json_decref(in);
        json_decref(out);
        a += na + (a[na] == '\n');
        b += nb + (b[nb] == '\n');
    }
    T_CHECK(!lost && !*a && !*b, "%s: every member of all %d lines survives a load and save", what, line);
    free(saved);
}

/* The property over the test's transcripts and odd hand-written ones. A load used to drop
 * "tools" on a non-system message and "tool_call_id" on a non-tool one (read, not stored), a
 * stats' top_p without its temperature, "tools": [] and members that are null or false. */
static void test_members_survive(void) {
    char     p[600];
    k3_conv *c = sample_conv();
    path_in(p, sizeof p, "sample.jsonl");
    T_CHECK(k3_conv_save(c, p) == K3_OK, "save the sample (%s)", k3_errmsg());
    k3_conv_free(c);
    char *sample = t_read_file(p, NULL);
    if (sample)
        members_survive("a saved conversation", sample);
    free(sample);
    const char *src = getenv("K3_SRC"); /* the fuzzer's transcript corpus: autosaves of a model's turns */
    char        corpus[700];
    snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/fuzz-transcript/autosave.jsonl", src ? src : ".");
    char *fixture = t_read_file(corpus, NULL);
    if (fixture)
        members_survive(corpus, fixture);
    else
        printf("SKIP: %s: not found (K3_SRC)\n", corpus);
    free(fixture);
    members_survive(
        "other writers' spellings",
        "{\"format\":\"k3chat-transcript\",\"version\":1}\n"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"sys \"},{\"type\":\"text\","
        "\"text\":\"two\"}]}\n"
        "{\"role\":\"user\",\"content\":\"q\"}\n"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning\":[{\"type\":\"text\",\"text\":\"r\"},"
        "{\"type\":\"text\",\"text\":\"1\"}]}\n"
        "{\"role\":\"user\",\"content\":\"q2\"}\n"
        "{\"role\":\"assistant\",\"content\":\"a2\",\"thinking\":\"r2\"}\n");
    members_survive(
        "unknown members",
        "{\"format\":\"k3chat-transcript\",\"version\":1,\"title\":\"trip\","
        "\"settings\":{\"temperature\":0.5,\"new_knob\":[1,{\"x\":null}]}}\n"
        "{\"role\":\"user\",\"content\":\"hi\",\"attachments\":[{\"file\":\"a.png\",\"bytes\":12}]}\n"
        "{\"role\":\"assistant\",\"content\":\"yo\",\"feedback\":{\"score\":-1},"
        "\"stats\":{\"completion_tokens\":2,\"energy_j\":1.5}}\n");
    members_survive(
        "known members a load reads but does not store",
        "{\"format\":\"k3chat-transcript\",\"version\":1,\"tools\":[],\"settings\":{\"tool_choice\":\"auto\","
        "\"seed\":\"18446744073709551615\",\"top_p\":0.123456789}}\n"
        "{\"role\":\"system\",\"content\":\"s\",\"tools\":[],\"since\":0,\"name\":null}\n"
        "{\"role\":\"user\",\"content\":\"u\",\"tool_call_id\":\"call_9\",\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\"}}],\"interrupted\":false,\"abandoned\":false}\n"
        "{\"role\":\"assistant\",\"content\":\"a\",\"tool_call_id\":\"call_8\",\"tools\":\"not an array\","
        "\"tool_calls\":[],\"token_ids\":[],\"stats\":{\"top_p\":0.5,\"top_k\":3,\"seed\":7,"
        "\"prefill_s\":0.123456789012}}\n"
        "{\"role\":\"user\",\"content\":\"v\",\"abandoned\":true}\n"
        "{\"role\":\"assistant\",\"content\":\"w\",\"abandoned\":1,\"interrupted\":true}\n"
        "{\"role\":\"tool\",\"content\":\"t\",\"tool_call_id\":null,\"name\":\"f\",\"tools\":null}\n");
    /* the kept members are not read back as what they are not */
    path_in(p, sizeof p, "members-saved.jsonl");
    c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p, NULL) == K3_OK && k3_conv_count(c) == 4 && !k3_conv_msg(c, 1)->tool_call_id &&
                !k3_conv_msg(c, 1)->tools && !k3_conv_msg(c, 2)->tool_call_id &&
                !k3_conv_msg(c, 2)->stats.has_sampling && !k3_conv_msg(c, 0)->tools && !k3_conv_tools(c),
            "kept members stay unread: no tool_call_id on a user or assistant message, no tools (%s)",
            k3_errmsg());
    k3_conv_free(c);
    /* members of a tool call, of its function and of a content part (arrays' objects) */
    members_survive("members inside arrays",
                    "{\"format\":\"k3chat-transcript\",\"version\":1}\n"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{"
                    "\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"b\"}]}\n"
                    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                    "\"function\",\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\",\"strict\":"
                    "true}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
                    "\"{}\"}}]}\n"
                    "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c1\"}\n");
}

/* Loads text into a conversation holding one message and checks the error and that the
 * conversation was not touched. */
static void malformed(const char *what, const char *text, size_t n, const char *want_line, const char *want) {
    char p[600];
    path_in(p, sizeof p, "bad.jsonl");
    write_file(p, text, n);
    k3_conv *c = k3_conv_new();
    k3_conv_add(c, K3_ROLE_USER, "keep me", NULL);
    k3_status   st  = k3_conv_load(c, p, NULL);
    const char *msg = k3_errmsg();
    T_CHECK(st == K3_ERR_FORMAT && strstr(msg, want_line) && strstr(msg, want),
            "%s: error names the line (%s)", what, msg);
    T_CHECK(k3_conv_count(c) == 1 && !strcmp(k3_conv_msg(c, 0)->content, "keep me"),
            "%s: conversation in memory untouched", what);
    k3_conv_free(c);
}

#define S(x) x, sizeof(x) - 1

/* /load of a FIFO that nobody writes to (a path typed by mistake, a pipe whose writer died): an
 * error at once, in a child so that a load that blocks (the old open) fails here after a bound
 * far above any load's time rather than hanging the test; the chat's worker blocked so, and its
 * quit waited on it for good. */
static void test_load_fifo(void) {
    char p[600];
    path_in(p, sizeof p, "fifo.jsonl");
    if (mkfifo(p, 0600) != 0) {
        printf("SKIP: mkfifo %s: %s\n", p, strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        k3_conv  *c  = k3_conv_new();
        k3_status st = k3_conv_load(c, p, NULL);
        _exit(st != K3_OK && strstr(k3_errmsg(), "fifo.jsonl:1: empty file") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "/load of a FIFO with no writer: an error naming it, not a wait for good (%s %d)",
            WIFSIGNALED(status) ? "signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    unlink(p);
}

static void test_malformed(void) {
    malformed("truncated line",
              S(HDR "{\"role\":\"user\",\"content\":\"hi\n{\"role\":\"user\",\"content\":\"x\"}\n"),
              "bad.jsonl:2:", "invalid JSON");
    malformed("truncated final line with newline",
              S(HDR "{\"role\":\"user\",\"content\":\"x\"}\n{\"role\":\"us\n"), ":3:", "invalid JSON");
    malformed("wrong type", S(HDR "{\"role\":\"user\",\"content\":5}\n"), ":2:", "\"content\" is an integer");
    /* a tool result the chat format cannot name loaded, and every later turn failed with
     * "message N: tool result: no tool name", naming neither file nor line */
#define CALL_C1                                                                                              \
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","         \
    "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\n"
    malformed("a tool result answering no call (the assistant message deleted by hand)",
              S(HDR "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                    "\"content\":\"x\"}\n"),
              "bad.jsonl:3:", "answers no call (no assistant message is before it)");
    malformed("a tool result with an id no call has",
              S(HDR "{\"role\":\"user\",\"content\":\"hi\"}\n" CALL_C1
                    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"x\"}\n"
                    "{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":\"y\"}\n"),
              "bad.jsonl:5:", "(\"c9\") answers no call of the assistant message before it");
    malformed("more results without ids than calls",
              S(HDR "{\"role\":\"user\",\"content\":\"hi\"}\n" CALL_C1
                    "{\"role\":\"tool\",\"content\":\"x\"}\n"
                    "{\"role\":\"tool\",\"content\":\"y\"}\n"),
              "bad.jsonl:5:", "more results than the assistant message before it made calls");
    {
        char p[600];
        path_in(p, sizeof p, "named.jsonl");
        const char ok[] =
            HDR "{\"role\":\"user\",\"content\":\"hi\"}\n" CALL_C1
                "{\"role\":\"tool\",\"content\":\"by place\"}\n"
                "{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"name\":\"g\",\"content\":\"by name\"}\n";
        write_file(p, ok, sizeof ok - 1);
        k3_conv *c = k3_conv_new();
        T_CHECK(k3_conv_load(c, p, NULL) == K3_OK && k3_conv_count(c) == 4,
                "tool results named by their place or their own name load (%s)", k3_errmsg());
        k3_conv_free(c);
    }
#undef CALL_C1
    /* members this version does not know are kept, not a licence for wrong known ones */
    malformed("wrong type beside an unknown member",
              S(HDR "{\"role\":\"user\",\"content\":\"x\",\"mood\":1,\"interrupted\":\"yes\"}\n"),
              ":2:", "\"interrupted\" is a string, expected true or false");
    malformed(
        "wrong stats type beside an unknown one",
        S(HDR "{\"role\":\"assistant\",\"content\":\"x\",\"stats\":{\"joules\":1,\"decode_s\":\"1\"}}\n"),
        ":2:", "stats.\"decode_s\" is a string");
    malformed(
        "wrong header type beside an unknown member",
        S("{\"format\":\"k3chat-transcript\",\"version\":1,\"title\":1,\"settings\":{\"top_k\":\"9\"}}\n"),
        ":1:", "settings.\"top_k\" is a string");
    malformed("image part",
              S(HDR "{\"role\":\"user\",\"content\":[{\"text\":\"a\"},{\"type\":\"image_url\"}]}\n"),
              ":2:", "\"content\"[1] is of type 'image_url': only text parts");
    malformed("image part with a text",
              S(HDR "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"text\":\"a\"}]}\n"),
              ":2:", "\"content\"[0] is of type 'image': only text parts");
    malformed("audio part (no text)",
              S(HDR "{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":{}}]}\n"),
              ":2:", "\"content\"[0] is of type 'input_audio': only text parts");
    malformed("part type", S(HDR "{\"role\":\"user\",\"content\":[{\"type\":5,\"text\":\"a\"}]}\n"),
              ":2:", "\"content\"[0].type is an integer, expected \"text\"");
    malformed("part text", S(HDR "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":[]}]}\n"),
              ":2:", "\"content\"[0].text is an array, expected a string");
    malformed("reasoning type", S(HDR "{\"role\":\"assistant\",\"content\":\"a\",\"thinking\":5}\n"),
              ":2:", "\"thinking\" is an integer, expected a string or an array of text parts");
    malformed("part not an object", S(HDR "{\"role\":\"user\",\"content\":[\"a\"]}\n"),
              ":2:", "\"content\"[0] is a string, expected a {");
    malformed("wrong stats type",
              S(HDR "{\"role\":\"assistant\",\"content\":\"\",\"stats\":{\"tok_s\":\"fast\"}}\n"),
              ":2:", "\"tok_s\" is a string");
    /* a turn's recorded sampling has the header's ranges (the settings table's rows): a
     * temperature of 5 was accepted here (up to 100) and refused in the header */
    malformed("stats temperature above the TEMP row",
              S(HDR "{\"role\":\"assistant\",\"content\":\"\",\"stats\":{\"temperature\":5}}\n"),
              ":2:", "stats: temperature: '5' is not a number in 0..2");
    malformed("stats negative temperature",
              S(HDR "{\"role\":\"assistant\",\"content\":\"\",\"stats\":{\"temperature\":-0.5}}\n"),
              ":2:", "stats: temperature: '-0.5' is not a number in 0..2");
    malformed(
        "stats top_p above the TOP_P row",
        S(HDR "{\"role\":\"assistant\",\"content\":\"\",\"stats\":{\"temperature\":1,\"top_p\":1.5}}\n"),
        ":2:", "stats: top_p: '1.5' is not a number in 0..1");
    malformed(
        "header max_tokens above the MAX_TOKENS row (it took up to INT_MAX)",
        S("{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"max_tokens\":2000000000}}\n"),
        ":1:", "settings: max_tokens: '2000000000' is not an integer in 0..1000000000");
    malformed("header temperature above the TEMP row",
              S("{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"temperature\":5}}\n"),
              ":1:", "settings: temperature: '5' is not a number in 0..2");
    malformed("wrong settings type",
              S("{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"think\":\"yes\"}}\n"),
              ":1:", "\"think\" is a string");
    malformed("effort medium",
              S("{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"effort\":\"medium\"}}\n"),
              ":1:", "medium");
    malformed("unknown version", S("{\"format\":\"k3chat-transcript\",\"version\":2}\n"),
              ":1:", "unknown transcript version 2");
    malformed("neither header nor message", S("{\"format\":\"other\",\"version\":1}\n"),
              ":1:", "neither a k3chat transcript header");
    malformed("header without format", S("{\"version\":1}\n"), ":1:", "neither a k3chat transcript header");
    malformed("empty file", "", 0, ":1:", "empty");
    malformed("only a byte order mark", S("\xEF\xBB\xBF"), ":1:", "empty");
    malformed("unknown role", S(HDR "{\"role\":\"function\",\"content\":\"x\"}\n"),
              ":2:", "not system, user, assistant or tool");
    malformed("tool_calls on a user message",
              S(HDR "{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{\"id\":\"a\",\"function\":{"
                    "\"name\":\"f\"}}]}\n"),
              ":2:", "only assistant messages do");
    malformed("missing role", S(HDR "{\"content\":\"x\"}\n"), ":2:", "no \"role\"");
    malformed("bad token id", S(HDR "{\"role\":\"assistant\",\"content\":\"x\",\"token_ids\":[1,-2]}\n"),
              ":2:", "token_ids");
    malformed("not an object", S(HDR "[1,2]\n"), ":2:", "expected a JSON object");
    malformed("reasoning on a user turn",
              S(HDR "{\"role\":\"user\",\"content\":\"x\",\"reasoning\":\"r\"}\n"), ":2:", "reasoning");
    char p[600];
    path_in(p, sizeof p, "missing.jsonl");
    k3_conv *c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p, NULL) == K3_ERR_IO && strstr(k3_errmsg(), "missing.jsonl") &&
                strstr(k3_errmsg(), "errno"),
            "missing file: I/O error naming path and errno (%s)", k3_errmsg());

    /* a torn final line (an interrupted append) is ignored, and reported */
    static const char torn[] =
        HDR "{\"role\":\"user\",\"content\":\"q\"}\n{\"role\":\"assistant\",\"content\":\"a\"}\n"
            "{\"role\":\"user\",\"conte";
    path_in(p, sizeof p, "torn.jsonl");
    write_file(p, torn, sizeof torn - 1);
    k3_load_info info;
    k3_status    st = k3_conv_load(c, p, &info);
    T_CHECK(st == K3_OK && k3_conv_count(c) == 2 && info.torn_line == 4,
            "torn final line ignored, earlier turns kept, line reported (%d)", info.torn_line);
    k3_conv_free(c);
}

static void test_failures(void) {
    char file[600], bad[700], md[600];
    path_in(file, sizeof file, "plainfile");
    write_file(file, "x", 1);
    snprintf(bad, sizeof bad, "%s/sub/conv.jsonl", file); /* ENOTDIR, even for root */
    k3_conv  *c = sample_conv(), *ref = sample_conv();
    k3_status st = k3_conv_save(c, bad);
    T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), "plainfile/sub") && strstr(k3_errmsg(), "errno"),
            "save to an unwritable path: clear error with path and errno (%s)", k3_errmsg());
    T_CHECK(conv_eq(c, ref), "conversation still in memory after the failed save");

    /* autosave into an unwritable directory: error kept, memory kept, later retry works */
    snprintf(bad, sizeof bad, "%s/autosave", file);
    T_CHECK(k3_conv_autosave_enable(c, bad) == K3_OK, "autosave enabled");
    st = k3_conv_autosave(c);
    T_CHECK(st == K3_ERR_IO && k3_conv_autosave_error(c) && strstr(k3_conv_autosave_error(c), "plainfile"),
            "autosave failure is a clear error (%s)",
            k3_conv_autosave_error(c) ? k3_conv_autosave_error(c) : "none");
    T_CHECK(conv_eq(c, ref), "conversation still in memory after the failed autosave");
    snprintf(bad, sizeof bad, "%s/autosave-ok", tmpdir);
    k3_conv_autosave_enable(c, bad);
    st = k3_conv_autosave(c);
    T_CHECK(st == K3_OK && !k3_conv_autosave_error(c) && k3_conv_autosave_path(c), "autosave retry succeeds");
    k3_conv *d = k3_conv_new();
    T_CHECK(k3_conv_load(d, k3_conv_autosave_path(c), NULL) == K3_OK && conv_eq(c, d),
            "autosaved file holds the conversation");
    k3_conv_free(d);

    /* a temporary file left by a killed writer is removed when autosave starts (if old) */
    char stale[800], fresh[800];
    snprintf(stale, sizeof stale, "%s/x.jsonl.tmp-AbCdEf", bad);
    snprintf(fresh, sizeof fresh, "%s/y.jsonl.tmp-AbCdEf", bad);
    write_file(stale, "{", 1);
    write_file(fresh, "{", 1);
    struct timespec old_times[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    utimensat(AT_FDCWD, stale, old_times, 0);
    k3_conv_autosave_enable(c, bad);
    T_CHECK(access(stale, F_OK) != 0 && access(fresh, F_OK) == 0,
            "autosave start removes an old temporary file, keeps a fresh one (another writer's)");

    /* /export */
    path_in(md, sizeof md, "conv.md");
    T_CHECK(k3_conv_export_md(c, md) == K3_OK, "export Markdown");
    char *text = t_read_file(md, NULL);
    T_CHECK(
        text && strstr(text, "<details>\n<summary>Reasoning</summary>\n\nLet me think… 思考\n\n</details>") &&
            strstr(text, "## User") && strstr(text, "Answer with\nnewlines") && strstr(text, "(interrupted)"),
        "Markdown has the turns, reasoning in <details>, the interrupted mark");
    /* the reasoning's time is the chat's "thought for 0.4 s" (think_s 0.7 less ttft 0.3); the
     * export gave 0.7 s, the time from the start of the turn, prefill included */
    T_CHECK(text && strstr(text, "first token after 0.30 s, thought 0.4 s,"),
            "Markdown gives the reasoning's time as the chat shows it (thought 0.4 s)");
    free(text);
    k3_conv_free(c);
    k3_conv_free(ref);
}

/* A full disk, simulated with RLIMIT_FSIZE (writes past the limit fail with EFBIG): /save
 * leaves the old file and no temporary behind; a failed autosave append is cut back so the
 * file still loads; memory is kept and the next autosave catches up. */
static int count_files(const char *dir) {
    int            n = 0;
    DIR           *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int gate_calls, gate_answer;
static int gate(void *ud) {
    (void)ud;
    gate_calls++;
    return gate_answer;
}

/* Two writers of one autosave (a chat's worker and a quit's rescue, ui/common/engine.c): a copy
 * of the conversation as a turn began writes what the conversation's own autosave would (here
 * a /retry's rewrite, with the answer the rescue saw), and the gate keeps the owner's write
 * off the file once the other writer has it. */
static void test_copy_gate(void) {
    char dir[600];
    path_in(dir, sizeof dir, "gate");
    k3_conv *c = sample_conv();
    T_CHECK(k3_conv_autosave_enable(c, dir) == K3_OK && k3_conv_autosave(c) == K3_OK &&
                k3_conv_autosave_path(c),
            "autosave the sample (%s)", k3_errmsg());
    char *path = k3_strdup(k3_conv_autosave_path(c));
    T_CHECK(k3_conv_retry_last(c) == 1, "/retry: the last answer becomes a branch");
    k3_conv *x = k3_conv_copy(c);
    T_CHECK(x && k3_conv_count(x) == k3_conv_count(c) && k3_conv_abandoned_count(x) == 1,
            "the copy has the messages and the branch");
    k3_msg a = {.role = K3_ROLE_ASSISTANT, .content = "seen so far", .interrupted = 1};
    T_CHECK(x && k3_conv_add_msg(x, &a) == K3_OK && k3_conv_autosave(x) == K3_OK &&
                !strcmp(k3_conv_autosave_path(x), path),
            "the copy's autosave writes the conversation's file (%s)", k3_errmsg());
    k3_conv *back = k3_conv_new();
    T_CHECK(k3_conv_load(back, path, NULL) == K3_OK && k3_conv_count(back) == 5 &&
                k3_conv_abandoned_count(back) == 1 && !strcmp(k3_conv_msg(back, 4)->content, "seen so far") &&
                k3_conv_msg(back, 4)->interrupted &&
                !strcmp(k3_conv_abandoned(back, 0, NULL, NULL)->content, "partial ans"),
            "rewritten: the replaced answer as a branch, then the answer seen, interrupted (%s)",
            k3_errmsg());
    /* the owner comes back and ends its turn: the gate says the file is the other writer's */
    k3_conv_set_autosave_gate(c, gate, NULL);
    gate_answer  = 0;
    char *before = t_read_file(path, NULL);
    add_reply(c, "the owner's answer", NULL, 0, 2);
    T_CHECK(k3_conv_autosave(c) == K3_OK && gate_calls == 1 && !k3_conv_autosave_error(c),
            "a write the gate refuses: K3_OK, no error (%d calls)", gate_calls);
    char *after = t_read_file(path, NULL);
    T_CHECK(before && after && !strcmp(before, after) && count_files(dir) == 1,
            "... and the file is as the other writer left it");
    /* (the file is the other writer's now, so the owner's write goes whole to a new file) */
    gate_answer = 1;
    T_CHECK(k3_conv_autosave(c) == K3_OK && gate_calls == 2 &&
                k3_conv_load(back, k3_conv_autosave_path(c), NULL) == K3_OK &&
                !strcmp(k3_conv_msg(back, 4)->content, "the owner's answer"),
            "a write the gate allows is made (%s)", k3_errmsg());
    free(before);
    free(after);
    free(path);
    k3_conv_free(back);
    k3_conv_free(x);
    k3_conv_free(c);
}

/* The autosave writes only to the file it left. Another program may replace that file (another
 * k3chat's /save FILE onto it, an editor's save), write to it or remove it between two turns; an
 * append there put this conversation's next turn after the other writer's text (a mix of two
 * conversations, and this one's earlier turns on no disk), and a removed file failed every later
 * autosave with ENOENT. Now the file is left as the other writer made it and the conversation
 * goes whole to a new autosave file. */
static k3_conv *other_conv(void) {
    k3_conv *o = k3_conv_new();
    k3_conv_add(o, K3_ROLE_USER, "the other conversation", NULL);
    add_reply(o, "its answer", NULL, 0, 1);
    return o;
}

/* After `how` changed c's autosave file: the next turn's autosave works, leaves the file as it
 * was, and a new file holds the whole conversation. */
static void moved_case(const char *how, int kind) {
    char dir[600];
    path_in(dir, sizeof dir, "moved");
    char sub[700];
    snprintf(sub, sizeof sub, "%s/%d", dir, kind);
    mkdir(dir, 0700);
    k3_conv *c = sample_conv(), *o = other_conv(), *l = k3_conv_new();
    T_CHECK(k3_conv_autosave_enable(c, sub) == K3_OK && k3_conv_autosave(c) == K3_OK, "%s: autosaved (%s)",
            how, k3_errmsg());
    char *f = k3_strdup(k3_conv_autosave_path(c));
    if (kind == 0) /* another k3chat's /save FILE: a whole file renamed over it */
        K3_ASSERT(k3_conv_save(o, f) == K3_OK);
    else if (kind == 1) /* removed */
        unlink(f);
    else { /* a line added in place (same file, another size) */
        FILE *a = fopen(f, "ab");
        K3_ASSERT(a);
        fputs("{\"role\":\"user\",\"content\":\"typed by hand\"}\n", a);
        fclose(a);
    }
    char *before = kind == 1 ? NULL : t_read_file(f, NULL);
    if (kind == 2)
        k3_conv_undo(c); /* and the autosave that follows a rewrite, not an append */
    k3_conv_add(c, K3_ROLE_USER, "next turn", NULL);
    add_reply(c, "next answer", NULL, 0, 1);
    k3_status st    = k3_conv_autosave(c);
    char     *after = kind == 1 ? NULL : t_read_file(f, NULL);
    T_CHECK(st == K3_OK && !k3_conv_autosave_error(c), "%s: the next autosave works (%s)", how,
            k3_conv_autosave_error(c) ? k3_conv_autosave_error(c) : "no error");
    T_CHECK(kind == 1 || (before && after && !strcmp(before, after)),
            "%s: the file is left as the other writer made it", how);
    /* (a removed file's name may be free again for the new file) */
    T_CHECK(k3_conv_autosave_path(c) && (kind == 1 || strcmp(k3_conv_autosave_path(c), f)) &&
                k3_conv_load(l, k3_conv_autosave_path(c), NULL) == K3_OK && conv_eq(l, c),
            "%s: the whole conversation is in a new autosave file (%s)", how,
            k3_conv_autosave_path(c) ? k3_conv_autosave_path(c) : "none");
    /* and the autosave appends to the new file from then on */
    k3_conv_add(c, K3_ROLE_USER, "one more", NULL);
    char *p = k3_strdup(k3_conv_autosave_path(c));
    T_CHECK(k3_conv_autosave(c) == K3_OK && !strcmp(p, k3_conv_autosave_path(c)) &&
                k3_conv_load(l, p, NULL) == K3_OK && conv_eq(l, c),
            "%s: the next turn is appended to the new file", how);
    free(p);
    free(before);
    free(after);
    free(f);
    k3_conv_free(l);
    k3_conv_free(o);
    k3_conv_free(c);
}

static void test_autosave_moved(void) {
    moved_case("replaced by another k3chat's /save", 0);
    moved_case("removed", 1);
    moved_case("written to by another program", 2);

    /* a turn's copy that holds the newest messages only cannot write the whole conversation:
     * an error, and the other writer's file stays */
    char dir[600];
    path_in(dir, sizeof dir, "moved-tail");
    k3_conv *c = sample_conv(), *o = other_conv();
    K3_ASSERT(k3_conv_autosave_enable(c, dir) == K3_OK && k3_conv_autosave(c) == K3_OK);
    char *f = k3_strdup(k3_conv_autosave_path(c));
    k3_conv_add(c, K3_ROLE_USER, "third", NULL);
    k3_conv *t = k3_conv_copy_unsaved(c);
    K3_ASSERT(k3_conv_save(o, f) == K3_OK);
    char *before = t_read_file(f, NULL), *after = NULL;
    T_CHECK(t && k3_conv_count(t) == 1 && k3_conv_autosave(t) == K3_ERR_IO && k3_conv_autosave_error(t) &&
                strstr(k3_conv_autosave_error(t), "another program") && (after = t_read_file(f, NULL)) &&
                !strcmp(before, after),
            "a copy of the newest messages: a clear error, the file untouched (%s)",
            t && k3_conv_autosave_error(t) ? k3_conv_autosave_error(t) : "no error");
    free(after);
    free(before);
    free(f);
    k3_conv_free(t);
    k3_conv_free(o);
    k3_conv_free(c);
}

/* A file's text without its header's "created" time (two saves may fall in two seconds). */
static char *without_created(char *s) {
    char *at  = s ? strstr(s, "\"created\":\"") : NULL;
    char *end = at ? strchr(at + 11, '"') : NULL;
    if (end)
        memmove(at, end + 1, strlen(end + 1) + 1);
    return s;
}

/* k3_conv_copy lists the fields it carries: a conversation with every field a transcript holds
 * set (header: settings, bits, tool_choice, model identity, tools, a member k3chat does not know;
 * a system prompt set mid-chat, tool calls and results, stats, an abandoned branch) is loaded,
 * copied, and the copy's save is the original's, byte for byte: a field the copy forgets fails
 * here. Its autosave state too: the copy's autosave writes what the original's would. */
static void test_copy_fields(void) {
    char p[600], q[600], dir[600], model[600], cfg[700];
    path_in(model, sizeof model, "every-model");
    snprintf(cfg, sizeof cfg, "%s/config.json", model);
    mkdir(model, 0700);
    write_file(cfg, "{\"x\": 1}", 8);
    path_in(p, sizeof p, "every.jsonl");
    path_in(q, sizeof q, "every-copy.jsonl");
    path_in(dir, sizeof dir, "every-auto");
    const char *every =
        "{\"format\":\"k3chat-transcript\",\"version\":1,\"settings\":{\"temperature\":0.25,\"top_p\":0.5,"
        "\"min_p\":0.125,\"top_k\":"
        "7,\"seed\":99,\"think\":false,\"effort\":\"high\",\"max_tokens\":321,\"bits\":4,\"mla_bits\":8,"
        "\"head_bits\":8,\"tool_choice\":\"none\"},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"f\"}}],\"x_extra\":{\"kept\":[1,2]}}\n"
        "{\"role\":\"system\",\"content\":\"late sys\",\"since\":2}\n"
        "{\"role\":\"user\",\"content\":\"q1\"}\n"
        "{\"role\":\"assistant\",\"content\":\"old\",\"abandoned\":1}\n"
        "{\"role\":\"assistant\",\"content\":\"\",\"reasoning\":\"r\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\n"
        "{\"role\":\"tool\",\"content\":\"out\",\"tool_call_id\":\"c1\",\"name\":\"f\"}\n"
        "{\"role\":\"assistant\",\"content\":\"a1\",\"interrupted\":true}\n"
        "{\"role\":\"user\",\"content\":\"q2\"}\n";
    write_file(p, every, strlen(every));
    k3_conv *c = k3_conv_new();
    T_CHECK(k3_conv_load(c, p, NULL) == K3_OK && k3_conv_count(c) == 6 && k3_conv_abandoned_count(c) == 1,
            "the transcript with every field loads (%s)", k3_errmsg());
    k3_params mp = {.bits = 4, .mla_bits = 8, .head_bits = 6};
    T_CHECK(k3_conv_set_model(c, model, &mp) == K3_OK && k3_conv_autosave_enable(c, dir) == K3_OK &&
                k3_conv_autosave(c) == K3_OK,
            "the model set, autosaved (%s)", k3_errmsg());
    k3_conv *x = k3_conv_copy(c);
    T_CHECK(x && k3_conv_save(c, p) == K3_OK && k3_conv_save(x, q) == K3_OK, "saved, and its copy (%s)",
            k3_errmsg());
    char *a = without_created(t_read_file(p, NULL)), *b = without_created(t_read_file(q, NULL));
    T_CHECK(a && b && !strcmp(a, b) && strstr(a, "x_extra") && strstr(a, "\"since\":2") &&
                strstr(a, "every-model") && strstr(a, "\"head_bits\":6") &&
                strstr(a, "\"tool_choice\":\"none\"") && strstr(a, "\"abandoned\":1"),
            "the copy saves as the original, every field in it:\n%s\n%s", a ? a : "?", b ? b : "?");
    T_CHECK(x && k3_conv_autosave_path(x) && k3_conv_autosave_path(c) &&
                !strcmp(k3_conv_autosave_path(x), k3_conv_autosave_path(c)),
            "the copy's autosave is the original's file");
    free(a);
    free(b);
    k3_conv_free(x);
    k3_conv_free(c);
}

/* k3_conv_copy_unsaved (what a chat's worker keeps each turn for a quit's rescue): where the
 * autosave appends, the messages the file lacks only (the whole conversation was copied every
 * turn: 50 ms at 50,000 exchanges, BENCHMARKS.md), and the file it then writes is the one a
 * whole copy writes; after an edit (a whole-file rewrite is due) or a settings change, all of it. */
static void test_copy_unsaved(void) {
    char dir[600];
    path_in(dir, sizeof dir, "unsaved");
    k3_conv *c = sample_conv();
    T_CHECK(k3_conv_autosave_enable(c, dir) == K3_OK && k3_conv_autosave(c) == K3_OK, "autosaved (%s)",
            k3_errmsg());
    const char *path = k3_conv_autosave_path(c);
    k3_conv_add(c, K3_ROLE_USER, "third", NULL);
    k3_conv *t = k3_conv_copy_unsaved(c), *f = k3_conv_copy(c);
    T_CHECK(t && f && k3_conv_count(t) == 1 && !strcmp(k3_conv_msg(t, 0)->content, "third") &&
                k3_conv_count(f) == 6,
            "appending: the copy holds the one message the file lacks (%d of %d)", t ? k3_conv_count(t) : -1,
            k3_conv_count(c));
    k3_msg a      = {.role = K3_ROLE_ASSISTANT, .content = "seen so far", .interrupted = 1};
    char  *before = t_read_file(path, NULL);
    T_CHECK(t && k3_conv_add_msg(t, &a) == K3_OK && k3_conv_autosave(t) == K3_OK, "the copy's autosave (%s)",
            k3_errmsg());
    char *by_t = t_read_file(path, NULL);
    if (before)
        write_file(path, before, strlen(before));
    T_CHECK(f && k3_conv_add_msg(f, &a) == K3_OK && k3_conv_autosave(f) == K3_OK, "the whole copy's (%s)",
            k3_errmsg());
    char    *by_f = t_read_file(path, NULL);
    k3_conv *back = k3_conv_new();
    T_CHECK(by_t && by_f && !strcmp(by_t, by_f) && k3_conv_load(back, path, NULL) == K3_OK &&
                k3_conv_count(back) == 7 && !strcmp(k3_conv_msg(back, 6)->content, "seen so far"),
            "... writes the file the whole copy writes: the message and the answer appended");
    k3_conv_free(t);
    k3_conv_free(f);
    /* a system prompt set mid-chat rewrites the file: a whole copy */
    k3_conv_set_system(c, "new sys");
    t = k3_conv_copy_unsaved(c);
    T_CHECK(t && k3_conv_count(t) == k3_conv_count(c), "after an edit: the whole conversation (%d of %d)",
            t ? k3_conv_count(t) : -1, k3_conv_count(c));
    k3_conv_free(t);
    T_CHECK(k3_conv_autosave(c) == K3_OK, "the owner's autosave rewrites the file (%s)", k3_errmsg());
    k3_conv_settings s;
    k3_conv_get_settings(c, &s);
    s.max_tokens = 55;
    k3_conv_set_settings(c, &s);
    t = k3_conv_copy_unsaved(c);
    T_CHECK(t && k3_conv_count(t) == k3_conv_count(c), "after a settings change: the whole conversation");
    k3_conv_free(t);
    free(before);
    free(by_t);
    free(by_f);
    k3_conv_free(back);
    k3_conv_free(c);
}

static void test_full_disk(void) {
    char dir[600], p[700];
    path_in(dir, sizeof dir, "full");
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/conv.jsonl", dir);
    k3_conv *small = k3_conv_new(), *big = sample_conv();
    k3_conv_add(small, K3_ROLE_USER, "small", NULL);
    K3_ASSERT(k3_conv_save(small, p) == K3_OK);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {300, old.rlim_max};
    setrlimit(RLIMIT_FSIZE, &lim);
    k3_status st = k3_conv_save(big, p);
    setrlimit(RLIMIT_FSIZE, &old);
    T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), "conv.jsonl") && strstr(k3_errmsg(), "errno"),
            "save on a full disk: clear error (%s)", k3_errmsg());
    k3_conv *l = k3_conv_new();
    T_CHECK(k3_conv_load(l, p, NULL) == K3_OK && conv_eq(l, small) && count_files(dir) == 1,
            "the old file is intact and no temporary file is left");
    k3_conv_free(l);

    /* autosave: the first write works, the next append hits the limit */
    snprintf(p, sizeof p, "%s/auto", dir);
    k3_conv_autosave_enable(small, p);
    K3_ASSERT(k3_conv_autosave(small) == K3_OK);
    struct stat sb;
    stat(k3_conv_autosave_path(small), &sb);
    char big_text[4000];
    memset(big_text, 'z', sizeof big_text - 1);
    big_text[sizeof big_text - 1] = 0;
    add_reply(small, big_text, NULL, 0, 0);
    lim.rlim_cur = (rlim_t)sb.st_size + 100; /* room for part of the new line only */
    setrlimit(RLIMIT_FSIZE, &lim);
    st = k3_conv_autosave(small);
    setrlimit(RLIMIT_FSIZE, &old);
    struct stat sb2;
    stat(k3_conv_autosave_path(small), &sb2);
    T_CHECK(st == K3_ERR_IO && k3_conv_autosave_error(small) && sb2.st_size == sb.st_size,
            "autosave append on a full disk fails and is cut back to the last complete turn (%lld bytes)",
            (long long)sb2.st_size);
    T_CHECK(k3_conv_count(small) == 2, "the conversation stays in memory");
    T_CHECK(k3_conv_autosave(small) == K3_OK && !k3_conv_autosave_error(small),
            "the next autosave catches up");
    l = k3_conv_new();
    T_CHECK(k3_conv_load(l, k3_conv_autosave_path(small), NULL) == K3_OK && conv_eq(l, small),
            "the autosave file then holds the whole conversation");
    k3_conv_free(l);
    k3_conv_free(small);
    k3_conv_free(big);
}

/* ---- crash safety ---------------------------------------------------------------- */

/* Operation i applied to c: usually one more exchange; every 5th, an undo first (so the
 * autosave rewrites the file); replies grow large now and then (longer writes). */
static void crash_op(k3_conv *c, int i, char *big, size_t nbig) {
    char q[64];
    if (i % 5 == 4)
        k3_conv_undo(c);
    snprintf(q, sizeof q, "question %d", i);
    k3_conv_add(c, K3_ROLE_USER, q, NULL);
    size_t len = (size_t)(i % 3 == 0 ? 200000 : 50 + i);
    if (len >= nbig)
        len = nbig - 1;
    memset(big, 'a' + i % 26, len);
    big[len] = 0;
    add_reply(c, big, i % 2 ? "reasoning" : NULL, i % 7 == 3, i % 10);
}

static int crash_run(int round, char *big, size_t nbig) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/crash%d", tmpdir, round);
    int fds[2];
    if (pipe(fds))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        k3_conv *c = k3_conv_new();
        k3_conv_set_system(c, "sys");
        k3_conv_autosave_enable(c, dir);
        for (int i = 0;; i++) {
            crash_op(c, i, big, nbig);
            if (k3_conv_autosave(c) != K3_OK)
                _exit(3);
            if (write(fds[1], &i, sizeof i) != sizeof i)
                _exit(4);
        }
    }
    close(fds[1]);
    struct timespec ts = {0, (long)(rand() % 40000) * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status, done = -1, x;
    while (read(fds[0], &x, sizeof x) == sizeof x)
        done = x;
    close(fds[0]);
    waitpid(pid, &status, 0);
    int ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;

    /* expected states after `done` and `done + 1` operations */
    k3_conv *s0 = k3_conv_new(), *s1 = k3_conv_new();
    k3_conv_set_system(s0, "sys");
    k3_conv_set_system(s1, "sys");
    for (int i = 0; i <= done; i++)
        crash_op(s0, i, big, nbig);
    for (int i = 0; i <= done + 1; i++)
        crash_op(s1, i, big, nbig);
    int  files = 0;
    DIR *d     = opendir(dir);
    char p[1200];
    while (t_next_file(d, dir, ".jsonl", p, sizeof p)) {
        files++;
        k3_conv     *l = k3_conv_new();
        k3_load_info info;
        if (k3_conv_load(l, p, &info) != K3_OK) {
            printf("  round %d: %s does not load: %s\n", round, p, k3_errmsg());
            ok = 0;
        } else if (!conv_eq(l, s0) && !conv_eq(l, s1) && !(prefix_of(s0, l) && prefix_of(l, s1))) {
            printf("  round %d: %s holds %d messages, not (a prefix of) the state after op %d or %d\n", round,
                   p, k3_conv_count(l), done, done + 1);
            ok = 0;
        }
        k3_conv_free(l);
    }
    if (d)
        closedir(d);
    if (done >= 0 && files != 1) {
        printf("  round %d: %d autosave files after %d turns\n", round, files, done + 1);
        ok = 0;
    }
    k3_conv_free(s0);
    k3_conv_free(s1);
    return ok ? done + 1 : -1;
}

static void test_crash(void) {
    size_t nbig   = 300000;
    char  *big    = malloc(nbig);
    int    rounds = 24, good = 0, turns = 0;
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    for (int r = 0; r < rounds; r++) {
        int n = crash_run(r, big, nbig);
        if (n >= 0) {
            good++;
            turns += n;
        }
    }
    free(big);
    T_CHECK(good == rounds,
            "kill -9 at random points (%d rounds, %d completed turns in all): every autosave "
            "file parses and holds every completed turn (%d/%d rounds ok)",
            rounds, turns, good, rounds);
}

/* Issue 26 item 1: one rule for invalid UTF-8. Text from outside gets U+FFFD and a report
 * (k3_utf8_repair); the conversation refuses invalid text from a caller by name and byte
 * rather than failing later as an unwritable transcript ("out of memory"); a transcript with
 * a stray byte loads with U+FFFD, saying where. */
static void test_utf8(void) {
    char  *out   = NULL;
    size_t first = 99;
    T_CHECK(k3_utf8_repair("caf\xc3\xa9 ok", 8, &out, &first) == 0 && first == 99 &&
                !strcmp(out, "caf\xc3\xa9 ok"),
            "valid UTF-8: nothing replaced, copied as is");
    free(out);
    T_CHECK(k3_utf8_repair("caf\xe9.", 5, &out, &first) == 1 && first == 3 &&
                !strcmp(out, "caf\xef\xbf\xbd."),
            "a Latin-1 byte becomes U+FFFD, its offset reported (%zu: %s)", first, out);
    free(out);
    T_CHECK(k3_utf8_repair("\xc0\xaf-\xe2\x82", 5, NULL, &first) == 3 && first == 0,
            "overlong and cut sequences count, maximal subpart rule (count only, no copy)");

    k3_conv *c = k3_conv_new();
    K3_ASSERT(c);
    T_CHECK(k3_conv_add(c, K3_ROLE_USER, "caf\xe9", NULL) == K3_ERR_ARG &&
                strstr(k3_errmsg(), "not valid UTF-8") && strstr(k3_errmsg(), "byte 4") &&
                !strstr(k3_errmsg(), "memory") && k3_conv_count(c) == 0,
            "k3_conv_add refuses invalid UTF-8 naming the byte, not as memory (%s)", k3_errmsg());
    T_CHECK(k3_conv_set_system(c, "\xff") == K3_ERR_ARG && !k3_conv_system(c), "so does k3_conv_set_system");

    static const char text[] = HDR "{\"role\":\"user\",\"content\":\"ok\"}\n"
                                   "{\"role\":\"user\",\"content\":\"bad \xff\xfe\"}\n"
                                   "{\"role\":\"assistant\",\"content\":\"\xc0\xaf\"}\n";
    char              p[600], q[600];
    path_in(p, sizeof p, "latin1.jsonl");
    path_in(q, sizeof q, "latin1-saved.jsonl");
    write_file(p, text, sizeof text - 1);
    k3_load_info info;
    k3_status    st = k3_conv_load(c, p, &info);
    T_CHECK(st == K3_OK && k3_conv_count(c) == 3 &&
                !strcmp(k3_conv_msg(c, 1)->content, "bad \xef\xbf\xbd\xef\xbf\xbd"),
            "a transcript with invalid UTF-8 loads, with U+FFFD (%s)", st ? k3_errmsg() : "ok");
    T_CHECK(info.utf8_fixed == 4 && info.utf8_line == 3 && info.utf8_byte == 31,
            "and says how many and where (%d, line %d byte %d)", info.utf8_fixed, info.utf8_line,
            info.utf8_byte);
    T_CHECK(k3_conv_save(c, q) == K3_OK, "the repaired conversation saves (%s)", k3_errmsg());

    /* a NUL byte on a line with invalid UTF-8: the repaired copy was measured with strlen, cut at
     * the NUL, and the error spoke of the end of the text, not of the NUL */
    static const char bin[] = HDR "{\"role\":\"user\",\"content\":\"\xff a\0b\"}\n"
                                  "{\"role\":\"user\",\"content\":\"next\"}\n";
    path_in(p, sizeof p, "nul.jsonl");
    write_file(p, bin, sizeof bin - 1);
    st = k3_conv_load(c, p, &info);
    T_CHECK(st == K3_ERR_FORMAT && strstr(k3_errmsg(), "nul.jsonl:2:") && strstr(k3_errmsg(), "NUL byte") &&
                strstr(k3_errmsg(), "byte 30") && k3_conv_count(c) == 3,
            "a NUL byte beside invalid UTF-8: an error naming the line and byte, the chat kept (%s)",
            k3_errmsg());
    /* the same as the last line of the file: a torn append (a crash leaves zeros), earlier kept */
    path_in(p, sizeof p, "nul-last.jsonl");
    write_file(p, bin, 69 + 32); /* the header and line 2 up to the "}" */
    st = k3_conv_load(c, p, &info);
    T_CHECK(st == K3_OK && k3_conv_count(c) == 0 && info.torn_line == 2 && strstr(info.torn_why, "NUL byte"),
            "a NUL byte in the last, unfinished line: a torn line, said so (%d %s)", info.torn_line,
            info.torn_why);
    k3_conv_free(c);
}

/* Issue 26 item 30: /export escapes what would break the Markdown: user text is literal, a
 * </details> in reasoning does not close the block, an unclosed fence is closed. */
static void test_export_escape(void) {
    k3_conv *c = k3_conv_new();
    char     md[600];
    path_in(md, sizeof md, "escape.md");
    K3_ASSERT(c && k3_conv_add(c, K3_ROLE_USER, "# x\n    indented\n1. item <b>", NULL) == K3_OK);
    add_reply(c, "```py\nprint(1)", "a </details> b <DETAILS> c", 0, 0);
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "next", NULL) == K3_OK);
    T_CHECK(k3_conv_export_md(c, md) == K3_OK, "export Markdown with hostile text");
    char *t = t_read_file(md, NULL);
    T_CHECK(t && strstr(t, "\\# x\\\n&#32;&#32;&#32;&#32;indented\\\n1\\. item \\<b\\>\n"),
            "user text is literal: no heading, no code block, no list, no HTML, line breaks kept");
    T_CHECK(t && strstr(t, "a &lt;/details> b &lt;DETAILS> c\n\n</details>"),
            "a </details> or <details> in the reasoning is text; the block ends where k3chat ends it");
    T_CHECK(t && strstr(t, "print(1)\n```\n\n") && strstr(t, "## User\n\nnext"),
            "an unclosed fence in the answer is closed, the next message is outside it");
    free(t);
    k3_conv_free(c);
}

/* The first byte of s[0..n) a terminal would run: a C0 control other than \n and \t, DEL, or
 * a C1 control in UTF-8 (C2 80..9F); -1 when none. */
static long first_ctl(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ||
            (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] < 0xA0))
            return (long)i;
    }
    return -1;
}

/* /export of an answer, reasoning, user text and tool names holding terminal commands (OSC 52
 * clipboard write, OSC 0 title, CSI, a C1 CSI, a bidi override, a bare CR): the file holds no
 * control character but \n and \t (`cat chat.md` ran them), each shows as k3_escape's \xHH or
 * \uHHHH; the transcript keeps the bytes and loads back equal. */
static void test_export_controls(void) {
    static const char evil[] = "ans \x1b]52;c;ZXZpbA==\x07 \x1b]0;EVIL\x07 \x1b[31m red \xc2\x9b"
                               "32m \xe2\x80\xae"
                               "rev\r over\tend";
    k3_conv          *c = k3_conv_new(), *d = k3_conv_new();
    char              md[600], js[600];
    path_in(md, sizeof md, "controls.md");
    path_in(js, sizeof js, "controls.jsonl");
    K3_ASSERT(c && d && k3_conv_add(c, K3_ROLE_USER, "say \x1b]52;c;dXNlcg==\x07 it", NULL) == K3_OK);
    add_reply(c, evil, "think \x1b]0;EVILR\x07", 0, 0);
    k3_tool_call call[] = {
        {.id = "*x* ``[a](http://evil)`` <script>", .name = "f\nx", .arguments = "{\"q\": \"```\\u001b\"}"},
        {.id = " sp ", .name = "g", .arguments = "{}"}};
    k3_msg am       = {.role = K3_ROLE_ASSISTANT, .content = (char *)(uintptr_t) "", .tool_calls = call};
    am.n_tool_calls = 2;
    k3_msg tm       = {.role         = K3_ROLE_TOOL,
                       .content      = (char *)(uintptr_t) "out \x1b]52;c;dG9vbA==\x07",
                       .tool_name    = (char *)(uintptr_t) "f`\x1b]0;T\x07",
                       .tool_call_id = (char *)(uintptr_t) "c\x1b[2J1"};
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, "go", NULL) == K3_OK && !k3_conv_add_msg(c, &am) &&
              !k3_conv_add_msg(c, &tm));
    T_CHECK(k3_conv_export_md(c, md) == K3_OK, "export Markdown with terminal commands in it (%s)",
            k3_errmsg());
    size_t n  = 0;
    char  *t  = t_read_file(md, &n);
    long   at = t ? first_ctl(t, n) : 0;
    T_CHECK(t && at < 0, "no control character but newline and tab in the export (byte %ld: 0x%02X)", at,
            t && at >= 0 ? (unsigned char)t[at] : 0);
    T_CHECK(
        t && strstr(t,
                    "ans \\x1B]52;c;ZXZpbA==\\x07 \\x1B]0;EVIL\\x07 \\x1B[31m red \\u009B32m \\u202Erev\\x0D "
                    "over\tend"),
        "the answer's commands show as escapes, C1 and bidi as \\u, the tab stays");
    T_CHECK(t && strstr(t, "think \\x1B]0;EVILR\\x07") && strstr(t, "say \\x1B\\]52;c;dXNlcg\\=\\=\\x07 it"),
            "so do the reasoning's and the user's");
    T_CHECK(
        t && strstr(t, "## Tool result: ``f`\\x1B]0;T\\x07`` (call `c\\x1B[2J1`)\n") &&
            strstr(t, "**Tool call** `f\\x0Ax` (```*x* ``[a](http://evil)`` <script>```):\n") &&
            strstr(t, "````json\n{\"q\": \"```"),
        "a tool's name and call id stay on their heading line in a code span longer than any backtick run "
        "in them (a hostile id was Markdown: *x* in italics, a link, raw HTML), the arguments in their "
        "fence");
    T_CHECK(t && strstr(t, "**Tool call** `g` (`  sp  `):\n"),
            "an id that starts and ends with a space keeps them (a reader strips one each side)");
    free(t);
    T_CHECK(k3_conv_save(c, js) == K3_OK && k3_conv_load(d, js, NULL) == K3_OK && k3_conv_count(d) == 5 &&
                !strcmp(k3_conv_msg(d, 1)->content, evil) &&
                !strcmp(k3_conv_msg(d, 1)->reasoning, "think \x1b]0;EVILR\x07") &&
                !strcmp(k3_conv_msg(d, 4)->tool_name, "f`\x1b]0;T\x07"),
            "the transcript keeps the exact bytes and loads back equal (%s)", k3_errmsg());
    k3_conv_free(c);
    k3_conv_free(d);
}

/* /export writes long tool text whole: a declaration and a call's arguments of 3,000 bytes each
 * (its formatter once cut every line at 511 bytes without a word). */
static void test_export_long(void) {
    k3_conv *c = k3_conv_new();
    char     md[600], q[3000], d[3000], args[3100], tools[3200];
    path_in(md, sizeof md, "long.md");
    memset(q, 'q', sizeof q - 1);
    memset(d, 'd', sizeof d - 1);
    q[sizeof q - 1] = d[sizeof d - 1] = 0;
    snprintf(args, sizeof args, "{\"q\": \"%s\"}", q);
    snprintf(tools, sizeof tools,
             "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"%s\"}}]", d);
    k3_msg       sys  = {.role = K3_ROLE_SYSTEM, .content = (char *)(uintptr_t) "", .tools = tools};
    k3_tool_call call = {.id = "call_1", .name = "f", .arguments = args};
    k3_msg       am   = {.role = K3_ROLE_ASSISTANT, .content = (char *)(uintptr_t) "", .tool_calls = &call};
    am.n_tool_calls   = 1;
    K3_ASSERT(c && !k3_conv_add_msg(c, &sys) && k3_conv_add(c, K3_ROLE_USER, "go", NULL) == K3_OK &&
              !k3_conv_add_msg(c, &am));
    T_CHECK(k3_conv_export_md(c, md) == K3_OK, "export Markdown with 3 kB of tool text");
    char *t = t_read_file(md, NULL);
    T_CHECK(t && strstr(t, args) && strstr(t, d),
            "the call's arguments and the declaration are exported whole (%zu bytes)", t ? strlen(t) : 0);
    free(t);
    k3_conv_free(c);
}

/* Tool turns: saved in the OpenAI shape, loaded back field for field, exported readably. */
static void test_tools(void) {
    k3_conv         *a = k3_conv_new(), *b = k3_conv_new();
    k3_conv_settings set;
    k3_conv_get_settings(a, &set);
    strcpy(set.tool_choice, "required");
    T_CHECK(k3_conv_set_settings(a, &set) == K3_OK, "tool_choice required is a valid setting");
    strcpy(set.tool_choice, "named");
    T_CHECK(k3_conv_set_settings(a, &set) == K3_ERR_ARG && strstr(k3_errmsg(), "tool_choice"),
            "tool_choice 'named' is rejected (%s)", k3_errmsg());
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
                        "\"type\":\"object\"}}}]";
    T_CHECK(k3_conv_set_tools(a, tools) == K3_OK && k3_conv_tools(a) && !strcmp(k3_conv_tools(a), tools),
            "tools set");
    k3_msg um = {.role      = K3_ROLE_USER,
                 .content   = (char *)(uintptr_t) "Weather in Paris and Rome?",
                 .tool_name = (char *)(uintptr_t) "ana"}; /* a speaker's name */
    k3_conv_add_msg(a, &um);
    k3_tool_call calls[] = {{.id = "call_a", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"},
                            {.id = "call_b", .name = "get_weather", .arguments = "{\"city\": \"Rome\"}"}};
    k3_msg       am      = {.role         = K3_ROLE_ASSISTANT,
                            .content      = (char *)(uintptr_t) "",
                            .reasoning    = (char *)(uintptr_t) "two",
                            .tool_calls   = calls,
                            .n_tool_calls = 2};
    k3_msg       t1      = {.role         = K3_ROLE_TOOL,
                            .content      = (char *)(uintptr_t) "25 C",
                            .tool_call_id = (char *)(uintptr_t) "call_b"};
    k3_msg       t2      = {.role         = K3_ROLE_TOOL,
                            .content      = (char *)(uintptr_t) "18 C",
                            .tool_call_id = (char *)(uintptr_t) "call_a",
                            .tool_name    = (char *)(uintptr_t) "get_weather"};
    T_CHECK(!k3_conv_add_msg(a, &am) && !k3_conv_add_msg(a, &t1) && !k3_conv_add_msg(a, &t2) &&
                k3_conv_count(a) == 4,
            "assistant with calls and two tool results added");
    char   late[]  = "[{\"type\":\"function\",\"function\":{\"name\":\"late\"}}]";
    k3_msg dyn     = {.role = K3_ROLE_SYSTEM, .content = (char *)(uintptr_t) "", .tools = late};
    k3_msg dyn_bad = dyn;
    dyn_bad.role   = K3_ROLE_USER;
    T_CHECK(!k3_conv_add_msg(a, &dyn) && k3_conv_add_msg(a, &dyn_bad) == K3_ERR_ARG && k3_conv_count(a) == 5,
            "a system message declaring tools in place is added; a user message cannot");
    k3_msg bad = {
        .role = K3_ROLE_USER, .content = (char *)(uintptr_t) "x", .tool_calls = calls, .n_tool_calls = 1};
    T_CHECK(k3_conv_add_msg(a, &bad) == K3_ERR_ARG && k3_conv_count(a) == 5,
            "tool calls on a user message are refused");
    char p[600], md[600];
    path_in(p, sizeof p, "tools.jsonl");
    path_in(md, sizeof md, "tools.md");
    T_CHECK(k3_conv_save(a, p) == K3_OK, "save with tools (%s)", k3_errmsg());
    char *txt = t_read_file(p, NULL);
    T_CHECK(txt &&
                strstr(txt, "\"tool_calls\":[{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":"
                            "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}") &&
                strstr(txt, "{\"role\":\"tool\",\"content\":\"25 C\",\"tool_call_id\":\"call_b\"}") &&
                strstr(txt, "\"tool_choice\":\"required\"") && strstr(txt, "\"tools\":[{"),
            "saved in the OpenAI shape: tool_calls with arguments as a string, role tool, tool_call_id, "
            "header tools");
    free(txt);
    T_CHECK(k3_conv_load(b, p, NULL) == K3_OK && k3_conv_count(b) == 5, "load it back (%s)", k3_errmsg());
    T_CHECK(k3_conv_msg(b, 4)->tools && strstr(k3_conv_msg(b, 4)->tools, "\"late\""),
            "the in-place declarations come back with their system message");
    T_CHECK(k3_conv_msg(b, 0)->tool_name && !strcmp(k3_conv_msg(b, 0)->tool_name, "ana"),
            "a user message's name comes back (it was dropped on load)");
    const k3_msg *m1 = k3_conv_msg(b, 1), *m2 = k3_conv_msg(b, 2), *m3 = k3_conv_msg(b, 3);
    k3_conv_get_settings(b, &set);
    T_CHECK(m1 && m1->n_tool_calls == 2 && !strcmp(m1->tool_calls[1].id, "call_b") &&
                !strcmp(m1->tool_calls[1].arguments, "{\"city\": \"Rome\"}") && m2 &&
                m2->role == K3_ROLE_TOOL && !strcmp(m2->tool_call_id, "call_b") && !m2->tool_name && m3 &&
                !strcmp(m3->tool_name, "get_weather") && !strcmp(set.tool_choice, "required") &&
                k3_conv_tools(b) && strstr(k3_conv_tools(b), "get_weather"),
            "loaded: calls, ids, arguments, tool results, tool_choice and tools as saved");
    T_CHECK(k3_conv_export_md(b, md) == K3_OK, "export with tools");
    txt = t_read_file(md, NULL);
    T_CHECK(
        txt &&
            strstr(txt, "**Tool call** `get_weather` (`call_a`):\n\n```json\n{\"city\": \"Paris\"}\n```") &&
            strstr(txt, "## Tool result: `get_weather` (call `call_a`)\n\n18 C\n"),
        "Markdown export shows each call with its arguments and each result");
    T_CHECK(txt && strstr(txt, "**Tools declared here:**"), "... and the in-place declarations");
    free(txt);
    T_CHECK(k3_conv_pop_reply(b) == 0,
            "/retry after tool results: nothing to pop (the history ends with a result)");
    k3_conv_free(a);
    k3_conv_free(b);
}

int main(void) {
    const char *t = getenv("K3_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/test-conv-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror(tmpdir);
        return 1;
    }
    test_edits();
    test_round_trip();
    test_unknown_fields();
    test_members_survive();
    test_tools();
    test_malformed();
    test_load_fifo();
    test_utf8();
    test_export_escape();
    test_export_controls();
    test_export_long();
    test_failures();
    test_full_disk();
    test_copy_gate();
    test_autosave_moved();
    test_copy_fields();
    test_copy_unsaved();
    test_crash();
    return t_done();
}
