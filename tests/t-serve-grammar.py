# t-serve-grammar.py: the server's budget for the requests' grammars (K3_SERVE_GRAMMAR_MB). A
# --parallel 1 server with a budget of 64 MB, its slot held by a scripted stream (40,000 words,
# no end of message); eight requests whose json_schema compiles to ~45 MB each arrive behind it:
# one waits, the seven others get 503 grammar_budget naming the figures and the setting (before,
# all eight waited, each holding its grammar: ~360 MB), and the server's RSS stays within the
# budget plus a margin (its peak); a schema whose grammar alone passes the budget is a 400
# grammar_too_large once it is alone (503 grammar_budget beside the queued one: its compile stops at
# what that one leaves); two small-schema requests wait too. Once the stream's client leaves, the
# waiting ones get their answers (scripted: "{}"), and with the grammars freed a large one is
# answered again. Then a running answer whose grammar grows past a budget of 1 MB is cancelled
# (503 grammar_budget); four compiles at once under a budget of 16 MB stop at it, the server's
# peak RSS within the budget plus a margin, and with the variable unset the budget is derived from the machine's
# memory or the process's cgroup limit (faked by K3_TEST_CGROUP), the smaller. The servers run on 127.0.0.1 with a kernel-picked port and are always killed; every
# wait is bounded.
import json
import os
import re
import threading

import serve_lib
from serve_lib import ok, wait_for

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")
BUDGET = 64
HOLD = "la " * 40000
ANSWER = "<|open|>response<|sep|>{}<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
SCRIPT = os.path.join(T, "script.txt")
with open(SCRIPT, "w") as f:
    f.write(HOLD + "\n---\n" + ANSWER + "\n")


def strings(n):
    """A schema of n optional strings of maxLength 4000 (each written out: ~9 MB of grammar)."""
    return {"type": "object", "properties": {"p%d" % i: {"type": "string", "maxLength": 4000} for i in range(n)}}


def body(text, schema=None, stream=False, max_tokens=8):
    b = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "stream": stream}
    if schema:
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    return b


def answer(r):
    return r[1]["choices"][0]["message"]["content"] if r[0] == 200 and isinstance(r[1], dict) else None


def err(r):
    return r[1].get("error", {}) if isinstance(r[1], dict) else {}


procs = []
try:
    srv, port, log = serve_lib.start_server(K3, M, T, env, procs, "budget", ["--serve", "127.0.0.1:0", "--parallel", "1"],
                                            K3_SERVE_GRAMMAR_MB=str(BUDGET), K3_SERVE_SCRIPT=SCRIPT,
                                            K3_MAXT="65536")
    ok(port is not None, "a --parallel 1 server with K3_SERVE_GRAMMAR_MB=%d starts" % BUDGET)
    s, first = serve_lib.open_stream(port, json.dumps(body("hold", stream=True, max_tokens=60000)))
    ok(b"data: " in first, "the holding stream has begun")
    threading.Thread(target=lambda: serve_lib.read_until_closed(s), daemon=True).start()
    rss0 = serve_lib.rss_kb(srv.pid, "VmHWM")
    res, ths = {}, []
    reqs = [("big%d" % i, body("big %d" % i, strings(5))) for i in range(8)]
    reqs += [("small%d" % i, body("small %d" % i, {"type": "object", "properties": {"n": {"type": "integer"}}}))
             for i in range(2)]
    def queued():
        return serve_lib.read_text(log).count(" queued: ")

    for name, b in reqs:  # one at a time: the next once this one is refused or logged as queued (a
        n0, q0 = len(res), queued()  # 1 s wait let compiles overlap on a loaded machine: up to 4 at once)
        ths.append(threading.Thread(target=lambda name=name, b=b: res.update({name: serve_lib.post_chat(port, b, 300)})))
        ths[-1].start()
        wait_for(lambda: len(res) > n0 or queued() > q0, 120)
    wait_for(lambda: len(res) >= 7, 120)  # the refused ones are answered at once
    rss1 = serve_lib.rss_kb(srv.pid, "VmHWM")  # the peak: before, the queued grammars were all held
    big_over = [r for k, r in res.items() if k.startswith("big")]
    ok(len(big_over) == 7 and all(r[0] == 503 and err(r).get("code") == "grammar_budget" and
                                  "K3_SERVE_GRAMMAR_MB=%d" % BUDGET in err(r).get("message", "") for r in big_over),
       "7 of 8 large schemas behind the stream get 503 grammar_budget naming K3_SERVE_GRAMMAR_MB (%s)"
       % sorted((r[0], err(r).get("code")) for r in res.values()))
    if big_over:
        print("# message: " + err(big_over[0]).get("message", ""))
    if ASAN:
        print("SKIP: server RSS under AddressSanitizer (its quarantine keeps freed memory): %d kB -> %d kB"
              % (rss0, rss1))
    else:
        ok(rss1 - rss0 < (BUDGET + 64) * 1024, "server's peak RSS within the budget + 64 MB with the large "
           "schemas queued: %d kB -> %d kB" % (rss0, rss1))
    # beside the one queued (45 MB held), a schema twice its size stops compiling at the budget:
    # 503, the server is busy (alone it would not fit either: below)
    beside = serve_lib.post_chat(port, body("beside", strings(9)), 120)
    ok(beside[0] == 503 and err(beside).get("code") == "grammar_budget" and
       "while it was compiled" in err(beside).get("message", ""),
       "a schema whose compile passes what the held grammars leave: 503 grammar_budget (%d %s)"
       % (beside[0], err(beside).get("message")))
    s.close()  # the stream's client leaves: the waiting ones run
    for t in ths:
        t.join(300)
    waited = {k: r for k, r in res.items() if answer(r) is not None}
    ok(len(waited) == 3 and all(answer(r) == "{}" for r in waited.values()) and
       sum(k.startswith("small") for k in waited) == 2,
       "the large one that waited and both small ones get their answers (%s)"
       % sorted((k, answer(r)) for k, r in waited.items()))
    again = [serve_lib.post_chat(port, body("again %d" % i, strings(5)), 120) for i in range(2)]
    ok(all(answer(r) == "{}" for r in again), "their grammars freed, large schemas are answered again (%s)"
       % [r[0] for r in again])
    alone = serve_lib.post_chat(port, body("alone", strings(9)), 120)
    ok(alone[0] == 400 and err(alone).get("code") == "grammar_too_large" and
       "K3_SERVE_GRAMMAR_MB=%d" % BUDGET in err(alone).get("message", "") and
       "while it was compiled" in err(alone).get("message", ""),
       "a schema whose grammar alone passes the budget: 400 grammar_too_large, stopped while it was compiled "
       "(%d %s)" % (alone[0], err(alone).get("message")))
    ok("503: grammar budget" in serve_lib.read_text(log), "the refusals are logged")
    ok("Sanitizer" not in serve_lib.read_text(log) and "runtime error" not in serve_lib.read_text(log),
       "no sanitizer or runtime error report")
    serve_lib.kill_all(procs)

    # Compiles are inside the budget while they run: with a budget of 16 MB, four requests at once
    # whose schemas compile to ~68 MB each (the request bodies parsed at once: SERVE_PARSING) each
    # stop where the total would pass 16 MB, refused (400 grammar_too_large, or 503 grammar_budget
    # when the others' compiles held part of it) "while it was compiled", and the server's peak RSS
    # grows by less than the budget plus 48 MB. Before, each compile ran to its end before its
    # grammar was counted: ~270 MB at once (the peak RSS grew by that), every one refused only then.
    srv, port, log = serve_lib.start_server(K3, M, T, env, procs, "compiles", ["--serve", "127.0.0.1:0"],
                                            K3_SERVE_GRAMMAR_MB="16")
    ok(port is not None, "a server with K3_SERVE_GRAMMAR_MB=16 starts")
    warm = serve_lib.post_chat(port, body("warm", {"type": "object", "properties": {"n": {"type": "integer"}}}), 120)
    rss0 = serve_lib.rss_kb(srv.pid, "VmHWM")
    res, ths = {}, []
    for i in range(4):
        ths.append(threading.Thread(target=lambda i=i: res.update({i: serve_lib.post_chat(port, body("c%d" % i, strings(9)), 300)})))
        ths[-1].start()
    for t in ths:
        t.join(300)
    rss1 = serve_lib.rss_kb(srv.pid, "VmHWM")
    ok(warm[0] == 200 and len(res) == 4 and
       all(r[0] in (400, 503) and err(r).get("code") in ("grammar_too_large", "grammar_budget") and
           "while it was compiled" in err(r).get("message", "") and "K3_SERVE_GRAMMAR_MB=16" in err(r).get("message", "")
           for r in res.values()),
       "four ~68 MB compiles at once under a 16 MB budget: each refused while it was compiled (%s)"
       % sorted((r[0], err(r).get("message")) for r in res.values()))
    took = [re.search(r"over (\d+\.\d) MB while it was compiled", err(r).get("message", "")) for r in res.values()]
    ok(all(t and 0 < float(t.group(1)) <= 17 for t in took),
       "each names what its compile took, above 0 (one stopped at its first step said 'over 0 MB') and within "
       "the budget's (%s)" % [t.group(1) if t else None for t in took])
    if ASAN:
        print("SKIP: server RSS under AddressSanitizer (its quarantine keeps freed memory): %d kB -> %d kB" % (rss0, rss1))
    else:
        ok(rss1 - rss0 < (16 + 48) * 1024, "the server's peak RSS with four large compiles at once grew by less "
           "than the budget + 48 MB: %d kB -> %d kB" % (rss0, rss1))
    serve_lib.kill_all(procs)

    # A running answer whose grammar's memory grows past the budget is cancelled: with a budget of
    # 1 MB, a string schema of the largest maxLength admitted (bisected on its 400s) leaves less
    # than one string position's bytes (~0.5 KB) of room, and the answer's first mask (its matcher,
    # token mask and cache entries, counted once the turn runs) takes more: 503 grammar_budget in
    # the answer, whatever the model samples. Fails if the cancel is removed (the answer is a 200).
    srv, port, log = serve_lib.start_server(K3, M, T, env, procs, "grow", ["--serve", "127.0.0.1:0", "--parallel", "1"],
                                            K3_SERVE_GRAMMAR_MB="1")
    ok(port is not None, "a server with K3_SERVE_GRAMMAR_MB=1 starts")

    def one(n):
        return serve_lib.post_chat(port, body("grow %d" % n, {"type": "string", "maxLength": n}, max_tokens=4), 120)

    lo, hi, last = 1, 4096, None  # lo admitted (a tiny grammar), hi refused (4,096 positions: ~2 MB)
    first, top = one(lo), one(hi)
    ok(first[0] != 400 and top[0] == 400 and err(top).get("code") == "grammar_too_large",
       "maxLength 1 is admitted (%d), 4096 is a 400 grammar_too_large (%d %s)" % (first[0], top[0], err(top).get("code")))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = one(mid)
        if r[0] == 400:
            hi = mid
        else:
            lo, last = mid, r
    last = last or first
    ok(last[0] == 503 and err(last).get("code") == "grammar_budget" and
       "while it ran" in err(last).get("message", ""),
       "maxLength %d (the largest admitted under 1 MB): cancelled as its grammar grows, 503 grammar_budget "
       "(%d %s)" % (lo, last[0], err(last).get("message")))
    ok("grammar budget:" in serve_lib.read_text(log) and "cancelled" in serve_lib.read_text(log),
       "the cancel is logged")
    serve_lib.kill_all(procs)

    # K3_SERVE_GRAMMAR_MB unset: 1/32 of the machine's memory, or of the process's cgroup limit when
    # smaller (a container's), from 64 to 4096 MB, said at the start. The cgroup files are fakes
    # (K3_TEST_CGROUP: DIR/self for /proc/self/cgroup, DIR/fs for /sys/fs/cgroup): none, then a v2
    # memory.max of 2.5 GiB on the parent of the process's cgroup (80 MB; it was physical/32)
    e2 = dict(env)
    e2.pop("K3_SERVE_GRAMMAR_MB", None)
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for name, limit in (("none", None), ("v2", 5 << 29)):
        cg = os.path.join(T, "cgroup-" + name)
        os.makedirs(os.path.join(cg, "fs", "k3", "srv"))
        with open(os.path.join(cg, "self"), "w") as f:
            f.write("0::/k3/srv\n")
        if limit:
            for fn, text in (("memory.max", str(limit)), ("memory.current", "1000")):
                with open(os.path.join(cg, "fs", "k3", fn), "w") as f:
                    f.write(text + "\n")
        srv, port, log = serve_lib.start_server(K3, M, T, dict(e2, K3_TEST_CGROUP=cg), procs, "auto-" + name,
                                                ["--serve", "127.0.0.1:0"])
        want = min(4096, max(64, int(min(phys, limit or phys) / 32 / (1 << 20))))
        line = [ln for ln in serve_lib.read_text(log).splitlines() if "K3_SERVE_GRAMMAR_MB" in ln]
        ok(port is not None and line and ("may take %d MB (K3_SERVE_GRAMMAR_MB unset" % want) in line[0],
           "K3_SERVE_GRAMMAR_MB unset, cgroup limit %s: the budget is 1/32 of the smaller of it and the machine's "
           "memory, %d MB (%s)" % (limit, want, line))
        serve_lib.kill_all(procs)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
