#!/bin/sh
# compare.sh GGML_DIR [ROUNDS]: ggml's CPU matmul (one thread, 3072 x 3584, 32 and 128 columns)
# beside k3chat's (build/k3-bench matmul32 / matmul128), alternating, ROUNDS rounds (default 3).
# GGML_DIR is a ggml checkout (github.com/ggml-org/ggml; BENCHMARKS.md names the commit); it is
# built twice with its own CMake (native flags; as ggml ships and with GGML_LLAMAFILE=ON, as
# llama.cpp builds it) under GGML_DIR/build-k3*, and bench/ggml/ggml-mm.c is compiled against
# each. Run from the repository root after `make`. Nothing of ggml enters this tree.
set -eu
g=${1:?usage: compare.sh GGML_DIR [ROUNDS]}
rounds=${2:-3}
[ -x build/k3-bench ] || { echo "compare.sh: build/k3-bench missing (run make first)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/k3ggml.XXXXXX")
for v in plain lf; do
    lf=OFF; [ "$v" = lf ] && lf=ON
    cmake -S "$g" -B "$g/build-k3-$v" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_LLAMAFILE=$lf -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
        -DBUILD_SHARED_LIBS=OFF >/dev/null
    ninja -C "$g/build-k3-$v" >/dev/null
    l="$g/build-k3-$v/src"
    cc -O2 -I"$g/include" -o "$out/ggml-mm-$v" bench/ggml/ggml-mm.c "$l/libggml.a" "$l/libggml-cpu.a" \
        "$l/libggml-base.a" -lstdc++ -lm -fopenmp -lpthread
done
echo "# load: $(cat /proc/loadavg)"
for r in $(seq "$rounds"); do
    for n in 32 128; do
        OMP_NUM_THREADS=1 build/k3-bench "matmul$n" | grep 'idot_matmul.*gops'
        for t in q8_0 q4_0 mxfp4; do
            OMP_NUM_THREADS=1 "$out/ggml-mm-plain" $t $n 0 9 | sed 's/^/as shipped: /'
            OMP_NUM_THREADS=1 "$out/ggml-mm-lf" $t $n 0 9 | sed 's/^/llamafile: /'
            # the repacked layouts (x86: q4_0 and mxfp4; q8_0 has none there)
            [ $t = q8_0 ] || OMP_NUM_THREADS=1 "$out/ggml-mm-plain" $t $n 1 9 | grep -v '^repack' |
                sed 's/^/repacked: /'
        done
    done
done
echo "# load: $(cat /proc/loadavg)"
rm -rf "$out"
