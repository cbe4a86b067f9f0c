# t-serve-sampling.py: logit_bias, presence_penalty/frequency_penalty and logprobs/top_logprobs
# through `k3chat MODEL_DIR --serve` (a generated tiny checkpoint, loopback), each of which the
# server refused before. Raw HTTP: a bias key outside the vocabulary, not a decimal id, a bias
# past 100, more than 300 entries, a penalty past 2, top_logprobs 21 or without logprobs, and a
# repetition_penalty outside 0.01..2 are 400s naming the field. repetition_penalty (vLLM's; it was
# refused) divides the logit of a token of the prompt or of the answer so far (multiplies a
# negative one). The official OpenAI SDK for
# JavaScript (npm openai 5; SKIP without node/npm): a greedy answer's logprobs are the first of
# each top list, sorted, their bytes spell the answer; a bias of -100 on the greedy first token
# gives the former second choice; +100 on an id forces it at every step; a bias of 10 makes a
# greedy repetition that frequency_penalty and presence_penalty 2 break up (-2 keeps it); a
# streamed and a plain answer with one seed at temperature 1 carry the same logprobs; reasoning
# tokens have no logprobs, and the bias leaves the reasoning as it was (it applies to the answer).
# The server is killed at the end; every wait is bounded.
import json
import os
import subprocess

import serve_lib
from serve_lib import ok

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")
procs = []
FORCED = 300  # an ordinary id of the tiny vocabulary ("00")


def post(**kw):
    """POST a chat request ("hi"; max_tokens 2 unless given) with fields kw: (status, parsed body)."""
    st, o, _ = serve_lib.post_chat(PORT, dict({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                                              **kw))
    return st, o if isinstance(o, dict) else {"raw": str(o)[:200]}


def openai_token(b):
    """The token field OpenAI gives bytes b: the text, or "bytes:" and \\xHH for each byte."""
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join("\\x%02x" % x for x in b)


def tool(mode, text):
    """k3chat --tokenize / --detokenize of the model on text (a file's contents): stdout bytes."""
    path = os.path.join(T, "in")
    with open(path, "wb") as f:
        f.write(text)
    return subprocess.run([K3, mode, M, path], capture_output=True, timeout=120, env=env).stdout


try:
    srv, PORT, LOG = serve_lib.start_server(K3, M, T, env, procs, "sampling", ["--serve", "127.0.0.1:0"])
    ok(PORT is not None, "the server starts")
    if PORT is None:
        raise SystemExit(1)

    # ---- bad values: 400s naming the field
    many = {str(i): 1 for i in range(301)}
    for name, kw, param in [
        ("a bias key past the vocabulary", dict(logit_bias={"99999": 5}), "logit_bias.99999"),
        ("a bias key that is not an id", dict(logit_bias={"x1": 5}), "logit_bias.x1"),
        ("a bias key with a leading zero", dict(logit_bias={"05": 5}), "logit_bias.05"),
        ("a bias past 100", dict(logit_bias={"5": 101}), "logit_bias.5"),
        ("a bias that is a string", dict(logit_bias={"5": "1"}), "logit_bias.5"),
        ("301 bias entries", dict(logit_bias=many), "logit_bias"),
        ("presence_penalty 2.5", dict(presence_penalty=2.5), "presence_penalty"),
        ("frequency_penalty -3", dict(frequency_penalty=-3), "frequency_penalty"),
        ("top_logprobs 21", dict(logprobs=True, top_logprobs=21), "top_logprobs"),
        ("top_logprobs without logprobs", dict(top_logprobs=2), "top_logprobs"),
        ("repetition_penalty 0", dict(repetition_penalty=0), "repetition_penalty"),
        ("repetition_penalty 2.5", dict(repetition_penalty=2.5), "repetition_penalty"),
        ("repetition_penalty a string", dict(repetition_penalty="2"), "repetition_penalty"),
    ]:
        st, o = post(**kw)
        e = o.get("error") or {}
        ok(st == 400 and e.get("param") == param and e.get("message", "").startswith(param + ":"),
           "%s -> 400 naming %s (%d %s)" % (name, param, st, json.dumps(o)[:160]))
    st, o = post(logit_bias={str(i): 0 for i in range(300)}, presence_penalty=0.5, frequency_penalty=-0.5,
                 logprobs=False, top_logprobs=0)
    ok(st == 200 and o["choices"][0].get("logprobs") is None,
       "300 bias entries, penalties in range, logprobs false -> 200 without logprobs (%d %s)"
       % (st, json.dumps(o)[:160]))

    # ---- repetition_penalty (vLLM's; it was a 400): a bias of +100 on "q" and "z" makes them the only
    # candidates, their logits far above 0 and far from each other's difference, so dividing one by 2
    # hands the draw to the other: the prompt's ids count (content "q" or "z": the other one comes),
    # and so do the answer's (the first token does not come twice); 0.5 favours the one seen
    def qz(content, n, pen=None):
        kw = dict(messages=[{"role": "user", "content": content}], max_tokens=n, temperature=0,
                  reasoning_effort="none", logit_bias={"80": 100, "89": 100})
        if pen is not None:
            kw["repetition_penalty"] = pen
        st, o, _ = serve_lib.post_chat(PORT, kw)
        return o["choices"][0]["message"]["content"] if st == 200 else "%d %s" % (st, json.dumps(o)[:160])
    other = {"q": "z", "z": "q"}
    plain = {c: qz(c, 1) for c in "qz"}
    pen2 = {c: qz(c, 1, 2) for c in "qz"}
    ok(pen2 == other, "repetition_penalty 2 on a prompt of \"q\" or \"z\": the other one (%r; without: %r)"
       % (pen2, plain))
    ok(any(plain[c] == c for c in "qz"), "... where without it the prompt's own letter came (%r)" % plain)
    ok({c: qz(c, 1, 0.5) for c in "qz"} == {"q": "q", "z": "z"}, "repetition_penalty 0.5 favours the prompt's letter")
    first = qz("hi", 1)
    two = qz("hi", 2, 2)
    ok(first in other and two == first + other[first], "repetition_penalty 2: the answer's first letter %r is not "
       "drawn again (%r; without the penalty: %r)" % (first, two, qz("hi", 2)))

    # ---- the same behaviour over raw HTTP (checked without node too)
    forced = tool("--detokenize", b"%d\n" % FORCED)
    st, o = post(max_tokens=4, temperature=0, reasoning_effort="none", logprobs=True, logit_bias={str(FORCED): 100})
    lp = (o.get("choices") or [{}])[0].get("logprobs") or {}
    ok(st == 200 and o["choices"][0]["message"]["content"] == forced.decode() * 4 and
       [bytes(e["bytes"]) for e in lp.get("content", [])] == [forced] * 4 and lp.get("refusal", 1) is None,
       "raw HTTP: bias +100 on id %d forces %r, and logprobs.content lists it 4 times (%s)"
       % (FORCED, forced, json.dumps(o)[:200]))
    seeded = dict(max_tokens=8, temperature=1, seed=9, reasoning_effort="none", logprobs=True, top_logprobs=2,
                  stop=["\u00ff\u00fe"])
    st, o = post(**seeded)
    st2, sse, streamed = serve_lib.post_chat(PORT, dict(seeded, messages=[{"role": "user", "content": "hi"}],
                                                        stream=True))
    chunks = [x for x in serve_lib.sse_events(sse.encode()) if x != "[DONE]"] if streamed else []
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
    entries = [e for c in chunks if c.get("choices") for e in ((c["choices"][0].get("logprobs") or {})
                                                               .get("content") or [])]
    plain = o["choices"][0] if st == 200 else {}
    ok(st == 200 and st2 == 200 and plain["logprobs"]["content"] and text == plain["message"]["content"] and
       entries == plain["logprobs"]["content"],
       "raw HTTP: a streamed answer's chunks carry the plain answer's logprobs, in order (%d entries / %d)"
       % (len(entries), len(plain.get("logprobs", {}).get("content", []))))
    with_lp = [c["choices"][0] for c in chunks if c.get("choices") and
               (c["choices"][0].get("logprobs") or {}).get("content")]
    ok(with_lp and all(ch["delta"].get("content") for ch in with_lp),
       "raw HTTP: each chunk with logprobs entries carries their text (%d chunks)" % len(with_lp))
    st, o = post(max_tokens=10, temperature=0, reasoning_effort="high", logprobs=True)
    m = o.get("choices", [{}])[0]
    ok(st == 200 and m["message"].get("reasoning") and m["logprobs"]["content"] == [] and
       m["message"]["content"] == "", "raw HTTP: reasoning tokens get no logprobs (%r)" % m.get("logprobs"))

    # ---- the official OpenAI SDK for JavaScript
    cache = serve_lib.openai_sdk(["openai@5"])
    if cache:
        body = r"""
const [gidOf, forced] = [process.argv[3], process.argv[4]];
const base = { model: "m", messages: [{ role: "user", content: "hi" }], temperature: 0, reasoning_effort: "none" };
const create = (extra) => client.chat.completions.create({ ...base, ...extra });
const lp = (r) => r.choices[0].logprobs?.content ?? null;
const g = await create({ max_tokens: 8, logprobs: true, top_logprobs: 3 });
out.greedy = [g.choices[0].message.content, lp(g)];
out.force = lp(await create({ max_tokens: 5, logprobs: true, logit_bias: { [forced]: 100 } }));
out.rep = {};
for (const [k, pen] of Object.entries({ none: {}, freq: { frequency_penalty: 2 }, pres: { presence_penalty: 2 },
                                         neg: { frequency_penalty: -2 } }))
  out.rep[k] = lp(await create({ max_tokens: 10, logprobs: true, logit_bias: { [forced]: 10 }, ...pen }));
const seeded = { temperature: 1, seed: 5, max_tokens: 10, logprobs: true, top_logprobs: 2 };
const p = await create(seeded);
out.plain = [p.choices[0].message.content, lp(p)];
const s = await create({ ...seeded, stream: true });
let text = "", acc = [];
for await (const ch of s) {
  const c = ch.choices[0];
  if (!c) continue;
  text += c.delta?.content ?? "";
  acc.push(...(c.logprobs?.content ?? []));
}
out.stream = [text, acc];
const think = { reasoning_effort: "high", max_tokens: 12, logprobs: true };
const t0 = await create(think), t1 = await create({ ...think, logit_bias: { [forced]: 100 } });
out.think = [t0.choices[0].message.reasoning, lp(t0), t1.choices[0].message.reasoning,
             t0.choices[0].message.content, t1.choices[0].message.content];
"""
        # the id of the greedy answer's first token, found by a first run (tokenized back)
        first = None
        st, o = post(max_tokens=1, temperature=0, reasoning_effort="none", logprobs=True)
        if st == 200 and o["choices"][0]["logprobs"]["content"]:
            first = o["choices"][0]["logprobs"]["content"][0]
        ids = tool("--tokenize", bytes(first["bytes"])).split() if first else []
        ok(len(ids) == 1, "premise: the greedy first token tokenizes back to one id (%r)" % ids)
        gid = int(ids[0]) if ids else 0
        res = serve_lib.run_sdk(body, ["http://127.0.0.1:%d/v1" % PORT, str(gid), str(FORCED)], cache, env, 300, T,
                                "sampling.cjs", cwd=cache)

        content, g = res.get("greedy", [None, None])
        g = g or []
        ok(len(g) >= 6 and all(e["top_logprobs"] and e["top_logprobs"][0]["token"] == e["token"] and
                               e["top_logprobs"][0]["logprob"] == e["logprob"] for e in g),
           "greedy: each token is the first of its top_logprobs, with the same logprob (%d tokens)" % len(g))
        ok(g and all(len(e["top_logprobs"]) == 3 and
                     all(a["logprob"] >= b["logprob"] for a, b in zip(e["top_logprobs"], e["top_logprobs"][1:])) and
                     sum(2.718281828459045 ** t["logprob"] for t in e["top_logprobs"]) <= 1 + 1e-6 and
                     all(t["logprob"] <= 0 for t in e["top_logprobs"]) for e in g),
           "top_logprobs 3: three alternatives each, sorted, probabilities summing to at most 1")
        ok(g and bytes(sum((e["bytes"] for e in g), [])).decode("utf-8", "replace") == content,
           "the tokens' bytes spell the answer (%r)" % content)
        ok(g and all(e["token"] == openai_token(e["bytes"]) for e in g),
           "token is the text, or bytes:\\xHH... for a token that is part of a character (%r)"
           % [e["token"] for e in g])
        if first:  # bias -100 on the greedy first token: the second choice of that position
            st, o = post(max_tokens=1, temperature=0, reasoning_effort="none", logprobs=True, top_logprobs=2,
                         logit_bias={str(gid): -100})
            e = (o.get("choices") or [{}])[0].get("logprobs", {}).get("content") or [{}]
            second = g[0]["top_logprobs"][1]["token"] if g else None
            ok(st == 200 and e[0].get("token") == second and e[0].get("token") != first["token"],
               "bias -100 on the greedy token %r: the former second choice %r (%r)" % (first["token"], second,
                                                                                      e[0].get("token")))
            ok(e[0].get("logprob") == g[0]["top_logprobs"][1]["logprob"],
               "... its logprob is the model's, before the bias (%r)" % e[0].get("logprob"))
        f = res.get("force") or []
        ok(len(f) == 5 and all(bytes(e["bytes"]) == forced for e in f),
           "bias +100 on id %d (%r) forces it at every step (%r)" % (FORCED, forced, [e["token"] for e in f]))

        rep = {k: sum(bytes(e["bytes"]) == forced for e in (v or [])) for k, v in res.get("rep", {}).items()}
        ok(rep.get("none", 0) >= 8, "premise: a bias of 10 on %r repeats it greedily (%r of 10)" % (forced, rep))
        ok(0 < rep.get("freq", 0) < rep.get("none", 0) and 0 < rep.get("pres", 0) < rep.get("none", 0),
           "frequency_penalty 2 and presence_penalty 2 break the repetition up (%r)" % rep)
        ok(rep.get("neg", 0) >= rep.get("none", 1), "frequency_penalty -2 keeps it (%r)" % rep)

        pl, sm = res.get("plain"), res.get("stream")
        ok(pl and sm and pl[1] and pl == sm, "streamed and plain answers with one seed: the same text and logprobs "
           "(%r / %r)" % (pl and pl[0], sm and sm[0]))

        th = res.get("think") or [None] * 5
        ok(th[0] and th[1] == [] and th[3] == "", "thinking: reasoning tokens have no logprobs (%r, %r)"
           % (th[0], th[1]))
        ok(th[0] and th[0] == th[2] and th[4] == "",
           "a bias of +100 leaves the reasoning as the model gives it (%r / %r)" % (th[0], th[2]))
    serve_lib.sanitizer_clean(T)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
