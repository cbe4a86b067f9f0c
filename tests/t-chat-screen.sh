#!/bin/sh
# t-chat-screen.sh: what the full-screen chat shows, in tmux (issue 36 items 7 and 21): nothing
# that is written to stderr while curses owns the screen lands in the chat's rows (it becomes a
# notice); the status bar's "scrolled" mark leaves with a jump to the bottom; the completion
# hint's rows start in one column; at 40 columns no help, title or hint line is cut.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

# 21: the status bar's "scrolled ↑N" goes when a command's notice jumps to the bottom
printf 'response Hello, {user}!\n' >"$K3_TMP/mock.txt"
run_mock 80 24 "$K3_TMP/mock.txt"
wait_for "mock · 3 layers" 10
type_line "hi"
wait_for "Hello, hi!" 5
type_line "/help"
wait_for "Ctrl-L" 5
keys PPage
check "21: PgUp shows the scrolled mark" wait_for "scrolled ↑" 5
type_line "/save $K3_TMP/s21.jsonl"
check "21: /save's notice jumps to the bottom and the mark goes" wait_gone "scrolled ↑" 5
keys PPage
wait_for "scrolled ↑" 5
type_line "/nosuchcommand"
check "21: so does an unknown command's error" wait_gone "scrolled ↑" 5

# 21: the completion hint's rows (/ and Tab twice: every command) start in the same column
keys -l "/"
keys Tab
keys Tab
wait_for "/quit" 5
hint_ok() { # each hint row starts "  /" (two spaces, then a command), none "   /"
    screen | grep -q '^  /help' && ! screen | grep -q '^   /'
}
check "21: the completion rows start in one column" wait_until "aligned hint rows" 5 hint_ok
keys C-u

# 21: at 40 columns nothing is cut: /help CMD keeps its hanging indent, the "more below" hint
# and the response pane's title are shortened rather than cut, the loading hint wraps
printf 'load 3000\nprefill 4000\nresponse Hello there!\n' >"$K3_TMP/slow.txt"
run_mock 40 12 "$K3_TMP/slow.txt"
check "21: the loading screen's hint ends whole at 40 columns" wait_for "ready." 5
wait_for "mock · 3 layers" 10
type_line "hi"
resp_title() { screen | grep -q '── response · .*Ctrl-C stops ─'; }
check "21: the response title keeps its words (no 'toke' cut)" wait_until "a whole response title" 5 resp_title
check "21: ... and says it waits" has "waiting"
wait_for "Hello there!" 10
type_line "/help /system"
# the continuation rows of the two-column line are indented under it
sys_ok() { screen | grep -A1 '^  /system \[TEXT|--clear\]' | tail -n 1 | grep -q '^    [a-z]'; }
check "21: /help /system keeps its indent at 40 columns" wait_until "an indented /system help" 5 sys_ok
type_line "/help"
wait_for "Ctrl-L" 5
keys PPage
keys PPage
more_ok() { # the row that says how much is below: whole, never "the lates"
    _m=$(screen | grep '↓ [0-9]* more')
    [ -n "$_m" ] && ! printf '%s\n' "$_m" | grep -q 'the lates *$' &&
        printf '%s\n' "$_m" | grep -Eq '↓ [0-9]+ more( · .*the latest)? *$'
}
check "21: the 'more below' row is whole at 40 columns" wait_until "a whole 'more' row" 5 more_ok

finish
