#!/bin/sh
# t-bench-args.sh: k3-bench's command line (the benchmarks themselves are not run: they measure
# speed, which no test asserts). An option or a filter that matches nothing ran nothing and
# exited 0 (k3-bench --quick, k3-bench kernn): each is now an error naming it, exit 2.
# run-once
. "$K3_SRC/tests/lib.sh"
set -u
KB="$K3_BUILD/k3-bench"
T=$K3_TMP
if [ ! -x "$KB" ]; then echo "SKIP: $KB not built (make check's sanitizer tree builds no k3-bench)"; exit 0; fi

"$KB" --help >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] && grep -q "^usage: k3-bench \[FILTER\]" "$T/out" && grep -q "^benchmarks: kern " "$T/out"
ok $? "--help: usage and the benchmarks on standard output, exit 0 (rc $rc)"
"$KB" --quick >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -qF "k3-bench: unknown option '--quick'" "$T/err" && [ ! -s "$T/out" ]
ok $? "an option: exit 2 naming it, nothing run (rc $rc: $(head -c 120 "$T/err"))"
"$KB" kern act >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "^usage: k3-bench" "$T/err" && [ ! -s "$T/out" ]
ok $? "two filters: usage error (rc $rc)"
"$KB" no_such_benchmark >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -qF "k3-bench: 'no_such_benchmark' matched no benchmark and no result of this run" "$T/err" &&
    ! grep -q "^BENCH " "$T/out"
ok $? "a filter that matches nothing: exit 2 naming it (rc $rc: $(head -c 120 "$T/err"))"
