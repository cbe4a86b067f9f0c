#!/bin/sh
# t-amx.sh: the AMX level through the engine: K3_ISA=amx on a CPU without AMX is an error naming
# AMX-TILE (exit 1, no SIGILL); on the tile emulation (K3_AMX_EMU=1) --inspect names the level,
# a refused tile permission (K3_AMX_DENY=1) is a notice and avx512; and k3-ab bounds the AMX
# order against the canonical one on a whole model (top-1 and rel_l2), while one column at a
# time (K3_CHUNK=1, decode) stays bit-identical; the same for that order on AVX-512 VNNI
# (K3_GROUP_ORDER=1), which on k3-nano is no further from the exact f32 path than the default.
# slow
. "$K3_SRC/tests/lib.sh" # pass, fail, check (check STATUS DESC here), ok
set -u
K="$K3_BUILD/k3chat"
AB="$K3_BUILD/k3-ab"
MK="$K3_BUILD/k3-mkmodel"
T="$K3_TMP"
[ -x "$K" ] && [ -x "$AB" ] && [ -x "$MK" ] || { echo "FAIL: k3chat, k3-ab or k3-mkmodel not built"; exit 1; }
"$MK" --quiet --preset tiny --layers 2 "$T/m" 2>"$T/err" || { echo "FAIL: k3-mkmodel: $(cat "$T/err")"; exit 1; }
val() { sed -n 's/^AB .* '"$1"' \([^ ]*\).*/\1/p' "$2"; }

# the hardware level, as this CPU has it or not
K3_ISA=amx "$K" --inspect "$T/m" >"$T/hw" 2>&1
rc=$?
if grep -q 'lacks' "$T/hw"; then
    [ $rc -eq 1 ] && grep -q 'K3_ISA=amx: this CPU lacks AMX-' "$T/hw" && grep -q 'levels this machine runs' "$T/hw"
    check $? "K3_ISA=amx without AMX: exit 1 naming the missing feature ($(head -c 160 "$T/hw"))"
    K3_AMX_DENY=1 K3_ISA=amx "$K" --inspect "$T/m" >"$T/hw2" 2>&1
    [ $? -eq 1 ] && grep -q 'lacks AMX-' "$T/hw2"
    check $? "K3_ISA=amx without AMX: the cpuid check comes before the permission request"
else
    [ $rc -eq 0 ] && grep -Eq '^kernels +(amx-int8|avx512-vnni) \(K3_ISA=amx\)' "$T/hw"
    check $? "K3_ISA=amx on a CPU with AMX: runs amx-int8, or avx512 after a refusal ($(grep '^kernels\|refused' "$T/hw"))"
fi

if ! K3_ISA=avx512 "$K" --inspect "$T/m" >/dev/null 2>"$T/z"; then
    echo "SKIP: the AMX emulation needs the AVX-512 level ($(head -c 160 "$T/z"))"
    exit 0
fi
K3_AMX_EMU=1 K3_ISA=amx "$K" --inspect "$T/m" >"$T/emu" 2>&1
[ $? -eq 0 ] && grep -q '^kernels *amx-int8 (emulated tiles, K3_AMX_EMU=1) (K3_ISA=amx)' "$T/emu"
check $? "K3_AMX_EMU=1 K3_ISA=amx: --inspect names the emulated AMX level ($(grep '^kernels' "$T/emu"))"

K3_AMX_EMU=1 K3_AMX_DENY=1 K3_ISA=amx "$K" --inspect "$T/m" >"$T/deny" 2>&1
[ $? -eq 0 ] && grep -q 'refused the tile state (refused by K3_AMX_DENY=1' "$T/deny" &&
    grep -q '^kernels *avx512-vnni (K3_ISA=amx)' "$T/deny"
check $? "permission refused: a notice and avx512-vnni ($(grep 'refused\|^kernels' "$T/deny" | tr '\n' ' ' | head -c 240))"

# whole model: chunked prefill runs the AMX tiles (emulated) for every int8/int4/MXFP4 matmul
K3_AMX_EMU=1 "$AB" --random 40 "$T/m" "K3_ISA=avx512" "K3_ISA=amx" >"$T/ab" 2>&1
r=$(val rel_l2 "$T/ab")
grep -q '^AB top1 1.0000' "$T/ab" && awk -v r="$r" 'BEGIN { exit !(r > 0 && r < 1e-5) }'
check $? "AMX order vs canonical (avx512), 40 positions: same top-1, 0 < rel_l2 $r < 1e-5 ($(grep '^AB' "$T/ab"))"
K3_AMX_EMU=1 "$AB" --random 40 "$T/m" "K3_ISA=avx512 K3_CHUNK=1" "K3_ISA=amx K3_CHUNK=1" >"$T/ab1" 2>&1
grep -q 'maxerr 0 rel_l2 0.000e+00' "$T/ab1"
check $? "K3_CHUNK=1 (one column per matmul): amx and avx512 bit-identical ($(grep '^AB' "$T/ab1"))"

# the AMX order on AVX-512 VNNI (K3_GROUP_ORDER=1, kern-grp.c, products of 16+ columns, int8 8+): bounded
# against the canonical order on the whole model; one column at a time it changes nothing
"$AB" --random 40 "$T/m" "K3_ISA=avx512" "K3_ISA=avx512 K3_GROUP_ORDER=1" >"$T/abg" 2>&1
r=$(val rel_l2 "$T/abg")
grep -q '^AB top1 1.0000' "$T/abg" && awk -v r="$r" 'BEGIN { exit !(r > 0 && r < 1e-5) }'
st=$?
check $st "K3_GROUP_ORDER=1 vs 0, 40 positions: same top-1, 0 < rel_l2 $r < 1e-5 ($(grep '^AB' "$T/abg"))"
"$AB" --random 40 "$T/m" "K3_ISA=avx512 K3_CHUNK=1" "K3_ISA=avx512 K3_CHUNK=1 K3_GROUP_ORDER=1" \
    >"$T/abg1" 2>&1
grep -q 'maxerr 0 rel_l2 0.000e+00' "$T/abg1"
check $? "K3_CHUNK=1: K3_GROUP_ORDER=1 and 0 bit-identical ($(grep '^AB' "$T/abg1"))"
K3_GROUP_ORDER=1 K3_ISA=avx512 "$K" --inspect "$T/m" >"$T/gi" 2>&1
[ $? -eq 0 ] && grep -q '^kernels *avx512-vnni, group order for wide products (K3_GROUP_ORDER=1)' "$T/gi"
check $? "K3_GROUP_ORDER=1: --inspect says so ($(grep '^kernels' "$T/gi"))"
# its speed estimate uses figures measured with its own kernels, cached under their own names
SC="${XDG_CACHE_HOME:-$HOME/.cache}/k3chat/speed"
grep -q '^pre3_mxfp4@avx512+group [0-9]' "$SC" && grep -q '^pre3_mxfp4 [0-9]' "$SC"
check $? "K3_GROUP_ORDER=1: the speed cache keeps its figures apart ($(grep -c '@' "$SC") keys with @)"
K3_GROUP_ORDER=yes "$K" --inspect "$T/m" >"$T/gbad" 2>&1
[ $? -eq 1 ] && grep -q "K3_GROUP_ORDER: 'yes' is not 0 or 1" "$T/gbad"
check $? "K3_GROUP_ORDER=yes: refused, naming the variable ($(head -c 160 "$T/gbad"))"

# on trained weights (k3-nano) the group order's rounding is amplified by the next layers' int8
# activation codes like any float reordering (K3_ACT float/double: the same size), so it is no
# further from the exact f32 path than the default order: top-1 within 0.01, rel_l2 within 15 %
N="$K3_SRC/models/k3-nano"
F='K3_BITS=32 K3_MLA_BITS=32 K3_HEAD_BITS=32 K3_IDOT=0'
"$AB" --random 600 --seed 1 "$N" "$F" "" >"$T/nd" 2>&1
"$AB" --random 600 --seed 1 "$N" "$F" "K3_GROUP_ORDER=1" >"$T/ng" 2>&1
top1() { sed -n 's/^AB top1 \([^ ]*\).*/\1/p' "$1"; }
t1d=$(top1 "$T/nd"); t1g=$(top1 "$T/ng"); rd=$(val rel_l2 "$T/nd"); rg=$(val rel_l2 "$T/ng")
awk -v a="$t1d" -v b="$t1g" -v c="$rd" -v d="$rg" \
    'BEGIN { exit !(a > 0.9 && b >= a - 0.01 && d > 0 && d <= 1.15 * c) }'
st=$?
check $st "k3-nano, 600 positions, against exact f32: group order top-1 $t1g rel_l2 $rg, default $t1d, $rd"
