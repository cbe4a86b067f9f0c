# t-serve-choices.py: `k3chat --serve` answers n choices per request, as vLLM does (n above 1 was
# a 400), and writes the answer's fields OpenAI's reference shows (system_fingerprint, a choice's
# logprobs null when not asked, message.refusal null; they were missing). On a generated tiny
# checkpoint, loopback only:
#   - n 3 at temperature 0: three equal choices, index 0..2, usage.completion_tokens their sum;
#   - n 3 with a seed: choice i is what n 1 answers with seed + i (vLLM's derived seeds), and the
#     request answers the same twice; a stream of n 2 carries each choice's index, the same texts
#     as the plain answer, one finish per choice, one usage chunk (the sum) and one [DONE];
#   - n 0, 1.5, 17 (above the documented 16) and "2" are 400s naming n, and so is an n the
#     server's slots and queue cannot hold at once;
#   - a choice that fails (its wait in the queue timed out) cancels the others: the answer is the
#     503, the running choice is cancelled at once, and its slot answers the next request;
#   - a client that leaves a stream of n 3 (two running, one queued) cancels all three, and both
#     slots then answer a request of n 2 (none leaked);
#   - fairness counts choices per client address: one client's stream of n 16 on --parallel 1 with
#     K3_SERVE_QUEUE=16 left one place, and its next request took it, so another address got 503
#     queue_full (one connection kept everyone out). Now, the queue full, that client is held to
#     its share of 16 choices: its extra request is answered 429 client_share naming the share
#     (refused, or giving way to the other's, whichever came first), the other client's request
#     waits in the queue and is answered once the stream ends;
#   - the share is K3_SERVE_SHARE (it was the constant 16): with 2, an address's third choice once
#     the queue is full is a 429 naming the share and the setting; 0 is refused at start;
#   - the slots take turns between client addresses: a request from B that comes while A's n 16
#     choices wait joins the next slot free while A runs another (it waited for all 16);
#   - the body is parsed once for a request's n choices (each choice parsed it again: n 16 with a
#     4 MB message grew the server's peak RSS by 52 MB over n 1; now by nothing; not under ASan);
#   - system_fingerprint is "fp_" and hex, in the answer and every chunk, the same after a restart;
#   - the official OpenAI SDK for JavaScript (npm openai 5; SKIP without node/npm) reads n 3 plain
#     and n 2 streamed (choices gathered by index).
# Turns that must outlive an event are scripted (K3_SERVE_SCRIPT), so no check depends on the
# machine's speed; every wait is bounded. The servers are killed at the end.
import json
import os
import re
import socket
import subprocess
import time

import threading

import serve_lib
from serve_lib import exchange, final, ok, open_stream, post_chat, read_text, req, sse_objects, start_server, wait_for

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")
procs = []


def start(name, *args, **extra_env):
    """A server with args: (process, port, log path); port None when it did not start."""
    return start_server(K3, M, T, env, procs, name, ["--serve", "127.0.0.1:0"] + list(args), **extra_env)


def body(n, tokens=6, temp=0.0, seed=None, stream=False, **more):
    o = dict(messages=[{"role": "user", "content": "hello there"}], n=n, temperature=temp, max_tokens=tokens,
             reasoning_effort="none", stream=stream, **more)
    if seed is not None:
        o["seed"] = seed
    return o


def texts(o):
    return [c["message"]["content"] for c in o.get("choices", [])]


def stream_texts(data):
    """Each choice's text (by index), finishes per index, the usage chunks, [DONE] count, the chunks."""
    ev, _ = sse_objects(data)
    out, fin, usage = {}, {}, []
    for x in ev:
        if not x.get("choices"):
            usage.append(x.get("usage"))
        for c in x.get("choices", []):
            out[c["index"]] = out.get(c["index"], "") + (c["delta"].get("content") or "")
            if c["finish_reason"]:
                fin[c["index"]] = fin.get(c["index"], []) + [c["finish_reason"]]
    return out, fin, usage, data.count("data: [DONE]"), ev


def refused_n(st, o):
    e = o.get("error", {}) if isinstance(o, dict) else {}
    return st == 400 and e.get("param") == "n" and e.get("message", "").startswith("n:")


try:
    srv, port, log = start("choices")
    ok(port is not None, "the server starts")
    if port is None:
        raise SystemExit(1)

    # ---- n 3, greedy: three equal choices, indexed, usage summed
    st, o, _ = post_chat(port, body(3))
    ch = o.get("choices", []) if st == 200 else []
    u = o.get("usage", {}) if st == 200 else {}
    ok(st == 200 and [c["index"] for c in ch] == [0, 1, 2] and len(set(texts(o))) == 1 and texts(o)[0],
       "n 3 at temperature 0: choices 0, 1, 2 with the same text (%d %s)" % (st, json.dumps(o)[:300]))
    one = post_chat(port, body(1))[1]
    ok(st == 200 and u.get("completion_tokens") == 3 * one["usage"]["completion_tokens"] and
       u.get("prompt_tokens") == one["usage"]["prompt_tokens"] and
       u.get("total_tokens") == u["prompt_tokens"] + u["completion_tokens"],
       "usage: the prompt once, completion_tokens the choices' sum (%r; n 1: %r)" % (u, one.get("usage")))

    # ---- OpenAI's fields: system_fingerprint, logprobs null, refusal null
    fp = o.get("system_fingerprint", "")
    ok(re.fullmatch(r"fp_[0-9a-f]{16}", fp or "") is not None, "system_fingerprint is fp_ and hex (%r)" % fp)
    ok(all("logprobs" in c and c["logprobs"] is None and "refusal" in c["message"] and c["message"]["refusal"] is None
           for c in ch), "each choice has logprobs null (not asked) and message.refusal null (%r)" % ch[:1])
    st, data, streamed = post_chat(port, body(1, stream=True))
    ev, _ = sse_objects(data) if streamed else ([], False)
    ok(ev and all(x.get("system_fingerprint") == fp for x in ev) and
       all("logprobs" in c and c["logprobs"] is None for x in ev for c in x["choices"]),
       "every chunk has the system_fingerprint and each choice logprobs null (%r)" % (ev[:1],))

    # ---- seeds: choice i samples with seed + i, as vLLM derives them
    st, a, _ = post_chat(port, body(3, temp=1.0, seed=7))
    st2, a2, _ = post_chat(port, body(3, temp=1.0, seed=7))
    singles = [texts(post_chat(port, body(1, temp=1.0, seed=7 + i))[1]) for i in range(3)]
    ok(st == 200 and texts(a) == texts(a2), "n 3 with seed 7 answers the same twice (%r)" % texts(a))
    ok(st == 200 and texts(a) == [s[0] for s in singles] and len(set(texts(a))) > 1,
       "choice i is n 1's answer with seed 7 + i, and they differ (%r vs %r)" % (texts(a), singles))

    # ---- a stream of n 2: each chunk's index, the same texts, one finish each, one usage, one [DONE]
    st, data, streamed = post_chat(port, body(2, temp=1.0, seed=7, stream=True,
                                              stream_options={"include_usage": True}))
    got, fin, usage, dones, ev = stream_texts(data if streamed else "")
    ok(streamed and got == {0: texts(a)[0], 1: texts(a)[1]}, "a stream of n 2 carries each choice's index and text, "
       "as the plain answer (%r vs %r)" % (got, texts(a)[:2]))
    ok(streamed and sorted(fin) == [0, 1] and all(len(v) == 1 for v in fin.values()) and dones == 1 and
       data.rstrip().endswith("data: [DONE]"), "one finish_reason per choice and one [DONE] at the end (%r, %d)"
       % (fin, dones))
    a2 = post_chat(port, body(2, temp=1.0, seed=7))[1]
    ok(len(usage) == 1 and usage[0] and usage[0]["completion_tokens"] == a2["usage"]["completion_tokens"] and
       ev[-1].get("usage") == usage[0], "one usage chunk, last, with the choices' sum, as the plain answer's "
       "(%r vs %r)" % (usage, a2["usage"]))

    # ---- n out of range: 400 naming n
    for v in (0, 1.5, 17, "2", -1):
        st, o, _ = post_chat(port, body(v))
        ok(refused_n(st, o), "n %r -> 400 naming n (%d %s)" % (v, st, json.dumps(o)[:200]))
    st, o, _ = post_chat(port, body(2.0, tokens=2))
    ok(st == 200 and len(o.get("choices", [])) == 2, "n 2.0 is 2 (%d)" % st)

    # ---- the official OpenAI SDK
    cache = serve_lib.openai_sdk(["openai@5"])
    if cache:
        js = r"""
const base = { model: "m", messages: [{ role: "user", content: "hello there" }], reasoning_effort: "none" };
const r = await client.chat.completions.create({ ...base, n: 3, temperature: 1, seed: 7, max_tokens: 6 });
out.plain = [r.choices.map((c) => [c.index, c.message.content, c.finish_reason]), r.system_fingerprint,
             r.usage.completion_tokens];
const st = await client.chat.completions.create({ ...base, n: 2, temperature: 1, seed: 7, max_tokens: 6,
                                                  stream: true });
const by = {};
for await (const ch of st) for (const c of ch.choices) by[c.index] = (by[c.index] ?? "") + (c.delta.content ?? "");
out.stream = by;
"""
        res = serve_lib.run_sdk(js, ["http://127.0.0.1:%d/v1" % port], cache, env, 300, T, "choices.cjs", cwd=cache)
        p = res.get("plain", [[], None, None])
        ok([c[:2] for c in p[0]] == [[i, t] for i, t in enumerate(texts(a))] and p[1] == fp and
           p[2] == a["usage"]["completion_tokens"], "OpenAI SDK: n 3 reads three choices, the fingerprint and usage "
           "(%r)" % p)
        ok(res.get("stream") == {"0": texts(a)[0], "1": texts(a)[1]},
           "OpenAI SDK: a stream of n 2 gathered by index (%r)" % res.get("stream"))
    srv.kill()
    srv.wait()

    # ---- a scripted reply that never ends holds its slot as long as a check needs, on any machine
    hold = os.path.join(T, "hold.txt")
    with open(hold, "w") as f:
        f.write("la " * 40000)

    # ---- a choice that fails cancels the others: --parallel 1, so choice 1 waits in the queue until
    # its 1 s limit (503 queue_timeout) while choice 0 runs; the answer is the 503 and choice 0 stops
    srv2, port2, log2 = start("fail", "--parallel", "1", K3_SERVE_QUEUE="1", K3_SERVE_QUEUE_SECS="1",
                              K3_MAXT="65536", K3_SERVE_SCRIPT=hold)
    ok(port2 is not None, "a --parallel 1 server with K3_SERVE_QUEUE=1 and K3_SERVE_QUEUE_SECS=1 starts")
    if port2:
        st, o, _ = post_chat(port2, body(3, tokens=2))
        ok(refused_n(st, o) and "--parallel" in o["error"]["message"],
           "n 3 on a server that runs 1 and queues 1 -> 400 naming n (%d %s)" % (st, json.dumps(o)[:200]))
        st, o, _ = post_chat(port2, body(2, tokens=60000), timeout=120)
        ok(st == 503 and o.get("error", {}).get("code") == "queue_timeout",
           "n 2 whose second choice times out in the queue -> 503 queue_timeout (%d %s)" % (st, json.dumps(o)[:200]))
        ok(wait_for(lambda: "another choice of the request failed" in read_text(log2), 30),
           "the running choice is cancelled for it (log: %r)" % read_text(log2)[-300:])
        st, o, _ = post_chat(port2, body(1, tokens=3))
        ok(st == 200 and o["usage"]["completion_tokens"] == 3, "its slot answers the next request (%d)" % st)
        ok(srv2.poll() is None, "the server is still up")
        fp2 = post_chat(port2, body(1, tokens=1))[1].get("system_fingerprint")
        ok(fp2 == fp, "the same model after a restart has the same system_fingerprint (%r, %r)" % (fp2, fp))
        srv2.kill()
        srv2.wait()

    # ---- a client that leaves a stream of n 3 (two choices running, one queued) cancels all three;
    # both slots then answer a request of n 2 (a leaked slot would leave one choice queued forever)
    srv3, port3, log3 = start("leave", "--parallel", "2", K3_MAXT="65536", K3_SERVE_SCRIPT=hold,
                              K3_SERVE_QUEUE_SECS="100")
    ok(port3 is not None, "a --parallel 2 server starts")
    if port3:
        s, seen = open_stream(port3, json.dumps(body(3, tokens=60000, stream=True)))
        s.settimeout(30)
        t_end = time.time() + 60
        try:  # both running choices have streamed text
            while not all(('"index":%d,"delta":{"content":' % i).encode() in seen for i in (0, 1)) and \
                    time.time() < t_end:
                b = s.recv(65536)
                if not b:
                    break
                seen += b
        except OSError:
            pass
        ok(b'"index":2' not in seen, "the third choice waits for a slot (none of its chunks came)")
        s.close()
        ok(wait_for(lambda: read_text(log3).count("cancelled:") >= 3, 30),
           "the client's leaving cancels all three choices (%r)" % re.findall(r"#\d+ cancelled[^\n]*", read_text(log3)))
        st, o, _ = post_chat(port3, body(2, tokens=3), timeout=60)
        ok(st == 200 and len(o.get("choices", [])) == 2, "both slots answer a request of n 2 afterwards (%d)" % st)
        srv3.kill()
        srv3.wait()
    # ---- a client address's share of a full queue: A's stream of n 16 holds 1 slot and 15 of the 16
    # queue places; A's next request and B's (another address) race for the last place: whichever
    # comes second, A's is the one answered 429 client_share, and B's waits for the slot
    srv4, port4, log4 = start("share", "--parallel", "1", K3_SERVE_QUEUE="16", K3_MAXT="65536",
                              K3_SERVE_SCRIPT=hold)
    ok(port4 is not None, "a --parallel 1 server with K3_SERVE_QUEUE=16 starts")
    if port4:
        a, first = open_stream(port4, json.dumps(body(16, tokens=60000, stream=True)), src="127.0.0.2")
        ok(b'"index":0' in first, "client A's stream of n 16 runs (choice 0 streams, 15 queued)")
        res = {}

        def ask(name, src):
            out, how = exchange(port4, req("POST", "/v1/chat/completions", json.dumps(body(1, tokens=3)).encode()),
                                src=src, timeout=300)
            res[name] = final(out) + (how,)
        ths = [threading.Thread(target=ask, args=(n, ip)) for n, ip in (("a2", "127.0.0.2"), ("b", "127.0.0.3"))]
        for t in ths:
            t.start()
        ths[0].join(300)
        st, hd, b = res.get("a2", (0, {}, b"", ""))[:3]
        try:
            e = json.loads(b)["error"]
        except (ValueError, KeyError, TypeError):
            e = {}
        ok(st == 429 and e.get("code") == "client_share" and "share of 16" in e.get("message", "") and
           hd.get("retry-after") == "5", "A's next request, the queue full: 429 client_share naming its share of "
           "16, with Retry-After (%d %r %r)" % (st, hd, b[:300]))
        ok(ths[1].is_alive() or res.get("b", (0,))[0] == 200,
           "B's request is not refused: it waits in the queue (%r)" % (res.get("b", (0, {}, b""))[:3],))
        a.close()  # A leaves: its 16 choices are cancelled and B's request runs
        ths[1].join(300)
        st, _, b = res.get("b", (0, {}, b"", ""))[:3]
        ok(st == 200 and json.loads(b)["usage"]["completion_tokens"] == 3,
           "B's request is answered once A's stream ends (%d %r)" % (st, b[:200]))
        ok(srv4.poll() is None, "the server is still up")
        srv4.kill()
        srv4.wait()
    # ---- the share is a setting (K3_SERVE_SHARE; it was the constant 16): with a share of 2, A's
    # stream holds the slot and A's and B's requests fill the queue of 2; A's next request would
    # hold 3 and gets 429 client_share naming the share of 2 and the setting (with 16 it was a 503
    # queue_full); a share of 0 is refused at start, naming the variable
    srv5, port5, log5 = start("share2", "--parallel", "1", K3_SERVE_QUEUE="2", K3_SERVE_SHARE="2", K3_MAXT="65536",
                              K3_SERVE_SCRIPT=hold)
    ok(port5 is not None, "a --parallel 1 server with K3_SERVE_QUEUE=2 and K3_SERVE_SHARE=2 starts")
    if port5:
        a, first = open_stream(port5, json.dumps(body(1, tokens=60000, stream=True)), src="127.0.0.2")
        ok(b"data: " in first, "client A's stream holds the slot")
        waiting = []
        for ip in ("127.0.0.2", "127.0.0.3"):  # one queued request each (the queue then full)
            n0 = read_text(log5).count(" queued: ")
            s5 = socket.create_connection(("127.0.0.1", port5), timeout=30, source_address=(ip, 0))
            s5.sendall(req("POST", "/v1/chat/completions", json.dumps(body(1, tokens=3)).encode()))
            waiting.append(s5)
            wait_for(lambda: read_text(log5).count(" queued: ") > n0, 60)
        out, _ = exchange(port5, req("POST", "/v1/chat/completions", json.dumps(body(1, tokens=3)).encode()),
                          src="127.0.0.2", timeout=60)
        st, hd, b = final(out)
        try:
            e = json.loads(b)["error"]
        except (ValueError, KeyError, TypeError):
            e = {}
        ok(st == 429 and e.get("code") == "client_share" and "share of 2 (K3_SERVE_SHARE)" in e.get("message", ""),
           "A's third choice, the queue full: 429 client_share naming its share of 2 and K3_SERVE_SHARE (%d %r)"
           % (st, b[:300]))
        a.close()
        for s5 in waiting:
            s5.close()
        srv5.kill()
        srv5.wait()
    bad = subprocess.run([K3, M, "--serve", "127.0.0.1:0"], env=dict(env, K3_SERVE_SHARE="0"),
                         capture_output=True, timeout=60)
    ok(bad.returncode == 2 and b"K3_SERVE_SHARE" in bad.stderr,
       "K3_SERVE_SHARE=0 is refused at start naming it (%d %r)" % (bad.returncode, bad.stderr[-200:]))
    # ---- admission takes turns between addresses: A's stream of n 16 on --parallel 2 (300 tokens a
    # choice), then B's request: B joins a slot as soon as one frees while A runs another choice,
    # ahead of A's later choices (it joined after all 16 of them, arrival order)
    srv6, port6, log6 = start("turns", "--parallel", "2", K3_MAXT="65536", K3_SERVE_SCRIPT=hold)
    ok(port6 is not None, "a --parallel 2 server starts")
    if port6:
        a, first = open_stream(port6, json.dumps(body(16, tokens=300, stream=True)), src="127.0.0.2")
        res = {}
        tb = threading.Thread(target=lambda: res.update(b=exchange(port6, req(
            "POST", "/v1/chat/completions", json.dumps(body(1, tokens=3)).encode()), src="127.0.0.3", timeout=600)))
        tb.start()
        rest = serve_lib.read_rest(a, 600)
        tb.join(600)
        joins = [int(x) for x in re.findall(r"#(\d+) joins slot", read_text(log6))]
        b_st = final(res.get("b", (b"", ""))[0])[0]
        ok(b_st == 200 and (first + rest).count(b"data: [DONE]") == 1 and sorted(joins) == list(range(1, 18)) and
           joins.index(17) < joins.index(16), "B's request (#17) joins a slot before A's last choice (#16), "
           "not after all of A's (%d; join order %r)" % (b_st, joins))
        srv6.kill()
        srv6.wait()

    # ---- the body is parsed once for all n choices: each choice parsed it again, so a request of n 16
    # with a 4 MB message held 16 copies of it at once (the server's peak RSS grew by 52 MB over the same
    # request with n 1; now by nothing). --parallel 1: the first choice's context error ends them all, so
    # the engine's side is the same for n 1 and n 16.
    if ASAN:
        print("SKIP: peak RSS under AddressSanitizer (its own allocator)")
    else:
        srv5, port5, log5 = start("rss", "--parallel", "1", K3_SERVE_QUEUE="16")
        ok(port5 is not None, "a --parallel 1 server with K3_SERVE_QUEUE=16 starts")
        if port5:
            def hwm_mb():
                with open("/proc/%d/status" % srv5.pid) as f:
                    return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM")) / 1024
            big = dict(messages=[{"role": "user", "content": "wo rd " * ((4 << 20) // 6)}], max_tokens=1)
            for _ in range(2):  # the peak of everything but the copies: n 1, twice
                st1, o1, _ = post_chat(port5, dict(big, n=1), timeout=300)
            h0 = hwm_mb()
            st, o, _ = post_chat(port5, dict(big, n=16), timeout=300)
            grew = hwm_mb() - h0
            code = lambda o: o.get("error", {}).get("code") if isinstance(o, dict) else o
            ok(st == st1 == 400 and code(o) == code(o1) == "context_length_exceeded" and grew < 16,
               "n 16 with a 4 MB message: the same context error as n 1, the server's peak RSS grew by %.1f MB over "
               "it (< 16: one parse, not 16; %d %s)" % (grew, st, code(o)))
            srv5.kill()
            srv5.wait()
    serve_lib.sanitizer_clean(T)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
