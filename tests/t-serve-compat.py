# t-serve-compat.py: `k3chat --endpoint` against two fake servers, each holding one real
# server's contract for an assistant turn's reasoning and nothing more (issue 44):
#   "vllm"   like vLLM >= 0.16: reads message.reasoning only (reasoning_content is dropped
#            silently), streams delta.reasoning, answers errors as {"error":{...}};
#   "legacy" like vLLM < 0.16 and DeepSeek: reads message.reasoning_content only, streams
#            delta.reasoning_content, answers errors as vLLM's older flat {"object":"error",...}.
# Each server renders the K3 prompt of every request from the fields it reads (as a transcript
# given to `k3chat --chat-ids`, the release encoder's rendering); a three-turn chat through
# --endpoint must have rendered, at each turn, the ids `k3chat --chat-ids` makes of the client's
# own saved transcript up to that turn. Then the errors those servers give: HTTP 400 with the
# error object, 429 with Retry-After, a stream cut without [DONE]: each shown with the server's
# words, the conversation kept (/save, /retry). Loopback only; every wait is bounded.
import json
import os
import subprocess

import serve_lib
from serve_lib import ok

B, T, K3, ASAN, env = serve_lib.setup()  # a tiny generated checkpoint in T/m (only its vocabulary is read)
M = os.path.join(T, "m")


def chat_ids(path):
    p = subprocess.run([K3, "--chat-ids", M, path], capture_output=True, timeout=60, env=env)
    return p.stdout.decode().split() if p.returncode == 0 else ["error: " + p.stderr.decode()[-200:]]


def write_transcript(path, settings, msgs):
    with open(path, "w") as f:
        f.write(json.dumps({"format": "k3chat-transcript", "version": 1, "settings": settings}) + "\n")
        for m in msgs:
            f.write(json.dumps(m) + "\n")


def make_server(name, field, flat_errors):
    """A fake OpenAI-compatible server that knows the reasoning only as `field`."""
    state = {"rendered": [], "requests": [], "seen": set(), "n": 0}

    class H(serve_lib.FakeHandler):
        MODELS = [{"id": "k3-" + name, "object": "model", "max_model_len": 2048}]

        def error(self, code, msg, typ, headers=()):
            e = {"message": msg, "type": typ, "param": None, "code": code}
            self.send_json(code, dict(e, object="error") if flat_errors else {"error": e}, headers)

        def do_POST(self):
            req = self.read_json()
            state["requests"].append(req)
            last = req["messages"][-1]["content"]
            first = last not in state["seen"]  # each error is given once: /retry then succeeds
            state["seen"].add(last)
            if last == "e400" and first:
                return self.error(400, "This model's maximum context length is 2048 tokens. However, you "
                                  "requested 4096 tokens in the messages (" + name + ")", "BadRequestError")
            if last == "e429" and first:
                return self.error(429, "Too many requests in flight (" + name + ")", "RateLimitError",
                                  [("Retry-After", "7")])
            # the prompt this server renders: only the fields it knows reach the encoder
            msgs = []
            for m in req["messages"]:
                t = {"role": m["role"], "content": m.get("content") or ""}
                if m["role"] == "assistant" and isinstance(m.get(field), str):
                    t["reasoning_content"] = m[field]
                msgs.append(t)
            kw = req.get("chat_template_kwargs") or {}
            path = os.path.join(T, "%s-req%d.jsonl" % (name, len(state["requests"])))
            write_transcript(path, {"think": kw.get("thinking", True), "effort": req.get("reasoning_effort", "max")},
                             msgs)
            state["rendered"].append(chat_ids(path))
            state["n"] += 1
            k = state["n"]
            self.start_stream()

            def ev(d, finish=None):
                return serve_lib.sse(serve_lib.delta(d, finish, object="chat.completion.chunk", model="k3-" + name))
            self.wfile.write(ev({"role": "assistant", "content": ""}))
            self.wfile.write(ev({field: "Thought %d: caf\u00e9 \u4e2d" % k}))
            self.wfile.write(ev({field: " and more."}))
            self.wfile.write(ev({"content": "Answer %d from %s." % (k, name)}))
            if last == "cut":  # the connection drops mid-answer: no finish_reason, no [DONE]
                self.wfile.flush()
                return
            self.wfile.write(ev({}, "stop") + b"data: [DONE]\n\n")

    return serve_lib.start_fake(H), state


def client(port, lines):
    ep = [K3, "--endpoint", "http://127.0.0.1:%d/v1" % port, "--plain"]
    p = subprocess.run(ep, input=("\n".join(lines) + "\n").encode(), capture_output=True, timeout=120, env=env)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def load(path):
    try:
        with open(path) as f:
            rows = [json.loads(x) for x in f]
        return rows[0], rows[1:]
    except (OSError, ValueError, IndexError):
        return {}, []


servers = [make_server("vllm", "reasoning", False), make_server("legacy", "reasoning_content", True)]
try:
    for srv, st in servers:
        name = "vllm" if st is servers[0][1] else "legacy"
        port = srv.server_address[1]
        # ---- three turns; every earlier turn's reasoning must reach this server's encoder
        saved = os.path.join(T, name + "-chat.jsonl")
        rc, out, err = client(port, ["What is 2+2?", "And times 3?", "Say it in French.", "/save " + saved])
        head, msgs = load(saved)
        ok(rc == 0 and len(st["rendered"]) == 3 and len(msgs) == 6 and
           [m.get("reasoning_content") for m in msgs[1::2]] ==
           ["Thought %d: caf\u00e9 \u4e2d and more." % k for k in (1, 2, 3)],
           "%s: three turns answered, the reasoning streamed as %s kept in the transcript (rc %d, %d messages, %r)"
           % (name, "delta.reasoning" if name == "vllm" else "delta.reasoning_content", rc, len(msgs),
              err.strip()[-160:]))
        same = []
        for turn in range(3):
            part = os.path.join(T, "%s-upto%d.jsonl" % (name, turn))
            write_transcript(part, head.get("settings", {}), msgs[:2 * turn + 1])
            want = chat_ids(part)
            same.append(len(st["rendered"]) > turn and st["rendered"][turn] == want and want[0].isdigit())
        ok(same == [True] * 3, "%s: at each of the three turns the server rendered the ids `k3chat --chat-ids` "
           "makes of the transcript up to there (%r)" % (name, same))
        # the check can fail: without the earlier reasoning the prompt is another one
        bare = os.path.join(T, name + "-bare.jsonl")
        write_transcript(bare, head.get("settings", {}),
                         [{k: v for k, v in m.items() if k != "reasoning_content"} for m in msgs[:5]])
        ok(len(st["rendered"]) == 3 and chat_ids(bare) != st["rendered"][2],
           "%s: ... and a server that lost the reasoning would have rendered other ids" % name)
        sent = st["requests"][2]["messages"] if len(st["requests"]) > 2 else []
        ok(len(sent) == 5 and all(m.get("reasoning") == m.get("reasoning_content") == msgs[i].get("reasoning_content")
                                  for i, m in enumerate(sent) if m["role"] == "assistant"),
           "%s: each earlier answer went back with both reasoning and reasoning_content, the same text" % name)

        # ---- errors: the server's words shown, the conversation kept, /retry sends it again
        for trig, words in (("e400", "maximum context length is 2048 tokens"), ("e429", "Too many requests")):
            st["requests"].clear()
            tr = os.path.join(T, "%s-%s.jsonl" % (name, trig))
            rc, out, err = client(port, ["Hi", trig, "/save " + tr, "/retry"])
            _, kept = load(tr)
            code = trig[1:]
            ok(code in err and words in err and "(" + name + ")" in err and "conversation is kept" in err and
               '"message"' not in err and (trig != "e429" or "wait 7 s" in err),
               "%s: HTTP %s is shown with the server's message (not its JSON)%s (%r)"
               % (name, code, " and its Retry-After" if trig == "e429" else "", err.strip()[-200:]))
            ok([m["content"] for m in kept] == ["Hi", "Answer %d from %s." % (st["n"] - 1, name), trig] and
               [m["content"] for m in st["requests"][-1]["messages"]][-1] == trig and
               len(st["requests"][-1]["messages"]) == 3 and out.rstrip().endswith("from %s." % name),
               "%s: after the %s the conversation is kept and /retry answers it (%r)"
               % (name, code, [m.get("content") for m in kept]))
        tr = os.path.join(T, name + "-cut.jsonl")
        rc, out, err = client(port, ["cut", "/save " + tr])
        _, kept = load(tr)
        ok("ended before the answer was complete" in err and len(kept) == 2 and kept[1].get("interrupted") is True
           and kept[1].get("content", "").startswith("Answer") and "Thought" in kept[1].get("reasoning_content", ""),
           "%s: a stream cut without [DONE] is reported, the partial answer and reasoning kept as interrupted (%r)"
           % (name, err.strip()[-120:]))
finally:
    for srv, _ in servers:
        srv.shutdown()
raise SystemExit(serve_lib.status())
