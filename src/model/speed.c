/* speed.c: expected decode and prefill seconds per token before loading (fit.h: fit_speed_*),
 * from the memory plan and quick measurements of this machine's own kernels, cached per machine.
 *
 * DESIGN
 * Measurements (one to two seconds in all, then cached in $XDG_CACHE_HOME/k3chat/speed,
 * default ~/.cache/k3chat/speed). The file's first line names the machine (cond_machine: the CPU
 * model, its flags, the kernels' default level, the memory, the CPUs); a file of another machine
 * is read as empty and written anew. Then one line per figure, "KEY VALUE TIME LOAD" (the disk as
 * "disk DEVICE BYTES_PER_S TIME LOAD", keyed by the drive's st_dev): when it was measured and the
 * 1-minute load average then. A figure measured at a load unlike now's (load_differs: the CPU
 * share the threads get differs by over a quarter) is measured again, so one busy moment does not
 * decide every later estimate; a line that does not parse is ignored and the figure measured
 * again. Each probe keeps its best round, as a benchmark does:
 *   mem_bw         read bandwidth: the sum of a 256 MB buffer (u64), all OpenMP threads, best of 3
 *   dec3_f32 .. dec3_mxfp4
 *                  weight bytes per second of qmat_matvec (one column: a decode step) on a 256 MB
 *                  matrix of each format (F32, int8, int4, MXFP4), larger than the caches (a 56
 *                  MB one stayed in this EPYC's L3 and read 3-10x too fast), so each figure is
 *                  what bounds that format, memory or arithmetic; best of 5, alternating
 *                  with the next figure's probes so that a burst of load hits both
 *   pre3_f32 .. pre3_mxfp4
 *                  weight bytes x columns per second of qmat_matmul at 32 columns (a prefill
 *                  chunk) on an 8 MB slice of the same matrix, best of 5
 *   pre3_FMT_atC   the same at C columns, C the session's chunk (K3_CHUNK) when not 1 or 32, on
 *                  the next 1/32 of the matrix (not the 32-column probe's rows, which it found in
 *                  the L3: v1, pre3_FMT_xC, 0.80-0.93x too fast at 16 columns on the release's
 *                  int4 matrices), alternating with the two above (fit_speed_get_model): the
 *                  kernels' work per column is not a line in the columns (k3-bench idot_matmul:
 *                  MXFP4 326-338 GOPS at 32 columns, 413-424 at 128, so the 32-column line alone
 *                  overcounts a 128-column chunk; the 16-column tiles of kern-grp.c make 16
 *                  columns cost 1.11-1.17x what the line from one column to 32 says)
 *   kda_rec_HxD    seconds per token of one KDA layer's recurrence (kda-rec.c) at the model's
 *                  heads and head width, the heads on all threads over a 64-column chunk, best of 5:
 *                  a prefill chunk runs it token by token on each head's state, work none of the
 *                  matrix probes sees (the estimate had counted only the state's read per chunk)
 *   pre3_ex_FxL_xN the routed experts as a prefill chunk runs them, N columns each (N the columns
 *                  flat routing gives an expert in a chunk of K3_CHUNK, over 1), bytes x columns/s,
 *                  best of 5: at the release's 3584-wide experts the 7168-wide matrices' curve
 *                  missed them by 1.1-1.3x (K3_PROFILE, each product timed against its estimate)
 *   call2          seconds of one qmat_matvec on a 128 x 1024 int8 matrix, the smallest the
 *                  kernels run on all threads: the fixed cost of a call (the OpenMP region's
 *                  start and join), which is what a small model's token costs ("call", on a
 *                  64 x 64 matrix run by the calling thread alone, missed the region)
 *   disk           O_DIRECT reads of 4 MB at spread offsets of the model's largest shard, for
 *                  half a second or 256 MB. A sparse file reads its holes without the drive; the
 *                  figure is then marked "(sparse file: holes, not the drive)" and not cached.
 *   disk_data      the same, only from blocks of that shard that hold data (SEEK_DATA): the drive
 *                  itself where the shard is sparse (a replica, whose experts are holes while a
 *                  container's matrices are written), else equal to disk.
 * The kernels' figures (dec3_*, pre3_*, call2) are cached per kernel setting: under their own
 * names for the machine's default kernels, as NAME@LEVEL for another K3_ISA, so that an estimate
 * never uses figures measured with other kernels.
 * `k3chat --inspect --measure` measures every figure again whatever the cache holds.
 *
 * Estimates. A matrix of B bytes multiplied by n columns takes B x s(n), s piecewise linear
 * through the measured points (1/dec at one column, 32/pre at 32, C/pre3_FMT_atC at the chunk's C),
 * past the last on its last piece, so a chunk of any K3_CHUNK is costed at its own measured width
 * and an expert's few columns in it between the points, plus `call` per multiplication. A routed
 * expert is that curve with its three calls times the ratio its own probes measured to it (at one
 * column dec3_ex, at N pre3_ex; linear between, N's past it). The head multiplies one row per
 * chunk (the last token's logits) unless K3_LOGITS asks for every row. Per decode token: every
 * matrix class at its bits, the f32 tensors (router, f_a/f_b, b_proj: "small" in the plan), the
 * active experts (n_moe x n_active, MXFP4), the KDA state read and written (mem_bw), and the
 * expert misses read from the drive: routing is flat, so a cache holding a fraction f of the
 * experts hits about f of the time; with K3_MMAP=1, the mapped weights the memory budget cannot
 * hold (fit_plan.reread) are read from the drive again each token (each chunk, in prefill), at
 * disk_data: they are stored data, never holes.
 * Per prefill token: the same for a chunk of C tokens,
 * divided by C, where a MoE layer's chunk touches distinct = E (1 - (1 - k/E)^C) experts, each
 * with C k / distinct columns. fit_speed_estimate_route takes the experts, misses and distinct
 * experts a run really had instead of flat routing's (k3-bench release: the replica's zero
 * weights route every token to the same experts, so it cannot validate the flat-routing part).
 */
#include "fit.h"
#include "kda-rec.h"
#include "quant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void cache_path(char *buf, size_t n, int mkdirs) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char        dir[4096];
    if (x && *x)
        snprintf(dir, sizeof dir, "%s/k3chat", x);
    else
        snprintf(dir, sizeof dir, "%s/.cache/k3chat", h && *h ? h : "/tmp");
    if (mkdirs) {
        char *p = dir;
        while ((p = strchr(p + 1, '/'))) {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
        mkdir(dir, 0755);
    }
    snprintf(buf, n, "%s/speed", dir);
}

/* ---- the conditions figures are measured under ------------------------------------------ */

/* The machine the cache file describes, its first line: "machine cpu=HEX flags=HEX kernels=LEVEL
 * memory=BYTES cpus=N" (the CPU model's and flag list's FNV-1a 64 from /proc/cpuinfo, the
 * kernels' default level, the physical memory, the CPUs online). A file whose first line differs
 * was written on another machine, or with other kernels, and is read as empty. */
static void cond_machine(char *buf, size_t n) {
    uint64_t hm = 14695981039346656037ull, hf = hm;
    char     line[8192];
    FILE    *f     = fopen("/proc/cpuinfo", "r");
    int      got_m = 0, got_f = 0;
    while (f && fgets(line, sizeof line, f) && !(got_m && got_f)) {
        int is_m = !got_m && !strncmp(line, "model name", 10),
            is_f = !got_f && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8));
        for (const char *p = line; (is_m || is_f) && *p; p++) {
            if (is_m)
                hm = (hm ^ (uint8_t)*p) * 1099511628211ull;
            else
                hf = (hf ^ (uint8_t)*p) * 1099511628211ull;
        }
        got_m |= is_m, got_f |= is_f;
    }
    if (f)
        fclose(f);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, n, "machine cpu=%016llx flags=%016llx kernels=%s memory=%llu cpus=%ld",
             (unsigned long long)hm, (unsigned long long)hf, kern_isa_name(kern_isa_best()),
             (unsigned long long)(pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0),
             cpus > 0 ? cpus : 1);
}

/* The 1-minute load average, or K3_TEST_LOAD's (validated at open and --inspect: fit_machine_get):
 * the test suite fixes it, so that its tests, which run beside each other under a load that
 * moves, share the figures the first of them measured instead of each measuring them again. */
static double load_now(void) {
    double l[1];
    if (k3_setting_env_str(K3_SETTING_TEST_LOAD) && !k3_setting_env(K3_SETTING_TEST_LOAD, l))
        return l[0];
    return getloadavg(l, 1) == 1 && l[0] >= 0 ? l[0] : 0;
}

/* A figure measured at load `then` does not stand for the machine at load `now` when the share of
 * the CPUs the kernels' threads get, about cpus / (cpus + load), differs by more than a quarter. */
static int load_differs(double then, double now) {
    const long   c = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    const double a = (double)c / ((double)c + then), b = (double)c / ((double)c + now);
    return a > 1.25 * b || b > 1.25 * a;
}

/* A figure of sp was measured at time `when` under load `load`. */
static void note_cond(fit_speed *sp, long long when, double load) {
    if (!sp->when || when < sp->when)
        sp->when = when;
    if (sp->n_cond++ == 0 || load > sp->load_hi)
        sp->load_hi = load;
    if (sp->n_cond == 1 || load < sp->load_lo)
        sp->load_lo = load;
}

/* The cached figure KEY (with dev for "disk") measured on this machine at a load like now's, or 0;
 * its time and load into sp (the oldest time, the highest and lowest load of the figures used). */
static double cache_get(const char *key, unsigned long long dev, fit_speed *sp) {
    char path[4200], line[256], k[32], mach[256];
    cache_path(path, sizeof path, 0);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    cond_machine(mach, sizeof mach);
    double             v = 0, x, load = 0, now = load_now();
    long long          when = 0, t;
    unsigned long long dv;
    int ok = fgets(line, sizeof line, f) && !strncmp(line, mach, strlen(mach)) && line[strlen(mach)] == '\n';
    while (ok && fgets(line, sizeof line, f)) {
        double l;
        int    hit = !strcmp(key, "disk")
                         ? sscanf(line, "%31s %llu %lf %lld %lf", k, &dv, &x, &t, &l) == 5 && dv == dev
                         : sscanf(line, "%31s %lf %lld %lf", k, &x, &t, &l) == 4;
        if (hit && !strcmp(k, key) && x > 0 && l >= 0 && !load_differs(l, now))
            v = x, when = t, load = l; /* the last line of a key wins */
    }
    fclose(f);
    if (v > 0)
        note_cond(sp, when, load);
    return v;
}

/* Appends KEY's figure, measured now at load `load`; a file of another machine is started anew. */
static void cache_put(const char *key, unsigned long long dev, double v, double load) {
    char path[4200], mach[256], line[256];
    cache_path(path, sizeof path, 1);
    cond_machine(mach, sizeof mach);
    FILE *f = fopen(path, "r");
    int   same =
        f && fgets(line, sizeof line, f) && !strncmp(line, mach, strlen(mach)) && line[strlen(mach)] == '\n';
    if (f)
        fclose(f);
    f = fopen(path, same ? "a" : "w");
    if (!f)
        return; /* a cache we cannot write is measured again next time */
    if (!same)
        fprintf(f, "%s\n", mach);
    if (!strcmp(key, "disk"))
        fprintf(f, "%s %llu %.6g %lld %.2f\n", key, dev, v, (long long)time(NULL), load);
    else
        fprintf(f, "%s %.6g %lld %.2f\n", key, v, (long long)time(NULL), load);
    fclose(f);
}

static double measure_mem(void) {
    const size_t n = (size_t)256 << 20, w = n / 8;
    uint64_t    *b = k3_aligned_alloc(64, n);
    if (!b)
        return 0;
    for (size_t i = 0; i < w; i++)
        b[i] = i;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double   t0 = k3_time();
        uint64_t s  = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < w; i++)
            s += b[i];
        double dt = k3_time() - t0;
        if (s == 1)
            dt += 1e-9; /* keep the sum */
        if (dt > 0 && (double)n / dt > best)
            best = (double)n / dt;
    }
    free(b);
    return best;
}

/* The MXFP4 matrix of rows x cols whose weights start at p, its exponents right after them. */
static qmat mx_at(const uint8_t *p, int rows, int cols) {
    return (qmat){
        .type = Q_MXFP4, .rows = rows, .cols = cols, .w = p, .e = p + q_wbytes(Q_MXFP4, rows, cols)};
}

/* A FMT matrix of rows x cols with plausible bytes (weights 0x37: small values; scales 0.01,
 * MXFP4 exponents 2^0). K3_OK or K3_ERR_NOMEM. */
static k3_status rate_matrix(int fmt, int rows, int cols, qmat *q, void **own) {
    *own = NULL;
    if (fmt != Q_MXFP4) {
        k3_status st = qmat_alloc(q, fmt, rows, cols);
        if (st)
            return st;
        size_t wb = q_wbytes(fmt, rows, cols), sb = q_sbytes(fmt, rows, cols);
        if (fmt == Q_F32) {
            for (size_t i = 0; i < wb / 4; i++)
                ((float *)q->own)[i] = (float)(i % 13) * 0.01f - 0.06f;
        } else {
            memset(q->own, 0x37, wb);
            for (size_t i = 0; i < sb / 4; i++)
                ((float *)(uintptr_t)q->s)[i] = 0.01f;
        }
        return K3_OK;
    }
    size_t   wb = q_wbytes(fmt, rows, cols), eb = q_sbytes(fmt, rows, cols);
    uint8_t *p = k3_aligned_alloc(64, wb + eb + 64);
    if (!p)
        return K3_ERR_NOMEM;
    memset(p, 0x37, wb);
    memset(p + wb, 127, eb);
    *q   = mx_at(p, rows, cols);
    *own = p;
    return K3_OK;
}

enum { NPROBE = 5 }; /* probes of each product rate (v3: 5 alternating; v2: 3 of each in a row) */

static double best_n(const double *v, int n) {
    double b = 0;
    for (int i = 0; i < n; i++)
        b = v[i] > b ? v[i] : b;
    return b;
}

/* dec (bytes/s, one column) and pre (bytes x columns/s, 32 columns) of format fmt; with wide over
 * 1 and not 32 also *wid, bytes x columns/s at wide columns on the same slice, its probes
 * alternating with the others (else *wid is left alone). */
static void measure_fmt(int fmt, int wide, double *dec, double *pre, double *wid) {
    const int cols = 7168, n = wide > 32 ? wide : 32; /* the release's hidden width */
    const int wn   = wide > 1 && wide != 32 ? wide : 0;
    const int bpr  = (int)(q_wbytes(fmt, 1, cols) + q_sbytes(fmt, 1, cols));
    const int rows = (int)(((size_t)256 << 20) / (size_t)bpr); /* beyond any L3 (56 MB was not) */
    qmat      q    = {0};
    void     *own  = NULL;
    float    *x    = k3_aligned_alloc(64, (size_t)n * cols * sizeof(float));
    float    *y    = k3_aligned_alloc(64, (size_t)n * rows * sizeof(float));
    *dec = *pre = 0;
    if (x && y && rate_matrix(fmt, rows, cols, &q, &own) == K3_OK) {
        for (size_t i = 0; i < (size_t)n * cols; i++)
            x[i] = (float)(i % 17) * 0.1f - 0.8f;
        const double bytes = (double)rows * bpr;
        double       v[NPROBE], w[NPROBE], u[NPROBE];
        qmat         part = q; /* 1/32 of the rows: a prefill chunk's matmul is long enough on it */
        part.rows         = rows / 32;
        /* the chunk-width probe on the next 1/32: on the 32-column probe's rows it read them from
         * the L3 (32 MB on this EPYC) where the 32-column probe had left them, while a chunk's
         * matrices come from memory; the release replica's int4 matrices at 16 columns ran
         * 0.80-0.93x the rate it measured so */
        qmat next = part;
        next.w    = (const uint8_t *)q.w + q_wbytes(fmt, part.rows, cols);
        if (q.s)
            next.s = (const float *)(const void *)((const uint8_t *)q.s + q_sbytes(fmt, part.rows, cols));
        if (q.e)
            next.e = q.e + q_sbytes(fmt, part.rows, cols);
        for (int r = 0; r < NPROBE; r++) { /* alternating, so that a burst of load hits both */
            double t0 = k3_time();
            qmat_matvec(&q, x, y);
            double t1 = k3_time();
            qmat_matmul(&part, x, 32, y);
            double t2 = k3_time();
            if (wn)
                qmat_matmul(&next, x, wn, y);
            double t3 = k3_time();
            v[r]      = t1 > t0 ? bytes / (t1 - t0) : 0;
            w[r]      = t2 > t1 ? bytes / 32 * 32 / (t2 - t1) : 0;
            u[r]      = t3 > t2 ? bytes / 32 * wn / (t3 - t2) : 0;
        }
        *dec = best_n(v, NPROBE); /* the best round, as a benchmark keeps: what the machine can do */
        *pre = best_n(w, NPROBE);
        if (wn)
            *wid = best_n(u, NPROBE);
    }
    if (own)
        free(own);
    else
        qmat_free(&q);
    free(x);
    free(y);
}

/* Bytes x columns/s of MXFP4 routed experts of shape (F, L) run as the engine runs them on n
 * columns (n = 1: a decode step): w1 and w3 in one call over the same input, then w2 over an
 * F-wide input; enough distinct experts to pass 256 MB (beyond the caches), best of NPROBE passes
 * over all of them. A small expert's products are short, so a call's fixed cost (threads woken
 * and joined) and the ramp-up of each matrix's stream weigh on them in a way the 256 MB matrices
 * above do not show; at a prefill chunk's few columns per expert the kernels' work per column
 * is not the line between one column and 32 of a 7168-wide matrix either (k3-bench release,
 * K3_PROFILE per product: the release's experts at 16 columns took 1.19-1.27x that line). */
static double measure_experts(int F, int L, int n) {
    /* an expert: w1 (F, L), w3 (F, L), w2 (L, F) back to back, each `part` bytes */
    const size_t wb = q_wbytes(Q_MXFP4, F, L), part = wb + q_sbytes(Q_MXFP4, F, L), one = 3 * part;
    const int    W  = F > L ? F : L;
    int          nx = (int)(((size_t)256 << 20) / one) + 1;
    nx              = nx < 2 ? 2 : nx > 256 ? 256 : nx;
    uint8_t *buf    = k3_aligned_alloc(64, (size_t)nx * one);
    float   *x      = k3_aligned_alloc(64, (size_t)n * W * sizeof(float)),
          *y        = k3_aligned_alloc(64, 2 * (size_t)n * W * sizeof(float));
    double v[NPROBE], r = 0;
    if (buf && x && y) {
        for (size_t i = 0; i < (size_t)nx * 3; i++) { /* weights 0x37, exponents 2^0 */
            memset(buf + i * part, 0x37, wb);
            memset(buf + i * part + wb, 127, part - wb);
        }
        for (size_t i = 0; i < (size_t)n * W; i++)
            x[i] = (float)(i % 17) * 0.1f - 0.8f;
        for (int r0 = 0; r0 < NPROBE; r0++) {
            double t0 = k3_time();
            for (int e = 0; e < nx; e++) {
                const uint8_t *p = buf + (size_t)e * one;
                const qmat  w1 = mx_at(p, F, L), w3 = mx_at(p + part, F, L), w2 = mx_at(p + 2 * part, L, F);
                const qmat *w13[2] = {&w1, &w3};
                float      *y13[2] = {y, y + (size_t)n * F};
                qmat_matmul_many(w13, 2, x, n, y13);
                if (n == 1)
                    qmat_matvec(&w2, x, y);
                else
                    qmat_matmul(&w2, x, n, y);
            }
            double dt = k3_time() - t0;
            v[r0]     = dt > 0 ? (double)nx * (double)one * n / dt : 0;
        }
        r = best_n(v, NPROBE);
    }
    free(buf);
    free(x);
    free(y);
    return r;
}

/* Seconds of one small matvec (the per-call cost: threads started and joined). The matrix is the
 * smallest the kernels run on all threads (kern.c: more than 65,536 multiply-adds), 128 KiB of int8
 * that stay in L2, so the figure is the OpenMP region's start and join plus about a microsecond
 * of arithmetic; every product of a model is that large or larger. (The first probe, "call", used
 * a 64 x 64 matrix, which runs on the calling thread alone: no region, so no join was counted.) */
static double measure_call(void) {
    enum { rows = 128, cols = 1024 };
    const int reps = 200;
    qmat      q    = {0};
    void     *own  = NULL;
    float     x[cols], y[rows];
    double    best = 0;
    for (int i = 0; i < cols; i++)
        x[i] = (float)i * 0.01f;
    if (rate_matrix(Q_I8, rows, cols, &q, &own) != K3_OK)
        return 0;
    for (int r = 0; r < 3; r++) {
        double t0 = k3_time();
        for (int i = 0; i < reps; i++)
            qmat_matvec(&q, x, y);
        double dt = (k3_time() - t0) / reps;
        if (dt > 0 && (best == 0 || dt < best))
            best = dt;
    }
    qmat_free(&q);
    return best;
}

/* Seconds per token of one KDA layer's recurrence (kda-rec.c) with H heads of width d, run as a
 * chunk runs it: heads spread over the threads, each head token by token over a chunk of 64
 * columns; best of NPROBE chunks. The matrices' probes do not see this work: per token it touches
 * every head's d x d state twice in double arithmetic, which at the release's 96 heads of 128 is
 * comparable to a few percent of the layer's products in a prefill chunk. */
static double measure_kda(int H, int d) {
    enum { n = 64 };
    const size_t P = (size_t)H * (size_t)d;
    float       *S = k3_aligned_alloc(64, 2 * P * (size_t)d * sizeof(float)),
          *buf     = k3_aligned_alloc(64, 5 * n * P * sizeof(float) + (size_t)n * (size_t)H * sizeof(float));
    double *tmp = k3_aligned_alloc(64, 2 * P * sizeof(double)), v[NPROBE], r = 0;
    float  *one = k3_aligned_alloc(64, (size_t)d * sizeof(float));
    if (S && buf && tmp && one) {
        memset(S, 0, 2 * P * (size_t)d * sizeof(float));
        for (size_t i = 0; i < 5 * n * P + (size_t)n * (size_t)H; i++)
            buf[i] = 0.5f + (float)(i % 7) * 0.05f; /* decays, gates and betas in (0, 1) */
        for (int i = 0; i < d; i++)
            one[i] = 1;
        float *q = buf, *k = q + n * P, *val = k + n * P, *dec = val + n * P, *sg = dec + n * P,
              *beta = sg + n * P;
        for (int r0 = 0; r0 < NPROBE; r0++) {
            double t0 = k3_time();
#pragma omp parallel for schedule(static) if ((long)n * H * d * d >= KDA_REC_PAR_MIN)
            for (int h = 0; h < H; h++) {
                const kda_rec rc = {.d      = d,
                                    .P      = (int)P,
                                    .H      = H,
                                    .h      = h,
                                    .t0     = 0,
                                    .n      = n,
                                    .S0     = S + (size_t)h * d * d,
                                    .S      = S + P * (size_t)d + (size_t)h * d * d,
                                    .q      = q,
                                    .k      = k,
                                    .v      = val,
                                    .decay  = dec,
                                    .sgate  = sg,
                                    .beta   = beta,
                                    .o_norm = one,
                                    .eps    = 1e-5,
                                    .u      = tmp + (size_t)h * 2 * d,
                                    .o      = tmp + (size_t)h * 2 * d + d};
                kda_rec_run(&rc);
            }
            double dt = k3_time() - t0;
            v[r0]     = dt > 0 ? n / dt : 0; /* tokens per second: the best round is the largest */
        }
        double best = best_n(v, NPROBE);
        r           = best > 0 ? 1 / best : 0;
    }
    free(S);
    free(buf);
    free(tmp);
    free(one);
    return r;
}

/* O_DIRECT reads of PATH (size bytes); 0 when refused (tmpfs) or failed. */
/* DATA_ONLY: only blocks that lie wholly in the file's data (SEEK_DATA/SEEK_HOLE), the drive's own
 * rate in a sparse file (0 when no block of data is found). */
static double measure_disk(const char *path, uint64_t size, int data_only) {
    const size_t blk = (size_t)4 << 20;
    int          fd  = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        fd = open(path, O_RDONLY); /* a filesystem without O_DIRECT: buffered */
    if (fd < 0 || size < blk) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    void    *buf = k3_aligned_alloc(4096, blk);
    double   t0 = k3_time(), dt = 0;
    uint64_t done = 0, nblk = size / blk;
    for (uint64_t i = 0; buf && done < ((uint64_t)256 << 20) && dt < 0.5 && i < 4 * nblk; i++) {
        uint64_t off = (i * 7919 % nblk) * blk;
        if (data_only) { /* the next data at or after off, 4 KiB aligned, a whole block of it */
            off_t d = lseek(fd, (off_t)off, SEEK_DATA), h = d < 0 ? -1 : lseek(fd, d, SEEK_HOLE);
            if (d < 0 || h < 0)
                continue;
            off = ((uint64_t)d + 4095) & ~(uint64_t)4095;
            if (off + blk > (uint64_t)h)
                continue;
        }
        if (pread(fd, buf, blk, (off_t)off) != (ssize_t)blk)
            break;
        done += blk;
        dt = k3_time() - t0;
    }
    free(buf);
    close(fd);
    return dt > 0 && done ? (double)done / dt : 0;
}

/* The largest *.safetensors file of dir (its path into path), or 0 bytes when none. */
static uint64_t largest_shard(const char *dir, char *path, size_t n) {
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    uint64_t       best = 0;
    struct dirent *de;
    char           p[4200];
    struct stat    sb;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors"))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > best) {
            best = (uint64_t)sb.st_size;
            snprintf(path, n, "%s", p);
        }
    }
    closedir(dp);
    return best;
}

static double cached(fit_speed *o, int fresh, const char *key, unsigned long long dev) {
    return fresh ? 0 : cache_get(key, dev, o);
}

/* A figure measured now: cached (when v > 0 and `keep`) with the load it was measured under. */
static void measured(fit_speed *o, const char *key, unsigned long long dev, double v, int keep) {
    if (v <= 0) /* nothing to measure (a shard under 4 MB), or it failed: no figure */
        return;
    o->cached = 0;
    note_cond(o, (long long)time(NULL), o->load_now);
    if (keep)
        cache_put(key, dev, v, o->load_now);
}

/* The cache key of a figure the kernels make: key itself for the machine's default kernels (its
 * best level), else key@LEVEL, so that a run with K3_ISA never reads a figure measured with other
 * kernels. */
static const char *kernel_key(const char *key, char *buf, size_t n) {
    static const char *const lv[KERN_N_ISA] = {"scalar", "avx2", "avx2vnni", "avx512", "amx"};
    const int                isa            = kern_isa();
    if (isa == kern_isa_best())
        return key;
    snprintf(buf, n, "%s@%s", key, lv[isa]);
    return buf;
}

/* (v2: the 256 MB matrix and the median; figures cached under the first names were too fast; v3:
 * median of 5 alternating probes; the file now also names the machine and each figure its time
 * and load, and a probe keeps its best round) */
static const char *const fmt_key[4][2] = {
    {"dec3_f32", "pre3_f32"}, {"dec3_i8", "pre3_i8"}, {"dec3_i4", "pre3_i4"}, {"dec3_mxfp4", "pre3_mxfp4"}};

void fit_speed_get(const char *dir, int fresh, fit_speed *o) {
    memset(o, 0, sizeof *o);
    char               shard[4200] = "";
    uint64_t           bsz         = largest_shard(dir, shard, sizeof shard);
    struct stat        sb;
    unsigned long long dev = 0;
    if (bsz && stat(shard, &sb) == 0) {
        dev       = (unsigned long long)sb.st_dev;
        o->sparse = (uint64_t)sb.st_blocks * 512 < (uint64_t)sb.st_size / 2;
    }
    o->cached   = 1;
    o->load_now = load_now(); /* before measuring: the probes' own threads are not the machine's load */
    o->cpus     = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? (int)sysconf(_SC_NPROCESSORS_ONLN) : 1;
    if (!(o->mem_bw = cached(o, fresh, "mem_bw", 0)))
        measured(o, "mem_bw", 0, o->mem_bw = measure_mem(), 1);
    char kd[64], kp[64], kc[64];
    for (int f = 0; f < 4; f++) { /* enum qtype order: F32, I8, I4, MXFP4 */
        const char *d = kernel_key(fmt_key[f][0], kd, sizeof kd),
                   *p = kernel_key(fmt_key[f][1], kp, sizeof kp);
        if (!(o->dec[f] = cached(o, fresh, d, 0)) || !(o->pre[f] = cached(o, fresh, p, 0))) {
            measure_fmt(f, 0, &o->dec[f], &o->pre[f], NULL);
            measured(o, d, 0, o->dec[f], o->pre[f] > 0);
            measured(o, p, 0, o->pre[f], o->dec[f] > 0);
        }
    }
    const char *c = kernel_key("call2", kc, sizeof kc);
    if (!(o->call = cached(o, fresh, c, 0)))
        measured(o, c, 0, o->call = measure_call(), 1);
    if (bsz && !(o->disk = cached(o, fresh, "disk", dev)))
        measured(o, "disk", dev, o->disk = measure_disk(shard, bsz, 0), !o->sparse);
    o->disk_data = o->disk;
    if (bsz && o->sparse && !(o->disk_data = cached(o, fresh, "disk_data", dev)))
        measured(o, "disk_data", dev, o->disk_data = measure_disk(shard, bsz, 1), 1);
    cache_path(o->cache, sizeof o->cache, 0);
}

/* Experts per MoE layer of t (E), for flat routing. */
static double experts_per_layer(const fit_table *t) {
    return t->expert_one && t->n_moe ? (double)t->expert_all / (double)t->expert_one / t->n_moe : 1;
}

/* The columns of one routed expert's products in a chunk of C tokens under flat routing: the
 * chunk's C k columns over the E (1 - (1 - k/E)^C) distinct experts it touches. */
static double flat_cols(const fit_table *t, int n_active, double C) {
    const double E = experts_per_layer(t), k = n_active, distinct = E * (1 - pow(1 - k / E, C));
    return distinct > 0 ? C * k / distinct : 1;
}

void fit_speed_get_experts(const fit_table *t, int fresh, double cols, fit_speed *o) {
    const int n = (int)lround(cols);
    if (t->ex_rows <= 0 || t->ex_cols <= 0 || t->ex_cols % Q_MXFP4_GROUP || t->ex_rows % Q_MXFP4_GROUP ||
        n < 2)
        return;
    char base[64], kb[96];
    snprintf(base, sizeof base, "pre3_ex_%dx%d_x%d", t->ex_rows, t->ex_cols, n);
    const char *key = kernel_key(base, kb, sizeof kb);
    o->ex_pre_n     = n;
    if (!(o->ex_pre = cached(o, fresh, key, 0)))
        measured(o, key, 0, o->ex_pre = measure_experts(t->ex_rows, t->ex_cols, n), 1);
}

void fit_speed_get_model(const char *dir, const fit_table *t, int fresh, int chunk, int n_active,
                         fit_speed *o) {
    fit_speed_get(dir, fresh, o);
    /* a chunk other than 32 columns: each format's rate at the chunk's width (the kernels' work per
     * column is not a line: it falls past 32 columns, where the 32-column rate alone made prefill
     * 1.3-1.4x too slow, and the kernels' 16-column tiles make 16 columns cost more than the line
     * between one column and 32 says: 1.11-1.17x on the release's int4 matrices) */
    for (int f = 0; f < 4 && chunk > 1 && chunk != 32; f++) {
        char base[64], kb[96];
        snprintf(base, sizeof base, "%s_at%d", fmt_key[f][1], chunk);
        const char *key = kernel_key(base, kb, sizeof kb);
        o->wide_n       = chunk;
        if (!(o->wide[f] = cached(o, fresh, key, 0))) {
            double d = 0, p = 0;
            measure_fmt(f, chunk, &d, &p, &o->wide[f]);
            measured(o, key, 0, o->wide[f], 1);
        }
    }
    if (t->kda_heads > 0 && t->kda_d > 0) {
        char base[64], kb[96];
        snprintf(base, sizeof base, "kda_rec_%dx%d", t->kda_heads, t->kda_d);
        const char *key = kernel_key(base, kb, sizeof kb);
        if (!(o->kda_rec = cached(o, fresh, key, 0)))
            measured(o, key, 0, o->kda_rec = measure_kda(t->kda_heads, t->kda_d), 1);
    }
    if (t->ex_rows <= 0 || t->ex_cols <= 0 || t->ex_cols % Q_MXFP4_GROUP || t->ex_rows % Q_MXFP4_GROUP)
        return;
    char base[64], kb[96];
    snprintf(base, sizeof base, "dec3_ex_%dx%d", t->ex_rows, t->ex_cols);
    const char *key = kernel_key(base, kb, sizeof kb);
    if (!(o->ex_dec = cached(o, fresh, key, 0)))
        measured(o, key, 0, o->ex_dec = measure_experts(t->ex_rows, t->ex_cols, 1), 1);
    if (chunk > 1 && n_active > 0) /* an expert's columns in a chunk, flat routing */
        fit_speed_get_experts(t, fresh, flat_cols(t, n_active, chunk), o);
}

static int bits_fmt(int bits) {
    return bits == 32 ? Q_F32 : bits == 8 ? Q_I8 : Q_I4;
}

/* Seconds for B bytes of format f times n columns (speed.c: DESIGN): per byte, piecewise linear
 * in the columns through the measured points (1 column: dec, 32 columns: pre, the chunk's width:
 * wide, when measured), past the last point on its last piece; a piece never falls (a rate that
 * was measured slower at more columns counts as the same seconds); never under one column's. */
static double mat_s(const fit_speed *sp, int f, double B, double n) {
    double dec = sp->dec[f] > 0 ? sp->dec[f] : 1e10, pre = sp->pre[f] > 0 ? sp->pre[f] : 1e11;
    double x[3] = {1, 32, 0}, y[3] = {1 / dec, 32 / pre, 0}; /* columns, seconds per byte */
    int    np = 2;
    if (sp->wide_n > 1 && sp->wide_n != 32 && sp->wide[f] > 0) {
        const int at = sp->wide_n < 32 ? 1 : 2; /* kept in order of the columns */
        for (int i = 2; i > at; i--)
            x[i] = x[i - 1], y[i] = y[i - 1];
        x[at] = sp->wide_n, y[at] = sp->wide_n / sp->wide[f];
        np = 3;
    }
    for (int i = 1; i < np; i++) /* a piece never falls */
        y[i] = y[i] > y[i - 1] ? y[i] : y[i - 1];
    int i = 0;
    while (i < np - 2 && n > x[i + 1])
        i++;
    const double t = B * (y[i] + (y[i + 1] - y[i]) / (x[i + 1] - x[i]) * (n - x[i]));
    return t > B * y[0] ? t : B * y[0];
}

/* Seconds of one routed expert of B bytes times n columns (w1 and w3 in one call, w2 in another):
 * at one column the measured decode rate (ex_dec); at more, mat_s's MXFP4 curve with its calls,
 * corrected by the ratio the expert probes measured to it at one column and at ex_pre_n columns
 * (linear between them, the last one's past it), so that the experts' own shape and kernels count. */
static double ex_s(const fit_speed *sp, double B, double n) {
    const double call = sp->call > 0 ? sp->call : 1e-5, g1 = mat_s(sp, Q_MXFP4, B, 1) + 3 * call;
    if (n <= 1)
        return sp->ex_dec > 0 ? B / sp->ex_dec : g1;
    const double g = mat_s(sp, Q_MXFP4, B, n) + 3 * call;
    if (!(sp->ex_pre > 0 && sp->ex_pre_n > 1))
        return g;
    const double ne = sp->ex_pre_n, c1 = sp->ex_dec > 0 ? B / sp->ex_dec / g1 : 1;
    const double ce = B * ne / sp->ex_pre / (mat_s(sp, Q_MXFP4, B, ne) + 3 * call);
    return g * (n >= ne ? ce : c1 + (ce - c1) * (n - 1) / (ne - 1));
}

void fit_speed_estimate(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp,
                        int n_active, int chunk, double *decode_s, double *prefill_s) {
    fit_speed_estimate_route(t, s, p, sp, n_active, chunk, NULL, decode_s, prefill_s);
}

/* Seconds of everything but the routed experts over a chunk of C columns (PREFILL 0: a decode
 * step): the matrix classes at their bits, the f32 tensors, the KDA state, the calls, the
 * mapped weights read again (K3_MMAP=1), and in prefill the KDA recurrence token by token (in
 * decode the state's read bounds it). */
static double fixed_s(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp, double C,
                      int prefill) {
    const int    cls[3]  = {FIT_DENSE, FIT_MLA, FIT_HEAD};
    const int    bits[3] = {s->bits, s->mla_bits, s->head_bits};
    const double mem = sp->mem_bw > 0 ? sp->mem_bw : 1e10, call = sp->call > 0 ? sp->call : 1e-5;
    const double ddata = sp->disk_data > 0 ? sp->disk_data : sp->disk > 0 ? sp->disk : 1e9;
    double       x     = 0;
    for (int i = 0; i < 3; i++) /* the head multiplies a chunk's last row only, unless K3_LOGITS */
        x += mat_s(sp, bits_fmt(bits[i]),
                   (double)t->mat[cls[i]][bits[i] == 32  ? 0
                                          : bits[i] == 8 ? 1
                                                         : 2],
                   cls[i] == FIT_HEAD && !s->all_logits ? 1 : C);
    /* K3_MMAP=1: mapped weights the page cache cannot keep; stored data, never holes */
    return x + mat_s(sp, Q_F32, (double)t->small, C) + (double)t->kda_state / mem + t->n_mats * call +
           (double)p->reread / ddata + (prefill ? C * t->n_kda * sp->kda_rec : 0);
}

void fit_ttft(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp, int n_active,
              int chunk, long P, fit_ttft_est *o) {
    const double C = chunk > 0 ? chunk : 1, k = n_active, W = s->window > C ? s->window : C;
    const double E   = experts_per_layer(t);
    const double f   = t->expert_all ? (double)p->b[FIT_EXPERT] / (double)t->expert_all : 1; /* hit rate */
    const double one = (double)t->expert_one, disk = sp->disk > 0 ? sp->disk : 1e9;
    const double fixed = fixed_s(t, s, p, sp, C, 1) / C;
    memset(o, 0, sizeof *o);
    o->window = (int)W;
    o->floor  = t->n_moe * E * (1 - pow(1 - k / E, (double)P)) * one;
    for (double done = 0; done < (double)P; done += W) {
        const double wn       = (double)P - done < W ? (double)P - done : W;
        const double distinct = E * (1 - pow(1 - k / E, wn)), cols = wn * k / (distinct > 0 ? distinct : 1);
        const double blocks = ceil(cols / C);
        const double comp   = t->n_moe * distinct * blocks * ex_s(sp, one, cols / blocks);
        const double rd     = t->n_moe * (1 - f) * distinct * one;
        o->compute += fixed * wn + comp;
        o->bytes += rd;
        o->seconds += fixed * wn + (comp > rd / disk ? comp : rd / disk); /* reads overlap the compute */
    }
}

void fit_ttft_str(char *buf, size_t n, const fit_table *t, const fit_set *s, const fit_plan *p,
                  const fit_speed *sp, int n_active, int chunk) {
    static const long Ps[2] = {1024, 8192};
    size_t            o     = 0;
    fit_set           pc    = *s;
    pc.window               = 0; /* the per-chunk path, for the ratio */
    buf[0]                  = 0;
    for (int i = 0; i < 2; i++) {
        long         P = Ps[i] < s->maxt ? Ps[i] : s->maxt;
        fit_ttft_est w, c;
        char         b1[32], b2[32], b3[32];
        fit_ttft(t, s, p, sp, n_active, chunk, P, &w);
        fit_ttft(t, &pc, p, sp, n_active, chunk, P, &c);
        o += (size_t)snprintf(
            buf + o, o < n ? n - o : 0,
            "%s%ld-token prompt %.3g s reading %s of experts (floor %s; per chunk of %d: %.3g "
            "s, %s)",
            i ? "; " : "", P, w.seconds, fit_hb(b1, sizeof b1, w.bytes), fit_hb(b2, sizeof b2, w.floor),
            chunk, c.seconds, fit_hb(b3, sizeof b3, c.bytes));
        if (P < Ps[i])
            break;
    }
}

void fit_speed_estimate_route(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp,
                              int n_active, int chunk, const fit_route *r, double *decode_s,
                              double *prefill_s) {
    const double C = chunk > 0 ? chunk : 1, k = n_active;
    const double E   = experts_per_layer(t);
    const double f   = t->expert_all ? (double)p->b[FIT_EXPERT] / (double)t->expert_all : 1; /* hit rate */
    const double one = (double)t->expert_one, disk = sp->disk > 0 ? sp->disk : 1e9;
    double       dec = fixed_s(t, s, p, sp, 1, 0), pre = fixed_s(t, s, p, sp, C, 1);
    /* decode: n_moe x k experts, each a one-column MXFP4 product; misses also read the drive */
    double act  = (double)t->n_moe * (r ? r->dec_active : k),
           miss = r ? t->n_moe * r->dec_miss : (1 - f) * act;
    dec += act * ex_s(sp, one, 1) + miss * one / disk;
    /* prefill: a chunk touches `distinct` experts per MoE layer, each with C k / distinct columns */
    double distinct = r ? r->chunk_distinct : E * (1 - pow(1 - k / E, C));
    double cols = C * k / (distinct > 0 ? distinct : 1), cmiss = r ? r->chunk_miss : (1 - f) * distinct;
    double per_chunk = t->n_moe * (distinct * ex_s(sp, one, cols) + cmiss * one / disk);
    *decode_s        = dec;
    *prefill_s       = pre / C + per_chunk / C;
}
