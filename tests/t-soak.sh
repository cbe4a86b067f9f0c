#!/bin/sh
# t-soak.sh: a long plain-mode session: hundreds of short sampled turns on a small generated
# model, the context driven to capacity in every round (small K3_MAXT), /clear, /retry, /undo,
# /forget and live /experts changes in between. Checks: at least 300 turns are answered
# (/retry regenerations count; turns refused because the context is full do not), memory stays
# flat (VmRSS sampled from /proc while it runs: the late samples within a margin of the early
# ones after warm-up), and the answers reproduce: each round saves its conversation up to the
# first /forget (probe, /retry, /undo, /experts change, near capacity), the next round /replays
# that transcript in the same session and the last line replays round 0's, and every replayed
# turn must give the same tokens again. Sampling (temperature 1, a fixed seed, each turn's seed
# recorded) makes that check sensitive: greedy answers of a random model hardly depend on the
# conversation, so equal greedy answers would prove little.
# The whole input is written first and read from a file: the session runs at engine speed, and
# the turn count is fixed by the script, not by how fast the machine is.
# run-once
# run-alone
. "$K3_SRC/tests/count.sh"
set -u
k="$K3_BUILD/k3chat"
M="$K3_TMP/m"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
# The tiny preset cut down to what a long session exercises, in the release format: layer 0
# KDA, layer 1 MLA, both MoE with 4 routed experts streamed from disk (2 active) + 1 shared.
if ! "$K3_BUILD/k3-mkmodel" --preset tiny --seed 11 --layers 2 --dense 0 --experts 4 --active 2 \
    --shared 1 "$M" >/dev/null 2>&1; then
    echo "FAIL: k3-mkmodel --preset tiny --layers 2"
    exit 0
fi
rounds=40
min_turns=300
# Expert-cache budgets in GB: 1, 2, 3 and 4 (all) of the 4 experts per MoE layer fit, so each
# change evicts or adds experts between turns (slots = budget / (2 layers x ~10 KB)).
budget() {
    case $(($1 % 4)) in 0) echo 0 ;; 1) echo 0.00004 ;; 2) echo 0.00006 ;; 3) echo 1 ;; esac
}
# One round, 12 turns, with K3_MAXT=384 (the system prompt and the probe take ~115 tokens, an
# exchange ~64): messages 1 to 5 fill the context to ~370 tokens; the conversation so far is
# saved (and the previous round's replayed); after /forget drops the oldest exchange the next
# turn prefills the whole conversation again (the recurrent KDA state cannot drop a prefix)
# and its /retry regenerates at capacity; message 6 is refused (context full) until two more
# /forget make room.
mkdir "$K3_TMP/s"
r=0
while [ $r -lt $rounds ]; do
    echo /clear
    echo probe
    echo "/experts $(budget $r)"
    echo "message 1"
    echo "message 2"
    echo /retry
    echo "message 3"
    echo /undo
    echo "/experts $(budget $((r + 1)))"
    echo "message 3"
    echo "message 4"
    echo "message 5"
    echo "/save $K3_TMP/s/$r.jsonl"
    [ $r -gt 0 ] && echo "/replay $K3_TMP/s/$((r - 1)).jsonl"
    echo /forget
    echo "message 5"
    echo /retry
    echo "message 6"
    echo /forget
    echo /forget
    echo "message 6"
    echo "message 7"
    r=$((r + 1))
done >"$K3_TMP/in"
echo "/replay $K3_TMP/s/0.jsonl" >>"$K3_TMP/in"
sent=$(($(grep -vc '^/' "$K3_TMP/in") + $(grep -c '^/retry$' "$K3_TMP/in")))

# One OpenMP thread: the model is too small for a second one to pay, and a loaded machine
# cannot stall it at a barrier (OMP_WAIT_POLICY=passive for the same reason). --top-p is
# given as well as --temp: the first message is read while the model loads, and without both
# it would sample with the built-in top-p instead of generation_config.json's.
t0=$(date +%s)
K3_VK=0 K3_MAXT=384 K3_THREADS=1 OMP_WAIT_POLICY=passive XDG_DATA_HOME="$K3_TMP/data" \
    "$k" "$M" --plain --temp 1 --top-p 1 --seed 7 --max-tokens 3 --think off \
    <"$K3_TMP/in" >"$K3_TMP/out" 2>"$K3_TMP/err" &
pid=$!
: >"$K3_TMP/rss"
while kill -0 $pid 2>/dev/null; do
    awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null >>"$K3_TMP/rss"
    sleep 0.1
done
wait $pid
rc=$?
secs=$(($(date +%s) - t0))
full=$(grep -ac '^k3chat: context full' "$K3_TMP/err")
turns=$((sent - full))
# every stderr line is a notice the script asks for; anything else (a failed turn or command,
# a replayed turn that differs, a sanitizer report) is reported here
grep -avE '^k3chat: (loading |loaded |memory fit: |the answer was cut off at the --max-tokens limit |context full: |saved [0-9]+ messages( and [0-9]+ abandoned)? to |dropped the (oldest|last) exchange |expert-cache budget |replaying .* \(Ctrl-C stops\)$|replay turn [0-9]+: same answer |replay of .*: 0 turns differ$)' \
    "$K3_TMP/err" >"$K3_TMP/other"
# a message refused at capacity got no answer: line mode's exit status is 1 then (as --prompt's)
want=0
[ "$full" -gt 0 ] && want=1
t "soak: $turns turns ($rounds rounds, $full refused at capacity) in ${secs} s end with exit $want (got $rc)" \
    '[ $rc -eq $want ] && [ $turns -ge $min_turns ]'
t "no error, differing replay, sanitizer or crash report on stderr ($(grep -ac . "$K3_TMP/other") other lines)" \
    '[ ! -s "$K3_TMP/other" ]'
sed "s/^/    /" "$K3_TMP/other" | head -n 3
t "the context filled up in every round ($full refusals)" '[ $full -ge $rounds ]'
n=$(grep -c . "$K3_TMP/rss")
# early: the largest sample of the second fifth (after warm-up); late: the largest of the last fifth
early=$(awk -v n="$n" 'NR > n/5 && NR <= 2*n/5 && $1 > m {m = $1} END {print m + 0}' "$K3_TMP/rss")
late=$(awk -v n="$n" 'NR > 4*n/5 && $1 > m {m = $1} END {print m + 0}' "$K3_TMP/rss")
t "memory stays flat: VmRSS late ${late} kB vs early ${early} kB (+5% +2 MB), $n samples" \
    '[ "$n" -ge 10 ] && [ "$late" -le $((early + early / 20 + 2048)) ]'
# the replays: every one ran and matched, turn by turn, all the answers of the files replayed
replays=$(grep -c '^/replay ' "$K3_TMP/in")
want=0
for f in $(sed -n 's|^/replay ||p' "$K3_TMP/in"); do
    # the answers /retry replaced stay in the file, "abandoned", and are not replayed
    want=$((want + $(grep -a '^{"role":"assistant"' "$f" | grep -vc '"abandoned"')))
done
ok=$(grep -ac '^k3chat: replay of .*: 0 turns differ$' "$K3_TMP/err")
same=$(grep -ac '^k3chat: replay turn [0-9]*: same answer ' "$K3_TMP/err")
t "every answer replays the same later in the session: $same of $want turns, $ok of $replays replays" \
    '[ $ok -eq $replays ] && [ $same -eq $want ] && [ $want -ge $((5 * replays)) ]'
