/* canceller.h: a thread that cancels a session over and over (test-model, test-batch).
 * t_cancel_start starts it and returns once it runs; it sleeps delay_ns, then calls
 * k3_session_cancel in a loop until t_cancel_stop, which joins it. */
#pragma once
#include "k3.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct t_canceller {
    k3_session *s;
    long        delay_ns;
    atomic_int  stop, started;
    pthread_t   th;
} t_canceller;

static void *t_cancel_main(void *arg) {
    t_canceller    *c  = arg;
    struct timespec ts = {c->delay_ns / 1000000000L, c->delay_ns % 1000000000L};
    atomic_store(&c->started, 1);
    if (c->delay_ns)
        nanosleep(&ts, NULL);
    while (!atomic_load(&c->stop))
        k3_session_cancel(c->s);
    return NULL;
}

static inline void t_cancel_start(t_canceller *c, k3_session *s, long delay_ns) {
    c->s        = s;
    c->delay_ns = delay_ns;
    atomic_init(&c->stop, 0);
    atomic_init(&c->started, 0);
    pthread_create(&c->th, NULL, t_cancel_main, c);
    while (!atomic_load(&c->started))
        ;
}

static inline void t_cancel_stop(t_canceller *c) {
    atomic_store(&c->stop, 1);
    pthread_join(c->th, NULL);
}
