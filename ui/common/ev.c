/* ev.c: mutex + condvar event queue with a self-pipe wake-up (see ev.h). */
#include "ev.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ev_queue {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    ui_ev          *ring; /* (cap) events, [head, head + n) modulo cap */
    size_t          cap, head, n;
    int             merge_ok;  /* the tail EV_TOKEN may still take more text */
    int             pfd[2];    /* wake-up pipe, -1 when none                  */
    int             armed;     /* the consumer sleeps on the pipe (ev_arm)    */
    int             signalled; /* a wake-up byte is in the pipe               */
};

double ev_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ev_queue *ev_queue_new(int with_pipe) {
    ev_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->pfd[0] = q->pfd[1] = -1;
    if (with_pipe) {
        if (pipe(q->pfd) != 0) {
            free(q);
            return NULL;
        }
        for (int i = 0; i < 2; i++) {
            fcntl(q->pfd[i], F_SETFL, fcntl(q->pfd[i], F_GETFL) | O_NONBLOCK);
            fcntl(q->pfd[i], F_SETFD, FD_CLOEXEC);
        }
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    return q;
}

void ev_free(ui_ev *e) {
    free(e->text);
    free(e->text2);
    e->text = e->text2 = NULL;
}

void ev_queue_free(ev_queue *q) {
    if (!q)
        return;
    for (size_t k = 0; k < q->n; k++)
        ev_free(&q->ring[(q->head + k) % q->cap]);
    free(q->ring);
    if (q->pfd[0] >= 0) {
        close(q->pfd[0]);
        close(q->pfd[1]);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static char *dup_or_null(const char *s, int *fail) {
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *fail = 1;
    return d;
}

/* Append text to the tail token event; 0 on success. Called with the lock held. */
static int merge_token(ev_queue *q, const ui_ev *e) {
    if (!q->merge_ok || q->n == 0 || e->type != EV_TOKEN || !e->text)
        return -1;
    ui_ev *t = &q->ring[(q->head + q->n - 1) % q->cap];
    if (t->type != EV_TOKEN || t->ch != e->ch || !t->text)
        return -1;
    size_t a = strlen(t->text), b = strlen(e->text);
    char  *s = realloc(t->text, a + b + 1);
    if (!s)
        return -1;
    memcpy(s + a, e->text, b + 1);
    t->text = s;
    t->i += e->i ? e->i : 1; /* tokens merged into this event */
    return 0;
}

int ev_push(ev_queue *q, const ui_ev *e) {
    int fail = 0, wake;
    pthread_mutex_lock(&q->mu);
    /* one byte per sleep of the consumer: a queue that fills while the UI is drawing, or while it
     * sleeps to a frame that is due anyway, costs no write and no read */
    wake     = q->armed && q->pfd[1] >= 0;
    q->armed = 0;
    q->signalled |= wake;
    if (merge_token(q, e) == 0)
        goto done;
    if (q->n == q->cap) {
        size_t cap  = q->cap ? q->cap * 2 : 64;
        ui_ev *ring = malloc(cap * sizeof *ring);
        if (!ring) {
            pthread_mutex_unlock(&q->mu);
            return -1;
        }
        for (size_t k = 0; k < q->n; k++)
            ring[k] = q->ring[(q->head + k) % q->cap];
        free(q->ring);
        q->ring = ring;
        q->cap  = cap;
        q->head = 0;
    }
    ui_ev *d = &q->ring[(q->head + q->n) % q->cap];
    *d       = *e;
    d->text  = dup_or_null(e->text, &fail);
    d->text2 = dup_or_null(e->text2, &fail);
    if (d->type == EV_TOKEN && !d->i)
        d->i = 1;
    if (d->t == 0)
        d->t = ev_now();
    if (fail) {
        ev_free(d);
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    q->n++;
    q->merge_ok = 1;
done:
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (wake) {
        char    c = 1;
        ssize_t r;
        do
            r = write(q->pfd[1], &c, 1);
        while (r < 0 && errno == EINTR); /* EAGAIN: the pipe is full, the reader wakes anyway */
    }
    return 0;
}

int ev_push_text(ev_queue *q, int type, const char *text) {
    ui_ev e = {.type = type, .text = (char *)(uintptr_t)text};
    return ev_push(q, &e);
}

static int pop_locked(ev_queue *q, ui_ev *out) {
    if (q->n == 0)
        return 0;
    *out    = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    q->merge_ok = q->n > 0;
    return 1;
}

int ev_pop(ev_queue *q, ui_ev *out) {
    pthread_mutex_lock(&q->mu);
    int got = pop_locked(q, out);
    pthread_mutex_unlock(&q->mu);
    return got;
}

int ev_wait(ev_queue *q, ui_ev *out, double timeout_s) {
    pthread_mutex_lock(&q->mu);
    if (timeout_s < 0) {
        while (q->n == 0)
            pthread_cond_wait(&q->cv, &q->mu);
    } else if (q->n == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + timeout_s;
        ts.tv_sec  = (time_t)end;
        ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
        while (q->n == 0)
            if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
                break;
    }
    int got = pop_locked(q, out);
    pthread_mutex_unlock(&q->mu);
    return got;
}

int ev_fd(const ev_queue *q) {
    return q->pfd[0];
}

int ev_arm(ev_queue *q) {
    pthread_mutex_lock(&q->mu);
    int waiting = q->n > 0;
    q->armed    = !waiting;
    pthread_mutex_unlock(&q->mu);
    return waiting;
}

void ev_drain_fd(ev_queue *q, int readable) {
    char buf[64];
    pthread_mutex_lock(&q->mu);
    int sig      = q->signalled;
    q->signalled = 0;
    q->armed     = 0;
    pthread_mutex_unlock(&q->mu);
    /* the producer writes its byte just after setting the flag, so a read may come too early and
     * leave the byte for later: poll() then says readable, and that read takes it */
    if ((sig || readable) && q->pfd[0] >= 0)
        while (read(q->pfd[0], buf, sizeof buf) < 0 && errno == EINTR) {
        }
}
