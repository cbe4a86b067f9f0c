#!/bin/sh
# t-valgrind.sh: memcheck on a full tiny-model conversation in plain mode (three turns, a live
# /experts change to the streaming tier, a /retry, autosave on): no memory errors and no
# definite leaks. CPU path only (K3_VK=0: a software Vulkan driver under valgrind is slow and
# not ours to check). Skipped when valgrind is absent.
# run-once
. "$K3_SRC/tests/count.sh"
set -u
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind is not installed"; exit 0; }
M="$K3_TMP/m"
if ! "$K3_BUILD/k3-mkmodel" --preset tiny --seed 2 "$M" >/dev/null 2>&1; then
    echo "FAIL: k3-mkmodel --preset tiny"
    exit 0
fi
printf 'hi\n/experts 0\nhow are you\n/retry\nbye\n' >"$K3_TMP/in"
K3_VK=0 XDG_DATA_HOME="$K3_TMP/data" valgrind -q --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite --log-file="$K3_TMP/vg" \
    "$K3_BUILD/k3chat" "$M" --plain --temp 0 --max-tokens 8 --think off <"$K3_TMP/in" \
    >"$K3_TMP/out" 2>"$K3_TMP/err"
rc=$?
t "memcheck: exit 0, no errors, no definite leaks (got $rc)" '[ $rc -eq 0 ] && [ ! -s "$K3_TMP/vg" ]'
[ -s "$K3_TMP/vg" ] && head -n 40 "$K3_TMP/vg" | sed 's/^/    | /'
f=$(ls "$K3_TMP"/data/k3chat/*.jsonl 2>/dev/null | head -n 1)
# /retry keeps the answer it replaced, marked abandoned (k3chat(5))
t "the three turns were answered (autosave holds 3 assistant messages and the one /retry replaced)" \
    '[ -n "$f" ] && [ "$(grep "\"role\":\"assistant\"" "$f" | grep -vc "\"abandoned\":1")" -eq 3 ] &&
     [ "$(grep "\"role\":\"assistant\"" "$f" | grep -c "\"abandoned\":1")" -eq 1 ]'
