#!/bin/sh
# t-tui-input.sh: the input line of the full-screen chat (libedit fed by the UI) in tmux:
# Emacs keys, multi-line input (Alt-Enter, trailing backslash), Tab completion, a long
# bracketed paste, history kept across runs in the XDG state directory, Up and Ctrl-R,
# PgUp/PgDn, the mouse toggle, undo and redo (Ctrl-_, Alt-_), and Ctrl-C at an empty prompt
# quitting.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

m="$K3_TMP/mock.txt"
mock_chat 100 30 'delay 0\nthink t\nresponse got it\n'

keys -l "world"; keys C-a; keys -l "hello "
check "Ctrl-A moves to the start of the line" wait_for "› hello world" 3
keys C-e; keys -l "!"; keys C-a; keys M-f; keys C-k
check "Alt-F / Ctrl-K edit by word" wait_input "hello" 3
check "the rest of the line was killed" hasnt "world!"
keys C-u
keys -l "line one"; keys M-Enter; keys -l "line two"
check "Alt-Enter starts a second input line" wait_for "  line two" 3
keys Enter
check "a multi-line message is sent as one" wait_for "got it" 3
check "both lines are in the conversation" sh -c "$T capture-pane -p | grep -A1 '› line one' | grep -q '  line two'"
keys -l 'first part \'; keys Enter
check "a trailing backslash continues the message" wait_for "  " 3
keys -l "second part"; keys Enter
check "the continued message is sent" wait_for "› first part" 3
check "its second line follows" has "  second part"

keys -l "/sh"; keys Tab
check "Tab completes a unique command" wait_for "› /show-thinking" 3
keys C-u; keys -l "/s"; keys Tab
check "Tab lists the candidates" wait_for "/show-thinking  /system  /save  /stats" 3
keys C-u; keys -l "/effort h"; keys Tab
check "Tab completes an argument" wait_for "› /effort high" 3
keys C-u

# a long paste with newlines: inserted, not sent line by line
/usr/bin/python3 -c 'print("\n".join("pasted line %03d " % i + "x" * 60 for i in range(80)), end="")' >"$K3_TMP/paste.txt"
$T load-buffer "$K3_TMP/paste.txt"
$T paste-buffer -p
check "a long paste stays in the input line" wait_for "pasted line 079" 5
check "the paste was not sent" hasnt "› pasted line 000"
keys Enter
check "the input line is empty after sending" wait_input_empty 5
check "the pasted text is sent as one message" has "  pasted line 079"
keys PPage
check "PgUp scrolls the conversation" wait_for "more · PgDn" 3
keys NPage; keys NPage; keys NPage
check "PgDn scrolls back down" wait_gone "more · PgDn" 3
mouse 64 10 5
check "the mouse wheel scrolls up" wait_for "more · PgDn" 3
mouse 65 10 5; mouse 65 10 5; mouse 65 10 5; mouse 65 10 5
check "and back down" wait_gone "more · PgDn" 3
keys C-l; type_line "/clear"
check "/clear empties the conversation" wait_for "type a message and press Enter" 3
type_line "short"
check "a short exchange" wait_for "▸ thought for" 3
mouse 0 3 3; mouse 3 3 3
check "a click on the folded line unfolds the reasoning" wait_for "▾ thought for" 3
mouse 0 3 3; mouse 3 3 3
check "a second click folds it" wait_for "▸ thought for" 3
keys F3
check "F3 turns mouse capture off" wait_for "mouse off (F3)" 3
keys F3
check "F3 turns it back on" wait_gone "mouse off (F3)" 3
keys C-c
check "Ctrl-C at an empty prompt quits" wait_for "EXIT=0" 5
check "the history file is in the XDG state directory" grep -q "line" "$K3_TMP/state/k3chat/history"

# a second run finds the history
run_mock 100 30 "$m"
wait_for "mock · 3 layers" 10
keys Up
check "Up recalls the last message of the previous run" wait_for "› short" 3
keys Up; keys Up
check "older entries follow: the long paste" wait_for "pasted line 079" 3
keys C-u; keys C-r; keys -l "line on"
check "Ctrl-R finds an older message" wait_for "line one" 3
keys Enter
check "Enter in the search sends the found message" wait_for "got it" 3
keys -l "some text"; keys C-c
check "Ctrl-C with text clears the line" wait_gone "some text" 3
check "and does not quit" hasnt "EXIT="
# a paste of more rows than the input area's wrap buffer held (256): the rows around the cursor
# show, so the end of the text and what is typed after it are seen (the first 256 rows stayed)
/usr/bin/python3 -c 'print("".join("l%03d\n" % i for i in range(300)) + "END-OF-PASTE", end="")' >"$K3_TMP/paste300.txt"
$T load-buffer "$K3_TMP/paste300.txt"
$T paste-buffer -p
keys -l "TYPED"
check "a 301-row paste: its end and the keys typed after it show in the input area" \
    wait_for "  END-OF-PASTETYPED" 5
check "... with the cursor after them" sh -c "[ \"\$($T display -p '#{cursor_x},#{cursor_y}')\" = 19,29 ]"
keys C-u
# Undo and redo in the input line (there was none: a Ctrl-C that cleared a long draft, a word
# deleted, a paste in the wrong place could not be taken back). Ctrl-_ undoes a change (a word
# typed, a deletion, a paste, a clear), Alt-_ redoes it, the cursor goes back where it was.
wait_input_empty 5
keys -l "hello big world"; keys BSpace BSpace
wait_input "hello big wor" 3
keys C-_
check "undo: Ctrl-_ takes back the last Backspace" wait_input "hello big worl" 3
keys C-_ C-_
check "undo: ... then the other, then the word typed" wait_input "hello big" 3
keys M-_
check "redo: Alt-_ puts the word back" wait_input "hello big world" 3
keys C-c
wait_input_empty 3
keys C-_
check "undo: Ctrl-_ brings back a draft Ctrl-C cleared" wait_input "hello big world" 3
keys -l "$(printf '\033[200~ PASTED\033[201~')"
wait_input "hello big world PASTED" 3
keys C-_
check "undo: a paste is one change" wait_input "hello big world" 3
keys Home; keys -l "X"; keys C-_; keys -l "Y"
check "undo: the cursor goes back where it was" wait_input "Yhello big world" 3
keys Enter
wait_for "› Yhello big world" 5
wait_input_empty 5
keys C-_
sleep 0.3
check "undo: nothing of a sent message comes back" input_empty
keys C-d
check "Ctrl-D at an empty prompt quits" wait_for "EXIT=0" 5
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
