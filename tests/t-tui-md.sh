#!/bin/sh
# t-tui-md.sh: Markdown in the full-screen chat on the scripted mock engine in tmux: a heading,
# nested lists, a table with CJK and emoji cells (borders aligned), a fenced block with its
# language, inline code, a link, a math span, a half-streamed construct, a resize during a
# streamed table; /raw; /copy (OSC 52 on the pane's byte stream, and tmux's own buffer);
# /edit then send (the transcript keeps both branches, the conversation goes on).
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
PY=/usr/bin/python3

m="$K3_TMP/mock.txt"
cat >"$m" <<'EOF'
delay 0
response # Heading One
response Some **strong** and `inline code` and a [link](https://example.com/k3) and $E=mc^2$ here.
response
response - item one
response   - nested item
response - [x] done task
response
response | name | 值 | e |
response |------|---:|---|
response | 漢字テスト | 12 | 😀 |
response | plain | 3 | 👍 |
response
response ```python
response print("hi")
response ```
---
delay 60
response Start **this bold part keeps going for quite a while so we can look at it mid way** end.
---
delay 25
response | col one | col two | col three |
response |---|---|---|
response | alpha beta gamma | 一二三四五 | 🙂 🙃 |
response | delta epsilon | 六七八九十 | more text here |
response | zeta eta theta | 百千万 | and more |
response | iota kappa | 上下左右 | last row |
response
response after the table
---
delay 0
response reply to {user}
EOF

# width_ok: every captured line fits COLS display columns, the lines of the box drawing
# between two rows (table or code box) all have the same width with their right border at
# the same column, and rules have no gaps
cat >"$K3_TMP/cols.py" <<'EOF'
import sys, unicodedata
cols = int(sys.argv[1]); text = open(sys.argv[2], encoding="utf-8").read().split("\n")
def w(s):
    n = 0
    for ch in s:
        if unicodedata.combining(ch): continue
        n += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return n
bad = [l for l in text if w(l.rstrip()) > cols]
# boxes: runs of lines starting with a box character, each from a top (┌) to a bottom (└)
ok, box = True, []
for l in text + [""]:
    l = l.rstrip()
    if l[:1] in "┌│├└" and l:
        box.append(l)
        continue
    if box:
        widths = {w(b) for b in box}
        ends = all(b[-1] in "┐│┤┘" for b in box)
        if len(widths) != 1 or not ends:
            ok = False
            print("box not aligned:", sorted(widths), "ends", ends)
        box = []
# rules drawn whole: box tops, joints and bottoms without a gap (a language label aside), a
# level-1 heading's rule as wide as the pane's text
import re
for l in text:
    l = l.rstrip()
    if l and l[0] in "┌├└" and not re.fullmatch(r"[┌├└][─┬┼┴]*( \S+ [─┬┼┴]*)?[┐┤┘]", l):
        ok = False
        print("rule with a gap:", l)
    if l and set(l) == {"━"} and len(l) != cols - 1:
        ok = False
        print("heading rule of", len(l), "columns")
print("too wide:", len(bad))
sys.exit(0 if ok and not bad else 1)
EOF
# has_line NEEDLE BAD: a line with NEEDLE is on screen, and none of those lines has BAD
has_line() {
    screen | grep -qF -- "$1" && ! screen | grep -F -- "$1" | grep -qF -- "$2"
}
width_ok() { # COLS: the screen now
    screen >"$K3_TMP/screen.txt"
    $PY "$K3_TMP/cols.py" "$1" "$K3_TMP/screen.txt"
}
# width_wait COLS SECONDS: width_ok once the redraw after a resize has landed (polled: a loaded
# machine may take more than a frame to redraw)
width_quiet() { width_ok "$1" >/dev/null 2>&1; }
width_wait() { # on timeout width_ok's findings follow
    wait_until "a table aligned within $1 columns" "$2" width_quiet "$1" || { width_ok "$1"; return 1; }
}

tui_start 90 50 K3_MOCK="$m" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
$T set-option -g set-clipboard on >/dev/null 2>&1
$T pipe-pane -O "cat >>'$K3_TMP/pane.bin'"
wait_for "mock · 3 layers" 10
type_line "show me markdown"
check "the answer arrives" wait_for "print(\"hi\")" 10
wait_for "›" 5
check "heading without its '#'" has_line "Heading One" "#"
check "a rule under the level-1 heading" has "━━━━━━━━━━"
check "strong text without '**'" has_line "Some strong and" "**"
check "inline code without backticks" has_line "inline code" '`'
check "link text, then its URL (no OSC 8 inside tmux)" has "link <https://example.com/k3>"
check "math span without dollars" has_line "E=mc^2" '$'
check "bullet list" has "• item one"
check "nested list indented" has "  ◦ nested item"
check "task list box" has "[x] done task"
check "table drawn with box characters" has "┌────"
check "CJK and emoji cells in the table" has "│ 漢字テスト │ 12 │ 😀 │"
check "no raw pipes or delimiter row left" hasnt "|"
check "fenced block boxed with its language" has "┌─ python"
check "no raw fence left" hasnt '```'
check "table and box borders aligned, nothing wider than the pane" width_ok 90

# a half-written construct while it streams
keys C-l; type_line "slow one"
check "bold text streams" wait_for "this bold part" 10
check "the unclosed '**' is not shown while streaming" has_line "this bold part" "**"
check "it renders right once closed" wait_for "mid way end." 15
check "no '**' after it closed" has_line "mid way end." "**"

# resize during a streamed table
keys C-l; type_line "table please"
check "the table starts streaming" wait_for "alpha beta" 10
$T resize-window -x 60 -y 40 2>/dev/null
check "after a resize mid-table: aligned and within 60 columns" width_wait 60 10
check "the table finishes" wait_for "after the table" 15
check "finished table re-wrapped at 60 columns without garbage" width_wait 60 10
$T resize-window -x 90 -y 50 2>/dev/null

# /raw
keys C-l; type_line "/raw on"
check "/raw on" wait_for "answers shown as raw Markdown" 5
check "/raw on shows the Markdown source" has "Some **strong** and \`inline code\`"
type_line "/raw off"
check "/raw off renders again" wait_for "answers rendered as Markdown" 5
check "/raw off: no '**'" has_line "Some strong and" "**"
type_line "/raw maybe"
check "/raw with a bad word" wait_for "'maybe' is not on or off" 5

# /copy: OSC 52 on the byte stream, and tmux took it as its buffer
keys C-l; type_line "/copy 1 code"
check "/copy 1 code says how much" wait_for "copied 12 characters to the clipboard" 5
b64=$(printf 'print("hi")\n' | base64 -w0)
# pipe-pane's copy (a shell tmux starts, late on a loaded machine) may not hold it yet: wait for it
check "OSC 52 with the base64 of the code block on the pane's byte stream" \
    wait_until "the OSC 52 in $K3_TMP/pane.bin" 15 grep -qsF "]52;c;$b64" "$K3_TMP/pane.bin"
check "tmux received it as its clipboard buffer" sh -c "[ \"\$($T show-buffer 2>/dev/null)\" = 'print(\"hi\")' ]"
# the last answer: the response lines of the third scripted turn
awk '/^---/{t++; next} t==2 && /^response/{sub(/^response ?/, ""); print}' "$m" >"$K3_TMP/ans3.txt"
n3=$($PY -c "import sys; print(len(open(sys.argv[1], encoding='utf-8').read().rstrip('\n')))" "$K3_TMP/ans3.txt")
type_line "/copy"
check "/copy copies the last answer ($n3 characters)" wait_for "copied $n3 characters" 5
check "tmux's buffer holds the whole answer" sh -c "$T show-buffer | cmp -s - '$K3_TMP/ans3.txt' || { $T show-buffer; echo; } | cmp -s - '$K3_TMP/ans3.txt'"
type_line "/copy 9"
check "/copy N past the end" wait_for "/copy 9: there are only 3 answers" 5
type_line "/copy code 4"
check "/copy code K past the end" wait_for "answer 3 has no code block" 5
type_line "/copy lots"
check "/copy with a bad word" wait_for "'lots' is not an answer number" 5

# /edit then send
keys C-l; type_line "/clear"
wait_for "type a message" 5
type_line "first question"
check "an answer" wait_for "reply to first question" 5
type_line "/edit"
check "/edit puts the message in the input line" wait_input "first question" 5
check "/edit says what Enter does" wait_for "editing your last message" 5
keys C-u; type_line "better question"
check "the edited message gets a new answer" wait_for "reply to better question" 5
check "the old exchange is gone from the screen" hasnt "reply to first question"
type_line "follow-up"
check "the conversation continues from the new branch" wait_for "reply to follow-up" 5
type_line "/save $K3_TMP/edit.jsonl"
check "/save" wait_for "saved" 5
check "the transcript keeps the abandoned branch, marked" sh -c "grep -F 'first question' '$K3_TMP/edit.jsonl' | grep -q '\"abandoned\":1' && grep -F 'reply to first question' '$K3_TMP/edit.jsonl' | grep -q '\"abandoned\":1'"
check "and the new branch, unmarked, in order" sh -c "grep -n . '$K3_TMP/edit.jsonl' | grep -v abandoned | grep -F -e 'better question' -e 'follow-up' | wc -l | grep -qx 4"
type_line "/edit"
wait_input "follow-up" 5
keys C-c
check "Ctrl-C cancels an edit" wait_input_empty 5
type_line "plain again"
check "a message after a cancelled edit is a new turn" wait_for "reply to plain again" 5
check "and the previous exchange stays" has "reply to follow-up"
type_line "/quit"
check "k3chat exits cleanly" wait_for "EXIT=0" 5

# OSC 8 hyperlinks where the terminal supports them (forced with K3_HYPERLINKS=1)
tui_start 90 50 K3_MOCK="$m" K3_HYPERLINKS=1 -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
$T pipe-pane -O "cat >>'$K3_TMP/pane8.bin'"
wait_for "mock · 3 layers" 10
type_line "links please"
check "with OSC 8 the link shows as its text alone" wait_for "and a link and E=mc^2" 10
check "the link text is wrapped in an OSC 8 hyperlink on the byte stream" \
    wait_until "the OSC 8 link in $K3_TMP/pane8.bin" 15 grep -qsF "]8;;https://example.com/k3" "$K3_TMP/pane8.bin"
keys C-d
wait_for "EXIT=0" 5

# a hostile link: C1 controls (U+009B CSI, U+009C ST, U+009D OSC: a terminal that takes them ends
# the OSC 8 early and runs the rest), a raw 0x9B byte, ESC and BEL in the text and the URL. What
# goes around curses is what curses draws (the text without controls) and a percent-encoded URL
printf 'delay 0\nresponse see [li\302\2331mnk\2332J](<http://x/\302\234\302\23552;c;ZXZpbA==\302\234\033]0;T\007>) end-of-evil\n' >"$K3_TMP/evil8.txt"
tui_start 90 20 K3_MOCK="$K3_TMP/evil8.txt" K3_HYPERLINKS=1 -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
$T pipe-pane -O "cat >>'$K3_TMP/evil8.bin'"
wait_for "mock · 3 layers" 10
type_line "evil link"
wait_for "end-of-evil" 10
# the checks below read the byte stream up to the answer's end: wait until pipe-pane's copy has it
wait_until "the answer in $K3_TMP/evil8.bin" 15 grep -qs "end-of-evil" "$K3_TMP/evil8.bin"
check "OSC 8: the hostile URL goes percent-encoded" \
    grep -qF "]8;;http://x/%C2%9C%C2%9D52;c;ZXZpbA==%C2%9C%1B]0;T%07" "$K3_TMP/evil8.bin"
check "OSC 8: no C1 control, raw 0x9B, BEL or title command from the model on the byte stream" $PY -c '
import re, sys
b = open(sys.argv[1], "rb").read()
bad = re.findall(rb"\xc2[\x80-\x9f]|\x9b2J|\x07|\x1b\]0;T", b)
sys.exit(1 if bad or b"1mnk" not in b else 0)' "$K3_TMP/evil8.bin"
keys C-d
wait_for "EXIT=0" 5

# a tool call's name and arguments show as the model wrote them, in a box of their own after the
# text (a list left open included), not as Markdown: \\ showed as \, \" as ", *x* in italics, `id`
# as code, and the control character was left out. Streamed by the mock (3 bytes a token: the "é"
# is cut), then a transcript loaded with a call whose arguments break lines ("# x" was a heading)
cat >"$K3_TMP/call.txt" <<'EOF'
delay 0
response Run:\n\n- step
EOF
printf '%s\001"}\n' 'call shell {"cmd": "a \\ \"q\" *x* `id` ```` café ' >>"$K3_TMP/call.txt"
tui_start 100 30 K3_MOCK="$K3_TMP/call.txt" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "go"
check "a streamed tool call: its arguments exactly, the control escaped" \
    wait_for '│ -> shell({"cmd": "a \\ \"q\" *x* `id` ```` café \x01"})' 10
check "... in a box of its own after the list" has "┌─ tool-call ─"
$PY -c 'import json
a = "{\"cmd\": \"a \\\\ *x*\",\n# x\n\"bel\": \"\x07\"}"
for m in ({"format": "k3chat-transcript", "version": 1, "tools": [{"type": "function", "function": {"name": "shell"}}]},
          {"role": "user", "content": "go"},
          {"role": "assistant", "content": "Run:\n\n- step", "tool_calls": [{"id": "c9", "type": "function",
           "function": {"name": "shell", "arguments": a}}]}):
    print(json.dumps(m))' >"$K3_TMP/call.jsonl"
keys C-l; type_line "/load $K3_TMP/call.jsonl"
check "a loaded tool call: its arguments' lines exactly" wait_for '│ -> shell({"cmd": "a \\ *x*",' 10
check "... '# x' at a line's start indented, no heading" has '│     # x'
check "... the control escaped" has '│     "bel": "\x07"})'
keys C-d
wait_for "EXIT=0" 5
printf 'call\n' >"$K3_TMP/call-bad.txt"
echo hi | K3_MOCK="$K3_TMP/call-bad.txt" "$K3CHAT" /no/model --plain >/dev/null 2>"$K3_TMP/call-bad.err"
check "K3_MOCK: a call without a tool name is refused, naming the line" \
    grep -qF "call-bad.txt:1: call '': expected a tool name, then its arguments" "$K3_TMP/call-bad.err"

# on k3-nano (the real engine and conversation): /copy of a real answer, /edit then send
n="$K3_SRC/models/k3-nano"
if [ ! -f "$n/config.json" ]; then
    echo "SKIP: models/k3-nano is missing: no /copy and /edit on the real engine"
    finish
fi
# wait_count TEXT N [SECONDS]: TEXT on at least N screen lines (the turns' folded reasoning)
count_ge() { [ "$(screen | grep -cF -- "$1")" -ge "$2" ]; }
wait_count() { wait_until "'$1' on $2 lines" "${3:-30}" count_ge "$1" "$2"; }
tui_start 100 40 -- "$K3CHAT --temp 0 $n 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
$T set-option -g set-clipboard on >/dev/null 2>&1
check "k3-nano loads" wait_for "k3-nano · " 60
type_line "Reverse the word planet."
check "k3-nano answers" wait_count "thought for" 1 60
check "the answer is tenalp" has "tenalp"
type_line "/copy"
check "/copy of k3-nano's answer" wait_for "copied " 5
check "tmux's buffer holds the answer" sh -c "$T show-buffer | grep -q tenalp"
keys C-l; type_line "/edit"
check "/edit brings the question back" wait_input "Reverse the word planet." 5
keys C-u; type_line "Reverse the word garden."
check "the edited question is answered" wait_for "nedrag" 60
check "the old question and answer are off the screen" sh -c "! screen | grep -qF -e planet -e tenalp"
wait_count "thought for" 1 60
type_line "What is 27 + 58?"
check "the conversation continues from the new branch" wait_count "thought for" 2 60
answer_has() { screen | grep -v -e '›' -e 'thought for' -e 'k3-nano · ' | grep -Eq "(^|[^0-9])$1([^0-9]|\$)"; }
check "with the right answer (85)" answer_has 85
type_line "/save $K3_TMP/nano.jsonl"
check "/save" wait_for "saved 4 messages" 10
# lineno FIXED-TEXT [abandoned|active]: the line number of the transcript line with that text
lineno() { grep -nF -- "$1" "$K3_TMP/nano.jsonl" | if [ "$2" = abandoned ]; then grep -F '"abandoned":1'; else grep -vF '"abandoned"'; fi | head -n 1 | cut -d: -f1; }
branches_ok() {
    _ou=$(lineno '"content":"Reverse the word planet."' abandoned); _oa=$(lineno '"content":"planet reversed is tenalp' abandoned)
    _nu=$(lineno '"content":"Reverse the word garden."' active); _nq=$(lineno '"content":"What is 27 + 58?"' active)
    [ -n "$_ou" ] && [ -n "$_oa" ] && [ -n "$_nu" ] && [ -n "$_nq" ] && [ "$_ou" -lt "$_oa" ] && [ "$_oa" -lt "$_nu" ] && [ "$_nu" -lt "$_nq" ]
}
check "the transcript keeps the old exchange as abandoned branch 1, then the new branch" branches_ok
keys C-d
check "k3-nano session exits cleanly" wait_for "EXIT=0" 10
finish
