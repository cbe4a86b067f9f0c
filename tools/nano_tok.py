#!/usr/bin/python3
"""nano_tok.py: k3-nano's vocabulary (byte-level BPE learned on the corpus) and the XTML chat
renderer, in Python, for training. The C engine's tokenizer and chat encoder are the product;
this module must agree with them token for token (tests/t-nano.sh checks it on the corpus).

The corpus is ASCII, where the Kimi pre-tokenizer (doc/chat-format.md) reduces to the
regex below (\\p{L} = [A-Za-z], \\p{N} = [0-9], no Han); Python's re is leftmost-first like
tiktoken's regex engine.
"""
import base64
import json
import re

PAT = re.compile(
    r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"""
    r"""|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"""
    r"""|[0-9]{1,3}"""
    r"""| ?[^\sA-Za-z0-9]+[\r\n]*"""
    r"""|\s*[\r\n]+"""
    r"""|\s+(?!\S)"""
    r"""|\s+""")

# Reserved ids after the base vocabulary, named as in the release (offset -> name).
SPECIAL_NAMES = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
                 6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>",
                 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]"}

EFFORT_BODY = ("`thinking_effort` guides on how much to think in your thinking channel (not including the "
               "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
               "Now the system is invoked with `thinking_effort={}`.")


def pieces(text):
    return PAT.findall(text)


def learn_bpe(texts, n_merges):
    """Byte-level BPE: repeatedly merge the most frequent adjacent pair within pieces.
    Digits are never merged, so every number is spelled digit by digit (easier arithmetic)."""
    from collections import Counter
    words = Counter()
    for t in texts:
        for p in pieces(t):
            words[p.encode()] += 1
    seqs = {w: [bytes([b]) for b in w] for w in words}
    vocab = [bytes([i]) for i in range(256)]
    for _ in range(n_merges):
        pairs = Counter()
        for w, s in seqs.items():
            f = words[w]
            for a, b in zip(s, s[1:]):
                if any(0x30 <= c <= 0x39 for c in a + b):
                    continue
                pairs[a, b] += f
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        new = a + b
        vocab.append(new)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab


class Tok:
    def __init__(self, vocab):
        self.vocab = vocab
        self.rank = {b: i for i, b in enumerate(vocab)}
        self.n = len(vocab)
        self.special = {name: self.n + off for off, name in SPECIAL_NAMES.items()}
        self.cache = {}

    def bpe(self, piece):
        if piece in self.rank:
            return [self.rank[piece]]
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        return [self.rank[p] for p in parts]

    def encode(self, text):
        out = []
        for p in pieces(text):
            ids = self.cache.get(p)
            if ids is None:
                ids = self.cache[p] = self.bpe(p.encode())
            out += ids
        return out

    def decode(self, ids):
        return b"".join(self.vocab[i] if i < self.n else b"" for i in ids).decode("utf-8", "replace")

    # ---- XTML (spec k3-chat.md section 2) ----
    def open_tag(self, tag, attrs=()):
        ids = [self.special["<|open|>"]] + self.encode(tag)
        for k, v in attrs:
            v = v.replace("&", "&amp;").replace('"', "&quot;")
            ids += self.encode(" " + k) + self.encode('="') + self.encode(v) + self.encode('"')
        return ids + [self.special["<|sep|>"]]

    def close_tag(self, tag):
        return [self.special["<|close|>"]] + self.encode(tag) + [self.special["<|sep|>"]]

    def render(self, messages, think, effort):
        """Conversation ids up to and including the generation prompt, and the ids of the
        final assistant message's generated part (the training target). messages[-1] is that
        assistant message."""
        eom = self.special["<|end_of_msg|>"]
        ids = []
        if think:
            ids += self.open_tag("message", [("role", "system"), ("type", "thinking-effort")])
            ids += self.encode(EFFORT_BODY.format(effort)) + self.close_tag("message") + [eom]
        for m in messages[:-1]:
            role = "system" if m["role"] == "developer" else m["role"]
            ids += self.open_tag("message", [("role", role)])
            if role == "assistant":
                if think:
                    ids += self.open_tag("think") + self.encode(m.get("reasoning_content", "").strip() and
                                                                m.get("reasoning_content", "")) + \
                        self.close_tag("think")
                ids += self.open_tag("response") + self.encode(m["content"]) + self.close_tag("response")
            else:
                ids += self.encode(m["content"])
            ids += self.close_tag("message") + [eom]
        last = messages[-1]
        ids += self.open_tag("message", [("role", "assistant")])
        if think:
            ids += self.open_tag("think")
            tgt = self.encode(last.get("reasoning_content", "")) + self.close_tag("think") + \
                self.open_tag("response")
        else:
            ids += self.open_tag("response")
            tgt = []
        tgt += self.encode(last["content"]) + self.close_tag("response") + self.close_tag("message") + [eom]
        return ids, tgt

    def save(self, d):
        with open(f"{d}/tiktoken.model", "w") as f:
            for i, b in enumerate(self.vocab):
                f.write(f"{base64.b64encode(b).decode()} {i}\n")
        dec = {}
        for off in range(256):
            name = SPECIAL_NAMES.get(off, f"<|reserved_token_{self.n + off}|>")
            dec[str(self.n + off)] = {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True}
        cfg = {"added_tokens_decoder": dec, "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]",
               "unk_token": "[UNK]", "model_max_length": 1048576, "tokenizer_class": "TikTokenTokenizer"}
        with open(f"{d}/tokenizer_config.json", "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")

    @staticmethod
    def load(d):
        vocab = []
        with open(f"{d}/tiktoken.model") as f:
            for line in f:
                b64, r = line.split()
                assert int(r) == len(vocab)
                vocab.append(base64.b64decode(b64))
        return Tok(vocab)
