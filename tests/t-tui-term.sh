#!/bin/sh
# t-tui-term.sh: the full-screen chat on other terminals: 8 colors (TERM=xterm), 256 colors with
# NO_COLOR, a monochrome terminal (vt100), and a bad --theme; each answers a message and exits
# cleanly.
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
# a signal from outside (TERM, HUP, INT) ends k3chat cleanly, the terminal restored
for sig in TERM HUP INT; do
    tui_start 80 24 K3_MOCK="$m" -- "sh -c 'echo \$\$ >$K3_TMP/pid; exec $K3CHAT /no/model 2>>$K3_TMP/stderr.txt'; echo EXIT=\$?; stty -a | tr ' ' '\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo; sleep 30"
    wait_for "mock · 3 layers" 10
    kill -$sig "$(cat "$K3_TMP/pid")"
    st=$((128 + $(signum "$sig"))) # as a shell reports it (k3chat(1), EXIT STATUS)
    check "SIG$sig: k3chat exits with $st" wait_for "EXIT=$st" 5
    check "SIG$sig: the terminal is restored" wait_for "icanon echo" 5
done
tui_start 80 24 K3_MOCK="$m" -- "$K3CHAT --theme nosuch /no/model; echo EXIT=\$?; sleep 30"
check "--theme with an unknown name: usage error 2" wait_for "EXIT=2" 5
check "--theme names the themes there are" has "themes: "
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
