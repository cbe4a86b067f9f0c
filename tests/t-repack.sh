#!/bin/sh
# t-repack.sh: build/k3-repack writes a k3 container (src/format/repack.h) that k3chat runs bit-identically
# to load-time quantization of the source (hidden states and logits via K3_TRACE / K3_LOGITS,
# compared with cmp), at 8 and 4 bits, with mixed classes, with K3_MMAP=1 and with O_DIRECT reads
# at open (the bytes and calls an open reads, from K3_VERBOSE's open line); resume after a
# kill -9 mid-shard (a dead run's .NAME.PID.tmp removed, a live one's kept); a container
# rewritten at other bits and killed is no model until a rerun completes it; a DST holding a
# model k3-repack did not write is refused; ENOSPC and SIGTERM mid-shard (tests/faultinj.c)
# leave no .partial and no index; disjoint --shards runs; duplicate names; --verify-full; bad arguments and
# a corrupt source; K3_BITS downcast and K3_MMAP refusals; --inspect reports (and sizes) a container
# at its stored bits unless K3_BITS etc. are set.
# slow
. "$K3_SRC/tests/lib.sh"
set -u
B=$K3_BUILD
T=$K3_TMP
RP="$B/k3-repack"
PY=/usr/bin/python3

tiny_model "$T/src" 3
ids="5 17 300 42 7 1000 3 99 12 8 640 2"

# run DIR TAG [VAR=value...]: greedy ids, logits and trace of DIR into $T/TAG.{ids,l,t}
run() {
    d=$1; tag=$2; shift 2
    env "$@" K3_LOGITS="$T/$tag.l" K3_TRACE="$T/$tag.t" "$B/k3chat" "$d" --ids "$ids" \
        --max-tokens 4 --temp 0 >"$T/$tag.ids" 2>"$T/$tag.err"
}
same() { # tagA tagB: ids, logits and hidden states identical, all non-empty
    [ -s "$T/$1.l" ] && [ -s "$T/$1.t" ] && cmp -s "$T/$1.ids" "$T/$2.ids" &&
        cmp -s "$T/$1.l" "$T/$2.l" && cmp -s "$T/$1.t" "$T/$2.t"
}
repack() { # args...: k3-repack, stderr in $T/rp.err
    "$RP" "$@" 2>"$T/rp.err"
}

# ---- bit identity ----------------------------------------------------------------------------
repack "$T/src" "$T/c8" --bits 8; ok $? "repack --bits 8 ($(tail -n 1 "$T/rp.err" | cut -c 1-150))"
repack "$T/src" "$T/c4" --bits 4 --jobs 2; ok $? "repack --bits 4 --jobs 2"
repack "$T/src" "$T/cx" --bits 8 --mla-bits 4 --head-bits 32 --quiet; ok $? "repack --bits 8 --mla-bits 4 --head-bits 32"
[ ! -s "$T/rp.err" ]; ok $? "--quiet prints nothing"

# ---- --inspect reports the bits the engine would run at (rp_run_bits) ------------------------
insp() { # DIR TAG [VAR=value...]: --inspect report into $T/TAG.insp
    d=$1; tag=$2; shift 2
    env -u K3_BITS -u K3_MLA_BITS -u K3_HEAD_BITS "$@" "$B/k3chat" --inspect "$d" >"$T/$tag.insp" 2>&1
}
dense_b() { # TAG: the dense-matrix estimate of $T/TAG.insp in bytes
    awk '/dense matrices/ { m = $5 == "kB" ? 1e3 : $5 == "MB" ? 1e6 : $5 == "GB" ? 1e9 : 1; printf "%.0f", $4 * m }' "$T/$1.insp"
}
insp "$T/c8" i8; insp "$T/c4" i4; insp "$T/c4" i4e K3_BITS=8
grep -qF "K3_BITS=4 (container) K3_MLA_BITS=4 (container) K3_HEAD_BITS=4 (container)" "$T/i4.insp"
ok $? "--inspect on an int4 container, bits unset: the container's bits ($(grep '^memory' "$T/i4.insp" | cut -c 14-110))"
d4=$(dense_b i4); d8=$(dense_b i8); d4e=$(dense_b i4e)
[ -n "$d4" ] && [ -n "$d8" ] && [ "$d4" -lt "$d8" ]; ok $? "--inspect: int4 container's dense matrices smaller than int8's ($d4 < $d8 bytes)"
grep -qF "K3_BITS=8 K3_MLA_BITS=8 K3_HEAD_BITS=8 " "$T/i4e.insp" && [ "$d4e" = "$d8" ]
ok $? "--inspect: K3_BITS=8 on the int4 container overrides it (MLA/head follow; dense $d4e bytes as int8)"
insp "$T/cx" ix
grep -qF "K3_BITS=8 (container) K3_MLA_BITS=4 (container) K3_HEAD_BITS=32 (container)" "$T/ix.insp"
ok $? "--inspect on the mixed container: its three bits"

run "$T/src" s8 K3_BITS=8 K3_MLA_BITS=8 K3_HEAD_BITS=8
run "$T/c8" c8
run "$T/c8" c8m K3_MMAP=1
same s8 c8; ok $? "int8 container (bits unset) = source quantized at load with K3_BITS=8: ids, logits, hidden states ($(cat "$T/c8.ids"))"
same s8 c8m; ok $? "int8 container with K3_MMAP=1: bit-identical too"
run "$T/c8" c8e K3_BITS=8
same s8 c8e; ok $? "int8 container with K3_BITS=8 set explicitly: bit-identical"

run "$T/src" s4 K3_BITS=4 K3_MLA_BITS=4 K3_HEAD_BITS=4
run "$T/c4" c4
run "$T/c4" c4m K3_MMAP=1
same s4 c4; ok $? "int4 container = source with K3_BITS=4 ($(cat "$T/c4.ids"))"
same s4 c4m; ok $? "int4 container with K3_MMAP=1: bit-identical"
! cmp -s "$T/s4.l" "$T/s8.l"; ok $? "4-bit and 8-bit logits differ (the comparison can fail)"

# ---- what the open of a container reads (K3_VERBOSE's open line; src/format/st.c st_io) --------
# Each tensor outside the routed experts is read once, in one call (none here is over 1 GB), and
# its bytes are what the open loads, less the experts the expert tier read: page-sized reads, a
# second read or quantize-on-open would show here without any timing.
n_rest=$($PY -c "import json,sys; w=json.load(open(sys.argv[1]))['weight_map']; print(sum(1 for k in w if '.experts.' not in k and not k.startswith(('vision_tower', 'mm_projector'))))" "$T/c4/model.safetensors.index.json")
openline() { # TAG: "loaded experts bytes calls direct" of $T/TAG.err's open line
    sed -n 's/.*; loaded \([0-9]*\) bytes: \([0-9]*\) of routed experts.* with \([0-9]*\) bytes read in \([0-9]*\) calls (\([0-9]*\) with O_DIRECT).*/\1 \2 \3 \4 \5/p' "$T/$1.err"
}
run "$T/c4" c4v K3_VERBOSE=1
run "$T/c4" c4d K3_VERBOSE=1 K3_TEST_DIRECT_MIN=1
run "$T/c4" c4b K3_VERBOSE=1 K3_DIRECT=0
set -- $(openline c4v) x x x x x
[ "$1" != x ] && [ "$3" = $(($1 - $2)) ] && [ "$4" = "$n_rest" ]
ok $? "open of the int4 container: $3 bytes read in $4 calls = the $1 bytes loaded less $2 of experts, one call per tensor ($n_rest outside the experts)"
set -- $(openline c4b) x x x x x
[ "$1" != x ] && [ "$3" = $(($1 - $2)) ] && [ "$4" = "$n_rest" ] && [ "$5" = 0 ]
ok $? "K3_DIRECT=0: the same reads, none with O_DIRECT ($3 bytes, $4 calls, $5 direct)"
set -- $(openline c4d) x x x x x
if [ "$1" = x ]; then
    ok 1 "K3_TEST_DIRECT_MIN=1: no open line ($(tail -c 200 "$T/c4d.err"))"
elif [ "$5" = 0 ]; then
    echo "SKIP: K3_TEST_DIRECT_MIN=1: O_DIRECT reads at open (the filesystem of $T refuses O_DIRECT)"
else
    rest=$(($1 - $2))
    [ "$4" = "$n_rest" ] && [ "$3" -ge "$rest" ] && [ "$3" -lt $((rest + 8192 * $4)) ]
    ok $? "K3_TEST_DIRECT_MIN=1: $5 bytes with O_DIRECT; $3 bytes read in $4 calls for $rest (each span under 8 KB of alignment more)"
    same s4 c4d; ok $? "int4 container read with O_DIRECT (K3_TEST_DIRECT_MIN=1): bit-identical to the source with K3_BITS=4"
fi

run "$T/src" sx K3_BITS=8 K3_MLA_BITS=4 K3_HEAD_BITS=32
run "$T/cx" cx
run "$T/cx" cxm K3_MMAP=1
same sx cx; ok $? "mixed container (8/MLA 4/head F32) = source with K3_BITS=8 K3_MLA_BITS=4 K3_HEAD_BITS=32"
same sx cxm; ok $? "mixed container with K3_MMAP=1: bit-identical"

"$B/k3-mkmodel" --preset tiny --seed 3 --single --no-prefix --quiet "$T/single" >/dev/null 2>&1 &&
    repack "$T/single" "$T/cs" --bits 8 --quiet; rc=$?
run "$T/cs" cs
[ "$rc" = 0 ] && same s8 cs; ok $? "a single-file source without prefix (--single --no-prefix): container bit-identical too"

# ---- container structure ---------------------------------------------------------------------
cat >"$T/check.py" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
def ok(c, m): print(("PASS: " if c else "FAIL: ") + m)
cfg = json.load(open(os.path.join(d, "config.json")))
kc = cfg.get("k3_container", {})
ok(kc.get("version") == 1 and kc.get("bits") == 8 and kc.get("mla_bits") == 8, "config.json carries k3_container (version 1, bits 8)")
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
wm = idx["weight_map"]
ok(not any(k.startswith(("vision_tower.", "mm_projector.")) or ".vision_tower." in k for k in wm), "no vision tensors in the index")
ok(all(os.path.exists(os.path.join(d, f)) for f in set(wm.values())), "every indexed shard exists")
total, order_ok, back_ok, align_ok, q_ok = 0, True, True, True, True
for f in sorted(set(wm.values())):
    b = open(os.path.join(d, f), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__")
    if (8 + n) % 64: align_ok = False
    if meta.get("k3.container") != "1": q_ok = False
    ents = sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])
    for k, v in ents:
        total += v["data_offsets"][1] - v["data_offsets"][0]
        if v["dtype"] == "F32" and v["data_offsets"][0] % 4: align_ok = False
        if k.endswith(".qs") and ("k3.q." + k[:-3]) not in meta: q_ok = False
    ex = [(k, v) for k, v in ents if ".experts." in k]
    ids = []
    for k, v in ex:
        parts = k.split(".")
        i = parts.index("experts")
        key = (int(parts[2]), int(parts[i + 1]))
        if not ids or ids[-1] != key: ids.append(key)
    if ids != sorted(ids) or len(ids) != len(set(ids)): order_ok = False
    for a in range(0, len(ex), 6):  # six per expert, back to back
        grp = ex[a:a + 6]
        if len({g[0].split(".experts.")[1].split(".")[0] for g in grp}) != 1: back_ok = False
        for p, q in zip(grp, grp[1:]):
            if p[1]["data_offsets"][1] != q[1]["data_offsets"][0]: back_ok = False
ok(total == idx["metadata"]["total_size"], "index total_size = sum of tensor bytes")
ok(order_ok, "routed experts in (layer, id) order in every shard")
ok(back_ok, "each expert's six tensors back to back")
ok(align_ok, "data sections 64-byte aligned, every F32 tensor 4-byte aligned")
ok(q_ok, "every shard's __metadata__ marks the container and describes each quantized matrix")
EOF
$PY "$T/check.py" "$T/c8"
missing=""
for f in tiktoken.model tokenizer_config.json generation_config.json; do
    cmp -s "$T/src/$f" "$T/c8/$f" || missing="$missing $f"
done
[ -z "$missing" ]; ok $? "tokenizer and generation files copied (not copied:${missing:- none})"

# ---- resume after kill -9 mid-shard ---------------------------------------------------------
K3_REPACK_KILL_AT=3 "$RP" "$T/src" "$T/k8" --bits 8 >/dev/null 2>"$T/rp.err"; rc=$?
n_partial=$(ls -a "$T/k8" | grep -c '\.partial$')
[ "$rc" = 137 ] && [ "$n_partial" = 1 ] && [ ! -e "$T/k8/model.safetensors.index.json" ]
ok $? "killed (SIGKILL) halfway through the 3rd shard: exit $rc, $n_partial partial file, no index"
# a temp file of a run killed between its create and its rename (put_file: .NAME.PID.tmp) is
# removed by the next run when that PID is gone; one of a live run (this shell's PID) stays
sh -c 'exit 0' & dead=$!
wait "$dead"
echo stale >"$T/k8/.config.json.$dead.tmp"
echo live >"$T/k8/.config.json.$$.tmp"
repack "$T/src" "$T/k8" --bits 8; rc=$?
[ ! -e "$T/k8/.config.json.$dead.tmp" ] && [ -e "$T/k8/.config.json.$$.tmp" ]
ok $? "the rerun removes a dead run's temp file (.config.json.$dead.tmp) and keeps a live one's"
rm -f "$T/k8/.config.json.$$.tmp"
n_skip=$(grep -c "complete, skipped" "$T/rp.err")
[ "$rc" = 0 ] && [ "$n_skip" = 2 ]; ok $? "rerun finishes, skipping the 2 completed shards (exit $rc, $n_skip skipped)"
diff -r -x '.k3-repack.lock' "$T/c8" "$T/k8" >/dev/null && [ -z "$(ls -a "$T/k8" | grep '\.partial$')" ]
ok $? "the resumed container equals a clean run, file for file, no partial left"

# ---- rewriting a container at other bits: nothing half-done is published --------------------
# A run killed while rewriting the int8 container at 4 bits left shards of both runs under the
# old index and config.json (bits 8), and k3chat ran that mixture as a complete container.
cp -r "$T/c8" "$T/r4"
K3_REPACK_KILL_AT=3 "$RP" "$T/src" "$T/r4" --bits 4 >/dev/null 2>"$T/rp.err"; rc=$?
"$B/k3chat" "$T/r4" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc2=$?
[ "$rc" = 137 ] && [ ! -e "$T/r4/model.safetensors.index.json" ] && [ ! -e "$T/r4/config.json" ] &&
    [ "$rc2" = 1 ] && grep -q "config.json" "$T/err"
ok $? "int8 container rewritten at 4 bits, killed in the 3rd shard: no index, no config.json, no model to load (k3chat exit $rc2: $(head -c 100 "$T/err"))"
repack "$T/src" "$T/r4" --bits 4; rc=$?
[ "$rc" = 0 ] && [ "$(grep -c "complete, skipped" "$T/rp.err")" = 2 ] &&
    diff -r -x '.k3-repack.lock' "$T/c4" "$T/r4" >/dev/null
ok $? "the rerun completes it (2 shards skipped): equal to a clean --bits 4 run, file for file"

# --shards over a container of other bits: the index would have joined this run's 4-bit shards
# and the old 8-bit ones (published, loaded, reported as 4 bits)
cp -r "$T/c8" "$T/mx4"
repack "$T/src" "$T/mx4" --bits 4 --shards 1-3; rc=$?
"$B/k3chat" "$T/mx4" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc2=$?
[ "$rc" = 1 ] && grep -q "mx4/model-00004-of-000008.safetensors: written by another run .*(--shards 4)" "$T/rp.err" &&
    [ ! -e "$T/mx4/model.safetensors.index.json" ] && [ ! -e "$T/mx4/config.json" ] && [ "$rc2" = 1 ]
ok $? "--bits 4 --shards 1-3 over an int8 container: exit $rc naming the first 8-bit shard, nothing published ($(tail -c 120 "$T/rp.err"))"
repack "$T/src" "$T/mx4" --bits 4 --shards 4-8; rc=$?
[ "$rc" = 0 ] && diff -r -x '.k3-repack.lock' "$T/c4" "$T/mx4" >/dev/null
ok $? "--shards 4-8 at 4 bits then completes it: equal to a clean --bits 4 run"

# ---- a destination holding a model k3-repack did not write -------------------------------------
cp -r "$T/src" "$T/other"
repack "$T/src" "$T/other" --bits 8; rc=$?
[ "$rc" = 1 ] && grep -q "other holds a model that k3-repack did not write" "$T/rp.err" && diff -r "$T/src" "$T/other" >/dev/null
ok $? "DST holding a release checkpoint: refused before writing, left unchanged ($(head -c 150 "$T/rp.err"))"
mkdir "$T/other2" && cp "$T/src/model-00002-of-000008.safetensors" "$T/other2/"
repack "$T/src" "$T/other2" --bits 8; rc=$?
[ "$rc" = 1 ] && grep -q "model-00002-of-000008.safetensors: not written by k3-repack" "$T/rp.err" &&
    cmp -s "$T/src/model-00002-of-000008.safetensors" "$T/other2/model-00002-of-000008.safetensors" &&
    [ "$(ls -A "$T/other2" | wc -l)" = 1 ]
ok $? "DST holding a shard of another model (no config.json): refused, nothing written beside it"

# ---- a full disk and a signal while writing (tests/faultinj.c on the .partial files) -----------
so="$T/faultinj.so"
case "$B" in *asan*) ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" && export ASAN_OPTIONS ;; esac
if cc -shared -fPIC -O1 -o "$so" "$K3_SRC/tests/faultinj.c" -ldl 2>"$T/cc.err"; then
    cp -r "$T/c8" "$T/f4"
    LD_PRELOAD=$so FI_PATH=/.model-00004 FI_MODE=enospc FI_AFTER=2 "$RP" "$T/src" "$T/f4" --bits 4 \
        >/dev/null 2>"$T/rp.err"; rc=$?
    [ "$rc" = 1 ] && grep -q "f4/.model-00004-of-000008.safetensors.partial: write of .* failed: No space left on device" "$T/rp.err" &&
        [ -z "$(ls -a "$T/f4" | grep '\.partial$')" ] && [ ! -e "$T/f4/config.json" ] &&
        [ ! -e "$T/f4/model.safetensors.index.json" ]
    ok $? "ENOSPC in the 4th shard: exit $rc naming the file, its .partial removed, no index or config.json ($(tail -c 150 "$T/rp.err"))"
    # the error said nothing of resuming: it now says the finished shards are kept and that the same
    # command resumes, which the rerun shows (shards 1-3 skipped, the result equal to a clean run)
    grep -qF "No space left on device (3 completed shards kept: run the same command again to resume)" "$T/rp.err"
    ok $? "ENOSPC: the error says 3 shards are kept and that the same command resumes ($(tail -c 150 "$T/rp.err"))"
    repack "$T/src" "$T/f4" --bits 4; rc=$?
    [ "$rc" = 0 ] && [ "$(grep -c "complete, skipped" "$T/rp.err")" = 3 ] &&
        diff -r -x '.k3-repack.lock' "$T/c4" "$T/f4" >/dev/null
    ok $? "the rerun after ENOSPC skips the 3 completed shards and equals a clean run (exit $rc)"
    LD_PRELOAD=$so FI_PATH=/.model-00004 FI_MODE=signal FI_SIG=15 "$RP" "$T/src" "$T/g8" --bits 8 \
        >/dev/null 2>"$T/rp.err"; rc=$?
    [ "$rc" = 143 ] && grep -q "g8/.model-00004-of-000008.safetensors.partial: interrupted by signal 15" "$T/rp.err" &&
        [ "$(ls -A "$T/g8" | grep -c '^model-0000[123]-of-000008.safetensors$')" = 3 ] &&
        [ -z "$(ls -a "$T/g8" | grep '\.partial$')" ] && [ ! -e "$T/g8/model.safetensors.index.json" ]
    ok $? "SIGTERM while writing the 4th shard: status $rc, its .partial removed, shards 1-3 kept, no index ($(tail -c 150 "$T/rp.err"))"
    LD_PRELOAD=$so FI_PATH=/.model.safetensors.index.json FI_MODE=enospc "$RP" "$T/src" "$T/h8" --bits 8 \
        >/dev/null 2>"$T/rp.err"; rc=$?
    [ "$rc" = 1 ] && grep -q "h8/.model.safetensors.index.json.[0-9]*.tmp: write of .* failed: No space left on device" "$T/rp.err" &&
        [ ! -e "$T/h8/model.safetensors.index.json" ] && [ -z "$(ls -A "$T/h8" | grep '^\..*tmp$')" ]
    ok $? "ENOSPC writing the index: exit $rc naming the file and the reason, no index, no temporary ($(tail -c 150 "$T/rp.err"))"
    grep -qF "No space left on device (7 completed shards kept: run the same command again to resume)" "$T/rp.err"
    ok $? "ENOSPC writing the index: the error says the shards are kept and the same command resumes"
    LD_PRELOAD=$so FI_PATH=/.model.safetensors.index.json FI_MODE=signal FI_SIG=15 "$RP" "$T/src" "$T/i8" \
        --bits 8 >/dev/null 2>"$T/rp.err"; rc=$?
    [ "$rc" = 0 ] && diff -r -x '.k3-repack.lock' "$T/c8" "$T/i8" >/dev/null
    ok $? "SIGTERM while the index is written: the run completes it (exit $rc), equal to a clean run"
    repack "$T/src" "$T/g8" --bits 8; rc=$?
    [ "$rc" = 0 ] && [ "$(grep -c "complete, skipped" "$T/rp.err")" = 3 ] &&
        diff -r -x '.k3-repack.lock' "$T/c8" "$T/g8" >/dev/null
    ok $? "the rerun after SIGTERM skips the 3 completed shards and equals a clean run"
else
    echo "SKIP: full disk and signal checks: cannot build the fault-injection shim: $(head -n 1 "$T/cc.err")"
fi

# ---- disjoint --shards ------------------------------------------------------------------------
repack "$T/src" "$T/p8" --bits 8 --shards 1-3; rc1=$?
grep -q "incomplete" "$T/rp.err"; ok $? "--shards 1-3: index published for 3 of 7 shards, reported incomplete"
repack "$T/src" "$T/p8" --bits 8 --shards 4,5-8; rc2=$?
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] && cmp -s "$T/c8/model.safetensors.index.json" "$T/p8/model.safetensors.index.json"
ok $? "--shards 1-3 then 4,5-8: the same index as one full run"

# ---- duplicate names --------------------------------------------------------------------------
cp "$T/c8/model.safetensors.index.json" "$T/idx.before"
cp "$T/p8/model-00002-of-000008.safetensors" "$T/p8/model-00009-dup.safetensors"
repack "$T/src" "$T/p8" --bits 8; rc=$?
[ "$rc" = 1 ] && grep -q "duplicate" "$T/rp.err" && cmp -s "$T/idx.before" "$T/p8/model.safetensors.index.json"
ok $? "a planted duplicate shard aborts, the published index unchanged ($(tail -c 160 "$T/rp.err"))"

# ---- --verify-full ----------------------------------------------------------------------------
cp -r "$T/c8" "$T/v8"
repack "$T/src" "$T/v8" --bits 8 --verify-full; ok $? "--verify-full on an intact container passes"
$PY - "$T/v8/model-00003-of-000008.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
v = h["model.layers.2.block_sparse_moe.experts.5.w3.weight_packed"]
o = 8 + n + v["data_offsets"][0] + 7
b[o] ^= 0x10
open(p, "wb").write(b)
EOF
repack "$T/src" "$T/v8" --bits 8 --verify-full; rc=$?
[ "$rc" = 1 ] && grep -q "experts.5.w3.weight_packed" "$T/rp.err" && grep -q "byte 7 " "$T/rp.err"
ok $? "--verify-full catches one flipped expert byte, naming tensor and byte ($(tail -c 200 "$T/rp.err"))"

# ---- downcast and K3_MMAP refusals --------------------------------------------------------------
run "$T/c8" d4 K3_BITS=4
[ -s "$T/d4.l" ] && ! cmp -s "$T/d4.l" "$T/c8.l"; ok $? "K3_BITS=4 on the int8 container: downcast at load, runs ($(cat "$T/d4.ids"))"
K3_MMAP=1 K3_BITS=4 "$B/k3chat" "$T/c8" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_MMAP=1" "$T/err" && grep -q "conversion" "$T/err"; ok $? "K3_MMAP=1 with K3_BITS=4 on an int8 container refused ($(head -c 160 "$T/err"))"
K3_MMAP=1 "$B/k3chat" "$T/src" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_MMAP=1" "$T/err"; ok $? "K3_MMAP=1 on a BF16 release checkpoint refused"
K3_MMAP=1 K3_VK=1 "$B/k3chat" "$T/c8" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_VK" "$T/err"; ok $? "K3_MMAP=1 with the Vulkan tier (K3_VK=1) refused"
K3_MMAP=2 "$B/k3chat" "$T/c8" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q "K3_MMAP" "$T/err"; ok $? "K3_MMAP=2 rejected naming the variable"

# ---- a damaged container ------------------------------------------------------------------------
cp -r "$T/c8" "$T/dmg"
$PY - "$T/dmg" <<'EOF'
import os, sys
d = sys.argv[1]
for f in os.listdir(d):  # rename the sidecar lm_head.weight.qs (same length: offsets unchanged)
    p = os.path.join(d, f)
    if f.endswith((".safetensors", ".json")):
        b = open(p, "rb").read()
        open(p, "wb").write(b.replace(b'"lm_head.weight.qs"', b'"lm_head.weight.qz"'))
EOF
"$B/k3chat" "$T/dmg" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "lm_head.weight.qs" "$T/err" && grep -q "missing" "$T/err"
ok $? "a container matrix without its scale sidecar: clear error naming it ($(head -c 160 "$T/err"))"

# a container shard cut short (a copy interrupted): the load names the file, the tensor and the bytes
cp -r "$T/c8" "$T/cut"
f="$T/cut/model-00004-of-000008.safetensors"; sz=$(wc -c <"$f")
head -c $((sz - 1000)) "$f" >"$T/trunc" && mv "$T/trunc" "$f"
for e in "" K3_MMAP=1; do
    env $e "$B/k3chat" "$T/cut" --ids "1 2" --max-tokens 1 >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -q "model-00004-of-000008.safetensors: tensor '.*': its data ends at byte $sz of the file, but the file has $((sz - 1000)) bytes" "$T/err"
    ok $? "a container shard 1000 bytes short${e:+ ($e)}: exit $rc naming file, tensor and sizes ($(tail -c 150 "$T/err"))"
done

# ---- bad arguments, corrupt source -------------------------------------------------------------
"$RP" "$T/src" "$T/x" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--bits" "$T/err"; ok $? "missing --bits: usage error (exit $rc)"
"$RP" "$T/src" "$T/x" --bits 5 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q "'5'" "$T/err"; ok $? "--bits 5 rejected ($(head -c 100 "$T/err"))"
"$RP" "$T/src" "$T/x" --bits 8 --head-bits 16 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ]; ok $? "--head-bits 16 rejected"
# the values are read by the settings rows (K3_BITS, K3_MLA_BITS, K3_HEAD_BITS, K3_THREADS): whole
# numbers (strtol took ' 8' and '+8'), the rows' ranges (--jobs was 1..1024, K3_THREADS 0..4096)
bad_v=
for v in "--bits 32:4 or 8" "--bits  8:4 or 8" "--bits +8:4 or 8" "--mla-bits 16:4, 8 or 32" \
    "--head-bits 8x:4, 8 or 32" "--jobs 5000:an integer in 0..4096" "--jobs -1:an integer in 0..4096"; do
    o=${v%% *}; val=${v#* }; val=${val%%:*}
    "$RP" "$T/src" "$T/x" --bits 4 "$o" "$val" >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 2 ] && grep -qF -- "$o '$val': expected ${v#*:}" "$T/err" || bad_v="$bad_v [$o '$val' $rc]"
done
[ -z "$bad_v" ] && [ ! -e "$T/x" ]; ok $? "option values out of their settings row: exit 2 naming the option and the row's range, nothing written (failed:${bad_v:- none})"
"$RP" "$T/src" "$T/x" --bits 8 --shards 3-99 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--shards '3-99': shard 99 is past the last: .*src has shards 1..8" "$T/err" && [ ! -e "$T/x" ]
ok $? "--shards 3-99 out of range: usage error naming the last shard, nothing written ($(head -c 120 "$T/err"))"
bad_l=
for l in 2-1 abc 0 1, 1,,2 1- ' 3' +3 3-+5 99999999999; do
    "$RP" "$T/nonexistent" "$T/x" --bits 8 --shards "$l" >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 2 ] && grep -q -- "--shards '$l': expected shard numbers from 1" "$T/err" || bad_l="$bad_l [$l] $rc"
done
[ -z "${bad_l:-}" ]; ok $? "malformed --shards lists: usage error (exit 2) before the source is read (failed:${bad_l:- none})"
"$RP" "$T/src" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ]; ok $? "a missing DST is a usage error"
"$RP" "$T/nonexistent" "$T/x" --bits 8 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "config.json" "$T/err"; ok $? "a missing source: clear error ($(head -c 120 "$T/err"))"
"$RP" "$T/c8" "$T/x" --bits 8 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "already a k3 container" "$T/err"; ok $? "a container as source refused"
"$RP" "$T/src" "$T/src" --bits 8 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "DST is SRC" "$T/err"; ok $? "DST = SRC refused"
cp -r "$T/src" "$T/bad"
f="$T/bad/model-00004-of-000008.safetensors"
head -c $(($(wc -c <"$f") - 100)) "$f" >"$T/trunc" && mv "$T/trunc" "$f"
"$RP" "$T/bad" "$T/x2" --bits 8 >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q "model-00004-of-000008.safetensors" "$T/err" && [ ! -e "$T/x2/model.safetensors.index.json" ]
ok $? "a truncated source shard: clear error naming it, no index ($(head -c 160 "$T/err"))"
# the tokenizer files are copied, not read: a source whose tokenizer k3chat refuses (a bad line of
# tiktoken.model, no tokenizer_config.json) was written whole and published as a container that
# no turn could run; now it is refused before any shard is written, naming the file
for case in tiktoken tokcfg; do
    rm -rf "$T/badtok" "$T/x3"; cp -r "$T/src" "$T/badtok"
    if [ $case = tiktoken ]; then
        sed -i '5s/.*/!!!notbase64 4/' "$T/badtok/tiktoken.model"; want="tiktoken.model: line 5: bad base64"
    else
        rm "$T/badtok/tokenizer_config.json"; want="tokenizer_config.json: missing"
    fi
    "$RP" "$T/badtok" "$T/x3" --bits 8 >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -qF "$T/badtok/$want" "$T/err" && ! ls "$T/x3"/*.safetensors >/dev/null 2>&1 &&
        [ ! -e "$T/x3/model.safetensors.index.json" ]
    ok $? "a source whose tokenizer k3chat refuses ($case): clear error naming the file, nothing written ($(head -c 160 "$T/err"))"
done
