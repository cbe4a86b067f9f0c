#!/bin/sh
# run.sh [--bg TREE COMMAND]... BUILD_DIR...: run every test against each build tree and print
# one closing line
#   N passed, N failed, N skipped
#
# --bg TREE COMMAND: COMMAND (sh -c, at nice 10) builds TREE while the tests of the trees that
# are built already run: make check builds the sanitizer tree and the fuzz tree so, beside the
# first tree's tests, which wait on tmux, timers and servers more than they compute. The --bg
# commands run one after another in the order given; a test of TREE starts once its command
# has succeeded (if it fails, each of TREE's tests counts as failed, with the build's last lines).
# Tests marked run-alone or after-build (below) start only when every --bg command has ended.
#
# Protocol (any language): a test prints one line per assertion, starting with
#   PASS: <description>     FAIL: <description>     SKIP: <description and why>
# A test that exits non-zero without printing a FAIL line, or prints no assertion
# at all, counts as one failure; so does one that leaves a process running (below). Tests:
#   BUILD/tests/test-*   C tests (tests/test-*.c, see tests/test.h)
#   tests/t-*.sh         shell tests, run with sh
#   tests/t-*.py         Python tests, run with /usr/bin/python3 (Debian's, with numpy)
# Script tests get K3_BUILD=<build dir> (absolute) and K3_SRC=<repo root>, and a scratch
# directory K3_TMP. Every test gets its own XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME and
# XDG_CACHE_HOME (under K3_TMP/xdg), so no two tests share history, autosave, settings or cache
# files (HOME stays: npm, cargo and the like keep their configuration there). One exception: the
# engine's measured-speed cache (k3chat/speed under XDG_CACHE_HOME: the figures of this machine's
# kernels, each with the load it was measured under, src/model/speed.c) starts as a copy of the
# figures the tree's earlier tests measured, and what a test adds goes back to that pool when it
# ends. Measuring takes a few CPU-seconds (several times that under ASan) and a fresh cache per
# test measured again in every test that runs --inspect or opens a large model; the engine still
# measures each figure it finds no line for at a load like now's. The tests of a later tree (the
# sanitizer tree) start with the first tree's figures too, before their own tree's (which win
# where both have a figure for the load): the probes' 256 MB products ran 17 CPU-s under ASan
# against 2.4 in the normal tree, in every early ASan test that ran --inspect, and the same
# kernels run under the sanitizers in the C tests; t-speed-cache.sh, with a cache of its own,
# still runs the probes themselves in each tree. A test that needs a cache of its own
# (t-speed-cache.sh forges one) sets XDG_CACHE_HOME itself. The engine measures a figure again
# when the load has moved since (src/model/speed.c), and the suite's own tests move it (2 to 9
# on a 2-core machine): K3_TEST_LOAD=1 fixes the load the figures are measured under and compared
# with, so a figure is measured once per pool, not again in each test that starts after a jump
# (seven sets of the base probes in the first two minutes of a make check, 5-6 CPU-s each, and
# the release-shape probes of t-release again in its --inspect runs). Before the first test, one
# --inspect of a tiny model fills the first tree's pool, so the tests that start together do not
# each measure the base figures.
# Markers, each a line of its own in a script test:
#   # run-once    runs only for the first tree (for slow checks whose code is not under the
#                 sanitizers, e.g. the numpy reference)
#   # run-alone   runs with no other test beside it (RSS or timing measured against a quiet
#                 machine); these run last, one at a time, once every other test has ended.
#                 In the first tree only: the RSS checks SKIP under the sanitizers (ASan's
#                 quarantine keeps freed memory), and the sanitizer tree's runs (t-serve-batch,
#                 18 CPU-s) started after every other test, a core idle beside each
#   # slow        starts before the others (long tests started early keep every job busy to
#                 the end instead of leaving one long test running alone at the close)
#   # after-build runs once every --bg command has ended (t-fuzz: make fuzz-build is then
#                 up to date, never a second make beside the --bg one in the same tree)
# Tests run K3_TEST_JOBS at a time (default 3: many tests wait on tmux, timers or a server; with
# --bg and no K3_TEST_JOBS, 4 once every --bg build has ended: the builds used the CPU those waits
# leave, and three tests alone left a 2-core machine a third idle after them in make check);
# the per-test lines still come in the fixed order (trees, C tests, scripts) as each test and
# all before it have finished, and the closing line counts them all. K3_TEST_JOBS=1 runs one
# test at a time. TEST_FILTER=substring limits which tests run.
# Before the closing line, the first lines of each failed test come once more (a CI page may
# show only the end of the output). Per-test logs: BUILD/test-logs/NAME.log. Each test's
# summary line ends with its wall seconds, the CPU seconds of its processes (user + system) and
# when it started, in seconds from the first test's start: where the suite's time goes on a
# 2-core machine (CPU or waiting) and its schedule.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
pass=0; fail=0; skip=0; first=1
timeout_s=${TEST_TIMEOUT:-900}
jobs=${K3_TEST_JOBS:-3}
case "$jobs" in '' | *[!0-9]* | 0) echo "run.sh: K3_TEST_JOBS='$jobs': expected a whole number >= 1"; exit 2 ;; esac
jobs_after=$jobs; [ -z "${K3_TEST_JOBS:-}" ] && jobs_after=4 # once the --bg builds have ended
# OpenMP threads that spin while idle steal the other core from the next test step on a
# small machine; tests measure results, not latency.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export K3_TEST_LOAD=1 # the speed figures' load (above)
bgn=0 # the --bg commands: BGT_k (tree), BGC_k (command)
while [ $# -gt 0 ]; do
    case "$1" in
        --bg)
            [ $# -ge 3 ] || { echo "run.sh: --bg needs a tree and a command"; exit 2; }
            bgn=$((bgn + 1))
            eval "BGT_$bgn=\$2 BGC_$bgn=\$3"
            shift 3 ;;
        *) break ;;
    esac
done
res=$(mktemp -d "${TMPDIR:-/tmp}/k3run.XXXXXX") || exit 2
trap 'rm -rf "$res"' EXIT
# interrupted: stop the running tests (timeout passes the signal to the test's process group)
# and the --bg builds
bgpid=""
trap '[ -n "$bgpid" ] && kill -TERM "$bgpid" 2>/dev/null
      for _p in "$res"/*.pid; do [ -f "$_p" ] && kill -TERM "$(cat "$_p")" 2>/dev/null; done
      for _p in "$res"/bg-*.pid; do [ -f "$_p" ] && kill -TERM "-$(cat "$_p")" 2>/dev/null; done; exit 130' INT TERM
# bg_poll: BGS_k for each --bg command: ok (succeeded), wait (not ended) or failed
bg_poll() {
    _k=1
    while [ $_k -le $bgn ]; do
        if [ ! -f "$res/bg-$_k.rc" ]; then
            eval "BGS_$_k=wait"
        else
            read -r _rc <"$res/bg-$_k.rc"
            if [ "$_rc" = 0 ]; then eval "BGS_$_k=ok"; else eval "BGS_$_k=failed"; fi
        fi
        _k=$((_k + 1))
    done
}
# tree_state TREE: st=ok when no --bg command builds TREE or it has succeeded, else wait or
# failed, and bk its command's number (as of the last bg_poll; no process started)
tree_state() {
    st=ok _k=1
    while [ $_k -le $bgn ]; do
        eval "_t=\$BGT_$_k _s=\$BGS_$_k"
        [ "$_t" = "$1" ] && [ "$_s" != ok ] && { st=$_s; bk=$_k; }
        _k=$((_k + 1))
    done
}
bg_is_tree() { _k=1; while [ $_k -le $bgn ]; do eval "_t=\$BGT_$_k"; [ "$_t" = "$1" ] && return 0; _k=$((_k + 1)); done; return 1; }
bg_all_done() { [ $bgn -eq 0 ] || [ -f "$res/bg-$bgn.rc" ]; }
if [ $bgn -gt 0 ]; then
    ( # one after another; setsid: the trap above stops the whole build
        k=1
        while [ $k -le $bgn ]; do
            eval "c=\$BGC_$k"
            t0=$(date +%s)
            setsid nice -n 10 sh -c "$c" >"$res/bg-$k.log" 2>&1 </dev/null &
            echo $! >"$res/bg-$k.pid"
            wait $!
            rc=$?
            echo $(($(date +%s) - t0)) >"$res/bg-$k.secs"
            echo $rc >"$res/bg-$k.rc.new" && mv "$res/bg-$k.rc.new" "$res/bg-$k.rc" # whole or absent
            k=$((k + 1))
        done
    ) &
    bgpid=$!
fi

# speed_pool FILE POOL: FILE's figures not in POOL yet are appended to it (one writer at a time:
# mkdir is the lock; readers copy POOL whole, it is replaced by rename). A FILE of another machine
# line (K3_ISA does not change it; a forged one would) is left out.
speed_pool() {
    until mkdir "$2.lock" 2>/dev/null; do sleep 0.05; done
    if [ ! -f "$2" ]; then
        cp "$1" "$2.new" && mv "$2.new" "$2"
    elif [ "$(head -n 1 "$1")" = "$(head -n 1 "$2")" ]; then
        { cat "$2"; tail -n +2 "$1" | grep -vxF -f "$2"; } >"$2.new"
        mv "$2.new" "$2"
    fi
    rmdir "$2.lock"
}

# run_one ID NAME BUILD CMD...: one test; its summary lines go to $res/ID.out, its counts
# ("P F S") to $res/ID.cnt, and $res/ID.done appears last
run_one() {
    id=$1; name=$2; b=$3; shift 3
    log="$b/test-logs/$(echo "$name" | tr '/' '_').log"
    mkdir -p "$b/test-logs"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/k3test.XXXXXX")
    sp="$tmp/xdg/cache/k3chat/speed" pool="$res/speed.$(echo "$b" | tr '/' '_')"
    mkdir -p "${sp%/*}"
    pool1="$res/speed.$(echo "$tree1" | tr '/' '_')" # the first tree's figures
    if [ "$pool1" != "$pool" ] && [ -f "$pool1" ] && { [ ! -f "$pool" ] || [ "$(head -n 1 "$pool1")" = "$(head -n 1 "$pool")" ]; }; then
        { cat "$pool1"; [ -f "$pool" ] && tail -n +2 "$pool" | grep -vxF -f "$pool1"; } >"$sp"
    elif [ -f "$pool" ]; then
        cp "$pool" "$sp"
    fi
    t0=$(date +%s)
    K3_BUILD="$root/$b" K3_SRC="$root" K3_TMP="$tmp" XDG_CACHE_HOME="$tmp/xdg/cache" \
        XDG_CONFIG_HOME="$tmp/xdg/config" XDG_DATA_HOME="$tmp/xdg/data" XDG_STATE_HOME="$tmp/xdg/state" \
        timeout "$timeout_s" "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$res/$id.pid" # timeout runs in a process group of its own: the trap below stops it
    wait $!
    rc=$?
    t1=$(date +%s)
    # the CPU seconds of the test's processes (user + system of the children waited for)
    # (times in a pipe or $(...) would run in a fork, whose children have used nothing)
    times >"$res/$id.times"
    cpu=$(awk 'END { split($1 " " $2, a, /[ms]/); printf "%d", a[1] * 60 + a[2] + a[3] * 60 + a[4] }' "$res/$id.times")
    [ -s "$sp" ] && speed_pool "$sp" "$pool"
    # Processes the test left running (their environment holds its K3_TMP) are a failure that
    # names them, and are killed. A test ends what it started and waits for it (tmux_end in
    # lib.sh for what runs in tmux): seen, an ASan k3chat whose tmux pane was killed as it exited
    # spun at 100 % for the rest of the run (LeakSanitizer's exit check had ptrace-attached its
    # tracer, and the hang-up's SIGCONT to the orphaned group cancelled the SIGSTOP it waited
    # for), and a k3chat hung up while it loaded or streamed outlived its test by seconds.
    left=""
    for e in $(grep -lzxF "K3_TMP=$tmp" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${e#/proc/}; pid=${pid%/environ}
        left="$left $pid:$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80)"
        kill -9 "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
    p=$(grep -c '^PASS:' "$log"); f=$(grep -c '^FAIL:' "$log"); s=$(grep -c '^SKIP:' "$log")
    {
        grep -E '^(FAIL|SKIP):' "$log" | sed "s|^|  [$b] $name: |"
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1; echo "  [$b] $name: FAIL: exited with status $rc (log: $log)"; tail -n 15 "$log" | sed 's/^/      /'
        elif [ $((p + f + s)) -eq 0 ]; then
            f=1; echo "  [$b] $name: FAIL: printed no assertion (log: $log)"
        fi
        if [ -n "$left" ]; then
            f=$((f + 1)); echo "  [$b] $name: FAIL: left running when it ended (killed now):$left"
        fi
        printf '%-8s %-40s %4d passed %3d failed %3d skipped  %3ds  (cpu %3ds, from %3ds)\n' "[$b]" "$name" "$p" "$f" "$s" \
            $((t1 - t0)) "$cpu" $((t0 - start))
        echo "$p $f $s" >"$res/$id.cnt"
    } >"$res/$id.out"
    : >"$res/$id.done"
}

# the list: test I has name N_I, tree B_I, command C_I, and its marks ALONE_I, SLOW_I
n=0
add() { # add NAME BUILD ALONE SLOW AFTER CMD (the command as one string of shell words, no quoting)
    n=$((n + 1))
    eval "N_$n=\$1 B_$n=\$2 ALONE_$n=\$3 SLOW_$n=\$4 AFTER_$n=\$5 C_$n=\$6"
}
mark() { grep -q "^# $1\$" "$2" && echo 1 || echo 0; }
tree1=${1:-}
for b in "$@"; do
    if bg_is_tree "$b"; then # not built yet: its C tests from the sources
        for t in tests/test-*.c; do
            [ -f "$t" ] || continue
            nm=$(basename "$t" .c)
            [ -n "${TEST_FILTER:-}" ] && case "$nm" in *"$TEST_FILTER"*) ;; *) continue ;; esac
            add "$nm" "$b" 0 0 0 "$b/tests/$nm"
        done
    else
        [ -d "$b" ] || { echo "run.sh: build tree '$b' does not exist (run make first)"; fail=$((fail + 1)); continue; }
        for t in "$b"/tests/test-*; do
            [ -x "$t" ] || continue
            nm=$(basename "$t")
            case "$nm" in *.d|*.o) continue ;; esac
            [ -n "${TEST_FILTER:-}" ] && case "$nm" in *"$TEST_FILTER"*) ;; *) continue ;; esac
            add "$nm" "$b" 0 0 0 "$t"
        done
    fi
    for t in tests/t-*.sh tests/t-*.py; do
        [ -f "$t" ] || continue
        nm=$(basename "$t")
        [ -n "${TEST_FILTER:-}" ] && case "$nm" in *"$TEST_FILTER"*) ;; *) continue ;; esac
        if [ "$first" -eq 0 ] && [ "$(mark run-once "$t")" = 1 ]; then continue; fi
        al=0; [ "$first" -eq 1 ] && al=$(mark run-alone "$t") # first tree only (above)
        case "$t" in
            *.sh) add "$nm" "$b" "$al" "$(mark slow "$t")" "$(mark after-build "$t")" "sh $t" ;;
            *.py) add "$nm" "$b" "$al" "$(mark slow "$t")" "$(mark after-build "$t")" "/usr/bin/python3 $t" ;;
        esac
    done
    first=0
done

# the start order: slow tests, then the rest of the trees built by --bg and the rest of the first
# tree, one of each in turn, then the run-alone tests, each group in list order. The sanitizer
# tests mostly compute (CPU about their wall time) and the first tree's mostly wait on tmux,
# timers and servers (CPU a third of it): run one after the other, the first tree's tests came
# last, four at a time leaving a core idle for over a minute before the run-alone tests; side by
# side the waits overlap the sanitizer tests' work. Run-alone tests come last: each waits for
# every other test to end, and last that wait is no drain of the other jobs behind the longest
# running test (with no --bg they run alone at the end as they ran alone at the start before)
list_group() { # list_group G: the tests of group G (slow, restbg, rest, alone) in list order
    _i=1
    while [ $_i -le $n ]; do
        eval "a=\$ALONE_$_i s=\$SLOW_$_i tb=\$B_$_i"
        bgt=0; bg_is_tree "$tb" && bgt=1
        case "$1:$a:$s:$bgt" in alone:1:*:* | slow:0:1:* | restbg:0:0:1 | rest:0:0:0) printf ' %s' $_i ;; esac
        _i=$((_i + 1))
    done
}
rbg=$(list_group restbg) rst=$(list_group rest) mixed=""
set -- $rbg
for i in $rst; do # one of each in turn while both last
    [ $# -gt 0 ] && { mixed="$mixed $1"; shift; }
    mixed="$mixed $i"
done
mixed="$mixed $*"
order="$(list_group slow) $mixed $(list_group alone)"

# the first tree's pool of speed figures, from one --inspect of a tiny model (above); skipped
# for a run of one test or with no built first tree
if [ "$n" -gt 1 ] && [ -x "$tree1/k3chat" ] && [ -x "$tree1/k3-mkmodel" ] && ! bg_is_tree "$tree1"; then
    "$tree1/k3-mkmodel" --preset tiny --quiet "$res/tiny" >/dev/null 2>&1 &&
        XDG_CACHE_HOME="$res/cache" "$tree1/k3chat" --inspect "$res/tiny" >/dev/null 2>&1 &&
        cp "$res/cache/k3chat/speed" "$res/speed.$(echo "$tree1" | tr '/' '_')"
    rm -rf "$res/tiny" "$res/cache"
fi

# the scheduler: start tests in that order while fewer than $jobs run (a run-alone test only
# when none runs, and nothing beside it), passing over those whose tree is still being built
# (--bg); print the summaries in list order as they complete
running=0; alone=0; shown=1; start=$(date +%s)
pending=$order
while [ $shown -le $n ]; do
    left=""; hold=0
    bg_poll
    jobs_now=$jobs; [ $bgn -gt 0 ] && bg_all_done && jobs_now=$jobs_after
    for i in $pending; do
        eval "a=\$ALONE_$i af=\$AFTER_$i tb=\$B_$i"
        tree_state "$tb"
        if [ "$st" = failed ]; then # its tree did not build: a failure, with the build's end
            eval "nm=\$N_$i"
            {
                echo "  [$tb] $nm: FAIL: not run: the build of $tb failed (--bg command: exit $(cat "$res/bg-$bk.rc"))"
                tail -n 15 "$res/bg-$bk.log" | sed 's/^/      /'
                printf '%-8s %-40s %4d passed %3d failed %3d skipped  %3ds\n' "[$tb]" "$nm" 0 1 0 0
            } >"$res/$i.out"
            echo "0 1 0" >"$res/$i.cnt"; : >"$res/$i.done"; eval "R_$i=2"
            continue
        fi
        if [ $hold -eq 1 ] || [ $running -ge "$jobs_now" ] || [ $alone -eq 1 ] || [ "$st" = wait ] ||
            { { [ "$a" = 1 ] || [ "$af" = 1 ]; } && ! bg_all_done; }; then
            left="$left $i"; continue
        fi
        if [ "$a" = 1 ] && [ $running -gt 0 ]; then # it waits until the others have finished
            left="$left $i"; hold=1; continue
        fi
        eval "run_one $i \"\$N_$i\" \"\$B_$i\" \$C_$i" &
        running=$((running + 1)); alone=$a
        eval "R_$i=1"
    done
    pending=$left
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
        [ "$f" -gt 0 ] && grep -v -e ': SKIP: ' -e '^\[' "$res/$shown.out" | head -n 4 >>"$res/failed"
        pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
        shown=$((shown + 1))
    done
    [ $shown -le $n ] && sleep 0.2
done
# the --bg builds: each one's time; a failed one counts as one more failure
k=1
while [ $k -le $bgn ]; do
    while [ ! -f "$res/bg-$k.rc" ]; do sleep 0.2; done
    eval "t=\$BGT_$k"
    rc=$(cat "$res/bg-$k.rc")
    if [ "$rc" = 0 ]; then
        echo "run.sh: --bg $t: built beside the tests in $(cat "$res/bg-$k.secs") s"
    else
        echo "run.sh: --bg $t: FAILED (exit $rc):"; tail -n 30 "$res/bg-$k.log" | sed 's/^/      /'
        fail=$((fail + 1))
    fi
    k=$((k + 1))
done
wait
# the failures once more, last: a CI page often shows only the end of the output
if [ -s "$res/failed" ]; then
    echo "run.sh: the failures (each failed test's first lines; all of them above):"
    head -n 16 "$res/failed" | cut -c1-240
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
