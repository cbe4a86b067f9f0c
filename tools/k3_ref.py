#!/usr/bin/python3
"""k3_ref.py: the Kimi K3 forward pass in numpy, float64, written from the spec alone.

This is the oracle the C engine is measured against (issue 4, item 7) and the model's
documentation in executable form. Every formula below is quoted from
doc/model-format.md (section numbers in brackets); nothing here was read from the C code.

DESIGN
  * Weights are read by this file itself: safetensors headers parsed in Python (an index with
    shards, or one model.safetensors), the optional "language_model." prefix, BF16/F16/F32/F64
    decoded to float64, MXFP4 routed experts decoded per [4]. Everything is computed in float64,
    so a comparison with the f32 engine measures the engine's rounding, not this file's.
  * The forward pass runs a chunk of T positions layer-major: the position-independent parts
    (projections, norms, MLPs, AttnRes mixes) are numpy matrix products over the chunk; the
    sequential parts (causal conv tails, the KDA delta-rule state, the MLA latent cache) are
    carried in a State object and advanced position by position in order. Feeding a sequence
    in one chunk or in any split gives the same result (tests/t-ref.py checks this).
  * Attention Residuals work over depth, within one position: `blocks` holds per-position
    snapshots, shape [n_blocks][T, D], and is rebuilt for every chunk.

COMMAND LINE
  k3_ref.py MODEL_DIR (--ids "1 2 3" | --ids-file F | --x0 FILE) [--layers N]
            [--logits OUT.f32] [--trace OUT.f32] [--greedy N] [--chunk N]
  Output formats are the engine's validation hooks (issue 4, item 6):
    --logits: raw little-endian f32, positions x vocab_size, no header
    --trace:  h after every layer, raw LE f32, positions x layers x hidden_size, position-major
    --x0:     input rows, positions x hidden_size LE f32, used instead of embeddings
    --layers: run only the first N layers, then the final mix, norm and head
    --greedy: after the given ids, generate N tokens by argmax and print them (space-separated,
              one line); like the engine, the last generated token is never fed, so logits and
              trace cover the prompt and the first N-1 generated tokens.
"""
import argparse
import json
import os
import sys

import numpy as np

PREFIX = "language_model."

# --------------------------------------------------------------------------------------------
# Safetensors reader [1], [3]
# --------------------------------------------------------------------------------------------

ST_DTYPES = {  # safetensors dtype -> (numpy dtype of the stored element, element size)
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U8": ("u1", 1), "BOOL": ("u1", 1),
}


class Checkpoint:
    """Tensor index of a model directory: name (without prefix) -> (file, dtype, shape, offset)."""

    def __init__(self, mdir):
        self.dir = mdir
        self.tensors = {}
        index = os.path.join(mdir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                wmap = json.load(f)["weight_map"]
            files = sorted(set(wmap.values()))
        elif os.path.exists(os.path.join(mdir, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            raise ValueError(f"{mdir}: neither model.safetensors.index.json nor model.safetensors")
        for fn in files:
            self._read_header(os.path.join(mdir, fn))
        # [3] probe one tensor with and without the prefix
        probe = "model.layers.0.input_layernorm.weight"
        self.prefixed = (PREFIX + probe) in self.tensors and probe not in self.tensors
        if not self.prefixed and probe not in self.tensors:
            raise ValueError(f"{mdir}: tensor {probe} not found (with or without '{PREFIX}')")

    def _read_header(self, path):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            hdr = json.loads(f.read(n))
        data0 = 8 + n
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            if name.startswith("vision_tower.") or name.startswith("mm_projector."):
                continue
            if t["dtype"] not in ST_DTYPES:
                raise ValueError(f"{path}: {name}: unknown dtype {t['dtype']}")
            b, e = t["data_offsets"]
            nbytes = int(np.prod(t["shape"], dtype=np.int64)) * ST_DTYPES[t["dtype"]][1]
            if e - b != nbytes:
                raise ValueError(f"{path}: {name}: data_offsets span {e - b} bytes, shape needs {nbytes}")
            self.tensors[name] = (path, t["dtype"], tuple(t["shape"]), data0 + b)

    def has(self, name):
        return self._key(name) in self.tensors

    def _key(self, name):
        return PREFIX + name if self.prefixed else name

    def raw(self, name):
        """The stored elements as a numpy array of the stored type (BF16 as uint16)."""
        key = self._key(name)
        if key not in self.tensors:
            raise KeyError(f"{self.dir}: missing tensor {key}")
        path, dt, shape, off = self.tensors[key]
        npdt, _ = ST_DTYPES[dt]
        a = np.fromfile(path, dtype=npdt, count=int(np.prod(shape, dtype=np.int64)), offset=off)
        return dt, a.reshape(shape)

    def f64(self, name, shape=None):
        """Any float tensor as float64; `shape` (if given) is checked after squeezing 1-dims
        the spec allows (e.g. res_proj stored [1, D], conv taps [P, 1, K])."""
        dt, a = self.raw(name)
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        elif dt not in ("F32", "F16", "F64"):
            raise ValueError(f"{name}: dtype {dt} is not a float type")
        a = a.astype(np.float64)
        if shape is not None:
            if a.shape != tuple(shape):
                if a.size != int(np.prod(shape)):
                    raise ValueError(f"{name}: shape {a.shape}, expected {tuple(shape)}")
                a = a.reshape(shape)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: non-finite value")
        return a


# --------------------------------------------------------------------------------------------
# MXFP4 [4]
# --------------------------------------------------------------------------------------------

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_decode(packed, scale, name="mxfp4"):
    """packed u8 [rows, cols/2], scale u8 [rows, cols/32] -> float64 [rows, cols].
    Low nibble = even column, high nibble = odd column; nibble = sign (bit 3) + e2m1 index
    (bits 0-2); w = e2m1[idx] * (-1)^sign * 2^(s - 127); s = 255 is NaN and rejected."""
    rows, half = packed.shape
    cols = 2 * half
    if scale.shape != (rows, cols // 32) or cols % 32:
        raise ValueError(f"{name}: weight_scale shape {scale.shape}, expected {(rows, cols // 32)}")
    if np.any(scale == 255):
        raise ValueError(f"{name}: weight_scale holds 255 (NaN)")
    nib = np.empty((rows, cols), dtype=np.uint8)
    nib[:, 0::2] = packed & 0x0F
    nib[:, 1::2] = packed >> 4
    val = E2M1[nib & 7] * np.where(nib & 8, -1.0, 1.0)
    fac = np.ldexp(1.0, scale.astype(np.int64) - 127)          # [rows, cols/32]
    return val * np.repeat(fac, 32, axis=1)


# --------------------------------------------------------------------------------------------
# Configuration [2]
# --------------------------------------------------------------------------------------------

class Config:
    def __init__(self, mdir):
        with open(os.path.join(mdir, "config.json")) as f:
            top = json.load(f)
        tc = top.get("text_config") or top          # text keys may sit at the top level
        self.eos = top.get("eos_token_id", tc.get("eos_token_id"))
        la = tc.get("linear_attn_config", {})

        def get(d, key, where):
            if key not in d:
                raise ValueError(f"config.json: missing {where}{key}")
            return d[key]

        t = lambda k: get(tc, k, "text_config.")  # noqa: E731
        self.D = t("hidden_size")
        self.n_layers = t("num_hidden_layers")
        self.V = t("vocab_size")
        self.first_dense = t("first_k_dense_replace")
        self.I = t("intermediate_size")
        self.Hm = t("num_attention_heads")
        self.q_lora = t("q_lora_rank")
        self.kv_lora = t("kv_lora_rank")
        self.nope = t("qk_nope_head_dim")
        self.rope = t("qk_rope_head_dim")
        self.v_dim = t("v_head_dim")
        self.E = t("num_experts")
        if "num_experts_per_token" in tc:
            self.k_active = tc["num_experts_per_token"]
        else:
            self.k_active = t("num_experts_per_tok")
        self.F = t("moe_intermediate_size")
        self.L = t("routed_expert_hidden_size")
        self.S = t("num_shared_experts")
        self.block = t("attn_res_block_size")
        self.beta1 = float(t("activation_situ_beta"))
        self.beta2 = float(t("activation_situ_linear_beta"))
        self.eps = float(t("rms_norm_eps"))
        self.rsf = float(tc.get("routed_scaling_factor", 1.0))
        self.H = get(la, "num_heads", "linear_attn_config.")
        self.d = get(la, "head_dim", "linear_attn_config.")
        self.K = get(la, "short_conv_kernel_size", "linear_attn_config.")
        self.lower = float(get(la, "gate_lower_bound", "linear_attn_config."))
        # the formulas of [5] assume these; reject a checkpoint that says otherwise
        for key, want, d in (("mla_use_nope", True, tc), ("mla_use_output_gate", True, tc),
                             ("latent_moe_use_norm", True, tc), ("moe_renormalize", True, tc),
                             ("use_full_rank_gate", True, la), ("hidden_act", "situ", tc),
                             ("moe_router_activation_func", "sigmoid", tc),
                             ("num_expert_group", 1, tc), ("topk_group", 1, tc)):
            if key in d and d[key] != want:
                raise ValueError(f"config.json: {key} = {d[key]!r}, only {want!r} is supported")
        # layer plan: 1-indexed lists (in linear_attn_config, or beside it)
        def plan(key):
            v = la.get(key, tc.get(key))
            return None if v is None else set(v)
        kda, mla = plan("kda_layers"), plan("full_attn_layers")
        if mla is None:
            raise ValueError("config.json: missing linear_attn_config.full_attn_layers")
        self.kinds = []
        for i in range(self.n_layers):
            if (i + 1) in mla:
                self.kinds.append("mla")
            elif kda is None or (i + 1) in kda:
                self.kinds.append("kda")
            else:
                raise ValueError(f"config.json: layer {i + 1} is in neither kda_layers nor full_attn_layers")


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

class Model:
    """All weights of the text model as float64 arrays (routed experts decoded from MXFP4).
    dtype=np.float32 turns the whole forward pass into float32 arithmetic: not the reference,
    but a model of an f32 engine's rounding, used by tests to check that a checkpoint and its
    inputs are well conditioned for a 1e-5 comparison."""

    def __init__(self, mdir, dtype=np.float64):
        self.cfg = c = Config(mdir)
        self.dtype = dtype
        ck = Checkpoint(mdir)
        self.prefixed = ck.prefixed
        D, P, d, H, K = c.D, c.H * c.d, c.d, c.H, c.K
        self.embed = ck.f64("model.embed_tokens.weight", (c.V, D))
        self.norm = ck.f64("model.norm.weight", (D,))
        self.out_res_norm = ck.f64("model.output_attn_res_norm.weight", (D,))
        self.out_res_proj = ck.f64("model.output_attn_res_proj.weight", (D,))
        self.lm_head = ck.f64("lm_head.weight", (c.V, D))
        self.layers = []
        for i in range(c.n_layers):
            pre = f"model.layers.{i}."
            w = lambda n, shape: ck.f64(pre + n, shape)  # noqa: E731
            ly = {"kind": c.kinds[i]}
            for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
                      "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"):
                ly[n] = w(n + ".weight", (D,))
            a = "self_attn."
            if ly["kind"] == "kda":
                for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                    ly[n] = w(a + n + ".weight", (P, D))
                ly["o_proj"] = w(a + "o_proj.weight", (D, P))
                for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                    ly[n] = w(a + n + ".weight", (P, K))
                ly["f_a"] = w(a + "f_a_proj.weight", (d, D))
                ly["f_b"] = w(a + "f_b_proj.weight", (P, d))
                ly["b_proj"] = w(a + "b_proj.weight", (H, D))
                ly["dt_bias"] = w(a + "dt_bias", (P,))
                A = ck.f64(pre + a + "A_log")
                if A.size < H:
                    raise ValueError(f"{pre}{a}A_log: {A.size} values, need {H}")
                ly["A_log"] = A.reshape(-1)[:H]       # Decision [3]: the first H values
                ly["o_norm"] = w(a + "o_norm.weight", (d,))
            else:
                hd = c.nope + c.rope
                ly["q_a"] = w(a + "q_a_proj.weight", (c.q_lora, D))
                ly["q_a_ln"] = w(a + "q_a_layernorm.weight", (c.q_lora,))
                ly["q_b"] = w(a + "q_b_proj.weight", (c.Hm * hd, c.q_lora))
                ly["kv_a"] = w(a + "kv_a_proj_with_mqa.weight", (c.kv_lora + c.rope, D))
                ly["kv_a_ln"] = w(a + "kv_a_layernorm.weight", (c.kv_lora,))
                kv_b = w(a + "kv_b_proj.weight", (c.Hm * (c.nope + c.v_dim), c.kv_lora))
                kv_b = kv_b.reshape(c.Hm, c.nope + c.v_dim, c.kv_lora)   # per head: nope rows, v rows
                ly["kv_b_nope"] = kv_b[:, :c.nope, :]                    # [Hm, nope, kv_lora]
                ly["kv_b_v"] = kv_b[:, c.nope:, :]                       # [Hm, v, kv_lora]
                ly["o_proj"] = w(a + "o_proj.weight", (D, c.Hm * c.v_dim))
                ly["g_proj"] = w(a + "g_proj.weight", (c.Hm * c.v_dim, D))
            if i < c.first_dense:
                m = "mlp."
                ly["mlp"] = "dense"
                ly["gate"] = w(m + "gate_proj.weight", (c.I, D))
                ly["up"] = w(m + "up_proj.weight", (c.I, D))
                ly["down"] = w(m + "down_proj.weight", (D, c.I))
            else:
                m = "block_sparse_moe."
                ly["mlp"] = "moe"
                ly["router"] = w(m + "gate.weight", (c.E, D))
                ly["router_bias"] = w(m + "gate.e_score_correction_bias", (c.E,))
                ly["lat_down"] = w(m + "routed_expert_down_proj.weight", (c.L, D))
                ly["lat_up"] = w(m + "routed_expert_up_proj.weight", (D, c.L))
                ly["lat_norm"] = w(m + "routed_expert_norm.weight", (c.L,))
                ly["sh_gate"] = w(m + "shared_experts.gate_proj.weight", (c.S * c.F, D))
                ly["sh_up"] = w(m + "shared_experts.up_proj.weight", (c.S * c.F, D))
                ly["sh_down"] = w(m + "shared_experts.down_proj.weight", (D, c.S * c.F))
                ex = []
                for e in range(c.E):
                    mats = []
                    for wn, shape in (("w1", (c.F, c.L)), ("w3", (c.F, c.L)), ("w2", (c.L, c.F))):
                        base = f"{pre}{m}experts.{e}.{wn}"
                        if ck.has(base + ".weight_packed"):
                            _, pk = ck.raw(base + ".weight_packed")
                            _, sc = ck.raw(base + ".weight_scale")
                            mat = mxfp4_decode(pk, sc, base)
                            if mat.shape != shape:
                                raise ValueError(f"{base}: decoded shape {mat.shape}, expected {shape}")
                        else:                         # unquantized test checkpoints
                            mat = ck.f64(base + ".weight", shape)
                        mats.append(mat)
                    ex.append(tuple(mats))
                ly["experts"] = ex                    # e -> (w1 [F,L], w3 [F,L], w2 [L,F])
            self.layers.append(ly)
        if dtype != np.float64:
            for ly in self.layers:
                for k, v in ly.items():
                    if isinstance(v, np.ndarray):
                        ly[k] = v.astype(dtype)
                if "experts" in ly:
                    ly["experts"] = [tuple(a.astype(dtype) for a in t) for t in ly["experts"]]
            for k in ("embed", "norm", "out_res_norm", "out_res_proj", "lm_head"):
                setattr(self, k, getattr(self, k).astype(dtype))


# --------------------------------------------------------------------------------------------
# Building blocks [5]
# --------------------------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    """RMSNorm(x, w, eps) = x / sqrt(mean(x²) + eps) ⊙ w   (over the last axis)"""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def situ_glu(g, u, b1, b2):
    """SiTU-GLU(g, u) = β₁·tanh(g/β₁)·σ(g) · β₂·tanh(u/β₂)"""
    return b1 * np.tanh(g / b1) * sigmoid(g) * (b2 * np.tanh(u / b2))


def attn_res_mix(p, blocks, nw, pw, eps):
    """Attention Residuals mix over depth, for every position of the chunk at once.
        entries = blocks ++ [p]
        score_e = dot(entries_e, nw ⊙ pw) / sqrt(mean(entries_e²) + eps)
        return Σ_e softmax(score)_e · entries_e          (raw entries)
    p: [T, D]; blocks: list of [T, D]."""
    ent = np.stack(blocks + [p])                                       # [E, T, D]
    score = (ent @ (nw * pw)) / np.sqrt(np.mean(ent * ent, axis=-1) + eps)   # [E, T]
    score = score - score.max(axis=0, keepdims=True)
    wgt = np.exp(score)
    wgt /= wgt.sum(axis=0, keepdims=True)
    return np.einsum("et,etd->td", wgt, ent)


# --------------------------------------------------------------------------------------------
# Sequential state
# --------------------------------------------------------------------------------------------

class State:
    """Decode state carried between chunks: per KDA layer the H·d·d state S and the last K-1
    conv inputs of q, k, v; per MLA layer the latent cache (c and kr of every past position)."""

    def __init__(self, m):
        c, dt = m.cfg, m.dtype
        P = c.H * c.d
        self.n_pos = 0
        self.route_margins = []      # see moe(); filled as positions are processed
        self.layer = []
        for ly in m.layers:
            if ly["kind"] == "kda":
                self.layer.append({"S": np.zeros((c.H, c.d, c.d), dt),       # S[h][key][value]
                                   "tail": {n: np.zeros((c.K - 1, P), dt) for n in "qkv"}})
            else:
                self.layer.append({"c": np.zeros((0, c.kv_lora), dt), "kr": np.zeros((0, c.rope), dt)})


# --------------------------------------------------------------------------------------------
# Layers [5]
# --------------------------------------------------------------------------------------------

def causal_conv(u, w, st, name):
    """Causal depthwise conv over positions, no bias: out_t = Σ_j w[:, j] · u_{t-(K-1)+j}
    (tap 0 = oldest). u: [T, P]; w: [P, K]; the last K-1 inputs carry over in st['tail']."""
    K = w.shape[1]
    buf = np.concatenate([st["tail"][name], u])                        # [K-1+T, P]
    T = u.shape[0]
    out = np.zeros_like(u)
    for j in range(K):
        out += buf[j:j + T] * w[:, j]
    st["tail"][name] = buf[T:] if K > 1 else buf[:0]
    return out


def kda(ly, x, st, c):
    """Kimi Delta Attention, per head (state S in R^{d×d}, zero at the start):
        q, k, v = SiLU(causal depthwise conv_K(W_{q,k,v} x))
        q = q / sqrt(Σq² + 1e-6) · d^-½ ;  k = k / sqrt(Σk² + 1e-6)      (per head)
        z = f_b(f_a(x)) + dt_bias                                         [P]
        g = gate_lower_bound · σ(exp(A_log[h]) · z)                      per channel, in (lb, 0)
        β = σ(b_proj x)                                                   per head
        S ← Diag(e^g) · S                      (decay row i, the key channel, by e^{g_i})
        S ← S + β · k ⊗ (v − Sᵀk)
        o = Sᵀ q                               (with the updated S)
        y = o_proj( σ(g_proj x) ⊙ RMSNorm_head(o, o_norm) )
    x: [T, D] -> y: [T, D]."""
    T, H, d = x.shape[0], c.H, c.d
    q = silu(causal_conv(x @ ly["q_proj"].T, ly["q_conv1d"], st, "q")).reshape(T, H, d)
    k = silu(causal_conv(x @ ly["k_proj"].T, ly["k_conv1d"], st, "k")).reshape(T, H, d)
    v = silu(causal_conv(x @ ly["v_proj"].T, ly["v_conv1d"], st, "v")).reshape(T, H, d)
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) * d ** -0.5
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    z = (x @ ly["f_a"].T) @ ly["f_b"].T + ly["dt_bias"]                 # [T, P]
    g = c.lower * sigmoid(np.exp(ly["A_log"])[:, None] * z.reshape(T, H, d))   # [T, H, d]
    beta = sigmoid(x @ ly["b_proj"].T)                                 # [T, H]
    decay = np.exp(g)
    S = st["S"]
    o = np.empty((T, H, d), x.dtype)
    for t in range(T):                       # the delta rule is sequential over positions
        S *= decay[t][:, :, None]                                      # rows = key channels
        kS = np.einsum("hm,hmj->hj", k[t], S)                          # Sᵀk
        S += beta[t][:, None, None] * k[t][:, :, None] * (v[t] - kS)[:, None, :]
        o[t] = np.einsum("hm,hmj->hj", q[t], S)                        # Sᵀq
    on = rmsnorm(o, ly["o_norm"], c.eps).reshape(T, H * d)
    return (sigmoid(x @ ly["g_proj"].T) * on) @ ly["o_proj"].T


def mla(ly, x, st, c, absorbed=False):
    """Gated multi-head latent attention without positional encoding (NoPE):
        q = q_b(RMSNorm(q_a x, q_a_layernorm, 1e-6))          per head [nope | rope]
        c, kr = split(kv_a_proj_with_mqa x, [kv_lora, rope]);  c = RMSNorm(c, kv_a_layernorm, 1e-6)
        per head: k = [kv_b_nope(c) | kr]  (kr shared by all heads, raw),  val = kv_b_v(c)
        score = (q · k) / sqrt(nope + rope); causal softmax; ctx = Σ softmax · val
        y = o_proj( σ(g_proj x) ⊙ ctx )
    The cache holds c and kr only. absorbed=True computes the same thing with kv_b folded into
    the query (q_c = kv_b_noperᵀ q_nope) and the output (ctx = kv_b_v · Σ softmax · c), the
    decode form; both forms are kept so the test can check they agree.
    x: [T, D] -> y: [T, D]."""
    T, Hm, nope, rope = x.shape[0], c.Hm, c.nope, c.rope
    q = (rmsnorm(x @ ly["q_a"].T, ly["q_a_ln"], 1e-6) @ ly["q_b"].T).reshape(T, Hm, nope + rope)
    q_nope, q_rope = q[:, :, :nope], q[:, :, nope:]
    kv = x @ ly["kv_a"].T
    cl = rmsnorm(kv[:, :c.kv_lora], ly["kv_a_ln"], 1e-6)
    kr = kv[:, c.kv_lora:]
    st["c"] = np.concatenate([st["c"], cl])                            # [N, kv_lora]
    st["kr"] = np.concatenate([st["kr"], kr])                          # [N, rope]
    N = st["c"].shape[0]
    past = N - T                              # position t of the chunk sees cache rows 0..past+t
    mask = np.arange(N)[None, :] > (past + np.arange(T))[:, None]      # [T, N]
    scale = 1.0 / np.sqrt(nope + rope)
    if not absorbed:
        k_nope = np.einsum("hnc,Nc->hNn", ly["kv_b_nope"], st["c"])    # [Hm, N, nope]
        val = np.einsum("hvc,Nc->hNv", ly["kv_b_v"], st["c"])          # [Hm, N, v]
        score = np.einsum("thn,hNn->htN", q_nope, k_nope)
    else:
        q_c = np.einsum("thn,hnc->thc", q_nope, ly["kv_b_nope"])       # [T, Hm, kv_lora]
        score = np.einsum("thc,Nc->htN", q_c, st["c"])
    score = (score + np.einsum("thr,Nr->htN", q_rope, st["kr"])) * scale
    score = np.where(mask[None], -np.inf, score)
    score -= score.max(axis=-1, keepdims=True)
    p = np.exp(score)
    p /= p.sum(axis=-1, keepdims=True)                                 # [Hm, T, N]
    if not absorbed:
        ctx = np.einsum("htN,hNv->thv", p, val)
    else:
        ctx = np.einsum("hvc,htc->thv", ly["kv_b_v"], np.einsum("htN,Nc->htc", p, st["c"]))
    ctx = ctx.reshape(T, Hm * c.v_dim)
    return (sigmoid(x @ ly["g_proj"].T) * ctx) @ ly["o_proj"].T


def dense_mlp(ly, x, c):
    """Dense MLP (layers below first_k_dense_replace): down(SiTU-GLU(gate x, up x))"""
    return situ_glu(x @ ly["gate"].T, x @ ly["up"].T, c.beta1, c.beta2) @ ly["down"].T


def moe_route(ly, x, c):
    """Router: s = σ(gate x); T = top-k of (s + e_score_correction_bias);
    w_e = s_e / (Σ_T s + 1e-20) · routed_scaling_factor  (division only when k > 1).
    Returns (selected [T, k] expert ids, weights [T, k], selection scores [T, E])."""
    s = sigmoid(x @ ly["router"].T)                                    # [T, E]
    sel_score = s + ly["router_bias"]
    top = np.argsort(-sel_score, axis=1, kind="stable")[:, :c.k_active]
    ws = np.take_along_axis(s, top, axis=1)
    if c.k_active > 1:
        ws = ws / (ws.sum(axis=1, keepdims=True) + 1e-20)
    return top, ws * c.rsf, sel_score


def moe(ly, x, c, margins=None):
    """Stable LatentMoE:
        s, T, w as in moe_route
        z = routed_expert_down_proj x                                   D -> L
        u = Σ_{e∈T} w_e · w2_e( SiTU-GLU(w1_e z, w3_e z) )
        y = routed_expert_up_proj RMSNorm(u, routed_expert_norm)
            + shared_down( SiTU-GLU(shared_gate x, shared_up x) )
    x: [T, D] -> y: [T, D]; each expert runs once over the positions that chose it.
    margins (a list, optional) receives per position the gap between the k-th and the (k+1)-th
    selection score: a gap near rounding size means f32 and f64 may choose differently."""
    top, ws, sel = moe_route(ly, x, c)
    if margins is not None and c.k_active < c.E:
        srt = -np.sort(-sel, axis=1)
        margins.append(srt[:, c.k_active - 1] - srt[:, c.k_active])
    z = x @ ly["lat_down"].T                                           # [T, L]
    u = np.zeros_like(z)
    for e in np.unique(top):
        rows, slot = np.nonzero(top == e)
        w1, w3, w2 = ly["experts"][e]
        h = situ_glu(z[rows] @ w1.T, z[rows] @ w3.T, c.beta1, c.beta2) @ w2.T
        u[rows] += ws[rows, slot][:, None] * h
    routed = rmsnorm(u, ly["lat_norm"], c.eps) @ ly["lat_up"].T
    shared = situ_glu(x @ ly["sh_gate"].T, x @ ly["sh_up"].T, c.beta1, c.beta2) @ ly["sh_down"].T
    return routed + shared


# --------------------------------------------------------------------------------------------
# The forward pass [5]
# --------------------------------------------------------------------------------------------

def forward(m, st, x0, n_layers=None, absorbed=False):
    """Run a chunk of positions through the model, advancing `st`.
    x0: [T, D] input rows (embeddings or --x0). Returns (logits [T, V], trace [T, n, D]).
        h = embed[token]; blocks = []
        for layer i:
            p = h
            x = blocks ? mix(p, blocks, self_attention_res_norm, self_attention_res_proj) : p
            restart = (i % attn_res_block_size == 0)
            if restart: blocks.append(p)          # the raw prefix, before mixing
            a = Attention_i(RMSNorm(x, input_layernorm))
            p = restart ? a : p + a               # after a snapshot the prefix restarts
            m = mix(p, blocks, mlp_res_norm, mlp_res_proj)
            p = p + MLP_i(RMSNorm(m, post_attention_layernorm))
            h = p
        logits = lm_head · RMSNorm(mix(h, blocks, output_attn_res_norm, output_attn_res_proj), model.norm)
    """
    c = m.cfg
    n = c.n_layers if n_layers is None else n_layers
    T = x0.shape[0]
    h = x0.astype(m.dtype)
    blocks = []
    trace = np.empty((T, n, c.D))
    for i in range(n):
        ly, ls = m.layers[i], st.layer[i]
        p = h
        x = attn_res_mix(p, blocks, ly["self_attention_res_norm"], ly["self_attention_res_proj"], c.eps) \
            if blocks else p
        restart = (i % c.block == 0)
        if restart:
            blocks.append(p)
        xa = rmsnorm(x, ly["input_layernorm"], c.eps)
        a = kda(ly, xa, ls, c) if ly["kind"] == "kda" else mla(ly, xa, ls, c, absorbed)
        p = a if restart else p + a
        mm = attn_res_mix(p, blocks, ly["mlp_res_norm"], ly["mlp_res_proj"], c.eps)
        xm = rmsnorm(mm, ly["post_attention_layernorm"], c.eps)
        p = p + (dense_mlp(ly, xm, c) if ly["mlp"] == "dense" else moe(ly, xm, c, st.route_margins))
        h = p
        trace[:, i] = h
    st.n_pos += T
    fin = attn_res_mix(h, blocks, m.out_res_norm, m.out_res_proj, c.eps) if blocks else h
    logits = rmsnorm(fin, m.norm, c.eps) @ m.lm_head.T
    return logits, trace


def run(m, ids=None, x0=None, n_layers=None, greedy=0, chunk=0, absorbed=False, info=None):
    """Teacher-force `ids` (or the rows of x0), then generate `greedy` tokens by argmax.
    Returns (logits [N, V], trace [N, n, D], generated ids). N = prompt + max(greedy-1, 0):
    the last generated token is never fed. chunk > 0 splits the prompt into chunks of that size."""
    st = State(m)
    rows = x0 if x0 is not None else m.embed[np.asarray(ids, dtype=np.int64)]
    step = chunk if chunk > 0 else max(len(rows), 1)
    outs = [forward(m, st, rows[s:s + step], n_layers, absorbed) for s in range(0, len(rows), step)]
    gen = []
    for j in range(greedy):
        nxt = int(np.argmax(outs[-1][0][-1]))
        gen.append(nxt)
        if j + 1 < greedy:
            outs.append(forward(m, st, m.embed[[nxt]], n_layers, absorbed))
    logits = np.concatenate([o[0] for o in outs])
    trace = np.concatenate([o[1] for o in outs])
    if info is not None:             # conditioning of this run, for tests choosing their inputs
        top2 = -np.sort(-logits, axis=1)[:, :2]
        info["route_margin"] = min((float(a.min()) for a in st.route_margins), default=np.inf)
        info["logit_margin"] = top2[:, 0] - top2[:, 1]               # per position
    return logits, trace, gen


def main(argv=None):
    ap = argparse.ArgumentParser(description="Kimi K3 numpy float64 reference forward pass")
    ap.add_argument("model_dir")
    ap.add_argument("--ids", help='token ids, e.g. "1 2 3"')
    ap.add_argument("--ids-file", help="file of whitespace-separated token ids")
    ap.add_argument("--x0", help="input rows, positions x hidden_size raw LE f32")
    ap.add_argument("--layers", type=int, help="run only the first N layers")
    ap.add_argument("--logits", help="write logits (positions x vocab, LE f32)")
    ap.add_argument("--trace", help="write h after every layer (positions x layers x hidden, LE f32)")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily, print ids")
    ap.add_argument("--chunk", type=int, default=0, help="feed the prompt in chunks of N (0: one)")
    ap.add_argument("--absorbed", action="store_true", help="MLA in the absorbed (decode) form")
    a = ap.parse_args(argv)
    try:
        m = Model(a.model_dir)
        c = m.cfg
        ids, x0 = None, None
        if a.x0:
            if a.greedy:
                raise ValueError("--greedy needs token ids, not --x0")
            x0 = np.fromfile(a.x0, dtype="<f4")
            if x0.size % c.D:
                raise ValueError(f"{a.x0}: {x0.size} floats is not a multiple of hidden_size {c.D}")
            x0 = x0.reshape(-1, c.D).astype(np.float64)
        else:
            text = a.ids if a.ids is not None else (open(a.ids_file).read() if a.ids_file else None)
            if text is None:
                raise ValueError("give --ids, --ids-file or --x0")
            ids = [int(t) for t in text.split()]
            if not ids or min(ids) < 0 or max(ids) >= c.V:
                raise ValueError(f"token ids must be in 0..{c.V - 1} (and at least one)")
        if a.layers is not None and not 0 <= a.layers <= c.n_layers:
            raise ValueError(f"--layers {a.layers}: outside 0..{c.n_layers}")
        logits, trace, gen = run(m, ids, x0, a.layers, a.greedy, a.chunk, a.absorbed)
    except (ValueError, KeyError, OSError) as e:
        print(f"k3_ref.py: {e}", file=sys.stderr)
        return 1
    if a.logits:
        logits.astype("<f4").tofile(a.logits)
    if a.trace:
        trace.astype("<f4").tofile(a.trace)
    if a.greedy:
        print(" ".join(str(t) for t in gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
