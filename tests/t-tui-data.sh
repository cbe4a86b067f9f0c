#!/bin/sh
# t-tui-data.sh: the full-screen chat's data paths in tmux (issue 26): a paste with invalid
# UTF-8 goes in whole, with U+FFFD and a notice (it used to be cut at the bad byte, taking the
# end-of-paste marker with it), and the message sent holds all of it.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

m="$K3_TMP/mock.txt"
printf 'delay 0\nresponse answer to {user}\n' >"$m"
run="$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
tui_start 100 24 K3_MOCK="$m" -- "$run"
wait_for "mock · 3 layers" 10

printf 'abc\351def ghi' >"$K3_TMP/bad.txt"
$T load-buffer "$K3_TMP/bad.txt"
$T paste-buffer -p
check "1: a paste with a Latin-1 byte goes in whole, the byte as U+FFFD" wait_for "› abc�def ghi" 3
check "1: and the user is told" wait_for "the pasted text: invalid UTF-8 (1 sequence) replaced with U+FFFD" 3
keys -l "XYZ"
check "1: the paste ended: later keys are typed after it" wait_for "› abc�def ghiXYZ" 3
keys Enter
check "1: the whole message is sent" wait_for "answer to abc�def ghiXYZ" 3
finish
