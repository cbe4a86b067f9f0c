#!/bin/sh
# t-tui-term.sh: the full-screen chat on other terminals: 8 colors (TERM=xterm), 256 colors with
# NO_COLOR, a monochrome terminal (vt100), a direct-color one (xterm-direct) and a bad --theme;
# each answers a message and exits cleanly. Signals from outside, and Ctrl-Z and fg under a shell
# with job control, leave the terminal as it was.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
m="$K3_TMP/mock.txt"
printf 'delay 0\nthink t\nresponse answer to {user}\n' >"$m"
for term in xterm:8-color xterm-256color:NO_COLOR vt100:monochrome; do
    tt=${term%%:*} what=${term#*:}
    extra=K3_X=1
    [ "$what" = NO_COLOR ] && extra=NO_COLOR=1
    if ! infocmp "$tt" >/dev/null 2>&1; then echo "SKIP: no terminfo entry for $tt"; continue; fi
    tui_start 80 24 K3_MOCK="$m" "$extra" -- "TERM=$tt $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 30"
    check "$what ($tt): starts" wait_for "mock · 3 layers" 10
    keys -l "hi"; keys Enter
    check "$what ($tt): answers" wait_for "answer to hi" 5
    keys C-l; type_line "/theme high-contrast"
    check "$what ($tt): switches theme" wait_for "theme high-contrast" 5
    keys C-d
    check "$what ($tt): exits with 0" wait_for "EXIT=0" 5
done
# a direct-color terminal (xterm-direct: COLORS 2^24, a color number above CO's 8 indexes is its
# RGB value; its entry compiled here, as ncurses-base lacks it): the theme's 256-color numbers
# went out as RGB (the status bar's grey 252 on 236 was 0,0,252 on 0,0,236, its bright-blue model
# name 0,0,12); each is the xterm palette's color, the ANSI ones indexes
cat >"$K3_TMP/direct.ti" <<'EOF'
xterm-direct|xterm with direct-color indexing,
	RGB, colors#0x1000000, pairs#0x10000, CO#8,
	initc@, initp@, ccc@, oc@, op=\E[39;49m, setb@, setf@,
	setab=\E[%?%p1%{8}%<%t4%p1%d%e48\:2\:\:%p1%{65536}%/%d\:%p1%{256}%/%{255}%&%d\:%p1%{255}%&%d%;m,
	setaf=\E[%?%p1%{8}%<%t3%p1%d%e38\:2\:\:%p1%{65536}%/%d\:%p1%{256}%/%{255}%&%d\:%p1%{255}%&%d%;m,
	use=xterm-256color,
EOF
# bar_has TEXT: the status bar's row, with its colors, holds TEXT
bar_has() { $T capture-pane -p -e | grep -F "mock · 3 layers" | grep -qF -- "$1"; }
if tic -x -o "$K3_TMP/terminfo" "$K3_TMP/direct.ti" 2>/dev/null; then
    tui_start 80 24 K3_MOCK="$m" TERMINFO="$K3_TMP/terminfo" -- "TERM=xterm-direct $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 30"
    wait_for "mock · 3 layers" 10
    check "xterm-direct: the status bar is grey 252 on 236 as RGB (208 on 48)" bar_has '[38;2;208;208;208m'
    check "... on 48,48,48" bar_has '[48;2;48;48;48m'
    check "... its model name bright blue (92,92,255)" bar_has '[38;2;92;92;255m'
    check "... no 256-color number taken for RGB (0,0,N)" sh -c "! $T capture-pane -p -e | grep -qF ';2;0;0;'"
    keys C-d
    check "xterm-direct: exits with 0" wait_for "EXIT=0" 5
else
    echo "SKIP: tic cannot compile an xterm-direct entry"
fi
# a signal from outside (TERM, HUP, INT) ends k3chat cleanly, the terminal restored; so does one
# that kills it (an abort, as K3_ASSERT's; a crash; SIGQUIT): those left the alternate screen,
# raw mode without echo, mouse reports and bracketed paste on. SEGV's status is not checked (the
# sanitizer build reports it and exits 1); no core file is written (ulimit -c 0)
for sig in TERM HUP INT ABRT QUIT SEGV; do
    err=$K3_TMP/stderr.txt
    [ "$sig" = SEGV ] && err=$K3_TMP/stderr-segv.txt
    tui_start 80 24 K3_MOCK="$m" -- "ulimit -c 0; sh -c 'echo \$\$ >$K3_TMP/pid; exec $K3CHAT /no/model 2>>$err'; echo EXIT=\$?; stty -a | tr ' ' '\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo; sleep 30"
    wait_for "mock · 3 layers" 10
    kill -$sig "$(cat "$K3_TMP/pid")"
    if [ "$sig" = SEGV ]; then
        check "SIG$sig: k3chat ends" wait_for "EXIT=" 15
    else
        st=$((128 + $(signum "$sig"))) # as a shell reports it (k3chat(1), EXIT STATUS)
        check "SIG$sig: k3chat exits with $st" wait_for "EXIT=$st" 5
    fi
    check "SIG$sig: the terminal is restored" wait_for "icanon echo" 5
    check "... the alternate screen, the mouse and the keypad mode off" \
        [ "$($T display -p 'alt=#{alternate_on} mouse=#{mouse_any_flag} kp=#{keypad_cursor_flag}')" = "alt=0 mouse=0 kp=0" ]
    $T set-buffer PASTED
    $T paste-buffer -p
    wait_for PASTED 5
    check "... and bracketed paste (the paste, echoed, has no ESC[200~)" hasnt "[200~"
done
# Ctrl-Z under a shell with job control that does not ask for bracketed paste itself (dash;
# bash turns it off before each command it runs): the shell gets the terminal as it was, its
# pastes unwrapped (bracketed paste was left on, and cat -v showed ^[[200~), the alternate
# screen and the mouse off; fg brings the chat back with its paste and mouse modes
modes() { $T display -p 'alt=#{alternate_on} mouse=#{mouse_any_flag}'; }
# at_prompt: the shell's prompt is the last row that is not blank (k3chat has ended: what is typed
# now goes to the shell, not to a k3chat still ending, as under ASan it can take seconds)
at_prompt() { [ "$(screen | grep -v '^$' | tail -n 1)" = 'k3sh$' ]; }
if command -v dash >/dev/null; then
    echo "PS1='k3sh\$ '" >"$K3_TMP/shrc" # dash takes PS1 from \$ENV's file, not the environment
    tui_start 80 24 K3_MOCK="$m" ENV="$K3_TMP/shrc" -- "dash -i"
    wait_for 'k3sh$' 5
    type_line "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt"
    wait_for "mock · 3 layers" 10
    keys C-z
    check "Ctrl-Z: the shell's prompt" wait_for "Stopped" 5
    check "... the alternate screen and the mouse off" [ "$(modes)" = "alt=0 mouse=0" ]
    type_line "cat -v"
    $T set-buffer "PASTED"
    $T paste-buffer -p; keys Enter
    check "... a paste reaches the shell's program without bracketed-paste marks" wait_for "PASTED" 5
    check "... (no ^[[200~)" hasnt "[200~"
    keys C-d
    type_line "stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\\n' ' '; echo"
    check "... the terminal in canonical mode with echo" wait_for "icanon echo" 5
    type_line fg
    check "fg: the chat is back on the alternate screen with the mouse" \
        wait_until "alt=1 mouse=1" 5 sh -c '[ "$('"$T"' display -p "alt=#{alternate_on} mouse=#{mouse_any_flag}")" = "alt=1 mouse=1" ]'
    $T set-buffer "$(printf 'one\ntwo')"
    $T paste-buffer -p
    check "... and a two-line paste is one message in the input, not sent" wait_for "  two" 5
    check "... (still in the input)" has "› one"
    keys C-u C-u C-d
    wait_until "the shell's prompt" 15 at_prompt
    type_line 'echo END=$?'
    check "... Ctrl-D ends it with 0" wait_for "END=0" 5
    # line mode (libedit): Ctrl-Z left the shell in libedit's raw mode (no echo: the stty line
    # below did not show as typed) and fg brought no prompt back; now the shell gets the terminal
    # as k3chat found it, and fg shows the prompt with the line typed so far, which goes on
    printf 'delay 0\nresponse answer to {user}\n---\ndelay 150\nresponse slow1 slow2 slow3 slow4 slow-end\n' >"$K3_TMP/slow.txt"
    tui_start 80 24 K3_MOCK="$K3_TMP/slow.txt" ENV="$K3_TMP/shrc" -- "dash -i"
    wait_for 'k3sh$' 5
    type_line "$K3CHAT --plain /no/model" # stderr the terminal: libedit
    # last_is TEXT: the last row that is not blank is TEXT
    last_is() { [ "$(screen | grep -v '^$' | tail -n 1)" = "$1" ]; }
    wait_until "the line-mode prompt" 10 last_is ">"
    keys -l draft
    wait_until "the draft" 5 last_is "> draft"
    keys C-z
    check "line mode, Ctrl-Z: the shell's prompt" wait_for "Stopped" 5
    type_line "stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\\n' ' '; echo"
    check "... the terminal in canonical mode with echo, the command shown as typed" wait_for "icanon echo" 5
    check "... (echoed)" has 'k3sh$ stty -a'
    type_line fg
    check "fg: the prompt again with the line typed so far" wait_until "the draft" 5 last_is "> draft"
    type_line more
    check "... which goes on and is sent whole" wait_for "answer to draftmore" 5
    type_line slow
    wait_for slow1 5
    keys C-z
    check "Ctrl-Z while an answer streams: stopped" wait_until "a second Stopped line" 5 sh -c "[ \$($T capture-pane -p | grep -c Stopped) -ge 2 ]"
    type_line fg
    check "... at fg the answer goes on to its end" wait_for slow-end 10
    keys C-d
    wait_until "the shell's prompt" 15 at_prompt
    type_line 'echo END=$?'
    check "... and Ctrl-D ends k3chat with 0" wait_for "END=0" 5
fi
# SIGSTOP (which cannot be caught: kill -STOP, a debugger) and fg under bash, which gives the
# stopped job its terminal modes back: the shell's job line and prompt stayed on the chat's
# screen until something redrew those rows; SIGCONT now repaints it all
if command -v bash >/dev/null; then
    echo "PS1='k3sh\$ '" >"$K3_TMP/bashrc"
    tui_start 80 24 K3_MOCK="$m" -- "bash --rcfile $K3_TMP/bashrc --noprofile -i"
    wait_for 'k3sh$' 5
    type_line "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt & echo \$! >$K3_TMP/pid; fg"
    wait_for "mock · 3 layers" 10
    kill -STOP "$(cat "$K3_TMP/pid")"
    wait_for "Stopped" 5
    type_line fg
    check "SIGSTOP, fg: the shell's lines are gone from the chat's screen" wait_gone "Stopped" 5
    type_line hi
    check "... and the chat answers" wait_for "answer to hi" 5
    kill -CONT "$(cat "$K3_TMP/pid")" 2>/dev/null # not stopped: a stray SIGCONT changes nothing
    keys C-d
    wait_until "the shell's prompt" 15 at_prompt
    type_line 'echo END=$?'
    check "... Ctrl-D ends it with 0" wait_for "END=0" 5
    # line mode (libedit): after SIGSTOP and fg nothing showed the prompt again (Ctrl-Z's handler
    # did; SIGSTOP cannot be caught): SIGCONT now brings back the prompt with the line typed so
    # far and the cursor where it was. About every second time the SIGCONT's handler ran on the
    # engine's thread, which left the prompt's read uninterrupted: each fg here must show it
    lastrow() { [ "$(screen | grep -v '^$' | tail -n 1)" = "$1" ]; }
    tui_start 80 24 K3_MOCK="$m" -- "bash --rcfile $K3_TMP/bashrc --noprofile -i"
    wait_for 'k3sh$' 5
    type_line "$K3CHAT --plain --think off /no/model" # in the foreground from the start
    wait_until "the line-mode prompt" 10 lastrow ">"
    pgrep -n -x k3chat -P "$($T display -p '#{pane_pid}')" >"$K3_TMP/pid"
    keys -l d1
    keys Left
    n=0
    for typed in d:d1 x:dx1 y:dxy1; do # the key typed (the first time 'd1' and Left), the line then
        n=$((n + 1))
        [ $n -gt 1 ] && keys -l "${typed%%:*}"
        wait_until "the draft" 5 lastrow "> ${typed#*:}"
        kill -STOP "$(cat "$K3_TMP/pid")"
        wait_until "the shell's job line" 5 sh -c "[ \$($T capture-pane -p | grep -c Stopped) -ge $n ]"
        type_line fg
        check "line mode, SIGSTOP, fg ($n): the prompt again with the line typed so far" \
            wait_until "'> ${typed#*:}'" 5 lastrow "> ${typed#*:}"
    done
    keys Enter
    check "... the cursor where it was, the line goes on and is sent whole" wait_for "answer to dxy1" 5
    keys C-d
    wait_until "the shell's prompt" 15 at_prompt
    type_line 'echo END=$?'
    check "... Ctrl-D ends it with 0" wait_for "END=0" 5
fi
# a slow link (ssh with 1.5 s of latency, slow_tty.py): the emoji probe's replies came after it
# stopped waiting (PROBE_MS), and curses read them as keys: the device attributes reply's tail
# ("1;2c") was typed into the input line and sent with the message
tui_start 80 24 K3_MOCK="$m" -- "/usr/bin/python3 $K3_SRC/tests/slow_tty.py 1.5 $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 30"
wait_for "mock · 3 layers" 10
keys -l "hi"
check "a slow link: the input line holds what was typed, no reply of the terminal's" \
    wait_until "'› hi' on the input line" 10 input_is "hi"
keys Enter
check "... and that is sent" wait_for "answer to hi" 10
keys C-d
check "... Ctrl-D ends it with 0" wait_for "EXIT=0" 10
# a terminal that never answers the probe (its queries taken out of the output): the probe keeps
# watching the input for late replies (10 s), and a lone Esc, which could begin one, was held
# until the next key came: Esc did not cancel a history search. It acts after ESCDELAY now
tui_start 80 24 K3_MOCK="$m" -- "/usr/bin/python3 $K3_SRC/tests/slow_tty.py --no-replies 0 $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 30"
wait_for "mock · 3 layers" 10
keys -l "draft"
keys C-r
wait_for "history search" 5
keys Escape
check "no probe replies: a lone Esc cancels the history search at once" wait_gone "history search" 3
check "... the line as it was" wait_input "draft" 5
keys C-u C-d
check "... Ctrl-D ends it with 0" wait_for "EXIT=0" 10
tui_start 80 24 K3_MOCK="$m" -- "$K3CHAT --theme nosuch /no/model; echo EXIT=\$?; sleep 30"
check "--theme with an unknown name: usage error 2" wait_for "EXIT=2" 5
check "--theme names the themes there are" has "themes: "
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
