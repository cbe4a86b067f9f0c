#!/bin/sh
# t-prefill-progress.sh: a turn's prefill that runs past a second shows its progress (tokens done
# of the prompt's, routed-expert bytes read): on stderr in line mode (one line about every
# second when stderr is not a terminal) and in the full-screen chat's status bar, gone once the
# answer streams. The tiny model prefills in milliseconds, so K3_TEST_PREFILL_DELAY (a test-only
# row of the settings table) makes each of its 6 layers wait; a fast prefill shows nothing.
. "$K3_SRC/tests/tui-lib.sh"
d="$K3_TMP/tiny"
tiny_model "$d" 1

# line mode, stderr a file: a 6 x 300 ms prefill at K3_CHUNK=32 (the chat prompt, ~200 tokens, is
# one prefill window: per chunk it would take 6 passes of 1.8 s). How many lines come depends on
# how long the prefill takes: 1.8 s of waits on a quiet machine, more than 6 s a layer under
# AddressSanitizer at load 25 (a line after every layer there); so the count is checked against
# the time the command took, and the window by the counts the lines give, not by their timing.
t0=$(date +%s%N)
printf 'hello there\n' | K3_CHUNK=32 K3_TEST_PREFILL_DELAY=300 "$K3CHAT" --plain --max-tokens 2 --temp 0 "$d" \
    >"$K3_TMP/out" 2>"$K3_TMP/err"
rc=$?
secs=$((($(date +%s%N) - t0) / 1000000000))
pat='^k3chat: prefill [0-9]+/[0-9]+ tokens, [0-9]+\.[0-9]{2} GB of experts read$'
n=$(grep -Ec "$pat" "$K3_TMP/err")
lines=$(grep -E "$pat" "$K3_TMP/err" | tr '\n' ';')
# one a second at most, after the first second, and the last one (a == b)
[ "$rc" = 0 ] && [ "$n" -ge 1 ] && [ "$n" -le $((secs + 1)) ]
ok $? "line mode, a 1.8 s prefill: $n progress line(s) on stderr, at most one a second of the $secs s it ran and the last (exit $rc; $lines)"
last=$(grep -E "$pat" "$K3_TMP/err" | tail -1 | sed 's/^k3chat: prefill \([0-9]*\)\/\([0-9]*\) .*/\1 \2/')
set -- $last
[ $# = 2 ] && [ "$1" = "$2" ] && [ "$2" -gt 5 ]
ok $? "line mode: the last progress line counts the whole prompt ('$last')"
# one window of P tokens through the tiny model's 6 layers reports P*l/6 after layer l; chunks of
# 32 would report 32 per chunk done and 32*l/6 of the next (5, 10, 16, ... 37, 42, ...)
grep -E "$pat" "$K3_TMP/err" | sed 's/^k3chat: prefill \([0-9]*\)\/\([0-9]*\) .*/\1 \2/' |
    awk '{ ok = 0; for (l = 1; l <= 6; l++) if (int($2 * l / 6) == $1) ok = 1; if (!ok) bad = 1 } END { exit bad }'
ok $? "line mode: the chat's first turn prefills as one window: each line counts a sixth of the prompt per layer ($lines)"
[ -s "$K3_TMP/out" ]; ok $? "line mode: the answer follows on stdout"

# a prefill of milliseconds (no delay): no line. Lines begin after a second of prefill, so when
# the whole command ran over a second (load and answer included) a busy machine may have
# stretched the prefill that long: lines then prove nothing either way (seen at load 25: 1.4 s)
t0=$(date +%s%N)
printf 'hello there\n' | "$K3CHAT" --plain --max-tokens 2 --temp 0 "$d" >"$K3_TMP/out" 2>"$K3_TMP/err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ "$rc" = 0 ] && [ "$ms" -ge 1000 ] && grep -q "k3chat: prefill " "$K3_TMP/err"; then
    echo "SKIP: line mode, a prefill of milliseconds: no progress line (the machine is busy: the command took $ms ms, so the prefill may have run over a second)"
else
    ! grep -q "k3chat: prefill " "$K3_TMP/err" && [ "$rc" = 0 ]
    ok $? "line mode, a prefill of milliseconds: no progress line (exit $rc, $ms ms)"
fi

K3_TEST_PREFILL_DELAY=x "$K3CHAT" --ids "1 2" "$d" >/dev/null 2>"$K3_TMP/err"
rc=$?
[ "$rc" != 0 ] && grep -qF "K3_TEST_PREFILL_DELAY: 'x' is not an integer in 0..10000" "$K3_TMP/err"
ok $? "K3_TEST_PREFILL_DELAY=x is refused naming the variable and the range ($(head -c 120 "$K3_TMP/err"))"

# K3_TEST_DECODE_DELAY (the other test-only row: a long answer outlasts a busy machine's look at
# the screen): each decode pass waits; 20 ids from --ids are 19 decode passes after the prompt's,
# so at least 1.9 s at 100 ms however fast the machine (without it: 0.3 s here)
t0=$(date +%s%N)
K3_TEST_DECODE_DELAY=100 "$K3CHAT" --ids "1 2 3" --max-tokens 20 --temp 0 "$d" >"$K3_TMP/out" 2>"$K3_TMP/err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
n=$(wc -w <"$K3_TMP/out")
[ "$rc" = 0 ] && [ "$n" = 20 ] && [ "$ms" -ge 1900 ]
ok $? "K3_TEST_DECODE_DELAY=100: 20 ids take at least 1.9 s ($ms ms, $n ids, exit $rc)"
K3_TEST_DECODE_DELAY=-1 "$K3CHAT" --ids "1 2" "$d" >/dev/null 2>"$K3_TMP/err"
rc=$?
[ "$rc" != 0 ] && grep -qF "K3_TEST_DECODE_DELAY: '-1' is not an integer in 0..10000" "$K3_TMP/err"
ok $? "K3_TEST_DECODE_DELAY=-1 is refused naming the variable and the range ($(tail -n 1 "$K3_TMP/err" | head -c 120))"

# the full-screen chat: a 6 x 500 ms prefill shows in the status bar, then the answer replaces it
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
tui_start 120 30 K3_TEST_PREFILL_DELAY=500 -- "$K3CHAT --max-tokens 4 --temp 0 $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "the model loads" wait_for "tiny · " 20
type_line "hello there"
check "status bar: the prefill's progress (tokens done of the prompt's, GB read)" wait_for " tok · 0.00 GB read" 10
check "status bar: the progress counts the prompt's tokens" sh -c "$T capture-pane -p | grep -Eq 'prefill [0-9]+/[0-9]+ tok'"
check "the answer streams and the turn ends" wait_for "[length limit reached]" 30
check "status bar: the progress is gone" wait_gone "GB read" 5
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10
finish
