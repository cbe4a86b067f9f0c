#!/bin/sh
# t-tui-chat.sh: the full-screen chat on the scripted mock engine, driven in tmux: load progress
# and typing while loading, tokens streaming into the think and response panes, the folded
# reasoning line, Ctrl-C mid-generation then a new message, resize while streaming and the
# too-small notice, CJK/emoji/combining alignment, and the terminal restored after exit.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

# The load lasts 3 s: the test types its first message while the model loads, once it has seen
# the progress (1.2 s left about 1 s after that for two looks and the keys on a busy machine).
# The second answer is cut with Ctrl-C once "word after word" shows: 100 words after that point
# (14 s at 40 ms a token; it had 1 s) keep it streaming however late the Ctrl-C comes.
m="$K3_TMP/mock.txt"
words=$(printf ' after word%.0s' $(seq 1 100))
cat >"$m" <<M
load 3000
delay 25
think Considering "{user}": first I read the question, then I weigh a few options carefully.
response Answer one to {user}.
---
delay 40
think Slow thinking for the second turn.
response This answer is long and slow so that it can be interrupted in the middle of it, word after word$words.
---
delay 60
think Third turn thinking, slowly, to leave time for resizing the terminal while tokens stream in.
response Resized answer: the panes must wrap this text by columns and keep streaming after the terminal changes size again and again.
---
delay 0
think Widths.
response |日本語|
response |abcdef|
response |😀😀😀|
response |éééabc|
response |👩‍👩‍👧abcd|
response |中a文b|
---
prefill 5000
think never shown
response never shown
M
tui_start 100 30 K3_MOCK="$m" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; stty -a | tr ' ' '\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo; sleep 60"

check "load progress: what is loading" wait_for "Loading /no/model" 5
check "load progress: MB/s" wait_for "MB/s" 5
keys -l "hello k3"; keys Enter
check "a message typed while loading waits for the model" wait_for "(waiting for the model to load)" 5
check "think pane streams reasoning" wait_for "Considering \"hello k3\"" 10
check "think pane has its title" has "── thinking"
check "response pane has its title" has "── response"
check "response arrives" wait_for "Answer one to hello k3." 10
check "reasoning folds to one line after the turn" wait_for "▸ thought for" 10
check "the folded line counts tokens" sh -c "$T capture-pane -p | grep -q '▸ thought for [0-9.]* s · [0-9]* tokens'"
check "status bar shows tok/s" has "tok/s"
check "status bar shows the context" has "ctx "
keys F2
check "F2 unfolds the reasoning" wait_for "▾ thought for" 3
check "unfolded reasoning is shown" has "first I read the question"
keys F2
check "F2 folds it again" wait_for "▸ thought for" 3

# Ctrl-C in the middle of an answer keeps the partial answer, then a new message works
keys -l "second"; keys Enter
check "second turn starts" wait_for "word after word" 10
keys C-c
check "Ctrl-C stops the generation" wait_for "[stopped]" 5
check "the partial answer is kept" has "This answer is long"
check "the answer was cut" hasnt "after word."
keys -l "third"; keys Enter
check "a new message after Ctrl-C streams" wait_for "Third turn thinking" 10

# resize while streaming
$T resize-window -x 60 -y 18
check "re-laid out at 60 columns while streaming" wait_for "── response" 5
wide=$(screen | /usr/bin/python3 -c '
import sys, unicodedata
print(sum(1 for l in sys.stdin if sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in l.rstrip("\n")) > 60))')
check "no line is wider than the terminal after resize ($wide)" [ "$wide" -eq 0 ]
$T resize-window -x 30 -y 8
check "too-small terminal notice" wait_for "Terminal too small" 5
$T resize-window -x 100 -y 30
check "back to normal size" wait_gone "Terminal too small" 5
check "the resized turn completes" wait_for "again and again." 15

# CJK, emoji (ZWJ too), combining marks: every | closes at the same column
keys -l "widths"; keys Enter
check "width table arrives" wait_for "|中a文b|" 10
aligned=$(screen | /usr/bin/python3 -c '
import sys, unicodedata
cols = set()
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.startswith("|") or line.count("|") < 2: continue
    w = 0
    for ch in line[:line.index("|", 1)]:
        if unicodedata.combining(ch) or ch in "\u200d\ufe0f": continue
        w += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    cols.add(w)
print(len(cols))')
check "CJK, emoji and combining rows align (distinct closing columns: $aligned)" [ "$aligned" = 1 ]
check "no replacement character from tokens cut inside UTF-8 sequences" hasnt "�"
keys -l "slow prefill"; keys Enter
check "waiting for the first token" wait_for "waiting for the first token" 5
keys C-c
check "Ctrl-C during the prefill stops the turn" wait_for "[stopped]" 5
check "nothing of the stopped turn was shown" hasnt "never shown"
keys -l "日本語😀x"
check "wide input is drawn" wait_for "› 日本語😀x" 3
cx=$($T display -p '#{cursor_x}')
check "cursor after wide input at column 11 (got $cx)" [ "$cx" = 11 ]
keys C-u

# exit restores the terminal
keys C-d
check "Ctrl-D at an empty prompt exits with 0" wait_for "EXIT=0" 5
check "terminal back in canonical mode with echo" wait_for "icanon echo" 5
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
