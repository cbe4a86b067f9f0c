# t-serve-format.py: response_format through `k3chat models/k3-nano --serve` end to end: a
# json_schema (strict) answer at temperature 1 over several seeds, streamed and not, validates
# against its schema (checked here by hand, field by field); json_object gives one JSON object;
# an unsupported keyword, a schema no document satisfies and a malformed response_format are
# 400s naming the field; integers past int64 in a schema are served as ajv reads them (doubles),
# a seed of 2^64 is a 400 naming it; text changes nothing; tool_choice required and named and
# parallel_tool_calls false give calls that follow the tools' parameters; the official OpenAI SDK
# (npm openai 5 + zod 3, SKIP without node/npm) parses zodResponseFormat and raw json_schema answers
# and gets required (single) and named (streamed) calls; usage.prompt_tokens of json_schema,
# json_object, required, named and none + json_schema requests equals the prompt rendered here from
# k3-tools.md 1.2/1.6/1.7 (tokenised by tools/nano_tok.py), and so does that of a chat with every
# message kind (names, text parts, an empty reasoning_content beside reasoning); with thinking on and thinking_budget
# (which closes k3-nano's reasoning), the reasoning is free text and the answer validates. Elsewhere thinking is off (k3-nano seldom opens its
# response channel after thinking, and reasoning is never masked). The server runs on
# 127.0.0.1 with a kernel-picked port and is always killed; every wait is bounded.
import json
import os
import re
import sys

import serve_lib
from serve_lib import ok

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(os.environ["K3_SRC"], "models", "k3-nano")
LOG = os.path.join(T, "serve.log")
env.pop("K3_BITS", None)
srv = serve_lib.launch(K3, M, LOG, env)


def log_text():
    return serve_lib.read_text(LOG)


def post(body, timeout=120):
    """(status, the answer's text of a stream, else the parsed JSON or the text)"""
    code, data, streamed = serve_lib.post_chat(PORT, body, timeout)
    if streamed:
        objs, _ = serve_lib.sse_objects(data)
        return code, "".join(ch.get("delta", {}).get("content") or "" for o in objs for ch in o.get("choices", []))
    return code, data


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
                         "email": {"type": "string", "format": "email"}}}


def valid(d):
    """SCHEMA by hand: an independent check of the fields the grammar must enforce."""
    if not isinstance(d, dict) or set(d) - {"name", "age", "tags", "email"} or not {"name", "age", "tags"} <= set(d):
        return False
    if not isinstance(d["name"], str) or len(d["name"]) > 10:
        return False
    if type(d["age"]) is not int or not 0 <= d["age"] <= 120:
        return False
    if not isinstance(d["tags"], list) or len(d["tags"]) > 3 or any(t not in ("a", "b", "c") for t in d["tags"]):
        return False
    return "email" not in d or re.fullmatch(r"[a-z0-9.]+@[a-z0-9]+(\.[a-z0-9]+)+", d["email"]) is not None


def ask(fmt, seed, stream=False):
    return post({"messages": [{"role": "user", "content": "A person, as JSON."}], "temperature": 1, "seed": seed,
                 "max_tokens": 300, "chat_template_kwargs": {"thinking": False}, "response_format": fmt,
                 "stream": stream})


try:
    up, PORT = serve_lib.await_port(srv, LOG, 60)
    ok(up, "the server starts on k3-nano")
    if PORT is None:
        print("FAIL: no address in the log: " + log_text()[-300:])
        raise SystemExit(1)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}}
    good, shown = 0, None
    for seed in range(6):
        code, o = ask(fmt, seed)
        text = o["choices"][0]["message"]["content"] if code == 200 else str(o)
        try:
            good += valid(json.loads(text)) and o["choices"][0]["finish_reason"] == "stop"
        except (ValueError, TypeError):
            shown = shown or text
    ok(good == 6, "json_schema strict, 6 seeds at temperature 1: every answer parses and validates (%d)%s"
       % (good, "" if good == 6 else ": " + str(shown)[:200]))
    good = 0
    for seed in range(6, 9):
        code, text = ask(fmt, seed, stream=True)
        try:
            good += code == 200 and valid(json.loads(text))
        except ValueError:
            pass
    ok(good == 3, "the same streamed: the concatenated deltas validate (%d of 3)" % good)
    code, o = ask({"type": "json_schema", "json_schema": {"name": "n", "strict": False, "schema": SCHEMA}}, 11)
    try:
        ok(code == 200 and valid(json.loads(o["choices"][0]["message"]["content"])), "strict false is enforced too")
    except (ValueError, TypeError, KeyError):
        ok(False, "strict false is enforced too: %s" % str(o)[:200])
    # integers past int64 (jansson's limit: the whole request was a 400 "too big integer") in a
    # schema are the doubles ajv reads; an enum value needing 17 digits is kept beside minimum
    big = {"type": "object", "additionalProperties": False, "required": ["n", "c"],
           "properties": {"n": {"type": "integer", "minimum": -10**20, "maximum": 10**20},
                          "c": {"enum": [2**64, 0.30000000000000004], "minimum": 0}}}
    code, o = ask({"type": "json_schema", "json_schema": {"name": "big", "strict": True, "schema": big}}, 13)
    try:
        d = json.loads(o["choices"][0]["message"]["content"])
        ok(code == 200 and set(d) == {"n", "c"} and type(d["n"]) is int and abs(d["n"]) < 10**16
           and float(d["c"]) in (float(2**64), 0.30000000000000004),
           "a schema with integers past int64 (maximum 1e20, enum 2^64) is served and the answer validates: %s"
           % json.dumps(d))
    except (ValueError, TypeError, KeyError, AttributeError):
        ok(False, "a schema with integers past int64: %s %s" % (code, str(o)[:300]))
    code, o = post({"messages": [{"role": "user", "content": "hi"}], "seed": 2**64, "max_tokens": 4})
    msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else str(o)
    ok(code == 400 and msg.startswith("seed: the integer 18446744073709551616 is past the 64-bit integers")
       and "9223372036854775807" in msg, "seed 2^64: a 400 naming the field and the limit: %s" % msg[:200])
    code, o = ask({"type": "json_object"}, 12)
    try:
        ok(code == 200 and isinstance(json.loads(o["choices"][0]["message"]["content"]), dict),
           "json_object: the answer is one JSON object")
    except (ValueError, TypeError, KeyError):
        ok(False, "json_object: %s" % str(o)[:200])
    # thinking on: the reasoning stays free, the mask applies from the response channel on
    # (thinking_budget 8 closes k3-nano's reasoning, which seldom ends by itself). The prompts
    # differ (1.7's message), so the reasoning is compared with the unmasked one only in t-grammar
    # (--prompt); here it must be text a JSON mask would refuse (not starting with "{", not JSON)
    def is_json(t):
        try:
            json.loads(t)
            return True
        except ValueError:
            return False

    def think_ask(f, seed, budget=8):
        body = {"messages": [{"role": "user", "content": "A person, as JSON."}], "temperature": 1, "seed": seed,
                "max_tokens": 300, "chat_template_kwargs": {"thinking": True}, "thinking_budget": budget}
        if f:
            body["response_format"] = f
        return post(body)

    good, shown = 0, ""
    for seed in range(3):
        c1, o1 = think_ask(fmt, seed)
        c2, o2 = think_ask(None, seed)
        try:
            m1, m2 = o1["choices"][0]["message"], o2["choices"][0]["message"]
            r1, r2 = m1.get("reasoning_content") or "", m2.get("reasoning_content") or ""
            good += (r1 != "" and r2 != "" and not r1.lstrip().startswith("{") and not is_json(r1)
                     and valid(json.loads(m1["content"])) and o1["choices"][0]["finish_reason"] == "stop")
            shown = shown or "reasoning %r vs %r, content %r" % (r1[:60], r2[:60], m1["content"][:80])
        except (ValueError, TypeError, KeyError, IndexError):
            shown = shown or str(o1)[:200]
    ok(good == 3, "thinking on, thinking_budget 8, json_schema, 3 seeds: the reasoning is free text, the answer "
       "validates (%d)%s" % (good, "" if good == 3 else ": " + shown))
    code, o = think_ask(fmt, 1, budget=-1)
    ok(code == 400 and "thinking_budget" in json.dumps(o), "thinking_budget -1: a 400 naming it")
    code, o = ask({"type": "text"}, 13)
    ok(code == 200, "text: answered as before")
    bad = {"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}}}
    code, o = ask({"type": "json_schema", "json_schema": {"name": "x", "schema": bad}}, 1)
    msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else ""
    ok(code == 400 and '"contentEncoding" at #/properties/a' in msg, "an unsupported keyword: 400 naming it (%s)" % msg)
    code, o = ask({"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": []}}}, 1)
    msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else ""
    ok(code == 400 and "nothing" in msg, "\"enum\": []: 400, compiles to nothing (%s)" % msg)
    code, o = ask({"type": "yaml"}, 1)
    ok(code == 400 and "response_format.type" in json.dumps(o), "an unknown type: 400 naming response_format.type")
    code, o = ask({"type": "json_schema"}, 1)
    ok(code == 400 and "response_format.json_schema" in json.dumps(o), "json_schema without the object: 400")

    # ---- the tool-call grammar: required, named, parallel_tool_calls false (k3-tools.md 1.6)
    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer", "minimum": 1,
                                                                                    "maximum": 7}},
        "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}}]

    def calls(choice, seed, parallel=None, stream=False):
        body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "tool_choice": choice,
                "temperature": 1, "seed": seed, "max_tokens": 300, "chat_template_kwargs": {"thinking": False},
                "stream": stream}
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
        if not stream:
            code, o = post(body)
            if code != 200:
                return None, str(o)
            ch = o["choices"][0]
            return ch["finish_reason"], ch["message"].get("tool_calls") or []
        _, data, streamed = serve_lib.post_chat(PORT, body, 120)
        acc, finish = {}, None
        for o in serve_lib.sse_objects(data)[0] if streamed else []:
            for ch in o.get("choices", []):
                finish = ch.get("finish_reason") or finish
                for d in ch.get("delta", {}).get("tool_calls") or []:
                    a = acc.setdefault(d["index"], {"function": {"name": "", "arguments": ""}})
                    a["function"]["name"] += d.get("function", {}).get("name") or ""
                    a["function"]["arguments"] += d.get("function", {}).get("arguments") or ""
        return finish, [acc[k] for k in sorted(acc)]

    def args_ok(call):
        a = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "get_weather":
            return a.get("city") in ("Paris", "Oslo") and set(a) <= {"city", "days"} and (
                "days" not in a or (type(a["days"]) is int and 1 <= a["days"] <= 7))
        return call["function"]["name"] == "get_time" and set(a) == {"zone"} and isinstance(a["zone"], str) and len(
            a["zone"]) <= 8

    good, shown = 0, ""
    for seed in range(4):
        finish, cs = calls("required", seed, stream=seed % 2 == 1)
        try:
            good += finish == "tool_calls" and len(cs) >= 1 and all(args_ok(c) for c in cs)
        except (ValueError, TypeError, KeyError):
            pass
        shown = shown or ("" if finish == "tool_calls" else str(cs)[:200])
    ok(good == 4, "tool_choice required, 4 seeds (2 streamed): every answer is calls with valid arguments (%d)%s"
       % (good, shown and ": " + shown))
    good = 0
    for seed in range(4):
        finish, cs = calls({"type": "function", "function": {"name": "get_time"}}, seed, parallel=False)
        try:
            good += finish == "tool_calls" and len(cs) == 1 and cs[0]["function"]["name"] == "get_time" and args_ok(cs[0])
        except (ValueError, TypeError, KeyError):
            pass
    ok(good == 4, "a named tool_choice with parallel_tool_calls false: exactly one call of that tool (%d of 4)" % good)
    good = 0
    for seed in range(4):
        finish, cs = calls("auto", seed, parallel=False)
        good += finish in ("stop", "tool_calls") and len(cs) <= 1
    ok(good == 4, "auto with parallel_tool_calls false: at most one call (%d of 4)" % good)

    # ---- the prompt's token count is what k3-tools.md 1.2, 1.6 and 1.7 give: each request's prompt
    # rendered here from the spec's text (tools/nano_tok.py's tokenizer, which t-nano checks
    # against k3chat's) against the server's usage.prompt_tokens
    sys.path.insert(0, os.path.join(os.environ["K3_SRC"], "tools"))
    import nano_tok
    tk = nano_tok.Tok.load(M)
    sp = tk.special

    def sysmsg(typ, body):
        return tk.open_tag("message", [("role", "system"), ("type", typ)]) + tk.encode(body) + \
            tk.close_tag("message") + [sp["<|end_of_msg|>"]]

    def spec_prompt(user, tools=None, choice=None, fmt=None):
        ids = []
        if tools:  # 1.2: keys sorted at every depth, compact; the body is not stripped
            ids += sysmsg("tool-declare", "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"
                          + json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n```")
        ids += tk.open_tag("message", [("role", "user")]) + tk.encode(user) + tk.close_tag("message") + \
            [sp["<|end_of_msg|>"]]
        if choice == "required":  # 1.6; a named choice adds nothing
            ids += sysmsg("tool-choice", "The system is invoked with `tool_choice=required`.\n"
                          "You MUST call tools in the next message.")
        if choice == "none":
            ids += sysmsg("tool-choice", "The system is invoked with `tool_choice=none`.\n"
                          "You MUST NOT call any tools in the next message.")
        if fmt is not None:  # 1.7
            body = ("The system is invoked with `response_format=%s`.\nYour response must be raw JSON data without "
                    "markdown code blocks (```json) or any additional formatting." % fmt["type"])
            if fmt["type"] == "json_schema":
                body += "\nThe JSON data must match the following schema:\n```json\n" + json.dumps(
                    fmt["json_schema"]["schema"], sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n```"
            ids += sysmsg("response-format", body.strip())
        return ids + tk.open_tag("message", [("role", "assistant")]) + tk.open_tag("response")  # thinking off

    USER = "A person, as JSON."
    for desc, extra, want in (
            ("response_format json_schema", {"response_format": fmt}, spec_prompt(USER, fmt=fmt)),
            ("response_format json_object", {"response_format": {"type": "json_object"}},
             spec_prompt(USER, fmt={"type": "json_object"})),
            ("tool_choice required", {"tools": TOOLS, "tool_choice": "required"},
             spec_prompt(USER, TOOLS, "required")),
            ("a named tool_choice with parallel_tool_calls false",
             {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}},
              "parallel_tool_calls": False}, spec_prompt(USER, TOOLS)),
            ("tool_choice none, then json_schema", {"tools": TOOLS, "tool_choice": "none", "response_format": fmt},
             spec_prompt(USER, TOOLS, "none", fmt))):
        body = {"messages": [{"role": "user", "content": USER}], "temperature": 0, "max_tokens": 4,
                "chat_template_kwargs": {"thinking": False}}
        body.update(extra)
        code, o = post(body)
        got = o.get("usage", {}).get("prompt_tokens") if code == 200 and isinstance(o, dict) else None
        ok(got == len(want), "%s: usage.prompt_tokens %s = %d, the spec's prompt (k3-tools.md 1.2/1.6/1.7)%s"
           % (desc, got, len(want), "" if code == 200 else ": HTTP %d %s" % (code, str(o)[:160])))

    # ---- each message kind as the release's encoder renders it (k3-chat.md 2, k3-tools.md 1.4):
    # name="..." (escaped) on system, developer and assistant messages; text parts one after the
    # other, each its own segment ("Hel" + "lo" never forms "Hello"); an empty reasoning_content
    # gives way to reasoning; thinking on
    def msg(role, body, attrs=()):
        return tk.open_tag("message", [("role", role)] + list(attrs)) + body + tk.close_tag("message") + \
            [sp["<|end_of_msg|>"]]
    kinds = [{"role": "system", "name": 'Ops & "Co"', "content": "Be brief."},
             {"role": "developer", "name": "", "content": "Plain."},
             {"role": "user", "name": "ana",
              "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo there"}]},
             {"role": "assistant", "name": "k3", "content": "Hello.", "reasoning_content": "",
              "reasoning": "Greet."},
             {"role": "user", "content": "Bye"}]
    want = (sysmsg("thinking-effort", nano_tok.EFFORT_BODY.format("max"))
            + msg("system", tk.encode("Be brief."), [("name", 'Ops & "Co"')])
            + msg("system", tk.encode("Plain."))
            + msg("user", tk.encode("Hel") + tk.encode("lo there"), [("name", "ana")])
            + msg("assistant", tk.open_tag("think") + tk.encode("Greet.") + tk.close_tag("think")
                  + tk.open_tag("response") + tk.encode("Hello.") + tk.close_tag("response"), [("name", "k3")])
            + msg("user", tk.encode("Bye")) + tk.open_tag("message", [("role", "assistant")])
            + tk.open_tag("think"))
    code, o = post({"messages": kinds, "temperature": 0, "max_tokens": 1})
    got = o.get("usage", {}).get("prompt_tokens") if code == 200 and isinstance(o, dict) else None
    ok(got == len(want), "names, text parts, reasoning: usage.prompt_tokens %s = %d, the release's "
       "rendering%s" % (got, len(want), "" if code == 200 else ": HTTP %d %s" % (code, str(o)[:160])))
    # a tool result whose content is null writes nothing (k3-tools.md 1.4), thinking off
    hist = [{"role": "user", "content": "Time?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": None}]
    want = (spec_prompt("Time?", TOOLS)[:-len(tk.open_tag("message", [("role", "assistant")]) + tk.open_tag("response"))]
            + msg("assistant", tk.open_tag("response") + tk.close_tag("response") + tk.open_tag("tools")
                  + tk.open_tag("call", [("tool", "get_time"), ("index", "1")]) + tk.close_tag("call")
                  + tk.close_tag("tools"))
            + msg("tool", [], [("tool", "get_time"), ("index", "1")])
            + tk.open_tag("message", [("role", "assistant")]) + tk.open_tag("response"))
    code, o = post({"messages": hist, "tools": TOOLS, "temperature": 0, "max_tokens": 1,
                    "chat_template_kwargs": {"thinking": False}})
    got = o.get("usage", {}).get("prompt_tokens") if code == 200 and isinstance(o, dict) else None
    ok(got == len(want), "a tool result with content null: answered, usage.prompt_tokens %s = %d, the spec's "
       "prompt%s" % (got, len(want), "" if code == 200 else ": HTTP %d %s" % (code, str(o)[:160])))
    code, o = post({"messages": [{"role": "user", "name": 7, "content": "x"}]})
    ok(code == 400 and "messages[0].name" in json.dumps(o), "a name that is not a string: 400 naming it")

    # ---- chat_template_kwargs.thinking_effort (the release encoder's own name) sets the effort and
    # comes before reasoning_effort: seen through the prompt cache (an identical prompt is all cached)
    def cached(**kw):
        code, o = post(dict({"messages": [{"role": "user", "content": "Effort check."}], "temperature": 0,
                             "max_tokens": 1}, **kw))
        u = o.get("usage", {}) if code == 200 and isinstance(o, dict) else {}
        return u.get("prompt_tokens_details", {}).get("cached_tokens"), u.get("prompt_tokens")
    cached(reasoning_effort="low")
    c1, n1 = cached(chat_template_kwargs={"thinking_effort": "low"})
    c2, n2 = cached(reasoning_effort="low", chat_template_kwargs={"thinking_effort": "high"})
    ok(n1 and c1 == n1 and n2 and c2 < n2, "chat_template_kwargs.thinking_effort low renders reasoning_effort "
       "low's prompt (all %s of %s cached), and high overrides reasoning_effort low (%s of %s)" % (c1, n1, c2, n2))
    code, o = post({"messages": [{"role": "user", "content": "x"}],
                    "chat_template_kwargs": {"thinking_effort": "medium"}})
    ok(code == 400 and "chat_template_kwargs.thinking_effort: 'medium'" in json.dumps(o),
       "chat_template_kwargs.thinking_effort medium: 400 naming it (%s)" % str(o)[:120])

    # ---- the official OpenAI SDK (npm openai 5 + zod 3, installed outside the repository by
    # serve_lib.openai_sdk into K3_OPENAI_JS, default ~/.cache/k3chat/openai-js)
    cache = serve_lib.openai_sdk(["openai@5", "zod@3"])
    if cache:
        body = r"""
const schema = JSON.parse(process.argv[3]), tools = JSON.parse(process.argv[4]);
const base = { model: "k3-nano", messages: [{ role: "user", content: "A person, as JSON." }], temperature: 1,
               max_tokens: 300, chat_template_kwargs: { thinking: false } };
const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120),
                          tags: z.array(z.enum(["a", "b", "c"])).max(3) });
out.zod = [];
out.raw = [];
for (let seed = 0; seed < 3; seed++) {
  const r = await client.chat.completions.parse({ ...base, seed, response_format: zodResponseFormat(Person, "person") });
  out.zod.push(r.choices[0].message.parsed);
  const r2 = await client.chat.completions.parse({ ...base, seed,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } } });
  out.raw.push(r2.choices[0].message.parsed);
}
const t = await client.chat.completions.create({ ...base, tools, tool_choice: "required", parallel_tool_calls: false });
out.required = t.choices[0].message.tool_calls.map(c => [c.function.name, JSON.parse(c.function.arguments)]);
const s = await client.chat.completions.create({ ...base, seed: 4, tools, stream: true,
  tool_choice: { type: "function", function: { name: "get_time" } } });
const acc = {};
for await (const ch of s)
  for (const tc of ch.choices[0]?.delta?.tool_calls ?? []) {
    acc[tc.index] ??= { name: "", args: "" };
    acc[tc.index].name += tc.function?.name ?? "";
    acc[tc.index].args += tc.function?.arguments ?? "";
  }
out.named = Object.values(acc).map(c => [c.name, JSON.parse(c.args)]);
"""
        res = serve_lib.run_sdk(body, ["http://127.0.0.1:%d/v1" % PORT, json.dumps(SCHEMA), json.dumps(TOOLS)], cache,
                                env, 300, T, "sdk.cjs", requires='const { zodResponseFormat } = require("openai/helpers/zod");\n'
                                'const { z } = require("zod");\n')
        zod = res.get("zod", [])
        ok(len(zod) == 3 and all(isinstance(d, dict) and set(d) == {"name", "age", "tags"} and valid(d) for d in zod),
           "OpenAI SDK: chat.completions.parse with zodResponseFormat: 3 seeds, parsed objects valid (%r)" % (zod[:1],))
        raw = res.get("raw", [])
        ok(len(raw) == 3 and all(valid(d) for d in raw), "OpenAI SDK: parse with a raw json_schema: 3 parsed objects valid")
        req = res.get("required", [])
        ok(len(req) == 1 and args_ok({"function": {"name": req[0][0], "arguments": json.dumps(req[0][1])}}),
           "OpenAI SDK: tool_choice required with parallel_tool_calls false: one call, valid arguments (%r)" % (req,))
        nm = res.get("named", [])
        ok(len(nm) >= 1 and all(n == "get_time" for n, _ in nm) and all(
            args_ok({"function": {"name": n, "arguments": json.dumps(a)}}) for n, a in nm),
           "OpenAI SDK: a named tool_choice, streamed: calls of that function only, valid arguments (%r)" % (nm[:1],))
finally:
    serve_lib.stop(srv)
raise SystemExit(serve_lib.status())
