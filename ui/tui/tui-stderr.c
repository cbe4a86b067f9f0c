/* tui-stderr.c: stderr while the full-screen chat owns the terminal.
 *
 * Anything written to fd 2 while curses draws (a library's probe: the Vulkan loader with
 * VK_LOADER_DEBUG, a Mesa driver's warning; a stray fprintf) would land wherever the cursor is
 * and paint over the chat's rows until they are drawn again. So while the screen is ours, fd 2 is
 * the write end of a pipe when it was a terminal (a file or a pipe is left alone: nothing paints
 * there, and a log keeps all); a thread reads it and sends what comes, line by line, to the
 * display as notices, each line after "stderr: " (EV_INFO through the event queue: drawn through
 * the one text path, where control characters are not drawn). A partial line waits 0.1 s for its end.
 *
 * A notice lives on the chat's screen, which goes when the chat ends (the alternate screen), and
 * a line that comes in the chat's last moments may never be drawn (read, queued, and the display
 * gone before it took it). So the reader also keeps every byte it reads (the first KEPT_MAX), and
 * at the end, once fd 2 is the terminal again (after endwin, before the engine thread is joined)
 * and the reader has drained the pipe into that store, all of it is written there in the order
 * it came, through txt_term_put (control characters escaped, as everywhere outside text reaches
 * a terminal): nothing written to stderr while the chat ran is lost, the notices only showed it
 * as it came. The pipe's write end does not block: a writer that outruns the reader (1 MiB of pipe)
 * loses text rather than hangs the engine. An abort (K3_ASSERT) puts fd 2 back and passes on what
 * was kept and what the pipe still holds before the process dies, so its message is not lost.
 */
#include "tui-int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { KEPT_MAX = 1 << 20 }; /* bytes of stderr kept for the end (pages are touched as used) */

static struct {
    int           saved; /* the terminal's fd 2 (a dup), -1 when not redirected       */
    int           rd;    /* the pipe's read end                                      */
    pthread_t     th;
    ev_queue     *q;
    atomic_int    gone;   /* the display has ended: no more notices                   */
    char         *kept;   /* (KEPT_MAX) what came, for the terminal at the end          */
    atomic_size_t n_kept; /* bytes of kept written (the reader publishes, on_abort reads) */
    size_t        lost;   /* bytes that came after kept was full                       */
} ec = {.saved = -1, .rd = -1};

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Pass on p[0..n) (whole lines, or a partial one that timed out): kept for the end, and a
 * notice while the display runs. Only the reader thread calls this. */
static void emit(const char *p, size_t n) {
    size_t k = atomic_load_explicit(&ec.n_kept, memory_order_relaxed),
           c = n < KEPT_MAX - k ? n : KEPT_MAX - k;
    memcpy(ec.kept + k, p, c);
    atomic_store_explicit(&ec.n_kept, k + c, memory_order_release);
    ec.lost += n - c;
    if (atomic_load(&ec.gone))
        return;
    char   msg[2 * 4096];
    size_t o = 0;
    while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
        n--;
    for (size_t i = 0; i < n && o + 16 < sizeof msg;) { /* "stderr: " before each line */
        const char *eol = memchr(p + i, '\n', n - i);
        size_t      len = eol ? (size_t)(eol - (p + i)) : n - i;
        o += (size_t)snprintf(msg + o, sizeof msg - o, "%sstderr: %.*s", o ? "\n" : "", (int)len, p + i);
        i += len + 1;
    }
    if (o)
        ev_push_text(ec.q, EV_INFO, msg);
}

static void *reader(void *ud) {
    (void)ud;
    char   buf[4096];
    size_t n = 0;
    for (;;) {
        struct pollfd p  = {ec.rd, POLLIN, 0};
        int           pr = poll(&p, 1, n ? 100 : -1);
        if (pr < 0 && errno == EINTR)
            continue;
        ssize_t r = 0;
        if (pr > 0) {
            r = read(ec.rd, buf + n, sizeof buf - n);
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
        }
        int end = pr < 0 || (pr > 0 && r <= 0); /* every write end closed (or an error) */
        if (r > 0)
            n += (size_t)r;
        size_t cut = n; /* all of it on a timeout, at the end or with the buffer full */
        if (pr > 0 && !end && n < sizeof buf) {
            const char *nl = memrchr(buf, '\n', n);
            cut            = nl ? (size_t)(nl - buf) + 1 : 0;
        }
        if (cut) {
            emit(buf, cut);
            memmove(buf, buf + cut, n - cut);
            n -= cut;
        }
        if (end)
            return NULL;
    }
}

/* SIGABRT (an assertion): the terminal back on fd 2 with what was kept and what the pipe holds,
 * then the default action. Only async-signal-safe calls. */
static void on_abort(int sig) {
    if (ec.saved >= 0) {
        char    b[4096];
        ssize_t r;
        dup2(ec.saved, 2);
        write_all(2, ec.kept, atomic_load_explicit(&ec.n_kept, memory_order_acquire));
        while ((r = read(ec.rd, b, sizeof b)) > 0)
            write_all(2, b, (size_t)r);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

int tui_stderr_begin(ev_queue *q) {
    int p[2];
    if (!isatty(2) || !(ec.kept = malloc(KEPT_MAX)))
        return -1;
    if (pipe2(p, O_CLOEXEC) != 0) {
        free(ec.kept);
        ec.kept = NULL;
        return -1;
    }
    ec.q = q;
    atomic_store(&ec.gone, 0);
    atomic_store(&ec.n_kept, 0);
    ec.lost = 0;
    fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* room for a burst (a loader's debug output) */
    fcntl(p[0], F_SETFL, O_NONBLOCK);   /* the reader polls; on_abort must not block   */
    fcntl(p[1], F_SETFL, O_NONBLOCK);   /* a full pipe loses text, never hangs a writer */
    ec.saved = fcntl(2, F_DUPFD_CLOEXEC, 3);
    ec.rd    = p[0];
    if (ec.saved < 0 || pthread_create(&ec.th, NULL, reader, NULL) != 0) {
        if (ec.saved >= 0)
            close(ec.saved);
        close(p[0]);
        close(p[1]);
        free(ec.kept);
        ec.kept  = NULL;
        ec.saved = ec.rd = -1;
        return -1;
    }
    fflush(stderr);
    dup2(p[1], 2); /* fd 2 has no close-on-exec: a child would still write to the pipe */
    close(p[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_abort;
    sigaction(SIGABRT, &sa, NULL);
    return 0;
}

void tui_stderr_end(void) {
    if (ec.saved < 0)
        return;
    fflush(stderr);
    atomic_store(&ec.gone, 1); /* no more notices: the display takes no more events */
    dup2(ec.saved, 2);         /* the last write end closes: the reader drains and ends */
    pthread_join(ec.th, NULL);
    signal(SIGABRT, SIG_DFL);
    /* all that came, in order, through the one escaping function: fd 2 is a terminal here, and
     * what a library wrote may quote a file's or a server's text */
    txt_esc st = {0};
    txt_term_put(stderr, &st, ec.kept, atomic_load(&ec.n_kept));
    txt_term_end(stderr, &st);
    fflush(stderr);
    if (ec.lost)
        fprintf(stderr,
                "k3chat: %zu more bytes came on stderr while the chat ran (the first %d MiB are above)\n",
                ec.lost, KEPT_MAX >> 20);
    close(ec.rd);
    close(ec.saved);
    free(ec.kept);
    ec.kept  = NULL;
    ec.saved = ec.rd = -1;
}
