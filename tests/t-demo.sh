#!/bin/sh
# t-demo.sh: what a new user sees first. `make demo` (run as the README says) opens the
# full-screen chat on k3-nano; a question gets its reasoning in the think channel (folded into
# the conversation when the turn ends, F2 unfolds it) and the right answer in the response;
# a second question in the same conversation is answered too, and /clear starts afresh.
# run-once
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
[ -f "$K3_SRC/models/k3-nano/config.json" ] || { echo "FAIL: models/k3-nano is missing"; exit 0; }
# make's own variables must not leak in from the make check that runs this test
tui_start 110 36 -- "cd $K3_SRC && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s demo B=$K3_BUILD 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
# every byte the terminal gets, to see a frame the screen polling below may fall between
$T pipe-pane -o "cat >> $K3_TMP/raw.txt"
check "make demo opens k3chat on k3-nano (status bar)" wait_for "k3-nano · " 120
# the number N as a whole word on a screen line that is not the question (›), the folded
# reasoning's summary or the status bar: the answer, in whatever wording ("83", "83.",
# "The answer is 83.")
answer_has() {
    $T capture-pane -p | grep -v -e '›' -e 'thought for' -e 'k3-nano · ' | grep -Eq "(^|[^0-9])$1([^0-9]|\$)"
}
type_line "What is 27 + 58?"
seen_think=0
i=0
while [ $i -lt 600 ]; do # the think pane while it streams (k3-nano is fast: poll closely)
    s=$(screen)
    case "$s" in *"── think"*) seen_think=1 ;; esac
    case "$s" in *"thought for"*) break ;; esac
    sleep 0.02; i=$((i + 1))
done
check "the turn ends with its reasoning folded into the conversation" wait_for "thought for" 30
check "the response pane has the right answer (85)" answer_has 85
keys F2
check "F2 unfolds the reasoning: the column sums of the think channel (7 + 8 = 15)" wait_for "7 + 8 = 15" 5
# the think pane's header was drawn before the reasoning was folded: in the terminal's bytes
# (escape sequences and shift-in/out removed), "── thinking" comes before "thought for"
think_before_fold() {
    sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/[\x0e\x0f]//g' "$K3_TMP/raw.txt" | tr -d '\r\n' |
        awk '{ h = index($0, "── thinking"); f = index($0, "thought for"); exit !(h > 0 && f > h) }'
}
if [ $seen_think = 1 ]; then
    pass "the think pane showed while the reasoning streamed (on the polled screen)"
else
    check "the think pane showed while the reasoning streamed (its header in the terminal's output before the fold)" \
        think_before_fold
fi
keys C-l
type_line "Reverse the word planet."  # the first turn, its reasoning included, stays in context
check "a second question in the same conversation: tenalp" wait_for "tenalp" 30
keys C-l; type_line "/clear"
# the earlier turns' "thought for" leaves the screen with them: else the wait below can match
# them before /clear has drawn, and the answer is looked for while the new turn still runs
wait_gone "thought for" 30
type_line "What is 36 + 47?"
# the answer's wording varies between models and thread counts ("83", "36 + 47 = 83.", "The
# answer is 83."): wait for the turn to end, then look for the number in the answer
wait_for "thought for" 30
check "after /clear, a new conversation: 83" answer_has 83
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10
check "no error on stderr" sh -c "! grep -q -i -e error -e Sanitizer $K3_TMP/stderr.txt"
finish
