#!/bin/sh
# t-chat-escape.sh: text from the model, a server or a file reaches a terminal only through the
# one escaping function (txt_term_put, text.h): in line mode under tmux, a fake OpenAI server
# (chat_fake.py) and the mock stream OSC 52 (clipboard), OSC 0 (title), CSI and a C1 CSI in the
# answer, the reasoning and an HTTP error; the tmux clipboard and the pane title stay as they
# were and the commands show as \x1B escapes. Into a pipe the answer goes as it is; a message
# that quotes outside text (a transcript's line, a server's error, an option) is escaped into a
# file or a pipe too (txt_term_printf). --inspect's report, which names MODEL_DIR, is escaped
# on a terminal (a directory named with OSC 0 set the pane's title). /export of such an answer in
# --endpoint mode writes them visibly; /save keeps the bytes and loads back to the same export.
# --replay's report escapes the transcript's name and fingerprint.
. "$K3_SRC/tests/tui-lib.sh"

python3 "$K3_SRC/tests/chat_fake.py" "$K3_TMP/port" "$K3_TMP/reqs" &
fpid=$!
trap 'tmux_end "$T"; kill $fpid 2>/dev/null; wait $fpid' EXIT
wait_until "the fake server's port in $K3_TMP/port" 10 test -s "$K3_TMP/port"
port=$(cat "$K3_TMP/port")
ep="http://127.0.0.1:$port"

# clipboard_and_title: the pane's tmux buffers and title, to compare before and after
state() { printf '%s|' "$($T list-buffers -F '#{buffer_sample}' 2>/dev/null)" "$($T display -p '#{pane_title}')"; }

tui_start 120 30 -- "$K3CHAT --endpoint $ep --plain; echo EXIT=\$?; sleep 60"
$T set-option -g set-clipboard on
$T set-option -g allow-rename on 2>/dev/null
before=$(state)
type_line evil
wait_for "end" 15
type_line e500
wait_for "boom" 15
after=$(state)
check "--endpoint --plain: the tmux clipboard and the pane title are unchanged ('$before' -> '$after')" \
    [ "$before" = "$after" ]
check "... the answer's commands show escaped" has 'ans \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVIL\x07 \x1B[31m red \u009B32m c1'
check "... and the reasoning's" has 'think \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVILR\x07'
check "... and the server's HTTP error text on stderr" has 'boom \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVIL500\x07'

# a NUL byte the model wrote ("\u0000" in the stream) shows as U+FFFD, as a typed one does, and
# the answer goes on: not a malformed stream
type_line nul
check "--endpoint: a NUL byte in the answer shows as U+FFFD and the answer goes on" wait_for 'a�b end' 15
check "... in the reasoning too" has 'r�s'
check "... and the stream is not refused" hasnt "malformed stream"

# the mock cuts tokens every 3 bytes: sequences (and the UTF-8 C1 CSI) split across tokens
printf 'delay 0\nthink m-think \033]0;EVILM\007 x\nresponse m-ans \033]52;c;ZXZpbA==\007 \302\2331m m-end\n' >"$K3_TMP/evil.txt"
tui_start 120 30 K3_MOCK="$K3_TMP/evil.txt" -- "$K3CHAT --plain /no/model; echo EXIT=\$?; sleep 60"
$T set-option -g set-clipboard on
before=$(state)
type_line hi
wait_for "m-end" 15
after=$(state)
check "K3_MOCK --plain: clipboard and title unchanged ('$before' -> '$after')" [ "$before" = "$after" ]
check "... the commands show escaped, cut between tokens or not" \
    has 'm-ans \x1B]52;c;ZXZpbA==\x07 \u009B1m m-end'
check "... in the reasoning too" has 'm-think \x1B]0;EVILM\x07 x'

# the full-screen chat showed none of them: the message bodies dropped their control characters
# (ESC [2J read "[2J"); they show escaped as in line mode and the export, none reaching the terminal
tui_start 120 30 K3_MOCK="$K3_TMP/evil.txt" -- "$K3CHAT /no/model; echo EXIT=\$?; sleep 60"
$T set-option -g set-clipboard on
wait_for "mock · 3 layers" 10
before=$(state)
type_line hi
check "full-screen: the answer's commands show escaped, cut between tokens or not" \
    wait_for 'm-ans \x1B]52;c;ZXZpbA==\x07 \u009B1m m-end' 15
after=$(state)
check "... clipboard and title unchanged ('$before' -> '$after')" [ "$before" = "$after" ]
keys F2
check "... in the reasoning too" wait_for 'm-think \x1B]0;EVILM\x07 x' 5
keys C-d

# bidi controls (an override, an isolate, a mark) and a line separator reorder or break what a
# bidi terminal shows: escaped in line mode and in the full-screen chat (not on its byte stream)
printf 'delay 0\nresponse bidi \342\200\256evil\342\200\254 \342\201\246x\342\201\251\342\200\217 \342\200\250sep end-bidi\n' >"$K3_TMP/bidi.txt"
tui_start 120 30 K3_MOCK="$K3_TMP/bidi.txt" -- "$K3CHAT --plain /no/model; echo EXIT=\$?; sleep 60"
type_line hi
check "K3_MOCK --plain: bidi controls and U+2028 show escaped" \
    wait_for 'bidi \u202Eevil\u202C \u2066x\u2069\u200F \u2028sep end-bidi' 15
tui_start 120 30 K3_MOCK="$K3_TMP/bidi.txt" -- "$K3CHAT /no/model; echo EXIT=\$?; sleep 60"
$T pipe-pane -O "cat >>'$K3_TMP/bidi.bin'"
wait_for "mock · 3 layers" 10
type_line hi
check "full-screen: the answer shows its bidi controls escaped" \
    wait_for 'bidi \u202Eevil\u202C \u2066x\u2069\u200F \u2028sep end-bidi' 15
# the pane's bytes reach bidi.bin through a shell tmux starts for pipe-pane, which a loaded
# machine runs late: the file may not exist yet when the screen shows the answer (make check:
# FileNotFoundError), or hold only its start; so first wait until the answer's last word is in it
no_bidi_bytes() {
    wait_until "the answer on the pane's byte stream ($K3_TMP/bidi.bin)" 15 grep -qs "end-bidi" "$K3_TMP/bidi.bin" &&
        /usr/bin/python3 -c '
import re, sys
b = open(sys.argv[1], "rb").read()
sys.exit(1 if re.search(rb"\xe2\x80[\xa8\xa9\xaa-\xae\x8e\x8f]|\xe2\x81[\xa6-\xa9]", b) else 0)' "$K3_TMP/bidi.bin"
}
check "... and none of them is on the byte stream" no_bidi_bytes
keys C-d

# a loaded transcript's tool turns: the full-screen chat leaves out the control characters it
# draws, so a result's name and call id show escaped as a call's name is (a\x07b read "ab", the
# id's ESC [2J went unseen), and a line break in a tool's name cannot start a line of its own
printf '%s\n' '{"format":"k3chat-transcript","version":1}' '{"role":"user","content":"w?"}' \
    '{"role":"assistant","content":"","tool_calls":[{"id":"c\u001b[2J1","type":"function","function":{"name":"f\nx","arguments":"{}"}}]}' \
    '{"role":"tool","name":"a\u0007b","tool_call_id":"c\u001b[2J1","content":"18 C"}' >"$K3_TMP/tools.jsonl"
tui_start 120 30 K3_MOCK="$K3_TMP/bidi.txt" -- "$K3CHAT --load $K3_TMP/tools.jsonl /no/model; echo EXIT=\$?; sleep 60"
check "full-screen --load: a tool result's name and call id show escaped" wait_for 'tool a\x07b (c\x1B[2J1):' 10
check "... and a line break in a call's name as \\x0A, on the call's line" has '-> f\x0Ax({})'
keys C-d

# what came on fd 2 while the full-screen chat ran goes to the terminal when it ends: escaped
# (it was written raw, so a library's line quoting a file could set the title)
printf 'delay 0\nstderr e-err \033]0;EVILE\007 e-end\nresponse fine\n' >"$K3_TMP/err.txt"
# ... and when the chat dies of an abort (K3_ASSERT's): the kept text went to the terminal raw
for how in quit abort; do
    tui_start 120 30 K3_MOCK="$K3_TMP/err.txt" -- "sh -c 'echo \$\$ >$K3_TMP/pid; exec $K3CHAT /no/model'; echo EXIT=\$?; sleep 60"
    $T set-option -g allow-rename on 2>/dev/null
    before=$(state)
    wait_for "mock · 3 layers" 10
    type_line hi
    wait_for "fine" 10
    if [ $how = quit ]; then keys C-d; wait_for "EXIT=0" 10; else kill -ABRT "$(cat "$K3_TMP/pid")"; wait_for "EXIT=134" 10; fi
    after=$(state)
    check "full-screen ($how): stderr's text after the chat leaves the title alone ('$before' -> '$after')" \
        [ "$before" = "$after" ]
    check "... and shows its commands escaped" has 'e-err \x1B]0;EVILE\x07 e-end'
done

# watch_run W H CMD END: CMD in a W x H pane (clipboard and renaming on), $before and $after
# the pane's state() before it and once END (its exit line) shows
watch_run() {
    tui_start "$1" "$2" -- "$3; echo EXIT=\$?; sleep 60"
    $T set-option -g set-clipboard on
    $T set-option -g allow-rename on 2>/dev/null
    before=$(state)
    wait_for "$4" 30
    after=$(state)
}

# a schema file's refusal quotes it (the keyword, the pattern): escaped too
printf '{"type":"string","pattern":"\\u001b]0;EVILS\\u0007\\u001b]52;c;ZXZpbA==\\u0007(?=x)"}' >"$K3_TMP/evil.json"
watch_run 400 30 "$K3CHAT $K3_SRC/models/k3-nano --prompt hi --json-schema $K3_TMP/evil.json" "EXIT=1"
check "--json-schema: a refused pattern's commands leave clipboard and title alone ('$before' -> '$after')" \
    [ "$before" = "$after" ]
check "... and show escaped in the message" has 'lookaround or a named group (at offset 27 of \x1B]0;EVILS\x07\x1B]52;c;ZXZpbA==\x07(?=x))'

# a model directory's names (here a shard file name from its index) reach the terminal in errors:
# --prompt and --inspect printed them raw (an index could set the title or the clipboard)
"$K3_BUILD/k3-mkmodel" --preset tiny --seed 1 "$K3_TMP/evilm" >/dev/null 2>&1
/usr/bin/python3 - "$K3_TMP/evilm/model.safetensors.index.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
w = j["weight_map"]
old = sorted(set(w.values()))[0]
for k in w:
    if w[k] == old:
        w[k] = "\u001b]0;EVILD\u0007\u001b]52;c;ZXZpbA==\u0007.safetensors"
json.dump(j, open(sys.argv[1], "w"))
EOF
for mode in "--prompt hi" --inspect; do
    tui_start 200 30 -- "$K3CHAT $K3_TMP/evilm $mode; echo EXIT=\$?; sleep 60"
    $T set-option -g set-clipboard on
    $T set-option -g allow-rename on 2>/dev/null
    wait_for "EXIT=1" 30
    after=$(state) # the error may come before a first look: no EVILD title, no 'evil' in a buffer
    check "a shard name with commands in the index, $mode: clipboard and title untouched ('$after')" \
        sh -c "! printf '%s' '$after' | grep -q -e EVILD -e evil"
    check "... and the error shows them escaped" has 'k3chat: \x1B]0;EVILD\x07\x1B]52;c;ZXZpbA==\x07.safetensors: cannot open'
done

# not a terminal: the text is the model's, byte for byte
printf 'evil\n' | "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out" 2>"$K3_TMP/err"
check "into a pipe the answer goes as it is" \
    [ "$(cat "$K3_TMP/out")" = "$(printf 'ans \033]52;c;ZXZpbA==\007 \033]0;EVIL\007 \033[31m red \302\23332m c1 end')" ]

# messages that quote a file's or a server's text are escaped off a terminal too (they were
# written raw into a file or a pipe, and a log file or a pipe into cat reaches a terminal)
noesc() { ! grep -q "$(printf '\033')" "$1"; } # no raw ESC byte in file $1
printf '{"format":"k3chat-transcript","version":1,"settings":{"effort":"\\u001b]52;c;ZXZpbA==\\u0007x"}}\n' \
    >"$K3_TMP/evil.jsonl"
"$K3CHAT" --load "$K3_TMP/evil.jsonl" --plain /no/model </dev/null >/dev/null 2>"$K3_TMP/err-load"
check "--load, stderr a file: the transcript's bad effort shows escaped" \
    grep -qF "effort\" '\x1B]52;c;ZXZpbA==\x07x' is not" "$K3_TMP/err-load"
check "... and no raw ESC is in the file" noesc "$K3_TMP/err-load"
# the full-screen chat's notices quote such text too: /load of that transcript names the bad
# effort with its commands escaped (drawn raw, the drawing left them out: "']52;c;ZXZpbA==x'")
tui_start 120 30 K3_MOCK="$K3_TMP/bidi.txt" -- "$K3CHAT /no/model; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "/load $K3_TMP/evil.jsonl"
check "full-screen /load: the transcript's bad effort shows escaped in the error" \
    wait_for "effort\" '\x1B]52;c;ZXZpbA==\x07x' is not" 10
keys C-d

# --endpoint: /export writes the server's commands visibly (`cat chat.md` ran them), /save keeps
# their bytes and /load reads them back, byte for byte into a pipe
printf 'evil\n/export %s\n/save %s\n' "$K3_TMP/evil.md" "$K3_TMP/evil-ep.jsonl" |
    "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>&1
check "--endpoint /export: no raw ESC in the Markdown" noesc "$K3_TMP/evil.md"
check "... nor a C1 control" sh -c "! grep -q '$(printf '\302\233')' '$K3_TMP/evil.md'"
check "... the answer's commands show escaped" \
    grep -qF 'ans \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVIL\x07 \x1B[31m red \u009B32m c1 end' "$K3_TMP/evil.md"
check "... and the reasoning's" grep -qF 'think \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVILR\x07' "$K3_TMP/evil.md"
check "--endpoint /save: the transcript keeps the bytes (JSON escapes)" \
    grep -qF '"content":"ans \u001B]52;c;ZXZpbA==\u0007' "$K3_TMP/evil-ep.jsonl"
printf '/export %s\n' "$K3_TMP/evil2.md" | "$K3CHAT" --load "$K3_TMP/evil-ep.jsonl" --endpoint "$ep" --plain \
    >/dev/null 2>&1
check "... and loads back to the same export" cmp -s "$K3_TMP/evil.md" "$K3_TMP/evil2.md"
{ "$K3CHAT" --load "$K3_TMP/evil.jsonl" --plain /no/model </dev/null 2>&1 >/dev/null; } | cat >"$K3_TMP/err-pipe"
check "--load, stderr a pipe: escaped as well" grep -qF "effort\" '\x1B]52;c;ZXZpbA==\x07x' is not" "$K3_TMP/err-pipe"
check "... and no raw ESC went through the pipe" noesc "$K3_TMP/err-pipe"
printf 'e500\n' | "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err-500"
check "--endpoint --plain, stderr a file: the server's HTTP error text shows escaped" \
    grep -qF 'boom \x1B]52;c;ZXZpbA==\x07 \x1B]0;EVIL500\x07' "$K3_TMP/err-500"
check "... and no raw ESC is in the file" noesc "$K3_TMP/err-500"

# --replay's report names the transcript file and its model fingerprint (the file's text): both
# went out raw, into a pipe and on a terminal (a file named with OSC 0 set the title)
printf 'hi\n/save %s\n' "$K3_TMP/rep.jsonl" | "$K3CHAT" "$K3_SRC/models/k3-nano" --think off >/dev/null 2>&1
rep="$K3_TMP/rep$(printf '\033]0;EVILP\007').jsonl"
/usr/bin/python3 - "$K3_TMP/rep.jsonl" "$rep" <<'EOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
m[0]["model"]["config_fnv64"] = "\u001b]0;EVILF\u0007"
open(sys.argv[2], "w").write("".join(json.dumps(x) + "\n" for x in m))
EOF
"$K3CHAT" --replay "$rep" "$K3_SRC/models/k3-nano" >"$K3_TMP/rep.out" 2>/dev/null
check "--replay into a file: the file's name shows escaped" grep -qF 'replay: '"$K3_TMP"'/rep\x1B]0;EVILP\x07.jsonl: 2 messages' "$K3_TMP/rep.out"
check "... and its fingerprint" grep -qF 'fingerprint \x1B]0;EVILF\x07, this model' "$K3_TMP/rep.out"
check "... no raw ESC in the report" noesc "$K3_TMP/rep.out"
"$K3CHAT" --temp "$(printf 'x\033]0;T\007')" /no/model >/dev/null 2>"$K3_TMP/err-flag"
check "a refused option's value is quoted escaped, stderr a file" grep -qF "'x\x1B]0;T\x07' is not" "$K3_TMP/err-flag"

# --inspect's report quotes MODEL_DIR as given: on a terminal escaped (cli-inspect.c), into a
# pipe as it is (the report is the data asked for)
ln -s "$K3_SRC/models/k3-nano" "$K3_TMP/nano$(printf '\033]0;EVILI\007')"
printf '%s' "$K3_TMP/nano$(printf '\033]0;EVILI\007')" >"$K3_TMP/insp-dir"
printf '#!/bin/sh\nexec "$1" --inspect "$(cat "$2")"\n' >"$K3_TMP/insp.sh"
watch_run 200 150 "sh $K3_TMP/insp.sh $K3CHAT $K3_TMP/insp-dir" "EXIT=0" # tall: the whole report
no_evil() { case "$1" in *EVIL*) return 1 ;; esac; } # the state holds no title the text set
check "--inspect of a MODEL_DIR named with OSC 0: the pane title not set ('$before' -> '$after')" no_evil "$after"
check "... and the report shows the name escaped" has 'nano\x1B]0;EVILI\x07 (kimi_k3)'
"$K3CHAT" --inspect "$(cat "$K3_TMP/insp-dir")" 2>/dev/null | grep -q "$(printf '\033')]0;EVILI"
check "--inspect into a pipe: the report as it is (the name's bytes)" [ $? = 0 ]

# --detokenize writes the vocabulary's bytes: on a terminal escaped, into a pipe as they are
printf 'a\033]0;EVILD\007b' >"$K3_TMP/evil-d.txt"
"$K3CHAT" --tokenize "$K3_SRC/models/k3-nano" "$K3_TMP/evil-d.txt" >"$K3_TMP/evil-d.ids"
watch_run 120 10 "$K3CHAT --detokenize $K3_SRC/models/k3-nano $K3_TMP/evil-d.ids" "EXIT=0"
check "--detokenize of ids that spell OSC 0, on a terminal: the title not set ('$before' -> '$after')" \
    no_evil "$after"
check "... and the bytes show escaped" has 'a\x1B]0;EVILD\x07b'
"$K3CHAT" --detokenize "$K3_SRC/models/k3-nano" "$K3_TMP/evil-d.ids" | cmp -s - "$K3_TMP/evil-d.txt"
check "--detokenize into a pipe: the bytes unchanged" [ $? = 0 ]
finish
