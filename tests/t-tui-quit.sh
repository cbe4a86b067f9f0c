#!/bin/sh
# t-tui-quit.sh: quitting while the engine's worker is blocked in a call that does not return (a
# read from a hung file system, a server that does not answer). The quit used to wait for the
# worker for ever (after the screen was gone: a terminal that took no keys and a process only
# SIGKILL ended). Now the wait is told, a second request (or 10 s) quits without the worker, and
# what the user saw of the answer goes to the autosave, marked interrupted: as the turn's end
# would have written it after a /retry, an /edit or a /load too (5-7), and once only when the
# worker wrote the turn itself before it blocked (8).
# The mock's "stall" blocks its worker, deaf to Ctrl-C and quit; on models/k3-nano,
# K3_TEST_DECODE_DELAY=10000 holds each token 10 s, as deaf.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

# 1: Ctrl-C stops nothing; a second one, a second later, says so; a third quits without waiting
mock_chat 100 24 'delay 0\nstall 600000\nresponse first words, then nothing\n'
type_line "hello"
wait_for "fir" 10
keys C-c
sleep 1.2
keys C-c
check "1: a second Ctrl-C says the answer does not stop and what a third one does" \
    wait_for "Ctrl-C again quits without waiting for it" 5
keys C-c
check "1: the third Ctrl-C quits" wait_for "EXIT=0" 10
check "1: and says it did not wait for the engine" \
    grep -q "quitting without waiting for the engine, which did not stop" "$K3_TMP/stderr.txt"
check "1: and that the mock keeps no autosave" grep -q "this engine keeps no autosave" "$K3_TMP/stderr.txt"

# 2: /quit twice: the first one says an answer is coming, the second one waits, tells the wait,
# and Ctrl-D then quits at once; nothing typed meanwhile is sent
: >"$K3_TMP/stderr.txt"
mock_chat 100 24 'delay 0\nstall 600000\nresponse first words, then nothing\n'
type_line "hello"
wait_for "fir" 10
type_line "/quit"
wait_for "an answer is still coming" 5
type_line "/quit"
check "2: the second /quit waits and says so" wait_for "quitting: the engine has not stopped yet" 5
type_line "more"
check "2: a line typed while quitting is not sent" wait_for "nothing more is sent" 5
keys C-u C-d
check "2: Ctrl-D while quitting quits without waiting" wait_for "EXIT=0" 10
check "2: and says so" grep -q "quitting without waiting for the engine" "$K3_TMP/stderr.txt"

# 3: a quit with nothing blocked waits for nothing and says nothing of it
: >"$K3_TMP/stderr.txt"
mock_chat 100 24 'delay 0\nresponse quick answer\n'
type_line "hello"
wait_for "quick answer" 10
keys C-d
check "3: a plain quit ends at once" wait_for "EXIT=0" 10
check "3: with no word of a blocked engine" sh -c "! grep -q 'without waiting' '$K3_TMP/stderr.txt'"

# 4: on k3-nano, the answer so far reaches the autosave, marked interrupted, after the message
nano="$K3_SRC/models/k3-nano"
if [ -f "$nano/model.safetensors" ]; then
    : >"$K3_TMP/stderr.txt"
    rm -rf "$K3_TMP/data"
    tui_start 100 24 K3_TEST_DECODE_DELAY=10000 -- \
        "$K3CHAT --think off --temp 0 --system 'Be brief.' $nano 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    wait_for "k3-nano" 60
    type_line "first message"
    wait_for "response · Ctrl-C stops" 60 # the title once the answer has text ("waiting for the first token" before)
    keys C-d
    wait_for "an answer is still coming" 5
    keys C-d
    wait_for "quitting: the engine has not stopped yet" 10
    keys C-d
    check "4: the third Ctrl-D quits" wait_for "EXIT=0" 15
    check "4: saying where the conversation is" grep -q "the conversation is autosaved in .*k3chat/.*jsonl, the last answer marked interrupted" "$K3_TMP/stderr.txt"
    check "4: the autosave holds the message and the answer so far, marked interrupted" /usr/bin/python3 -c '
import glob, json, sys
files = glob.glob(sys.argv[1] + "/k3chat/*.jsonl")
lines = [json.loads(l) for l in open(files[0], encoding="utf-8")] if len(files) == 1 else []
msgs = [m for m in lines if m.get("role")]
sys.exit(not (len(msgs) == 3 and msgs[1]["role"] == "user" and msgs[1]["content"] == "first message"
              and msgs[2]["role"] == "assistant" and msgs[2].get("interrupted") is True and msgs[2]["content"]))' "$K3_TMP/data"
    # the rescue started the file: it starts as the autosave would (it had neither)
    check "4: the new file has the model header and the --system prompt" /usr/bin/python3 -c '
import glob, json, sys
files = glob.glob(sys.argv[1] + "/k3chat/*.jsonl")
lines = [json.loads(l) for l in open(files[0], encoding="utf-8")] if len(files) == 1 else []
sys.exit(not (lines and lines[0].get("format") == "k3chat-transcript"
              and lines[0].get("model", {}).get("dir", "").endswith("k3-nano")
              and len(lines[0]["model"].get("config_fnv64", "")) == 16
              and len(lines) > 1 and lines[1] == {"role": "system", "content": "Be brief."}))' "$K3_TMP/data"
else
    echo "SKIP: 4 runs on k3-nano (models/k3-nano/model.safetensors is not there)"
fi
# 5-8: the mock's autosave (the script's "autosave"); each quits as 2 does, the worker stalled
quit_blocked() { # quit_blocked N: /quit, /quit, Ctrl-D: k3chat quits without the blocked worker
    type_line "/quit"
    wait_for "an answer is still coming" 5
    type_line "/quit"
    wait_for "quitting: the engine has not stopped yet" 5
    keys C-d
    check "$1: quits without waiting for the stalled engine" wait_for "EXIT=" 10
}
# the active messages and the abandoned ones of FILE as "role:content[:abandoned N][:interrupted]"
# lines, the header left out
cat >"$K3_TMP/msgs.py" <<'PY'
import json, sys
for l in open(sys.argv[1], encoding="utf-8"):
    m = json.loads(l)
    if "role" in m:
        print(m["role"] + ":" + m["content"] + (":abandoned %d" % m["abandoned"] if "abandoned" in m else "")
              + (":interrupted" if m.get("interrupted") else ""))
PY
msgs_are() { # msgs_are FILE LINES: FILE's messages (msgs.py) are LINES
    [ -f "$1" ] && [ "$(/usr/bin/python3 "$K3_TMP/msgs.py" "$1")" = "$2" ]
}
autosaves() { ls "$K3_TMP"/data/k3chat/*.jsonl 2>/dev/null; }
one_autosave() { [ "$(autosaves | wc -l)" -eq 1 ]; }

# 5: the worker blocks in a /retry: the autosave holds the conversation as the screen showed it,
# the answer the /retry replaced as its abandoned branch and the new one so far, interrupted (it
# used to keep the file as of the turn before, the /retry and its answer lost)
rm -rf "$K3_TMP/data"
: >"$K3_TMP/stderr.txt"
mock_chat 100 24 'autosave\ndelay 0\nresponse first answer\n---\nstall 600000\nresponse xyzzy words\n'
type_line "hello"
wait_for "first answer" 10
type_line "/retry"
wait_for "xyz" 10
quit_blocked 5
check "5: the rescue says where" grep -q "the conversation is autosaved in .*k3chat/.*jsonl, the last answer marked interrupted" "$K3_TMP/stderr.txt"
check "5: the autosave holds the /retry's branch and its answer so far" msgs_are "$(autosaves)" "user:hello
assistant:first answer:abandoned 1
assistant:xyz:interrupted"
# /load shows it as the user last saw it
f5=$(autosaves)
mock_chat 100 24 'delay 0\nresponse r\n'
type_line "/load $f5"
check "5: /load of that autosave" wait_for "loaded 2 messages" 5
check "5: shows the interrupted answer, marked" sh -c "$T capture-pane -p | grep -A1 -x 'xyz' | grep -qx '\\[stopped\\]'"
check "5: and not the answer the /retry replaced" hasnt "first answer"
keys C-d
wait_for "EXIT=" 10

# 6: the worker blocks in an /edit: the old exchange as the abandoned branch, the edited message
# and its answer so far, interrupted
rm -rf "$K3_TMP/data"
: >"$K3_TMP/stderr.txt"
mock_chat 100 24 'autosave\ndelay 0\nresponse first answer\n---\nstall 600000\nresponse xyzzy words\n'
type_line "hello"
wait_for "first answer" 10
type_line "/edit"
wait_input "hello" 5
keys C-u
type_line "better"
wait_for "xyz" 10
quit_blocked 6
check "6: the autosave holds the /edit's branch, the edited message and its answer so far" msgs_are "$(autosaves)" "user:hello:abandoned 1
assistant:first answer:abandoned 1
user:better
assistant:xyz:interrupted"

# 7: the worker blocks in the first turn after a /load: the loaded conversation goes on in a new
# autosave file holding all of it (the rescue appended the turn to the file of the conversation
# before the /load, or started one with the turn alone)
rm -rf "$K3_TMP/data"
: >"$K3_TMP/stderr.txt"
printf '%s\n' '{"format":"k3chat-transcript","version":1}' '{"role":"user","content":"old question"}' \
    '{"role":"assistant","content":"old answer"}' >"$K3_TMP/old.jsonl"
mock_chat 100 24 'autosave\ndelay 0\nresponse first answer\n---\nstall 600000\nresponse xyzzy words\n'
type_line "hello"
wait_for "first answer" 10
f7=$(autosaves)
type_line "/load $K3_TMP/old.jsonl"
wait_for "loaded 2 messages" 5
type_line "next"
wait_for "xyz" 10
quit_blocked 7
check "7: the conversation before the /load keeps its file as it was" msgs_are "$f7" "user:hello
assistant:first answer"
f7b=$(autosaves | grep -vxF "$f7")
check "7: a new file holds the loaded conversation and the turn, interrupted" msgs_are "$f7b" "user:old question
assistant:old answer
user:next
assistant:xyz:interrupted"

# 8: the worker autosaved its end of turn and then blocked (before it told the UI): the rescue
# does not write the turn a second time
rm -rf "$K3_TMP/data"
: >"$K3_TMP/stderr.txt"
mock_chat 100 24 'autosave\ndelay 0\nstall-end 600000\nresponse whole answer\n'
type_line "hello"
wait_for "whole answer" 10
wait_until "the worker's autosave" 10 sh -c "grep -qs 'whole answer' $K3_TMP/data/k3chat/*.jsonl"
quit_blocked 8
check "8: one autosave file" one_autosave
check "8: holding the turn once" msgs_are "$(autosaves)" "user:hello
assistant:whole answer"
check "8: the rescue says the engine saved it, and where" grep -q "the engine had autosaved the turn itself in .*k3chat/.*jsonl when it stopped answering" "$K3_TMP/stderr.txt"

# 9: line mode (--plain; here reading a pipe): Ctrl-C (SIGINT) stopped nothing and a second one
# did nothing either: k3chat waited for the blocked worker for ever, only SIGKILL ended it. Now a
# stop that does not come within a second is told, and Ctrl-C then quits without the worker, the
# message and what came of the answer (its reasoning too) in the autosave, marked interrupted
rm -rf "$K3_TMP/data" "$K3_TMP/lm"
mkdir -p "$K3_TMP/lm" && mkfifo "$K3_TMP/lm/in"
printf 'autosave\ndelay 0\nstall 600000\nthink pondering\nresponse words\n' >"$K3_TMP/lm/mock.txt"
K3_MOCK="$K3_TMP/lm/mock.txt" XDG_DATA_HOME="$K3_TMP/data" XDG_STATE_HOME="$K3_TMP/state" \
    "$K3CHAT" --plain /no/model <"$K3_TMP/lm/in" >"$K3_TMP/lm/out" 2>"$K3_TMP/lm/err" &
lpid=$!
exec 7>"$K3_TMP/lm/in"
echo "hello" >&7
wait_until "line mode: the reasoning's first token" 30 grep -q pon "$K3_TMP/lm/err"
kill -INT "$lpid"
check "9: line mode, a Ctrl-C the engine does not obey is told, and what another does" \
    wait_until "the notice on stderr" 10 grep -q "Ctrl-C again quits without waiting for it" "$K3_TMP/lm/err"
kill -INT "$lpid"
lgone() { ! kill -0 "$lpid" 2>/dev/null; }
check "9: the next Ctrl-C quits without the blocked worker" wait_until "k3chat to end" 15 lgone
kill -KILL "$lpid" 2>/dev/null
wait "$lpid"
lrc=$?
exec 7>&-
check "9: exit status 0: the turn is autosaved (got $lrc)" [ "$lrc" -eq 0 ]
check "9: it says it did not wait and where the conversation is" sh -c "grep -q 'quitting without waiting for the engine' '$K3_TMP/lm/err' &&
    grep -q 'the conversation is autosaved in .*k3chat/.*jsonl, the last answer marked interrupted' '$K3_TMP/lm/err'"
check "9: the autosave holds the message and the answer so far, interrupted, with its reasoning" /usr/bin/python3 -c '
import glob, json, sys
files = glob.glob(sys.argv[1] + "/k3chat/*.jsonl")
msgs = [m for m in (json.loads(l) for l in open(files[0], encoding="utf-8")) if "role" in m] if len(files) == 1 else []
sys.exit(not (len(msgs) == 2 and msgs[0]["content"] == "hello" and msgs[1].get("interrupted") is True
              and msgs[1]["content"] == "" and msgs[1].get("reasoning_content") == "pon"))' "$K3_TMP/data"
finish
