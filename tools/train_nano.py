#!/usr/bin/python3
"""train_nano.py: train k3-nano, a small model with every component of the Kimi K3 architecture,
on the synthetic corpus of nano_corpus.py, and export it in the release format.

This is the third independent implementation of the architecture (after the C engine and
tools/k3_ref.py), written from ../shared/spec/k3-model.md in PyTorch (Debian's python3-torch, CPU):
KDA with the bounded gate, gated NoPE MLA (last layer MLA), Attention Residuals with several
blocks, Stable LatentMoE (sigmoid router, correction bias for selection only, renormalised
weights, latent down/up with RMSNorm, MXFP4 routed experts trained quantization-aware, shared
experts), SiTU-GLU, a dense first layer.

STATUS (2026-11-30): written and smoke-tested up to the first optimizer steps; no model has been
trained yet. The per-token KDA recurrence makes one step of batch 32 take seconds on a 2-core
machine (sequences are ~150-400 tokens because of the thinking-effort system message), so a full
run needs a chunked (WY-form) KDA or a bigger machine. The exported layout follows the spec but
has not yet been loaded by the C engine. See issue 10.

Usage: train_nano.py [--steps N] [--seed S] [--threads T] OUT_DIR
Writes OUT_DIR/{config.json, model.safetensors, tiktoken.model, tokenizer_config.json,
generation_config.json, train_log.json, loss.png, accuracy.png}.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nano_corpus  # noqa: E402
import nano_tok  # noqa: E402

CFG = dict(hidden=128, layers=6, kinds="KKMKKM", first_dense=1, inter=320,
           kda_heads=4, kda_dim=32, conv_k=4, lb=-5.0,
           mla_heads=4, q_lora=64, kv_lora=48, nope=16, rope=16, v=32,
           experts=8, active=2, latent=64, moe_inter=128, shared=1,
           block=2, beta1=4.0, beta2=25.0, eps=1e-5, merges=600)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def situ_glu(g, u, b1, b2):
    return b1 * torch.tanh(g / b1) * torch.sigmoid(g) * (b2 * torch.tanh(u / b2))


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_codes(w):
    """Quantize w [rows, cols] to MXFP4: per 32-column group a power-of-two scale so the
    largest magnitude fits 6, each value to the nearest e2m1 level. Returns (nibbles, exps)."""
    r, c = w.shape
    g = w.reshape(r, c // 32, 32)
    amax = g.abs().amax(-1).clamp_min(2.0 ** -100)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    x = g / torch.exp2(e)[..., None]
    idx = (x.abs()[..., None] - E2M1).abs().argmin(-1)
    nib = idx + 8 * (x < 0).long() * (idx > 0).long()
    return nib.reshape(r, c), (e + 127).long()


def mxfp4_dequant(nib, exps):
    r, c = nib.shape
    v = E2M1[nib & 7] * torch.where(nib >= 8, -1.0, 1.0)
    return (v.reshape(r, c // 32, 32) * torch.exp2(exps.float() - 127)[..., None]).reshape(r, c)


class FakeMX(torch.autograd.Function):
    """Quantization-aware training: forward with the MXFP4 value, gradient straight through."""
    @staticmethod
    def forward(ctx, w):
        n, e = mxfp4_codes(w.detach())
        return mxfp4_dequant(n, e)

    @staticmethod
    def backward(ctx, g):
        return g


def lin(i, o, scale=1.0):
    m = nn.Linear(i, o, bias=False)
    nn.init.normal_(m.weight, std=scale / math.sqrt(i))
    return m


class KDA(nn.Module):
    def __init__(s, c):
        super().__init__()
        D, H, d, K = c["hidden"], c["kda_heads"], c["kda_dim"], c["conv_k"]
        P = H * d
        s.H, s.d, s.K, s.lb = H, d, K, c["lb"]
        s.q_proj, s.k_proj, s.v_proj, s.g_proj = lin(D, P), lin(D, P), lin(D, P), lin(D, P)
        s.o_proj = lin(P, D, 0.5)
        s.q_conv = nn.Parameter(torch.randn(P, K) * 0.3 + torch.tensor([0, 0, 0, 1.0]))
        s.k_conv = nn.Parameter(torch.randn(P, K) * 0.3 + torch.tensor([0, 0, 0, 1.0]))
        s.v_conv = nn.Parameter(torch.randn(P, K) * 0.3 + torch.tensor([0, 0, 0, 1.0]))
        s.f_a, s.f_b = lin(D, d), lin(d, P)
        s.b_proj = lin(D, H)
        s.dt_bias = nn.Parameter(torch.zeros(P))
        s.A_log = nn.Parameter(torch.log(torch.linspace(0.5, 2.0, H)))
        s.o_norm = nn.Parameter(torch.ones(d))
        s.eps = c["eps"]

    def conv(s, x, w):  # causal depthwise, tap 0 = oldest
        xp = F.pad(x.transpose(1, 2), (s.K - 1, 0))
        return F.conv1d(xp, w[:, None, :], groups=w.shape[0]).transpose(1, 2)

    def forward(s, x):
        B, T, _ = x.shape
        H, d = s.H, s.d
        q = F.silu(s.conv(s.q_proj(x), s.q_conv)).view(B, T, H, d)
        k = F.silu(s.conv(s.k_proj(x), s.k_conv)).view(B, T, H, d)
        v = F.silu(s.conv(s.v_proj(x), s.v_conv)).view(B, T, H, d)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * d ** -0.5
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        z = (s.f_b(s.f_a(x)) + s.dt_bias).view(B, T, H, d)
        g = s.lb * torch.sigmoid(torch.exp(s.A_log)[None, None, :, None] * z)
        beta = torch.sigmoid(s.b_proj(x))  # B T H
        S = x.new_zeros(B, H, d, d)
        outs = []
        for t in range(T):  # S[key][value]
            S = S * torch.exp(g[:, t])[..., None]
            kt = k[:, t]
            pred = torch.einsum("bhij,bhi->bhj", S, kt)
            S = S + beta[:, t, :, None, None] * kt[..., None] * (v[:, t] - pred)[..., None, :]
            outs.append(torch.einsum("bhij,bhi->bhj", S, q[:, t]))
        o = rms(torch.stack(outs, 1), s.o_norm, s.eps).reshape(B, T, H * d)
        return s.o_proj(torch.sigmoid(s.g_proj(x)) * o)


class MLA(nn.Module):
    def __init__(s, c):
        super().__init__()
        D, Hm = c["hidden"], c["mla_heads"]
        s.Hm, s.nope, s.rope, s.v, s.kvl = Hm, c["nope"], c["rope"], c["v"], c["kv_lora"]
        s.q_a = lin(D, c["q_lora"])
        s.q_a_ln = nn.Parameter(torch.ones(c["q_lora"]))
        s.q_b = lin(c["q_lora"], Hm * (s.nope + s.rope))
        s.kv_a = lin(D, s.kvl + s.rope)
        s.kv_a_ln = nn.Parameter(torch.ones(s.kvl))
        s.kv_b = lin(s.kvl, Hm * (s.nope + s.v))
        s.o_proj = lin(Hm * s.v, D, 0.5)
        s.g_proj = lin(D, Hm * s.v)

    def forward(s, x):
        B, T, _ = x.shape
        q = s.q_b(rms(s.q_a(x), s.q_a_ln, 1e-6)).view(B, T, s.Hm, s.nope + s.rope)
        ckr = s.kv_a(x)
        c, kr = ckr[..., :s.kvl], ckr[..., s.kvl:]
        kv = s.kv_b(rms(c, s.kv_a_ln, 1e-6)).view(B, T, s.Hm, s.nope + s.v)
        k = torch.cat([kv[..., :s.nope], kr[:, :, None, :].expand(B, T, s.Hm, s.rope)], -1)
        val = kv[..., s.nope:]
        att = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(s.nope + s.rope)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        ctx = torch.einsum("bhts,bshd->bthd", att, val).reshape(B, T, s.Hm * s.v)
        return s.o_proj(torch.sigmoid(s.g_proj(x)) * ctx)


class Dense(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.gate, s.up, s.down = lin(c["hidden"], c["inter"]), lin(c["hidden"], c["inter"]), lin(c["inter"], c["hidden"], 0.5)
        s.b1, s.b2 = c["beta1"], c["beta2"]

    def forward(s, x):
        return s.down(situ_glu(s.gate(x), s.up(x), s.b1, s.b2))


class MoE(nn.Module):
    def __init__(s, c):
        super().__init__()
        D, E, L, Fi, S = c["hidden"], c["experts"], c["latent"], c["moe_inter"], c["shared"]
        s.E, s.k, s.b1, s.b2, s.eps = E, c["active"], c["beta1"], c["beta2"], c["eps"]
        s.gate = lin(D, E)
        s.register_buffer("bias", torch.zeros(E))
        s.down, s.up = lin(D, L), lin(L, D, 0.5)
        s.norm = nn.Parameter(torch.ones(L))
        s.w1 = nn.Parameter(torch.randn(E, Fi, L) / math.sqrt(L))
        s.w3 = nn.Parameter(torch.randn(E, Fi, L) / math.sqrt(L))
        s.w2 = nn.Parameter(torch.randn(E, L, Fi) / math.sqrt(Fi))
        s.sg, s.su, s.sd = lin(D, S * Fi), lin(D, S * Fi), lin(S * Fi, D, 0.5)
        s.qat = False
        s.load = torch.zeros(E)

    def experts(s):
        if not s.qat:
            return s.w1, s.w3, s.w2
        return tuple(torch.stack([FakeMX.apply(w[e]) for e in range(s.E)]) for w in (s.w1, s.w3, s.w2))

    def forward(s, x):
        sc = torch.sigmoid(s.gate(x))  # B T E
        top = (sc + s.bias).topk(s.k, -1).indices
        sel = torch.zeros_like(sc).scatter(-1, top, 1.0)
        w = sc * sel
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
        if s.training:
            s.load = sel.reshape(-1, s.E).mean(0).detach()
        z = s.down(x)
        w1, w3, w2 = s.experts()
        h = situ_glu(torch.einsum("btl,efl->btef", z, w1), torch.einsum("btl,efl->btef", z, w3), s.b1, s.b2)
        u = (torch.einsum("btef,elf->btel", h, w2) * w[..., None]).sum(2)
        return s.up(rms(u, s.norm, s.eps)) + s.sd(situ_glu(s.sg(x), s.su(x), s.b1, s.b2))


class Layer(nn.Module):
    def __init__(s, c, i):
        super().__init__()
        D = c["hidden"]
        s.attn = MLA(c) if c["kinds"][i] == "M" else KDA(c)
        s.mlp = Dense(c) if i < c["first_dense"] else MoE(c)
        s.in_ln, s.post_ln = nn.Parameter(torch.ones(D)), nn.Parameter(torch.ones(D))
        s.ar_norm, s.ar_proj = nn.Parameter(torch.ones(D)), nn.Parameter(torch.randn(D) * 0.02)
        s.mr_norm, s.mr_proj = nn.Parameter(torch.ones(D)), nn.Parameter(torch.randn(D) * 0.02)


def mix(p, blocks, nw, pw, eps):
    """Attention Residuals: softmax over [blocks..., p] of dot(entry, nw*pw)/rms(entry)."""
    ent = torch.stack(blocks + [p], 0)  # N B T D
    score = (ent * (nw * pw)).sum(-1) / torch.sqrt(ent.pow(2).mean(-1) + eps)
    return (score.softmax(0)[..., None] * ent).sum(0)


class Nano(nn.Module):
    def __init__(s, c, vocab):
        super().__init__()
        s.c = c
        D = c["hidden"]
        s.embed = nn.Embedding(vocab, D)
        nn.init.normal_(s.embed.weight, std=1.0)
        s.layers = nn.ModuleList(Layer(c, i) for i in range(c["layers"]))
        s.norm = nn.Parameter(torch.ones(D))
        s.out_norm, s.out_proj = nn.Parameter(torch.ones(D)), nn.Parameter(torch.randn(D) * 0.02)
        s.head = lin(D, vocab, 1.0)

    def forward(s, ids):
        eps = s.c["eps"]
        h = s.embed(ids)
        blocks = []
        for i, L in enumerate(s.layers):
            p = h
            x = mix(p, blocks, L.ar_norm, L.ar_proj, eps) if blocks else p
            restart = i % s.c["block"] == 0
            if restart:
                blocks.append(p)
            a = L.attn(rms(x, L.in_ln, eps))
            p = a if restart else p + a
            m = mix(p, blocks, L.mr_norm, L.mr_proj, eps)
            p = p + L.mlp(rms(m, L.post_ln, eps))
            h = p
        return s.head(rms(mix(h, blocks, s.out_norm, s.out_proj, eps), s.norm, eps))

    def moes(s):
        return [L.mlp for L in s.layers if isinstance(L.mlp, MoE)]


# ---- data ----------------------------------------------------------------------------------

def encode_examples(tok, exs):
    out = []
    for ex in exs:
        ctx, tgt = tok.render(ex["messages"], ex["think"], ex["effort"])
        out.append((ctx, tgt, ex["task"]))
    return out


def batch(data, idx, pad):
    seqs = [data[i][0] + data[i][1] for i in idx]
    T = max(len(s) for s in seqs) - 1
    x = torch.full((len(idx), T), pad, dtype=torch.long)
    y = torch.full((len(idx), T), -100, dtype=torch.long)
    for b, i in enumerate(idx):
        ctx, tgt, _ = data[i]
        s = ctx + tgt
        x[b, :len(s) - 1] = torch.tensor(s[:-1])
        y[b, len(ctx) - 1:len(s) - 1] = torch.tensor(tgt)
    return x, y


# ---- export (release format, ../shared/spec/k3-model.md sections 1-4) -----------------------

def bf16_bytes(t):
    a = t.detach().float().contiguous().numpy().view(np.uint32).astype(np.uint64)
    a = ((a + 0x7FFF + ((a >> 16) & 1)) >> 16).astype(np.uint16)
    return a.tobytes()


def f32_bytes(t):
    return t.detach().float().contiguous().numpy().astype("<f4").tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes), written in order."""
    header, off = {}, 0
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for *_, b in tensors:
            f.write(b)


def export(model, tok, c, out):
    P = "language_model.model."
    ts = []

    def bf(name, t):
        ts.append((name, "BF16", tuple(t.shape), bf16_bytes(t)))

    def f32(name, t):
        ts.append((name, "F32", tuple(t.shape), f32_bytes(t)))

    bf(P + "embed_tokens.weight", model.embed.weight)
    for i, L in enumerate(model.layers):
        p = f"{P}layers.{i}."
        for n, t in (("input_layernorm", L.in_ln), ("post_attention_layernorm", L.post_ln),
                     ("self_attention_res_norm", L.ar_norm), ("self_attention_res_proj", L.ar_proj),
                     ("mlp_res_norm", L.mr_norm), ("mlp_res_proj", L.mr_proj)):
            bf(p + n + ".weight", t)
        a = L.attn
        if isinstance(a, KDA):
            for n in ("q_proj", "k_proj", "v_proj", "g_proj", "o_proj", "f_a", "f_b", "b_proj"):
                bf(p + "self_attn." + {"f_a": "f_a_proj", "f_b": "f_b_proj"}.get(n, n) + ".weight",
                   getattr(a, n).weight)
            for n in ("q", "k", "v"):
                f32(p + f"self_attn.{n}_conv1d.weight", getattr(a, n + "_conv")[:, None, :])
            f32(p + "self_attn.dt_bias", a.dt_bias)
            f32(p + "self_attn.A_log", torch.cat([a.A_log, torch.zeros(32 - a.H)]))  # zero-padded as in the release
            f32(p + "self_attn.o_norm.weight", a.o_norm)
        else:
            for n, m in (("q_a_proj", a.q_a), ("q_b_proj", a.q_b), ("kv_a_proj_with_mqa", a.kv_a),
                         ("kv_b_proj", a.kv_b), ("o_proj", a.o_proj), ("g_proj", a.g_proj)):
                bf(p + f"self_attn.{n}.weight", m.weight)
            bf(p + "self_attn.q_a_layernorm.weight", a.q_a_ln)
            bf(p + "self_attn.kv_a_layernorm.weight", a.kv_a_ln)
        m = L.mlp
        if isinstance(m, Dense):
            for n in ("gate", "up", "down"):
                bf(p + f"mlp.{n}_proj.weight", getattr(m, n).weight)
        else:
            q = p + "block_sparse_moe."
            bf(q + "gate.weight", m.gate.weight)
            f32(q + "gate.e_score_correction_bias", m.bias)
            bf(q + "routed_expert_down_proj.weight", m.down.weight)
            bf(q + "routed_expert_up_proj.weight", m.up.weight)
            bf(q + "routed_expert_norm.weight", m.norm)
            bf(q + "shared_experts.gate_proj.weight", m.sg.weight)
            bf(q + "shared_experts.up_proj.weight", m.su.weight)
            bf(q + "shared_experts.down_proj.weight", m.sd.weight)
            for e in range(m.E):
                for wn, w in (("w1", m.w1[e]), ("w2", m.w2[e]), ("w3", m.w3[e])):
                    nib, ex = mxfp4_codes(w.detach())
                    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).to(torch.uint8)
                    ts.append((f"{q}experts.{e}.{wn}.weight_packed", "U8", tuple(packed.shape),
                               packed.numpy().tobytes()))
                    ts.append((f"{q}experts.{e}.{wn}.weight_scale", "U8", tuple(ex.shape),
                               ex.to(torch.uint8).numpy().tobytes()))
    bf(P + "norm.weight", model.norm)
    bf(P + "output_attn_res_norm.weight", model.out_norm)
    bf(P + "output_attn_res_proj.weight", model.out_proj)
    bf("language_model.lm_head.weight", model.head.weight)
    write_safetensors(f"{out}/model.safetensors", ts)

    n = tok.n
    kda = [i + 1 for i in range(c["layers"]) if c["kinds"][i] == "K"]
    mla = [i + 1 for i in range(c["layers"]) if c["kinds"][i] == "M"]
    qc = {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
          "config_groups": {"group_0": {"targets": ["Linear"], "format": "mxfp4-pack-quantized",
                                        "weights": {"num_bits": 4, "type": "float", "strategy": "group",
                                                    "group_size": 32, "symmetric": True}}},
          "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*"]}
    text = {"model_type": "kimi_k3", "hidden_size": c["hidden"], "num_hidden_layers": c["layers"],
            "vocab_size": n + 256, "first_k_dense_replace": c["first_dense"], "intermediate_size": c["inter"],
            "num_attention_heads": c["mla_heads"], "q_lora_rank": c["q_lora"], "kv_lora_rank": c["kv_lora"],
            "qk_nope_head_dim": c["nope"], "qk_rope_head_dim": c["rope"], "v_head_dim": c["v"],
            "num_experts": c["experts"], "num_experts_per_token": c["active"],
            "moe_intermediate_size": c["moe_inter"], "routed_expert_hidden_size": c["latent"],
            "num_shared_experts": c["shared"], "attn_res_block_size": c["block"],
            "activation_situ_beta": c["beta1"], "activation_situ_linear_beta": c["beta2"],
            "rms_norm_eps": c["eps"], "routed_scaling_factor": 1.0, "moe_renormalize": True,
            "latent_moe_use_norm": True, "mla_use_nope": True, "mla_use_output_gate": True,
            "hidden_act": "situ", "moe_router_activation_func": "sigmoid", "num_expert_group": 1,
            "topk_group": 1, "tie_word_embeddings": False,
            "linear_attn_config": {"num_heads": c["kda_heads"], "head_dim": c["kda_dim"],
                                   "short_conv_kernel_size": c["conv_k"], "gate_lower_bound": c["lb"],
                                   "use_full_rank_gate": True, "kda_layers": kda, "full_attn_layers": mla},
            "bos_token_id": n, "eos_token_id": n + 2, "pad_token_id": n + 255}
    cfg = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
           "bos_token_id": n, "eos_token_id": n + 2, "pad_token_id": n + 255, "tie_word_embeddings": False,
           "text_config": text, "vision_config": {"model_type": "none"}, "quantization_config": qc}
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(f"{out}/generation_config.json", "w") as f:
        json.dump({"temperature": 1.0, "top_p": 1.0, "eos_token_id": n + 2}, f, indent=2)
        f.write("\n")
    tok.save(out)


def snap_to_export(model):
    """Make the torch weights exactly what the export holds: BF16-rounded dense weights,
    MXFP4-dequantized experts (so the C engine can be compared to this model)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("conv", "dt_bias", "A_log", "o_norm")):
                continue
            if ".mlp.w" in name:
                for e in range(p.shape[0]):
                    p[e] = mxfp4_dequant(*mxfp4_codes(p[e]))
            else:
                a = torch.from_numpy(np.frombuffer(bf16_bytes(p), dtype=np.uint16).astype(np.uint32) << 16)
                p.copy_(a.view(torch.float32).reshape(p.shape))
        for m in model.moes():
            m.qat = False


# ---- training ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=60000, help="training conversations")
    ap.add_argument("out")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    exs = [nano_corpus.example(rng) for _ in range(a.n)]
    texts = [m["content"] + " " + m.get("reasoning_content", "") for ex in exs[:20000] for m in ex["messages"]]
    texts.append(nano_tok.EFFORT_BODY.format("max") + " message role system assistant user think response type"
                 " thinking-effort")
    t0 = time.time()
    tok = nano_tok.Tok(nano_tok.learn_bpe(texts, CFG["merges"]))
    print(f"vocab: {tok.n} tokens ({time.time() - t0:.1f}s)", flush=True)
    data = encode_examples(tok, exs)
    V = tok.n + 256
    model = Nano(CFG, V)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model: {nparam / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    qat_from = int(a.steps * 0.75)
    log = {"step": [], "loss": [], "acc": {}, "config": CFG, "seed": a.seed, "steps": a.steps}
    t0, ema = time.time(), None
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        if step == qat_from:
            for m in model.moes():
                m.qat = True
        idx = [rng.randrange(len(data)) for _ in range(a.batch)]
        x, y = batch(data, idx, tok.special["[PAD]"])
        model.train()
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balancing: nudge the selection bias
            for m in model.moes():
                m.bias += 1e-3 * torch.sign(m.load.mean() - m.load)
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 25 == 0 or step == a.steps - 1:
            log["step"].append(step)
            log["loss"].append(ema)
            print(f"step {step:5d} loss {ema:.4f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
    log["train_seconds"] = time.time() - t0
    snap_to_export(model)
    export(model, tok, CFG, a.out)
    torch.save(model.state_dict(), os.path.join(a.out, "..", "k3-nano.pt")) if os.environ.get("NANO_SAVE_PT") else None
    with open(f"{a.out}/train_log.json", "w") as f:
        json.dump(log, f)
    print(f"exported to {a.out} in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
