#!/bin/sh
# run.sh BUILD_DIR...: run every test against each build tree and print one closing line
#   N passed, N failed, N skipped
#
# Protocol (any language): a test prints one line per assertion, starting with
#   PASS: <description>     FAIL: <description>     SKIP: <description and why>
# A test that exits non-zero without printing a FAIL line, or prints no assertion
# at all, counts as one failure. Tests:
#   BUILD/tests/test-*   C tests (tests/test-*.c, see tests/test.h)
#   tests/t-*.sh         shell tests, run with sh
#   tests/t-*.py         Python tests, run with /usr/bin/python3 (Debian's, with numpy)
# Script tests get K3_BUILD=<build dir> (absolute) and K3_SRC=<repo root>, and a scratch
# directory K3_TMP. A script containing a line "# run-once" runs only for the first tree
# (for slow checks whose code is not under the sanitizers, e.g. the numpy reference).
# TEST_FILTER=substring limits which tests run. Per-test logs: BUILD/test-logs/NAME.log.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
pass=0; fail=0; skip=0; first=1
timeout_s=${TEST_TIMEOUT:-900}
# OpenMP threads that spin while idle steal the other core from the next test step on a
# small machine; tests measure results, not latency.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

run_one() { # name build cmd...
    name=$1; b=$2; shift 2
    log="$b/test-logs/$(echo "$name" | tr '/' '_').log"
    mkdir -p "$b/test-logs"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/k3test.XXXXXX")
    t0=$(date +%s)
    # XDG_CACHE_HOME: the engine's measured-speed cache (--inspect) stays in the test's directory
    K3_BUILD="$root/$b" K3_SRC="$root" K3_TMP="$tmp" XDG_CACHE_HOME="$tmp/cache" timeout "$timeout_s" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    t1=$(date +%s)
    rm -rf "$tmp"
    p=$(grep -c '^PASS:' "$log"); f=$(grep -c '^FAIL:' "$log"); s=$(grep -c '^SKIP:' "$log")
    grep -E '^(FAIL|SKIP):' "$log" | sed "s|^|  [$b] $name: |"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "  [$b] $name: FAIL: exited with status $rc (log: $log)"; tail -n 15 "$log" | sed 's/^/      /'
    elif [ $((p + f + s)) -eq 0 ]; then
        f=1; echo "  [$b] $name: FAIL: printed no assertion (log: $log)"
    fi
    [ "$f" -gt 0 ] && [ "$rc" -eq 0 ] || true
    printf '%-8s %-40s %4d passed %3d failed %3d skipped  %3ds\n' "[$b]" "$name" "$p" "$f" "$s" $((t1 - t0))
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
}

for b in "$@"; do
    [ -d "$b" ] || { echo "run.sh: build tree '$b' does not exist (run make first)"; fail=$((fail + 1)); continue; }
    for t in "$b"/tests/test-*; do
        [ -x "$t" ] || continue
        n=$(basename "$t")
        case "$n" in *.d|*.o) continue ;; esac
        [ -n "${TEST_FILTER:-}" ] && case "$n" in *"$TEST_FILTER"*) ;; *) continue ;; esac
        run_one "$n" "$b" "$t"
    done
    for t in tests/t-*.sh tests/t-*.py; do
        [ -f "$t" ] || continue
        n=$(basename "$t")
        [ -n "${TEST_FILTER:-}" ] && case "$n" in *"$TEST_FILTER"*) ;; *) continue ;; esac
        if [ "$first" -eq 0 ] && grep -q '^# run-once' "$t"; then continue; fi
        case "$t" in
            *.sh) run_one "$n" "$b" sh "$t" ;;
            *.py) run_one "$n" "$b" /usr/bin/python3 "$t" ;;
        esac
    done
    first=0
done

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
