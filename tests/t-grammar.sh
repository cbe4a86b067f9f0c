#!/bin/sh
# t-grammar.sh: structured output on k3-nano, checked by an independent validator.
# slow
# run-once
#
# First, with no validator: the masks are exact on the release-size vocabulary (test-grammar
# --release-vocab: every checked id's mask bit equals k3_gmatch_allows along walks of the corpus
# and json_object). Installs ajv (draft 2020-12) and ajv-formats from the npm registry into a cache folder outside
# the repository (K3_AJV_JS, default ~/.cache/k3chat/ajv-js; never committed). Then:
#   - the 45-schema corpus (tests/fixtures/grammar-corpus.jsonl) x 20 seeds at temperature 1
#     (tests/test-grammar-nano --emit: the engine loop of --json-schema): every output ends with
#     <|end_of_msg|>, parses and validates;
#   - tests/fixtures/grammar-walk.jsonl (117 schemas: patterns with Unicode classes, patterns and formats within lengths and beside each other, enum/const
#     with other keywords, number bounds (fractional ones too), multipleOf (fractions over a power of 2, 0.01 and 0.1 between bounds, past 1000), uniqueItems over enums and booleans, a tagged oneOf, tricky strings)
#     x 40 walks, each token drawn uniformly from the mask (test-grammar --walk): every finished document validates;
#   - tests/fixtures/grammar-walk-tools.jsonl (17 string schemas: patterns, formats, both at once, and lengths) x 40
#     walks of a tool call whose one argument has that schema (test-grammar --walk-tools): every raw
#     value validates;
#   - tests/fixtures/grammar-keep.tsv (670 values beside a format or a multipleOf: edges and random edits) as
#     enum values (test-grammar --keep): each is kept exactly when ajv + ajv-formats validates it;
#   - k3chat --prompt --json-schema FILE, one seed per schema: stdout is one valid document;
#   - --json: one JSON object; an unsupported keyword: status 1 naming it and its path;
#     --max-tokens too small: status 1 naming the reason.
# No node/npm or no registry: the ajv checks SKIP with the reason, never PASS.
. "$K3_SRC/tests/count.sh"
set -u
: "${K3_BUILD:?}" "${K3_SRC:?}" "${K3_TMP:?}"
K3="$K3_BUILD/k3chat"
M="$K3_SRC/models/k3-nano"
CORPUS="$K3_SRC/tests/fixtures/grammar-corpus.jsonl"
cache=${K3_AJV_JS:-${HOME:-/tmp}/.cache/k3chat/ajv-js}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# --- exact masks on the release-size vocabulary (163,840 ids; k3-mkmodel writes it in K3_TMP) ---
(cd "$K3_SRC" && K3_TMP="$K3_TMP" K3_BUILD="$K3_BUILD" "$K3_BUILD/tests/test-grammar" --release-vocab) \
    > "$K3_TMP/exact.log" 2>&1
rc=$?
grep -E '^(PASS|FAIL): ' "$K3_TMP/exact.log"
[ $rc -eq 0 ] || grep -q '^FAIL: ' "$K3_TMP/exact.log" ||
    echo "FAIL: test-grammar --release-vocab exited with status $rc: $(tail -n 1 "$K3_TMP/exact.log")"

# --- the command line, no validator needed ---
printf '{"type":"object","properties":{"a":{"type":"string","contentMediaType":"text/html"}}}' > "$K3_TMP/bad.json"
"$K3" "$M" --prompt hi --json-schema "$K3_TMP/bad.json" --think off >"$K3_TMP/bad.out" 2>"$K3_TMP/bad.err"
rc=$?
# ... and said before the model loads, as a missing file is (it used to come after the load)
if [ $rc -ne 0 ] && grep -q '"contentMediaType" at #/properties/a' "$K3_TMP/bad.err" && [ ! -s "$K3_TMP/bad.out" ] &&
    ! grep -q 'k3chat: load\|memory fit' "$K3_TMP/bad.err"; then
    echo "PASS: an unsupported keyword: status $rc, named with its path before the model loads, nothing on stdout"
else
    echo "FAIL: an unsupported keyword: status $rc, stderr: $(tail -n 1 "$K3_TMP/bad.err")"
fi
# a schema file that cannot be read is said before the model loads (the release's load takes
# minutes): no 'loaded' line before the error, and the reason of a read error named
for f in "$K3_TMP/none.json" "$K3_TMP"; do
    "$K3" "$M" --prompt hi --json-schema "$f" >"$K3_TMP/nf.out" 2>"$K3_TMP/nf.err"
    rc=$?
    if [ $rc = 1 ] && ! grep -q 'k3chat: load' "$K3_TMP/nf.err" &&
        grep -qE -- "--json-schema: cannot (open|read) $f: (No such file or directory|Is a directory)" "$K3_TMP/nf.err"; then
        echo "PASS: --json-schema $f: status 1 before the model loads ($(tail -n 1 "$K3_TMP/nf.err"))"
    else
        echo "FAIL: --json-schema $f: status $rc, stderr: $(head -c 300 "$K3_TMP/nf.err")"
    fi
done
printf '{"type":"array","items":{"type":"integer"},"minItems":50}' > "$K3_TMP/long.json"
"$K3" "$M" --prompt hi --json-schema "$K3_TMP/long.json" --think off --max-tokens 3 >"$K3_TMP/long.out" 2>"$K3_TMP/long.err"
rc=$?
if [ $rc -ne 0 ] && grep -q 'stopped before the JSON document was complete (max tokens)' "$K3_TMP/long.err"; then
    echo "PASS: --max-tokens 3 on a long document: status $rc naming the reason"
else
    echo "FAIL: --max-tokens 3 on a long document: status $rc, stderr: $(tail -n 1 "$K3_TMP/long.err")"
fi
"$K3" "$M" --json --ids "1 2" >/dev/null 2>"$K3_TMP/ids.err"
grep -q -- '--json shapes the answer of --prompt only' "$K3_TMP/ids.err" &&
    echo "PASS: --json without --prompt is a usage error" || echo "FAIL: --json without --prompt: $(cat "$K3_TMP/ids.err")"

# --- thinking on: the reasoning is free, the mask applies from the response channel on. k3-nano
# seldom opens that channel by itself: --think-budget 8 closes the reasoning after 8 tokens. The
# reasoning (stderr's last line) must be the same with and without --json (same seed: masked or
# not, a draw in the think channel is the same draw), and stdout one JSON object.
good=0
for seed in 1 2 3; do
    "$K3" "$M" --prompt "Reply in JSON." --json --think on --think-budget 8 --temp 1 --seed $seed --max-tokens 200 \
        >"$K3_TMP/th.out" 2>"$K3_TMP/th.err"
    rc=$?
    "$K3" "$M" --prompt "Reply in JSON." --think on --think-budget 8 --temp 1 --seed $seed --max-tokens 200 \
        >"$K3_TMP/tf.out" 2>"$K3_TMP/tf.err"
    r1=$(tail -n 1 "$K3_TMP/th.err"); r2=$(tail -n 1 "$K3_TMP/tf.err")
    if [ $rc -eq 0 ] && [ -n "$r1" ] && [ "$r1" = "$r2" ] && [ "${r1#\{}" = "$r1" ] &&
        /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if isinstance(d, dict) else 1)' \
            "$K3_TMP/th.out"; then
        good=$((good + 1))
    else
        echo "# seed $seed: rc $rc, reasoning '$r1' vs '$r2' without --json, stdout: $(head -c 200 "$K3_TMP/th.out")"
    fi
done
[ $good -eq 3 ] && echo "PASS: --json with thinking on and --think-budget 8, 3 seeds: the reasoning is the unmasked one, stdout one JSON object" ||
    echo "FAIL: --json with thinking on and --think-budget 8: $good of 3 seeds"

command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (needed for ajv)"; exit 0; }
command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is not installed (needed for ajv)"; exit 0; }
mkdir -p "$cache" || { echo "SKIP: cannot create $cache"; exit 0; }
[ -f "$cache/package.json" ] || echo '{"name":"k3chat-ajv","private":true}' > "$cache/package.json"
if [ ! -f "$cache/node_modules/ajv-formats/package.json" ]; then
    if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund ajv@8.17.1 ajv-formats@3.0.1) >"$K3_TMP/npm.log" 2>&1; then
        echo "SKIP: npm install ajv ajv-formats failed: $(grep -i err "$K3_TMP/npm.log" | head -n 1)"
        exit 0
    fi
fi
export NODE_PATH="$cache/node_modules"

# --- the corpus x 20 seeds through the engine loop ---
"$K3_BUILD/tests/test-grammar-nano" --emit "$K3_TMP/corpus.tsv" 20 > "$K3_TMP/emit.log" 2>&1 ||
    { echo "FAIL: test-grammar-nano --emit: $(grep FAIL "$K3_TMP/emit.log" | head -n 2)"; }
node "$K3_SRC/tests/grammar-validate.cjs" "$CORPUS" "$K3_TMP/corpus.tsv" "corpus x 20 seeds, temperature 1"

# --- uniform random walks over the masks (no model): what a model's distribution seldom reaches ---
(cd "$K3_SRC" && "$K3_BUILD/tests/test-grammar" --walk tests/fixtures/grammar-walk.jsonl "$K3_TMP/walk.tsv" 40) \
    > "$K3_TMP/walk.log" 2>&1
grep -E '^(PASS|FAIL): ' "$K3_TMP/walk.log"
node "$K3_SRC/tests/grammar-validate.cjs" "$K3_SRC/tests/fixtures/grammar-walk.jsonl" "$K3_TMP/walk.tsv" \
    "grammar-walk.jsonl x 40 uniform walks"
# the same through a tool call's string argument, written raw (its pattern and lengths over the
# characters themselves): the value, as a JSON string, against the argument's schema
(cd "$K3_SRC" && "$K3_BUILD/tests/test-grammar" --walk-tools tests/fixtures/grammar-walk-tools.jsonl \
    "$K3_TMP/walk-tools.tsv" 40) > "$K3_TMP/walk-tools.log" 2>&1
grep -E '^(PASS|FAIL): ' "$K3_TMP/walk-tools.log" | sed 's/^\(PASS\|FAIL\): --walk/&-tools/'
node "$K3_SRC/tests/grammar-validate.cjs" "$K3_SRC/tests/fixtures/grammar-walk-tools.jsonl" "$K3_TMP/walk-tools.tsv" \
    "grammar-walk-tools.jsonl x 40 uniform walks of a tool call's raw string argument" 15

# --- enum values beside a format: kept exactly when ajv + ajv-formats validates them ---
(cd "$K3_SRC" && "$K3_BUILD/tests/test-grammar" --keep tests/fixtures/grammar-keep.tsv "$K3_TMP/keep.tsv") \
    > "$K3_TMP/keep.log" 2>&1
grep -E '^(PASS|FAIL): ' "$K3_TMP/keep.log"
node "$K3_SRC/tests/grammar-keep.cjs" "$K3_SRC/tests/fixtures/grammar-keep.tsv" "$K3_TMP/keep.tsv" \
    "grammar-keep.tsv (formats' edges and random edits, multipleOf)"

# --- the command line: one seed per schema, stdout validated ---
: > "$K3_TMP/cli.tsv"
n=0
while IFS= read -r schema; do
    n=$((n + 1))
    printf '%s' "$schema" > "$K3_TMP/s.json"
    out=$("$K3" "$M" --prompt "Reply in JSON." --json-schema "$K3_TMP/s.json" --think off --temp 1 --seed $n \
          --max-tokens 256 2>"$K3_TMP/cli.err")
    rc=$?
    [ $rc -eq 0 ] && st=end || st="rc$rc"
    printf '%s\t1\t%s\t%s\n' "$n" "$st" "$out" >> "$K3_TMP/cli.tsv"
done < "$CORPUS"
node "$K3_SRC/tests/grammar-validate.cjs" "$CORPUS" "$K3_TMP/cli.tsv" "k3chat --prompt --json-schema"

# --- --json: one JSON object ---
"$K3" "$M" --prompt "Reply in JSON." --json --think off --temp 1 --seed 3 --max-tokens 256 > "$K3_TMP/obj.out" 2>"$K3_TMP/obj.err"
rc=$?
if [ $rc -eq 0 ] && node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    process.exit(d !== null && typeof d === "object" && !Array.isArray(d) ? 0 : 1)' "$K3_TMP/obj.out"; then
    echo "PASS: --json: stdout is one JSON object ($(wc -c < "$K3_TMP/obj.out") bytes)"
else
    echo "FAIL: --json: status $rc, stdout: $(head -c 200 "$K3_TMP/obj.out"), stderr: $(tail -n 1 "$K3_TMP/obj.err")"
fi
