#!/bin/sh
# run.sh BUILD SECONDS [NAME...]: run each fuzz target for SECONDS on its corpus
# (FUZZ_RUNS=N instead: exactly N inputs from a fixed seed, so a short run is reproducible)
# (tests/fuzz/corpus/NAME, seeds committed; new inputs go to BUILD/corpus/NAME so the
# repository stays clean, and the next timed run starts from them). A FUZZ_RUNS run starts from
# the committed seeds alone, its new inputs in a directory of its own removed after it: the
# inputs earlier runs left in BUILD/corpus made each make check's fixed-seed run another one
# (and never the one of a clean clone, CI's). Two more things made such a run part from the
# last one: libFuzzer re-reads its corpus folder once a second (-reload), running what it finds
# there, so the inputs' numbering moved with the machine's speed; and its compare tracing
# (-use_cmp) takes operands that are heap addresses into its dictionary. 20,000 inputs twice:
# 0 of the 11 targets repeated their run with both, 6 with -reload=0, 10 with -reload=0
# -use_cmp=0 (fuzz-cmd's first pass over its seeds already differs: cause not found), at the
# same coverage (cov summed over the targets 6,036 against 5,995 with -use_cmp on; each target
# within 3 %). So a FUZZ_RUNS run (make check's) sets both: its corpus folder is its own, and a
# finding in CI can be run again locally as it ran there. A timed run (make fuzz, random seed)
# keeps both on: over minutes the compare operands are what gets it past keywords and magic
# numbers, and its folder may be shared with another job.
# Prints "PASS: NAME ..." or "FAIL: NAME ..." per target; a finding is saved under
# BUILD/findings/NAME/.
set -u
b=$1; secs=$2; shift 2
cd "$(dirname "$0")/../.." || exit 2
names=${*:-$(ls tests/fuzz/fuzz-*.c | sed 's|.*/||; s|\.c$||')}
rc=0
for n in $names; do
    exe="$b/fuzz/$n"
    [ -x "$exe" ] || { echo "FAIL: $n: $exe not built (make fuzz-build)"; rc=1; continue; }
    seeds="tests/fuzz/corpus/$n"; work="$b/corpus/$n"; find="$b/findings/$n"
    [ -n "${FUZZ_RUNS:-}" ] && { work="$b/corpus-runs/$n"; rm -rf "$work"; }
    mkdir -p "$work" "$find" "$seeds"
    log="$b/fuzz-$n.log"
    if [ -n "${FUZZ_RUNS:-}" ]; then limit="-runs=$FUZZ_RUNS -seed=1 -reload=0 -use_cmp=0"; what="fixed seed 1"
    else limit="-max_total_time=$secs"; what="${secs}s"; fi
    ASAN_OPTIONS=detect_leaks=1 "$exe" $limit -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -artifact_prefix="$find/" -print_final_stats=1 "$work" "$seeds" >"$log" 2>&1
    st=$?
    [ -n "${FUZZ_RUNS:-}" ] && rm -rf "$work"
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    if [ "$st" -eq 0 ]; then
        echo "PASS: $n: ${runs:-?} inputs ($what), no finding"
    else
        echo "FAIL: $n: finding (exit $st), see $log and $find"; tail -n 20 "$log" | sed 's/^/    /'
        rc=1
    fi
done
exit $rc
