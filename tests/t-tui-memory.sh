#!/bin/sh
# t-tui-memory.sh: the full-screen chat's memory follows the transcript's text, not a per-message
# overhead (issue 36 item 18: a 15 MB, 400,000-message transcript took 1.5 GB; line mode 185 MB).
# A generated transcript of 100,000 short messages is loaded on the mock in tmux, scrolled to the
# top and back (every message's lines counted), and the process's peak RSS (VmHWM) must stay
# under 20 times the file's size plus a fixed 64 MB (not under a sanitizer, whose shadow memory and
# redzones grow with the allocation count), and within 1.5 times line mode's plus 32 MB.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

big="$K3_TMP/big.jsonl"
/usr/bin/python3 - "$big" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(50000):
        f.write(json.dumps({"role": "user", "content": "question %d, *short*" % i}) + "\n")
        f.write(json.dumps({"role": "assistant", "content": "answer %d with `code`" % i}) + "\n")
EOF
size_kb=$(($(wc -c <"$big") / 1024))
printf 'response Hello, {user}!\n' >"$K3_TMP/mock.txt"

# line mode: the conversation alone
line_kb=$(K3_MOCK="$K3_TMP/mock.txt" /usr/bin/python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$K3CHAT" /no/model --load "$big")

tui_start 100 30 K3_MOCK="$K3_TMP/mock.txt" -- "$K3CHAT /no/model --load $big 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "18: the transcript loads" wait_for "loaded 100000 messages" $((60 * slow))
keys C-Home
check "18: Ctrl-Home shows the first message" wait_for "question 0, *short*" 30
keys C-End
check "18: Ctrl-End the last" wait_for "answer 49999 with code" 30
pid=$(pgrep -P "$($T display -p '#{pane_pid}')" k3chat | head -1)
hwm_kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
keys C-d
wait_for "EXIT=0" 10
echo "# file $size_kb kB, line mode peak $line_kb kB, full-screen peak ${hwm_kb:-?} kB"
if [ "$slow" = 1 ]; then
    check "18: peak RSS under 20x the file + 64 MB ($hwm_kb kB, file $size_kb kB)" \
        test "${hwm_kb:-999999999}" -lt $((20 * size_kb + 65536))
else # AddressSanitizer's shadow, redzones and quarantine scale with the allocation count
    echo "SKIP: 18: the absolute RSS bound under a sanitizer ($hwm_kb kB); the bound against line mode in this tree applies"
fi
check "18: peak RSS within 1.5x line mode's + 32 MB ($hwm_kb kB, line mode $line_kb kB)" \
    test "${hwm_kb:-999999999}" -lt $((line_kb * 3 / 2 + 32768))

finish
