#!/bin/sh
# t-tui-abuse.sh: terminal abuse. Resize storms while an answer streams, a tiny terminal, a
# dumb terminal, a closed stdout, SIGPIPE, and SIGTERM/SIGHUP in the middle of a generation of
# the real tiny model: k3chat exits cleanly, the terminal is restored and the autosave file
# parses and holds the finished turn.
# slow
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
k="$K3_BUILD/k3chat"
m="$K3_TMP/mock.txt"
err="$K3_TMP/stderr.txt"
: >"$err"
printf 'delay 2\nthink t\nresponse %s\n' \
    "$(i=0; while [ $i -lt 60 ]; do printf 'word%d ' $i; i=$((i + 1)); done)THE-END" >"$m"
has() { screen | grep -qF -- "$1"; }
nosan() { ! grep -q -e Sanitizer -e 'runtime error' "$1"; }

# 1. a resize storm while the answer streams (bounded: 60 resizes)
tui_start 80 24 K3_MOCK="$m" -- "$k /no/model 2>>$err; echo EXIT=\$?; sleep 30"
wait_for "mock · 3 layers" 10
type_line "storm"
i=0
while [ $i -lt 60 ]; do
    $T resize-window -x $((20 + (i * 37) % 100)) -y $((4 + (i * 11) % 40)) 2>/dev/null
    i=$((i + 1))
done
$T resize-window -x 100 -y 40 2>/dev/null
check "resize storm while streaming: the answer completes" wait_for "THE-END" 15
keys C-d
check "resize storm: exits with 0" wait_for "EXIT=0" 5

# 2. a tiny terminal (10x3): no crash, a usable exit, what is typed kept (the message sent once
# the window is large enough: t-tui-edges.sh item 17); growing it back shows the chat again
tui_start 10 3 K3_MOCK="$m" -- "$k /no/model 2>>$err; echo EXIT=\$?; sleep 30"
check "10x3: the too-small notice (wrapped to the width)" wait_for "too small" 10
check "10x3: still running after start" sh -c "! $T capture-pane -p | grep -q EXIT="
type_line "tiny"
sleep 0.5
$T resize-window -x 100 -y 40 2>/dev/null
wait_gone "too small" 10
check "10x3 grown to 100x40: the message typed while too small is sent" wait_for "› tiny" 10
check "10x3 grown to 100x40: the chat answers" wait_for "THE-END" 15
keys C-d
check "10x3: exits with 0" wait_for "EXIT=0" 5

# 3. TERM=dumb: line mode with a prompt (answers, exits 0)
tui_start 80 24 K3_MOCK="$m" -- "TERM=dumb $k /no/model 2>>$err; echo EXIT=\$?; sleep 30"
# no prompt to wait for: with stderr not a terminal line mode reads without one (the terminal
# keeps what is typed until k3chat reads it)
type_line "dumb"
check "TERM=dumb: answers in line mode" wait_for "THE-END" 10
keys C-d
check "TERM=dumb: exits with 0" wait_for "EXIT=0" 5
tmux_end "$T"

# 4. closed stdout and SIGPIPE in line mode (bounded with timeout)
printf 'hi\nagain\n' | K3_MOCK="$m" timeout 20 "$k" --plain /no/model >&- 2>"$K3_TMP/e4"
rc=$?
check "closed stdout: exit 1, no crash or hang (exit $rc)" sh -c "[ $rc -eq 1 ]"
check "closed stdout: says why, once" sh -c "[ \$(grep -c 'cannot write the answer to standard output' $K3_TMP/e4) -eq 1 ]"
cat "$K3_TMP/e4" >>"$err"
printf 'hi\nagain\nmore\n' | (K3_MOCK="$m" timeout 20 "$k" --plain /no/model 2>"$K3_TMP/e5"; echo $? >"$K3_TMP/rc5") |
    head -c 10 >/dev/null
rc=$(cat "$K3_TMP/rc5")
check "SIGPIPE (| head -c 10): ends promptly, no crash (exit $rc)" sh -c "[ $rc -eq 0 ] || [ $rc -eq 1 ] || [ $rc -eq 141 ]"
cat "$K3_TMP/e5" >>"$err"

# 5. SIGTERM and SIGHUP during a generation of the real tiny model
M="$K3_TMP/model"
if "$K3_BUILD/k3-mkmodel" --preset tiny --seed 5 "$M" >/dev/null 2>&1; then
    K3_VK=0 "$k" "$M" --prompt hi --max-tokens 5 >&- 2>"$K3_TMP/e6"
    rc=$?
    check "one-shot with a closed stdout: exit 1 (got $rc) and says why" \
        sh -c "[ $rc -eq 1 ] && grep -q 'cannot write to standard output' $K3_TMP/e6"
    cat "$K3_TMP/e6" >>"$err"
    for sig in TERM HUP; do
        data="$K3_TMP/data-$sig"
        tui_start 100 30 K3_VK=0 XDG_DATA_HOME="$data" -- "sh -c 'echo \$\$ >$K3_TMP/pid; exec $k $M --think off --max-tokens 4000 2>>$err'; echo EXIT=\$?; stty -a | tr ' ' '\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo; sleep 30"
        wait_input_empty 20
        type_line "first"
        # the first answer is done when the autosave file holds the assistant turn
        answered() { grep -q '"role":"assistant"' "$data"/k3chat/*.jsonl 2>/dev/null; }
        wait_until "the first answer in the autosave file" 30 answered
        f=$(ls "$data"/k3chat/*.jsonl 2>/dev/null | head -n 1)
        wait_input_empty 20
        type_line "second"
        sleep 0.5
        kill -$sig "$(cat "$K3_TMP/pid")"
        # 128 + the signal's number, as a shell reports it (k3chat(1), EXIT STATUS)
        st=$((128 + $(signum "$sig")))
        check "SIG$sig during a generation: exits with $st" wait_for "EXIT=$st" 10
        check "SIG$sig: the terminal is restored" wait_for "icanon echo" 5
        check "SIG$sig: the autosave file parses and holds the finished turn" \
            /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
msgs = [r for r in rows[1:] if "role" in r]
assert rows[0].get("format") == "k3chat-transcript", rows[0]
assert msgs[0] == {"role": "user", "content": "first"} or msgs[0]["content"] == "first", msgs[0]
assert msgs[1]["role"] == "assistant" and msgs[1].get("token_ids"), msgs[1]
' "${f:-/nonexistent}"
    done
else
    fail "k3-mkmodel --preset tiny"
fi
check "no sanitizer or runtime error report on stderr" nosan "$err"
finish
