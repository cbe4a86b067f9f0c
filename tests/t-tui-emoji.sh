#!/bin/sh
# t-tui-emoji.sh: multi-emoji clusters drawn whole (issue 26 item 13; ui/tui/tui-emoji.c), on the
# mock engine in tmux. tmux keeps what it was sent in its cells, so capture-pane shows whether
# a ZWJ family or a flag reached the terminal whole or as curses' stand-in (the first emoji,
# the region letters). The same scenario runs twice, measured (K3_EMOJI unset: the probe) and
# with K3_EMOJI=fallback; at each step the measured screen, with every whole cluster replaced
# by its stand-in, must equal the fallback screen row for row: the clusters sit in the right
# cells, and none is left behind where the text moved (scroll, resize, edits, streaming).
# slow
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
PY=/usr/bin/python3

FAM=$(printf '\360\237\221\251\342\200\215\360\237\221\251\342\200\215\360\237\221\247') # woman ZWJ woman ZWJ girl
JP=$(printf '\360\237\207\257\360\237\207\265')                                        # the flag of Japan
SKIN=$(printf '\360\237\221\215\360\237\217\275')                                      # thumbs up, medium skin tone

# What this tmux does with the samples (the same question the probe asks it).
tmux_width() { # tmux_width TEXT: columns the cursor advances
    _W="tmux -L k3emw -f /dev/null"
    tmux_end "$_W"
    $_W new-session -d -x 40 -y 5 -e LANG=C.UTF-8 -e LC_ALL=C.UTF-8 "printf '%s' '$1'; sleep 30"
    _i=0; _x=""
    while [ $_i -lt 40 ]; do
        _x=$($_W display -p '#{cursor_x}' 2>/dev/null)
        [ -n "$_x" ] && [ "$_x" != 0 ] && break
        sleep 0.05; _i=$((_i + 1))
    done
    tmux_end "$_W"
    echo "${_x:-0}"
}
HEART=$(printf '\342\235\244\357\270\217') # heart + VS16: a text character in emoji presentation
w_fam=$(tmux_width "$FAM"); w_jp=$(tmux_width "$JP"); w_skin=$(tmux_width "$SKIN"); w_vs=$(tmux_width "$HEART")
echo "tmux $(tmux -V): family $w_fam, flag $w_jp, skin tone $w_skin, heart + VS16 $w_vs columns"

# the answer: a list of 30 rows; even rows carry a family and a flag, odd rows a lone woman in
# the same column (the family's stand-in: where a family moves onto a lone woman, curses sees no
# change in that cell, and only the repaint takes the family away); then 16 paragraphs with the
# clusters at a different column each
script="$K3_TMP/m.txt"
{
    printf 'delay 0\nresponse '
    i=1
    while [ $i -le 30 ]; do
        if [ $((i % 2)) = 0 ]; then
            printf -- '- row %02d fam %s and %s done\\n' $i "$FAM" "$JP"
        else
            printf -- '- row %02d fam %s lone\\n' $i "$(printf '\360\237\221\251')"
        fi
        i=$((i + 1))
    done
    while [ $i -le 46 ]; do
        pad=$(printf '%*s' $((i % 7)) '' | tr ' ' '.')
        printf '\\npara %02d %s%s and %s done %s\\n' $i "$pad" "$FAM" "$JP" "$pad"
        i=$((i + 1))
    done
    # at 41 columns (40 for text) this family takes the last two text columns
    printf '\\nedge %s%sz\\n' "$(printf 'y%.0s' $(seq 1 38))" "$FAM"
    # the second answer streams a list through the response pane, which scrolls as it grows
    printf '\\nlast row\n---\ndelay 40\nresponse stream %s then %s and more\\n\\n' "$FAM" "$JP"
    i=1
    while [ $i -le 12 ]; do printf -- '- item %02d %s and %s\\n' $i "$FAM" "$JP"; i=$((i + 1)); done
    printf -- '- item 13 plain\\n- item 14 plain\\n\\nline two%s\n' "$(printf ' tail%03d' $(seq 1 40))"
} >"$script"
# the third answer (to the message Up recalls below): the second's text, at once (only its
# finished screen is compared; streamed it would take as long as the second)
{ printf -- '---\ndelay 0\n'; sed -n '/^---$/,$p' "$script" | grep '^response '; } >>"$script"

# snap NAME: the screen, less the status bar (its speed figures differ between runs)
snap() { screen | grep -v 'mock · 3 layers' >"$K3_TMP/$mode.$1"; }
# snap_when NAME DESC CMD...: snap NAME once CMD says the keys' effect is on the screen and two
# looks 0.25 s apart agree (the frame drawn whole). A fixed sleep before the look (0.3 s) left
# a busy machine's frame half drawn or not begun, and the two modes' screens then differ
nobar() { screen | grep -v 'mock · 3 layers'; }
snap_when() {
    _sn=$1 _sd=$2; shift 2
    wait_until "$_sd" 10 "$@"
    settled 10 nobar >"$K3_TMP/$mode.$_sn"
}
last_row() { case "$(screen | tail -n 1)" in $1) return 0 ;; esac; return 1; }
# at 41 columns the edge row wraps its z onto a row of its own (check_edge): the redraw done
z_row() { screen | grep -qx 'z'; }
# the pane while its first line streams, kept as stream from the look that saw it (a second
# look could come after the pane had scrolled that line away: seen at load 26)
first_streaming() {
    snap stream
    grep -q 'response · Ctrl-C stops' "$K3_TMP/$mode.stream" && grep -q 'and more' "$K3_TMP/$mode.stream"
}
scrolled_streaming() {
    snap stream2
    grep -q 'response · Ctrl-C stops' "$K3_TMP/$mode.stream2" && ! grep -q 'and more' "$K3_TMP/$mode.stream2" &&
        grep -q 'item 13' "$K3_TMP/$mode.stream2" # item 12 is whole once 13 has begun
}
# same NAME: the measured screen, stand-ins put back, equals the fallback screen
same() {
    $PY - "$K3_TMP/auto.$1" "$K3_TMP/fallback.$1" "$FAM" "$JP" <<'EOF'
import sys
w, f, fam, jp = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3], sys.argv[4]
w2 = w.replace(fam, "\U0001F469").replace(jp, "JP")
if w2 != f:
    for a, b in zip(w2.splitlines(), f.splitlines()):
        if a != b:
            print("    measured: " + a + "\n    fallback: " + b)
    sys.exit(1)
EOF
}
# whole NAME: the measured screen shows clusters whole and no stand-in of them: a family, no
# region letters, and a lone woman only where the text has one ("lone" rows)
whole() {
    $PY - "$K3_TMP/auto.$1" "$FAM" <<'EOF'
import re, sys
w, fam = open(sys.argv[1]).read(), sys.argv[2]
lone = len(re.findall("(?<!\u200d)\U0001F469(?!\u200d)", w))
ok = fam in w and "JP" not in w and lone == w.count("\U0001F469 lone")
if not ok:
    print("    families %d, JP %d, lone women %d in %d lone rows" % (w.count(fam), w.count("JP"), lone, w.count("\U0001F469 lone")))
sys.exit(0 if ok else 1)
EOF
}

check_edge() { # measured mode: the family at the last text columns is whole, z below it
    [ "$mode" = auto ] && [ "$w_fam" -ge 1 ] && [ "$w_fam" -le 2 ] || return 0
    check "41 columns: a family in the last two text columns is drawn whole" \
        sh -c "$T capture-pane -p | grep -qx 'y*$FAM' && $T capture-pane -p | grep -qx 'z'"
}

run() { # the scenario, in $mode
    if [ "$mode" = fallback ]; then env="K3_EMOJI=fallback"; else env="K3_UNUSED=1"; fi
    run_mock 80 24 "$script" "$env"
    wait_for "mock · 3 layers" 10
    type_line "first $FAM"
    wait_for "last row" 10; wait_gone "Ctrl-C stops" 10; snap answer
    # two pages of 20 rows up (the first PgUp alone shows "20 more")
    keys PPage; keys PPage; wait_for "40 more · PgDn" 5; snap pgup
    mouse 65 10 5; wait_for "37 more · PgDn" 5; snap wheel # three rows down: less than a page
    keys NPage; keys NPage; wait_gone "more · PgDn" 5; snap pgdn
    $T resize-window -x 41 -y 19; snap_when resize "the redraw at 41 columns (z on a row of its own)" z_row
    check_edge
    $T resize-window -x 80 -y 24; sleep 0.5; wait_for "last row" 5
    keys -l "in $FAM and $JP x"; snap_when input "the typed line" last_row "› in * x"
    keys Home; keys -l "ab"; snap_when input-moved "ab at its start" last_row "› abin * x"
    keys End; keys BSpace; keys BSpace; keys BSpace; keys BSpace
    snap_when input-cut "x, the flag and two spaces gone" last_row "› abin * and"
    keys C-u; keys -l "$FAM"; keys BSpace; keys -l "$(printf '\360\237\221\251')"
    snap_when input-same "a lone woman for the family" last_row "› $(printf '\360\237\221\251')"
    keys C-u; keys C-r; keys -l "first"; wait_for "history search: first" 5; snap search
    keys Escape; keys C-u
    type_line "second"
    wait_until "the response pane with its first line" 10 first_streaming
    # the pane has scrolled ('and more' gone, item 13 begun) while the answer still streams:
    # looked at until so (a busy machine draws several tokens in one frame; one look right
    # after 'item 13' could come before the scroll), each look kept as stream2
    wait_until "the response pane scrolled while streaming" 20 scrolled_streaming
    wait_for "tail040" 20; wait_gone "Ctrl-C stops" 10; snap second
    # Up recalls a message with a lone woman where the draft has a family: one keystroke
    keys -l "$(printf 'fam \360\237\221\251 x')"; keys Enter; sleep 0.5; wait_gone "Ctrl-C stops" 20
    keys -l "fam $FAM y"; sleep 0.3; keys Up; wait_for "› fam $(printf '\360\237\221\251') x" 5; snap recall
    keys C-u; keys C-d; wait_for "EXIT=0" 5 # Ctrl-D quits on an empty line
}
mode=auto; run
mode=fallback; run

if [ "$w_fam" -gt 2 ] || [ "$w_fam" -lt 1 ] || [ "$w_jp" -gt 2 ] || [ "$w_jp" -lt 1 ]; then
    echo "SKIP: drawing whole (this tmux does not join ZWJ sequences or flags in 2 columns: $w_fam, $w_jp)"
else
    check "answer: the families and flags reach the terminal whole" whole answer
    for s in answer pgup wheel pgdn resize input input-moved input-cut input-same search second recall; do
        check "$s: clusters in the right cells, none left behind (measured = fallback + clusters)" same "$s"
    done
    check "scrolled up: clusters whole" whole pgup
    check "wheel: three rows down, families onto lone women: none left" whole wheel
    check "Up recalls a lone woman over a drafted family: no family left in the line" \
        sh -c "tail -n 1 '$K3_TMP/auto.recall' | grep -q 'fam $(printf '\360\237\221\251') x' && ! tail -n 1 '$K3_TMP/auto.recall' | grep -qF '$(printf '\342\200\215')'"
    check "after a resize: clusters whole" whole resize
    check "input line: clusters whole" whole input
    check "input line, text inserted before them: whole and moved" whole input-moved
    check "input line, family replaced by a lone woman: no family left on the screen" \
        sh -c "tail -n 1 '$K3_TMP/auto.input-same' | grep -qv '\\$(printf '\342\200\215')' && tail -n 1 '$K3_TMP/auto.input-same' | grep -qF '$(printf '\360\237\221\251')'"
    check "Ctrl-R shows the match with its cluster whole" grep -qF -- "› first $FAM" "$K3_TMP/auto.search"
    check "while the answer streams: its clusters whole in the response pane" \
        sh -c "grep -q 'response · Ctrl-C stops' '$K3_TMP/auto.stream' && grep -qF -- 'stream $FAM then $JP and more' '$K3_TMP/auto.stream'"
    check "the response pane scrolled while streaming: its clusters moved whole" \
        sh -c "grep -q 'response · Ctrl-C stops' '$K3_TMP/auto.stream2' && ! grep -q 'and more' '$K3_TMP/auto.stream2' && grep -qF -- 'item 12 $FAM and $JP' '$K3_TMP/auto.stream2'"
    check "... and no stand-in anywhere" whole stream2
fi
check "fallback: a flag stands in as its letters" grep -q 'JP done' "$K3_TMP/fallback.answer"
check "fallback: no ZWJ sequence reaches the terminal" sh -c "! grep -qF '$FAM' '$K3_TMP/fallback.answer'"

# a skin tone: this tmux draws it 4 columns wide, so measured mode must use the stand-in
m2="$K3_TMP/m2.txt"
printf 'delay 0\nresponse got [{user}]\n' >"$m2"
tui_start 80 24 K3_MOCK="$m2" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "x $SKIN y"; wait_for "got [x" 10
if [ "$w_skin" -gt 2 ]; then
    check "a kind the terminal draws wider than 2 columns gets its stand-in (skin tone: $w_skin columns)" \
        has "got [x $(printf '\360\237\221\215') y]"
else
    check "a kind the terminal draws in 2 columns is drawn whole (skin tone)" wait_for "got [x $SKIN y]" 5
fi
# heart + VS16: counted as wide as this tmux draws it (the probe; tmux 3.3a: 1 column, where
# k3chat counted 2 and padded a space after it), so what follows sits right after it, in the
# answer and in the input line, and the cursor is where tmux puts it after the typed text
type_line "v${HEART}y"; wait_for "got [v" 10
check "heart + VS16 ($w_vs columns here): no gap after it in the answer" wait_for "got [v${HEART}y]" 5
keys -l "v${HEART}x"; wait_until "the typed line" 10 last_row "› v*x"
check "... nor in the input line" sh -c "[ \"\$($T capture-pane -p | tail -n 1)\" = '› v${HEART}x' ]"
check "... and the cursor is after the x, where tmux puts it (column $((4 + w_vs)))" \
    sh -c "[ \"\$($T display -p '#{cursor_x}')\" = $((4 + w_vs)) ]"
keys C-u
keys C-d; wait_for "EXIT=0" 5

# the Linux console: stand-ins without a probe
if infocmp linux >/dev/null 2>&1; then
    tui_start 80 24 K3_MOCK="$m2" -- "TERM=linux $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    wait_for "mock · 3 layers" 10
    type_line "x $FAM $JP y"; wait_for "got [x" 10
    check "TERM=linux: a family stands in as its first emoji, a flag as its letters" \
        wait_for "got [x $(printf '\360\237\221\251') JP y]" 5
    keys C-d; wait_for "EXIT=0" 5
else
    echo "SKIP: TERM=linux (no terminfo entry)"
fi

# K3_EMOJI=whole trusts the terminal with every kind, the skin tone too
tui_start 80 24 K3_MOCK="$m2" K3_EMOJI=whole -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "x $FAM $SKIN"; wait_for "got [x" 10
check "K3_EMOJI=whole: family and skin tone reach the terminal whole" has "got [x $FAM $SKIN"
keys C-d; wait_for "EXIT=0" 5

# a bad setting is refused before the screen starts
tui_start 80 24 K3_MOCK="$m2" K3_EMOJI=sometimes -- "$K3CHAT /no/model 2>&1; echo EXIT=\$?; sleep 60"
check "K3_EMOJI=sometimes: exit 2" wait_for "EXIT=2" 10
check "... naming the variable and the values it takes" has "K3_EMOJI: 'sometimes' is not auto, whole or fallback"
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
