#!/bin/sh
# t-amx-stats.sh: /stats in the full-screen chat names the level that ran when it is AMX (here
# the emulated tiles, K3_AMX_EMU=1 K3_ISA=amx, on a CPU with the AVX-512 level), after a turn
# whose prefill went through the AMX matmuls.
# slow
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }
d="$K3_TMP/tiny"
"$K3_BUILD/k3-mkmodel" --preset tiny --seed 1 "$d" >/dev/null 2>&1 || { echo "FAIL: k3-mkmodel"; exit 1; }
if ! K3_ISA=avx512 "$K3CHAT" --inspect "$d" >/dev/null 2>"$K3_TMP/z"; then
    echo "SKIP: the AMX emulation needs the AVX-512 level ($(head -c 160 "$K3_TMP/z"))"
    exit 0
fi
tui_start 100 30 K3_AMX_EMU=1 K3_ISA=amx -- "$K3CHAT --max-tokens 8 --temp 0 $d 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "the model loads on the AMX level" wait_for "tiny · " 20
type_line "hello there, a prompt of several tokens"
check "a turn ends" wait_for "[length limit reached]" $((60 * slow))
keys C-l; type_line "/stats"
check "/stats names the AMX level (emulated tiles)" wait_for "CPU kernels  amx-int8 (emulated tiles, K3_AMX_EMU=1)" 10
keys C-d
check "Ctrl-D exits with 0" wait_for "EXIT=0" 10
finish
