/* test-ui-rescue.c: the two writers of a turn's autosave (ui/common/engine.c). When a quit gives up
 * on a blocked worker, ue_rescue writes the turn from a thread of its own; a worker that then comes
 * back ends its turn and autosaves too. Both writing made the turn twice (here: two files, as the
 * first turn starts one). The mock's "stall-rescue" holds its worker after the first token until
 * the rescue took the turn, so the interleaving is forced by events, not by timing: the worker's
 * end of turn (its EV_ACK) comes after the rescue, and the file must hold the turn once, as the
 * rescue wrote it. The other order (the worker wrote first, then blocked) is t-tui-quit's 8. */
#include "engine.h"
#include "k3.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Waits (up to s seconds) for an event of type on q, dropping the others; 1 when it came. */
static int wait_ev(ev_queue *q, int type, double s) {
    double end = ev_now() + s;
    ui_ev  e;
    while (ev_now() < end) {
        if (!ev_wait(q, &e, 0.25))
            continue;
        int got = e.type == type;
        ev_free(&e);
        if (got)
            return 1;
    }
    return 0;
}

/* A mock engine on script text, autosaving under data (XDG_DATA_HOME); NULL when it does not
 * start (a FAIL line said so). */
static ue *mock_start(const char *path, const char *text, const char *data, const ui_opts *o, ev_queue *q,
                      const char *what) {
    setenv("XDG_DATA_HOME", data, 1);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    ue *u = q ? ue_start(o, q) : NULL;
    T_CHECK(u && wait_ev(q, EV_READY, 60), "%s starts", what);
    return u;
}

/* The one file in data's autosave directory (out: "" when none). */
static void autosave_file(const char *data, char *out, size_t n) {
    char kdir[700];
    snprintf(kdir, sizeof kdir, "%s/k3chat", data);
    out[0]           = 0;
    DIR           *d = opendir(kdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            snprintf(out, n, "%s/%s", kdir, e->d_name);
    if (d)
        closedir(d);
}

int main(void) {
    const char *t = getenv("K3_TMP");
    char        dir[512], path[700], data[600], files[800] = "";
    snprintf(dir, sizeof dir, "%s/rescue-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    snprintf(data, sizeof data, "%s/data", dir);
    setenv("XDG_DATA_HOME", data, 1); /* the autosave goes to data/k3chat */
    snprintf(path, sizeof path, "%s/mock.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fputs("autosave\ndelay 0\nstall-rescue 600000\nresponse xyzzy words\n", f);
    fclose(f);
    setenv("K3_MOCK", path, 1);

    ui_opts   o = {.dir = "/no/model", .max_tokens = -1, .think = -1, .temp = NAN, .top_p = NAN};
    ev_queue *q = ev_queue_new(0);
    ue       *u = q ? ue_start(&o, q) : NULL;
    T_CHECK(u && wait_ev(q, EV_READY, 60), "the mock engine starts");
    if (!u)
        return t_done();
    ue_gen g = {.temp = 1, .top_p = 1, .think = 0, .effort = 2, .max_tokens = -1};
    ue_send(u, "hello", &g);
    T_CHECK(wait_ev(q, EV_TOKEN, 60), "the turn's first token (the worker then stalls)");
    char msg[1024];
    int  r = ue_rescue(u, "xyz", NULL, 60, msg, sizeof msg);
    T_CHECK(r == 0 && strstr(msg, "autosaved in"), "the rescue saves the turn: %s", msg);
    T_CHECK(wait_ev(q, EV_ACK, 60), "the worker comes back and ends its turn");
    ue_close(u);

    /* the autosave directory: one file, holding the turn once, as the rescue wrote it */
    char kdir[700];
    snprintf(kdir, sizeof kdir, "%s/k3chat", data);
    DIR           *d = opendir(kdir);
    struct dirent *e;
    int            n         = 0;
    char           one[1024] = "";
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        snprintf(one, sizeof one, "%s/%s", kdir, e->d_name);
        size_t l = strlen(files);
        snprintf(files + l, sizeof files - l, " %s", e->d_name);
    }
    if (d)
        closedir(d);
    T_CHECK(n == 1, "one autosave file, not the rescue's and the worker's (%d:%s)", n, files);
    k3_conv  *c  = k3_conv_new();
    k3_status st = n == 1 ? k3_conv_load(c, one, NULL) : K3_ERR_IO;
    T_CHECK(!st && k3_conv_count(c) == 2 && !strcmp(k3_conv_msg(c, 0)->content, "hello") &&
                !strcmp(k3_conv_msg(c, 1)->content, "xyz") && k3_conv_msg(c, 1)->interrupted,
            "it holds the message and the answer the rescue saw, interrupted, once (%d messages; %s)",
            st ? -1 : k3_conv_count(c), st ? k3_errmsg() : "ok");
    k3_conv_free(c);
    ev_queue_free(q);

    /* The other order with a failed write: the worker took the turn's autosave, the write failed
     * (here the file became a directory; a full disk alike), and it blocked before it told the
     * UI. The rescue, which then writes nothing, said the engine "had autosaved the turn itself"
     * and returned 0: the user quit believing the conversation was on disk. It must say that it
     * is not, naming the file and the error, and return -1. */
    snprintf(data, sizeof data, "%s/data2", dir);
    q = ev_queue_new(0);
    u = mock_start(
        path, "autosave\ndelay 0\nresponse first answer\n---\nstall-end 600000\nresponse second answer\n",
        data, &o, q, "the second mock engine");
    if (!u)
        return t_done();
    ue_send(u, "one", &g);
    T_CHECK(wait_ev(q, EV_ACK, 60), "the first turn ends, autosaved");
    autosave_file(data, one, sizeof one);
    T_CHECK(one[0] && unlink(one) == 0 && mkdir(one, 0700) == 0, "the autosave file %s becomes a directory",
            one);
    ue_send(u, "two", &g);
    T_CHECK(wait_ev(q, EV_ERROR, 60),
            "the worker's autosave of the second turn fails (EV_ERROR), then it stalls");
    r = ue_rescue(u, "second answer", NULL, 60, msg, sizeof msg);
    T_CHECK(r == -1 && strstr(msg, "not saved") && strstr(msg, one) && strstr(msg, strerror(EISDIR)),
            "the rescue says the turn is not saved, naming the file and the error (%d: %s)", r, msg);
    ue_stop(u);
    ue_abandon(u); /* stalled for good: left behind, as a quit does; its queue stays */

    /* What is on disk while an answer is under way (a crash, the OOM killer, a power cut then
     * keeps it): the user's message was written only with the answer, at the turn's end, so a
     * turn of minutes that never ended lost what was typed. Now it is on disk before the answer
     * begins. The worker stalls after its first token for good, as one killed there would. */
    snprintf(data, sizeof data, "%s/data3", dir);
    ev_queue *q3 = ev_queue_new(0);
    ue *u3 = mock_start(path, "autosave\ndelay 0\nstall 600000\nresponse an answer never finished\n", data,
                        &o, q3, "the third mock engine");
    if (!u3)
        return t_done();
    ue_send(u3, "a long question typed with care", &g);
    T_CHECK(wait_ev(q3, EV_TOKEN, 60), "the answer has begun (the worker then stalls)");
    autosave_file(data, one, sizeof one);
    c  = k3_conv_new();
    st = one[0] ? k3_conv_load(c, one, NULL) : K3_ERR_IO;
    T_CHECK(!st && k3_conv_count(c) == 1 &&
                !strcmp(k3_conv_msg(c, 0)->content, "a long question typed with care"),
            "the autosave holds the user's message while the answer is under way (%s)",
            one[0] ? (st ? k3_errmsg() : "loaded") : "no autosave file");
    k3_conv_free(c);
    ue_stop(u3);
    ue_abandon(u3);
    return t_done();
}
