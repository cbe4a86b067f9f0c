/* test-ui-ev.c: the event queue between the engine worker and the UI (ui/common/ev.c): token events
 * merge while the UI has not taken them, and the wake-up pipe gets a byte only when the UI said
 * it is about to sleep on it (ev_arm), never more than one per sleep, and never too few (a
 * producer thread against a consumer that sleeps in poll(): no wake-up is lost). */
#include "ev.h"
#include "test.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 when the wake-up pipe holds a byte now */
static int readable(ev_queue *q) {
    struct pollfd p = {ev_fd(q), POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

static int push_token(ev_queue *q, const char *text) {
    ui_ev e = {.type = EV_TOKEN, .ch = EV_CH_RESPONSE, .text = (char *)(uintptr_t)text};
    return ev_push(q, &e);
}

static void test_arm(void) {
    ev_queue *q = ev_queue_new(1);
    ui_ev     e;
    T_CHECK(q && ev_fd(q) >= 0, "a queue with a wake-up pipe");
    if (!q)
        return;
    push_token(q, "ab");
    push_token(q, "cd");
    push_token(q, "ef");
    T_CHECK(!readable(q), "pushes while the UI is busy (not armed) write nothing to the pipe");
    T_CHECK(ev_arm(q) == 1 && !readable(q), "ev_arm with events waiting says so instead of arming");
    ev_drain_fd(q, 0);
    int got = ev_pop(q, &e);
    T_CHECK(got && e.type == EV_TOKEN && e.text && !strcmp(e.text, "abcdef") && e.i == 3,
            "three tokens the UI had not taken are one event of 3 tokens: '%s'", got && e.text ? e.text : "");
    if (got)
        ev_free(&e);
    T_CHECK(!ev_pop(q, &e), "and the queue is empty then");

    T_CHECK(ev_arm(q) == 0 && !readable(q), "ev_arm on an empty queue arms it");
    push_token(q, "x");
    T_CHECK(readable(q), "the first push after arming writes the wake-up byte");
    push_token(q, "y");
    ui_ev info = {.type = EV_INFO, .text = "note"};
    ev_push(q, &info);
    char    b[8];
    ssize_t r = read(ev_fd(q), b, sizeof b);
    T_CHECK(r == 1, "one byte for the sleep, not one per push (%zd)", r);
    ev_drain_fd(q, 0);
    T_CHECK(!readable(q), "after ev_drain_fd the pipe is empty");
    int n = 0;
    while (ev_pop(q, &e)) {
        n++;
        ev_free(&e);
    }
    T_CHECK(n == 2, "the merged token and the notice are there (%d events)", n);
    ev_queue_free(q);
}

/* ==== a producer thread against a sleeping consumer ============================ */

#define N_TOK 20000

static void *producer(void *arg) {
    ev_queue *q = arg;
    for (int k = 0; k < N_TOK; k++) {
        push_token(q, "t");
        if (k % 64 == 0)
            usleep(100); /* let the consumer catch up and sleep now and then */
    }
    ui_ev d = {.type = EV_DONE};
    ev_push(q, &d);
    return NULL;
}

static void test_threads(void) {
    ev_queue *q = ev_queue_new(1);
    pthread_t th;
    if (!q || pthread_create(&th, NULL, producer, q) != 0) {
        T_CHECK(0, "start the producer thread");
        ev_queue_free(q);
        return;
    }
    long   tokens = 0, sleeps = 0, timeouts = 0, spurious = 0;
    int    done = 0;
    double end  = ev_now() + 30;
    while (!done && ev_now() < end) {
        int rd = 0;
        if (!ev_arm(q)) { /* nothing waiting: sleep until the producer's byte */
            struct pollfd p  = {ev_fd(q), POLLIN, 0};
            int           pr = poll(&p, 1, 2000);
            sleeps++;
            timeouts += pr == 0; /* a lost wake-up: the producer pushed without waking us */
            rd = pr > 0;
        }
        ev_drain_fd(q, rd);
        ui_ev e;
        int   n = 0;
        while (ev_pop(q, &e)) {
            n++;
            if (e.type == EV_TOKEN)
                tokens += e.i;
            else if (e.type == EV_DONE)
                done = 1;
            ev_free(&e);
        }
        spurious += rd && n == 0;
    }
    pthread_join(th, NULL);
    T_CHECK(done && tokens == N_TOK && timeouts == 0,
            "%d tokens from a thread reach a consumer sleeping on the pipe: %ld arrived, %ld sleeps, %ld "
            "lost wake-ups",
            N_TOK, tokens, sleeps, timeouts);
    T_CHECK(spurious <= sleeps / 10 + 1, "wake-ups with nothing to take are rare (%ld of %ld)", spurious,
            sleeps);
    T_CHECK(!readable(q) || (ev_drain_fd(q, 1), !readable(q)), "no byte is left behind in the pipe");
    ev_queue_free(q);
}

int main(void) {
    test_arm();
    test_threads();
    return t_done();
}
