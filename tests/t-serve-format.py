# t-serve-format.py: response_format through `k3chat models/k3-nano --serve` end to end: a
# json_schema (strict) answer at temperature 1 over several seeds, streamed and not, validates
# against its schema (checked here by hand, field by field); json_object gives one JSON object;
# an unsupported keyword, a schema no document satisfies and a malformed response_format are
# 400s naming the field; text changes nothing. Thinking is off (k3-nano seldom opens its
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
finally:
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
raise SystemExit(1 if fails else 0)
