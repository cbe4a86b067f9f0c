#!/bin/sh
# t-mkmodel.sh: build/k3-mkmodel writes checkpoints in the release format (spec k3-model.md
# sections 1-4, k3-chat.md section 1), deterministically, and refuses bad arguments.
# Each generated tiny model is checked by an independent reader (Python: json + struct + numpy):
# index -> shards, every header (length, dtypes, sizes, ranges, no overlap, no gaps), the tensor
# set and shapes the config implies, dtypes as in the release, experts' six tensors back to back
# and not in id order, A_log zero padding, MXFP4 scales, the vocabulary file and the reserved
# token names, the vision-only shard.
. "$K3_SRC/tests/lib.sh" # pass, fail, check DESC CMD...
set -u
MK="$K3_BUILD/k3-mkmodel"
T="$K3_TMP"

[ -x "$MK" ] || { fail "k3-mkmodel not built ($MK)"; exit 1; }

gen() { # dir args...
    d=$1; shift
    "$MK" --quiet "$@" "$d" 2>"$T/gen.err"
    rc=$?
    [ $rc -eq 0 ] || { echo "  k3-mkmodel $* $d: exit $rc: $(cat "$T/gen.err")"; return 1; }
}

# ---- structure checker --------------------------------------------------------------------------
cat >"$T/check.py" <<'EOF'
import base64, json, os, struct, sys
import numpy as np

d, label = sys.argv[1], sys.argv[2]
want = dict(a.split("=", 1) for a in sys.argv[3:])  # expectations from the command line
def ok(cond, desc):
    print(("PASS: " if cond else "FAIL: ") + f"{label}: {desc}")
    return cond

cfg = json.load(open(os.path.join(d, "config.json")))
tc = cfg["text_config"]
lin = tc["linear_attn_config"]
N = int(want["N"])
ok(cfg["model_type"] == "kimi_k3" and cfg["tie_word_embeddings"] is False
   and cfg["bos_token_id"] == N and cfg["eos_token_id"] == N + 2 and tc["vocab_size"] == N + 256,
   "config top level: model_type, tie_word_embeddings, bos/eos ids (eos = N+2), vocab N+256")
keys = ("hidden_size num_hidden_layers vocab_size first_k_dense_replace intermediate_size "
        "num_attention_heads q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim "
        "num_experts num_experts_per_token moe_intermediate_size routed_expert_hidden_size "
        "num_shared_experts attn_res_block_size activation_situ_beta activation_situ_linear_beta "
        "rms_norm_eps routed_scaling_factor moe_renormalize latent_moe_use_norm mla_use_nope "
        "mla_use_output_gate hidden_act moe_router_activation_func num_expert_group topk_group").split()
ok(all(k in tc for k in keys) and all(k in lin for k in ("num_heads", "head_dim",
   "short_conv_kernel_size", "gate_lower_bound", "use_full_rank_gate", "kda_layers", "full_attn_layers")),
   "text_config has every key of spec section 2")
ok(tc["hidden_act"] == "situ" and tc["moe_router_activation_func"] == "sigmoid"
   and tc["num_expert_group"] == 1 and tc["topk_group"] == 1 and tc["moe_renormalize"] is True,
   "text_config flags as the formulas assume")
qc = cfg["quantization_config"]
gs = qc["config_groups"]["group_0"]["weights"]["group_size"]
ok(qc["quant_method"] == "compressed-tensors" and qc["format"] == "mxfp4-pack-quantized" and gs == 32,
   "quantization_config: compressed-tensors, mxfp4-pack-quantized, group size 32")
nL = tc["num_hidden_layers"]
kda1, mla1 = lin["kda_layers"], lin["full_attn_layers"]
ok(sorted(kda1 + mla1) == list(range(1, nL + 1)) and nL in mla1,
   f"layer lists 1-indexed, cover all {nL} layers once, last layer MLA")
for k, v in want.items():
    if k in tc:
        ok(str(tc[k]) == v, f"text_config.{k} = {v} (got {tc[k]})")

# ---- shards and headers
single = os.path.exists(os.path.join(d, "model.safetensors"))
if single:
    ok(not os.path.exists(os.path.join(d, "model.safetensors.index.json")), "single file has no index")
    shards = ["model.safetensors"]
    wmap = None
else:
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wmap = idx["weight_map"]
    shards = sorted(set(wmap.values()))
    ok(all(os.path.isfile(os.path.join(d, s)) for s in shards), "index maps every tensor to an existing shard")
    ok(len(shards) >= 3, f"several shards ({len(shards)})")
SZ = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
T = {}  # name -> (shard, dtype, shape, begin, end, data_start)
hdr_ok, total = True, 0
for s in shards:
    path = os.path.join(d, s)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        good = 8 + n <= size and n % 8 == 0
        h = json.loads(f.read(n)) if good else {}
    data = size - 8 - n
    rng = []
    for name, t in h.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        good &= t["dtype"] in SZ and int(np.prod(t["shape"], dtype=np.int64)) * SZ[t["dtype"]] == e - b
        good &= 0 <= b <= e <= data and name not in T
        rng.append((b, e))
        T[name] = (s, t["dtype"], tuple(t["shape"]), b, e, 8 + n)
        total += e - b
    rng.sort()
    good &= all(rng[i][1] == rng[i + 1][0] for i in range(len(rng) - 1))
    good &= bool(rng) and rng[0][0] == 0 and rng[-1][1] == data
    if wmap is not None:
        good &= all(wmap.get(nm) == s for nm in h if nm != "__metadata__")
    hdr_ok &= bool(good)
ok(hdr_ok, "every header valid: length, dtype, size = numel x dtype, in range, no overlap, no gap")
if wmap is not None:
    ok(set(wmap) == set(T) and idx["metadata"]["total_size"] == total,
       "index weight_map = the shards' tensors; metadata.total_size = data bytes")

# ---- the tensor set and shapes the config implies
pre = "language_model." if want.get("prefix", "1") == "1" else ""
ok(all(n.startswith(pre) or n.startswith(("vision_tower.", "mm_projector.")) for n in T),
   f"text tensor names {'with' if pre else 'without'} the language_model. prefix")
D, H, dh, K = tc["hidden_size"], lin["num_heads"], lin["head_dim"], lin["short_conv_kernel_size"]
P, Hm, nope, rope, vd = H * dh, tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["qk_rope_head_dim"], tc["v_head_dim"]
E, F, L, S, V = tc["num_experts"], tc["moe_intermediate_size"], tc["routed_expert_hidden_size"], tc["num_shared_experts"], tc["vocab_size"]
exp = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D),
       "model.output_attn_res_norm.weight": (D,), "model.output_attn_res_proj.weight": (D,)}
for i in range(nL):
    p = f"model.layers.{i}."
    for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
              "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"):
        exp[p + n + ".weight"] = (D,)
    a = p + "self_attn."
    if i + 1 in kda1:
        for n in "qkvg":
            exp[a + n + "_proj.weight"] = (P, D)
        exp[a + "o_proj.weight"] = (D, P)
        for n in "qkv":
            exp[a + n + "_conv1d.weight"] = (P, K)
        exp.update({a + "f_a_proj.weight": (dh, D), a + "f_b_proj.weight": (P, dh),
                    a + "b_proj.weight": (H, D), a + "dt_bias": (P,), a + "A_log": None,
                    a + "o_norm.weight": (dh,)})
    else:
        exp.update({a + "q_a_proj.weight": (tc["q_lora_rank"], D), a + "q_a_layernorm.weight": (tc["q_lora_rank"],),
                    a + "q_b_proj.weight": (Hm * (nope + rope), tc["q_lora_rank"]),
                    a + "kv_a_proj_with_mqa.weight": (tc["kv_lora_rank"] + rope, D),
                    a + "kv_a_layernorm.weight": (tc["kv_lora_rank"],),
                    a + "kv_b_proj.weight": (Hm * (nope + vd), tc["kv_lora_rank"]),
                    a + "o_proj.weight": (D, Hm * vd), a + "g_proj.weight": (Hm * vd, D)})
    if i < tc["first_k_dense_replace"]:
        I = tc["intermediate_size"]
        exp.update({p + "mlp.gate_proj.weight": (I, D), p + "mlp.up_proj.weight": (I, D),
                    p + "mlp.down_proj.weight": (D, I)})
    else:
        m = p + "block_sparse_moe."
        exp.update({m + "gate.weight": (E, D), m + "gate.e_score_correction_bias": (E,),
                    m + "routed_expert_down_proj.weight": (L, D), m + "routed_expert_up_proj.weight": (D, L),
                    m + "routed_expert_norm.weight": (L,)})
        if S:
            exp.update({m + "shared_experts.gate_proj.weight": (S * F, D),
                        m + "shared_experts.up_proj.weight": (S * F, D),
                        m + "shared_experts.down_proj.weight": (D, S * F)})
        for e in range(E):
            for w, (r, c) in (("w1", (F, L)), ("w3", (F, L)), ("w2", (L, F))):
                exp[f"{m}experts.{e}.{w}.weight_packed"] = (r, c // 2)
                exp[f"{m}experts.{e}.{w}.weight_scale"] = (r, c // 32)
text = {n[len(pre):]: v for n, v in T.items() if not n.startswith(("vision_tower.", "mm_projector."))}
ok(set(text) == set(exp), f"tensor set = the config's ({len(exp)} tensors; missing "
   f"{sorted(set(exp) - set(text))[:3]}, extra {sorted(set(text) - set(exp))[:3]})")
def squeeze(s):
    return tuple(x for x in s if x != 1) or (1,)
bad = [n for n, s in exp.items() if n in text and s is not None and squeeze(text[n][2]) != squeeze(s)]
ok(not bad, f"every shape matches the config (allowing [1,D] and [P,1,K]) {bad[:3]}")
ok(any(len(text[n][2]) == 2 and text[n][2][0] == 1 for n in text if n.endswith("_res_proj.weight")),
   "some *_res_proj stored [1,D]")
f32name = lambda n: n.endswith(("dt_bias", "A_log", "_conv1d.weight", "o_norm.weight"))
fdt = want.get("float", "BF16")
ok(all(text[n][1] == ("U8" if ".experts." in n else "F32" if f32name(n) else fdt) for n in text),
   f"dtypes as in the release: F32 dt_bias/A_log/conv1d/o_norm, U8 experts, {fdt} the rest")

def arr(name):
    s, dt, shape, b, e, ds = T[name]
    with open(os.path.join(d, s), "rb") as f:
        f.seek(ds + b)
        raw = f.read(e - b)
    if dt == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, {"F32": "<f4", "U8": "u1"}[dt]).reshape(shape)
ok(all(np.all(np.isfinite(arr(pre + n))) for n in text if ".experts." not in n), "all float values finite")

# ---- experts: six tensors back to back, not in id order; MXFP4 scales sane
contig, shuffled, scl = True, True, True
for i in range(tc["first_k_dense_replace"], nL):
    m = f"{pre}model.layers.{i}.block_sparse_moe.experts."
    starts = []
    for e in range(E):
        six = sorted(T[f"{m}{e}.{w}.{k}"][3:5] for w in ("w1", "w2", "w3") for k in ("weight_packed", "weight_scale"))
        contig &= len({T[f"{m}{e}.{w}.{k}"][0] for w in ("w1", "w2", "w3") for k in ("weight_packed", "weight_scale")}) == 1
        contig &= all(six[j][1] == six[j + 1][0] for j in range(5))
        starts.append(six[0][0])
        for w in ("w1", "w2", "w3"):
            sc = arr(f"{m}{e}.{w}.weight_scale").astype(np.int64)
            scl &= bool(np.all(sc != 255))
    if E > 1:
        shuffled &= starts != sorted(starts)
ok(contig, "each expert's six tensors are back to back in one shard")
ok(shuffled, "experts are not in id order inside a shard")
ok(scl, "no MXFP4 scale byte is 255 (NaN)")
i0 = tc["first_k_dense_replace"]
if i0 < nL:
    m = f"{pre}model.layers.{i0}.block_sparse_moe.experts.0.w1."
    pk, sc = arr(m + "weight_packed"), arr(m + "weight_scale")
    nib = np.stack([pk & 15, pk >> 4], -1).reshape(pk.shape[0], -1)
    e2 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6])
    w = e2[nib & 7] * np.where(nib & 8, -1, 1) * np.repeat(2.0 ** (sc.astype(np.int64) - 127), 32, 1)
    r = float(np.sqrt(np.mean(w * w)) * np.sqrt(L))
    ok(0.5 < r < 2, f"MXFP4 expert weights ~ 1/sqrt(fan_in) (rms x sqrt(L) = {r:.2f})")

# ---- A_log zero padding; KDA gate ranges from the stored values
alog = [n for n in text if n.endswith("A_log")]
good = bool(alog)
for n in alog:
    a = arr(pre + n).reshape(-1)
    good &= a.size > H and np.all(a[:H] != 0) and np.all(a[H:] == 0) and np.all(np.abs(a[:H]) < 1)
ok(good, f"A_log: {H} real values then exact zeros (stored {arr(pre + alog[0]).size if alog else 0})")

# ---- vision
vis = [n for n in T if n.startswith(("vision_tower.", "mm_projector."))]
ok(bool(vis), "vision_tower.* / mm_projector.* tensors present")
if wmap is not None:
    vs = {T[n][0] for n in vis}
    ok(any(all(x.startswith(("vision_tower.", "mm_projector.")) for x in T if T[x][0] == s) for s in vs),
       "a vision-only shard")

# ---- vocabulary and tokenizer files
lines = open(os.path.join(d, "tiktoken.model"), "rb").read().split(b"\n")
lines = [l for l in lines if l]
toks = [base64.b64decode(l.split()[0]) for l in lines]
ranks = [int(l.split()[1]) for l in lines]
ok(ranks == list(range(N)), f"tiktoken.model: ranks 0..{N - 1} in order")
ok(sorted(toks[:256]) == [bytes([b]) for b in range(256)] and len(set(toks)) == N,
   "first 256 tokens are the single bytes; all tokens distinct")
ok(sum(len(t) > 1 and any(c >= 0x80 for c in t) for t in toks) > 10 and max(len(t) for t in toks) > 4,
   "merges include multi-byte UTF-8 and long tokens")
dec = json.load(open(os.path.join(d, "tokenizer_config.json")))["added_tokens_decoder"]
names = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
         6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 254: "[UNK]", 255: "[PAD]"}
good = sorted(map(int, dec)) == list(range(N, N + 256)) and all(v["special"] is True for v in dec.values())
for o in range(256):
    c = dec[str(N + o)]["content"]
    good &= c == names[o] if o in names else (c == f"<|reserved_token_{N + o}|>" or 18 <= o <= 21)
good &= all("media" in dec[str(N + o)]["content"] for o in range(18, 22))
ok(good, "tokenizer_config: 256 reserved ids named as in the release, all special")
gc = json.load(open(os.path.join(d, "generation_config.json")))
ok(gc["temperature"] == 1.0 and gc["top_p"] == 1.0 and gc["eos_token_id"] == N + 2,
   "generation_config: temperature 1.0, top_p 1.0, eos")
EOF

pycheck() { # dir label key=value...: a crash of the checker is a failure too
    /usr/bin/python3 "$T/check.py" "$@" 2>&1 || fail "$2: the checker ran to the end"
}
sum_dir() { (cd "$1" && cat $(ls | sort) | cksum); }

# ---- tiny with the defaults, twice, and another seed
if gen "$T/a" --preset tiny; then
    pass "tiny preset generated"
    pycheck "$T/a" "tiny" N=1256 num_hidden_layers=6 first_k_dense_replace=1 \
        hidden_size=100 attn_res_block_size=2 num_experts=12
else fail "tiny preset generated"; fi
gen "$T/b" --preset tiny --seed 1 && check "same seed: identical files" [ "$(sum_dir "$T/a")" = "$(sum_dir "$T/b")" ]
gen "$T/c" --preset tiny --seed 2 && check "another seed: different weights" \
    [ "$(cksum <"$T/a/model-00002-of-000008.safetensors")" != "$(cksum <"$T/c/model-00002-of-000008.safetensors")" ]
check "no temporary directory left behind" [ -z "$(ls -d "$T"/*.tmp-* 2>/dev/null)" ]

# ---- option combinations
if gen "$T/d" --preset tiny --no-prefix --f32 --single --dense 0 --layers 4 --merges 300; then
    pass "tiny --no-prefix --f32 --single --dense 0 --layers 4"
    pycheck "$T/d" "tiny-single" N=556 prefix=0 float=F32 num_hidden_layers=4 \
        first_k_dense_replace=0
else fail "tiny --no-prefix --f32 --single --dense 0 --layers 4"; fi
if gen "$T/e" --preset tiny --layers 3 --dense 2 --experts 5 --active 2 --shared 1 --block 3 --seed 7; then
    pass "tiny --layers 3 --dense 2 --experts 5 --active 2 --shared 1 --block 3"
    pycheck "$T/e" "tiny-3" N=1256 num_hidden_layers=3 first_k_dense_replace=2 \
        num_experts=5 num_experts_per_token=2 num_shared_experts=1 attn_res_block_size=3
else fail "tiny --layers 3 --dense 2 --experts 5 --active 2 --shared 1 --block 3"; fi

# the layout options do not change the values: same tensor bytes with and without the prefix
gen "$T/f" --preset tiny --no-prefix && /usr/bin/python3 - "$T/a" "$T/f" <<'EOF'
import json, os, struct, sys
def tensors(d):
    out = {}
    for s in sorted(f for f in os.listdir(d) if f.endswith(".safetensors")):
        raw = open(os.path.join(d, s), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for k, t in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__":
                b, e = t["data_offsets"]
                out[k.removeprefix("language_model.")] = raw[8 + n + b:8 + n + e]
    return out
a, f = tensors(sys.argv[1]), tensors(sys.argv[2])
print(("PASS" if a == f else "FAIL") + ": --no-prefix writes the same tensor values")
EOF
[ $? -eq 0 ] || fail "--no-prefix comparison ran"

# ---- refusals: one-line error, non-zero exit, nothing written
refuse() { # desc expected-substring args...
    desc=$1; pat=$2; shift 2
    "$MK" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$T/err"; then pass "refuses $desc (exit $rc)"
    else fail "refuses $desc (exit $rc, stderr: $(head -c 300 "$T/err"))"; fi
}
refuse "an existing non-empty OUT_DIR" "not empty" --preset tiny --quiet "$T/a"
check "the existing model is untouched" [ "$(sum_dir "$T/a")" = "$(sum_dir "$T/b")" ]
refuse "an unknown preset" "expected tiny, slice or release" --preset huge "$T/x"
refuse "a missing --preset" "preset is required" "$T/x"
refuse "a bad --seed" "--seed" --preset tiny --seed 12x "$T/x"
refuse "--layers 0" "--layers" --preset tiny --layers 0 "$T/x"
refuse "--active above --experts" "--active" --preset tiny --experts 4 --active 5 "$T/x"
refuse "--dense above --layers" "--dense" --preset tiny --layers 2 --dense 3 "$T/x"
refuse "a missing OUT_DIR" "missing OUT_DIR" --preset tiny
# k3chat needs one shared expert at least (config.c: num_shared_experts in 1..64): a model
# written with --shared 0 was refused by every load
refuse "--shared 0 (a model no load takes)" "--shared '0': expected an integer in 1..64" --preset tiny --shared 0 "$T/x"
check "--shared 0 is a usage error (exit 2)" [ "$rc" = 2 ]
refuse "an unknown option" "usage" --preset tiny --bogus "$T/x"
: >"$T/file"
refuse "an OUT_DIR that is a file" "not a directory" --preset tiny "$T/file"
check "nothing written for refused runs" [ ! -e "$T/x" ]
if gen "$T/a" --preset tiny --seed 2 --force; then
    check "--force replaces an existing model" [ "$(sum_dir "$T/a")" = "$(sum_dir "$T/c")" ]
else fail "--force replaces an existing model"; fi
check "--force leaves no old directory behind" [ -z "$(ls -d "$T"/a.old-* 2>/dev/null)" ]
mkdir "$T/empty"
gen "$T/empty" --preset tiny && check "an existing empty OUT_DIR is used" [ -f "$T/empty/config.json" ]
# a signal while writing (a large model) leaves nothing that looks like a model, nor a temporary
"$MK" --preset slice --layers 1 --experts 2 --active 1 --merges 0 --quiet "$T/k" 2>"$T/k.err" &
pid=$!
sleep 0.3
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
if [ -e "$T/k" ]; then check "a run that finished before the signal is complete" [ $rc -eq 0 -a -f "$T/k/tiktoken.model" ]
else check "SIGTERM while writing: non-zero exit, no OUT_DIR (exit $rc)" [ $rc -ne 0 ]; fi
check "SIGTERM while writing: the temporary directory is removed" [ -z "$(ls -d "$T"/k.tmp-* 2>/dev/null)" ]
rm -rf "$T/k"
"$MK" --help | grep -q "slice" && pass "--help documents the presets" || fail "--help documents the presets"
exit 0
