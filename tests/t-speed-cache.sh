#!/bin/sh
# t-speed-cache.sh: the speed-estimate cache (src/model/speed.c) is used only for the machine and
# the load it was measured under (issue 43). One --inspect writes it: its first line names the
# machine, each figure carries its time and load. Then forged copies of it, each with the memory
# figure made absurd (1 kB/s, shown as "memory read 0.0 GB/s" when used): with today's machine
# line and load it is used (the control: the forging is read); with another CPU flag set, or
# written under a load well above today's, it is not (measured again, the file rewritten);
# --inspect --measure measures again whatever the cache holds. Each measuring run takes a few
# seconds; the load is read from /proc/loadavg just before each forged file is written.
# K3_TEST_LOAD (tests/run.sh sets it for every test) stands for that load: a cache written at an
# absurd load is used under the same K3_TEST_LOAD, and a value that is not a number is an error.
. "$K3_SRC/tests/lib.sh" # pass, fail, check (check STATUS DESC here), ok
set -u
B=${K3_BUILD:?}; T=${K3_TMP:?}
K3=$B/k3chat
unset K3_TEST_LOAD # the machine's own load, up to the last checks

M=$T/tiny
"$B/k3-mkmodel" --preset tiny --seed 7 --quiet "$M" || { fail "k3-mkmodel --preset tiny"; exit 1; }
XDG_CACHE_HOME=$T/cache; export XDG_CACHE_HOME
K3_CHUNK=32; export K3_CHUNK # no chunk-width probes: each measuring run is the base probes only
SC=$T/cache/k3chat/speed

"$K3" --inspect "$M" >"$T/out" 2>"$T/err"; rc=$?
head -n 1 "$SC" 2>/dev/null | grep -Eq '^machine cpu=[0-9a-f]{16} flags=[0-9a-f]{16} kernels=[^ ]+ memory=[0-9]+ cpus=[0-9]+$'
check $? "the cache's first line names the machine ($(head -n 1 "$SC" 2>/dev/null | head -c 160); rc $rc)"
n=$(tail -n +2 "$SC" | grep -c .); bad=$(tail -n +2 "$SC" | grep -Evc '^[a-z0-9_@+x]+ [0-9.e+-]+ [0-9]+ [0-9.]+$')
[ "$n" -ge 10 ] && [ "$bad" -eq 0 ]; check $? "each of its $n figures carries its time and load ($bad lines without)"
grep -Eq '^  when       (up to now, from )?20[0-9-]+ [0-9:]+ UTC at load [0-9.]+ on [0-9]+ CPUs \(load now [0-9.]+' "$T/out"
check $? "--inspect says when and under what load the figures were measured ($(grep '^  when' "$T/out" | head -c 120))"

# forge SC: machine line $1 (sed expression on it), every figure at load $2, mem_bw 1000 B/s
forge() {
    awk -v ld="$2" 'NR == 1 { print; next } { if ($1 == "mem_bw") $2 = 1000; $4 = ld; print }' "$SC" |
        sed "1$1" >"$SC.new" && mv "$SC.new" "$SC"
}
absurd() { grep -q "memory read 0.0 GB/s" "$T/out"; }
now() { cut -d' ' -f1 /proc/loadavg; }

forge 's/^//' "$(now)"
"$K3" --inspect "$M" >"$T/out" 2>&1
absurd && grep -q "cached in" "$T/out"; check $? "control: a cache of this machine at today's load is used (the forged figure shows)"

forge 's/flags=[0-9a-f]*/flags=0123456789abcdef/' "$(now)"
"$K3" --inspect "$M" >"$T/out" 2>&1
! absurd && grep -q "measured now" "$T/out" && ! grep -q "flags=0123456789abcdef" "$SC" && ! grep -q "^mem_bw 1000 " "$SC"
check $? "a cache written with another CPU flag set is not used: measured again, the file written anew"

high=$(awk -v l="$(now)" 'BEGIN { printf "%.2f", 4 * l + 16 }')
forge 's/^//' "$high"
"$K3" --inspect "$M" >"$T/out" 2>&1
! absurd && grep -q "measured now" "$T/out" && [ "$(grep -c '^mem_bw ' "$SC")" -eq 2 ]
check $? "a cache written under load $high (today $(now)) is not used: measured again and appended"

forge 's/^//' "$(now)"
"$K3" --inspect --measure "$M" >"$T/out" 2>&1; rc=$?
[ $rc -eq 0 ] && ! absurd && grep -q "measured now" "$T/out"; check $? "--inspect --measure measures again over a usable cache (rc $rc)"

"$K3" --measure "$M" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "goes with --inspect" "$T/err"; check $? "--measure alone: exit 2 and why ($(head -c 120 "$T/err"))"

forge 's/^//' 1000
K3_TEST_LOAD=1000 "$K3" --inspect "$M" >"$T/out" 2>&1; rc=$?
[ $rc -eq 0 ] && absurd && grep -q "cached in" "$T/out" && grep -q "(load now 1000.00" "$T/out"
check $? "K3_TEST_LOAD=1000: a cache written at load 1000 is used, whatever the machine's load ($(now)) (rc $rc)"
K3_TEST_LOAD=abc "$K3" --inspect "$M" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "K3_TEST_LOAD: 'abc' is not" "$T/err"; check $? "K3_TEST_LOAD=abc: exit 1 naming the variable ($(head -c 120 "$T/err"))"
