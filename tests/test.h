/* test.h: tiny assertion macros for C tests (redis test_cond style).
 *
 * Each check prints one line, "PASS: desc" or "FAIL: desc (file:line)", which
 * tests/run.sh counts. T_SKIP prints "SKIP: why". t_done() returns the exit code.
 * Usage:
 *     T_CHECK(x == 3, "x is three (got %d)", x);
 *     T_NEAR(a, b, 1e-6, "logit 0");
 *     return t_done();
 */
#pragma once
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed_, t_passed_;

#define T_CHECK(cond, ...)                                                                                   \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            t_passed_++;                                                                                     \
            printf("PASS: ");                                                                                \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        } else {                                                                                             \
            t_failed_++;                                                                                     \
            printf("FAIL: ");                                                                                \
            printf(__VA_ARGS__);                                                                             \
            printf(" (%s:%d)\n", __FILE__, __LINE__);                                                        \
        }                                                                                                    \
        fflush(stdout);                                                                                      \
    } while (0)

#define T_NEAR(a, b, tol, ...) T_CHECK(fabs((double)(a) - (double)(b)) <= (tol), __VA_ARGS__)

#define T_SKIP(...)                                                                                          \
    do {                                                                                                     \
        printf("SKIP: ");                                                                                    \
        printf(__VA_ARGS__);                                                                                 \
        printf("\n");                                                                                        \
        fflush(stdout);                                                                                      \
    } while (0)

static inline int t_done(void) {
    fprintf(stderr, "%d passed, %d failed\n", t_passed_, t_failed_);
    return t_failed_ ? 1 : 0;
}

/* The whole file at path, NUL-terminated (malloc'd; NULL when it cannot be read); *n (when n is
 * not NULL) gets its size in bytes. */
static inline char *t_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char  *p   = NULL;
    size_t got = 0;
    long   sz  = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)sz + 1)))
        p[got = fread(p, 1, (size_t)sz, f)] = 0;
    fclose(f);
    if (n)
        *n = got;
    return p;
}

/* Run a shell command made from fmt (system(3)); its status. */
static inline int t_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int t_sh(const char *fmt, ...) {
    char    cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* $K3_TMP (where a test writes) and $K3_BUILD (the build tree; default build), as tests/run.sh
 * sets them. A test binary run by hand without K3_TMP writes into a fresh /tmp/k3test-XXXXXX of its
 * own (left behind), not into /tmp itself, where an earlier run's files would be in the way. */
static inline const char *t_tmp(void) {
    const char *t = getenv("K3_TMP");
    if (t && *t)
        return t;
    static char own[] = "/tmp/k3test-XXXXXX";
    static int  made;
    if (!made)
        made = mkdtemp(own) ? 1 : -1;
    return made > 0 ? own : "/tmp";
}
static inline const char *t_build(void) {
    const char *b = getenv("K3_BUILD");
    return b && *b ? b : "build";
}

/* A tiny model (k3-mkmodel --preset tiny --seed seed, written over what is there) in
 * t_tmp()/name, its path in dir; 0, or -1 after a FAIL line. */
static inline int t_tiny_model(const char *name, int seed, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s", t_tmp(), name);
    if (!t_sh("'%s/k3-mkmodel' --preset tiny --seed %d --quiet --force '%s' >/dev/null", t_build(), seed,
              dir))
        return 0;
    T_CHECK(0, "k3-mkmodel --preset tiny writes a model (%s/k3-mkmodel)", t_build());
    return -1;
}

/* The next entry of the open directory d (NULL: none) whose name ends in suffix: 1 with its path
 * (dir/name) in path, 0 at the end. */
static inline int t_next_file(DIR *d, const char *dir, const char *suffix, char *path, size_t n) {
    struct dirent *e;
    size_t         ls = strlen(suffix);
    while (d && (e = readdir(d))) {
        size_t ln = strlen(e->d_name);
        if (ln >= ls && !strcmp(e->d_name + ln - ls, suffix)) {
            snprintf(path, n, "%s/%s", dir, e->d_name);
            return 1;
        }
    }
    return 0;
}
