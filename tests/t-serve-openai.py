# t-serve-openai.py: `k3chat MODEL_DIR --serve` walked parameter by parameter against OpenAI's
# chat completions API, on a generated tiny checkpoint, loopback only. Every request field either
# does what OpenAI documents or is refused with a 400 in OpenAI's error shape naming it
# ({"error": {"message", "type", "param", "code"}}; "param" was missing): a field the server does
# not know (a typo such as max_token, another server's ignore_eos) gets unknown_parameter, and
# OpenAI's fields that ask for what it does not do (functions, function_call, audio, an audio
# modality, web_search_options, a verbosity other than medium) get unsupported_parameter or
# unsupported_value; they were all answered as if absent. The fields that change nothing in the
# answer (user, metadata, store, service_tier, prediction, prompt_cache_key, safety_identifier)
# are taken, with their types checked. Then the official OpenAI SDK for JavaScript (npm openai 5,
# installed outside the repository into K3_OPENAI_JS; SKIP without node/npm) sends each
# parameter it has a field for: accepted ones answer (the same seed twice gives the same text,
# stream_options.include_usage ends the stream with usage, max_tokens and max_completion_tokens
# both bound the answer), refused ones raise its BadRequestError with .param and .code, and
# /v1/models lists and retrieves the model (an unknown one: NotFoundError). With
# stream_options.include_usage every chunk has "usage", null but in the last, as OpenAI writes it;
# usage.completion_tokens_details.reasoning_tokens counts the think channel's tokens.
# A prompt over the context is a 400 context_length_exceeded with param "messages" and the
# figures, as OpenAI answers it, and a content error names its field in param (both were null).
# An assistant message's refusal, as a field or as OpenAI's refusal content part, is rendered as
# what the assistant said (the field was dropped, the part refused as media), checked with the
# SDK by the prompt cache: the same rendering as the refusal written as content. Every chat
# answer, stream and error has OpenAI's X-Request-Id header (the SDK's request_id; it was missing),
# the answer's id, whose number is the log line's.
# The server is killed at the end; every wait is bounded.
import json
import os
import re

import serve_lib
from serve_lib import chat, exchange, final, ok, req

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")
procs = []


def post(**kw):
    """POST a chat request with fields kw (max_tokens 2 unless given): (status, parsed body)."""
    kw.setdefault("max_tokens", 2)
    st, _, body = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(**kw)))[0])
    try:
        return st, json.loads(body)
    except ValueError:
        return st, {"raw": body[:200].decode("utf-8", "replace")}


def refused(o, code, param):
    """The body is OpenAI's error shape with this code and param (and a message naming param)."""
    e = o.get("error") if isinstance(o, dict) else None
    return (isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} and e["code"] == code and
            e["param"] == param and e["type"] == "invalid_request_error" and e["message"].startswith(param + ":"))


try:
    srv, PORT, LOG = serve_lib.start_server(K3, M, T, env, procs, "openai", ["--serve", "127.0.0.1:0"])
    ok(PORT is not None, "the server starts")
    if PORT is None:
        raise SystemExit(1)

    # ---- fields the server does not know, or OpenAI's that ask for what it does not do: 400s
    # naming them (each was answered 200, as if it were absent)
    cases = [
        ("an unknown field", dict(foo_bar=1), "unknown_parameter", "foo_bar"),
        ("a typo of max_tokens", dict(max_token=5), "unknown_parameter", "max_token"),
        ("vLLM's ignore_eos", dict(ignore_eos=True), "unknown_parameter", "ignore_eos"),
        ("functions (deprecated)", dict(functions=[{"name": "f", "parameters": {"type": "object"}}]),
         "unsupported_parameter", "functions"),
        ("function_call (deprecated)", dict(function_call="auto"), "unsupported_parameter", "function_call"),
        ("audio", dict(audio={"voice": "alloy", "format": "wav"}), "unsupported_parameter", "audio"),
        ("an audio modality", dict(modalities=["text", "audio"]), "unsupported_value", "modalities[1]"),
        ("web_search_options", dict(web_search_options={}), "unsupported_parameter", "web_search_options"),
        ("verbosity low", dict(verbosity="low"), "unsupported_value", "verbosity"),
        ("service_tier xyz", dict(service_tier="xyz"), "invalid_value", "service_tier"),
        ("user 5", dict(user=5), "invalid_type", "user"),
        ("metadata a string", dict(metadata="x"), "invalid_type", "metadata"),
        ("store 'yes'", dict(store="yes"), "invalid_type", "store"),
        ("modalities a string", dict(modalities="text"), "invalid_type", "modalities"),
        ("a typo in stream_options", dict(stream=True, stream_options={"include_usgae": True}), "unknown_parameter",
         "stream_options.include_usgae"),
        ("stream_options.include_obfuscation 1", dict(stream=True, stream_options={"include_obfuscation": 1}),
         "invalid_type", "stream_options.include_obfuscation"),
    ]
    for name, kw, code, param in cases:
        st, o = post(**kw)
        ok(st == 400 and refused(o, code, param), "%s -> 400 %s, param %s (%d %s)" % (name, code, param, st,
                                                                                   json.dumps(o)[:160]))

    # ---- every 400 names its field in error.param; an error about no field has param null
    for name, kw, code, param in [
        ("temperature 3", dict(temperature=3), "invalid_value", "temperature"),
        ("n 17", dict(n=17), "invalid_value", "n"),
        ("stop [1]", dict(stop=[1]), "invalid_type", "stop[0]"),
        ("a logit_bias id past the vocabulary", dict(logit_bias={"99999": 10}), "invalid_value", "logit_bias.99999"),
        ("a message without a role", dict(messages=[{"content": "x"}]), "invalid_type", "messages[0].role"),
    ]:
        st, o = post(**kw)
        ok(st == 400 and refused(o, code, param), "%s -> error.param %s (%d %s)" % (name, param, st,
                                                                                 json.dumps(o)[:160]))
    # a content error's message reads on after its field ("messages[0].content[0] is of type ..."):
    # its param is that field (it was null); an assistant's refusal must be a string
    for name, kw, code, param in [
        ("an image part", dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
         "unsupported_content", "messages[0].content[0]"),
        ("content 5", dict(messages=[{"role": "user", "content": 5}]), "invalid_type", "messages[0].content"),
        ("a text part without its text", dict(messages=[{"role": "user", "content": [{"type": "text"}]}]),
         "invalid_type", "messages[0].content[0].text"),
        ("a refusal part without its refusal", dict(messages=[
            {"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "refusal"}]},
            {"role": "user", "content": "y"}]), "invalid_type", "messages[1].content[0].refusal"),
    ]:
        st, o = post(**kw)
        e = o.get("error", {})
        ok(st == 400 and e.get("code") == code and e.get("param") == param and e["message"].startswith(param + " "),
           "%s -> error.param %s (%d %s)" % (name, param, st, json.dumps(o)[:160]))
    st, o = post(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "refusal": 5},
                           {"role": "user", "content": "y"}])
    ok(st == 400 and refused(o, "invalid_type", "messages[1].refusal"), "an assistant's refusal 5 -> 400 naming "
       "messages[1].refusal (%d %s)" % (st, json.dumps(o)[:160]))
    # a prompt over the context (K3_MAXT=2048): OpenAI's 400 context_length_exceeded with param
    # "messages" (it was null), with the figures, streamed or not
    for stream in (False, True):
        st, o = post(messages=[{"role": "user", "content": "wo rd " * 3000}], stream=stream)
        ok(st == 400 and refused(o, "context_length_exceeded", "messages") and
           re.search(r"needs \d+ tokens .* holds 2048 \(K3_MAXT\)", o["error"]["message"]),
           "a prompt over the context%s -> 400 context_length_exceeded, param messages, the figures (%d %s)"
           % (", streamed," if stream else "", st, json.dumps(o)[:240]))
    st, _, body = final(exchange(PORT, req("GET", "/v1/nothing"))[0])
    e = json.loads(body).get("error", {})
    ok(st == 404 and "param" in e and e["param"] is None, "a 404 has error.param null (%d %s)" % (st, body[:160]))

    # ---- stream_options.include_usage: every chunk has "usage", null but in the last one (which has
    # no choices), as OpenAI documents it (the field was absent from the others)
    st, _, body = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(
        max_tokens=3, stream=True, stream_options={"include_usage": True})))[0])
    ev = [x for x in serve_lib.sse_events(body) if x != "[DONE]"]
    ok(st == 200 and len(ev) >= 3 and all("usage" in x and x["usage"] is None and x["choices"] for x in ev[:-1]) and
       ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 3,
       "include_usage: usage null in every chunk but the last, which has it and no choices (%d chunks)" % len(ev))
    st, _, body = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(max_tokens=3, stream=True)))[0])
    ev = [x for x in serve_lib.sse_events(body) if x != "[DONE]"]
    ok(st == 200 and ev and not any("usage" in x for x in ev), "without include_usage no chunk has usage")

    # ---- usage.completion_tokens_details.reasoning_tokens: the think channel's share of the
    # completion tokens, as OpenAI reports a reasoning model's (it was missing)
    st, o = post(max_tokens=6)
    u = o.get("usage", {})
    ok(st == 200 and o["choices"][0]["message"].get("reasoning") and
       0 < u.get("completion_tokens_details", {}).get("reasoning_tokens", -1) <= u["completion_tokens"],
       "thinking on: usage.completion_tokens_details.reasoning_tokens counts the reasoning (%r)" % u)
    st, o = post(max_tokens=6, reasoning_effort="none")
    u = o.get("usage", {})
    ok(st == 200 and u.get("completion_tokens_details") == {"reasoning_tokens": 0},
       "thinking off: reasoning_tokens 0 (%r)" % u)
    st, _, body = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(
        max_tokens=4, stream=True, stream_options={"include_usage": True})))[0])
    ev = [x for x in serve_lib.sse_events(body) if x != "[DONE]"]
    u = ev[-1].get("usage") or {} if ev else {}
    ok(0 < u.get("completion_tokens_details", {}).get("reasoning_tokens", -1) <= 4,
       "... and in a stream's usage chunk (%r)" % u)

    # ---- OpenAI's fields that change nothing in the answer: taken, with their types checked
    st, o = post(user="u-1", metadata={"k": "v"}, store=True, service_tier="auto", prompt_cache_key="c",
                 safety_identifier="s", prediction={"type": "content", "content": "hello"}, modalities=["text"],
                 verbosity="medium", web_search_options=None, functions=None)
    ok(st == 200 and o.get("choices"), "user, metadata, store, service_tier, prediction, prompt_cache_key, "
       "safety_identifier, modalities text, verbosity medium, and null fields -> 200 (%d %s)" % (st, json.dumps(o)[:120]))
    st, _, body = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(
        max_tokens=2, stream=True, stream_options={"include_usage": False, "include_obfuscation": False})))[0])
    ok(st == 200 and body.rstrip().endswith(b"data: [DONE]"), "stream_options include_usage and include_obfuscation "
       "false -> a stream (%d)" % st)

    # ---- the official OpenAI SDK for JavaScript
    cache = serve_lib.openai_sdk(["openai@5"])
    if cache:
        body = r"""
const base = { model: "m", messages: [{ role: "user", content: "hi" }] };
out.ok = {};
out.err = {};
const text = (r) => (r.choices[0].message.reasoning ?? "") + "|" + (r.choices[0].message.content ?? "");
const accepted = {
  n1: { n: 1 }, stop_string: { stop: "zz" }, stop_array: { stop: ["zz", "yy"] }, logprobs_false: { logprobs: false },
  logprobs: { logprobs: true, top_logprobs: 2 }, presence_penalty: { presence_penalty: 0.5 },
  frequency_penalty: { frequency_penalty: -1 }, logit_bias: { logit_bias: { "1": 5 } },
  temperature_2: { temperature: 2 }, top_p_0: { top_p: 0 }, penalties_0: { presence_penalty: 0, frequency_penalty: 0 },
  logit_bias_empty: { logit_bias: {} }, response_format_text: { response_format: { type: "text" } },
  tool_choice_none: { tool_choice: "none" }, parallel_tool_calls: { parallel_tool_calls: false },
  user: { user: "u" }, metadata: { metadata: { a: "b" }, store: true }, reasoning_effort_low: { reasoning_effort: "low" },
  service_tier: { service_tier: "default" }, prompt_cache_key: { prompt_cache_key: "k" },
};
for (const [k, extra] of Object.entries(accepted)) {
  try {
    const r = await client.chat.completions.create({ ...base, max_completion_tokens: 3, ...extra });
    out.ok[k] = [r.object, r.choices.length, r.usage.completion_tokens];
  } catch (e) { out.ok[k] = ["error", e.status, e.message]; }
}
const refused = {
  n17: { n: 17 }, top_logprobs: { top_logprobs: 2 }, top_logprobs_21: { logprobs: true, top_logprobs: 21 },
  temperature_3: { temperature: 3 }, top_p_2: { top_p: 2 }, presence_penalty: { presence_penalty: 2.5 },
  frequency_penalty: { frequency_penalty: -3 }, logit_bias: { logit_bias: { "1": 101 } },
  reasoning_effort_medium: { reasoning_effort: "medium" }, tool_choice_required: { tool_choice: "required" },
  functions: { functions: [{ name: "f", parameters: { type: "object" } }] }, function_call: { function_call: "none" },
  audio: { modalities: ["text", "audio"] }, web_search_options: { web_search_options: {} },
  verbosity: { verbosity: "high" }, service_tier: { service_tier: "turbo" }, unknown: { max_token: 3 },
  both_max: { max_tokens: 3, max_completion_tokens: 4 },
};
for (const [k, extra] of Object.entries(refused)) {
  try {
    await client.chat.completions.create({ ...base, max_completion_tokens: 3, ...extra });
    out.err[k] = "answered";
  } catch (e) { out.err[k] = [e.constructor.name, e.status, e.param ?? null, e.code ?? null]; }
}
const s1 = await client.chat.completions.create({ ...base, max_tokens: 6, seed: 11, temperature: 1 });
const s2 = await client.chat.completions.create({ ...base, max_tokens: 6, seed: 11, temperature: 1 });
out.seed = [text(s1), text(s2)];
out.max = [(await client.chat.completions.create({ ...base, max_tokens: 2 })).usage.completion_tokens,
           (await client.chat.completions.create({ ...base, max_completion_tokens: 3 })).usage.completion_tokens];
const st = await client.chat.completions.create({ ...base, max_tokens: 3, stream: true,
                                                   stream_options: { include_usage: true } });
let last = null, n = 0;
for await (const ch of st) { last = ch; n++; }
out.usage = [n, last.choices.length, last.usage?.completion_tokens ?? null];
out.models = (await client.models.list()).data.map((m) => [m.id, m.object, typeof m.created, m.owned_by]);
out.model = (await client.models.retrieve("m")).id;
try { await client.models.retrieve("nope"); out.nope = "found"; }
catch (e) { out.nope = [e.constructor.name, e.status, e.code ?? null]; }
// an assistant's refusal, as a field or a content part: rendered as that text (the next request
// of the same rendering finds all its prompt in the cache)
const R = "I can't help with that.";
out.refusal = [];
for (const a of [{ content: R }, { content: null, refusal: R }, { content: [{ type: "refusal", refusal: R }] },
                 { content: "" }, { content: [{ type: "text", text: "No. " }, { type: "text", text: R }] },
                 { content: "No. ", refusal: R }, { content: [{ type: "text", text: "No. " }, { type: "refusal", refusal: R }] }]) {
  try {
    const r = await client.chat.completions.create({ ...base, max_tokens: 1, messages: [
      { role: "user", content: "hack it" }, { role: "assistant", ...a }, { role: "user", content: "ok" }] });
    out.refusal.push([r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens]);
  } catch (e) { out.refusal.push([e.status, e.message]); }
}
// X-Request-Id, which the SDK shows as request_id and an error's requestID: the answer's id, or
// the refused request's (its number is the log's "#N")
const wr = await client.chat.completions.create({ ...base, max_tokens: 1 }).withResponse();
const ws = await client.chat.completions.create({ ...base, max_tokens: 1, stream: true }).withResponse();
let sid = null;
for await (const ch of ws.data) sid = ch.id;
out.reqid = [wr.request_id ?? null, wr.data.id, ws.request_id ?? null, sid];
try { await client.chat.completions.create({ ...base, temperature: 3 }); }
catch (e) { out.reqid.push(e.requestID ?? null); }
for (const stream of [false, true]) {
  try {
    await client.chat.completions.create({ ...base, messages: [{ role: "user", content: "wo rd ".repeat(3000) }], stream });
    out["ctx_" + stream] = "answered";
  } catch (e) { out["ctx_" + stream] = [e.constructor.name, e.status, e.param ?? null, e.code ?? null, /holds 2048/.test(e.message)]; }
}
"""
        res = serve_lib.run_sdk(body, ["http://127.0.0.1:%d/v1" % PORT], cache, env, 300, T, "walk.cjs", cwd=cache)
        good = {k: v for k, v in res.get("ok", {}).items() if v[:2] == ["chat.completion", 1]}
        ok(res.get("ok") and len(good) == len(res["ok"]),
           "OpenAI SDK: n 1, stop (string, array), logprobs false and true, temperature 2, top_p 0, penalties 0 "
           "and in range, an empty logit_bias and one entry, response_format text, tool_choice none, parallel_tool_calls, user, metadata with store, "
           "reasoning_effort low, service_tier, prompt_cache_key are answered (failed: %r)"
           % {k: v for k, v in res.get("ok", {}).items() if k not in good})
        want = {"n17": "n", "top_logprobs": "top_logprobs", "top_logprobs_21": "top_logprobs",
                "temperature_3": "temperature", "top_p_2": "top_p", "presence_penalty": "presence_penalty",
                "frequency_penalty": "frequency_penalty", "logit_bias": "logit_bias.1", "reasoning_effort_medium": "reasoning_effort",
                "tool_choice_required": "tool_choice", "functions": "functions", "function_call": "function_call",
                "audio": "modalities[1]", "web_search_options": "web_search_options", "verbosity": "verbosity",
                "service_tier": "service_tier", "unknown": "max_token", "both_max": None}
        err = res.get("err", {})
        bad = {k: err.get(k) for k, p in want.items()
               if not (isinstance(err.get(k), list) and err[k][:3] == ["BadRequestError", 400, p])}
        ok(err and not bad, "OpenAI SDK: each refused parameter raises BadRequestError 400 with its .param (wrong: %r)"
           % bad)
        ok(isinstance(err.get("unknown"), list) and err["unknown"][3] == "unknown_parameter" and
           isinstance(err.get("functions"), list) and err["functions"][3] == "unsupported_parameter",
           "OpenAI SDK: .code unknown_parameter for max_token, unsupported_parameter for functions (%r, %r)"
           % (err.get("unknown"), err.get("functions")))
        sd = res.get("seed", [])
        ok(len(sd) == 2 and sd[0] == sd[1] and sd[0] != "|", "OpenAI SDK: the same seed at temperature 1 gives the "
           "same answer (%r)" % sd)
        ok(res.get("max") == [2, 3], "OpenAI SDK: max_tokens 2 and max_completion_tokens 3 bound the answer (%r)"
           % res.get("max"))
        u = res.get("usage", [])
        ok(len(u) == 3 and u[1] == 0 and u[2] == 3, "OpenAI SDK: stream_options.include_usage ends the stream with a "
           "chunk without choices carrying usage (%r)" % u)
        ok(res.get("models") == [["m", "model", "number", "k3chat"]] and res.get("model") == "m",
           "OpenAI SDK: models.list and models.retrieve (%r)" % res.get("models"))
        ok(res.get("nope") == ["NotFoundError", 404, "model_not_found"], "OpenAI SDK: an unknown model -> "
           "NotFoundError 404 model_not_found (%r)" % res.get("nope"))
        rf = res.get("refusal", [])
        ok(len(rf) == 7 and rf[1] == rf[2] == [rf[0][0]] * 2 and 0 < rf[3][0] < rf[0][0] and
           rf[5] == rf[6] == [rf[4][0]] * 2,
           "OpenAI SDK: an assistant's refusal field and refusal part render as that text written as content, "
           "after the content's parts ([prompt, cached] tokens: %r)" % rf)
        ri = res.get("reqid", [])
        m = re.match(r"chatcmpl-k3-[0-9a-f]{16}-(\d+)$", ri[4] or "") if len(ri) == 5 else None
        ok(m and ri[0] == ri[1] and ri[2] == ri[3] and ri[0] != ri[2] and
           re.search(r"#%s 400: temperature" % m.group(1), serve_lib.read_text(LOG)),
           "OpenAI SDK: request_id (X-Request-Id) is the answer's id, streamed or not, and a 400's requestID "
           "carries the number of its log line (%r)" % ri)
        ctx = ["BadRequestError", 400, "messages", "context_length_exceeded", True]
        ok(res.get("ctx_false") == ctx and res.get("ctx_true") == ctx, "OpenAI SDK: a prompt over the context raises "
           "BadRequestError with .param messages, .code context_length_exceeded, the context's size in the message, "
           "streamed or not (%r, %r)" % (res.get("ctx_false"), res.get("ctx_true")))
    serve_lib.sanitizer_clean(T)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
