/* speed.c: expected decode and prefill seconds per token before loading (fit.h: fit_speed_*),
 * from the memory plan and three quick measurements of this machine, cached per machine.
 *
 * DESIGN
 * Measurements (about a second in all, then cached in $XDG_CACHE_HOME/k3chat/speed, default
 * ~/.cache/k3chat/speed, one line per figure: "mem_bw BYTES_PER_S", "matmul OPS_PER_S",
 * "disk DEVICE BYTES_PER_S" keyed by the drive's st_dev; a line that does not parse is ignored
 * and measured again):
 *   mem_bw  read bandwidth: the sum of a 256 MB buffer (u64), all OpenMP threads, best of 3
 *   matmul  int8 multiply-adds per second of the engine's own kernel (qmat_matmul, 2048 x 4096
 *           at 32 columns: a prefill chunk), best of 3
 *   disk    O_DIRECT reads of 4 MB at spread offsets of the model's largest opened shard, for
 *           half a second or 256 MB. A sparse file reads its holes without the drive; the
 *           figure is then marked "(sparse file: holes, not the drive)".
 * Estimates (routing is flat, so an expert cache holding a fraction f of the experts hits
 * about f of the time):
 *   decode  s/token = (matrices at their bits + active experts that hit) / mem_bw
 *                     + experts that miss x expert bytes / disk
 *   prefill s/token = max(matrices / chunk / mem_bw, active parameters / matmul)
 *                     + misses / 2.7 x expert bytes / disk (spec section 6: a 32-token chunk
 *                     needs about 2.7x fewer distinct expert loads than 32 separate tokens)
 */
#include "fit.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void cache_path(char *buf, size_t n, int mkdirs) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char        dir[4096];
    if (x && *x) snprintf(dir, sizeof dir, "%s/k3chat", x);
    else snprintf(dir, sizeof dir, "%s/.cache/k3chat", h && *h ? h : "/tmp");
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

/* The cached figure KEY (with dev for "disk"), or 0. */
static double cache_get(const char *key, unsigned long long dev) {
    char path[4200], line[256], k[32];
    cache_path(path, sizeof path, 0);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double v = 0, x;
    unsigned long long dv;
    while (fgets(line, sizeof line, f)) {
        if (!strcmp(key, "disk")) {
            if (sscanf(line, "%31s %llu %lf", k, &dv, &x) == 3 && !strcmp(k, key) && dv == dev && x > 0) v = x;
        } else if (sscanf(line, "%31s %lf", k, &x) == 2 && !strcmp(k, key) && x > 0) {
            v = x;
        }
    }
    fclose(f);
    return v;
}

static void cache_put(const char *key, unsigned long long dev, double v) {
    char path[4200];
    cache_path(path, sizeof path, 1);
    FILE *f = fopen(path, "a");
    if (!f) return; /* a cache we cannot write is measured again next time */
    if (!strcmp(key, "disk")) fprintf(f, "%s %llu %.0f\n", key, dev, v);
    else fprintf(f, "%s %.0f\n", key, v);
    fclose(f);
}

static double measure_mem(void) {
    const size_t n = (size_t)256 << 20, w = n / 8;
    uint64_t    *b = k3_aligned_alloc(64, n);
    if (!b) return 0;
    for (size_t i = 0; i < w; i++) b[i] = i;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double   t0 = k3_time();
        uint64_t s  = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < w; i++) s += b[i];
        double dt = k3_time() - t0;
        if (s == 1) dt += 1e-9; /* keep the sum */
        if (dt > 0 && (double)n / dt > best) best = (double)n / dt;
    }
    free(b);
    return best;
}

static double measure_matmul(void) {
    const int rows = 2048, cols = 4096, n = 32;
    float    *w = k3_aligned_alloc(64, (size_t)rows * cols * sizeof(float));
    float    *x = k3_aligned_alloc(64, (size_t)n * cols * sizeof(float));
    float    *y = k3_aligned_alloc(64, (size_t)n * rows * sizeof(float));
    qmat      q = {0};
    double    best = 0;
    if (w && x && y) {
        for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = (float)(i % 17) * 0.1f - 0.8f;
        if (qmat_quantize(&q, Q_I8, w, rows, cols) == K3_OK)
            for (int r = 0; r < 3; r++) {
                double t0 = k3_time();
                qmat_matmul(&q, x, n, y);
                double dt = k3_time() - t0;
                if (dt > 0 && (double)rows * cols * n / dt > best) best = (double)rows * cols * n / dt;
            }
    }
    qmat_free(&q);
    free(w);
    free(x);
    free(y);
    return best;
}

/* O_DIRECT reads of PATH (size bytes); 0 when refused (tmpfs) or failed. */
static double measure_disk(const char *path, uint64_t size) {
    const size_t blk = (size_t)4 << 20;
    int          fd  = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) fd = open(path, O_RDONLY); /* a filesystem without O_DIRECT: buffered */
    if (fd < 0 || size < blk) {
        if (fd >= 0) close(fd);
        return 0;
    }
    void    *buf = k3_aligned_alloc(4096, blk);
    double   t0 = k3_time(), dt = 0;
    uint64_t done = 0, nblk = size / blk;
    for (uint64_t i = 0; buf && done < ((uint64_t)256 << 20) && dt < 0.5; i++) {
        uint64_t off = (i * 7919 % nblk) * blk;
        if (pread(fd, buf, blk, (off_t)off) != (ssize_t)blk) break;
        done += blk;
        dt = k3_time() - t0;
    }
    free(buf);
    close(fd);
    return dt > 0 && done ? (double)done / dt : 0;
}

void fit_speed_get(const st_dir *d, fit_speed *o) {
    memset(o, 0, sizeof *o);
    /* the largest opened shard */
    int      best = -1;
    uint64_t bsz  = 0;
    for (int s = 0; s < st_n_shards(d); s++)
        if (st_shard_opened(d, s) && st_shard_size(d, s) > bsz) bsz = st_shard_size(d, s), best = s;
    struct stat sb;
    unsigned long long dev = 0;
    if (best >= 0 && stat(st_shard_path(d, best), &sb) == 0) {
        dev       = (unsigned long long)sb.st_dev;
        o->sparse = (uint64_t)sb.st_blocks * 512 < (uint64_t)sb.st_size / 2;
    }
    o->cached = 1;
    if (!(o->mem_bw = cache_get("mem_bw", 0))) {
        o->cached = 0;
        if ((o->mem_bw = measure_mem()) > 0) cache_put("mem_bw", 0, o->mem_bw);
    }
    if (!(o->matmul = cache_get("matmul", 0))) {
        o->cached = 0;
        if ((o->matmul = measure_matmul()) > 0) cache_put("matmul", 0, o->matmul);
    }
    if (best >= 0 && !(o->disk = cache_get("disk", dev))) {
        o->cached = 0;
        if ((o->disk = measure_disk(st_shard_path(d, best), bsz)) > 0 && !o->sparse) cache_put("disk", dev, o->disk);
    }
    cache_path(o->cache, sizeof o->cache, 0);
}

void fit_speed_estimate(const fit_table *t, const fit_plan *p, const fit_speed *sp, int n_active, int chunk,
                        double *decode_s, double *prefill_s) {
    double mats = (double)(p->b[FIT_DENSE] + p->b[FIT_MLA] + p->b[FIT_HEAD] + p->mapped - (p->mapped ? t->embed : 0));
    double f    = t->expert_all ? (double)p->b[FIT_EXPERT] / (double)t->expert_all : 1;
    double act  = (double)t->n_moe * n_active * (double)t->expert_one; /* expert bytes per token */
    double mem  = sp->mem_bw > 0 ? sp->mem_bw : 1e10, disk = sp->disk > 0 ? sp->disk : 1e9;
    double mm   = sp->matmul > 0 ? sp->matmul : 1e10;
    *decode_s   = (mats + f * act) / mem + (1 - f) * act / disk;
    /* multiply-adds per token: the matrices' parameters (f32 bytes / 4), MXFP4 experts 32 per 17 bytes */
    double ops = (double)(t->mat[FIT_DENSE][0] + t->mat[FIT_MLA][0] + t->mat[FIT_HEAD][0]) / 4 + act * 32.0 / 17.0;
    double m1 = mats / (chunk > 0 ? chunk : 1) / mem, m2 = ops / mm;
    *prefill_s = (m1 > m2 ? m1 : m2) + (1 - f) * act / 2.7 / disk;
}
