# t-serve-gate.py: `k3chat MODEL_DIR --serve` reads every request itself, once (issue 37), on a
# generated tiny checkpoint, loopback only:
#   - 66 slow bodies (Content-Length 100000, one byte every 5 s, from 19 addresses), a head then
#     silence, and a body byte every 20 s are open while a normal client is served; each of
#     them gets 408 at the body deadline (60 s after its head), none is closed without an answer;
#   - a trickled head (16 connections sending 8 kB heads one byte per segment): the server's CPU
#     time per head byte (its CPU clock, counted once it has read every byte sent) stays flat from
#     the first half of the heads to the second, and a normal client is served meanwhile (its
#     latency is printed; BENCHMARKS.md has the figures);
#   - a burst from one address (40 GET /health and 30 chat requests at once) gets no 503;
#   - one reading of the head: 'Content-Length: 2 ' frames a 2-byte body (one JSON answer on the
#     wire), 'Authorization: Bearer KEY ' (trailing white space) is the key;
#   - Expect: foo gets 417, Expect: 100-continue without a body gets no 100 Continue, with a body
#     the 100 comes before the body is sent;
#   - duplicate JSON keys get 400 duplicate_key; max_tokens 100.0 is taken as n 1.0 is;
#   - an answer with no visible text and a stop string (the sanitizer tree runs it: memmem(NULL));
#   - log lines escape once (a role with a newline shows as \n, not \\n);
#   - --serve [::]:PORT also takes IPv4 clients;
#   - a stream whose client never reads is cancelled once 256 kB of it waits unsent.
# Every loop and wait is bounded; every server is killed at the end.
# slow
import concurrent.futures
import ctypes
import json
import os
import socket
import statistics
import threading
import time

import serve_lib
from serve_lib import chat, exchange, final, kill_all, ok, one_json_error, read, sanitizer_clean, setup, start_server

B, T, K3, ASAN, env = setup()
M = os.path.join(T, "m")
KEY = "gate-key"
procs = []
BODY_SECS = 60  # the man page's body deadline


def req(method, path, body=b"", headers=(), key=KEY, host=True, ctype="application/json"):
    return serve_lib.req(method, path, body, headers, key, host, ctype)


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)


def cpu_seconds(pid):
    """The CPU time of the process (all its threads, user and system), in seconds: its CPU-time
    clock (clock_getcpuclockid: to the nanosecond), else utime + stime from /proc (in clock ticks:
    10 ms, a tenth of what half of the trickled heads below costs)."""
    clk, ts = ctypes.c_int(), _Timespec()
    if _libc.clock_getcpuclockid(pid, ctypes.byref(clk)) == 0 and \
            _libc.clock_gettime(clk.value, ctypes.byref(ts)) == 0:
        return ts.sec + ts.nsec * 1e-9
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rpartition(")")[2].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def unread_bytes(port, src):
    """Bytes that clients from address src sent to the server on port and that it has not read yet:
    the receive queues of its connections (/proc/net/tcp: local port, remote address, rx_queue)."""
    ip = "%08X" % int.from_bytes(socket.inet_aton(src), "little")
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            v = line.split()
            if v[1].endswith(":%04X" % port) and v[2].startswith(ip + ":"):
                n += int(v[4].split(":")[1], 16)
    return n


def caught_up(pid, port, src, secs=10):
    """Wait (at most secs) until the server has read every byte from src and its CPU time grows
    by under 2 ms in 0.2 s (idle but for the /health probe): what it spends on those bytes is all
    counted, whatever the load. (A fixed sleep of 0.3 s was too short on a loaded machine: the
    first half's work went on into the second half's count.) Whether it did."""
    t_end, last = time.time() + secs, None
    while time.time() < t_end:
        now = cpu_seconds(pid)
        if unread_bytes(port, src) == 0 and last is not None and now - last < 0.002:
            return True
        last = now
        time.sleep(0.2)
    return False


def timed_health(src="127.0.0.1"):
    t0 = time.time()
    st = final(exchange(PORT, req("GET", "/health"), src=src, timeout=20)[0])[0]
    return st, time.time() - t0


class Slow(threading.Thread):
    """Connections that send a head, then body bytes every `every` seconds (never: silence),
    reading whatever comes back; each records (seconds from its head to the answer, status)."""

    def __init__(self, srcs, length, every, first=b""):
        super().__init__()
        self.socks, self.every = [], every
        for src in srcs:
            try:
                s = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=(src, 0))
            except OSError:
                continue
            head = req("POST", "/v1/chat/completions", b"x" * length)[:-length]
            s.sendall(head + first)
            s.setblocking(False)
            self.socks.append({"s": s, "t0": time.time(), "got": b"", "t": None, "eof": False})
        self.stop = time.time() + BODY_SECS + 15

    def run(self):
        t_next = time.time() + (self.every or 1e9)
        while time.time() < self.stop and not all(x["eof"] for x in self.socks):
            for x in self.socks:
                if x["eof"]:
                    continue
                try:
                    b = x["s"].recv(4096)
                    if b:
                        x["got"] += b
                        x["t"] = x["t"] or time.time() - x["t0"]
                    else:
                        x["eof"] = True
                except BlockingIOError:
                    pass
                except OSError:
                    x["eof"] = True
                    x["t"] = x["t"] or time.time() - x["t0"]
            if time.time() >= t_next:
                t_next += self.every
                for x in self.socks:
                    try:
                        x["s"].send(b" ")
                    except OSError:
                        pass
            time.sleep(0.1)
        for x in self.socks:
            x["s"].close()

    def results(self):
        return [(x["t"], final(x["got"])[0]) for x in self.socks]


try:
    srv, PORT, LOG = start_server(K3, M, T, env, procs, "gate", key=KEY)
    ok(PORT is not None, "the server starts (port %s)" % PORT)
    if PORT is None:
        raise SystemExit(1)
    t_open = time.time()

    # ---- availability: slow bodies hold no thread; their deadline answers 408 on its own
    slow = Slow(["127.0.0.%d" % (20 + i % 19) for i in range(66)], 100000, 5, b"{")
    silent = Slow(["127.0.0.40"], 10, 0)
    sparse = Slow(["127.0.0.41"], 100, 20, b"{")
    for th in (slow, silent, sparse):
        th.start()
    time.sleep(1)
    served = [timed_health() for _ in range(3)]
    out, _ = exchange(PORT, req("POST", "/v1/chat/completions", chat(max_tokens=2)), timeout=60)
    ok(len(slow.socks) == 66 and all(s == 200 for s, _ in served) and final(out)[0] == 200,
       "66 slow bodies from 19 addresses open: a normal client is served (/health %s in %s s, a chat %d)"
       % ([s for s, _ in served], ["%.2f" % t for _, t in served], final(out)[0]))

    # ---- 10: a stream whose client never reads is cancelled once 256 kB waits unsent (a scripted
    # endless reply, so the turn outlives the check on any machine; checked at the end)
    hold = os.path.join(T, "hold.txt")
    with open(hold, "w") as f:
        f.write("la " * 40000)
    ps, sport, slog = start_server(K3, M, T, env, procs, "unread", ["--serve", "127.0.0.1:0", "--parallel", "1"],
                                   K3_SERVE_SCRIPT=hold, K3_MAXT="65536")
    unread = socket.socket()
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if sport:
        unread.connect(("127.0.0.1", sport))
        unread.sendall(req("POST", "/v1/chat/completions", chat(max_tokens=100000, stream=True), key=None))

    # ---- 6: an answer with no visible text and a stop string (ASan/UBSan: memmem(NULL))
    out, _ = exchange(PORT, req("POST", "/v1/chat/completions", chat(max_tokens=2, stop=["x"])), timeout=60)
    st, _, b = final(out)
    content = json.loads(b)["choices"][0]["message"].get("content") if st == 200 else None
    ok(st == 200 and timed_health()[0] == 200, "max_tokens 2 with stop ['x']: 200 and the server lives on "
       "(content %r)" % content)
    if content != "":
        print("SKIP: the answer had visible text (%r): the empty case was not reached" % content)

    # ---- 9: duplicate keys
    for name, body in [("stream twice", b'{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream":false}'),
                       ("max_tokens twice", b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,'
                                            b'"max_tokens":99999999999}'),
                       ("role twice inside a message", b'{"messages":[{"role":"user","role":"system","content":"hi"}]}')]:
        good, what = one_json_error(exchange(PORT, req("POST", "/v1/chat/completions", body))[0], 400)
        ok(good and what.startswith("duplicate_key") and "duplicate" in what,
           "duplicate JSON keys (%s) -> 400 duplicate_key (%s)" % (name, what[:80]))

    # a NUL in a message: a 400 in k3chat's words, not jansson's flag name
    good, what = one_json_error(exchange(PORT, req("POST", "/v1/chat/completions",
                                                   b'{"messages":[{"role":"user","content":"a\\u0000b"}]}'))[0], 400)
    ok(good and what.startswith("invalid_json") and "NUL" in what and "column" in what and "ALLOW" not in what,
       "a \\u0000 in a message -> 400 invalid_json naming the NUL and where (%s)" % what[:100])

    # ---- 10: max_tokens 100.0 is taken as n 1.0 is
    for name, kw in [("max_tokens 100.0", dict(max_tokens=100.0)), ("n 1.0", dict(n=1.0, max_tokens=2))]:
        st = final(exchange(PORT, req("POST", "/v1/chat/completions", chat(reasoning_effort="none", **kw)),
                            timeout=60)[0])[0]
        ok(st == 200, "%s -> 200 (%d)" % (name, st))
    good, what = one_json_error(exchange(PORT, req("POST", "/v1/chat/completions", chat(max_tokens=2.5)))[0], 400)
    ok(good and "max_tokens" in what, "max_tokens 2.5 -> 400 naming it (%s)" % what[:80])

    # ---- 5: one reading of the head
    hdr = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n" \
          "Content-Type: application/json\r\n" % KEY
    for name, cl in [("'Content-Length: 2 '", "Content-Length: 2 "), ("'Content-Length: 2<tab>'", "Content-Length: 2\t")]:
        out, how = exchange(PORT, (hdr + cl + "\r\n\r\n{}").encode())
        good, what = one_json_error(out, 400)
        ok(good and "messages" in what and how == "eof",
           "%s frames the 2-byte body {}: one JSON 400 about the missing messages (%s, %s)" % (name, how, what[:70]))
    for name, auth in [("a trailing space", KEY + " "), ("a trailing tab", KEY + "\t")]:
        out, _ = exchange(PORT, ("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
                                 % auth).encode())
        ok(final(out)[0] == 200, "Authorization: Bearer KEY with %s is the key (%d)" % (name, final(out)[0]))

    # ---- 10: Expect
    good, what = one_json_error(exchange(PORT, req("POST", "/v1/chat/completions", chat(max_tokens=1),
                                                   headers=["Expect: foo"]))[0], 417)
    ok(good, "Expect: foo -> one JSON 417 (%s)" % what[:60])
    out, _ = exchange(PORT, req("GET", "/health", headers=["Expect: 100-continue"]))
    ok(final(out)[0] == 200 and b"100 Continue" not in out,
       "Expect: 100-continue without a body: 200 and no 100 Continue (%r)" % out[:40])
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    body = chat(max_tokens=1, reasoning_effort="none")
    r = req("POST", "/v1/chat/completions", body, headers=["Expect: 100-continue"])
    s.sendall(r[:-len(body)])
    first = s.recv(4096)
    s.sendall(body)
    out = first + serve_lib.read_rest(s, 30)
    ok(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n") and final(out)[0] == 200,
       "Expect: 100-continue with a body: 100 Continue first, then the answer (%r)" % first[:30])

    # ---- log lines escape once
    forged = "a\nb"
    exchange(PORT, req("POST", "/v1/chat/completions", chat(messages=[{"role": forged, "content": "x"}])))
    time.sleep(0.3)
    lg = read(LOG)
    ok(b"a\\nb" in lg and b"a\\\\nb" not in lg, "log: a role 'a<LF>b' shows as a\\nb, escaped once (%r)"
       % [ln for ln in lg.split(b"\n") if b"a\\" in ln][-1:])

    # ---- 3: a burst from one address: no 503 while there is room
    burst = []
    for i in range(70):  # every connection open first, then every request sent, then every answer read
        s = socket.create_connection(("127.0.0.1", PORT), timeout=120, source_address=("127.0.0.6", 0))
        burst.append(s)
    for i, s in enumerate(burst):
        s.sendall(req("GET", "/health") if i < 40 else
                  req("POST", "/v1/chat/completions", chat(max_tokens=1, reasoning_effort="none")))
    with concurrent.futures.ThreadPoolExecutor(70) as ex:
        codes = list(ex.map(lambda s: final(serve_lib.read_rest(s, 120))[0], burst))
    ok(codes.count(200) == 70, "a burst from one address (70 connections open, then 40 GET /health and 30 chat "
       "requests sent): all 200, no 503 (%s)" % {c: codes.count(c) for c in set(codes)})

    # ---- 1: a trickled head costs the same CPU per byte all along; a normal client is served
    N, L = 16, 8000
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + "p" * L).encode()[:L]
    settled = [caught_up(srv.pid, PORT, "127.0.0.5")]  # the burst's work is done
    socks = []
    for _ in range(N):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5, source_address=("127.0.0.5", 0))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    lat, stop_probe = [], threading.Event()

    def probe():
        while not stop_probe.is_set():
            lat.append(timed_health())
            time.sleep(0.2)

    pt = threading.Thread(target=probe)
    pt.start()
    cpu, sent = [cpu_seconds(srv.pid)], 0
    t_end = time.time() + 8  # within the 10 s head deadline
    t_send = time.time()
    for half in range(2):
        for k in range(half * L // 2, (half + 1) * L // 2):
            if time.time() > t_end:
                break
            for s in socks:
                s.send(head[k:k + 1])
            sent += N
        settled.append(caught_up(srv.pid, PORT, "127.0.0.5"))  # this half's CPU is all in
        cpu.append(cpu_seconds(srv.pid))
    t_send = time.time() - t_send
    stop_probe.set()
    pt.join(30)
    for s in socks:
        s.close()
    per = [(cpu[i + 1] - cpu[i]) / (sent / 2) * 1e6 for i in range(2)]
    ok(sent == N * L and all(settled) and per[1] < 1.5 * per[0] + 1,
       "a trickled head (%d x %d bytes, one per segment, %.1f s): server CPU %.2f us per byte in the first half, "
       "%.2f in the second (flat: no re-scan; the server caught up before each count: %s)"
       % (N, L, t_send, per[0], per[1], settled))
    lt = sorted(t for _, t in lat)
    ok(lat and all(st == 200 for st, _ in lat), "a normal client during it: %d x 200, latency median %.3f s, "
       "max %.3f s (load %s)" % (len(lat), statistics.median(lt) if lt else 0, lt[-1] if lt else 0,
                                 open("/proc/loadavg").read().split()[0]))

    # ---- 8: --serve [::]:PORT takes IPv4 clients too
    try:
        socket.socket(socket.AF_INET6).bind(("::", 0))
        have6 = True
    except OSError:
        have6 = False
    if have6:
        p6, port6, _ = start_server(K3, M, T, env, procs, "v6", ["--serve", "[::]:0"])
        st = final(exchange(port6, req("GET", "/health", key=None))[0])[0] if port6 else 0
        ok(st == 200, "--serve [::]:0 answers an IPv4 client on 127.0.0.1 (%d)" % st)
        p6.kill()
        p6.wait()
    else:
        print("SKIP: no IPv6 on this machine")

    # ---- 2 and 4: the body deadline answers every slow body with 408 at 60 s after its head
    for th in (slow, silent, sparse):
        th.join(BODY_SECS + 20 - (time.time() - t_open))
    res = slow.results()
    on_time = [t for t, st in res if st == 408 and t is not None and BODY_SECS - 1 <= t <= BODY_SECS + 3]
    ok(len(on_time) == 66, "66 slow bodies: each answered 408 %d..%d s after its head (%d of %d; statuses %s)"
       % (BODY_SECS - 1, BODY_SECS + 3, len(on_time), len(res), sorted(set(st for _, st in res))))
    for name, th in [("a head then silence", silent), ("a body byte every 20 s", sparse)]:
        t, st = th.results()[0]
        ok(st == 408 and t is not None and BODY_SECS - 1 <= t <= BODY_SECS + 3,
           "%s: 408 at %s s (the deadline is %d s)" % (name, "%.1f" % t if t else None, BODY_SECS))

    if sport:
        seen = serve_lib.wait_for(lambda: b"reads its stream too slowly" in read(slog), 90 if ASAN else 30)
        st = final(exchange(sport, req("GET", "/health", key=None))[0])[0]
        ok(seen and st == 200, "a stream whose client never reads: cancelled with 256 kB unsent, the server "
           "answers others (%r, /health %d)" % ([ln for ln in read(slog).split(b"\n") if b"slowly" in ln][:1], st))
    else:
        ok(False, "the scripted server starts")
    unread.close()
    ps.kill()
    ps.wait()

    sanitizer_clean(T)
finally:
    kill_all(procs)
