#!/bin/sh
# t-fuzz.sh: every libFuzzer target runs briefly on its corpus without a finding (make check).
# The fuzz tree is built with clang (make fuzz-build); a longer run is `make fuzz`.
# run-once
cd "$K3_SRC" || exit 1
if ! command -v clang >/dev/null 2>&1; then
    echo "SKIP: clang not installed: no fuzz targets"
    exit 0
fi
if ! make -s fuzz-build >"$K3_TMP/fuzz-build.log" 2>&1; then
    echo "FAIL: make fuzz-build"; tail -n 30 "$K3_TMP/fuzz-build.log"; exit 1
fi
echo "PASS: fuzz targets build"
sh tests/fuzz/run.sh build-fuzz "${K3_FUZZ_SECONDS:-8}"
exit 0
