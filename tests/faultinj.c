/* faultinj.c: an LD_PRELOAD shim that injects read faults into chosen files (tests only).
 *
 * Built by tests/t-faultinj.sh with `cc -shared -fPIC` (not part of the Makefile's programs).
 * It intercepts pread and pread64; a call is "matching" when the descriptor's path (read from
 * /proc/self/fd/N) contains FI_PATH. Environment:
 *     FI_PATH=SUBSTRING  which files (unset: the shim does nothing)
 *     FI_MODE=eio        the read fails with EIO
 *             short      the read returns about half the bytes asked (a multiple of 4096 when
 *                        it can; O_DIRECT reads stay whole blocks): correct callers loop,
 *                        so the result must not change
 *             pass       no fault, only the FI_LOG line (to count the matching reads)
 *             trunc      the file looks truncated at FI_TRUNC_AT bytes (default: the offset of
 *                        the first faulted read): bytes past it read as end of file
 *     FI_AFTER=N         let the first N matching reads through untouched (default 0)
 *     FI_COUNT=M         fault at most M reads, then pass everything (default: no limit)
 *     FI_CTL=FILE        fault only while FILE exists (a test clears the fault by removing it)
 *     FI_LOG=FILE        append one line per injected fault: "MODE PATH OFFSET LENGTH"
 * Counters are atomic; the shim keeps no other state and never allocates.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

static long long fi_seen;       /* matching reads so far */
static long long fi_faulted;    /* faults injected so far */
static long long fi_trunc = -1; /* trunc: apparent file size (-1: not fixed yet) */

static long long env_ll(const char *name, long long def) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : def;
}

/* 1 when this read on fd should be faulted; path gets the descriptor's path. */
static int fi_want(int fd, char *path, size_t n) {
    const char *pat = getenv("FI_PATH");
    if (!pat || !*pat)
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
    if (!real || !fi_want(fd, path, sizeof path)) {
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
