#!/bin/sh
# t-inspect.sh: k3chat --inspect end to end on a k3-mkmodel checkpoint and on corrupted copies.
# Each corruption must give exit status 1, nothing on stdout, exactly one line on stderr naming
# the file and the tensor or key, and no sanitizer report. The vision-only shard is made
# unreadable and then deleted: the checkpoint must still load (it is never opened).
. "$K3_SRC/tests/lib.sh" # pass, fail, check (check STATUS DESC here), ok
set -u
B=${K3_BUILD:?}; T=${K3_TMP:?}
K3=$B/k3chat; MK=$B/k3-mkmodel; PY=/usr/bin/python3

[ -x "$K3" ] || { fail "$K3 not built"; exit 1; }
if [ ! -x "$MK" ]; then echo "SKIP: $MK not built (k3-mkmodel not on this branch yet)"; exit 0; fi

M=$T/tiny
"$MK" --preset tiny --seed 7 "$M" >/dev/null 2>&1 || { fail "k3-mkmodel --preset tiny"; exit 1; }

# ---- the valid checkpoint ----
K3_BITS=4 K3_MLA_BITS=8 K3_HEAD_BITS=8 "$K3" --inspect "$M" >"$T/out" 2>"$T/err"; rc=$?
check $rc "valid checkpoint: exit 0 (stderr: $(head -c 300 "$T/err"))"
check "$([ ! -s "$T/err" ]; echo $?)" "valid checkpoint: nothing on stderr"
for want in "kimi_k3" "layers       6: 4 KDA + 2 MLA" "MLA layers   3, 5" "experts      60 routed" \
            "six tensors are contiguous" "not in id order" "vision-only, never opened" "BF16" "U8" \
            "K3_BITS=4 K3_MLA_BITS=8 K3_HEAD_BITS=8" "total"; do
    grep -qF "$want" "$T/out"; check $? "report mentions '$want'"
done
# the parameter count in the largest unit that keeps a digit before the point (was "0.000 T")
p=$(sed -n 's/^parameters   \([0-9.]*\) \([kMBT]\) (\([0-9]*\);.*/\1 \2 \3/p' "$T/out")
$PY -c "import sys; v, u, n = sys.argv[1:4]; s = {'k': 1e3, 'M': 1e6, 'B': 1e9, 'T': 1e12}[u]
sys.exit(0 if 1 <= float(v) < 1000 and abs(float(v) * s - int(n)) <= s * 5e-4 else 1)" $p 2>/dev/null
check $? "parameters in a readable unit, agreeing with the exact count ($p)"
K3_BITS=32 K3_EXPERT_GB=1 "$K3" --inspect "$M" >"$T/out32" 2>&1
grep -qF "K3_BITS=32" "$T/out32" && grep -qF "the budget holds all experts" "$T/out32"; check $? "K3_BITS=32 K3_EXPERT_GB=1 reflected in the estimate"
a=$(grep 'dense matrices' "$T/out" | awk '{print $5 $6}'); b=$(grep 'dense matrices' "$T/out32" | awk '{print $5 $6}')
[ -n "$a" ] && [ "$a" != "$b" ]; check $? "dense-matrix memory depends on K3_BITS ($a vs $b)"
K3_EXPERT_GB=0.00001 "$K3" --inspect "$M" 2>&1 | grep -q "cache floor: one expert per MoE layer"; check $? "tiny K3_EXPERT_GB: the one-expert-per-layer floor"
# the prefill window: K3_MAXT tokens when they fit, K3_WINDOW, shrunk when memory is short, none when
# not even a chunk fits; the first token of 1k and 8k prompts with the bytes read and the floor
grep -qE "^  prefill window .*\(8192 tokens:" "$T/out"; check $? "the plan holds a prefill window of K3_MAXT=8192 tokens"
grep -qE "^first token  1024-token prompt [0-9.e+-]+ s reading .* of experts \(floor .*; per chunk of 128: .*\); 8192-token prompt" "$T/out"
check $? "first token: 1k and 8k prompts, the bytes, the floor and the per-chunk path"
K3_WINDOW=300 "$K3" --inspect "$M" 2>&1 | grep -qE "^  prefill window .*\(300 tokens:"; check $? "K3_WINDOW=300: a window of 300 tokens"
K3_MEM_GB=0.558 "$K3" --inspect "$M" >"$T/outw" 2>&1
grep -qE "^  prefill window .*tokens, shrunk to fit" "$T/outw" && grep -qF "shrunk to fit the memory" "$T/outw"
check $? "K3_MEM_GB=0.558: the window shrinks to fit and the plan and the fit line say so"
K3_MEM_GB=0.5265 "$K3" --inspect "$M" 2>&1 | grep -qF "none: 8192 tokens do not fit; prefill per K3_CHUNK"
check $? "K3_MEM_GB=0.5265: no window (not a chunk's worth fits), said so"
K3_BITS=5 "$K3" --inspect "$M" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "K3_BITS" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ]; check $? "K3_BITS=5 rejected naming the variable ($(head -c 200 "$T/err"))"

# The vision shard (listed in the index with only vision_tower.* / mm_projector.* names).
vis=$(/usr/bin/python3 - "$M" <<'EOF'
import json, sys
wm = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"]
shards = {}
for k, f in wm.items():
    shards.setdefault(f, []).append(k.removeprefix("language_model.").startswith(("vision_tower.", "mm_projector.")))
print(" ".join(f for f, v in shards.items() if all(v)))
EOF
)
[ -n "$vis" ]; check $? "checkpoint has a vision-only shard ($vis)"
cp -r "$M" "$T/novis"
for f in $vis; do chmod 000 "$T/novis/$f"; done
"$K3" --inspect "$T/novis" >/dev/null 2>"$T/err"; check $? "vision shard unreadable: still loads ($(head -c 200 "$T/err"))"
for f in $vis; do rm -f "$T/novis/$f"; done
"$K3" --inspect "$T/novis" >/dev/null 2>"$T/err"; check $? "vision shard deleted: still loads ($(head -c 200 "$T/err"))"

# ---- the same tensors as one model.safetensors without an index, and without the prefix ----
cp -r "$M" "$T/single"
/usr/bin/python3 - "$T/single" <<'EOF2' || fail "merging shards into model.safetensors"
import json, os, struct, sys
d = sys.argv[1]
wm = json.load(open(d + "/model.safetensors.index.json"))["weight_map"]
hdr, blobs, off = {}, [], 0
for f in sorted(set(wm.values())):
    b = open(d + "/" + f, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    for k, v in h.items():
        if k == "__metadata__" or k.removeprefix("language_model.").startswith(("vision_tower.", "mm_projector.")):
            continue
        b0, b1 = v["data_offsets"]; blobs.append(b[8 + n + b0:8 + n + b1])
        hdr[k.removeprefix("language_model.")] = dict(v, data_offsets=[off, off + b1 - b0]); off += b1 - b0
    os.remove(d + "/" + f)
os.remove(d + "/model.safetensors.index.json")
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF2
"$K3" --inspect "$T/single" >"$T/out1" 2>"$T/err"; check $? "single model.safetensors without prefix: loads ($(head -c 200 "$T/err"))"
grep -q "^shards       1 (0 vision-only" "$T/out1" && ! grep -q "language_model. prefix" "$T/out1"; check $? "single file: one shard, no prefix reported"
a=$(grep "^tensors" "$T/out" | sed 's/;.*//'); b=$(grep "^tensors" "$T/out1")
[ -n "$a" ] && [ "$a" = "$b" ]; check $? "single file: same tensor count and bytes as the sharded one ($b)"
rm -f "$T/single/model.safetensors"
"$K3" --inspect "$T/single" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "model.safetensors" "$T/err"; check $? "no safetensors at all: one-line error ($(head -c 200 "$T/err"))"

# ---- expert layout: split one tensor of every expert away from the other five; then id order ----
cat >"$T/relayout.py" <<'EOF2'
import json, os, re, struct, sys
mode, d = sys.argv[1], sys.argv[2]
wm = json.load(open(d + "/model.safetensors.index.json"))["weight_map"]
def natural(k):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)]
for f in sorted(set(wm.values())):
    p = d + "/" + f
    if not os.path.exists(p): continue
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    names = [k for k in h if k != "__metadata__"]
    if mode == "split":   # every w2.weight_scale after all other tensors
        names.sort(key=lambda k: (k.endswith("w2.weight_scale"), h[k]["data_offsets"][0]))
    else:                 # experts in id order, each expert's six tensors together
        names.sort(key=natural)
    blobs, off, nh = [], 0, {}
    for k in names:
        b0, b1 = h[k]["data_offsets"]; blobs.append(b[8 + n + b0:8 + n + b1])
        nh[k] = dict(h[k], data_offsets=[off, off + b1 - b0]); off += b1 - b0
    hb = json.dumps(nh).encode(); hb += b" " * (-len(hb) % 8)
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
EOF2
for mode in split sorted; do
    rm -rf "$T/l-$mode"; cp -r "$M" "$T/l-$mode"
    for f in $vis; do rm -f "$T/l-$mode/$f"; done   # vision shard: never opened, so it may go
    /usr/bin/python3 "$T/relayout.py" $mode "$T/l-$mode" || fail "relayout $mode"
    "$K3" --inspect "$T/l-$mode" >"$T/out-$mode" 2>"$T/err"; check $? "relayout $mode: loads ($(head -c 200 "$T/err"))"
done
grep -q "60 of 60 experts NOT contiguous" "$T/out-split"; check $? "split layout reported as not contiguous"
grep -q "six tensors are contiguous" "$T/out-sorted" && grep -q "experts in id order inside shards" "$T/out-sorted"
check $? "sorted layout: contiguous and in id order"

# ---- corruptions: corrupt.py MODE DIR edits DIR and prints the two strings the error must name ----
cat >"$T/corrupt.py" <<'EOF'
import json, struct, sys, os
mode, d = sys.argv[1], sys.argv[2]
ipath = d + "/model.safetensors.index.json"
index = json.load(open(ipath))
wm = index["weight_map"]
strip = lambda k: k.removeprefix("language_model.")
key = next(k for k in wm if strip(k).endswith("self_attn.q_proj.weight"))   # a KDA projection [P, D]
shard = wm[key]
path = d + "/" + shard

def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]

def write(p, hdr, data, raw=None):
    h = raw if raw is not None else json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(p, "wb").write(struct.pack("<Q", len(h)) + h + data)

def out(a, b): print(a); print(b)

hdr, data = read(path)
names = [k for k in hdr if k != "__metadata__"]
if mode == "truncated":
    last = max(names, key=lambda k: hdr[k]["data_offsets"][1])
    os.truncate(path, os.path.getsize(path) - 5); out(shard, strip(last))
elif mode == "hlen":
    b = bytearray(open(path, "rb").read()); b[:8] = struct.pack("<Q", len(b) + 1000)
    open(path, "wb").write(b); out(shard, "header length")
elif mode == "overlap":
    a, b = sorted(names, key=lambda k: hdr[k]["data_offsets"][0])[:2]
    # b takes a range inside a's, same size, so only the overlap is wrong
    sz = hdr[b]["data_offsets"][1] - hdr[b]["data_offsets"][0]
    a0, a1 = hdr[a]["data_offsets"]
    if sz > a1 - a0: a, b = b, a; sz = hdr[b]["data_offsets"][1] - hdr[b]["data_offsets"][0]; a0, a1 = hdr[a]["data_offsets"]
    hdr[b]["data_offsets"] = [a0, a0 + sz]
    write(path, hdr, data); out(shard, "overlaps")
elif mode == "dtype":
    hdr[key]["dtype"] = "F8_E4M3"; write(path, hdr, data); out(shard, strip(key))
elif mode == "size":
    hdr[key]["shape"][0] += 1; write(path, hdr, data); out(shard, strip(key))
elif mode == "headerjson":
    write(path, None, data, raw=json.dumps(hdr).encode()[:-2] + b",}"); out(shard, "malformed")
elif mode == "missing":
    victim = next(k for k in names if strip(k).endswith("self_attn.o_norm.weight"))
    del hdr[victim]; write(path, hdr, data)
    del wm[victim]; json.dump(index, open(ipath, "w"))
    out("model.safetensors.index.json", strip(victim))
elif mode == "shape":
    hdr[key]["shape"] = hdr[key]["shape"][::-1]; write(path, hdr, data); out(shard, strip(key))
elif mode in ("mtype", "mtypelong"):
    # model_type's error names the value found (it said only "is not kimi_k3"), escaped: the
    # terminal title command and the line break in it show as \xHH; a long one is cut to 48 bytes
    cp = d + "/config.json"; cfg = json.load(open(cp))
    cfg["model_type"] = "kimi_k3\x1b]0;t\x07\nx" if mode == "mtype" else "k" * 100
    json.dump(cfg, open(cp, "w"))
    out("config.json", 'model_type is "%s", expected "kimi_k3"' %
        ("kimi_k3\\x1B]0;t\\x07\\x0Ax" if mode == "mtype" else "k" * 48 + "..."))
elif mode in ("cfgjson", "cfgkey", "layers"):
    cp = d + "/config.json"
    cfg = json.load(open(cp)); tc = cfg.get("text_config", cfg); pre = "text_config." if "text_config" in cfg else ""
    if mode == "cfgjson":
        open(cp, "w").write(json.dumps(cfg)[:-1] + ",}"); out("config.json", "line 1")
    elif mode == "cfgkey":
        del tc["hidden_size"]; json.dump(cfg, open(cp, "w")); out("config.json", pre + "hidden_size is missing")
    else:
        n = tc["num_hidden_layers"]; tc["linear_attn_config"]["kda_layers"][1] = n + 1; json.dump(cfg, open(cp, "w"))
        out("config.json", "%slinear_attn_config.kda_layers[1] = %d is outside 1..%d" % (pre, n + 1, n))
EOF

for mode in truncated hlen overlap dtype size headerjson missing shape cfgjson cfgkey layers mtype mtypelong; do
    D=$T/c-$mode
    rm -rf "$D"; cp -r "$M" "$D"
    exp=$(/usr/bin/python3 "$T/corrupt.py" "$mode" "$D") || { fail "$mode: corrupt.py failed"; continue; }
    a=$(echo "$exp" | sed -n 1p); b=$(echo "$exp" | sed -n 2p)
    "$K3" --inspect "$D" >"$T/out" 2>"$T/err"; rc=$?
    msg=$(head -c 400 "$T/err")
    [ $rc -eq 1 ]; check $? "$mode: exit status 1 (got $rc: $msg)"
    [ "$(wc -l <"$T/err")" -eq 1 ]; check $? "$mode: exactly one line on stderr"
    [ ! -s "$T/out" ]; check $? "$mode: nothing on stdout"
    grep -qF -- "$a" "$T/err" && grep -qF -- "$b" "$T/err"; check $? "$mode: names '$a' and '$b' ($msg)"
    ! grep -q "$(printf '\033')" "$T/err"; check $? "$mode: no raw escape character on stderr"
    ! grep -qE "AddressSanitizer|LeakSanitizer|runtime error" "$T/err"; check $? "$mode: no sanitizer report"
done

# ---- a model path that is not a model directory ----
# A regular file said "config.json: cannot open F/config.json: Not a directory", a missing path
# "... No such file or directory": each now says what the path is and that a model path is a
# directory holding config.json, in k3chat (--inspect, --prompt) and k3-repack alike.
: >"$T/afile"; mkdir -p "$T/nocfg"
for p in "afile:not a directory" "nothere:no such directory" "nocfg:no config.json in this directory"; do
    P=$T/${p%%:*}; want="$P: ${p#*:} (the model path must be a directory holding config.json)"
    for cmd in "$K3 --inspect" "$K3 --prompt hi" "$B/k3-repack --bits 4"; do
        [ -x "${cmd%% *}" ] || continue
        if [ "${cmd#*k3-repack}" != "$cmd" ]; then $cmd "$P" "$T/rp-out" >"$T/out" 2>"$T/err"; else $cmd "$P" >"$T/out" 2>"$T/err"; fi
        rc=$?
        [ $rc -ne 0 ] && grep -qF -- "$want" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ]
        check $? "${cmd##*/} on ${p%%:*}: '$want' (exit $rc: $(head -c 300 "$T/err"))"
    done
done

# ---- a model file that is not a regular file ----
# A FIFO in place of a model file blocked the open for ever (k3chat hung before its first line),
# and /dev/zero as tiktoken.model or tokenizer_config.json was read until memory ran out: each
# is now refused at once, naming the file and what it is. timeout 20 turns the old hang into a
# failure (exit 124); the new refusal takes well under a second.
S1=$(ls "$M" | grep '^model-.*safetensors$' | sort | sed -n 1p)
for f in config.json generation_config.json model.safetensors.index.json "$S1" tiktoken.model \
         tokenizer_config.json; do
    for kind in FIFO dev; do
        D=$T/nr; rm -rf "$D"; cp -r "$M" "$D"; rm -f "$D/$f"
        if [ $kind = FIFO ]; then mkfifo "$D/$f"; what="a FIFO"; else ln -s /dev/null "$D/$f"; what="a character device"; fi
        timeout 20 "$K3" "$D" --prompt hi --max-tokens 1 >"$T/out" 2>"$T/err"; rc=$?
        msg=$(tail -n 1 "$T/err" | head -c 300)
        [ $rc -eq 1 ] && grep -qF "$f: not a regular file ($what)" "$T/err" &&
            ! grep -qE "AddressSanitizer|LeakSanitizer|runtime error" "$T/err"
        check $? "$f as $what: refused, naming it (exit $rc: $msg)"
    done
done

# ---- a tokenizer with more ids than config.json's vocab_size ----
# 300 more tokens in tiktoken.model (the reserved ids moved up with them in tokenizer_config.json):
# every turn failed at the model with "token id 1559 (index 0) is outside 0..1511", and the server
# started and answered each request 500 with it. Now the load refuses, naming the file and the key.
D=$T/bigvocab; rm -rf "$D"; cp -r "$M" "$D"
$PY - "$D" <<'PYEOF'
import base64, json, sys
d = sys.argv[1]
lines = open(d + "/tiktoken.model").read().split("\n")
lines = [l for l in lines if l]
n = len(lines)
lines += ["%s %d" % (base64.b64encode(b"extra%d" % i).decode(), n + i) for i in range(300)]
open(d + "/tiktoken.model", "w").write("\n".join(lines) + "\n")
c = json.load(open(d + "/tokenizer_config.json"))
c["added_tokens_decoder"] = {str(int(k) + 300): v for k, v in c["added_tokens_decoder"].items()}
json.dump(c, open(d + "/tokenizer_config.json", "w"))
PYEOF
vocab=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["text_config"]["vocab_size"])' "$D/config.json")
want="$D/tiktoken.model: $((vocab - 256 + 300)) tokens and 256 reserved ids do not fit config.json's vocab_size $vocab"
timeout 120 "$K3" "$D" --prompt hi --max-tokens 1 --think off >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -qF "k3chat: $want" "$T/err"; check $? "vocabulary past vocab_size: --prompt refuses, naming both (exit $rc: $(tail -n 1 "$T/err" | head -c 300))"
"$K3" --inspect "$D" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF "k3chat: $want" "$T/err"
check $? "... --inspect names it in its one line (exit $rc: $(head -c 300 "$T/err"))"
timeout 120 "$K3" "$D" --serve 127.0.0.1:0 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -qF "$want" "$T/err" && ! grep -q serving "$T/err"; check $? "... and --serve does not start (exit $rc: $(tail -n 1 "$T/err" | head -c 300))"

# ---- a model directory without tokenizer_config.json ----
# It names the reserved ids the chat format needs (<|open|>, ...) and selects the kimi pattern.
# Without it --inspect passed the checkpoint (exit 0) and --prompt loaded the weights, then every
# turn failed at the chat encoder ("vocabulary has no special token '<|open|>'"), naming no file.
D=$T/notokcfg; rm -rf "$D"; cp -r "$M" "$D"; rm "$D/tokenizer_config.json"
want="$D/tokenizer_config.json: missing (a model's tokenizer names its reserved ids there"
"$K3" --inspect "$D" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF "k3chat: $want" "$T/err"
check $? "no tokenizer_config.json: --inspect names it in its one line (exit $rc: $(head -c 300 "$T/err"))"
timeout 120 "$K3" "$D" --prompt hi --max-tokens 1 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -qF "k3chat: $want" "$T/err"
check $? "... --prompt refuses it, naming it (exit $rc: $(tail -n 1 "$T/err" | head -c 300))"
"$K3" --tokenize "$D" "$D/config.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] && [ -s "$T/out" ]; check $? "... --tokenize still takes a directory with tiktoken.model alone (exit $rc)"
