/* util.c: status strings, thread-local error messages, logging, integer settings from the
 * environment, allocation, clocks.
 *
 * The last error message lives in a thread-local buffer so concurrent sessions (UI thread,
 * engine worker, loader threads) never overwrite each other's detail.
 */
#include "k3-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char err_buf[1024];

const char *k3_version(void) {
    return K3_VERSION;
}

const char *k3_status_str(k3_status s) {
    switch (s) {
    case K3_OK:
        return "ok";
    case K3_ERR_IO:
        return "I/O error";
    case K3_ERR_FORMAT:
        return "malformed file";
    case K3_ERR_CONFIG:
        return "invalid configuration";
    case K3_ERR_NOMEM:
        return "out of memory";
    case K3_ERR_ARG:
        return "invalid argument";
    case K3_ERR_CONTEXT:
        return "context full";
    case K3_ERR_NUMERIC:
        return "numeric error (NaN/inf)";
    case K3_ERR_UNSUPPORTED:
        return "unsupported";
    case K3_ABORTED:
        return "cancelled";
    }
    return "unknown status";
}

const char *k3_errmsg(void) {
    return err_buf;
}

k3_status k3_err(k3_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return st;
}

void k3_err_prefix(const char *fmt, ...) {
    char    pre[256], old[sizeof err_buf - sizeof pre - 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    /* copy by hand: the message is cut on purpose when it would not fit */
    size_t n = strnlen(err_buf, sizeof old - 1);
    memcpy(old, err_buf, n);
    old[n]    = 0;
    size_t np = strlen(pre);
    memcpy(err_buf, pre, np);
    memcpy(err_buf + np, ": ", 2);
    memcpy(err_buf + np + 2, old, n + 1);
}

/* ---- logging ---- */

static k3_log_cb log_cb;
static void     *log_ud;

void k3_log_set_callback(k3_log_cb cb, void *ud) {
    log_cb = cb;
    log_ud = ud;
}

/* K3_VERBOSE, read once (not at every message); a malformed value counts as 0 here and
 * k3_init reports it. */
int k3_log_verbose(void) {
    static _Atomic int verbose = -1;
    int                v       = verbose;
    if (v < 0) {
        double      d = 0;
        const char *e = k3_setting_env_str(K3_SETTING_VERBOSE);
        v             = e && !k3_setting_parse(K3_SETTING_VERBOSE, K3_SRC_ENV, e, &d, NULL, 0) && d == 1;
        verbose       = v;
    }
    return v;
}

const char *k3_log_level_name(int level) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    return names[level & 3];
}

void k3_log(int level, const char *fmt, ...) {
    char    msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_cb) {
        log_cb(level, msg, log_ud);
        return;
    }
    if (level <= K3_LOG_LEVEL_WARN || k3_log_verbose())
        fprintf(stderr, "k3: %s: %s\n", k3_log_level_name(level), msg);
}

_Noreturn void k3_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "k3: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

/* ---- memory: the machine's and the process's cgroup limit ---- */

/* The number a cgroup file starts with; -1 when unreadable or not a number ("max": no limit). */
static double cg_num(const char *path) {
    FILE *f       = fopen(path, "r");
    char  buf[64] = "", *end;
    if (!f)
        return -1;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    double v = strtod(buf, &end);
    return end == buf ? -1 : v;
}

/* 1 when the comma-separated list l names w. */
static int cg_names(const char *l, const char *w) {
    for (size_t n = strlen(w); *l; l += strcspn(l, ",") + (l[strcspn(l, ",")] == ','))
        if (!strncmp(l, w, n) && (l[n] == ',' || !l[n]))
            return 1;
    return 0;
}

void k3_machine_memory(double *phys, double *limit, double *room) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *phys  = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    *limit = *room   = 0;
    const char *root = k3_setting_env_str(K3_SETTING_TEST_CGROUP);
    char        self[4200], fs[4200], line[4096], path[8500];
    snprintf(self, sizeof self, "%s%s", root ? root : "/proc", root ? "/self" : "/self/cgroup");
    snprintf(fs, sizeof fs, "%s", root ? root : "/sys/fs/cgroup");
    snprintf(fs + strlen(fs), sizeof fs - strlen(fs), "%s", root ? "/fs" : "");
    FILE *f = fopen(self, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) { /* ID:CONTROLLERS:PATH; v2's is 0::PATH */
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = *c2 = 0;
        int v1 = cg_names(c1 + 1, "memory"), v2 = !strcmp(line, "0") && c1 + 1 == c2;
        if (!v1 && !v2)
            continue;
        for (char *cg = c2 + 1;;) { /* the process's cgroup, then each one above it, the root too */
            const char *at = strcmp(cg, "/") ? cg : "";
            snprintf(path, sizeof path, "%s%s%s/%s", fs, v1 ? "/memory" : "", at,
                     v1 ? "memory.limit_in_bytes" : "memory.max");
            double mx = cg_num(path);
            if (mx > 0 && mx < 0x1p60) { /* v1 writes no limit as about 2^63 */
                snprintf(path, sizeof path, "%s%s%s/%s", fs, v1 ? "/memory" : "", at,
                         v1 ? "memory.usage_in_bytes" : "memory.current");
                double cur = cg_num(path), r = mx - (cur > 0 ? cur : 0);
                r      = r >= 1 ? r : 1; /* full: a limit still, of (almost) no room */
                *limit = *limit == 0 || mx < *limit ? mx : *limit;
                *room  = *room == 0 || r < *room ? r : *room;
            }
            char *slash = strrchr(cg, '/');
            if (!strcmp(cg, "/") || !slash)
                break;
            slash[slash == cg] = 0; /* "/a" goes on to "/": a v1 container's own limit is at the root */
        }
    }
    fclose(f);
}

/* ---- allocation ---- */

/* The one doubling: *cap (or first, when 0) doubled until it holds need, the last step cut to
 * max elements (or PTRDIFF_MAX bytes, past which no object can be) when doubling would pass it:
 * an int array reaches INT_MAX, not only the last power of two below it. NULL when need itself
 * is past that bound, before any allocation is tried; *cap is set only when the array was
 * (re)allocated. */
void *k3_grow_max(void *p, size_t *cap, size_t need, size_t elem, size_t first, size_t max) {
    if (need <= *cap && *cap > 0)
        return p;
    if (!elem)
        return NULL;
    if (max > PTRDIFF_MAX / elem)
        max = PTRDIFF_MAX / elem;
    if (need > max)
        return NULL;
    size_t c = *cap > 0 ? *cap : first > 0 ? first : 1;
    while (c < need)
        c = c > max / 2 ? max : c * 2;
    c       = c > max ? max : c; /* a first past max */
    void *q = realloc(p, c * elem);
    if (q)
        *cap = c;
    return q;
}

void *k3_grow_z(void *p, size_t *cap, size_t need, size_t elem, size_t first) {
    return k3_grow_max(p, cap, need, elem, first, SIZE_MAX);
}

void *k3_grow(void *p, int *cap, size_t need, size_t elem, int first) {
    size_t c = *cap > 0 ? (size_t)*cap : 0;
    void  *q = k3_grow_max(p, &c, need, elem, first > 0 ? (size_t)first : 1, INT_MAX);
    if (q)
        *cap = (int)c;
    return q;
}

int k3_buf_add(k3_buf *b, const char *s, size_t n) {
    if (n > SIZE_MAX / 2 - b->n) {
        b->oom = 1;
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return -1;
        }
        b->p   = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int k3_buf_read(k3_buf *b, FILE *f) {
    size_t n0 = b->n, r;
    char   chunk[65536];
    int    err = 0;
    errno      = 0;
    while (!err && (r = fread(chunk, 1, sizeof chunk, f)) > 0)
        err = k3_buf_add(b, chunk, r) ? ENOMEM : 0;
    if (!err && ferror(f))
        err = errno ? errno : EIO;
    if (!err && !b->p && k3_buf_add(b, "", 0)) /* an empty stream: "" */
        err = ENOMEM;
    if (err && b->p) /* what this call appended goes */
        b->p[b->n = n0] = 0;
    return err;
}

int k3_buf_printf(k3_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || k3_buf_add(b, "", 0)) /* p allocated */
        return -1;
    size_t at = b->n;
    if (b->cap - at < (size_t)n + 1) { /* room for the text and its NUL */
        char *tmp = malloc((size_t)n + 1);
        if (!tmp)
            return b->oom = 1, -1;
        va_start(ap, fmt);
        vsnprintf(tmp, (size_t)n + 1, fmt, ap);
        va_end(ap);
        int rc = k3_buf_add(b, tmp, (size_t)n);
        free(tmp);
        return rc;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + at, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
    return 0;
}

void *k3_malloc(size_t n) {
    return malloc(n ? n : 1);
}

void *k3_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

/* Huge pages for large blocks (K3_HUGEPAGES, default 1). A block of K3_HUGE_MIN bytes or more is
 * aligned to 2 MiB and advised MADV_HUGEPAGE (transparent huge pages: "madvise" is a common
 * default of /sys/kernel/mm/transparent_hugepage/enabled), so a weight matrix, an expert slot or
 * a chunk buffer is mapped in 2 MiB pages where the kernel has them: one TLB entry and one page
 * fault per 2 MiB instead of 512, and one trap per 2 MiB where a hypervisor or the kernel's
 * access sampling (DAMON) has cleared the pages' accessed bits. Measured on a 2-vCPU VM whose
 * kdamond samples physical memory: a 1 GiB buffer read after 60 s untouched ran at 3.5 GB/s in
 * 4 KiB pages against 24-30 GB/s warm; in huge pages, 21.8 (BENCHMARKS.md, "cold memory").
 * The advice is a hint: refused or unsupported, the block is simply in small pages. */
enum { HUGE_ALIGN = 2u << 20 };
#define K3_HUGE_MIN ((size_t)4 << 20)
static _Atomic int huge_on = -1; /* -1: K3_HUGEPAGES not read yet (loader threads allocate too) */

k3_status k3_hugepages_init(void) {
    int on = 1;
    if (k3_setting_env_int(K3_SETTING_HUGEPAGES, &on))
        return K3_ERR_ARG;
    huge_on = on;
    return K3_OK;
}

void *k3_aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    if (huge_on < 0 && k3_hugepages_init())
        huge_on = 1; /* a bad value is reported by k3_params_default; allocation goes on */
    const int huge = huge_on && n >= K3_HUGE_MIN && align <= HUGE_ALIGN;
    if (posix_memalign(&p, huge ? HUGE_ALIGN : align, n ? n : align) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (huge)
        (void)madvise(p, (n + HUGE_ALIGN - 1) & ~(size_t)(HUGE_ALIGN - 1), MADV_HUGEPAGE);
#endif
    return p;
}

char *k3_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char  *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int k3_open_read(const char *path, int flags) {
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags), fl = f >= 0 ? fcntl(f, F_GETFL) : -1;
    if (fl >= 0)
        fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    return f;
}

int k3_open_regular_fd(const char *path, int flags, uint64_t *size, const char **kind) {
    *kind = NULL;
    int f = k3_open_read(path, flags);
    if (f < 0)
        return -1;
    struct stat sb;
    if (fstat(f, &sb) < 0) {
        int e = errno;
        close(f);
        errno = e;
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        *kind = S_ISFIFO(sb.st_mode)   ? "a FIFO"
                : S_ISDIR(sb.st_mode)  ? "a directory"
                : S_ISCHR(sb.st_mode)  ? "a character device"
                : S_ISBLK(sb.st_mode)  ? "a block device"
                : S_ISSOCK(sb.st_mode) ? "a socket"
                                       : "not a file";
        return -2;
    }
    *size = (uint64_t)sb.st_size;
    return f;
}

k3_status k3_open_regular(const char *path, const char *what, int *fd, uint64_t *size, int *missing) {
    *fd = -1;
    if (missing)
        *missing = 0;
    const char *kind;
    int         f = k3_open_regular_fd(path, 0, size, &kind);
    if (f == -2)
        return k3_err(K3_ERR_IO, "%s: not a regular file (%s)", what, kind);
    if (f < 0) {
        if (missing && errno == ENOENT) {
            *missing = 1;
            return K3_OK;
        }
        int e = errno; /* the path too, where what is a short name: the user sees which directory */
        return strcmp(what, path) ? k3_err(K3_ERR_IO, "%s: cannot open %s: %s", what, path, strerror(e))
                                  : k3_err(K3_ERR_IO, "%s: cannot open: %s", what, strerror(e));
    }
    *fd = f;
    return K3_OK;
}

k3_status k3_read_regular(const char *path, const char *what, char **buf, size_t *len, int *missing) {
    *buf = NULL;
    *len = 0;
    int       fd;
    uint64_t  size;
    k3_status st = k3_open_regular(path, what, &fd, &size, missing);
    if (st || fd < 0)
        return st;
    char *b = size < SIZE_MAX ? k3_malloc((size_t)size + 1) : NULL;
    if (!b) {
        close(fd);
        return k3_err(K3_ERR_NOMEM, "%s: no memory for its %llu bytes", what, (unsigned long long)size);
    }
    size_t n = 0;
    while (n < size) { /* a file that shrinks meanwhile is read as far as it goes */
        ssize_t r = read(fd, b + n, (size_t)size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = k3_err(K3_ERR_IO, "%s: read failed at offset %zu: %s", what, n, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (st) {
        free(b);
        return st;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return K3_OK;
}

uint64_t k3_fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t             h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The slot of name: the item's holding it, or the empty one where it would go. */
static uint32_t *names_slot(const k3_names *t, const char *name) {
    size_t i = (size_t)k3_fnv1a(name, strlen(name)) & (t->cap - 1);
    while (t->slot[i] && strcmp(t->name_of(t->ctx, t->slot[i] - 1), name))
        i = (i + 1) & (t->cap - 1);
    return &t->slot[i];
}

int k3_names_add(k3_names *t, size_t item, size_t *dup) {
    if (item >= UINT32_MAX - 1)
        return -1;
    if ((t->n + 1) * 2 > t->cap) { /* grow: each item goes to its slot in a table twice as big */
        size_t    cap = t->cap ? t->cap * 2 : 1024;
        uint32_t *old = t->slot, *ns = calloc(cap, sizeof *ns);
        if (!ns)
            return -1;
        size_t oc = t->cap;
        t->slot = ns, t->cap = cap;
        for (size_t i = 0; i < oc; i++)
            if (old[i])
                *names_slot(t, t->name_of(t->ctx, old[i] - 1)) = old[i];
        free(old);
    }
    const char *name = t->name_of(t->ctx, item);
    uint32_t   *s    = names_slot(t, name);
    if (*s) {
        if (dup)
            *dup = *s - 1;
        return 1;
    }
    *s = (uint32_t)item + 1;
    t->n++;
    return 0;
}

int k3_names_reserve(k3_names *t, size_t n) {
    size_t cap = 1024;
    while (cap < (n + 1) * 2)
        cap *= 2;
    if (t->n || cap <= t->cap)
        return 0; /* names in it already: it grows as it must */
    uint32_t *ns = calloc(cap, sizeof *ns);
    if (!ns)
        return -1;
    free(t->slot);
    t->slot = ns, t->cap = cap;
    return 0;
}

long k3_names_find(const k3_names *t, const char *name) {
    if (!t->cap)
        return -1;
    uint32_t s = *names_slot(t, name);
    return s ? (long)s - 1 : -1;
}

void k3_names_free(k3_names *t) {
    free(t->slot);
    t->slot = NULL;
    t->cap = t->n = 0;
}

double k3_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- float formats ---- */

float k3_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t k3_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
