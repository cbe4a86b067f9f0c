# t-serve-format.py: response_format through `k3chat models/k3-nano --serve` end to end: a
# json_schema (strict) answer at temperature 1 over several seeds, streamed and not, validates
# against its schema (checked here by hand, field by field); json_object gives one JSON object;
# an unsupported keyword, a schema no document satisfies and a malformed response_format are
# 400s naming the field; text changes nothing; tool_choice required and named and
# parallel_tool_calls false give calls that follow the tools' parameters. Thinking is off (k3-nano seldom opens its
# response channel after thinking, and reasoning is never masked). The server runs on
# 127.0.0.1 with a kernel-picked port and is always killed; every wait is bounded.
import http.client
import json
import os
import re
import subprocess

import serve_lib
from serve_lib import wait_for

B, T, K3, ASAN, env = serve_lib.setup()
fails = 0


def ok(cond, desc):
    global fails
    fails += not serve_lib.ok(cond, desc)


M = os.path.join(os.environ["K3_SRC"], "models", "k3-nano")
LOG = os.path.join(T, "serve.log")
env.pop("K3_BITS", None)
srv = subprocess.Popen([K3, M, "--serve", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(LOG, "w"), env=env)


def log_text():
    with open(LOG, errors="replace") as f:
        return f.read()


def post(body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    c.close()
    if r.getheader("Content-Type", "").startswith("text/event-stream"):
        text = ""
        for block in data.split("\n\n"):
            block = block.strip("\n")
            if block.startswith("data: ") and block[6:] != "[DONE]":
                for ch in json.loads(block[6:]).get("choices", []):
                    text += ch.get("delta", {}).get("content") or ""
        return r.status, text
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


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
    ok(wait_for(lambda: "serving" in log_text() or srv.poll() is not None, 60), "the server starts on k3-nano")
    port = re.search(r"http://127\.0\.0\.1:(\d+)/v1", log_text())
    if port is None:
        print("FAIL: no address in the log: " + log_text()[-300:])
        raise SystemExit(1)
    PORT = int(port.group(1))
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
    code, o = ask({"type": "json_object"}, 12)
    try:
        ok(code == 200 and isinstance(json.loads(o["choices"][0]["message"]["content"]), dict),
           "json_object: the answer is one JSON object")
    except (ValueError, TypeError, KeyError):
        ok(False, "json_object: %s" % str(o)[:200])
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
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        data = c.getresponse().read().decode()
        c.close()
        acc, finish = {}, None
        for block in data.split("\n\n"):
            block = block.strip("\n")
            if not block.startswith("data: ") or block[6:] == "[DONE]":
                continue
            for ch in json.loads(block[6:]).get("choices", []):
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
finally:
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
raise SystemExit(1 if fails else 0)
