#!/bin/sh
# t-fuzz.sh: every libFuzzer target runs briefly (20000 inputs, fixed seed, the same run each
# time: tests/fuzz/run.sh says how) on its corpus without a finding (make check).
# The fuzz tree is built with clang (make fuzz-build); a longer run is `make fuzz`.
# run-once
# slow
# after-build
. "$K3_SRC/tests/count.sh"
cd "$K3_SRC" || exit 1
if ! command -v clang >/dev/null 2>&1; then
    echo "SKIP: clang not installed: no fuzz targets"
    exit 0
fi
if ! make -s fuzz-build >"$K3_TMP/fuzz-build.log" 2>&1; then
    echo "FAIL: make fuzz-build"; tail -n 30 "$K3_TMP/fuzz-build.log"; exit 1
fi
echo "PASS: fuzz targets build"
# a fixed number of inputs from a fixed seed: the same run every time (make fuzz explores)
FUZZ_RUNS=${K3_FUZZ_RUNS:-20000} sh tests/fuzz/run.sh build-fuzz 0
exit 0
