#!/bin/sh
# speed-check.sh [BUILD [DIR]]: issue 21's validation of the speed estimate, in one command, for
# an idle machine. Makes two k3-repack --bits 4 containers under DIR (default /var/tmp/k3speed,
# ~6.5 GB of disk at the peak, deleted at the end) and runs `k3-bench release` on each with 3
# rounds (medians):
#   c2   the release replica with --layers 2 (zero weights, sparse: tied router scores send every
#        token to the same 16 experts, so it checks the cost model with that routing)
#   sc2  the slice preset with --layers 2 (random weights: routing close to flat, so the
#        estimate --inspect prints, release_*_flat, is checked too)
# The BENCH lines' ratios are measured / estimated (issue 21: 0.7 .. 1.3). Prints the elapsed
# time of each step; K3_MEM_GB=5.5 caps the plan (the expert cache takes what is left). OpenMP's
# wait policy is left at its default, as k3chat runs: OMP_WAIT_POLICY=passive puts a thread to
# sleep after every product, and on a VM each wake-up then costs tens of microseconds (the
# slice preset decoded 1.8x slower that way, tenth session).
set -eu
b=${1:-build}
d=${2:-/var/tmp/k3speed}
t0=$(date +%s)
step() { echo "speed-check: $1 ($(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"; }
mkdir -p "$d"
rm -rf "$d/r2" "$d/c2" "$d/s2" "$d/sc2"
"$b/k3-mkmodel" --preset release --layers 2 --quiet "$d/r2" >/dev/null
"$b/k3-repack" "$d/r2" "$d/c2" --bits 4 --quiet
rm -rf "$d/r2"
"$b/k3-mkmodel" --preset slice --layers 2 --seed 1 --quiet "$d/s2" >/dev/null
"$b/k3-repack" "$d/s2" "$d/sc2" --bits 4 --quiet
rm -rf "$d/s2"
step "containers made"
for m in c2 sc2; do
    K3_VK=0 K3_MEM_GB=5.5 K3_BENCH_ROUNDS=3 K3_BENCH_RELEASE="$d/$m" \
        "$b/k3-bench" release
    step "$m measured"
done
rm -rf "$d/c2" "$d/sc2"
