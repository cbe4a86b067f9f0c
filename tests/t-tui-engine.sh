#!/bin/sh
# t-tui-engine.sh: the full-screen chat on the real engine and a generated tiny checkpoint
# (k3-mkmodel --preset tiny): tokens stream into the think and response panes, statistics reach
# the status bar, Ctrl-C stops a long answer and a new message works, /retry, /undo, /save and
# /load, /stats, resize while streaming, and a clean exit.
# slow
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
d="$K3_TMP/tiny"
"$K3_BUILD/k3-mkmodel" --preset tiny --seed 1 "$d" >/dev/null 2>&1 || { echo "FAIL: k3-mkmodel"; exit 1; }
tui_start 100 30 -- "$K3CHAT --max-tokens 24 --temp 0 $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "the model loads and its name is in the status bar" wait_for "tiny · " 20
check "status bar: the memory fit's choice (the defaults fit here)" has "8/8/8 bits · cache"
type_line "hello"
check "the think pane opens while the turn streams, or the turn has ended" wait_for "thought for" 30
check "the turn reports its length limit (random weights rarely end a message)" has "[length limit reached]"
check "status bar: tok/s" has "tok/s"
check "status bar: context" has "ctx "
keys C-l; type_line "/stats"
check "/stats shows the prompt tokens processed" wait_for "prompt tokens processed" 5
check "/stats shows the memory fit's choice" has "memory fit   8/8/8 bits · cache"
check "/stats shows the memory fit's full line (plan, available memory, why)" has "the defaults fit"
check "/stats names the CPU kernels' instruction set" wait_for "CPU kernels  $(K3_EXPERT_GB= "$K3CHAT" --inspect "$d" 2>/dev/null | sed -n 's/^kernels *\([^ ]*\).*/\1/p')" 5
keys C-l; type_line "/experts 0.25"
check "/experts applies the budget to the engine" wait_for "expert-cache budget now 0.25 GB" 10
keys C-l; type_line "/retry"
check "/retry generates again" wait_for "thought for" 30
keys C-l; type_line "/save $K3_TMP/e.jsonl"
check "/save writes a transcript" wait_for "saved " 5
check "the transcript has a header and messages" sh -c "[ \$(wc -l <$K3_TMP/e.jsonl) -ge 3 ]"
keys C-l; type_line "/undo"
check "/undo drops the exchange" wait_gone "› hello" 5
keys C-l; type_line "/load $K3_TMP/e.jsonl"
check "/load brings it back" wait_for "› hello" 5
# a transcript with tool turns shows them read-only: the call and the result
printf '%s\n' '{"format":"k3chat-transcript","version":1,"tools":[{"type":"function","function":{"name":"get_weather"}}]}' \
    '{"role":"user","content":"weather?"}' \
    '{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}' \
    '{"role":"tool","tool_call_id":"c1","content":"18 C"}' >"$K3_TMP/tools.jsonl"
keys C-l; type_line "/load $K3_TMP/tools.jsonl"
check "/load of tool turns: the call is shown" wait_for '-> get_weather({"city": "Paris"})' 5
check "/load of tool turns: the result is shown with its call id" has "tool result (c1):"
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10

# the fit lowers the dense matrices to 4 bits: K3_MEM_GB leaves 5.12 MB usable, where this model
# needs 5.22 MB at 8/8/8 and 5.01 MB at 4/8/8 (one expert per MoE layer; the session's 2.13 MB of
# chunk scratch included); the status bar says so
tui_start 100 30 K3_MEM_GB=0.5317 -- "$K3CHAT --max-tokens 4 --temp 0 $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "K3_MEM_GB=0.5317: the model loads" wait_for "tiny · " 20
check "status bar: the fit chose 4 bits for the dense matrices (step 2)" has "4/8/8 bits (fit step 2) · cache"
keys C-l; type_line "/stats"
check "/stats: the fit's choice and why" wait_for "chosen: step 2 of the fit order, since K3_BITS=8" 5
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10

# a long answer (greedy: this model and prompt run thousands of tokens without ending at
# K3_BITS=4, the numerics pinned here; at the default 8 bits it ends sooner; "go on" ended at 150
# tokens once the kernels rounded once per group of 32): Ctrl-C in the middle, then a new message.
# K3_MAXT=65536: on an idle machine the answer filled 8,192 tokens before the Ctrl-C, and "again"
# then had no room (the drawing got cheaper, so the engine runs faster beside it).
# K3_TEST_DECODE_DELAY=10: the answer (about 12,000 tokens) streams for two minutes or more on any
# machine; without it an idle machine streams it in seconds, and at load 30 it had ended between
# the look that saw the response pane and the look after the resize (5 FAILs from there on)
tui_start 100 30 K3_BITS=4 K3_MAXT=65536 K3_TEST_DECODE_DELAY=10 -- "$K3CHAT --max-tokens 100000 --temp 0 --think off $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "tiny · " 20
type_line "continue"
check "a long answer streams into the response pane" wait_for "── response" 20
$T resize-window -x 70 -y 20
check "resize while streaming" wait_for "── response" 5
keys C-c
check "Ctrl-C stops it, keeping the partial answer" wait_for "[stopped]" 10
type_line "again"
check "a new message after Ctrl-C is accepted" wait_input_empty 5
# stop it if it still streams; with text in the input, a Ctrl-C that comes just after the turn
# ended clears the input instead of quitting (no race between looking and pressing)
keys -l x; keys C-c; keys C-u
wait_gone "── response" 10
# one page at a time, each looked at once drawn: a busy machine draws late, and keys sent ahead
# of the frames could scroll past the message between two looks
found=0 prev=$(screen)
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    if printf '%s\n' "$prev" | head -n -2 | grep -q '› again'; then found=1; break; fi
    keys PPage
    n=0 # the page drawn (at the top nothing changes: give up after 5 s)
    while [ "$(screen)" = "$prev" ] && [ $n -lt $((100 * slow)) ]; do sleep 0.05; n=$((n + 1)); done
    prev=$(settled 5 screen) || break
done
check "and is in the conversation above its answer (PgUp finds it)" [ $found = 1 ]
keys C-d
check "exit with 0" wait_for "EXIT=0" 10
# a context too small for the prompt: a clear message, nothing changed, the message back
tui_start 100 30 K3_MAXT=64 -- "$K3CHAT $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "tiny · " 20
type_line "hello there"
check "a turn that would overflow the context says so" wait_for "context holds 64" 10
# (the notice's rows joined: where it wraps depends on the figures' digits)
joined_has() { screen | tr '\n' ' ' | tr -s ' ' | grep -qF -- "$1"; }
check "and, the chat being empty, says to shorten the message (not /clear or /forget)" joined_has "alone is too long for the context; shorten it"
check "the message is back in the input line" sh -c "$T capture-pane -p | tail -n 1 | grep -q '› hello there'"
check "the conversation is unchanged" sh -c "! $T capture-pane -p | head -n -1 | grep -q '› hello there'"
keys C-u; keys C-d
check "exit with 0 after the context error" wait_for "EXIT=0" 10

# K3_MMAP=1 on a k3-repack container whose shards shrink between turns (was SIGBUS, the end of
# the chat): the turn shows the error naming file, tensor and offset, the chat keeps running,
# and /retry answers once the files are back in place
c="$K3_TMP/c8"
mkdir "$K3_TMP/keep"
if "$K3_BUILD/k3-repack" "$d" "$c" --bits 8 --quiet 2>>"$K3_TMP/stderr.txt"; then
    tui_start 120 30 K3_MMAP=1 -- "$K3CHAT --max-tokens 4 --temp 0 --think off $c 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    check "K3_MMAP=1: the container loads" wait_for "c8 · " 20
    type_line hello
    check "K3_MMAP=1: the first turn answers" wait_for "length limit reached" 20
    for f in "$c"/model-*.safetensors; do
        cp "$f" "$K3_TMP/keep/"
        truncate -s "$(($(wc -c <"$f") / 2))" "$f"
    done
    type_line again
    check "K3_MMAP=1, shards halved: the turn's error names file, tensor and offset" \
        wait_until "the mapped-shard error" 20 joined_has "safetensors: mapped tensor 'model."
    check "and says the file shrank under the engine" joined_has "is past the end of the file (it shrank under the running engine)"
    for f in "$K3_TMP"/keep/*; do cp "$f" "$c/"; done # in place: the same inodes
    type_line /retry
    two_answers() { [ "$(screen | grep -c 'length limit reached')" -ge 2 ]; }
    check "K3_MMAP=1, files restored: /retry answers" wait_until "a second answer" 20 two_answers
    keys C-d
    check "K3_MMAP=1: exit with 0" wait_for "EXIT=0" 10
else
    fail "k3-repack of the tiny model"
fi

# line mode on the same model: the answer on stdout, and the autosave transcript
printf 'hello\n' | XDG_DATA_HOME="$K3_TMP/data2" HOME="$K3_TMP" "$K3CHAT" --max-tokens 12 --think off "$d" >"$K3_TMP/out" 2>>"$K3_TMP/stderr.txt"
rc=$?
check "line mode on the real engine exits with 0 (got $rc)" [ "$rc" -eq 0 ]
check "line mode writes the answer to stdout" [ -s "$K3_TMP/out" ]
check "the turn was autosaved in the XDG data directory" sh -c "ls $K3_TMP/data2/k3chat/*.jsonl >/dev/null 2>&1 || ls $K3_TMP/data2/k3chat/*/*.jsonl >/dev/null 2>&1"
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
