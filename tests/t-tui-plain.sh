#!/bin/sh
# t-tui-plain.sh: k3chat's line mode (pipes, --plain, dumb terminals) on the scripted mock:
# the response on stdout, the reasoning on stderr, slash commands and their errors, exit status.
. "$K3_SRC/tests/lib.sh" # wait_until, check
set -u
k="$K3_BUILD/k3chat"
m="$K3_TMP/mock.txt"
printf 'delay 0\nthink thinking about {user}\nresponse answer to {user}\n' >"$m"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }

printf 'first\n/temp 5\n/think off\nsecond\n/nosuchcmd\n/save %s/p.jsonl\n' "$K3_TMP" |
    K3_MOCK="$m" "$k" /no/model >"$K3_TMP/out" 2>"$K3_TMP/err"
rc=$?
t "exit status 0 at end of input (got $rc)" '[ $rc -eq 0 ]'
t "stdout has exactly the two answers" '[ "$(cat "$K3_TMP/out")" = "$(printf "answer to first\nanswer to second")" ]'
t "the reasoning goes to stderr" 'grep -q "thinking about first" "$K3_TMP/err"'
t "no reasoning after /think off" '! grep -q "thinking about second" "$K3_TMP/err"'
t "a bad argument is explained on stderr" 'grep -q "/temp: .5. is not a number in 0..2" "$K3_TMP/err"'
t "an unknown command is reported" 'grep -q "unknown command /nosuchcmd" "$K3_TMP/err"'
t "/save works in line mode" 'grep -q "saved 4 messages" "$K3_TMP/err" && [ -s "$K3_TMP/p.jsonl" ]'
t "stderr is not a terminal: no escape sequences" '! grep -q "$(printf "\033")" "$K3_TMP/err"'

# A slash command returns once the worker acknowledges it (EV_ACK), not after a fixed sleep:
# its notice comes before the next answer. 300 commands must then all be taken, in order; the
# 30 s limit only catches a hang (it was 3 s, below the 6 s that a 20 ms sleep per command took,
# which asserted speed: 4-7 s under ASan on a loaded 2-core machine; `k3-bench ui` measures).
printf 'hi\n/save %s/q.jsonl\nbye\n' "$K3_TMP" | K3_MOCK="$m" "$k" --think off /no/model >"$K3_TMP/ord" 2>&1
t "a command's notice comes between the answers around it" \
    '[ "$(sed "s| to /.*||" "$K3_TMP/ord")" = "$(printf "answer to hi\nk3chat: saved 2 messages\nanswer to bye")" ]'
{ echo hi; i=0; while [ $i -lt 300 ]; do echo /clear; i=$((i + 1)); done; echo bye; } >"$K3_TMP/cmds"
K3_MOCK="$m" timeout 30 "$k" /no/model <"$K3_TMP/cmds" >"$K3_TMP/out6" 2>"$K3_TMP/err6"
rc=$?
t "300 slash commands are taken in order and the answers around them come (status $rc; 30 s hang limit)" \
    '[ $rc -eq 0 ] && [ "$(cat "$K3_TMP/out6")" = "$(printf "answer to hi\nanswer to bye")" ]'
# a /retry refused before a turn (nothing to regenerate) is a command's error, not a message
# that went unanswered: the status stays 0 (it was 1); a message that failed still gives 1
printf 'hi\n/undo\n/retry\n' | K3_MOCK="$m" "$k" /no/model >/dev/null 2>"$K3_TMP/err7"
rc=$?
t "a refused /retry says why and leaves the exit status 0 (got $rc)" \
    '[ $rc -eq 0 ] && grep -q "/retry: there is no answer to regenerate" "$K3_TMP/err7"'
printf 'delay 0\nerror the mock failed\n' >"$K3_TMP/mfail"
printf 'hi\n/retry\n' | K3_MOCK="$K3_TMP/mfail" "$k" /no/model >/dev/null 2>/dev/null
rc=$?
t "a message that failed, and failed again on /retry, still exits 1 (got $rc)" '[ $rc -eq 1 ]'
printf 'hello\n' | K3_MOCK="$m" "$k" --plain --think off /no/model >"$K3_TMP/out2" 2>/dev/null
t "--plain --think off answers" 'grep -qx "answer to hello" "$K3_TMP/out2"'
printf '/quit\nnever\n' | K3_MOCK="$m" "$k" /no/model >"$K3_TMP/out3" 2>/dev/null
t "/quit stops reading input" '[ ! -s "$K3_TMP/out3" ]'
printf 'hi\n' | K3_MOCK="$K3_TMP/missing" "$k" /no/model >/dev/null 2>"$K3_TMP/err4"
rc=$?
t "an engine that cannot start exits 1 (got $rc)" '[ $rc -eq 1 ]'
t "and says why" 'grep -q "missing: cannot open: No such file or directory" "$K3_TMP/err4"'
# a directory as the script: refused with the reason (it read as an empty script, status 0)
mkdir -p "$K3_TMP/mockdir"
printf 'hi\n' | K3_MOCK="$K3_TMP/mockdir" "$k" /no/model >/dev/null 2>"$K3_TMP/err4d"
rc=$?
t "K3_MOCK naming a directory: exit 1 saying so (got $rc)" \
    '[ $rc -eq 1 ] && grep -q "K3_MOCK: $K3_TMP/mockdir: cannot read: Is a directory" "$K3_TMP/err4d"'
printf 'delay 2x\nresponse hi\n' >"$K3_TMP/badmock"
printf 'hi\n' | K3_MOCK="$K3_TMP/badmock" "$k" /no/model >/dev/null 2>"$K3_TMP/err4b"
rc=$?
t "a mock script's malformed delay: exit 1 naming the line and the value (got $rc)" \
    '[ $rc -eq 1 ] && grep -q "badmock:1: delay .2x.: expected milliseconds in 0..3600000" "$K3_TMP/err4b"'
printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":"old q"}\n{"role":"assistant","content":"old a"}\n' >"$K3_TMP/in.jsonl"
printf 'new\n' | K3_MOCK="$m" "$k" --load "$K3_TMP/in.jsonl" /no/model >"$K3_TMP/out5" 2>"$K3_TMP/err5"
t "--load continues a transcript" 'grep -q "loaded 2 messages" "$K3_TMP/err5" && grep -qx "answer to new" "$K3_TMP/out5"'
# --load from a pipe (--load <(zcat chat.jsonl.gz), a FIFO being written): the transcript is read
# before the chat starts and again when the engine is up, so the old code's second read found the
# pipe drained (a FIFO: waited for good on a writer that was gone)
mkfifo "$K3_TMP/in.fifo"
cat "$K3_TMP/in.jsonl" >"$K3_TMP/in.fifo" &
printf 'new\n' | K3_MOCK="$m" timeout 60 "$k" --load "$K3_TMP/in.fifo" /no/model >"$K3_TMP/out5f" 2>"$K3_TMP/err5f"
rc=$?
wait
t "--load from a FIFO continues the transcript (exit $rc: $(head -c 160 "$K3_TMP/err5f"))" \
    '[ $rc -eq 0 ] && grep -q "loaded 2 messages" "$K3_TMP/err5f" && grep -qx "answer to new" "$K3_TMP/out5f"'
# the mock loads through the engine's transcript code too: a bad --load stops before it starts
printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":5}\n' >"$K3_TMP/bad5.jsonl"
printf 'new\n' | K3_MOCK="$m" "$k" --load "$K3_TMP/bad5.jsonl" /no/model >"$K3_TMP/out5b" 2>"$K3_TMP/err5b"
rc=$?
t "a malformed --load exits 2 with the mock too (got $rc)" \
    '[ $rc -eq 2 ] && grep -q "^k3chat: --load: .*bad5.jsonl:2:" "$K3_TMP/err5b" && [ ! -s "$K3_TMP/out5b" ]'
# messages read while the model loads sample with the model's generation_config defaults, like
# the later ones (they used to take the interface's built-in 0.6 / 0.95)
if "$K3_BUILD/k3-mkmodel" --preset tiny --seed 5 --quiet "$K3_TMP/gm" >/dev/null 2>&1; then
    printf '{"temperature": 0.3, "top_p": 0.7}\n' >"$K3_TMP/gm/generation_config.json"
    printf 'one\ntwo\nthree\n' | OMP_WAIT_POLICY=passive XDG_DATA_HOME="$K3_TMP/gdata" HOME="$K3_TMP" \
        "$k" --plain --max-tokens 2 "$K3_TMP/gm" >/dev/null 2>"$K3_TMP/err6"
    n=$(cat "$K3_TMP"/gdata/k3chat/*.jsonl 2>/dev/null | grep -c '"role":"assistant".*"temperature":0.3[0-9]*,"top_p":0.7[0-9]*,')
    t "every turn, the first included, samples with generation_config's temperature and top_p ($n of 3)" '[ "$n" -eq 3 ]'
    # a locale whose decimal mark is a comma (de_DE.UTF-8, built here: a fresh Debian has only
    # C.UTF-8) changes nothing read or written as a number: '/temp 0.5' read 0 (greedy) and said
    # "0,00", generation_config's 0.3 read 0, when line mode took LC_NUMERIC from the locale
    if mkdir -p "$K3_TMP/loc" && localedef -i de_DE -f UTF-8 "$K3_TMP/loc/de_DE.UTF-8" 2>"$K3_TMP/lde.err" ||
        [ -f "$K3_TMP/loc/de_DE.UTF-8/LC_NUMERIC" ]; then
        printf 'one\n/temp 0.5\ntwo\n' | LOCPATH="$K3_TMP/loc" LC_ALL=de_DE.UTF-8 OMP_WAIT_POLICY=passive \
            XDG_DATA_HOME="$K3_TMP/ddata" HOME="$K3_TMP" "$k" --plain --max-tokens 2 "$K3_TMP/gm" >/dev/null 2>"$K3_TMP/de.err"
        t "de_DE.UTF-8: '/temp 0.5' says 0.50 ($(grep temperature "$K3_TMP/de.err"))" \
            'grep -q "temperature 0\.50\$" "$K3_TMP/de.err"'
        t "de_DE.UTF-8: the first turn samples at generation_config's 0.3 and 0.7, the second at 0.5" \
            'cat "$K3_TMP"/ddata/k3chat/*.jsonl | grep "\"role\":\"assistant\"" |
             sed -n "s/.*\"temperature\":\(0\.[0-9]\)[0-9]*,\"top_p\":\(0\.[0-9]\)[0-9]*,.*/\1 \2/p" | tr "\n" " " |
             grep -qx "0.3 0.7 0.5 0.7 "'
    else
        echo "SKIP: no de_DE.UTF-8 locale could be built (localedef: $(head -c 200 "$K3_TMP/lde.err"); Debian package locales)"
    fi
else
    t "k3-mkmodel --preset tiny" false
fi
if command -v tmux >/dev/null; then
    export TMUX_TMPDIR="$K3_TMP"
    tm="tmux -L k3plain -f /dev/null"
    # through env: tmux sets the pane's TERM itself (-e TERM=dumb reached k3chat as tmux's own,
    # and the full-screen chat answered)
    $tm new-session -d -x 80 -y 20 -e K3_MOCK="$m" -e HOME="$K3_TMP" "env TERM=dumb $k /no/model; echo EXIT=\$?; sleep 30"
    on_screen() { $tm capture-pane -p | grep -q -- "$1"; }
    wait_until "the line-mode prompt" 5 on_screen '^>' # capture-pane drops its trailing space
    $tm send-keys -l "dumb"; $tm send-keys Enter
    check "TERM=dumb gets the line mode with a prompt" wait_until "'answer to dumb' after the line '> dumb'" 5 \
        sh -c "$tm capture-pane -p | sed -n '/^> dumb\$/,\$p' | grep -q 'answer to dumb'"
    $tm send-keys C-d
    check "Ctrl-D ends the line mode with 0" wait_until "'EXIT=0'" 5 on_screen "EXIT=0"
    # SIGTERM and SIGHUP while libedit reads a line (the terminal raw, echo off): k3chat dies by
    # the signal (128 + its number) with the terminal as it found it (it stayed -icanon -echo)
    for sig in TERM HUP; do
        tmux_end "$tm"
        tm="tmux -L k3plain$sig -f /dev/null" # a fresh server: one shutting down cannot take it
        $tm new-session -d -x 80 -y 20 -e K3_MOCK="$m" -e HOME="$K3_TMP" -e XDG_STATE_HOME="$K3_TMP/state" \
            "sh -c 'echo \$\$ >$K3_TMP/pid; exec env TERM=xterm-256color $k --plain /no/model'; echo EXIT=\$?; stty -a | tr ' ' '\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo; sleep 30"
        wait_until "the line-mode prompt" 5 on_screen '^>'
        $tm send-keys -l "half typed"
        wait_until "the typed text" 5 on_screen "half typed"
        kill -$sig "$(cat "$K3_TMP/pid")"
        st=$((128 + $(signum $sig)))
        check "SIG$sig at the line-mode prompt: exits with $st" wait_until "'EXIT=$st'" 5 on_screen "EXIT=$st"
        check "SIG$sig at the line-mode prompt: the terminal is restored" wait_until "'icanon echo'" 5 on_screen "^icanon echo"
    done
    # Ctrl-C at an empty prompt while the model loads (minutes for a large one) waited for the
    # whole load before k3chat quit, the terminal held meanwhile; it quits at once now
    # plain_tm NAME SCRIPT ARGS...: a fresh tmux server NAME running k3chat --plain ARGS on SCRIPT
    plain_tm() {
        tmux_end "$tm"
        tm="tmux -L $1 -f /dev/null"
        _ms=$2
        shift 2
        $tm new-session -d -x 100 -y 20 -e K3_MOCK="$_ms" -e HOME="$K3_TMP" -e XDG_STATE_HOME="$K3_TMP/state" \
            "env TERM=xterm-256color $k --plain $* /no/model; echo EXIT=\$?; sleep 30"
    }
    printf 'load 600000\nresponse r\n' >"$K3_TMP/slowload.txt"
    plain_tm k3plainload "$K3_TMP/slowload.txt"
    wait_until "the line-mode prompt" 5 on_screen '^>'
    $tm send-keys C-c
    check "Ctrl-C at the prompt while the model loads quits at once, with 0" wait_until "'EXIT=0'" 10 on_screen "EXIT=0"
    check "... saying it did not wait for the load" on_screen "quitting while the model loads"
    # /edit offers a loaded transcript's message on the prompt: its control characters are text,
    # not keys (^A moved the cursor, so 'x^Ay' was sent as 'yx'; ESC ] ran a meta key)
    printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":"x\\u0001y \\u001b]0;T\\u0007 z"}\n{"role":"assistant","content":"a"}\n' >"$K3_TMP/ctl.jsonl"
    plain_tm k3plainedit "$m" --load "$K3_TMP/ctl.jsonl"
    wait_until "the line-mode prompt" 5 on_screen '^>'
    $tm send-keys -l "/edit"; $tm send-keys Enter
    wait_until "the /edit notice" 5 on_screen "replaces your last one"
    $tm send-keys Enter
    check "/edit of a message with control characters sends it as it was" \
        wait_until "'answer to x\\x01y \\x1B]0;T\\x07 z'" 5 on_screen 'answer to x\\x01y \\x1B]0;T\\x07 z'
    $tm send-keys C-d
    # A slash command whose worker blocks for good (/load of a FIFO that a writer holds open and
    # never writes: the read does not return; a hung mount or server is the same) ignored Ctrl-C,
    # and the prompt never came back. Ctrl-C now gives it back, saying why; the command's result
    # shows once it ends, and a message typed meanwhile is answered after it.
    mkfifo "$K3_TMP/fifo"
    plain_tm k3plainfifo "$m"
    wait_until "the line-mode prompt" 5 on_screen '^>'
    exec 7<>"$K3_TMP/fifo" # a writer (after the tmux server started: it does not hold fd 7)
    # cooked: libedit has returned the line and k3chat waits for the worker (a Ctrl-C typed
    # while libedit still reads is a key, not a signal)
    cooked() { stty -F "$($tm display -p '#{pane_tty}')" -a | grep -q -- ' icanon'; }
    $tm send-keys -l "/load $K3_TMP/fifo"; $tm send-keys Enter
    wait_until "the terminal cooked (k3chat waits for the /load)" 5 cooked
    $tm send-keys C-c
    check "Ctrl-C while a /load blocks on a FIFO gives the prompt back, saying why" \
        wait_until "the notice" 5 on_screen "^k3chat: the engine has not finished the command"
    check "... the prompt is back" wait_until "the prompt" 5 sh -c "$tm capture-pane -p | grep -v '^\$' | tail -n 1 | grep -qx '>'"
    $tm send-keys -l "after"; $tm send-keys Enter
    printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":"u"}\n{"role":"assistant","content":"a"}\n' >&7
    exec 7>&-
    check "... the /load's result shows once the FIFO is written" wait_until "the load's notice" 5 on_screen "loaded 2 messages"
    check "... and the message typed meanwhile is answered" wait_until "'answer to after'" 5 on_screen "^answer to after"
    $tm send-keys C-d
    check "... and k3chat quits with 0" wait_until "'EXIT=0'" 5 on_screen "EXIT=0"
    # a quit while the command still blocks: said, and Ctrl-C then quits without the worker
    plain_tm k3plainfifo2 "$m"
    wait_until "the line-mode prompt" 5 on_screen '^>'
    exec 7<>"$K3_TMP/fifo"
    $tm send-keys -l "/load $K3_TMP/fifo"; $tm send-keys Enter
    wait_until "the terminal cooked (k3chat waits for the /load)" 5 cooked
    $tm send-keys C-c
    wait_until "the notice" 5 on_screen "^k3chat: the engine has not finished the command"
    $tm send-keys C-d
    check "a quit while the command blocks says it waits, and how not to" \
        wait_until "the notice" 5 on_screen "waiting for the engine to finish a command (Ctrl-C quits without it)"
    wait_until "the terminal cooked (k3chat waits at the quit)" 5 cooked
    $tm send-keys C-c
    check "... Ctrl-C then quits without the worker, with 0" wait_until "'EXIT=0'" 5 on_screen "EXIT=0"
    check "... saying so" on_screen "quitting without waiting for the engine"
    exec 7>&-
    tmux_end "$tm"
else
    echo "SKIP: tmux is not installed"
fi
