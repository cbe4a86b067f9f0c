# serve-attack.py: a normal client's latency against `k3chat --serve` while it is attacked, and
# the server's CPU per attack byte (BENCHMARKS.md, "The server under attack"). Loopback only.
#
#   python3 bench/serve-attack.py BUILD [OTHER_BUILD]
#
# For each build (alternating, ROUNDS rounds: the machine is shared, so each figure has its
# reference from the same minutes), on a generated tiny checkpoint, a keyed server and, one at
# a time: idle; a trickled head (32 connections from one address sending a 16 kB head one byte
# per segment, TCP_NODELAY); slow bodies (66 POSTs with Content-Length 100000 from 19 addresses,
# a byte every 2 s); a slowloris (200 connections trickling a head, a byte every 2 s); a burst
# (70 connections from one address opened at once, then their requests). During each, a normal
# client sends GET /health every 50 ms for ATTACK_SECS: its latency median and p99 (a failed or
# refused request counts as the attack's length), and the server's CPU seconds (utime + stime)
# per attack byte sent. Then the peak RSS growth per 8 MB body, 4 bodies at once.
#
# KEYLESS=1 runs the server without an API key (what anyone who reaches it may do then) and adds the
# attacks a key would stop at the head: idle connections (200 from 20 addresses that send nothing),
# a header flood (heads of 20,000 one-byte headers, over and over), a 2 GB body announced (each
# answered 413 from the head), smuggling (Content-Length with Transfer-Encoding: chunked, 400) and
# pipelining (a request followed by 50 more in the same write, one answer); each of these also
# reports CPU microseconds per attacking connection.
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from serve_lib import exchange, final, req  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "2"))
ATTACK_SECS = float(os.environ.get("ATTACK_SECS", "6"))
KEYLESS = os.environ.get("KEYLESS") == "1"
KEY = None if KEYLESS else "bench-key"


def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rpartition(")")[2].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def server(build, model, log):
    env = dict(os.environ, OMP_NUM_THREADS="1", K3_BITS="4", K3_MAXT="2048")
    env.pop("K3_API_KEY", None)
    if KEY:
        env["K3_API_KEY"] = KEY
    p = subprocess.Popen([os.path.join(build, "k3chat"), model, "--serve", "127.0.0.1:0"],
                         stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env)
    for _ in range(600):
        with open(log, "rb") as f:
            t = f.read()
        if b"serving" in t:
            return p, int(t.split(b"http://127.0.0.1:")[1].split(b"/")[0])
        time.sleep(0.1)
    p.kill()
    raise SystemExit("the server did not start: " + t.decode()[-300:])


def trickle(port, stop, sent, n=32, size=16000):
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + "p" * size).encode()[:size]
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.5", 0))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    k = 0
    while not stop.is_set() and k < size:
        for s in socks:
            try:
                sent[0] += s.send(head[k:k + 1])
            except OSError:
                pass
        k += 1
    for s in socks:
        s.close()


def slow(port, stop, sent, srcs, head_only, every=2.0):
    socks = []
    for src in srcs:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(src, 0))
            body = b"x" * 100000
            h = req("POST", "/v1/chat/completions", body, key=KEY)[:-len(body)]
            h = h[:10] if head_only else h
            s.sendall(h)
            sent[0] += len(h)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            pass
    while not stop.wait(every):
        for s in socks:
            try:
                sent[0] += s.send(b" ")
            except OSError:
                pass
    for s in socks:
        s.close()


def burst(port, stop, sent):
    while not stop.is_set():
        socks = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.6", 0)) for _ in range(70)]
        for s in socks:
            r = req("GET", "/health", key=KEY)
            s.sendall(r)
            sent[0] += len(r)
        for s in socks:
            s.settimeout(10)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
            s.close()


def idle(port, stop, sent, n=200):
    """Connections that send nothing (a keep-alive pool left open): each waits for its 408."""
    socks = []
    while not stop.is_set():
        for i in range(n - len(socks)):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5,
                                                      source_address=("127.0.0.%d" % (60 + i % 20), 0)))
                sent[1] += 1
            except OSError:
                pass
        stop.wait(1)
        live = []
        for s in socks:  # the closed ones (answered 408 or 503) are replaced
            s.setblocking(False)
            try:
                gone = s.recv(65536) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            (s.close() if gone else live.append(s))
        socks = live
    for s in socks:
        s.close()


def one_shot(data, src):
    """An attack of connections that each send data whole and read the answer, from src."""
    def run(port, stop, sent):
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(src, 0)) as s:
                    s.sendall(data)
                    sent[0] += len(data)
                    sent[1] += 1
                    s.shutdown(socket.SHUT_WR)
                    while s.recv(65536):
                        pass
            except OSError:
                pass
    return run


FLOOD = req("GET", "/health", key=KEY, headers=["a:b"] * 20000)
BIG = req("POST", "/v1/chat/completions", key=KEY)[:-len(b"Content-Length: 0\r\n\r\n")] + \
    b"Content-Length: 2000000000\r\n\r\n" + b"x" * 1000
SMUGGLE = req("POST", "/v1/chat/completions", b"0\r\n\r\n", key=KEY, headers=["Transfer-Encoding: chunked"]) + \
    req("GET", "/v1/models", key=KEY)
PIPE = req("GET", "/health", key=KEY) * 51

ATTACKS = [
    ("idle", None),
    ("trickled head", trickle),
    ("slow bodies", lambda p, st, se: slow(p, st, se, ["127.0.0.%d" % (20 + i % 19) for i in range(66)], False)),
    ("slowloris", lambda p, st, se: slow(p, st, se, ["127.0.0.%d" % (40 + i % 10) for i in range(200)], True)),
    ("burst", burst),
] + ([
    ("idle conns", idle),
    ("header flood", one_shot(FLOOD, "127.0.0.7")),
    ("2 GB body", one_shot(BIG, "127.0.0.8")),
    ("smuggling", one_shot(SMUGGLE, "127.0.0.9")),
    ("pipelining", one_shot(PIPE, "127.0.0.10")),
] if KEYLESS else [])


def measure(pid, port, attack):
    stop, sent = threading.Event(), [0, 0]  # bytes, connections
    th = threading.Thread(target=attack, args=(port, stop, sent)) if attack else None
    c0 = cpu(pid)
    if th:
        th.start()
        time.sleep(0.5)
    lat, t_end = [], time.time() + ATTACK_SECS
    while time.time() < t_end:
        t0 = time.time()
        st = final(exchange(port, req("GET", "/health", key=KEY), timeout=ATTACK_SECS)[0])[0]
        lat.append(time.time() - t0 if st == 200 else ATTACK_SECS)
        time.sleep(0.05)
    stop.set()
    if th:
        th.join(30)
    c1 = cpu(pid)
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return (statistics.median(lat) * 1e3, p99 * 1e3, (c1 - c0) / sent[0] * 1e6 if sent[0] else 0.0, sent[0],
            (c1 - c0) / sent[1] * 1e6 if sent[1] else 0.0, sent[1])


def hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(ln for ln in f if ln.startswith("VmHWM:")).split()[1])


def body_memory(pid, port, n=4):
    """Peak RSS growth (MB) per 8 MB body, n at once: each a valid message of 8 MB whose max_tokens (0)
    makes it a 400 once read and parsed."""
    body = b'{"messages":[{"role":"user","content":"' + b"a" * ((8 << 20) - 100) + b'"}],"max_tokens":0}'
    h0 = hwm_kb(pid)
    th = [threading.Thread(target=exchange, args=(port, req("POST", "/v1/chat/completions", body, key=KEY)),
                           kwargs={"timeout": 60}) for _ in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join(90)
    return (hwm_kb(pid) - h0) / 1024 / n


def main():
    builds = sys.argv[1:]
    tmp = os.environ.get("TMPDIR", "/tmp") + "/serve-attack-bench"
    os.makedirs(tmp, exist_ok=True)
    model = os.path.join(tmp, "m")
    if not os.path.exists(model):
        subprocess.run([os.path.join(builds[0], "k3-mkmodel"), "--preset", "tiny", "--seed", "1", "--quiet", model],
                       check=True)
    res, mem = {}, {}
    for rnd in range(ROUNDS):
        for b in builds:
            p, port = server(b, model, os.path.join(tmp, "log"))
            try:
                for name, attack in ATTACKS:
                    res.setdefault((b, name), []).append(measure(p.pid, port, attack))
                mem.setdefault(b, []).append(body_memory(p.pid, port))
            finally:
                p.kill()
                p.wait()
    print("load average: %s" % open("/proc/loadavg").read().split()[:3])
    print("server: %s" % ("no API key (KEYLESS=1)" if KEYLESS else "an API key"))
    print("%-40s %-14s %10s %10s %14s %10s %14s %8s" % ("build", "attack", "median ms", "p99 ms", "CPU us/byte",
                                                       "bytes", "CPU us/conn", "conns"))
    for (b, name), v in res.items():
        print("%-40s %-14s %10.1f %10.1f %14.2f %10d %14.0f %8d" % (
            b[-40:], name, statistics.median(x[0] for x in v), max(x[1] for x in v),
            statistics.median(x[2] for x in v), statistics.median(x[3] for x in v),
            statistics.median(x[4] for x in v), statistics.median(x[5] for x in v)))
    for b, v in mem.items():
        print("%-40s peak RSS growth per 8 MB body (4 at once): %s MB" % (b[-40:], ["%.1f" % x for x in v]))


if __name__ == "__main__":
    main()
