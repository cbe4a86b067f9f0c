#!/bin/sh
# t-tui-hangup.sh: the full-screen chat's terminal goes away (the tmux server or the pane
# killed: a closed terminal window, a dropped ssh connection). k3chat must end promptly with
# 129, as its SIGHUP would say, also when no SIGHUP reaches it (run here in a session of its own,
# outside the terminal's): the terminal then stays "readable" for ever, each read an EOF, and the
# chat used to spin on it at most of a core until SIGKILL. While idle, while an answer streams
# (the mock), and on the real tiny model with the autosave holding the conversation. Line mode
# killed by SIGHUP or SIGTERM while it answers autosaves the turn, marked interrupted, first.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
command -v setsid >/dev/null || { echo "SKIP: setsid is not installed"; exit 0; }
err="$K3_TMP/stderr.txt"
: >"$err"
# run.sh TAG ARGS...: k3chat ARGS, its shell's pid in sh.TAG and its exit status in rc.TAG
cat >"$K3_TMP/run.sh" <<EOF
echo \$\$ >"$K3_TMP/sh.\$1"
tag=\$1
shift
"$K3CHAT" "\$@" 2>>"$err"
echo \$? >"$K3_TMP/rc.\$tag"
EOF
chat_pid() { pgrep -P "$(cat "$K3_TMP/sh.$1" 2>/dev/null || echo 0)" 2>/dev/null | head -n 1; }
exited() { [ -s "$K3_TMP/rc.$1" ]; }
gone() { ! kill -0 "$1" 2>/dev/null; }
pids=""
cleanup() { # a k3chat the hangup did not end is killed here (by its pid)
    $T kill-server 2>/dev/null
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

# hangup TAG HOW: the terminal goes (HOW: kill-server or kill-pane); k3chat, in its own session,
# gets no SIGHUP and must see the hangup on the terminal itself
hangup() {
    pid=$(chat_pid "$1")
    [ -n "$pid" ] || fail "$1: k3chat's pid"
    pids="$pids $pid"
    $T "$2"
    check "$1: k3chat ends after the terminal went away ($2)" wait_until "rc.$1" 30 exited "$1"
    check "$1: ... with 129, as SIGHUP would (got $(cat "$K3_TMP/rc.$1" 2>/dev/null))" \
        sh -c "[ \"\$(cat $K3_TMP/rc.$1 2>/dev/null)\" = 129 ]"
    check "$1: ... and no k3chat process is left" wait_until "pid $pid to go" 10 gone "$pid"
}

printf 'delay 200\nresponse %s THE-END\n' "$(seq 1 100 | tr '\n' ' ')" >"$K3_TMP/mock.txt"

# 1. idle at the prompt
tui_start 80 24 K3_MOCK="$K3_TMP/mock.txt" -- "setsid sh $K3_TMP/run.sh idle /no/model; sleep 60"
wait_for "mock · 3 layers" 20
hangup idle kill-server

# 2. while an answer streams, the pane killed
tui_start 80 24 K3_MOCK="$K3_TMP/mock.txt" -- "setsid sh $K3_TMP/run.sh stream /no/model; sleep 60"
wait_for "mock · 3 layers" 20
type_line "hi"
wait_for "1 2 3" 20
hangup stream kill-pane

# 3. the ordinary case: k3chat in the terminal's session gets its SIGHUP while it streams
tui_start 80 24 K3_MOCK="$K3_TMP/mock.txt" -- "sh $K3_TMP/run.sh ord /no/model; sleep 60"
wait_for "mock · 3 layers" 20
type_line "hi"
wait_for "1 2 3" 20
pid=$(chat_pid ord)
[ -n "$pid" ] || fail "ord: k3chat's pid"
pids="$pids $pid"
$T kill-server
check "ord: k3chat in the terminal's session ends on its SIGHUP" wait_until "pid $pid to go" 30 gone "$pid"

# 4. the real tiny model: one turn answered, the second under way when the terminal goes; the
# autosave holds the answered turn and the second, marked interrupted
M="$K3_TMP/model"
tiny_model "$M" 5
tui_start 100 30 K3_VK=0 -- "setsid sh $K3_TMP/run.sh model $M --think off --max-tokens 4000; sleep 60"
wait_input_empty 30
type_line "first"
answered() { grep -q '"role":"assistant"' "$K3_TMP"/data/k3chat/*.jsonl 2>/dev/null; }
wait_until "the first answer in the autosave file" 60 answered
wait_input_empty 20
type_line "second"
sleep 0.5
hangup model kill-server
f=$(ls "$K3_TMP"/data/k3chat/*.jsonl 2>/dev/null | head -n 1)
check "model: the autosave file parses and holds the conversation" /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
msgs = [r for r in rows[1:] if "role" in r]
assert rows[0].get("format") == "k3chat-transcript", rows[0]
assert msgs[0]["role"] == "user" and msgs[0]["content"] == "first", msgs[0]
assert msgs[1]["role"] == "assistant" and msgs[1].get("token_ids"), msgs[1]
assert msgs[2] == {"role": "user", "content": "second"}, msgs[2]
assert msgs[3]["role"] == "assistant" and msgs[3].get("interrupted") is True, msgs[3]
' "${f:-/nonexistent}"
# 5. line mode (k3chat --plain reading a pipe, as a script or a terminal's line mode does) on the
# real tiny model: SIGHUP, then SIGTERM, while the answer streams. It died at once by the default
# action, and the message and what came of the answer were in no autosave; now the turn stops,
# is autosaved marked interrupted, and k3chat dies by the signal (128 + its number). The third
# run's engine does not stop (each token held 10 s): after 5 s what came is saved all the same
for run in HUP:200 TERM:200 TERM:10000; do
    sig=${run%:*}
    rm -rf "$K3_TMP/lm" && mkdir -p "$K3_TMP/lm" && mkfifo "$K3_TMP/lm/in"
    XDG_DATA_HOME="$K3_TMP/lm/data" XDG_STATE_HOME="$K3_TMP/lm/state" K3_VK=0 K3_TEST_DECODE_DELAY=${run#*:} \
        "$K3CHAT" --plain "$M" --think off --max-tokens 4000 <"$K3_TMP/lm/in" >"$K3_TMP/lm/out" 2>>"$err" &
    pid=$!
    pids="$pids $pid"
    exec 7>"$K3_TMP/lm/in"
    echo "first" >&7
    wait_until "line mode ($sig): the answer's first token" 60 test -s "$K3_TMP/lm/out"
    kill -"$sig" "$pid"
    wait "$pid"
    st=$?
    exec 7>&-
    check "line mode, SIG$sig while answering (a token each ${run#*:} ms): k3chat dies by it ($((128 + $(signum $sig))), got $st)" \
        [ "$st" = $((128 + $(signum $sig))) ]
    f=$(ls "$K3_TMP"/lm/data/k3chat/*.jsonl 2>/dev/null | head -n 1)
    check "... the autosave holds the message and the answer so far, marked interrupted" /usr/bin/python3 -c '
import json, sys
msgs = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if "role" in r]
assert msgs[0] == {"role": "user", "content": "first"}, msgs
assert msgs[1]["role"] == "assistant" and msgs[1].get("interrupted") is True and msgs[1]["content"], msgs
' "${f:-/nonexistent}"
done
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $err"
finish
