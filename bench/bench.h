/* bench.h: what every benchmark file (bench/bench-*.c) uses; the registry is in bench-main.c.
 *
 * A benchmark is `int bench_xxx(void)` (0 = ran, non-zero = failed) that prints one line per
 * result through bench_report:
 *     BENCH <name> <value> <unit> ref <value> <unit> ratio <value/ref>
 * Before any costly setup for a result, ask bench_want(name) whether the filter selects it.
 * Extra human-readable lines start with "# ".
 */
#pragma once

/* 1 when the command-line filter selects result `name` (no filter, or the filter is a substring
 * of name or of the running benchmark's registry name). */
int bench_want(const char *name);
/* Print the BENCH line (ratio = value / ref; 0 when ref is 0). */
void bench_report(const char *name, double value, const char *unit, double ref, const char *ref_unit);
/* Median of v[n] (sorts v in place). */
double bench_median(double *v, int n);
