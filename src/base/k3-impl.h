/* k3-impl.h: engine internals shared by src/ modules (never included by ui/).
 *
 * Error reporting: a failing function records a one-line message with k3_err()
 * (thread-local, read back with k3_errmsg()) and returns a negative k3_status.
 * The message names the file and the tensor/key/line, and what was expected:
 *     return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': shape [%s] but %zu bytes", path, ...);
 * Invariants (programming errors, not bad input) use K3_ASSERT, which aborts.
 */
#pragma once
#include "k3.h"
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define K3_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define K3_PRINTF(a, b)
#endif

/* Record the message for k3_errmsg() and return st (so `return k3_err(...)` works). */
k3_status k3_err(k3_status st, const char *fmt, ...) K3_PRINTF(2, 3);
/* Prefix the current message with "prefix: " (adds context on the way up). */
void k3_err_prefix(const char *fmt, ...) K3_PRINTF(1, 2);

void k3_log(int level, const char *fmt, ...) K3_PRINTF(2, 3);
#define K3_LOG_ERROR(...) k3_log(K3_LOG_LEVEL_ERROR, __VA_ARGS__)
#define K3_LOG_WARN(...) k3_log(K3_LOG_LEVEL_WARN, __VA_ARGS__)
#define K3_LOG_INFO(...) k3_log(K3_LOG_LEVEL_INFO, __VA_ARGS__)
#ifdef K3_DEBUG_LOG
#define K3_LOG_DEBUG(...) k3_log(K3_LOG_LEVEL_DEBUG, __VA_ARGS__)
#else
#define K3_LOG_DEBUG(...) ((void)0)
#endif

_Noreturn void k3_assert_fail(const char *expr, const char *file, int line);
#define K3_ASSERT(x) ((x) ? (void)0 : k3_assert_fail(#x, __FILE__, __LINE__))

/* OpenMP: below these amounts of work a parallel region costs more than it saves (waking the
 * team takes microseconds). K3_PAR_MIN_MATMUL: multiply-adds of a matrix product (kern.c,
 * kern-amx.c, kern-grp.c); K3_PAR_MIN_OPS: steps of another loop (the KDA recurrence and MLA
 * attention in forward.c, the quantization of a band in quant.c). */
#define K3_PAR_MIN_MATMUL 65536L
#define K3_PAR_MIN_OPS (1L << 18)

/* Checked allocation helpers: NULL on overflow or failure (callers report K3_ERR_NOMEM). */
void *k3_malloc(size_t n);
void *k3_calloc(size_t n, size_t size);
void *k3_aligned_alloc(size_t align, size_t n); /* free with free(); 4 MiB and up: huge pages (util.c) */
/* Read K3_HUGEPAGES (0 or 1, default 1: large k3_aligned_alloc blocks advised MADV_HUGEPAGE);
 * K3_ERR_ARG naming it when malformed. Called by k3_params_default. */
k3_status k3_hugepages_init(void);
char     *k3_strdup(const char *s);
/* k3_grow_z and k3_grow (k3.h) with the bound in elements given: max (PTRDIFF_MAX / elem at most). */
void *k3_grow_max(void *p, size_t *cap, size_t need, size_t elem, size_t first, size_t max);

/* Open a model file read-only as a regular file (every file of a model directory opens here):
 * a FIFO, a device, a directory or a socket in its place is refused, naming `what` and what the
 * path is instead, since a FIFO would block the open for ever and /dev/zero would never end a
 * read. The open itself does not block (k3_open_read). *size: the file's length. missing
 * non-NULL: an absent file (ENOENT) sets *missing = 1 and returns K3_OK with *fd = -1, setting
 * no error. Errors: "WHAT: cannot open PATH: strerror"
 * (no PATH when it is WHAT), "WHAT: not a regular file (a FIFO)". */
k3_status k3_open_regular(const char *path, const char *what, int *fd, uint64_t *size, int *missing);
/* k3_open_regular's open, for a caller with its own messages and extra open flags (O_DIRECT): the
 * descriptor (*size set), or -1 with errno, or -2 when the path is not a regular file (*kind: "a
 * FIFO", "a directory", ...). */
int k3_open_regular_fd(const char *path, int flags, uint64_t *size, const char **kind);
/* The whole of a regular file (k3_open_regular) in a new NUL-terminated buffer of *len bytes
 * (the caller frees it); as much memory as the file is long, no more. missing: as above
 * (*buf NULL). */
k3_status k3_read_regular(const char *path, const char *what, char **buf, size_t *len, int *missing);

/* FNV-1a, 64 bits, of p[0..n): names in hash tables, a header's fingerprint (never stored). */
uint64_t k3_fnv1a(const void *p, size_t n);

/* A set of distinct names, the one table the format code finds duplicate tensor names with (the
 * index's weight_map, a shard header, st-write's declared tensors): open addressing on k3_fnv1a,
 * each slot an item's number + 1 (0 empty); the names stay the caller's, read through name_of(ctx,
 * item). Zero-initialize it (name_of and ctx set) before use. */
typedef struct k3_names {
    uint32_t *slot; /* cap slots, a power of two, at most half full */
    size_t    cap, n;
    const char *(*name_of)(const void *ctx, size_t item);
    const void *ctx;
} k3_names;
/* Adds item under its name: 0 added; 1 the name is there already (*dup, when not NULL: that
 * item), nothing added; -1 out of memory (or an item number beyond 2^32 - 2). */
int k3_names_add(k3_names *t, size_t item, size_t *dup);
/* The item named name, or -1. */
long k3_names_find(const k3_names *t, const char *name);
/* Room for n names in all, made before the first add (the table is not grown, and every name
 * hashed again, on the way): 0, or -1 out of memory. */
int  k3_names_reserve(k3_names *t, size_t n);
void k3_names_free(k3_names *t);

/* Seconds from a monotonic clock. */
double k3_time(void);

/* Float formats. bf16/f16 -> f32 exactly. */
static inline float k3_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float    f;
    memcpy(&f, &u, 4);
    return f;
}
float    k3_f16_to_f32(uint16_t h);
uint16_t k3_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
