#!/usr/bin/python3
"""train_nano.py: train k3-nano, a small model with every component of the Kimi K3 architecture,
on the synthetic corpus of nano_corpus.py, and export it in the release format.

This is the third independent implementation of the architecture (after the C engine and
tools/k3_ref.py), written from doc/model-format.md in PyTorch (Debian's python3-torch, CPU):
KDA with the bounded gate, gated NoPE MLA (last layer MLA), Attention Residuals with several
blocks, Stable LatentMoE (sigmoid router, correction bias for selection only, renormalised
weights, latent down/up with RMSNorm, MXFP4 routed experts trained quantization-aware, shared
experts), SiTU-GLU, a dense first layer.

Speed (2 cores, Debian's torch on OpenBLAS): KDA runs in chunks of 16 (kda_chunked, WY form;
kda_recurrent is the token-by-token reference it is tested against), routed experts compute only
their tokens, and the BPE is taught the fixed chat-format text so sequences are ~150 tokens.
One thread per run is faster than two at these sizes (OpenMP overhead on small ops).

Usage: train_nano.py [--steps N] [--batch B] [--lr LR] [--kinds KMKM] [--seed S] [--threads T] OUT_DIR
Writes OUT_DIR/{config.json, model.safetensors, tiktoken.model, tokenizer_config.json,
generation_config.json, train_log.json, torch_state.pt, loss.png, accuracy.png}.
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


def kda_recurrent(q, k, v, g, beta):
    """The KDA recurrence token by token, as the spec writes it (the reference for kda_chunked).
    q, k, v, g: [B, T, H, d]; beta: [B, T, H]. Returns o [B, T, H, d]."""
    B, T, H, d = q.shape
    S = q.new_zeros(B, H, d, d)  # S[key][value]
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None]
        kt = k[:, t]
        pred = (S * kt[..., None]).sum(-2)
        S = S + beta[:, t, :, None, None] * kt[..., None] * (v[:, t] - pred)[..., None, :]
        outs.append((S * q[:, t][..., None]).sum(-2))
    return torch.stack(outs, 1)


def kda_chunked(q, k, v, g, beta, C=16):
    """The same recurrence in chunks of C tokens (WY form), 4-5x faster to train than the loop.

    Within a chunk with start state S0 and cumulative log-decay G_t = sum_{s<=t} g_s (per key
    channel), the pseudo-values u_t = beta_t (v_t - (D_t S_{t-1})^T k_t), with which
    S_t = D_t S_{t-1} + k_t u_t^T, solve the unit lower-triangular system
        (I + diag(beta) A) U = diag(beta) (V - (e^G k) S0),  A_ts = sum_i k_ti k_si e^(G_ti - G_si), s < t;
    then  O = (e^G q) S0 + Bm U  with  Bm_ts = sum_i q_ti k_si e^(G_ti - G_si), s <= t,
    and   S_end = e^(G_C) S0 + sum_s (e^(G_C - G_s) k_s) u_s^T.
    The pairwise decays are formed as e^(Gm_t) e^(-Gm_s) with G centred on the chunk's middle, so
    with g >= -5 and C = 16 no factor exceeds e^40 (finite in f32, products too)."""
    B, T, H, d = q.shape
    n = (T + C - 1) // C
    pad = n * C - T
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))

    def chunks(x):  # [B, T, H, d] -> [B, H, n, C, d]
        return x.reshape(B, n, C, H, d).permute(0, 3, 1, 2, 4)

    q, k, v, g = chunks(q), chunks(k), chunks(v), chunks(g)
    beta = beta.reshape(B, n, C, H).permute(0, 3, 1, 2)[..., None]  # [B, H, n, C, 1]
    G = g.cumsum(-2)
    Gm = G - G[..., C // 2 - 1:C // 2, :]
    kn = k * torch.exp(-Gm)
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    A = ((k * torch.exp(Gm)) @ kn.transpose(-1, -2)).masked_fill(~strict, 0.0)
    Bm = ((q * torch.exp(Gm)) @ kn.transpose(-1, -2)).masked_fill(~incl, 0.0)
    M = torch.eye(C, dtype=q.dtype, device=q.device) + beta * A
    eG = torch.exp(G)
    W = torch.linalg.solve_triangular(M, torch.cat([beta * v, beta * (eG * k)], -1), upper=False,
                                      unitriangular=True)
    W1, W2 = W[..., :d], W[..., d:]
    qh = eG * q
    kend = torch.exp(G[..., -1:, :] - G) * k
    gend = torch.exp(G[..., -1, :])[..., None]
    S = q.new_zeros(B, H, d, d)
    outs = []
    for c in range(n):
        U = W1[:, :, c] - W2[:, :, c] @ S
        outs.append(qh[:, :, c] @ S + Bm[:, :, c] @ U)
        S = gend[:, :, c] * S + kend[:, :, c].transpose(-1, -2) @ U
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, n * C, H, d)
    return o[:, :T]


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
        s.chunked = True

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
        o = kda_chunked(q, k, v, g, beta) if s.chunked else kda_recurrent(q, k, v, g, beta)
        o = rms(o, s.o_norm, s.eps).reshape(B, T, H * d)
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
        z = s.down(x).reshape(-1, s.down.out_features)
        wf, topf = w.reshape(-1, s.E), top.reshape(-1, s.k)
        w1, w3, w2 = s.experts()
        u = torch.zeros_like(z)
        for e in range(s.E):  # only the tokens routed to expert e
            rows = (topf == e).any(-1).nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue
            ze = z[rows]
            he = situ_glu(ze @ w1[e].t(), ze @ w3[e].t(), s.b1, s.b2)
            u = u.index_add(0, rows, (he @ w2[e].t()) * wf[rows, e:e + 1])
        u = u.reshape(*x.shape[:-1], -1)
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


# ---- export (release format, doc/model-format.md sections 1-4) -----------------------

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
        # greedy: a model this small answers best without sampling (the release asks for 1.0)
        json.dump({"temperature": 0.0, "top_p": 1.0, "eos_token_id": n + 2}, f, indent=2)
        f.write("\n")
    tok.save(out)


def read_safetensors(path):
    """{name: torch tensor} of one safetensors file (BF16 and F32 as float32, U8 as uint8)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if t["dtype"] == "BF16":
                x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            elif t["dtype"] == "F32":
                x = np.frombuffer(raw, dtype="<f4").copy()
            elif t["dtype"] == "U8":
                x = np.frombuffer(raw, dtype=np.uint8).copy()
            else:
                raise ValueError(f"{path}: {name}: unexpected dtype {t['dtype']}")
            out[name] = torch.from_numpy(x.reshape(t["shape"]))
    return out


def load_export(d):
    """The inverse of export(): a Nano model holding exactly the weights of the release-format
    files in d (experts dequantized from MXFP4), and the config it was built with."""
    with open(f"{d}/config.json") as f:
        t = json.load(f)["text_config"]
    la = t["linear_attn_config"]
    kinds = "".join("M" if i + 1 in la["full_attn_layers"] else "K" for i in range(t["num_hidden_layers"]))
    c = dict(CFG, hidden=t["hidden_size"], layers=t["num_hidden_layers"], kinds=kinds,
             first_dense=t["first_k_dense_replace"], inter=t["intermediate_size"], kda_heads=la["num_heads"],
             kda_dim=la["head_dim"], conv_k=la["short_conv_kernel_size"], lb=la["gate_lower_bound"],
             mla_heads=t["num_attention_heads"], q_lora=t["q_lora_rank"], kv_lora=t["kv_lora_rank"],
             nope=t["qk_nope_head_dim"], rope=t["qk_rope_head_dim"], v=t["v_head_dim"], experts=t["num_experts"],
             active=t["num_experts_per_token"], latent=t["routed_expert_hidden_size"],
             moe_inter=t["moe_intermediate_size"], shared=t["num_shared_experts"], block=t["attn_res_block_size"],
             beta1=t["activation_situ_beta"], beta2=t["activation_situ_linear_beta"], eps=t["rms_norm_eps"])
    w = read_safetensors(f"{d}/model.safetensors")
    model = Nano(c, t["vocab_size"])
    P = "language_model.model."

    def take(name):
        if name not in w:
            raise ValueError(f"{d}/model.safetensors: tensor {name} is missing (config.json: {kinds} layers)")
        return w.pop(name)

    def put(param, name):
        src = take(name)
        if src.numel() != param.numel():
            raise ValueError(f"{d}/model.safetensors: {name} has shape {list(src.shape)}, "
                             f"expected {list(param.shape)} from config.json")
        param.data.copy_(src.reshape(param.shape))

    with torch.no_grad():
        put(model.embed.weight, P + "embed_tokens.weight")
        for i, L in enumerate(model.layers):
            p = f"{P}layers.{i}."
            for n, prm in (("input_layernorm", L.in_ln), ("post_attention_layernorm", L.post_ln),
                           ("self_attention_res_norm", L.ar_norm), ("self_attention_res_proj", L.ar_proj),
                           ("mlp_res_norm", L.mr_norm), ("mlp_res_proj", L.mr_proj)):
                put(prm, p + n + ".weight")
            a = L.attn
            if isinstance(a, KDA):
                for n in ("q_proj", "k_proj", "v_proj", "g_proj", "o_proj", "f_a", "f_b", "b_proj"):
                    put(getattr(a, n).weight, p + "self_attn." + {"f_a": "f_a_proj", "f_b": "f_b_proj"}.get(n, n) + ".weight")
                for n in ("q", "k", "v"):
                    put(getattr(a, n + "_conv"), p + f"self_attn.{n}_conv1d.weight")
                put(a.dt_bias, p + "self_attn.dt_bias")
                a.A_log.data.copy_(take(p + "self_attn.A_log")[:a.H])
                put(a.o_norm, p + "self_attn.o_norm.weight")
            else:
                for n, m in (("q_a_proj", a.q_a), ("q_b_proj", a.q_b), ("kv_a_proj_with_mqa", a.kv_a),
                             ("kv_b_proj", a.kv_b), ("o_proj", a.o_proj), ("g_proj", a.g_proj)):
                    put(m.weight, p + f"self_attn.{n}.weight")
                put(a.q_a_ln, p + "self_attn.q_a_layernorm.weight")
                put(a.kv_a_ln, p + "self_attn.kv_a_layernorm.weight")
            m = L.mlp
            if isinstance(m, Dense):
                for n in ("gate", "up", "down"):
                    put(getattr(m, n).weight, p + f"mlp.{n}_proj.weight")
                continue
            q = p + "block_sparse_moe."
            put(m.gate.weight, q + "gate.weight")
            m.bias.copy_(take(q + "gate.e_score_correction_bias"))
            put(m.down.weight, q + "routed_expert_down_proj.weight")
            put(m.up.weight, q + "routed_expert_up_proj.weight")
            put(m.norm, q + "routed_expert_norm.weight")
            put(m.sg.weight, q + "shared_experts.gate_proj.weight")
            put(m.su.weight, q + "shared_experts.up_proj.weight")
            put(m.sd.weight, q + "shared_experts.down_proj.weight")
            for e in range(m.E):
                for wn, prm in (("w1", m.w1), ("w2", m.w2), ("w3", m.w3)):
                    packed = take(f"{q}experts.{e}.{wn}.weight_packed").long()
                    nib = torch.stack([packed & 15, packed >> 4], -1).reshape(packed.shape[0], -1)
                    prm[e] = mxfp4_dequant(nib, take(f"{q}experts.{e}.{wn}.weight_scale").long())
        put(model.norm, P + "norm.weight")
        put(model.out_norm, P + "output_attn_res_norm.weight")
        put(model.out_proj, P + "output_attn_res_proj.weight")
        put(model.head.weight, "language_model.lm_head.weight")
    if w:
        raise ValueError(f"{d}: tensors not used by the model: {sorted(w)[:5]}")
    model.eval()
    return model, c


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
                a = torch.from_numpy((np.frombuffer(bf16_bytes(p), dtype=np.uint16).astype(np.uint32) << 16).view(np.float32))
                p.copy_(a.reshape(p.shape))
        for m in model.moes():
            m.qat = False


# ---- training ---------------------------------------------------------------------------------

@torch.no_grad()
def score(model, data, pad, bs=64):
    """Teacher-forced token accuracy: the share of target tokens (reasoning, answer, closing tags)
    that are the model's argmax given the right prefix. A smooth training curve; it stays below
    100 % because some choices are random in the corpus (which answer wording), and it is not the
    greedy accuracy of the model card (tools/nano_eval.py measures that through k3chat)."""
    model.eval()
    ok = tot = 0
    for b0 in range(0, len(data), bs):
        idx = list(range(b0, min(len(data), b0 + bs)))
        x, y = batch(data, idx, pad)
        pred = model(x).argmax(-1)
        ok += ((pred == y) & (y != -100)).sum().item()
        tot += (y != -100).sum().item()
    model.train()
    return ok / tot


def plots(log, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pv = log.get("prev", {"step": [], "loss": [], "eval_step": [], "acc": {}})
    off = log.get("offset", 0)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(pv["step"] + [off + x for x in log["step"]], pv["loss"] + log["loss"])
    edge = 0
    for st in log.get("stages", []):  # a dashed line where each later stage starts
        edge += st.get("stop_at") or st["steps"]
        ax.axvline(edge, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (EMA, nats/token)")
    ax.set_title("k3-nano training loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/loss.png", dpi=90)
    fig, ax = plt.subplots(figsize=(7, 4))
    for task, ys in log["acc"].items():
        ax.plot(pv["eval_step"] + [off + x for x in log["eval_step"]],
                [100 * y for y in pv["acc"].get(task, []) + ys], label=task)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out target tokens right, teacher-forced (%)")
    ax.set_title("k3-nano per-task accuracy during training")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/accuracy.png", dpi=90)


def vocabulary(exs):
    """The BPE vocabulary, learned on the first 20000 training conversations. The fixed text of
    the chat format (thinking-effort message, tag names) weighs as much as the corpus in the
    statistics, so it takes few tokens and the sequences stay short."""
    texts = [m["content"] + " " + m.get("reasoning_content", "") for ex in exs[:20000] for m in ex["messages"]]
    texts += [nano_tok.EFFORT_BODY.format(e) + " message role system assistant user think response type"
              " thinking-effort" for e in ("low", "high", "max") for _ in range(len(texts) // 3)]
    return nano_tok.Tok(nano_tok.learn_bpe(texts, CFG["merges"]))


def training_set(seed, n, per_task_heldout, history=0.0, weights=None):
    """(held-out conversations per task, n training conversations that avoid their numeric keys;
    with probability history a conversation has an earlier exchange; weights: the task mix)."""
    rng = random.Random(seed)
    held_all = nano_corpus.heldout(seed, per_task_heldout)
    unseen = {nano_corpus.numeric_key(ex) for v in held_all.values() for ex in v} - {None}
    exs = []
    while len(exs) < n:
        ex = nano_corpus.example(rng, history=history, weights=weights)
        if nano_corpus.numeric_key(ex) not in unseen:
            exs.append(ex)
    return held_all, exs, rng


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=60000, help="training conversations")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-n", type=int, default=48, help="held-out conversations per task for the curve")
    ap.add_argument("--qat", type=float, default=0.8, help="fraction of the steps before MXFP4 QAT starts")
    ap.add_argument("--init", help="start from a checkpoint-N.pt / torch_state.pt, or an exported model "
                    "directory (same config), instead of random weights")
    ap.add_argument("--kinds", default=CFG["kinds"], help="attention kind per layer: K (KDA) or M (MLA)")
    ap.add_argument("--history", type=float, default=0.0, help="share of conversations with an earlier exchange")
    ap.add_argument("--formats", type=int, default=nano_corpus.FORMATS_LATEST,
                    help="reasoning formats of the corpus (nano_corpus.py: 1 for stages 1-3, 2 for stage 4, ...)")
    ap.add_argument("--weights", help="task mix, e.g. add=3,sub=3,sort=4 (the rest as in nano_corpus.WEIGHTS)")
    ap.add_argument("--stop-at", type=int, help="stop after this many steps (the schedule still spans --steps)")
    ap.add_argument("--batch-seed", type=int, help="seed of the batch order (default: --seed)")
    ap.add_argument("--export-only", metavar="CKPT", help="export this checkpoint (same --seed/--n/--kinds) and stop")
    ap.add_argument("out")
    a = ap.parse_args()
    if not a.kinds or set(a.kinds) - set("KM") or a.kinds[-1] != "M":
        ap.error("--kinds: K and M letters, the last one M (the last layer is MLA)")
    CFG.update(kinds=a.kinds, layers=len(a.kinds))
    try:
        nano_corpus.set_formats(a.formats)
    except ValueError as e:
        ap.error(f"--formats: {e}")
    weights = dict(nano_corpus.WEIGHTS)
    for kv in (a.weights or "").split(","):
        if kv:
            k, _, v = kv.partition("=")
            if k not in weights or not v.replace(".", "", 1).isdigit():
                ap.error(f"--weights: '{kv}' is not TASK=NUMBER with TASK one of {', '.join(weights)}")
            weights[k] = float(v)
    init_model = None
    if a.init and os.path.isdir(a.init):  # an exported model: its config.json decides the shape
        init_model, c = load_export(a.init)
        CFG.update(c)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    held_all, exs, rng = training_set(a.seed, a.n, max(a.eval_n, 200), a.history, weights)
    t0 = time.time()
    if init_model is not None:  # continuing an exported model: keep its token ids
        tok = nano_tok.Tok.load(a.init)
    else:  # learned on the plain single-turn stream, so --history and --weights keep the same ids
        tok = vocabulary(exs if not a.history and weights == nano_corpus.WEIGHTS else
                         training_set(a.seed, min(a.n, 20000), max(a.eval_n, 200))[1])
    print(f"vocab: {tok.n} tokens ({time.time() - t0:.1f}s)", flush=True)
    if a.export_only:
        model = Nano(CFG, tok.n + 256)
        st = torch.load(a.export_only)
        model.load_state_dict(st.get("model", st))
        snap_to_export(model)
        export(model, tok, CFG, a.out)
        print(f"exported {a.export_only} to {a.out}", flush=True)
        return
    data = encode_examples(tok, exs)
    held = {t: encode_examples(tok, v[:a.eval_n]) for t, v in held_all.items()}
    pad = tok.special["[PAD]"]
    V = tok.n + 256
    model = Nano(CFG, V)
    if init_model is not None:  # an exported model: continue training from its weights
        model.load_state_dict(init_model.state_dict())
        print(f"initialised from {a.init}", flush=True)
    elif a.init:
        st = torch.load(a.init)
        model.load_state_dict(st.get("model", st))
        print(f"initialised from {a.init}", flush=True)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model: {nparam / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    qat_from = int(a.steps * a.qat)
    log = {"step": [], "loss": [], "eval_step": [], "acc": {t: [] for t in held}, "config": CFG,
           "seed": a.seed, "steps": a.steps, "batch": a.batch, "lr": a.lr, "n": a.n, "qat_from": qat_from,
           "kinds": CFG["kinds"], "init": a.init,
           "stop_at": a.stop_at, "batch_seed": a.batch_seed, "history": a.history, "weights": weights,
           "formats": a.formats}
    t0, ema, queue = time.time(), None, []
    prev = ""
    if a.init:  # an exported model keeps its log beside it, a checkpoint in its run's directory
        prev = os.path.join(a.init if os.path.isdir(a.init) else os.path.dirname(os.path.abspath(a.init)),
                            "train_log.json")
    off = 0
    if prev and os.path.isfile(prev):  # continuing a run: the curves of all earlier stages come first
        with open(prev) as f:
            p = json.load(f)
        poff = p.get("offset", 0)
        pp = p.get("prev", {"step": [], "loss": [], "eval_step": [], "acc": {}})
        off = poff + (p.get("stop_at") or p["steps"])
        log["stages"] = p.get("stages", []) + [{k: p[k] for k in ("steps", "lr", "seed", "stop_at", "init", "kinds",
                                                                  "batch_seed", "history", "weights", "formats")
                                                if k in p}]
        log["prev"] = {"step": pp["step"] + [poff + x for x in p["step"]], "loss": pp["loss"] + p["loss"],
                       "eval_step": pp["eval_step"] + [poff + x for x in p["eval_step"]],
                       "acc": {t: pp["acc"].get(t, []) + ys for t, ys in p["acc"].items()}}
    log["offset"] = off

    def evaluate(step, save=True):  # save: the checkpoint a later stage can start from (--init)
        log["eval_step"].append(step)
        line = []
        for t, d in held.items():
            log["acc"][t].append(score(model, d, pad))
            line.append(f"{t} {100 * log['acc'][t][-1]:.0f}%")
        print(f"eval {step:5d} " + " ".join(line), flush=True)
        if save:
            torch.save({"model": model.state_dict(), "step": step}, os.path.join(a.out, f"checkpoint-{step}.pt"))

    if a.batch_seed is not None:
        rng = random.Random(a.batch_seed)
    for step in range(a.stop_at or a.steps):
        lr = a.lr * min(1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        if step == qat_from:
            for m in model.moes():
                m.qat = True
        if not queue:  # 8 batches at a time, drawn at random and grouped by length (less padding)
            pool = sorted((rng.randrange(len(data)) for _ in range(8 * a.batch)),
                          key=lambda i: len(data[i][0]) + len(data[i][1]))
            queue = [pool[b * a.batch:(b + 1) * a.batch] for b in range(8)]
            rng.shuffle(queue)
        x, y = batch(data, queue.pop(), pad)
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
            print(f"step {step:5d} loss {ema:.4f} lr {lr:.2e} T {x.shape[1]} {time.time() - t0:.0f}s", flush=True)
        if (step + 1) % a.eval_every == 0 and step + 1 < (a.stop_at or a.steps):
            evaluate(step + 1)
    log["train_seconds"] = time.time() - t0
    torch.save({"model": model.state_dict(), "step": step + 1}, os.path.join(a.out, f"checkpoint-{step + 1}.pt"))
    snap_to_export(model)  # the curve's last point is the exported model
    evaluate(step + 1, save=False)
    export(model, tok, CFG, a.out)
    torch.save(model.state_dict(), os.path.join(a.out, "torch_state.pt"))
    with open(f"{a.out}/train_log.json", "w") as f:
        json.dump(log, f)
    try:
        plots(log, a.out)
    except ImportError as e:
        print(f"no plots ({e}); install python3-matplotlib", flush=True)
    print(f"exported to {a.out} in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
