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
# directory K3_TMP. Every test gets its own XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME and
# XDG_CACHE_HOME (under K3_TMP/xdg), so no two tests share history, autosave, settings or cache
# files (HOME stays: npm, cargo and the like keep their configuration there).
# Markers, each a line of its own in a script test:
#   # run-once    runs only for the first tree (for slow checks whose code is not under the
#                 sanitizers, e.g. the numpy reference)
#   # run-alone   runs with no other test beside it (RSS or timing measured against a quiet
#                 machine); these run first, one at a time
#   # slow        starts before the others (long tests started early keep every job busy to
#                 the end instead of leaving one long test running alone at the close)
# Tests run K3_TEST_JOBS at a time (default 3: many tests wait on tmux, timers or a server);
# the per-test lines still come in the fixed order (trees, C tests, scripts) as each test and
# all before it have finished, and the closing line counts them all. K3_TEST_JOBS=1 runs one
# test at a time. TEST_FILTER=substring limits which tests run.
# Per-test logs: BUILD/test-logs/NAME.log.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
pass=0; fail=0; skip=0; first=1
timeout_s=${TEST_TIMEOUT:-900}
jobs=${K3_TEST_JOBS:-3}
case "$jobs" in '' | *[!0-9]* | 0) echo "run.sh: K3_TEST_JOBS='$jobs': expected a whole number >= 1"; exit 2 ;; esac
# OpenMP threads that spin while idle steal the other core from the next test step on a
# small machine; tests measure results, not latency.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
res=$(mktemp -d "${TMPDIR:-/tmp}/k3run.XXXXXX") || exit 2
trap 'rm -rf "$res"' EXIT
# interrupted: stop the running tests (timeout passes the signal to the test's process group)
trap 'for _p in "$res"/*.pid; do [ -f "$_p" ] && kill -TERM "$(cat "$_p")" 2>/dev/null; done; exit 130' INT TERM

# run_one ID NAME BUILD CMD...: one test; its summary lines go to $res/ID.out, its counts
# ("P F S") to $res/ID.cnt, and $res/ID.done appears last
run_one() {
    id=$1; name=$2; b=$3; shift 3
    log="$b/test-logs/$(echo "$name" | tr '/' '_').log"
    mkdir -p "$b/test-logs"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/k3test.XXXXXX")
    t0=$(date +%s)
    # XDG_CACHE_HOME: the engine's measured-speed cache (--inspect) stays in the test's directory
    K3_BUILD="$root/$b" K3_SRC="$root" K3_TMP="$tmp" XDG_CACHE_HOME="$tmp/cache" \
        XDG_CONFIG_HOME="$tmp/xdg/config" XDG_DATA_HOME="$tmp/xdg/data" XDG_STATE_HOME="$tmp/xdg/state" \
        timeout "$timeout_s" "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$res/$id.pid" # timeout runs in a process group of its own: the trap below stops it
    wait $!
    rc=$?
    t1=$(date +%s)
    rm -rf "$tmp"
    p=$(grep -c '^PASS:' "$log"); f=$(grep -c '^FAIL:' "$log"); s=$(grep -c '^SKIP:' "$log")
    {
        grep -E '^(FAIL|SKIP):' "$log" | sed "s|^|  [$b] $name: |"
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1; echo "  [$b] $name: FAIL: exited with status $rc (log: $log)"; tail -n 15 "$log" | sed 's/^/      /'
        elif [ $((p + f + s)) -eq 0 ]; then
            f=1; echo "  [$b] $name: FAIL: printed no assertion (log: $log)"
        fi
        printf '%-8s %-40s %4d passed %3d failed %3d skipped  %3ds\n' "[$b]" "$name" "$p" "$f" "$s" $((t1 - t0))
        echo "$p $f $s" >"$res/$id.cnt"
    } >"$res/$id.out"
    : >"$res/$id.done"
}

# the list: test I has name N_I, tree B_I, command C_I, and its marks ALONE_I, SLOW_I
n=0
add() { # add NAME BUILD ALONE SLOW CMD (the command as one string of shell words, no quoting)
    n=$((n + 1))
    eval "N_$n=\$1 B_$n=\$2 ALONE_$n=\$3 SLOW_$n=\$4 C_$n=\$5"
}
mark() { grep -q "^# $1\$" "$2" && echo 1 || echo 0; }
for b in "$@"; do
    [ -d "$b" ] || { echo "run.sh: build tree '$b' does not exist (run make first)"; fail=$((fail + 1)); continue; }
    for t in "$b"/tests/test-*; do
        [ -x "$t" ] || continue
        nm=$(basename "$t")
        case "$nm" in *.d|*.o) continue ;; esac
        [ -n "${TEST_FILTER:-}" ] && case "$nm" in *"$TEST_FILTER"*) ;; *) continue ;; esac
        add "$nm" "$b" 0 0 "$t"
    done
    for t in tests/t-*.sh tests/t-*.py; do
        [ -f "$t" ] || continue
        nm=$(basename "$t")
        [ -n "${TEST_FILTER:-}" ] && case "$nm" in *"$TEST_FILTER"*) ;; *) continue ;; esac
        if [ "$first" -eq 0 ] && [ "$(mark run-once "$t")" = 1 ]; then continue; fi
        case "$t" in
            *.sh) add "$nm" "$b" "$(mark run-alone "$t")" "$(mark slow "$t")" "sh $t" ;;
            *.py) add "$nm" "$b" "$(mark run-alone "$t")" "$(mark slow "$t")" "/usr/bin/python3 $t" ;;
        esac
    done
    first=0
done

# the start order: run-alone tests, then slow ones, then the rest, each group in list order
order=""
for g in alone slow rest; do
    i=1
    while [ $i -le $n ]; do
        eval "a=\$ALONE_$i s=\$SLOW_$i"
        case "$g:$a:$s" in alone:1:* | slow:0:1 | rest:0:0) order="$order $i" ;; esac
        i=$((i + 1))
    done
done

# the scheduler: start tests in that order while fewer than $jobs run (a run-alone test only
# when none runs, and nothing beside it); print the summaries in list order as they complete
running=0; alone=0; shown=1
set -- $order
while [ $shown -le $n ]; do
    while [ $# -gt 0 ] && [ $running -lt "$jobs" ] && [ $alone -eq 0 ]; do
        eval "a=\$ALONE_$1"
        [ "$a" = 1 ] && [ $running -gt 0 ] && break
        eval "run_one $1 \"\$N_$1\" \"\$B_$1\" \$C_$1" &
        running=$((running + 1)); alone=$a
        eval "R_$1=1"
        shift
    done
    i=1
    while [ $i -le $n ]; do # reap
        eval "r=\${R_$i:-0}"
        if [ "$r" = 1 ] && [ -f "$res/$i.done" ]; then
            eval "R_$i=2"; running=$((running - 1)); [ $running -eq 0 ] && alone=0
        fi
        i=$((i + 1))
    done
    while [ $shown -le $n ] && [ -f "$res/$shown.done" ]; do # print in list order
        cat "$res/$shown.out"
        read -r p f s <"$res/$shown.cnt"
        pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
        shown=$((shown + 1))
    done
    [ $shown -le $n ] && sleep 0.2
done
wait

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
