#!/bin/sh
# t-tiktoken.sh: the encoder against tiktoken itself, on a generated multilingual corpus.
# run-once
#
# Installs tiktoken's JavaScript ports from the npm registry into a cache folder outside
# the repository (K3_TIKTOKEN_JS, default ~/.cache/k3chat/tiktoken-js; never committed):
# js-tiktoken (pure JS) and tiktoken (the Rust crate built to WASM, when it installs).
# Then: o200k_base's ranks -> a tiktoken.model; tools/mkcorpus.js -> 1.2 MB corpus;
# `k3chat --tokenize` vs the reference, every id, for the o200k pattern and for the Kimi
# pattern (the release's regex on the same ranks, plus the release wrapper's 400,000 /
# 25,000 cutting, reproduced in tools/tiktoken-ref.cjs). js-tiktoken gets the corpus
# without the 25,000+ char runs (its quadratic BPE needs minutes on those).
# No node/npm or no registry: SKIP with the reason, never PASS.
# slow
. "$K3_SRC/tests/count.sh"
set -u
: "${K3_BUILD:?}" "${K3_SRC:?}" "${K3_TMP:?}"
K3="$K3_BUILD/k3chat"
REF="$K3_SRC/tools/tiktoken-ref.cjs"
# (under HOME, not XDG_CACHE_HOME: tests/run.sh gives each test a cache folder of its own, which
# made every run install again)
cache=${K3_TIKTOKEN_JS:-${HOME:-/tmp}/.cache/k3chat/tiktoken-js}

command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (needed for tiktoken's JS port)"; exit 0; }
command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is not installed (needed for tiktoken's JS port)"; exit 0; }
mkdir -p "$cache" || { echo "SKIP: cannot create $cache"; exit 0; }
[ -f "$cache/package.json" ] || echo '{"name":"k3chat-tiktoken-ref","private":true}' > "$cache/package.json"
# one install at a time into the shared folder (two suites may run at once)
exec 9>"$cache/.lock" && command -v flock >/dev/null 2>&1 && flock 9
if [ ! -f "$cache/node_modules/js-tiktoken/package.json" ]; then
    if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund js-tiktoken@1.0.21) >"$K3_TMP/npm.log" 2>&1; then
        echo "SKIP: npm install js-tiktoken failed: $(grep -i err "$K3_TMP/npm.log" | head -n 1)"
        exit 0
    fi
fi
if [ ! -f "$cache/node_modules/tiktoken/package.json" ]; then
    (cd "$cache" && timeout 300 npm install --no-audit --no-fund tiktoken@1.0.22) >"$K3_TMP/npm2.log" 2>&1 || true
fi
exec 9>&-
export NODE_PATH="$cache/node_modules"

node "$K3_SRC/tools/mkcorpus.js" "$K3_TMP/corpus.txt" 1.2 || { echo "FAIL: mkcorpus.js"; exit 1; }
node "$K3_SRC/tools/mkcorpus.js" "$K3_TMP/nolong.txt" 1.2 nolong || { echo "FAIL: mkcorpus.js nolong"; exit 1; }
node "$REF" export "$K3_TMP/o200k" || { echo "FAIL: exporting o200k_base ranks from js-tiktoken"; exit 1; }
bytes=$(wc -c < "$K3_TMP/corpus.txt")
[ "$bytes" -ge 1000000 ] && echo "PASS: corpus is $bytes bytes (>= 1 MB)" || echo "FAIL: corpus is only $bytes bytes"

# compare NAME REF_IDS OUR_IDS
compare() {
    if cmp -s "$2" "$3"; then
        echo "PASS: $1: every token identical ($(wc -w < "$3") tokens)"
    else
        tr ' ' '\n' < "$2" > "$K3_TMP/a.l"; tr ' ' '\n' < "$3" > "$K3_TMP/b.l"
        echo "FAIL: $1: encodings differ; first difference (line = token index; < tiktoken, > k3chat):"
        diff "$K3_TMP/a.l" "$K3_TMP/b.l" | head -n 6
    fi
}

have_wasm=0
node -e 'require("tiktoken/lite")' 2>/dev/null && have_wasm=1
[ $have_wasm = 1 ] || echo "SKIP: WASM tiktoken did not install ($(grep -i err "$K3_TMP/npm2.log" 2>/dev/null | head -n 1)); js-tiktoken only"

for pat in o200k kimi; do
    "$K3" --tokenize "$K3_TMP/o200k" "$K3_TMP/corpus.txt" --pattern $pat > "$K3_TMP/c-$pat.ids" ||
        { echo "FAIL: k3chat --tokenize --pattern $pat"; continue; }
    if [ $have_wasm = 1 ]; then
        node "$REF" encode wasm $pat "$K3_TMP/corpus.txt" > "$K3_TMP/w-$pat.ids" &&
            compare "$pat pattern vs tiktoken (Rust/WASM), full corpus" "$K3_TMP/w-$pat.ids" "$K3_TMP/c-$pat.ids"
    fi
    "$K3" --tokenize "$K3_TMP/o200k" "$K3_TMP/nolong.txt" --pattern $pat > "$K3_TMP/cn-$pat.ids" &&
        node "$REF" encode js $pat "$K3_TMP/nolong.txt" > "$K3_TMP/j-$pat.ids" &&
        compare "$pat pattern vs js-tiktoken, corpus without long runs" "$K3_TMP/j-$pat.ids" "$K3_TMP/cn-$pat.ids"
done

# Rust-regex details the JS port does not share, against the WASM build only: \s is
# White_Space (U+0085 yes, U+FEFF no) and (?i) folds U+017F (long s) into 's.
if [ $have_wasm = 1 ]; then
    # (js-tiktoken encodes "a <U+0085>b" and "x <U+FEFF>y" differently: its \s is JS's)
    printf 'a \302\205b x \357\273\277y x  \357\273\277 don\047\305\277 DON\047\305\277T \302\205\n' > "$K3_TMP/edge.txt"
    for pat in o200k kimi; do
        "$K3" --tokenize "$K3_TMP/o200k" "$K3_TMP/edge.txt" --pattern $pat > "$K3_TMP/ce.ids" &&
            node "$REF" encode wasm $pat "$K3_TMP/edge.txt" > "$K3_TMP/we.ids" &&
            compare "$pat pattern vs tiktoken (WASM): U+0085, U+FEFF, long s after an apostrophe" "$K3_TMP/we.ids" "$K3_TMP/ce.ids"
    done
fi

# and back: --detokenize restores the corpus byte for byte
"$K3" --detokenize "$K3_TMP/o200k" "$K3_TMP/c-kimi.ids" --pattern kimi > "$K3_TMP/back.txt" &&
    cmp -s "$K3_TMP/back.txt" "$K3_TMP/corpus.txt" &&
    echo "PASS: --detokenize of the --tokenize ids restores the corpus" ||
    echo "FAIL: --detokenize does not restore the corpus"
exit 0
