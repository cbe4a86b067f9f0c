#!/bin/sh
# t-engine.sh: the one-shot CLI contract `k3chat MODEL_DIR --ids "..."` on a generated model:
# generated ids on one line of stdout (decimal, single spaces), --max-tokens honoured, greedy
# and seeded sampling reproducible, K3_CHUNK and K3_WINDOW not changing the output, K3_ROUTE=uniform
# a function of its seed alone, a window out of memory at run time halving (K3_TEST_WINDOW_MAX), bad input a clear error.
. "$K3_SRC/tests/lib.sh"
set -u
B=$K3_BUILD
T=$K3_TMP

tiny_model "$T/m" 9
export OMP_NUM_THREADS=1
ids="5 17 300 42 42 7 1000 3 99 12 8 640 2 33 71 250 11 19 23 29 31 37 41 43 47 53 59 61 67 71 73 79 83 89"

out=$("$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>"$T/err"); rc=$?
echo "$out" | grep -Eq '^[0-9]+( [0-9]+){0,5}$'; ok $? "greedy --ids prints up to 6 ids on one line ('$out', rc $rc)"
n=$(echo "$out" | wc -w)
[ "$rc" = 0 ] && [ "$(echo "$out" | wc -l)" = 1 ]; ok $? "exit 0 and exactly one line of output ($n ids)"

# --max-tokens 0 is no limit with --ids too (k3chat(1)): greedy ids up to the full context, the
# 6 above first; it used to print an empty line
out0=$(K3_MAXT=40 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 0 --temp 0 2>"$T/err"); rc=$?
n0=$(echo "$out0" | wc -w)
[ "$rc" = 0 ] && [ -n "$out" ] && case "$out0" in "$out"*) true ;; *) false ;; esac &&
    [ "$n0" = 7 ] && grep -q "the context (K3_MAXT=40) is full" "$T/err"
ok $? "--ids --max-tokens 0 at K3_MAXT=40: 34 prompt ids, then greedy ids to the full context ($n0: '$out0', rc $rc, $(grep -v "memory fit\|load" "$T/err" | head -c 100))"

out1=$(K3_CHUNK=1 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
out5=$(K3_CHUNK=5 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
[ "$out" = "$out1" ] && [ "$out" = "$out5" ]; ok $? "K3_CHUNK=1 and 5 give the same greedy ids"
outw=$(K3_CHUNK=4 K3_WINDOW=9 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
outc=$(K3_CHUNK=4 K3_WINDOW=4 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
[ "$out" = "$outw" ] && [ "$out" = "$outc" ]; ok $? "K3_WINDOW=9 (windows of 9 over chunks of 4) and the per-chunk path give the same greedy ids"
# a window whose buffer cannot be had when the prompt comes halves until it can, and says so
outm=$(K3_CHUNK=4 K3_TEST_WINDOW_MAX=20 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>"$T/err")
[ "$out" = "$outm" ] && grep -qF "prefill window of 34 tokens: out of memory, shrunk to 17" "$T/err" &&
    [ "$(grep -c "shrunk to" "$T/err")" = 1 ]
ok $? "a 34-token window out of memory (K3_TEST_WINDOW_MAX=20) shrinks to 17 once, says so, and gives the same greedy ids ($(grep "shrunk" "$T/err" | head -c 120))"

K3_ROUTE=random "$B/k3chat" "$T/m" --ids "1 2" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -qF "K3_ROUTE: 'random' is not model or uniform" "$T/err"; ok $? "K3_ROUTE=random is rejected naming the variable and the choices"
K3_WINDOW=-1 "$B/k3chat" "$T/m" --ids "1 2" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -qF "K3_WINDOW: '-1' is not an integer in 0..16777216" "$T/err"; ok $? "K3_WINDOW=-1 is rejected naming the variable and the range"
ou1=$(K3_ROUTE=uniform "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
ou2=$(K3_ROUTE=uniform K3_CHUNK=3 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
ou3=$(K3_ROUTE=uniform K3_ROUTE_SEED=2 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
[ -n "$ou1" ] && [ "$ou1" = "$ou2" ] && [ "$ou1" != "$ou3" ] && [ "$ou1" != "$out" ]; ok $? "K3_ROUTE=uniform: the same ids at any chunk, others with another K3_ROUTE_SEED or the model's routing ('$ou1', '$ou3', '$out')"

s1=$("$B/k3chat" "$T/m" --ids "$ids" --max-tokens 8 --temp 0.9 --seed 5 2>/dev/null)
s2=$("$B/k3chat" "$T/m" --ids "$ids" --max-tokens 8 --temp 0.9 --seed 5 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ]; ok $? "--temp 0.9 --seed 5 twice: identical ids ('$s1')"

"$B/k3chat" "$T/m" --ids "1 2 999999" --max-tokens 2 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "999999" "$T/err"; ok $? "an id outside the vocabulary: non-zero exit naming it ($(head -c 120 "$T/err"))"

"$B/k3chat" "$T/m" --ids "1 x 3" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--ids" "$T/err"; ok $? "a malformed --ids is a usage error (exit $rc)"

K3_MAXT=8 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 2 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_MAXT" "$T/err"; ok $? "a prompt over K3_MAXT: clear error ($(head -c 120 "$T/err"))"

K3_CHUNK=0 "$B/k3chat" "$T/m" --ids "1 2" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_CHUNK" "$T/err"; ok $? "K3_CHUNK=0 is rejected naming the variable"

# the kernel knobs: a value that is not an integer in range fails the open (--prompt and --ids),
# naming the variable, the value and the range; before, K3_MV_AHEAD=abc quietly meant 0. So do
# the Vulkan tier's, with K3_VK unset and in a build without the tier (K3_VK_DEVICE=99 used to
# be taken without a word there). Each is said before the model loads (minutes for the release).
for kv in "K3_MV_AHEAD=abc:an integer in 0..64" "K3_PREFETCH=-1:an integer in 0..1048576" \
    "K3_KBLOCK=16k:an integer in 0..1048576" "K3_ROWSPLIT=2:0 or 1" "K3_IDOT=yes:0 or 1" "K3_NOVNNI=z:0 or 1" \
    "K3_PROFILE=yes:0 or 1" "K3_VERBOSE=true:0 or 1" "K3_HUGEPAGES=2:0 or 1" \
    "K3_VK_DEVICE=99:an integer in 0..15" "K3_VK_UP=x:an integer in 0..1000000"; do
    var=${kv%%=*} val=${kv#*=} val=${val%%:*} range=${kv#*:}
    env "$var=$val" "$B/k3chat" "$T/m" --prompt hi --max-tokens 2 >"$T/out" 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -qF "$var: '$val' is not $range" "$T/err" && [ ! -s "$T/out" ] &&
        ! grep -q "k3chat: load" "$T/err"
    ok $? "$var=$val with --prompt: exit $rc before the model loads, '$(head -c 100 "$T/err")'"
done
K3_MV_AHEAD=65 "$B/k3chat" "$T/m" --ids "1 2" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "K3_MV_AHEAD: '65' is not an integer in 0..64" "$T/err"
ok $? "K3_MV_AHEAD=65 with --ids: exit $rc, '$(head -c 100 "$T/err")'"
out2=$(K3_MV_AHEAD=3 K3_ROWSPLIT=1 K3_KBLOCK=0 "$B/k3chat" "$T/m" --ids "$ids" --max-tokens 6 --temp 0 2>/dev/null)
[ "$out2" = "$out" ]; ok $? "K3_MV_AHEAD=3 K3_ROWSPLIT=1 K3_KBLOCK=0 accepted, the same greedy ids"

# validation hooks: shapes of the files and clear errors
K3_BITS=32 K3_MLA_BITS=32 K3_HEAD_BITS=32 K3_LOGITS="$T/lg" K3_TRACE="$T/tr" K3_LAYERS=2 \
    "$B/k3chat" "$T/m" --ids "1 2 3 4 5" --max-tokens 3 --temp 0 >/dev/null 2>"$T/err"; rc=$?
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$T/m/config.json" | head -1)
hid=$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$T/m/config.json" | head -1)
[ "$rc" = 0 ] && [ "$(wc -c <"$T/lg")" = $((7 * vocab * 4)) ] && [ "$(wc -c <"$T/tr")" = $((7 * 2 * hid * 4)) ]
ok $? "K3_LOGITS and K3_TRACE with K3_LAYERS=2: 5 prompt + 2 fed generated positions (vocab $vocab, hidden $hid)"
head -c $((3 * hid * 4)) /dev/zero >"$T/x0"
K3_X0="$T/x0" "$B/k3chat" "$T/m" --ids "1 2 3 4" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_X0" "$T/err"; ok $? "K3_X0 with 3 rows for 4 positions: clear error ($(head -c 100 "$T/err"))"
head -c 10 /dev/zero >"$T/x0"
K3_X0="$T/x0" "$B/k3chat" "$T/m" --ids "1" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_X0" "$T/err"; ok $? "K3_X0 of 10 bytes: clear error ($(head -c 100 "$T/err"))"
K3_X0="$T" "$B/k3chat" "$T/m" --ids "1" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "K3_X0=$T: is a directory" "$T/err"
ok $? "K3_X0 naming a directory: says so (it was read as 9223372036854775807 bytes) ($(tail -n 1 "$T/err" | head -c 100))"
K3_LAYERS=99 "$B/k3chat" "$T/m" --ids "1" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_LAYERS" "$T/err"; ok $? "K3_LAYERS beyond the model: clear error ($(head -c 100 "$T/err"))"

# --prompt: chat encoder + output parser (response on stdout, think on stderr)
p1=$("$B/k3chat" "$T/m" --prompt "Hello, who are you?" --think off --max-tokens 12 --temp 0 2>"$T/err"); rc=$?
p2=$("$B/k3chat" "$T/m" --prompt "Hello, who are you?" --think off --max-tokens 12 --temp 0 2>/dev/null)
[ "$rc" = 0 ] && [ -n "$p1" ] && [ "$p1" = "$p2" ]; ok $? "--prompt --think off --temp 0: exit 0, a response on stdout, reproducible (rc $rc)"
"$B/k3chat" "$T/m" --prompt "Hello" --think on --max-tokens 12 --temp 0.7 --seed 3 >"$T/out" 2>"$T/err"; rc=$?
[ "$rc" = 0 ] && [ $(($(wc -c <"$T/out") + $(wc -c <"$T/err"))) -gt 2 ]; ok $? "--prompt --think on: exit 0 and text on the two channels ($(wc -c <"$T/out") + $(wc -c <"$T/err") bytes)"
"$B/k3chat" "$T/m" --prompt "Hello" --system "Be brief." --effort low --max-tokens 4 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 0 ]; ok $? "--prompt with --system and --effort low (rc $rc $(head -c 100 "$T/err"))"
mkdir -p "$T/notok" && cp "$T/m"/*.json "$T/m"/*.safetensors "$T/notok/" 2>/dev/null
"$B/k3chat" "$T/notok" --prompt "Hello" --max-tokens 2 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "tiktoken" "$T/err"; ok $? "--prompt without tiktoken.model: clear error ($(head -c 120 "$T/err"))"
# a typo in --ids is said before the model loads (with the full release that takes minutes)
"$B/k3chat" "$T/m" --ids "5 x 7" --max-tokens 2 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q "token 2: 'x' is not an id" "$T/err" && ! grep -q "loaded\|memory fit" "$T/err"
ok $? "--ids with a typo: a usage error before loading ($(head -c 160 "$T/err"))"
# K3_DIRS: a shard missing from the model directory is taken from the first of its directories
# that holds it; when none does, the error says K3_DIRS was searched too (it named one path)
mkdir -p "$T/split" "$T/alt"
cp "$T/m"/* "$T/split/"
sh3=$(ls "$T/split" | grep -m1 'model-00003-of')
mv "$T/split/$sh3" "$T/alt/"
outd=$(K3_DIRS="$T/none:$T/alt" "$B/k3chat" "$T/split" --ids "$ids" --max-tokens 6 --temp 0 2>"$T/err")
[ -n "$outd" ] && [ "$outd" = "$out" ]; ok $? "K3_DIRS=NONE:ALT: the shard moved to ALT is found, the same greedy ids ($(tail -n 1 "$T/err" | head -c 100))"
K3_DIRS="$T/none" "$B/k3chat" "$T/split" --ids "1" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "$sh3: not in $T/split nor in any directory of K3_DIRS=$T/none" "$T/err"
ok $? "a shard in no directory of K3_DIRS: the error names the model directory and K3_DIRS ($(tail -n 1 "$T/err" | head -c 160))"
# the server's prompt-cache settings: a malformed value stops the start, naming the variable
for kv in K3_CONV_SNAPSHOTS=many K3_CONV_SNAPSHOTS=65 K3_CONV_SNAPSHOT_MB=lots K3_CONV_SNAPSHOT_MB=-1; do
    env "$kv" timeout 60 "$B/k3chat" "$T/m" --serve 127.0.0.1:0 >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -q "${kv%%=*}: '${kv#*=}'" "$T/err"
    ok $? "--serve with $kv: exit 1 naming it (status $rc: $(tail -n 1 "$T/err" | head -c 140))"
done
exit 0
