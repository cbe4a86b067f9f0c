/* faultinj.c: an LD_PRELOAD shim that injects read and write faults into chosen files (tests
 * only).
 *
 * Built by tests/t-faultinj.sh with `cc -shared -fPIC` (not part of the Makefile's programs).
 * It intercepts pread, pread64, pwrite and pwrite64; a call is "matching" when the descriptor's
 * path (read from /proc/self/fd/N) contains FI_PATH and the call is of the mode's kind (the read
 * modes fault reads, the write modes writes; the other kind passes uncounted). Environment:
 *     FI_PATH=SUBSTRING  which files (unset: the shim does nothing)
 *     FI_MODE=eio        the read fails with EIO
 *             short      the read returns about half the bytes asked (a multiple of 4096 when
 *                        it can; O_DIRECT reads stay whole blocks): correct callers loop,
 *                        so the result must not change
 *             pass       no fault, only the FI_LOG line (to count the matching reads)
 *             trunc      the file looks truncated at FI_TRUNC_AT bytes (default: the offset of
 *                        the first faulted read): bytes past it read as end of file
 *             enospc     (a write mode) the write fails with ENOSPC, as on a full disk
 *             signal     (a write mode) the process sends itself signal FI_SIG (default 15,
 *                        SIGTERM) just before the write, which then goes through: a signal
 *                        that arrives while a file is being written, at a known point
 *     FI_AFTER=N         let the first N matching calls through untouched (default 0)
 *     FI_COUNT=M         fault at most M calls, then pass everything (default: no limit)
 *     FI_CTL=FILE        fault only while FILE exists (a test clears the fault by removing it)
 *     FI_LOG=FILE        append one line per injected fault: "MODE PATH OFFSET LENGTH"
 * Counters are atomic; the shim keeps no other state and never allocates.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static long long fi_seen;       /* matching reads so far */
static long long fi_faulted;    /* faults injected so far */
static long long fi_trunc = -1; /* trunc: apparent file size (-1: not fixed yet) */

static long long env_ll(const char *name, long long def) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : def;
}

static int fi_write_mode(void) {
    const char *mode = getenv("FI_MODE");
    return mode && (!strcmp(mode, "enospc") || !strcmp(mode, "signal"));
}

/* 1 when this call on fd (a write when wr) should be faulted; path gets the descriptor's path. */
static int fi_want(int fd, char *path, size_t n, int wr) {
    const char *pat = getenv("FI_PATH");
    if (!pat || !*pat || wr != fi_write_mode())
        return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t l = readlink(link, path, n - 1);
    if (l < 0)
        return 0;
    path[l] = 0;
    if (!strstr(path, pat))
        return 0;
    long long k = __atomic_fetch_add(&fi_seen, 1, __ATOMIC_SEQ_CST);
    if (k < env_ll("FI_AFTER", 0))
        return 0;
    const char *ctl = getenv("FI_CTL");
    if (ctl && *ctl && access(ctl, F_OK) != 0)
        return 0;
    long long lim = env_ll("FI_COUNT", -1);
    long long f   = __atomic_fetch_add(&fi_faulted, 1, __ATOMIC_SEQ_CST);
    return lim < 0 || f < lim;
}

static void fi_log(const char *mode, const char *path, off_t off, size_t len) {
    const char *log = getenv("FI_LOG");
    if (!log || !*log)
        return;
    char line[4200];
    int  n  = snprintf(line, sizeof line, "%s %s %lld %zu\n", mode, path, (long long)off, len);
    int  fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) < 0) { /* nothing to do */
    }
    close(fd);
}

static ssize_t fi_pread(pread_fn real, int fd, void *buf, size_t len, off_t off) {
    char path[4096];
    int  saved = errno;
    if (!real || !fi_want(fd, path, sizeof path, 0)) {
        errno = saved;
        return real ? real(fd, buf, len, off) : (errno = ENOSYS, -1);
    }
    const char *mode = getenv("FI_MODE");
    if (!mode)
        mode = "eio";
    fi_log(mode, path, off, len);
    if (!strcmp(mode, "pass"))
        return real(fd, buf, len, off);
    if (!strcmp(mode, "short")) {
        size_t n  = len / 2 & ~(size_t)4095;
        int    fl = fcntl(fd, F_GETFL);
        if (!n && !(fl >= 0 && (fl & O_DIRECT)))
            n = len > 1 ? len / 2 : len;
        if (!n)
            n = len; /* O_DIRECT reads come in whole blocks */
        return real(fd, buf, n, off);
    }
    if (!strcmp(mode, "trunc")) {
        long long expect = -1;
        long long at     = env_ll("FI_TRUNC_AT", -1);
        if (at < 0) {
            __atomic_compare_exchange_n(&fi_trunc, &expect, (long long)off, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
            at = __atomic_load_n(&fi_trunc, __ATOMIC_SEQ_CST);
        }
        if ((long long)off >= at)
            return 0;
        size_t n = (long long)(off + (off_t)len) > at ? (size_t)(at - (long long)off) : len;
        return real(fd, buf, n, off);
    }
    errno = EIO;
    return -1;
}

ssize_t pread(int fd, void *buf, size_t len, off_t off) {
    static pread_fn real;
    if (!real)
        real = (pread_fn)dlsym(RTLD_NEXT, "pread");
    return fi_pread(real, fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off) {
    static pread_fn real;
    if (!real)
        real = (pread_fn)dlsym(RTLD_NEXT, "pread64");
    return fi_pread(real, fd, buf, len, off);
}

static ssize_t fi_pwrite(pwrite_fn real, int fd, const void *buf, size_t len, off_t off) {
    char path[4096];
    int  saved = errno;
    if (!real || !fi_want(fd, path, sizeof path, 1)) {
        errno = saved;
        return real ? real(fd, buf, len, off) : (errno = ENOSYS, -1);
    }
    const char *mode = getenv("FI_MODE");
    fi_log(mode, path, off, len);
    if (!strcmp(mode, "signal")) {
        kill(getpid(), (int)env_ll("FI_SIG", SIGTERM));
        errno = saved;
        return real(fd, buf, len, off);
    }
    errno = ENOSPC;
    return -1;
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    static pwrite_fn real;
    if (!real)
        real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    return fi_pwrite(real, fd, buf, len, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) {
    static pwrite_fn real;
    if (!real)
        real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    return fi_pwrite(real, fd, buf, len, off);
}
