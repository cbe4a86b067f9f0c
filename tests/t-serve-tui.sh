#!/bin/sh
# t-serve-tui.sh: the full-screen chat in --endpoint mode (tmux) against `k3chat --serve` on a
# generated tiny checkpoint: the model name from /v1/models, an answer streams into the panes,
# /experts says the remote side decides, Ctrl-C stops a long answer; with the server stopped a
# turn fails with a clear message, and once it is back /retry answers the kept message.
# The server listens on 127.0.0.1 and is always killed at the end. Its port is one below the
# kernel's ephemeral range: the test stops the server and starts it again on the same port, and a
# port the kernel picks (127.0.0.1:0) is one it also gives to outgoing connections, so another
# test's client could hold it by then ('address already in use': the restart failed, 4 FAIL
# lines, at load 8 beside the other server tests).
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
d="$K3_TMP/tiny"
"$K3_BUILD/k3-mkmodel" --preset tiny --seed 1 "$d" >/dev/null 2>&1 || { echo "FAIL: k3-mkmodel"; exit 1; }
spid=""
stop_server() { [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; spid=""; }
trap 'tmux_end "$T"; stop_server' EXIT
# start_server PORT: a server on 127.0.0.1:PORT; waits (bounded) until it says it is serving or
# has ended (a port in use ends it at once). Status 0 and $port set when it serves.
up_or_ended() { grep -q "serving" "$K3_TMP/serve.log" || ! kill -0 "$spid" 2>/dev/null; }
start_server() {
    : >"$K3_TMP/serve.log"
    OMP_NUM_THREADS=1 K3_TEST_DECODE_DELAY=10 "$K3CHAT" "$d" --serve "127.0.0.1:$1" --model tiny-remote \
        2>>"$K3_TMP/serve.log" &
    spid=$!
    port=""
    wait_until "the server to say it is serving" 10 up_or_ended
    grep -q "serving" "$K3_TMP/serve.log" && { port=$1; return 0; }
    wait "$spid" 2>/dev/null; spid=""
    return 1
}
# the first port: a free one below the ephemeral range (ip_local_port_range's first; 32768 when
# unreadable), from a start drawn from the process id (another tree's run may hold one)
eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
case "$eph" in '' | *[!0-9]*) eph=32768 ;; esac
[ "$eph" -gt 12000 ] || eph=32768
try=0
until [ $try -ge 20 ] || start_server $((10000 + ($$ * 7 + try * 997) % (eph - 10000))); do
    grep -q "address already in use" "$K3_TMP/serve.log" || break # not a port in use: the FAIL below
    try=$((try + 1))
done
check "the server starts on a free loopback port below the ephemeral range ($port)" [ -n "$port" ]
[ -n "$port" ] || { sed 's/^/# serve.log: /' "$K3_TMP/serve.log" | tail -n 8; finish; }

# 128 tokens: the response pane shows only while an answer streams, and 16 tokens of the tiny
# model could start and end between two looks at a busy machine's screen
tui_start 100 30 -- "$K3CHAT --endpoint http://127.0.0.1:$port --max-tokens 128 --temp 0 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "the status bar names the remote model" wait_for "tiny-remote" 10
type_line "hello"
check "the answer streams in (think pane) and the turn ends" wait_for "thought for" 30
keys C-l; type_line "/experts 2"
check "/experts says the remote server decides" wait_for "remote server places its own experts" 5
keys C-l; type_line "/think off"
type_line "go on"
# the response pane while the answer streams, or, when it ended between two looks at a busy
# machine's screen, the answer in the conversation with no reasoning folded above it (greedy:
# it runs to the length limit, the second marker)
# (the first answer may end before the limit: only what follows "› go on" counts)
after_go_on() { screen | sed -n '/› go on/,$p'; }
resp_or_done() {
    has "── response" ||
        { after_go_on | grep -q 'length limit reached' && ! after_go_on | grep -q 'thought for'; }
}
check "with thinking off the answer goes to the response pane" wait_until "the response pane" 20 resp_or_done
# a quit while the answer streams only warns (k3chat(1), Ctrl-D): quit once the turn has ended
turn_ended() { after_go_on | grep -q 'length limit reached'; }
check "the greedy answer runs to the length limit" wait_until "the length-limit marker after '› go on'" 30 turn_ended
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10

# a long answer (greedy "once upon a time" runs past 2,000 tokens; "hello" ended at 370 once the
# kernels rounded once per group of 32): Ctrl-C stops it. The server's K3_TEST_DECODE_DELAY=10
# makes those 2,000 tokens last 20 s or more on any machine (an idle one streamed them in about
# a second, a busy one's look at the screen can take longer)
tui_start 100 30 -- "$K3CHAT --endpoint http://127.0.0.1:$port/v1 --temp 0 --think off 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "tiny-remote" 10
type_line "once upon a time"
check "a long remote answer streams" wait_for "── response" 20
# the pane opens as the turn starts: on a loaded machine the request may not have reached the
# server yet, and a Ctrl-C then ends it before the server has anything to cancel
joined3() { [ "$(grep -c 'joins slot' "$K3_TMP/serve.log")" -ge 3 ]; }
check "the server generates it" wait_until "the server's third 'joins slot'" 20 joined3
keys C-c
check "Ctrl-C stops it" wait_for "[stopped]" 10
check "and the server cancels the generation" wait_until "'cancelled' in the server's log" 5 grep -q "cancelled" "$K3_TMP/serve.log"
# what the server said instead, into the test's log (one failure seen at load 5, not reproduced)
grep -q "cancelled" "$K3_TMP/serve.log" || sed 's/^/# serve.log: /' "$K3_TMP/serve.log" | tail -n 8

# the server goes away: a clear error, the message is kept; back again: /retry answers it
stop_server
keys C-l; type_line "once upon a time" # long (as above): the retried answer still streams at its Ctrl-C
check "a turn with the server down says it cannot connect" wait_for "cannot connect" 10
start_server "$port"
check "the server is back on the same port" [ -n "$port" ]
keys C-l; type_line "/retry"
check "/retry sends the kept message again and it is answered" wait_for "── response" 20
keys C-c
# the first answer's marker is still on the screen: wait for this one's
two_stopped() { [ "$(screen | grep -cF '[stopped]')" -ge 2 ]; }
check "Ctrl-C stops the retried answer" wait_until "a second [stopped] marker" 10 two_stopped
keys C-d
check "exit with 0" wait_for "EXIT=0" 10
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
stop_server
finish
