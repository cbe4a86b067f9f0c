#!/bin/sh
# t-plain-md.sh: /copy, /edit and /raw in line mode on the mock engine: /copy refuses when
# stdout is not a terminal and writes OSC 52 (base64 of the answer) when it is (under script(1)
# for a pty); /edit makes the next line replace the last exchange, kept in the transcript as an
# abandoned branch; /copy and /raw arguments are checked.
. "$K3_SRC/tests/lib.sh" # pass, fail, check DESC CMD...
set -u
K3CHAT="$K3_BUILD/k3chat"
export HOME="$K3_TMP" XDG_DATA_HOME="$K3_TMP/data" XDG_STATE_HOME="$K3_TMP/state" LC_ALL=C.UTF-8
unset TMUX STY
m="$K3_TMP/mock.txt"
printf 'delay 0\nresponse reply to {user} with `code`\nresponse ```sh\nresponse echo {user}\nresponse ```\n' >"$m"

printf 'first\n/copy\n/copy 2\n/copy code 3\n/copy x\n/raw on\n' | K3_MOCK="$m" "$K3CHAT" --plain x >"$K3_TMP/out1" 2>"$K3_TMP/err1"
check "/copy with stdout not a terminal says so and offers /export" grep -q "standard output is not a terminal.*/export" "$K3_TMP/err1"
check "/copy 2 with one answer" grep -q "/copy 2: there is only 1 answer" "$K3_TMP/err1"
check "/copy code 3 with one code block" grep -q "answer 1 has only 1 code block" "$K3_TMP/err1"
check "/copy with a bad word" grep -q "'x' is not an answer number" "$K3_TMP/err1"
check "/raw in line mode explains itself" grep -q "line mode always prints the raw Markdown" "$K3_TMP/err1"
check "the answer is printed raw" grep -qF 'reply to first with `code`' "$K3_TMP/out1"

if command -v script >/dev/null 2>&1; then
    printf 'second\n/copy code\n' >"$K3_TMP/in2"
    TERM=xterm-256color K3_MOCK="$m" script -qec "$K3CHAT --plain x <'$K3_TMP/in2' 2>'$K3_TMP/err2'" "$K3_TMP/typescript" >/dev/null 2>&1
    b64=$(printf 'echo second\n' | base64 -w0)
    check "/copy code on a terminal: OSC 52 with the base64 of the code block" grep -qF "]52;c;$b64" "$K3_TMP/typescript"
    check "and says how many characters" grep -q "copied 12 characters to the clipboard" "$K3_TMP/err2"
else
    echo "SKIP: script(1) is not installed: no pty for the OSC 52 check"
fi

printf 'one\n/edit\nuno\ntwo\n/save %s\n' "$K3_TMP/e.jsonl" | K3_MOCK="$m" "$K3CHAT" --plain x >"$K3_TMP/out3" 2>"$K3_TMP/err3"
check "/edit: the next line replaces the last exchange" grep -q "the next message replaces your last one" "$K3_TMP/err3"
check "the edited message is answered" grep -q "reply to uno" "$K3_TMP/out3"
check "the old exchange is kept as abandoned branch 1" sh -c "grep -F '\"content\":\"one\"' '$K3_TMP/e.jsonl' | grep -q '\"abandoned\":1' && grep -F 'reply to one' '$K3_TMP/e.jsonl' | grep -q '\"abandoned\":1'"
check "the new branch and the next turn are active" sh -c "[ \$(grep -v abandoned '$K3_TMP/e.jsonl' | grep -c -e '\"content\":\"uno\"' -e '\"content\":\"two\"') = 2 ]"
printf '/edit\n' | K3_MOCK="$m" "$K3CHAT" --plain x >/dev/null 2>"$K3_TMP/err4"
check "/edit with nothing sent yet" grep -q "/edit: there is no message of yours to edit" "$K3_TMP/err4"
exit 0
