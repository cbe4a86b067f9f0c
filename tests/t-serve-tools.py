# t-serve-tools.py: tool calling through `k3chat MODEL_DIR --serve` end to end. The model's
# output is scripted (K3_SERVE_SCRIPT: each turn's ids are forced, so the real chat parser,
# conversation, prompt cache and server run); checked with raw HTTP (http.client) and with the
# official OpenAI SDK for JavaScript (npm `openai` 5, installed outside the repository into
# K3_OPENAI_JS, default ~/.cache/k3chat/openai-js; SKIP without node/npm or the registry):
# tool calls streamed and not, a tool result turn (and its prompt-cache reuse), tool_choice
# required/none, a truncated call, a call cut by the model's end of message, a call left open
# before the next, bytes that are not UTF-8 in a call, and the bad-input
# cases of issues 23 and 37 (400 naming the field; tool histories with a call unanswered or answered twice, a shared id, an undeclared tool, a duplicate name).
# The server runs on 127.0.0.1 with a kernel-picked port and is always killed; every wait is
# bounded.
import json
import os
import re
import subprocess

import serve_lib
from serve_lib import ok

B, T, K3, ASAN, env = serve_lib.setup()  # a tiny generated checkpoint in T/m

CALL = ('<|open|>call tool="%s" index="%d"<|sep|>%s<|close|>call<|sep|>')
ARG = '<|open|>argument key="%s" type="%s"<|sep|>%s<|close|>argument<|sep|>'
TWO_CALLS = ("Need data.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
             + CALL % ("get_weather", 1, ARG % ("city", "string", 'Par"is\\') + ARG % ("unit", "string", "celsius"))
             + CALL % ("get_time", 2, ARG % ("days", "number", "3") + ARG % ("opts", "object", '{"a":[1,2.50]}'))
             + "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")
WANT_ARGS = ['{"city": "Par\\"is\\\\", "unit": "celsius"}', '{"days": 3, "opts": {"a": [1, 2.5]}}']
ANSWER = "Got it.<|close|>think<|sep|><|open|>response<|sep|>It is 18 C.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
TRUNCATED = ("Hmm.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
             + '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Lon')
# the model ends its message (end_of_msg) inside its second call: one complete call
CUT_BY_EOM = ("Two.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
              + CALL % ("get_weather", 1, ARG % ("city", "string", "Paris"))
              + '<|open|>call tool="get_time" index="2"<|sep|><|open|>argument key="days" type="number"<|sep|>3'
              + "<|end_of_msg|>")
# the model leaves its first call open (no <|close|>call) before the second: two calls, each with
# its own arguments (the second's were added to the first, and the second lost)
UNCLOSED = ("Two.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
            + '<|open|>call tool="get_weather" index="1"<|sep|>' + ARG % ("city", "string", "Paris")
            + CALL % ("get_time", 2, ARG % ("days", "number", "3"))
            + "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")
# bytes that are not UTF-8 (written as \\udcff: surrogateescape) in a key and in a number: U+FFFD
# (raw, the call was dropped from the answer and its stream delta lost)
BAD_BYTES = ("Hm.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
             + CALL % ("get_weather", 1, ARG % ("c\udcffity", "string", "Paris") + ARG % ("days", "number", "\udcff"))
             + "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")
# turns in the order the requests below reach the model (the last one repeats)
TURNS = [TWO_CALLS, TWO_CALLS, ANSWER, TRUNCATED, TRUNCATED, CUT_BY_EOM, CUT_BY_EOM, TWO_CALLS, TWO_CALLS, TWO_CALLS, ANSWER, ANSWER, TWO_CALLS]
SCRIPT = os.path.join(T, "script.txt")
with open(SCRIPT, "w") as f:
    f.write("\n---\n".join(TURNS) + "\n")

M = os.path.join(T, "m")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
LOG = os.path.join(T, "serve.log")
SERVE = ["--serve", "127.0.0.1:0", "--model", "tiny-k3"]
# a script that is a directory or missing is refused with the reason (a directory was read as one
# empty turn and the server answered with it, without a word)
for bad, why in ((T, "cannot read: Is a directory"), (SCRIPT + ".none", "cannot open: No such file")):
    try:
        p = subprocess.run([K3, M] + SERVE, capture_output=True, timeout=60, env=dict(env, K3_SERVE_SCRIPT=bad))
        rc, err = p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = "none (it served)", ""
    ok(rc == 1 and "K3_SERVE_SCRIPT: %s: %s" % (bad, why) in err,
       "K3_SERVE_SCRIPT=%s: refused with the reason (rc %s, %r)" % (bad, rc, err[-200:]))
srv = serve_lib.launch(K3, M, LOG, dict(env, K3_SERVE_SCRIPT=SCRIPT), SERVE)


def log_text():
    return serve_lib.read_text(LOG)


def post(body, timeout=60):
    """(status, parsed JSON or SSE text)"""
    return serve_lib.post_chat(PORT, body, timeout)[:2]


events = serve_lib.sse_objects


def user(text):
    return {"role": "user", "content": text}


try:
    up, PORT = serve_lib.await_port(srv, LOG, 30)
    ok(up, "the server starts with a script")
    if PORT is None:
        print("FAIL: no address in the log: " + log_text()[-300:])
        raise SystemExit(1)

    # ---- 1. tool calls, not streamed (turn 1)
    q = [user("Weather in Paris, and the time?")]
    code, o = post({"messages": q, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    msg = ch.get("message", {})
    calls = msg.get("tool_calls") or []
    ok(code == 200 and ch.get("finish_reason") == "tool_calls" and msg.get("content") is None and
       msg.get("reasoning_content") == "Need data." and msg.get("reasoning") == "Need data.",
       "non-streaming: finish_reason tool_calls, content null, reasoning (as reasoning and reasoning_content)")
    ok([c["function"]["name"] for c in calls] == ["get_weather", "get_time"] and
       [c["function"]["arguments"] for c in calls] == WANT_ARGS and all(c["type"] == "function" for c in calls),
       "two calls in order, arguments as JSON strings (json.dumps form): %r" % [c["function"]["arguments"] for c in calls])
    ids = [c.get("id", "") for c in calls]
    ok(len(ids) == 2 and all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids) and ids[0] != ids[1],
       "server-made call ids, distinct: %r" % ids)

    # ---- 2. the same, streamed (turn 2)
    code, text = post({"messages": q, "tools": TOOLS, "stream": True, "stream_options": {"include_usage": True}})
    evs, done = events(text) if code == 200 else ([], False)
    u2 = ([e["usage"] for e in evs if e.get("usage")] or [{}])[0]
    deltas = [e["choices"][0]["delta"] for e in evs if e.get("choices")]
    fins = [e["choices"][0]["finish_reason"] for e in evs if e.get("choices") and e["choices"][0]["finish_reason"]]
    tcs = [tc for d in deltas for tc in d.get("tool_calls", [])]
    firsts = {}
    args = {}
    order_ok = True
    for tc in tcs:
        i = tc["index"]
        if "id" in tc:
            order_ok &= i not in firsts and tc["function"]["arguments"] == "" and tc["type"] == "function"
            firsts[i] = (tc["id"], tc["function"]["name"])
        else:
            order_ok &= i in firsts and "name" not in tc["function"]
        args[i] = args.get(i, "") + tc["function"]["arguments"]
    ok(code == 200 and done and fins == ["tool_calls"], "streaming: finish_reason tool_calls, then [DONE]")
    ok(order_ok and [firsts[i][1] for i in sorted(firsts)] == ["get_weather", "get_time"] and
       [args[i] for i in sorted(args)] == WANT_ARGS and len([tc for tc in tcs if "id" not in tc]) >= 2,
       "delta.tool_calls: index, id and name first, then fragments that concatenate to the final string (%d deltas)"
       % len(tcs))
    sids = [firsts[i][0] for i in sorted(firsts)]
    rs = "".join(d.get("reasoning_content", "") for d in deltas)
    ok(rs == "Need data." and not "".join(d.get("content") or "" for d in deltas) and
       all(d.get("reasoning") == d.get("reasoning_content") for d in deltas),
       "streamed reasoning (each delta as reasoning and reasoning_content), no content")

    # ---- 3. a tool result turn continuing the streamed one (turn 3): results out of order
    hist = q + [{"role": "assistant", "content": None, "reasoning_content": "Need data.",
                 "tool_calls": [{"id": sids[0], "type": "function",
                                 "function": {"name": "get_weather", "arguments": WANT_ARGS[0]}},
                                {"id": sids[1], "type": "function",
                                 "function": {"name": "get_time", "arguments": WANT_ARGS[1]}}]},
                {"role": "tool", "tool_call_id": sids[1], "content": "12:00"},
                {"role": "tool", "tool_call_id": sids[0], "content": "18 C"}]
    code, o = post({"messages": hist, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    ok(code == 200 and ch.get("message", {}).get("content") == "It is 18 C." and ch.get("finish_reason") == "stop" and
       "tool_calls" not in ch.get("message", {}), "a tool result turn: the answer, finish_reason stop")
    u = o.get("usage", {}) if code == 200 else {}
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    prev = u2.get("prompt_tokens", 0) + u2.get("completion_tokens", 0) - 1  # all but the end-of-message id
    ok(prev > 0 and cached >= prev,
       "prompt cache reused across the tool turn: %d of %d prompt tokens cached (the previous turn's prompt and "
       "reply: %d)" % (cached, u.get("prompt_tokens", 0), prev))

    def gathered(tcs):
        """The calls a client builds from stream deltas: [(name, arguments)] by index."""
        acc = {}
        for tc in tcs:
            a = acc.setdefault(tc["index"], ["", ""])
            a[0] = tc["function"].get("name") or a[0]
            a[1] += tc["function"].get("arguments", "")
        return [tuple(acc[i]) for i in sorted(acc)]

    def streamed_calls():
        """q with TOOLS streamed: whether [DONE] came, the finish reasons and the tool call deltas."""
        code, text = post({"messages": q, "tools": TOOLS, "stream": True})
        evs, done = events(text) if code == 200 else ([], False)
        tcs = [tc for e in evs if e.get("choices") for tc in e["choices"][0]["delta"].get("tool_calls", [])]
        fins = [e["choices"][0]["finish_reason"] for e in evs if e.get("choices") and e["choices"][0]["finish_reason"]]
        return done, fins, tcs

    # ---- 4. cut inside a call (turns 4, 5): finish_reason length, streamed or not, and the cut
    # call with the arguments it has, as OpenAI answers a call max_tokens cut (doc/tool-calls.md);
    # the plain answer had no tool_calls while the stream had sent the call
    code, o = post({"messages": q, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    cs = ch.get("message", {}).get("tool_calls") or []
    plain = [(c["function"]["name"], c["function"]["arguments"]) for c in cs]
    ok(code == 200 and ch.get("finish_reason") == "length" and plain == [("get_weather", '{"city": "Lon')] and
       re.fullmatch(r"call_[0-9a-f]{24}", cs[0].get("id", "")),
       "an answer cut inside a call: finish_reason length, the cut call with its arguments so far (%s)" % str(ch)[:200])
    done, fins, tcs = streamed_calls()
    ok(done and fins == ["length"] and gathered(tcs) == plain,
       "streamed: what was streamed stays, finish_reason length, the same call as the plain answer (%s)" % fins)

    # ---- 4b. the model ends (E) inside its second call (turns 6, 7): k3-tools.md 2.3 read alone says
    # tool_calls (one call parsed, stopped on E), 2.4 says length (ended inside an unclosed call); the
    # plain answer said tool_calls with one call, the stream length with two. Both say length now,
    # with the same two calls: the whole one and the cut one.
    code, o = post({"messages": q, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    cs = ch.get("message", {}).get("tool_calls") or []
    plain = [(c["function"]["name"], c["function"]["arguments"]) for c in cs]
    ok(code == 200 and ch.get("finish_reason") == "length" and len(plain) == 2 and
       plain[0] == ("get_weather", '{"city": "Paris"}') and plain[1][0] == "get_time",
       "end of message inside the second call: finish_reason length, the whole call and the cut one (%s)"
       % str(ch)[:300])
    done, fins, tcs = streamed_calls()
    ok(done and fins == ["length"] and gathered(tcs) == plain,
       "streamed: both calls' starts stay, finish_reason length, the same calls as the plain answer (%s, %s)"
       % (fins, gathered(tcs)))

    # ---- 5. tool_choice required / none (turns 8, 9): the prompt grows by the tool-choice message
    code, o_auto = post({"messages": q, "tools": TOOLS, "tool_choice": "auto"})
    code2, o_req = post({"messages": q, "tools": TOOLS, "tool_choice": "required"})
    pa = o_auto.get("usage", {}).get("prompt_tokens", 0) if code == 200 else 0
    pr = o_req.get("usage", {}).get("prompt_tokens", 0) if code2 == 200 else 0
    ok(code == 200 and code2 == 200 and pr > pa > 0 and o_req["choices"][0]["finish_reason"] == "tool_calls",
       "tool_choice required adds the tool-choice message (%d -> %d prompt tokens) and calls are returned" % (pa, pr))
    code, o = post({"messages": q, "tools": TOOLS, "tool_choice": "none"})  # turn 10
    m = o.get("choices", [{}])[0].get("message", {}) if code == 200 else {}
    ok(code == 200 and "tool_calls" not in m and o["choices"][0]["finish_reason"] == "stop" and
       "<|open|>tools<|sep|>" in (m.get("content") or ""),
       "tool_choice none: calls are not parsed (the model's markup stays text), finish_reason stop")

    # ---- 6. bad input: a 400 naming the field, never a crash
    def bad(desc, body, field):
        code, o = post(body)
        msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else str(o)
        ok(code == 400 and field in msg, "%s -> 400 naming %s (%s)" % (desc, field, msg[:110]))
    bad("a tool that is not an object", {"messages": q, "tools": [5]}, "tools[0]")
    bad("a tool schema that is not an object",
        {"messages": q, "tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
        "tools[0].function.parameters")
    bad("a tool name with quotes and markers",
        {"messages": q, "tools": [{"type": "function", "function": {"name": 'a"<|open|>'}}]}, "tools[0].function.name")
    bad("a tool message with no matching call", {"messages": q + [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
        "messages[1].tool_call_id")
    bad("a tool message without tool_call_id", {"messages": q + [{"role": "tool", "content": "x"}]},
        "messages[1].tool_call_id")
    asst = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "[1, 2]"}}]}
    bad("arguments that are JSON but not an object", {"messages": q + [asst, {"role": "tool", "tool_call_id": "c1",
                                                                               "content": "x"}]},
        "messages[1].tool_calls[0].function.arguments")
    bad("tool_choice of an unknown kind", {"messages": q, "tools": TOOLS, "tool_choice": "any"}, "tool_choice")
    bad("a named tool_choice of a function not in tools", {"messages": q, "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_date"}}}, "not in tools")
    bad("parallel_tool_calls not a boolean", {"messages": q, "tools": TOOLS, "parallel_tool_calls": "no"},
        "parallel_tool_calls")
    bad("tools not an array", {"messages": q, "tools": {"type": "function"}}, "tools")
    bad("a system message's in-place tools with a bad schema",
        {"messages": [{"role": "system", "content": "", "tools": [{"type": "function", "function": {"name": "f",
                                                                  "parameters": "x"}}]}] + q},
        "messages[0].tools[0].function.parameters")
    # issue 37 item 7: tool histories that are incomplete or ambiguous
    def call(cid, name="get_time"):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}

    def result(cid):
        return {"role": "tool", "tool_call_id": cid, "content": "x"}
    two = {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "get_weather")]}
    bad("results for only some calls", {"messages": q + [two, result("c1")], "tools": TOOLS},
        "messages[1].tool_calls: 1 call without a tool result: 'c2'")
    bad("a call with no result, then a user message",
        {"messages": q + [two, result("c2"), {"role": "user", "content": "and?"}], "tools": TOOLS},
        "without a tool result: 'c1'")
    bad("two calls sharing an id", {"messages": q + [dict(two, tool_calls=[call("c1"), call("c1")]), result("c1")],
                                    "tools": TOOLS}, "messages[1].tool_calls[1].id: 'c1' is also the id of tool_calls[0]")
    bad("two results for one id", {"messages": q + [two, result("c1"), result("c2"), result("c1")], "tools": TOOLS},
        "messages[4].tool_call_id: 'c1' was already answered by messages[2]")
    bad("a call to a tool never declared",
        {"messages": q + [dict(two, tool_calls=[call("c1", "launch")]), result("c1")], "tools": TOOLS},
        "messages[1].tool_calls[0].function.name: 'launch' is not a declared tool")
    bad("duplicate function names in tools", {"messages": q, "tools": TOOLS + [TOOLS[0]]},
        "tools[2].function.name: 'get_weather' is also the name of tools[0]")
    bad("tool_choice required with no tools", {"messages": q, "tool_choice": "required"}, "tool_choice")
    # arguments that are not JSON render as the format's raw json block: a correct render (turn 11)
    asst["tool_calls"][0]["function"]["arguments"] = "not json {"
    code, o = post({"messages": q + [asst, {"role": "tool", "tool_call_id": "c1", "content": "x"}], "tools": TOOLS})
    ok(code == 200 and o["choices"][0]["message"]["content"] == "It is 18 C.",
       "arguments that are not JSON: rendered as the raw json block, answered (%d)" % code)
    # `k3chat --endpoint` sends a loaded transcript's tool turns as they are (turn 12)
    tr = os.path.join(T, "tools.jsonl")
    with open(tr, "w") as f:
        f.write(json.dumps({"format": "k3chat-transcript", "version": 1, "settings": {"think": True},
                            "tools": TOOLS}) + "\n")
        for mm in [q[0], {"role": "assistant", "content": "", "tool_calls": [{"id": "c9", "type": "function",
                   "function": {"name": "get_time", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "c9", "content": "12:00"}]:
            f.write(json.dumps(mm) + "\n")
    p = subprocess.run([K3, "--endpoint", "http://127.0.0.1:%d/v1" % PORT, "--plain"],
                       input=("/load %s\nand now?\n" % tr).encode(), capture_output=True, timeout=60, env=env)
    out = p.stdout.decode()
    ok(p.returncode == 0 and "It is 18 C." in out,
       "--endpoint: a loaded transcript's tool calls and results reach the server (rc %d, %r)"
       % (p.returncode, (out + p.stderr.decode())[-160:]))
    with open(tr) as f:
        bad_tr = f.read().replace('"tool_call_id": "c9"', '"tool_call_id": "zz"')
    with open(tr, "w") as f:
        f.write(bad_tr)
    p = subprocess.run([K3, "--endpoint", "http://127.0.0.1:%d/v1" % PORT, "--plain"],
                       input=("/load %s\nand now?\n" % tr).encode(), capture_output=True, timeout=60, env=env)
    ok("messages[2].tool_call_id" in p.stderr.decode(),
       "--endpoint: the tool result goes as role tool with its tool_call_id (a wrong id is the server's 400: %r)"
       % p.stderr.decode()[-120:])
    many = [{"type": "function", "function": {"name": "f%d" % i}} for i in range(1000)]
    code, o = post({"messages": q, "tools": many})
    err = o.get("error", {}).get("code", "") if isinstance(o, dict) and code != 200 else ""
    ok(code == 200 or (code == 400 and err == "context_length_exceeded"),
       "1,000 tools: rendered (here longer than the 2048-token context: %d %s)" % (code, err))
    ok(srv.poll() is None, "the server is still up after the bad requests")

    # ---- 6b. a call left open before the next one (a fresh server, its own script)
    serve_lib.stop(srv)
    with open(SCRIPT, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n---\n".join([UNCLOSED, UNCLOSED, BAD_BYTES, BAD_BYTES]) + "\n")
    srv = serve_lib.launch(K3, M, LOG, dict(env, K3_SERVE_SCRIPT=SCRIPT), SERVE)
    PORT = serve_lib.await_port(srv, LOG, 30)[1]
    code, o = post({"messages": q, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    plain = [(c["function"]["name"], c["function"]["arguments"]) for c in ch.get("message", {}).get("tool_calls") or []]
    want = [("get_weather", '{"city": "Paris"}'), ("get_time", '{"days": 3}')]
    ok(code == 200 and ch.get("finish_reason") == "tool_calls" and plain == want,
       "a call left open before the next: both calls, each with its own arguments (%s)" % str(ch)[:300])
    done, fins, tcs = streamed_calls()
    ok(done and fins == ["tool_calls"] and gathered(tcs) == want,
       "streamed: the same two calls from the deltas (%s, %s)" % (fins, gathered(tcs)))
    code, o = post({"messages": q, "tools": TOOLS})
    ch = o.get("choices", [{}])[0] if code == 200 else {}
    plain = [(c["function"]["name"], c["function"]["arguments"]) for c in ch.get("message", {}).get("tool_calls") or []]
    want = [("get_weather", '{"c\ufffdity": "Paris", "days": "\ufffd"}')]
    ok(code == 200 and ch.get("finish_reason") == "tool_calls" and plain == want,
       "bytes that are not UTF-8 in a key and a number: U+FFFD, the call answered (%s)" % str(ch)[:300])
    done, fins, tcs = streamed_calls()
    ok(done and gathered(tcs) == want, "streamed: the same call from the deltas (%s)" % gathered(tcs))

    # ---- 7. the official OpenAI SDK (npm openai 5)
    cache = serve_lib.openai_sdk(["openai@5"])
    if cache:
        body = r"""
const tools = JSON.parse(process.argv[3]);
const q = [{ role: "user", content: "Weather in Paris, and the time?" }];
const r = await client.chat.completions.create({ model: "tiny-k3", messages: q, tools });
out.plain = { finish: r.choices[0].finish_reason, content: r.choices[0].message.content,
              reasoning: [r.choices[0].message.reasoning, r.choices[0].message.reasoning_content],
              calls: r.choices[0].message.tool_calls.map(c => [c.id, c.function.name, c.function.arguments]) };
const s = await client.chat.completions.create({ model: "tiny-k3", messages: q, tools, stream: true });
const acc = {}; let finish = null; const rs = ["", ""];
for await (const ch of s) {
  const d = ch.choices[0]?.delta ?? {};
  rs[0] += d.reasoning ?? ""; rs[1] += d.reasoning_content ?? "";
  for (const tc of d.tool_calls ?? []) {
    acc[tc.index] ??= { id: "", name: "", args: "" };
    if (tc.id) acc[tc.index].id = tc.id;
    if (tc.function?.name) acc[tc.index].name = tc.function.name;
    acc[tc.index].args += tc.function?.arguments ?? "";
  }
  if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
}
out.stream = { finish, reasoning: rs, calls: Object.values(acc).map(c => [c.id, c.name, c.args]) };
const hist = [...q, { role: "assistant", content: null, tool_calls: out.stream.calls.map(([id, name, args]) =>
  ({ id, type: "function", function: { name, arguments: args } })) },
  ...out.stream.calls.map(([id]) => ({ role: "tool", tool_call_id: id, content: "18 C" }))];
const a = await client.chat.completions.create({ model: "tiny-k3", messages: hist, tools });
out.answer = { finish: a.choices[0].finish_reason, content: a.choices[0].message.content };
try {
  await client.chat.completions.create({ model: "tiny-k3", messages: q, tools,
    tool_choice: { type: "function", function: { name: "get_date" } } });
  out.named = "no error";
} catch (e) { out.named = [e.status, e.message]; }
// a call cut by the model's end (CUT_BY_EOM): the answer of a plain request, and the one the SDK's
// stream helper gathers from the deltas
const calls = (c) => [c.choices[0].finish_reason,
  (c.choices[0].message.tool_calls ?? []).map(t => [t.function.name, t.function.arguments])];
out.cut_plain = calls(await client.chat.completions.create({ model: "tiny-k3", messages: q, tools }));
const cs = client.chat.completions.stream({ model: "tiny-k3", messages: q, tools });
out.cut_stream = calls(await cs.finalChatCompletion());
"""
        # the SDK run takes turns 12 (TWO_CALLS, repeating from here on) ...: re-script with a fresh server
        serve_lib.stop(srv)
        with open(SCRIPT, "w") as f:
            f.write("\n---\n".join([TWO_CALLS, TWO_CALLS, ANSWER, CUT_BY_EOM, CUT_BY_EOM]) + "\n")
        srv = serve_lib.launch(K3, M, LOG, dict(env, K3_SERVE_SCRIPT=SCRIPT), SERVE)
        PORT = serve_lib.await_port(srv, LOG, 30)[1]
        res = serve_lib.run_sdk(body, ["http://127.0.0.1:%d/v1" % PORT, json.dumps(TOOLS)], cache, env, 120, T,
                                "sdk.cjs", cwd=cache)
        pl, st = res.get("plain", {}), res.get("stream", {})
        ok(pl.get("finish") == "tool_calls" and pl.get("content") is None and
           [c[1:] for c in pl.get("calls", [])] == [["get_weather", WANT_ARGS[0]], ["get_time", WANT_ARGS[1]]],
           "OpenAI SDK: non-streaming tool_calls parse (%r)" % pl.get("calls"))
        ok(pl.get("reasoning") == ["Need data."] * 2 and st.get("reasoning") == ["Need data."] * 2,
           "OpenAI SDK: message.reasoning and .reasoning_content, streamed and not, hold the same reasoning (%r, %r)"
           % (pl.get("reasoning"), st.get("reasoning")))
        ok(st.get("finish") == "tool_calls" and [c[1:] for c in st.get("calls", [])] ==
           [["get_weather", WANT_ARGS[0]], ["get_time", WANT_ARGS[1]]] and all(c[0] for c in st.get("calls", [])),
           "OpenAI SDK: streamed tool call deltas accumulate to the same calls")
        ok(res.get("answer", {}).get("content") == "It is 18 C." and res["answer"]["finish"] == "stop",
           "OpenAI SDK: the tool result turn is answered")
        ok(isinstance(res.get("named"), list) and res["named"][0] == 400, "OpenAI SDK: a named tool_choice of a function "
           "not in tools is a 400 error (%r)" % (res.get("named"),))
        cp, cst = res.get("cut_plain"), res.get("cut_stream")
        ok(cp and cp[0] == "length" and cp[1][:1] == [["get_weather", '{"city": "Paris"}']] and len(cp[1]) == 2 and
           cst == cp, "OpenAI SDK: a call cut by the model's end: finish_reason length and the same calls, plain and "
           "gathered by the stream helper (finalChatCompletion) (%r, %r)" % (cp, cst))
finally:
    serve_lib.stop(srv)
raise SystemExit(serve_lib.status())
