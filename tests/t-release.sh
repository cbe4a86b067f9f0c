#!/bin/sh
# t-release.sh: the release's scale (issue 21) on a replica made by k3-mkmodel --preset release:
# the 93-layer layout as sparse files (zeros), --inspect's figures against values computed here
# from the spec's release figures, the memory fit at K3_MEM_GB 8/24/64/128/2000 with and without
# explicit settings (chosen settings or refusal text, before any weight is read), the loading
# progress and fit lines of --prompt, bad input (missing shard, truncated shard, 200 MB header,
# K3_MEM_GB not a number), and an open + one token at --layers 2 (several GB; skipped in the
# sanitizer tree, see below).
# slow
. "$K3_SRC/tests/lib.sh" # pass, fail, check (check STATUS DESC here), ok
set -u
B=${K3_BUILD:?}; T=${K3_TMP:?}
K3=$B/k3chat; MK=$B/k3-mkmodel; PY=/usr/bin/python3
export K3_VK=0
# The sanitizer tree runs the same code on the two-layer replica instead (see below).
SAN=; case "$B" in *asan*) SAN=1 ;; esac


# bad input and the --prompt lines on replica $R (shard N = the N-th file; its name from the index)
shard() { ls "$R" | grep '^model-.*safetensors$' | sort | sed -n "${1}p"; }
# the issue asks for each bad-input error within 5 s; the time is reported, and only a bound of
# BAD_S (30 s) is asserted, so that a hang fails but a loaded machine does not (BENCHMARKS.md keeps
# the figures)
BAD_S=30
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
quick() { awk -v s="$1" -v m="$BAD_S" 'BEGIN { exit !(s < m) }'; }
bad_input() {
# ---- bad input ----
t0=$(date +%s.%N)
K3_MEM_GB=abc timeout 120 "$K3" "$R" --prompt hi >/dev/null 2>"$T/err"; rc=$?
secs=$(since "$t0")
[ $rc -eq 1 ] && grep -q "K3_MEM_GB: 'abc' is not a number" "$T/err" && quick "$secs"
check $? "K3_MEM_GB=abc: error names the variable, $secs s (bound $BAD_S s) ($(head -c 120 "$T/err"))"
K3_MEM_GB=abc "$K3" --inspect "$R" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "K3_MEM_GB" "$T/err"; check $? "--inspect with K3_MEM_GB=abc: the same error"
# copies: links to the shards, real copies only of what is damaged. Each case damages the LAST
# text shard and also breaks the JSON of shard 1's header: the error must name the last shard,
# which shows that every shard's size and header length are checked before any header is parsed.
mkcopy() { rm -rf "$1"; mkdir "$1"; for f in "$R"/*; do ln -s "$f" "$1/"; done; }
nt=$(($(ls "$R" | grep -c '^model-.*safetensors$') - 2)) # the last text shard (two vision shards follow)
L=$(shard $nt); F=$(shard 1)
breakjson() { rm "$C/$F"; cp --sparse=always "$R/$F" "$C/$F"; printf 'x' | dd of="$C/$F" bs=1 seek=8 conv=notrunc 2>/dev/null; }
C=$T/bad; mkcopy "$C"; breakjson
K3_MEM_GB=2000 timeout 120 "$K3" "$C" --prompt hi >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "$F: header JSON malformed" "$T/err"; check $? "shard 1's header JSON broken: the error names it ($(head -c 160 "$T/err"))"
rm "$C/$L"
t0=$(date +%s.%N)
K3_MEM_GB=2000 timeout 120 "$K3" --inspect "$C" >/dev/null 2>"$T/err"; rc=$?
secs=$(since "$t0")
[ $rc -eq 1 ] && grep -q "$L: cannot open" "$T/err" && quick "$secs"
check $? "index names a missing shard (the last): error names it, before shard 1's header is parsed, $secs s (bound $BAD_S s) ($(head -c 160 "$T/err"))"
mkcopy "$C"; breakjson; rm "$C/$L"
cp --sparse=always "$R/$L" "$C/"
sz=$(stat -c %s "$C/$L"); truncate -s $((sz / 2)) "$C/$L"
t0=$(date +%s.%N)
K3_MEM_GB=2000 timeout 120 "$K3" "$C" --prompt hi >/dev/null 2>"$T/err"; rc=$?
secs=$(since "$t0")
[ $rc -eq 1 ] && grep -q "$L: .* but the file has $((sz / 2)) bytes (file truncated?)" "$T/err" && ! grep -q "loading  *[1-9]" "$T/err" && quick "$secs"
check $? "last shard truncated in the middle: error names the file and the offset, nothing loaded, $secs s (bound $BAD_S s) ($(head -c 200 "$T/err"))"
mkcopy "$C"; breakjson; rm "$C/$L"
$PY - "$C/$L" <<'EOF2'
import struct, sys
n = 200_000_000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", n)); f.write(b'{"a": 1'); f.truncate(8 + n + 4096)
EOF2
t0=$(date +%s.%N)
K3_MEM_GB=2000 timeout 120 "$K3" --inspect "$C" >/dev/null 2>"$T/err"; rc=$?
secs=$(since "$t0")
[ $rc -eq 1 ] && grep -q "$L: header length 200000000 at offset 0 is implausibly large" "$T/err" && quick "$secs"
check $? "a 200 MB header (last shard): error names the file and the length, $secs s (bound $BAD_S s) ($(head -c 200 "$T/err"))"
rm -rf "$C"

}
# refusal from config.json alone: a copy of the replica without index or shards (nothing a header
# could come from) is refused with the plan's figures, so the refusal reads no shard header
noshards() { # $1: K3_MEM_GB where nothing fits; $2 (optional): where K3_BITS=8 does not but 4 does
N=$T/noshards; rm -rf "$N"; mkdir "$N"; cp "$R/config.json" "$N/"
K3_MEM_GB=$1 "$K3" "$N" --prompt hi >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "needs .* (nothing fits) but only" "$T/err" && ! grep -q "loading" "$T/err"
check $? "K3_MEM_GB=$1, config.json only (no index, no shards): refused with the figures, no header read ($(head -c 200 "$T/err"))"
if [ -n "${2:-}" ]; then
K3_MEM_GB=$2 K3_BITS=8 "$K3" "$N" --prompt hi >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "settings given explicitly are never changed" "$T/err" && grep -q "K3_BITS=4: .* (fits)" "$T/err"
check $? "K3_MEM_GB=$2 K3_BITS=8, config.json only: the explicit setting refused at once, K3_BITS=4 named ($(head -c 200 "$T/err"))"
K3_MEM_GB=$2 "$K3" "$N" --prompt hi >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "neither model.safetensors.index.json nor model.safetensors found" "$T/err"
check $? "K3_MEM_GB=$2 unset bits, config.json only: the fit passes (K3_BITS=4 chosen) and the open goes on to the missing shards ($(head -c 160 "$T/err"))"
# the server's --parallel N sessions are counted: each one's MLA cache, KDA state and chunk
# scratch; the refusal names them and the most sessions that fit (computed here)
U=$(usable "$2"); bits=""
for b3 in "8 8 8" "4 8 8" "4 4 4"; do fits "$(plan $b3 floor 1)" "$U" && { bits=$b3; break; }; done
np=1; while [ $np -lt 63 ] && fits "$(plan $bits floor $((np + 1)))" "$U"; do np=$((np + 1)); done
with=; [ "$bits" = "4 8 8" ] && with=" with K3_BITS=4"
K3_MEM_GB=$2 timeout 60 "$K3" "$N" --serve 127.0.0.1:18999 --parallel 64 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -qF "needs $(gb2 "$(plan 8 8 8 floor 64)") (nothing fits)" "$T/err" &&
    grep -qF "the plan counts 64 sessions (--parallel), each: MLA cache" "$T/err" &&
    grep -qF "chunk scratch $(mb2 "$(ex scratch 2)") (K3_CHUNK=128)" "$T/err" &&
    grep -qF -- "--parallel $np$with: $(gb2 "$(plan $bits floor $np)") (fits)" "$T/err"
check $? "K3_MEM_GB=$2 --serve --parallel 64, config.json only: refused, 64 sessions counted, --parallel $np$with named as fitting ($(head -c 400 "$T/err"))"
fi
rm -rf "$N"
}
prompt_lines() {
# ---- --prompt: the loading line and the fit line (tiny model: quick) ----
"$MK" --preset tiny --quiet "$T/tiny" || fail "k3-mkmodel --preset tiny"
K3_MEM_GB=4 "$K3" "$T/tiny" --prompt hi --max-tokens 2 --temp 0 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 0 ] && head -n 1 "$T/err" | grep -Eq '^k3chat: loading +[0-9]+%  [0-9.]+ of [0-9.]+ (MB|GB)  [0-9]+ MB/s' &&
    grep -Eq '^k3chat: loaded [0-9.]+ (MB|GB) in [0-9.]+ s \([0-9]+ MB/s\)$' "$T/err" &&
    grep -q '^k3chat: memory fit: K3_BITS=8 K3_MLA_BITS=8 K3_HEAD_BITS=8 .* of 3.30 GB usable of 4.00 GB available (K3_MEM_GB' "$T/err"
check $? "--prompt: a loading line, a loaded line and the fit line on stderr ($(head -n 3 "$T/err" | tr '\n' '|' | head -c 300))"

}

if [ -n "$SAN" ]; then
    # generating the 93-layer replica takes about 5 minutes and each --inspect of it about 3 under
    # ASan on this loaded 2-core machine, beyond the test timeout: the same code runs here on the
    # two-layer replica (all tensors at release widths, 5 shards)
    echo "SKIP: the 93-layer replica's figures and fit decisions in the sanitizer tree (minutes per step under ASan; the normal tree checks them); here: --layers 2"
    echo "SKIP: open + one token at --layers 2 (sanitizer tree: several GB and many minutes under ASan; the normal tree runs it)"
    R=$T/rel2
    "$MK" --preset release --layers 2 --quiet "$R"; check $? "k3-mkmodel --preset release --layers 2"
    K3_MEM_GB=64 "$K3" --inspect "$R" >"$T/insp" 2>"$T/err"
    grep -q "^layers       2: 2 KDA + 0 MLA attention; 1 dense MLP + 1 MoE" "$T/insp" && grep -q "^fit          K3_BITS=8 K3_MLA_BITS=8 K3_HEAD_BITS=8" "$T/insp" && grep -q "^speed        decode" "$T/insp"
    check $? "--inspect --layers 2 replica: layers, fit and speed lines ($(head -c 200 "$T/err"))"
    K3_MEM_GB=2 "$K3" "$R" --prompt hi >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 1 ] && grep -q "(nothing fits) but only" "$T/err" && ! grep -q "loading  *[1-9]" "$T/err"
    check $? "K3_MEM_GB=2: refused at open before any weight ($(head -c 200 "$T/err"))"
    noshards 2
    bad_input
    prompt_lines
    exit 0
fi

R=$T/rel
t0=$(date +%s)
"$MK" --preset release --quiet "$R" 2>"$T/mkerr"; rc=$?
check $rc "k3-mkmodel --preset release: exit 0 in $(($(date +%s) - t0)) s ($(head -c 200 "$T/mkerr"))"
[ $rc -eq 0 ] || exit 1
disk=$(du -sk "$R" | cut -f1); app=$(du -sk --apparent-size "$R" | cut -f1)
[ "$disk" -lt 400000 ] && [ "$app" -gt 1400000000 ]; check $? "replica is sparse: $((disk / 1024)) MB on disk, $((app / 1048576)) GB apparent"
n=$(ls "$R" | grep -c '^model-000[0-9][0-9]-of-000096\.safetensors$')
[ "$n" -eq 96 ]; check $? "96 shards named model-XXXXX-of-000096.safetensors ($n)"
[ "$(wc -l <"$R/tiktoken.model")" -eq 163584 ]; check $? "tiktoken.model has 163,584 ranks"

# ---- expected figures, computed here from the release's config (spec k3-model.md section 2) ----
$PY - "$R" >"$T/expect" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))["text_config"]
D, NL, V, I = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
Hm, ql, kl, nope, rope, vd = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
E, K, F, L, S = c["num_experts"], c["num_experts_per_token"], c["moe_intermediate_size"], c["routed_expert_hidden_size"], c["num_shared_experts"]
la = c["linear_attn_config"]; H, d, CK = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
mla = [i - 1 for i in la["full_attn_layers"]]; fd = c["first_k_dense_replace"]; blk = c["attn_res_block_size"]
P = H * d
def q(bits, r, cols):
    return r * cols * 4 if bits == 32 else r * cols + r * 4 if bits == 8 else r * ((cols + 1) // 2) + r * ((cols + 63) // 64) * 4
dense, mlam, head = [], [], [(V, D)]
for l in range(NL):
    if l in mla:
        mlam += [(ql, D), (Hm * (nope + rope), ql), (kl + rope, D), (Hm * (nope + vd), kl), (D, Hm * vd), (Hm * vd, D)]
    else:
        dense += [(P, D)] * 4 + [(D, P)]
    dense += [(I, D), (I, D), (D, I)] if l < fd else [(L, D), (D, L), (S * F, D), (S * F, D), (D, S * F)]
for name, m in (("dense", dense), ("MLA", mlam), ("lm_head", head)):
    print(name, *[sum(q(b, r, cc) for r, cc in m) for b in (32, 8, 4)])
n_kda, n_moe = NL - len(mla), NL - fd
one = 3 * (F * L // 2 + F * L // 32)
print("expert", one, n_moe * E * one)
print("kda", 2 * n_kda * (P * d + 3 * (CK - 1) * P) * 4, "mlapos", len(mla) * (kl + rope) * 4, "blocks", (NL // blk + 2) * D * 4)
# parameters: every matrix and vector (MXFP4 weights two a byte)
small = NL * 6 * D + n_kda * (3 * P * CK + P + 128 + d + d * D + P * d + H * D) + len(mla) * (ql + kl) + n_moe * (E * D + E + L) + 3 * D
params = sum(r * cc for r, cc in dense + mlam + head) + V * D + small + n_moe * E * 3 * F * L
print("params", params, "mla", ",".join(map(str, mla)), "nmla", len(mla), "nkda", n_kda)
print("small", small * 4, "embed", V * D * 2)
# a session's chunk scratch at K3_CHUNK=C columns and T positions (k3chat(1) MEMORY FIT: the
# projections, block snapshots, conv windows, MLA heads and scores, MoE outputs and ids, C rows of
# logits; then the last logits row and the KDA double accumulators), here at C = 128, T = 8192:
# "scratch" bytes and its part per position
def scratch(C, T, nrun=NL):
    W = max(P, Hm * (nope + rope), kl + rope, Hm * vd, ql, E, S * F, I, D, L, F)
    NB = -(-nrun // blk)
    f = 6 * C * W + C * D * (4 + NB) + 3 * (CK - 1 + C) * P + 2 * Hm * C * kl + C * max(nope, kl, L, H)
    f += C * max(vd, kl, L) + Hm * T + C * K * L + C * L + 4 * C * K + 2 * (E + 1) + C + E * L + C * V
    return 4 * f + 4 * V + 8 * 2 * P
print("scratch", scratch(128, 8192), "chunk32", scratch(32, 8192))
# the prefill window (k3chat(1) PREFILL WINDOW): a logits row, then per token h, x, xn, y, the
# block snapshots, the expert outputs and latent row, the routing table (ids, weights, rows, flags)
print("win", 4 * V, 4 * ((4 + -(-NL // blk)) * D + K * L + L + 4 * K + 1))
EOF
check $? "expected figures computed ($(tr '\n' ' ' <"$T/expect" | head -c 300))"
ex() { awk -v k="$1" -v i="$2" '$1 == k { print $i }' "$T/expect"; }

# ---- --inspect: layers, kinds, experts, parameters, bytes per class at each bit width ----
t0=$(date +%s)
K3_MEM_GB=24 "$K3" --inspect "$R" >"$T/insp" 2>"$T/err"; rc=$?
check $rc "--inspect on the 93-layer replica: exit 0 in $(($(date +%s) - t0)) s ($(head -c 200 "$T/err"))"
grep -q "^layers       93: $(ex params 8) KDA + $(ex params 6) MLA attention; 1 dense MLP + 92 MoE" "$T/insp"; check $? "93 layers: 69 KDA + 24 MLA, 1 dense + 92 MoE"
want=$(ex params 4 | sed 's/,/, /g')
grep -qF "MLA layers   $want (0-indexed)" "$T/insp"; check $? "MLA layers (0-indexed) are $want"
grep -q "^MoE          896 experts, 16 active, 2 shared" "$T/insp"; check $? "896 experts, 16 active"
grep -q "^experts      82432 routed (92 MoE layers x 896)" "$T/insp"; check $? "82,432 routed experts"
got=$(sed -n 's/^parameters   [0-9.]* T (\([0-9]*\);.*/\1/p' "$T/insp")
[ -n "$got" ] && [ "$got" = "$(ex params 2)" ]; check $? "parameters: $got = $(ex params 2) computed here (about 2.8 T)"
$PY -c "import sys; sys.exit(0 if 2.7e12 < $(ex params 2) < 2.9e12 else 1)"; check $? "total parameters about 2.8 T"
for cls in dense MLA lm_head; do
    got=$(awk -v k="$cls" '$1 == k && $2 == "32:" { print $3, $5, $7 }' "$T/insp")
    want=$(awk -v k="$cls" '$1 == k { print $2, $3, $4 }' "$T/expect")
    [ -n "$got" ] && [ "$got" = "$want" ]; check $? "$cls bytes at 32 / 8 / 4 bits: $got (computed here: $want)"
done
grep -q "experts $(ex expert 3) (one $(ex expert 2))" "$T/insp"; check $? "experts $(ex expert 3) bytes, one $(ex expert 2) (17.55 MB)"
grep -q "small $(ex small 2)," "$T/insp" && grep -q "embeddings $(ex small 4)," "$T/insp"; check $? "small tensors $(ex small 2) and embeddings $(ex small 4) bytes"
grep -q "KDA state $(ex kda 2), MLA cache per position $(ex kda 4)" "$T/insp"; check $? "KDA state and MLA cache per position"
# the chunk scratch of a session (computed above from the widths), at K3_CHUNK=128 and 32
mb2() { awk -v x="$1" 'BEGIN { printf "%.2f MB\n", x / 1e6 }'; }
grep -q "^  chunk scratch  *$(mb2 "$(ex scratch 2)")  (K3_CHUNK=128" "$T/insp"
check $? "chunk scratch at K3_CHUNK=128: $(mb2 "$(ex scratch 2)") computed here ($(grep '^  chunk scratch' "$T/insp"))"
# the routed experts' decode rate, measured at the expert shape config.json gives (F x L) and cached
# under it; the estimate's expert term uses it (src/model/speed.c: dec3_ex_FxL)
fl=$($PY -c "import json,sys; c=json.load(open(sys.argv[1]))['text_config']; print('%dx%d' % (c['moe_intermediate_size'], c['routed_expert_hidden_size']))" "$R/config.json")
xr=$(grep -o 'routed experts as decode runs them [0-9.]* GB/s' "$T/insp" | grep -o '[0-9.]* GB' | cut -d' ' -f1)
[ -n "$xr" ] && awk -v x="$xr" 'BEGIN { exit !(x > 0) }' && grep -q "^dec3_ex_$fl [0-9]" "${XDG_CACHE_HOME:-$HOME/.cache}/k3chat/speed"
check $? "--inspect measures the routed experts at their shape $fl: $xr GB/s, cached as dec3_ex_$fl"

# ---- the fit: K3_MEM_GB 8, 24, 64, 128, 2000, with and without explicit settings ----
# plan(bits, mla, head, cache) and usable(G) as fit.h defines them, from the figures above
plan() { # $1 $2 $3 bits, $4 expert cache bytes ("floor" = one per MoE layer), $5 sessions (1) -> bytes
    awk -v b="$1" -v mb="$2" -v hb="$3" -v cache="$4" -v ns="${5:-1}" '
        function ix(x) { return x == 32 ? 2 : x == 8 ? 3 : 4 }
        $1 == "dense" { dn = $ix(b) } $1 == "MLA" { ml = $ix(mb) } $1 == "lm_head" { hd = $ix(hb) }
        $1 == "expert" { one = $2 } $1 == "kda" { kda = $2; pos = $4; blocks = $6 } $1 == "small" { sm = $2; em = $4 }
        $1 == "scratch" { scr = $2 }
        END { c = cache == "floor" ? 92 * one : cache; printf "%.0f\n", dn + ml + hd + sm + em + c + blocks + ns * (kda + pos * 8192 + scr) }' "$T/expect"
}
usable() { awk -v g="$1" 'BEGIN { printf "%.0f\n", g * 1e9 - (0.5e9 + 0.05 * g * 1e9) }'; }
gb2() { awk -v x="$1" 'BEGIN { printf "%.2f GB\n", x / 1e9 }'; }
fits() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
# the eight --inspect runs four at a time (each parses the 96 headers: about 3 s of CPU, a minute
# on a loaded 2-core machine; about 0.5 GB each)
for G in 8 24 64 128; do K3_MEM_GB=$G "$K3" --inspect "$R" >"$T/f$G" 2>&1 & done
wait
K3_MEM_GB=2000 "$K3" --inspect "$R" >"$T/f2000" 2>&1 &
K3_MEM_GB=64 K3_BITS=8 "$K3" --inspect "$R" >"$T/x1a" 2>&1 &
K3_MEM_GB=128 K3_EXPERT_GB=100 "$K3" --inspect "$R" >"$T/x2a" 2>&1 &
K3_MEM_GB=2000 K3_BITS=4 K3_MAXT=16384 "$K3" --inspect "$R" >"$T/x3a" 2>&1 &
K3_MEM_GB=24 K3_CHUNK=32 "$K3" --inspect "$R" >"$T/insp32" 2>&1 &
wait
grep -q "^  chunk scratch  *$(mb2 "$(ex scratch 4)")  (K3_CHUNK=32" "$T/insp32" &&
    grep -q "^fit .*chunk scratch $(mb2 "$(ex scratch 4)") (K3_CHUNK=32)" "$T/insp32"
check $? "chunk scratch at K3_CHUNK=32: $(mb2 "$(ex scratch 4)") computed here, named in the fit line ($(grep '^  chunk scratch' "$T/insp32"))"
for G in 8 24 64 128 2000; do
    U=$(usable $G)
    line=$(grep '^fit ' "$T/f$G")
    if fits "$(plan 8 8 8 floor)" "$U"; then want="K3_BITS=8 K3_MLA_BITS=8 K3_HEAD_BITS=8"; step=1
    elif fits "$(plan 4 8 8 floor)" "$U"; then want="K3_BITS=4 K3_MLA_BITS=8 K3_HEAD_BITS=8"; step=2
    elif fits "$(plan 4 4 4 floor)" "$U"; then want="K3_BITS=4 K3_MLA_BITS=4 K3_HEAD_BITS=4"; step=3
    else want=""; fi
    if [ -n "$want" ]; then
        echo "$line" | grep -qF "fit          $want K3_MAXT=8192, expert cache" && { [ $step -eq 1 ] || echo "$line" | grep -qF "chosen: step $step of the fit order"; }
        check $? "K3_MEM_GB=$G: $want chosen (step $step) ($(echo "$line" | head -c 250))"
    else
        echo "$line" | grep -qF "needs $(gb2 "$(plan 8 8 8 floor)") (nothing fits)" &&
            echo "$line" | grep -qF "K3_BITS=4: $(gb2 "$(plan 4 8 8 floor)")" &&
            echo "$line" | grep -qF "K3_BITS=4 K3_MLA_BITS=4 K3_HEAD_BITS=4: $(gb2 "$(plan 4 4 4 floor)")" &&
            echo "$line" | grep -q "a k3-repack container with K3_MMAP=1: [0-9.]* GB private"
        check $? "K3_MEM_GB=$G: nothing fits; the refusal names the plan and each alternative's figure ($(echo "$line" | head -c 300))"
    fi
done
# 2000 GB: every expert resident; 128 GB: the cache takes what is left of usable
grep -q "all resident" "$T/f2000"; check $? "K3_MEM_GB=2000: every expert resident"
# (after the prefill window: K3_MAXT=8192 tokens, which half of what is left holds)
left=$(awk -v u="$(usable 128)" -v p="$(plan 8 8 8 0)" -v b="$(ex win 2)" -v c="$(ex win 3)" \
    'BEGIN { printf "%.2f GB\n", (u - p - b - c * 8192) / 1e9 }')
grep -q "routed experts *$left" "$T/f128" && grep -q "prefill window .*(8192 tokens" "$T/f128"
check $? "K3_MEM_GB=128: a prefill window of 8192 tokens, the expert cache takes what is left ($left)"
# explicit settings are never changed: refused with the settings that would fit
grep '^fit ' "$T/x1a" >"$T/x1"
grep -q "settings given explicitly are never changed" "$T/x1" && grep -qF "K3_BITS=4: $(gb2 "$(plan 4 8 8 floor)") (fits)" "$T/x1"
check $? "K3_MEM_GB=64 K3_BITS=8: refused, K3_BITS=4 named as fitting ($(head -c 300 "$T/x1"))"
grep '^fit ' "$T/x2a" >"$T/x2"
grep -q "K3_EXPERT_GB=100.00 K3_MAXT=8192 needs" "$T/x2" && grep -q "K3_EXPERT_GB=[0-9.]*: .* (fits)" "$T/x2"
check $? "K3_MEM_GB=128 K3_EXPERT_GB=100: refused, the largest cache that fits named ($(head -c 300 "$T/x2"))"
grep '^fit ' "$T/x3a" >"$T/x3"
grep -q "fit          K3_BITS=4 K3_MLA_BITS=8 K3_HEAD_BITS=8 K3_MAXT=16384" "$T/x3"; check $? "K3_MEM_GB=2000 K3_BITS=4 K3_MAXT=16384: the given settings kept ($(head -c 200 "$T/x3"))"

# the engine refuses at open, before reading weights (no loading line past 0 %), with the figures
t0=$(date +%s)
K3_MEM_GB=24 timeout 120 "$K3" "$R" --prompt hi >"$T/out" 2>"$T/err"; rc=$?
secs=$(($(date +%s) - t0))
[ $rc -eq 1 ] && grep -q "needs .* (nothing fits) but only" "$T/err" && ! grep -q "loading  *[1-9]" "$T/err" && [ ! -s "$T/out" ]
check $? "--prompt at K3_MEM_GB=24: refused at open in $secs s, before any weight ($(head -c 200 "$T/err"))"
K3_MEM_GB=64 K3_BITS=8 timeout 120 "$K3" "$R" --prompt hi >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "K3_BITS=4: .* (fits)" "$T/err"; check $? "--prompt with K3_BITS=8 at K3_MEM_GB=64: refused naming K3_BITS=4 ($(head -c 150 "$T/err"))"

noshards 24 64
bad_input
prompt_lines
# ---- open + one token at --layers 2: the dense layer (33,792), one KDA + 896-expert MoE layer,
# the 163,840-row embeddings and head. About 4.4 GB at 4 bits; in the sanitizer tree the same
# run takes many times longer and ASan's shadow memory doubles it, so it runs in the normal tree.
rm -rf "$R"
"$MK" --preset release --layers 2 --quiet "$T/rel2" || fail "k3-mkmodel --preset release --layers 2"
$PY -c "import json,sys; c=json.load(open('$T/rel2/config.json'))['text_config']; sys.exit(0 if c['linear_attn_config']['full_attn_layers']==[] and c['first_k_dense_replace']==1 else 1)"
check $? "--layers 2: both layers KDA (the release's kinds), layer 0 dense"
t0=$(date +%s)
K3_MEM_GB=8 K3_BITS=4 K3_MLA_BITS=4 K3_HEAD_BITS=4 timeout 600 "$K3" "$T/rel2" --ids "1 2 3" --max-tokens 1 --temp 0 >"$T/out" 2>"$T/err"; rc=$?
secs=$(($(date +%s) - t0))
[ $rc -eq 0 ] && [ "$(cat "$T/out")" = "0" ]
check $? "--layers 2: open + one token in $secs s: exit 0, zero weights give all-equal logits and greedy picks id 0 (got '$(head -c 40 "$T/out")'; $(tail -n 2 "$T/err" | tr '\n' '|' | head -c 300))"
grep -q "memory fit: K3_BITS=4 K3_MLA_BITS=4 K3_HEAD_BITS=4 K3_MAXT=8192, expert cache" "$T/err"; check $? "--layers 2: the fit line reports the given bits"
head -n 1 "$T/err" | grep -Eq '^k3chat: expected speed on this machine: decode [0-9.e+-]+ s/token, prefill [0-9.e+-]+ s/token; first token of a 1024-token prompt [0-9.e+-]+ s reading .* \(4/4/4 bits'
check $? "--layers 2: the speed estimate is printed before loading ($(head -n 1 "$T/err" | head -c 200))"
# the TUI shows the estimate while the model loads (the load is stopped: only the screen matters)
if command -v tmux >/dev/null; then
    S="tmux -L k3rel$$ -f /dev/null"
    $S new-session -d -x 160 -y 30 -e TERM=xterm-256color -e LANG=C.UTF-8 -e LC_ALL=C.UTF-8 -e HOME="$T" \
        -e XDG_STATE_HOME="$T/state" -e XDG_CACHE_HOME="${XDG_CACHE_HOME:-$T/cache}" -e K3_MEM_GB=8 -e K3_BITS=4 -e K3_MLA_BITS=4 -e K3_HEAD_BITS=4 \
        "$K3 $T/rel2 2>/dev/null; sleep 30"
    i=0; ok=1
    while [ $i -lt 600 ]; do # up to 60 s
        scr=$($S capture-pane -p 2>/dev/null)
        echo "$scr" | grep -q "expected speed on this machine: decode" && echo "$scr" | grep -q " loading" && { ok=0; break; }
        sleep 0.1; i=$((i + 1))
    done
    check $ok "TUI: the speed estimate is shown while the model loads ($(echo "$scr" | grep -m1 -o 'expected speed.*' | head -c 120))"
    tmux_end "$S" # k3chat, still loading, quit and waited for
else
    echo "SKIP: TUI speed estimate while loading (tmux is not installed)"
fi
rm -rf "$T/rel2"
