# t-serve-nan.py: one choice of a streamed request of n 2 fails mid-answer (its hidden state turns
# NaN: K3_TEST_NAN_TOKEN poisons the id of "Q", which only choice 1's scripted reply holds, so it
# fails when that token is fed back, after both choices streamed text). Checked, in both build
# trees (the sanitizer one for what the failure path frees): the stream is a 200 whose chunks of
# both choices come first, then one error event (engine_error naming the NaN and its layer) and
# [DONE], with no finish_reason for the choice that was cut; choice 0, which never ends on its own
# (40,000 words), is cancelled for it (logged), and both slots then answer a request of n 2 (none
# leaked); at SIGTERM the server exits 0 with no sanitizer report (LeakSanitizer runs at exit).
# The server runs on 127.0.0.1 with a kernel-picked port and is always killed; every wait is
# bounded, and no check depends on the machine's speed.
import json
import os
import subprocess

import serve_lib
from serve_lib import ok, wait_for

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")


def ids(text):
    path = os.path.join(T, "tok.txt")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([K3, "--tokenize", M, path], capture_output=True, timeout=60, env=env)
    return [int(x) for x in r.stdout.split()]


HOLD = "la " * 40000
FAIL = "la la la la la la Q la la la"
DONE = "fine<|end_of_msg|>"
poison = ids("Q")
ok(len(poison) == 1 and poison[0] in ids(FAIL) and poison[0] not in ids(HOLD[:300]) and
   poison[0] not in ids(DONE + "hello"), "\"Q\" is one token (%s), in the failing reply alone" % poison)
SCRIPT = os.path.join(T, "script.txt")
with open(SCRIPT, "w") as f:  # turns in the order they begin: choice 0, choice 1, then the last repeats
    f.write(HOLD + "\n---\n" + FAIL + "\n---\n" + DONE + "\n")


def body(n, stream, tokens=60000):
    return {"messages": [{"role": "user", "content": "hello"}], "n": n, "stream": stream, "max_tokens": tokens,
            "reasoning_effort": "none"}


procs = []
try:
    srv, port, log = serve_lib.start_server(K3, M, T, env, procs, "nan", ["--serve", "127.0.0.1:0", "--parallel", "2"],
                                            K3_SERVE_SCRIPT=SCRIPT, K3_TEST_NAN_TOKEN=str(poison[0]),
                                            K3_MAXT="65536", K3_SERVE_QUEUE_SECS="300")
    ok(port is not None, "a --parallel 2 server with K3_TEST_NAN_TOKEN starts")
    st, text, streamed = serve_lib.post_chat(port, body(2, True), 300)
    ev = serve_lib.sse_events(text.encode()) if streamed else []
    chunks = [e for e in ev if isinstance(e, dict) and "choices" in e]
    errs = [e for e in ev if isinstance(e, dict) and "error" in e]
    said = {c["choices"][0]["index"] for c in chunks if c["choices"][0]["delta"].get("content")}
    first_err = ev.index(errs[0]) if errs else -1
    ok(st == 200 and streamed and said == {0, 1} and all(ev.index(c) < first_err for c in chunks),
       "the stream is a 200 whose text of both choices comes before the failure (choices with text %s)" % sorted(said))
    e = errs[0]["error"] if len(errs) == 1 else {}
    ok(len(errs) == 1 and e.get("code") == "engine_error" and e.get("type") == "server_error" and
       "NaN" in e.get("message", "") and "layer" in e.get("message", ""),
       "it ends with one error event: engine_error naming the NaN and its layer (%s)" % json.dumps(errs)[:300])
    ok(ev[-1:] == ["[DONE]"] and not any(c["choices"][0].get("finish_reason") for c in chunks),
       "then [DONE], and no choice reports a finish of its own (%s)"
       % [c["choices"][0].get("finish_reason") for c in chunks if c["choices"][0].get("finish_reason")])
    ok(wait_for(lambda: "another choice of the request failed" in serve_lib.read_text(log), 30),
       "the other choice is cancelled for it (log: %r)" % serve_lib.read_text(log)[-400:])
    st2, o2, _ = serve_lib.post_chat(port, body(2, False, 8), 120)
    texts = [c["message"]["content"] for c in o2.get("choices", [])] if isinstance(o2, dict) else []
    ok(st2 == 200 and texts == ["fine", "fine"], "both slots then answer a request of n 2 (%d %s)" % (st2, texts))
    serve_lib.stop(srv, 60)
    ok(srv.returncode == 0, "SIGTERM: the server exits 0 (%s)" % srv.returncode)
    serve_lib.sanitizer_clean(T)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
