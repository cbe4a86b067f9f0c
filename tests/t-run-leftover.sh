#!/bin/sh
# t-run-leftover.sh: tests/run.sh on two small tests of its own, in a copy of the tree's layout
# under K3_TMP: a test that passes but leaves a `sleep` running fails, the summary naming the
# process, and the process is gone afterwards; a test that waits for its own sleep passes.
# A leftover used to be a note only, and a k3chat left behind by a test (an ASan one spinning in
# LeakSanitizer's exit check once its tmux pane was killed) went unnoticed in the counts.
# run-once
. "$K3_SRC/tests/lib.sh"
set -u
R="$K3_TMP/r"
mkdir -p "$R/tests" "$R/b"
cp "$K3_SRC/tests/run.sh" "$R/tests/"
# the sleep's argument is this run's own, so that the check below finds it and nothing else
nap=$((3000 + $$ % 1000))
printf '#!/bin/sh\nsleep %s &\necho "PASS: started a sleep"\n' "$nap" >"$R/tests/t-leave.sh"
printf '#!/bin/sh\nsleep 0.1 &\nwait $!\necho "PASS: waited for its sleep"\n' >"$R/tests/t-tidy.sh"
gone() { ! pgrep -fx "sleep $nap" >/dev/null; }

(cd "$R" && K3_TEST_JOBS=1 TEST_FILTER=t-leave sh tests/run.sh b) >"$K3_TMP/leave.out" 2>&1
rc=$?
check "a test that leaves a process running fails run.sh (exit $rc)" [ "$rc" -ne 0 ]
check "... with a FAIL line naming the process" grep -q "t-leave.sh: FAIL: left running when it ended (killed now): [0-9]*:sleep $nap" "$K3_TMP/leave.out"
check "... counted in the closing line" grep -qx "1 passed, 1 failed, 0 skipped" "$K3_TMP/leave.out"
check "... and the process is gone" wait_until "sleep $nap to go" 10 gone
for p in $(pgrep -fx "sleep $nap"); do kill "$p"; done # never left behind by this test either

(cd "$R" && K3_TEST_JOBS=1 TEST_FILTER=t-tidy sh tests/run.sh b) >"$K3_TMP/tidy.out" 2>&1
check "a test that waits for what it started passes (exit $?)" grep -qx "1 passed, 0 failed, 0 skipped" "$K3_TMP/tidy.out"
[ "$fails" -eq 0 ] || sed 's/^/    | /' "$K3_TMP/leave.out" "$K3_TMP/tidy.out"
finish
