#!/bin/sh
# t-tui-cells.sh: text that a terminal draws a cell at a time, in the full-screen chat on the
# mock engine in tmux: what reaches the screen is every character of the answer, each row within
# the pane. tmux keeps what it was sent in its cells, so capture-pane shows a character curses was
# never given or one drawn over by the next. Also under LANG=C (both modes): what is typed that is
# not ASCII reaches the model.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

# --- characters Unicode joins to their neighbour and a terminal does not -------------------
# U+0600 (ARABIC NUMBER SIGN, a prepended mark: Unicode's cluster takes the digit after it) and
# the Devanagari vowel sign aa (a spacing mark: its cluster is the consonant's) each take a cell
# of their own in curses and tmux; drawn as one cell with their cluster, the letter after U+0600
# and the vowel sign were left out, and the columns after them drifted by one.
AN=$(printf '\330\200')                               # U+0600
KA=$(printf '\340\244\225') AA=$(printf '\340\244\276') # U+0915 U+093E
m="$K3_TMP/cells.txt"
printf 'delay 0\nresponse A ~~ab%scd~~ef and ~~x%s~~12345 z %s%s%s%s end\n' "$AN" "$AN" "$KA" "$AA" "$KA" "$AA" >"$m"
run_mock 40 12 "$m"
wait_for "mock · 3 layers" 10
type_line "hi"
check "U+0600 inside ~~strike~~ keeps the letter after it" wait_for "A ab${AN}cdef and x${AN}12345 z" 5
check "a spacing vowel sign is drawn, the text after it in place" has "z $KA$AA$KA$AA end"
keys C-d; wait_for "EXIT=0" 5

# --- a locale that is not UTF-8 (LANG=C: a UTF-8 terminal reached without LANG set) -----------
# The chat's text is UTF-8 whatever the locale. Under LANG=C the line editor dropped every
# character typed that was not ASCII ('héllo' was sent as 'hllo'), and curses counted none of the
# UTF-8 drawn (the status bar's '·' left stale cells after it).
printf 'delay 0\nresponse got {user} \346\227\245\346\234\254\350\252\236 end\n' >"$m"
for mode in full line; do
    if [ $mode = full ]; then cmd="$K3CHAT /no/model"; else cmd="$K3CHAT --plain /no/model"; fi
    tui_start 80 16 K3_MOCK="$m" -- "LANG=C LC_ALL=C $cmd 2>&1; echo EXIT=\$?; sleep 60"
    check "LANG=C, $mode: says the locale is not UTF-8 and that the chat uses UTF-8" wait_for "are ASCII, not UTF-8" 10
    keys -l "h$(printf '\303\251')llo $(printf '\346\227\245\346\234\254')"; keys Enter
    check "LANG=C, $mode: what was typed is sent whole" \
        wait_for "got h$(printf '\303\251')llo $(printf '\346\227\245\346\234\254 \346\227\245\346\234\254\350\252\236') end" 5
    [ $mode = full ] && check "LANG=C, full: the status bar as drawn" has "mock $(printf '\302\267') 3 layers"
    keys C-d; wait_for "EXIT=0" 5
done

finish
