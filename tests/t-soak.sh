#!/bin/sh
# t-soak.sh: a long plain-mode session on the tiny model: hundreds of short greedy turns, the
# context driven to capacity (small K3_MAXT), /clear, /retry, /undo, /forget and live /experts
# changes in between. Checks: memory stays flat (VmRSS sampled from /proc while it runs: the
# late samples within a margin of the early ones after warm-up), and answers reproduce (each
# round starts with /clear and the same probe; every round's saved probe answer is the same).
# run-once
set -u
k="$K3_BUILD/k3chat"
M="$K3_TMP/m"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
if ! "$K3_BUILD/k3-mkmodel" --preset tiny --seed 11 "$M" >/dev/null 2>&1; then
    echo "FAIL: k3-mkmodel --preset tiny"
    exit 0
fi
per=10
mkdir "$K3_TMP/s"
mkfifo "$K3_TMP/in"
K3_VK=0 K3_MAXT=512 XDG_DATA_HOME="$K3_TMP/data" \
    "$k" "$M" --plain --temp 0 --max-tokens 6 --think off <"$K3_TMP/in" >"$K3_TMP/out" 2>"$K3_TMP/err" &
pid=$!
: >"$K3_TMP/rss"
(while kill -0 $pid 2>/dev/null; do
    awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null >>"$K3_TMP/rss"
    sleep 0.2
done) &
exec 3>"$K3_TMP/in"
# rounds until ~45 s have passed (each round waits for its last /save: input stays in step)
start=$(date +%s) r=0 turns=0
while :; do
    {
        echo /clear
        echo "probe"
        echo "/save $K3_TMP/s/$r.jsonl"
        echo "/experts $((r % 2)).0$((r % 3))"
        j=0
        while [ $j -lt $per ]; do
            echo "message $r $j"
            case $j in 3) echo /retry ;; 5) echo /undo ;; 7) echo /forget ;; esac
            j=$((j + 1))
        done
        echo "/save $K3_TMP/s/$r-end.jsonl"
    } >&3
    i=0
    while [ ! -e "$K3_TMP/s/$r-end.jsonl" ] && [ $i -lt 1200 ] && kill -0 $pid 2>/dev/null; do
        sleep 0.05; i=$((i + 1))
    done
    turns=$((turns + per + 2))
    r=$((r + 1))
    [ $(($(date +%s) - start)) -ge 45 ] && break
    kill -0 $pid 2>/dev/null || break
done
rounds=$r
exec 3>&-
wait $pid
rc=$?
t "$turns turns ($rounds rounds) end with exit 0 (got $rc)" '[ $rc -eq 0 ] && [ $rounds -ge 2 ]'
t "the context filled up at least once" 'grep -q "context" "$K3_TMP/err"'
t "no sanitizer or crash report" '! grep -qE "Sanitizer|runtime error|Segmentation" "$K3_TMP/err"'
n=$(grep -c . "$K3_TMP/rss")
# early: the largest sample of the second fifth (after warm-up); late: the largest of the last fifth
early=$(awk -v n="$n" 'NR > n/5 && NR <= 2*n/5 && $1 > m {m = $1} END {print m + 0}' "$K3_TMP/rss")
late=$(awk -v n="$n" 'NR > 4*n/5 && $1 > m {m = $1} END {print m + 0}' "$K3_TMP/rss")
t "memory stays flat: VmRSS late ${late} kB vs early ${early} kB (+5% +2 MB), $n samples" \
    '[ "$n" -ge 10 ] && [ "$late" -le $((early + early / 20 + 2048)) ]'
probe() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
m = [r for r in rows if r.get("role") in ("user", "assistant")]
assert m[0]["content"] == "probe" and m[1]["role"] == "assistant", m
print(json.dumps([m[1].get("token_ids"), m[1]["content"]]))
' "$1"; }
probe "$K3_TMP/s/0.jsonl" >"$K3_TMP/p0" 2>/dev/null
same=0
r=1
while [ $r -lt $rounds ]; do
    probe "$K3_TMP/s/$r.jsonl" 2>/dev/null | cmp -s - "$K3_TMP/p0" && same=$((same + 1))
    r=$((r + 1))
done
t "the probe after /clear answers the same in all $rounds rounds ($((same + 1)) same)" \
    '[ -s "$K3_TMP/p0" ] && [ $same -eq $((rounds - 1)) ]'
