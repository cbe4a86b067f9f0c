#!/bin/sh
# t-tui-edges.sh: the full-screen chat's rough edges found by a new user (issue 26), on the mock
# engine in tmux: errors at the start of a turn stay visible (6), Ctrl-Home/Ctrl-End (11),
# what is typed while the terminal is too small kept (17), an unknown TERM falls back to line mode
# (18), the scroll hint on a row of its own (25), the hidden-reasoning header (26), small screens
# wrap (28), Tab lists every candidate (22), and notices around /retry and /clear (31).
# One section per item; each check names its item.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
wait_for_file() { wait_until "the file $1" 5 test -e "$1"; } # wait_for_file PATH

# --- item 6: an error raised as the turn starts is not erased with the turn ----------------
m6="$K3_TMP/m6.txt"
printf 'delay 0\nerror the mock failed at the start\n' >"$m6"
run_mock 80 24 "$m6"
wait_for "mock · 3 layers" 10
type_line "hello"
wait_gone "Ctrl-C stops" 10
check "item 6: the turn's start error stays in the conversation" wait_for "the mock failed at the start" 5
check "item 6: the user's message is still shown" has "› hello"
keys C-d; wait_for "EXIT=0" 5

# --- item 31: /retry keeps notices after the last message; /save then /clear at once --------
m31="$K3_TMP/m31.txt"
printf 'delay 0\nresponse answer to {user}\n' >"$m31"
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
type_line "first"
wait_for "answer to first" 10
type_line "/save $K3_TMP/s31.jsonl"
wait_for "saved 2 messages" 5
type_line "/retry"
wait_for "answer to first" 10
wait_input_empty 5
check "item 31: /retry keeps the /save notice shown after the last message" wait_for "saved 2 messages" 5
# both commands in one write: the /clear reaches the UI before the save's notice does
keys -l "$(printf '/save %s/t31.jsonl\r/clear\r' "$K3_TMP")"
wait_for "type a message and press Enter" 15
check "item 31: the file was saved" wait_for_file "$K3_TMP/t31.jsonl"
sleep 0.3
check "item 31: the save's notice is not in the new, empty conversation" hasnt "saved 2 messages to $K3_TMP/t31"
keys C-d; wait_for "EXIT=0" 5

# --- item 17: what is typed while "Terminal too small" shows is kept ------------------------
# Typing and editing go into the draft (its end shows under the notice); Enter, whose message or
# command could not be seen, waits with the keys after it until the window is large enough. Keys
# typed there were dropped: a message typed at a small window was lost.
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
$T resize-window -x 39 -y 11
wait_for "Terminal too small" 5
keys -l "typed while smal"; keys BSpace; keys -l "ll"; keys Left Left; keys -l "x"; keys Right Right
check "item 17: the draft typed and edited while too small shows under the notice" \
    wait_until "the draft's line" 5 sh -c "$T capture-pane -p | tr '\n' ' ' | grep -q 'Draft: typed while smaxll'"
keys BSpace BSpace BSpace; keys -l "ll"
keys Enter; keys -l "$(printf '\033[200~second\nline\033[201~')"; keys -l " next"
check "item 17: Enter and the keys after it wait for the larger window, said so" \
    wait_until "the held keys' line" 5 sh -c "$T capture-pane -p | tr '\n' ' ' | grep -q 'then Enter and'"
check "item 17: ... and nothing is sent meanwhile" hasnt "answer to"
$T resize-window -x 80 -y 24
wait_gone "Terminal too small" 5
check "item 17: the message typed while too small is sent once the window is large enough" \
    wait_for "answer to typed while small" 10
check "item 17: the keys after its Enter (a paste among them) are the next draft" \
    wait_until "the draft 'second', 'line next'" 5 sh -c "[ \"\$($T capture-pane -p | tail -n 2 | tr '\n' '|')\" = '› second|  line next|' ]"
keys C-u
# Ctrl-C drops the draft and the keys held, nothing is sent; Ctrl-C at an empty draft quits
$T resize-window -x 39 -y 11
wait_for "Terminal too small" 5
keys -l "dropped"; keys Enter; keys -l "also"
wait_until "the held keys' line" 5 sh -c "$T capture-pane -p | tr '\n' ' ' | grep -q 'then Enter and'"
keys C-c
check "item 17: Ctrl-C drops the draft and the keys held" wait_gone "Draft:" 5
$T resize-window -x 80 -y 24
wait_gone "Terminal too small" 5
sleep 0.3
check "item 17: ... and nothing of them is sent" hasnt "answer to dropped"
check "item 17: ... nor left in the input line" input_empty
type_line "after"
check "item 17: the chat answers once the window is large enough" wait_for "answer to after" 10
keys C-d; wait_for "EXIT=0" 5

# --- item 17b: Ctrl-C in a too-small window quit at once: an answer streaming was cut off, and a
# conversation on no disk (its autosave failed: XDG_DATA_HOME below a regular file) was dropped
# without the question every other quit asks. Now Ctrl-C stops the answer, the next quit is
# refused with the reason shown on the too-small screen, and the one after quits
: >"$K3_TMP/afile"
printf 'autosave\ndelay 0\nresponse first answer\n---\ndelay 300\nresponse %s STREAM-END\n' "$(seq 1 200 | tr '\n' ' ')" >"$K3_TMP/m17b"
tui_start 80 24 K3_MOCK="$K3_TMP/m17b" -- "XDG_DATA_HOME=$K3_TMP/afile/data $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "hi"
wait_for "first answer" 10
wait_for "autosave:" 5
type_line "more"
wait_for "1 2 3" 10
$T resize-window -x 30 -y 8
wait_for "too small" 5
keys C-c
check "item 17b: too small, Ctrl-C while an answer streams stops it" wait_until "the answer to stop" 10 \
    sh -c "$T resize-window -x 80 -y 24; sleep 0.3; $T capture-pane -p | grep -q 'stopped'"
check "item 17b: ... and does not quit" hasnt "EXIT="
$T resize-window -x 30 -y 8
wait_for "too small" 5
keys C-c
check "item 17b: too small, the quit of a conversation on no disk is refused, saying why" \
    wait_until "the refusal on the too-small screen" 5 sh -c "$T capture-pane -p | tr '\n' ' ' | grep -q 'is not saved anywhere'"
check "item 17b: ... and k3chat is still running" hasnt "EXIT="
keys C-c
check "item 17b: the same request again quits" wait_for "EXIT=0" 10

# --- item 28: small screens wrap the notice, the welcome line and /help ---------------------
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
$T resize-window -x 30 -y 11
check "item 28: the too-small notice is wrapped, not cut (30 columns)" wait_for "Enlarge the window" 5
check "item 28: it names the size it needs" sh -c "$T capture-pane -p | tr -d '\n' | grep -q 'needs at least 40x12'"
$T resize-window -x 40 -y 12
check "item 28: the welcome line is whole at 40 columns" wait_for "keys." 5
check "item 28: ... and its start too" has "k3chat: type a message"
$T resize-window -x 40 -y 60
type_line "/help"
check "item 28: /help at 40 columns lists the last key" wait_for "Ctrl-L" 5
# a description wrapped under its own column: no continuation row starts at column 0
check "item 28: wrapped /help rows keep a hanging indent" sh -c "! $T capture-pane -p | grep -E '^[a-z]' | grep -v -e '^A line' -e '^that starts' -e '^k3chat'"
keys C-d; wait_for "EXIT=0" 5

# --- item 18: an unknown TERM falls back to line mode ---------------------------------------
tui_start 80 24 K3_MOCK="$m31" -- "TERM=no-such-terminal-k3 $K3CHAT /no/model 2>>$K3_TMP/stderr18.txt; echo EXIT=\$?; sleep 60"
sleep 0.5
type_line "hi there"
check "item 18: an unknown TERM gets line mode, which answers" wait_for "answer to hi there" 10
keys C-d
check "item 18: line mode exits with 0" wait_for "EXIT=0" 5
check "item 18: it says why it uses line mode" grep -q "no terminfo entry for TERM 'no-such-terminal-k3'" "$K3_TMP/stderr18.txt"

# --- items 11 and 25: Ctrl-Home / Ctrl-End, and the scroll hint on its own row -----------------
m25="$K3_TMP/m25.txt"
/usr/bin/python3 -c 'print("delay 0\nresponse " + "\\n".join("row %02d " % i + "x" * 60 for i in range(40)))' >"$m25"
for size in 80x24 120x40; do
    run_mock "${size%x*}" "${size#*x}" "$m25"
    wait_for "mock · 3 layers" 10
    type_line "/raw on" # answers as they came: one row per line, whatever Markdown would join
    type_line "top message"
    wait_for "row 39" 10
    wait_input_empty 5
    keys PPage
    check "item 25 ($size): PgUp shows the hint" wait_for "more · PgDn" 5
    check "item 25 ($size): the hint has its own row" sh -c "$T capture-pane -p | grep -F 'more · PgDn' | grep -qv 'row '"
    check "item 25 ($size): the arrow points at the lines below" has "↓ "
    # the hint counts the lines below the last text row: row 39, the blank line after the answer
    hint=$(screen | grep -F 'more · PgDn' | sed 's/.*↓ \([0-9]*\) more.*/\1/')
    last=$(screen | grep -o 'row [0-9][0-9]' | tail -n 1 | cut -c5-)
    check "item 25 ($size): the count is the rows below ($hint after row $last)" [ "$hint" -eq $((39 - ${last#0} + 1)) ]
    keys C-End
    check "item 11 ($size): Ctrl-End goes back to the latest" wait_gone "more · PgDn" 5
    keys C-Home
    check "item 11 ($size): Ctrl-Home shows the first message" wait_for "› top message" 5
    keys C-d; wait_for "EXIT=0" 5
done

# --- item 26: hidden reasoning is told apart from waiting ------------------------------------
m26="$K3_TMP/m26.txt"
/usr/bin/python3 -c 'print("delay 30\nthink " + "mull " * 200 + "\nresponse done")' >"$m26"
run_mock 80 24 "$m26"
wait_for "mock · 3 layers" 10
type_line "/show-thinking off"
wait_for "think pane hidden" 5
type_line "go"
check "item 26: the header says the model is thinking (hidden)" wait_for "thinking (hidden)" 10
check "item 26: not 'waiting for the first token'" hasnt "waiting for the first token"
keys C-c
wait_gone "Ctrl-C stops" 10
keys C-d; wait_for "EXIT=0" 5

# --- item 22: Tab lists every candidate, over several rows ------------------------------------
for size in 80x24 40x12; do
    run_mock "${size%x*}" "${size#*x}" "$m31"
    wait_for "mock · 3 layers" 10
    keys -l "/"; keys Tab
    # the list, not the welcome line (which names /help too): wait for its last entry first
    check "item 22 ($size): Tab lists the commands down to the last one, /quit" wait_for "/quit" 5
    check "item 22 ($size): ... and /retry" has "/retry"
    check "item 22 ($size): ... and /help" has "/help"
    keys C-u; keys -l "/s"; keys Tab
    check "item 22 ($size): a shorter list replaces it" wait_gone "/quit" 5
    keys C-u; keys C-d; wait_for "EXIT=0" 5
done

# --- item 27: /stats before any turn ------------------------------------------------------
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
type_line "/stats"
check "item 27: /stats before a turn says there is none yet" wait_for "none yet" 5
check "item 27: no Vulkan line when the tier is off" hasnt "Vulkan"
check "item 27: memory is measured, not 0.00 GB" sh -c "$T capture-pane -p | grep 'memory ' | grep -qv ' 0.00 GB'"
check "item 27: no row reading only 'thinking'" sh -c "! $T capture-pane -p | grep -qx ' *thinking *'"
keys C-l; type_line "hello"
wait_for "answer to hello" 10
type_line "/stats"
check "item 27: after a turn /stats tells the turn" wait_for "tok/s decode" 5
keys C-d; wait_for "EXIT=0" 5

# --- item 24: the context figure follows /clear, /undo, /load and stays at 80 columns -----------
ctx() { screen | grep -o 'ctx [0-9]*/4096' | head -n 1 | sed 's/ctx \([0-9]*\).*/\1/'; }
ctx_is() { _c=$(ctx); [ -n "$_c" ] && [ "$_c" "$1" "$2" ]; }
wait_ctx() { wait_until "a context figure $1 $2" 5 ctx_is "$1" "$2"; } # wait_ctx TEST VALUE (-eq, -gt)
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
type_line "a first message to count"
wait_for "answer to a first" 10
check "item 24: a turn fills the context" wait_ctx -gt 0
type_line "/save $K3_TMP/s24.jsonl"
wait_for "saved 2" 5
keys F3
wait_for "mouse off" 5
keys PPage
check "item 24: at 80 columns, mouse off and scrolled, the context is still in the bar" wait_for "ctx " 5
keys C-End; keys F3
type_line "/clear"
check "item 24: /clear empties it" wait_ctx -eq 0
type_line "/load $K3_TMP/s24.jsonl"
check "item 24: /load counts the loaded turns" wait_ctx -gt 0
type_line "/undo"
check "item 24: /undo takes them back out" wait_ctx -eq 0
keys C-d; wait_for "EXIT=0" 5

# --- item 15: loaded and re-sent turns keep their figures and markers ------------------------
m15="$K3_TMP/m15.txt"
printf 'delay 0\nthink quick thought\nresponse short answer\n---\ndelay 40\nthink a long one\nresponse %s\n---\ndelay 0\nthink third\nresponse third answer\n' \
    "$(/usr/bin/python3 -c 'print("slow " * 300)')" >"$m15"
run_mock 100 40 "$m15"
wait_for "mock · 3 layers" 10
type_line "one"
wait_for "short answer" 10
type_line "two"
wait_for "slow slow" 10
keys C-c
check "item 15: the cut-off answer is marked" wait_for "[stopped]" 10
type_line "three"
wait_for "third answer" 10
type_line "/save $K3_TMP/s15.jsonl"
wait_for "saved 6 messages" 5
keys C-l; type_line "/clear"
wait_for "type a message and press Enter" 15
type_line "/load $K3_TMP/s15.jsonl"
wait_for "loaded 6 messages" 5
check "item 15: loaded turns keep their reasoning figures" sh -c "! $T capture-pane -p | grep -q '0.0 s · 0 tokens'"
check "item 15: ... three fold lines with a token count" sh -c "[ \$($T capture-pane -p | grep -c 'thought for .* · [1-9][0-9]* tokens') -eq 3 ]"
check "item 15: the loaded cut-off turn keeps [stopped]" has "[stopped]"
type_line "/forget"
wait_for "dropped the oldest exchange" 5
check "item 15: after /forget the rest keep their figures" sh -c "[ \$($T capture-pane -p | grep -c 'thought for .* · [1-9][0-9]* tokens') -eq 2 ]"
check "item 15: ... and the marker" has "[stopped]"
keys C-d; wait_for "EXIT=0" 5

# --- item 13: Backspace, Delete and the arrows take a grapheme cluster at a time --------------
m13="$K3_TMP/m13.txt"
printf 'delay 0\nresponse got [{user}]\n' >"$m13"
fam=$(printf 'A\360\237\221\251\342\200\215\360\237\221\251\342\200\215\360\237\221\247B')
for term in xterm-256color screen-256color; do
    tui_start 80 24 K3_MOCK="$m13" -- "TERM=$term $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    wait_for "mock · 3 layers" 10
    keys -l "$fam"; keys BSpace; keys BSpace; keys -l "C"; keys Enter
    check "item 13 ($term): two Backspaces take B and the whole ZWJ family" wait_for "got [AC]" 10
    keys -l "x"; keys -l "$(printf '\360\237\207\253\360\237\207\267e\314\201')"; keys -l "y"
    keys Left; keys Left; keys DC; keys Left; keys DC; keys BSpace; keys Enter
    check "item 13 ($term): Left steps over e+accent and a flag; Delete and Backspace take them whole" wait_for "got [y]" 10
    keys C-d; wait_for "EXIT=0" 5
done
# line mode (libedit on the terminal, stderr the terminal too): the same keys took one code point
# each ('A' + the family less its girl was sent, Left stopped inside the family and an X typed
# there split it, Backspace after e + accent left the e)
tui_start 80 24 K3_MOCK="$m13" -- "$K3CHAT --plain /no/model; echo EXIT=\$?; sleep 60"
wait_until "the line-mode prompt" 10 sh -c "$T capture-pane -p | grep -qx '>'"
keys -l "$fam"; keys BSpace; keys BSpace; keys -l "C"; keys Enter
check "item 13 (line mode): two Backspaces take B and the whole ZWJ family" wait_for "got [AC]" 10
keys -l "$fam"; keys Left; keys Left; keys -l "X"; keys Enter
check "... two Lefts step over B and the family: X goes before it, whole" wait_for "got [AX$(printf '\360\237\221\251\342\200\215\360\237\221\251\342\200\215\360\237\221\247')B]" 10
keys -l "x"; keys -l "$(printf '\360\237\207\253\360\237\207\267e\314\201')"; keys -l "y"
keys Left; keys Left; keys DC; keys Left; keys DC; keys BSpace; keys Enter
check "... Left steps over e+accent and a flag; Delete and Backspace take them whole" wait_for "got [y]" 10
keys C-a; keys C-d; keys C-d
check "... Ctrl-D at an empty line ends it" wait_for "EXIT=0" 5

# --- item 21: an abandoned Ctrl-R search leaves the line as it was, its label next to the line --
for size in 80x24 40x12; do
    run_mock "${size%x*}" "${size#*x}" "$m31"
    wait_for "mock · 3 layers" 10
    type_line "alpha one"; wait_for "answer to alpha one" 10
    type_line "beta two"; wait_for "answer to beta two" 10
    keys -l "my draft"; keys C-r; keys -l "alp"
    # the search's own rows ("› alpha one" is in the conversation already): its label for the
    # whole pattern, the match on the input line
    search_shows() { screen | tail -n 3 | head -n 2 | grep -q "history search: $1" && [ "$(screen | tail -n 1)" = "$2" ]; }
    check "item 21 ($size): Ctrl-R finds the older message" \
        wait_until "the search for 'alp' to show '› alpha one'" 5 search_shows alp "› alpha one"
    check "item 21 ($size): its label is right above the input line" sh -c "$T capture-pane -p | tail -n 3 | head -n 2 | grep -q 'history search: alp'"
    keys C-c
    check "item 21 ($size): Ctrl-C gives the draft back" wait_for "› my draft" 5
    check "item 21 ($size): ... and no search label or text is left" sh -c "! $T capture-pane -p | grep -q -e 'search' -e 'alp\$' -e 'bck:'"
    # Ctrl-R past the oldest match keeps it and says there is no older one (the label said
    # "no match" over the match shown)
    label_shows() { screen | tail -n 3 | head -n 2 | grep -q "$1" && [ "$(screen | tail -n 1)" = "$2" ]; }
    # (the history file is the runs' before, with up to three "alpha one": Ctrl-R past them all)
    keys C-r; keys -l "alp"; wait_for "› alpha one" 5; keys C-r C-r C-r C-r C-r
    check "item 21 ($size): Ctrl-R past the oldest match says no older match" \
        wait_until "the label 'no older match: alp' over '› alpha one'" 5 label_shows "no older match: alp" "› alpha one"
    keys Escape
    wait_for "› my draft" 5
    keys C-r; keys -l "bet"; wait_for "› beta two" 5; keys Escape
    check "item 21 ($size): Esc gives the draft back too" wait_for "› my draft" 5
    keys C-r; keys -l "zzz"
    check "item 21 ($size): a pattern with no match says so" wait_for "no match: zzz" 5
    keys C-g
    check "item 21 ($size): Ctrl-G cancels" wait_gone "no match" 5
    check "item 21 ($size): ... to the draft" has "› my draft"
    keys C-u; keys C-r; keys -l "alp"; wait_for "› alpha one" 5; keys Enter
    check "item 21 ($size): Enter sends the match" wait_for "answer to alpha one" 5
    # the earlier answer's text is on the screen already: the new one may still stream, and a
    # quit then asks first (issue 36 item 12); the second Ctrl-D stops it and quits
    quit_or_asked() { has "EXIT=0" || has "an answer is still coming"; }
    keys C-d; wait_until "the chat to quit or ask" 5 quit_or_asked
    has "EXIT=0" || keys C-d
    wait_for "EXIT=0" 5
done
# Ctrl-Z and Ctrl-L during the search: the search goes on after them (Ctrl-Z ended it keeping the
# match, and the draft it gives back was lost). k3chat runs without job control here: the stop
# does not happen, the suspend's way out and back does.
run_mock 80 24 "$m31"
wait_for "mock · 3 layers" 10
type_line "alpha one"; wait_for "answer to alpha one" 10
keys -l "my draft"; keys C-r; keys -l "alp"
wait_for "history search: alp" 5
keys C-z; keys C-l
keys -l "ha"
check "item 21: after Ctrl-Z and Ctrl-L the search goes on" wait_for "history search: alpha " 5
keys C-c
check "... and Ctrl-C gives the draft back" wait_until "the draft on the input line" 5 input_is "my draft"
keys C-u C-d; wait_for "EXIT=0" 5

# --- item 23: 8-color terminals: pane borders are not black, the light theme has no yellow text ---
m23="$K3_TMP/m23.txt"
printf 'delay 100\nthink %s\nresponse %s\n' "$(/usr/bin/python3 -c 'print("t " * 100)')" \
    "$(/usr/bin/python3 -c 'print("ok " * 100)')" >"$m23"
esc=$(printf '\033')
for term in xterm linux; do
    if ! infocmp "$term" >/dev/null 2>&1; then echo "SKIP: item 23 on $term (no terminfo entry)"; continue; fi
    for theme in dark light; do
        tui_start 80 24 K3_MOCK="$m23" -- "TERM=$term $K3CHAT --theme $theme /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
        wait_for "mock · 3 layers" 10
        type_line "hi"
        wait_for "Ctrl-C stops" 10 # the title line (its rule may be ACS 'q's on these terminals)
        $T capture-pane -p -e >"$K3_TMP/sgr.txt"
        check "item 23 ($term, $theme): the pane titles were captured while streaming" grep -a -q "Ctrl-C stops" "$K3_TMP/sgr.txt"
        check "item 23 ($term, $theme): the pane titles' borders are not black" \
            sh -c "! grep -a -e 'thinking' -e 'response' '$K3_TMP/sgr.txt' | grep -q -e '$esc\\[30m' -e '$esc\\[30;'"
        [ $theme = light ] && check "item 23 ($term, light): no yellow text" \
            sh -c "! grep -a -q -e '$esc\\[33m' -e '$esc\\[33;' '$K3_TMP/sgr.txt'"
        keys C-c; wait_gone "Ctrl-C stops" 10
        keys C-d; wait_for "EXIT=0" 5
    done
done

# --- items 15 and 24 on the real engine (k3-nano): markers survive /load, the figure follows /clear
nano="$K3_SRC/models/k3-nano"
if [ -f "$nano/model.safetensors" ]; then
    nctx() { screen | grep -o 'ctx [0-9]*/' | head -n 1 | tr -dc 0-9; }
    joined_has() { screen | tr '\n' ' ' | tr -s ' ' | grep -qF -- "$1"; }
    nctx_is() { _c=$(nctx); [ -n "$_c" ] && [ "$_c" "$1" "$2" ]; } # nctx_is TEST VALUE (-eq, -lt)
    tui_start 100 30 -- "$K3CHAT --temp 0 --max-tokens 6 $nano 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    wait_for "k3-nano" 30
    type_line "What is 27 + 58?"
    wait_for "length limit reached" 30
    wait_input_empty 5
    full=$(settled 5 nctx)
    type_line "/save $K3_TMP/n15.jsonl"
    wait_for "saved 2 messages" 5
    type_line "/clear"
    wait_for "type a message and press Enter" 15
    check "item 24 (k3-nano): /clear lowers the context figure (below $full)" \
        wait_until "a context figure below $full" 5 nctx_is -lt "$full"
    type_line "/load $K3_TMP/n15.jsonl"
    wait_for "loaded 2 messages" 5
    check "item 15 (k3-nano): the loaded turn keeps its length marker" has "[length limit reached]"
    check "item 15 (k3-nano): ... and its reasoning figures" sh -c "$T capture-pane -p | grep -q 'thought for .* · 6 tokens'"
    check "item 24 (k3-nano): /load brings the figure back ($full)" wait_until "ctx $full/" 5 nctx_is -eq "$full"
    # item 6 on the engine: /retry on a transcript that ends with the user's message
    printf '{"role":"user","content":"What is 2+2?"}\n' >"$K3_TMP/u6.jsonl"
    keys C-l; type_line "/load $K3_TMP/u6.jsonl"
    wait_for "loaded 1 message" 5
    type_line "/retry"
    wait_gone "Ctrl-C stops" 10
    check "item 6 (k3-nano): /retry's error on a conversation without an answer is shown" \
        wait_for "/retry: there is no answer to regenerate" 5
    keys C-d; wait_for "EXIT=0" 5
    # item 24: a context of 120 tokens that the first answer fills: the bar says "ctx full", and
    # it means it (the next message is refused); /clear makes room again
    tui_start 120 30 K3_MAXT=120 -- "$K3CHAT --temp 0 $nano 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
    # every frame from the first shows the empty conversation's figure, never a 0 before it
    # (issue 42): the figures read while the bar appears and until two reads agree
    : >"$K3_TMP/ctx-seen"
    nctx_rec() { _c=$(nctx); [ -n "$_c" ] && echo "$_c" >>"$K3_TMP/ctx-seen"; echo "$_c"; }
    ctx_seen() { [ -n "$(nctx_rec)" ]; }
    wait_until "the context figure in the bar" 30 ctx_seen
    ctx0=$(settled 5 nctx_rec)
    check "item 24 (k3-nano, K3_MAXT=120): at start the bar counts the empty conversation's prompt (ctx $ctx0/120)" \
        sh -c "[ '$ctx0' -gt 0 ] && [ '$ctx0' -lt 120 ]"
    check "item 24 (k3-nano, K3_MAXT=120): no frame showed another figure first ($(sort -u "$K3_TMP/ctx-seen" | tr '\n' ' '))" \
        sh -c "[ \"\$(sort -u '$K3_TMP/ctx-seen')\" = '$ctx0' ]"
    type_line "What is 27 + 58?"
    check "item 24 (k3-nano, K3_MAXT=120): an answer that fills the context says so, and what makes room" \
        wait_for "[context full: the answer was cut off; /forget or /clear makes room]" 60
    check "item 24 (k3-nano, K3_MAXT=120): ... not the --max-tokens marker" hasnt "length limit reached"
    check "item 24 (k3-nano, K3_MAXT=120): an answer that fills the context: the bar says ctx full 120/120" \
        wait_for "ctx full 120/120" 10
    type_line "hi"
    check "item 24 (k3-nano, K3_MAXT=120): ... and the next message does not fit" wait_for "context full: the conversation needs" 10
    # a /retry that no longer fits (a system prompt came since): the answer it would replace stays,
    # on the screen with its marker as in the conversation
    keys C-u; type_line "/system Answer every question with care, in full sentences, and check the sum twice."
    wait_for "system prompt set" 5
    type_line "/retry"
    check "item 24 (k3-nano, K3_MAXT=120): a /retry refused for the context: the previous answer stays" \
        wait_until "the notice" 10 joined_has "The previous answer stays."
    check "item 24 (k3-nano, K3_MAXT=120): ... on the screen, with its marker" \
        has "[context full: the answer was cut off; /forget or /clear makes room]"
    check "item 24 (k3-nano, K3_MAXT=120): ... and the question too" has "What is 27 + 58?"
    type_line "/system --clear"
    type_line "/clear"
    check "item 24 (k3-nano, K3_MAXT=120): /clear: the figure of the empty conversation again, as at start" \
        wait_for "ctx $ctx0/120" 5
    keys C-d; wait_for "EXIT=0" 5
else
    echo "SKIP: items 15/24 on k3-nano, ctx full included (models/k3-nano/model.safetensors is not there)"
fi

check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
