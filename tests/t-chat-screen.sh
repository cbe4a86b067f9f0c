#!/bin/sh
# t-chat-screen.sh: what the full-screen chat shows, in tmux (issue 36 items 7 and 21): nothing
# that is written to stderr while curses owns the screen lands in the chat's rows (it becomes a
# notice, and is on the terminal after the chat: nothing on stderr is lost); the status bar's
# "scrolled" mark leaves with a jump to the bottom; the completion hint's rows start in one
# column; at 40 columns no help, title or hint line is cut.
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

# 7: nothing that comes on stderr while the chat runs is lost: a line shown as a notice is on the
# terminal after the chat closes (its notice went with the chat's screen), and so is one written
# as the chat ends (between the display's last event and the end of curses). The mock's turn
# writes "mock-err USER" to fd 2 as it starts; turn two is sent with Ctrl-D right behind it
# (twice: the first only asks while an answer is coming).
printf 'stderr mock-err {user}\nresponse fine\n' >"$K3_TMP/mock-err.txt"
tui_start 80 24 K3_MOCK="$K3_TMP/mock-err.txt" -- "$K3CHAT /no/model; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "one"
check "7: a line on stderr is a notice while the chat runs" wait_for "stderr: mock-err one" 5
wait_for "fine" 5
keys -l "two"
keys Enter C-d C-d
check "7: the chat ends" wait_for "EXIT=0" 10
check "7: after the chat, the terminal shows the line that was a notice" has "mock-err one"
check "7: ... and the line written as the chat ended" has "mock-err two"
check "7: ... each once, before the shell's next line" eval \
    '[ "$(screen | grep -c "mock-err")" -eq 2 ] && screen | grep -A3 "mock-err two" | grep -q "EXIT=0"'
check "7: no sanitizer or runtime error report after the chat" eval '! screen | grep -q -e Sanitizer -e "runtime error"'

# 7: text written to fd 2 while the chat owns the terminal (the Vulkan loader's debug output as
# the engine probes for a GPU) is shown as notices, not painted over the chat: a full redraw
# (Ctrl-L, from the chat's own state) shows the very screen that was there before it
M="$K3_SRC/models/k3-nano"
if VK_LOADER_DEBUG=all "$K3CHAT" "$M" --prompt hi --max-tokens 1 2>&1 </dev/null | grep -q 'LAYER'; then
    for size in "80 24" "40 12"; do
        # shellcheck disable=SC2086
        tui_start $size VK_LOADER_DEBUG=all -- "$K3CHAT $M --think off; echo EXIT=\$?; sleep 60"
        wait_for "k3-nano · 4 layers" 20
        wait_for "prefill window" 10
        s1=$(settled 10 screen)
        keys C-l
        sleep 0.3
        s2=$(settled 10 screen)
        check "7 ($size): the screen holds no stray stderr text (a redraw changes nothing)" test "$s1" = "$s2"
        check "7 ($size): the status bar is whole" eval 'screen | tail -n 2 | head -n 1 | grep -q "^ k3-nano · 4 layers"'
        if [ "$size" = "80 24" ]; then
            check "7 ($size): the loader's lines are notices" has "stderr: "
        else # the fit notice fills the pane: the loader's lines are above it
            keys PPage PPage PPage
            check "7 ($size): the loader's lines are notices" wait_for "stderr: " 5
        fi
        keys C-d
        check "7 ($size): the chat ends normally" wait_for "EXIT=0" 10
    done
else
    echo "SKIP: 7: VK_LOADER_DEBUG makes no stderr output here (no Vulkan loader)"
fi

finish
