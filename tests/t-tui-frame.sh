#!/bin/sh
# t-tui-frame.sh: the streaming frame loop on the scripted mock engine in tmux. A Markdown answer
# that scrolls the response pane, frame by frame (rows moved by a terminal scroll, only the new
# ones drawn), shows what a fresh redraw (Ctrl-L) of the same moment shows, cell by cell with
# colours and attributes; the think pane's timer moves between tokens while the model reasons and
# stands still once the answer has started (no redraw of it for nothing).
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

m="$K3_TMP/mock.txt"
{
    echo "delay 5"
    echo "hold 60000"
    echo "response # Frame test"
    echo "response"
    echo "response Some **strong** text, \`code\` and a [link](https://example.com/f) first."
    echo "response"
    i=1
    while [ $i -le 30 ]; do
        echo "response - item $i with *emphasis* and \`code $i\`"
        i=$((i + 1))
    done
    echo "response"
    echo "response | a | b | 漢字 |"
    echo "response |---|---|---|"
    echo "response | 1 | 2 | 三 |"
    echo "response"
    echo "response \`\`\`c"
    echo "response int x = 1;"
    echo "response \`\`\`"
    echo "response"
    echo "response the end of the answer"
} >"$m"

# The answer streams fast and scrolls the response pane (8 rows) frame by frame; then the turn
# holds, open, with its panes: the screen as streamed is compared with a fresh redraw (Ctrl-L),
# colours and attributes included (capture-pane -e, compared cell by cell by cells.py).
tui_start 70 24 K3_MOCK="$m" -- "$K3CHAT /no/model --think off 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "scroll please"
check "the answer streams into the response pane" wait_for "item 1 with" 10
check "the whole answer arrives, the turn stays open" wait_for "the end of the answer" 20
check "the pane scrolled: the heading went off its top" hasnt "Frame test"
check "the response pane is still there (the turn holds)" has "── response"
# (the input row is left out: its "› " ends in a space that ncurses may write as a bold space
# or leave to a clear to the end of the line, which look the same). Each capture is taken once
# two looks 0.25 s apart agree (fixed sleeps of 0.5 and 1 s could look at a busy machine's
# frame half drawn)
capt() { $T capture-pane -p -e | sed '$d'; }
settled 10 capt >"$K3_TMP/streamed.txt"
keys C-l
sleep 0.3
settled 10 capt >"$K3_TMP/redrawn.txt"
# cells.py A B: the two captures cell by cell, SGR state carried as tmux writes it (across
# lines): each character with its colours and attributes; a blank cell's foreground, bold and
# the like are left out (they do not show; which of them a cleared cell gets varies with how
# the terminal cleared it), its background and reverse video are kept
cat >"$K3_TMP/cells.py" <<'PY'
import re, sys
def cells(path):
    st, out = {}, []
    for y, line in enumerate(open(path, encoding="utf-8").read().split("\n")):
        for m in re.finditer(r"\x1b\[([0-9;]*)m|(.)", line):
            if m.group(2) is None:
                p = [int(x) if x else 0 for x in m.group(1).split(";")]
                i = 0
                while i < len(p):
                    c = p[i]
                    if c == 0: st = {}
                    elif c in (38, 48):
                        k = "fg" if c == 38 else "bg"
                        n = 3 if p[i + 1:i + 2] == [5] else 5
                        st[k] = tuple(p[i + 1:i + n]); i += n - 1
                    elif c == 39: st.pop("fg", None)
                    elif c == 49: st.pop("bg", None)
                    elif 30 <= c <= 37 or 90 <= c <= 97: st["fg"] = (c,)
                    elif 40 <= c <= 47 or 100 <= c <= 107: st["bg"] = (c,)
                    elif c == 22: st.pop(1, None); st.pop(2, None)
                    elif 23 <= c <= 29: st.pop(c - 20, None)
                    else: st[c] = 1
                    i += 1
                continue
            a = dict(st)
            if m.group(2) == " ":
                a = {k: v for k, v in a.items() if k in ("bg", 7)}
            out.append((y, m.group(2), tuple(sorted(a.items(), key=str))))
    return out
a, b = cells(sys.argv[1]), cells(sys.argv[2])
bad = [(x, z) for x, z in zip(a, b) if x != z]
for x, z in bad[:5]:
    print("streamed", x, "\n redrawn", z)
sys.exit(1 if bad or len(a) != len(b) else 0)
PY
same() {
    cmp -s "$K3_TMP/streamed.txt" "$K3_TMP/redrawn.txt" && return 0
    /usr/bin/python3 "$K3_TMP/cells.py" "$K3_TMP/streamed.txt" "$K3_TMP/redrawn.txt"
}
check "the scrolled pane equals a fresh redraw, cell by cell with colours and attributes" same

# the think timer: moves while no token comes (3 s apart), stands still after the answer starts
printf 'delay 3000\nthink abcdef\nresponse ghijklmno\n' >"$m"
tui_start 70 24 K3_MOCK="$m" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "think slowly"
think_title() { screen | grep -o -- "thinking · [0-9.]* s · [0-9]* tokens*" | head -n 1; }
check "the first reasoning token arrives" wait_for "thinking · " 10
wait_for "· 1 token " 10 # the singular since #36 item 23
a=$(think_title)
# looked at until it moves, still at one token (the next comes 3 s after the first): one look a
# second later missed a tick on a busy machine, and passed on the second token's count alone
timer_moved() { b=$(think_title); [ -n "$b" ] && [ "$b" != "$a" ] && case "$b" in *"· 1 token") ;; *) false ;; esac; }
b=""
wait_until "the think timer to move at 1 token (from '$a')" 5 timer_moved &&
    pass "the think timer moves between tokens ('$a', then '$b')"
check "the answer starts" wait_for "ghi" 10
a=$(think_title)
sleep 0.7
b=$(think_title)
check "the think timer stands still once the answer started ('$a', then '$b')" \
    sh -c "[ -n '$a' ] && [ '$a' = '$b' ]"
finish
