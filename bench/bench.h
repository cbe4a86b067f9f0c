/* bench.h: what every benchmark file (bench/bench-*.c) uses; the registry is in bench-main.c.
 *
 * A benchmark is `int bench_xxx(void)` (0 = ran, non-zero = failed) that prints one line per
 * result through bench_report:
 *     BENCH <name> <value> <unit> ref <value> <unit> ratio <value/ref>
 * Before any costly setup for a result, ask bench_want(name) whether the filter selects it.
 * Extra human-readable lines start with "# ".
 */
#pragma once
#include "k3.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when the command-line filter selects result `name` (no filter, or the filter is a substring
 * of name or of the running benchmark's registry name). */
int bench_want(const char *name);
/* 1 only when a filter is given and contains `what` (results too slow for the default run). */
int bench_asked(const char *what);
/* Print the BENCH line (ratio = value / ref; 0 when ref is 0). */
void bench_report(const char *name, double value, const char *unit, double ref, const char *ref_unit);
/* Where generated models go: $K3_BENCH_DIR, default /var/tmp (not a tmpfs). */
const char *bench_dir(void);
/* The benchmarks' knobs are rows of the settings table (include/k3-settings.h, "(benchmarks)"):
 * text through k3_setting_env_str, numbers through these. 0 with *out set (left as it is when the
 * variable is unset or empty); -1 after printing "k3-bench: K3_X: 'TEXT' is not EXPECTED". */
int bench_env_int(enum k3_setting_id id, int *out);
/* Run `$K3_MKMODEL ARGS DIR` (default build/k3-mkmodel) for DIR = bench_dir()/NAME-PID, written
 * into out; 0 when it worked. bench_rmmodel removes such a directory. */
int  bench_mkmodel(const char *args, const char *name, char *out, size_t n);
void bench_rmmodel(const char *dir);
/* Median of v[n] (sorts v in place). */
double bench_median(double *v, int n);
/* bench-experts.c: GB/s of a plain O_DIRECT sequential read (requests of req bytes into buf,
 * 4096-aligned) of each shard's routed-expert byte range of checkpoint d; its bytes into *bytes;
 * -1 when a shard cannot be opened. The drive's rate that expert reads are held against. */
struct st_dir;
double bench_direct_experts(const struct st_dir *d, uint8_t *buf, size_t req, uint64_t *bytes);
