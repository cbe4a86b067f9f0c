#!/bin/sh
# t-tui-names.sh: the status bar fits the model's name to its width. A remote server's model id
# or a model directory's name of any length shows its start and its end around an ellipsis, cut
# by display width between characters (txt_fit): the old bar cut the name at 90 bytes (the
# remote id at 120, a directory at 64) from the front, inside a UTF-8 character (U+FFFD on the
# screen) and without the end where two long ids differ.
. "$K3_SRC/tests/tui-lib.sh"

python3 "$K3_SRC/tests/chat_fake.py" "$K3_TMP/port" "$K3_TMP/reqs" &
fpid=$!
trap 'tmux_end "$T"; kill $fpid 2>/dev/null; wait $fpid' EXIT
wait_until "the fake server's port in $K3_TMP/port" 10 test -s "$K3_TMP/port"
ep="http://127.0.0.1:$(cat "$K3_TMP/port")"

status() { screen | grep -E '^ (moonshotai/|a模|k3-nano-x)' | head -n 1; } # the status bar's row (the name first)
status_has() { status | grep -qF -- "$1"; }
status_width() { status | sed 's/ *$//' | python3 -c 'import sys, unicodedata as u
s = sys.stdin.read().rstrip("\n")
print(sum(2 if u.east_asian_width(c) in "WF" else 1 for c in s))'; }

# two long ids that differ only at the end: the end is what shows
long="moonshotai/Kimi-K3-Instruct-a-very-long-checkpoint-name-that-goes-on-and-on-for-more-than-a-hundred-and-twenty-bytes-revision"
tui_start 100 20 -- "$K3CHAT --endpoint $ep --model $long-TAIL-A; echo EXIT=\$?; sleep 60"
check "a long remote id: the status bar shows its start" wait_until "the status bar" 15 status_has "moonshotai/Kimi"
check "... and its end, where two ids differ ('$(status)')" status_has "TAIL-A"
check "... around an ellipsis" status_has "…"
check "... and the settings after it" status_has "│ think max │ T"
check "... all in the 100 columns ($(status_width))" [ "$(status_width)" -le 100 ]

# a name of wide characters cut where the old bar's byte count fell inside one
wide="a$(printf '模%.0s' $(seq 1 60))-WIDE-END"
tui_start 100 20 -- "$K3CHAT --endpoint $ep --model $wide; echo EXIT=\$?; sleep 60"
check "a name of CJK characters: the status bar shows" wait_until "the status bar" 15 status_has "│ think"
check "... no U+FFFD from half a character ('$(status)')" sh -c "! screen | grep -qF '�'"
check "... its end" status_has "WIDE-END"
check "... within the 100 columns ($(status_width))" [ "$(status_width)" -le 100 ]

# a narrow window: the name takes what the figures leave, cut with the ellipsis
tui_start 44 20 -- "$K3CHAT --endpoint $ep --model $long-TAIL-B; echo EXIT=\$?; sleep 60"
check "44 columns: the status bar shows the name's end" wait_until "the name's end" 15 status_has "TAIL-B"
check "... and its start ('$(status)')" status_has "moonshotai"
check "... within the 44 columns ($(status_width))" [ "$(status_width)" -le 44 ]

# a model directory with a long name (a link to k3-nano): its end shows too
dir="$K3_TMP/k3-nano-$(printf 'x%.0s' $(seq 1 90))-DIR-END"
ln -s "$K3_SRC/models/k3-nano" "$dir"
tui_start 100 20 -- "$K3CHAT $dir; echo EXIT=\$?; sleep 60"
check "a long model directory name: its end shows once loaded" wait_until "the name's end" 60 status_has "-DIR-END │ think"
check "... and its start ('$(status)')" status_has "k3-nano-xx"
check "... and the context figure after it" status_has "│ ctx "
keys C-d
finish
