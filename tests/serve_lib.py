# serve_lib.py: helpers shared by the server and --endpoint tests (t-serve*.py, chat_fake.py): one
# assertion line per check in tests/run.sh's protocol, a bounded wait, starting and stopping a
# `k3chat --serve`, raw HTTP, the OpenAI SDK for JavaScript, and the pieces of a fake
# OpenAI-compatible server (FakeHandler, sse, start_fake).
import fcntl
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time

FAILS = 0  # FAIL lines printed by ok() so far


def ok(cond, desc):
    """Print PASS: or FAIL: desc (run.sh counts the lines); counted in FAILS."""
    global FAILS
    FAILS += not cond
    print(("PASS: " if cond else "FAIL: ") + desc, flush=True)
    return bool(cond)


def status():
    """The exit status of a test whose checks all went through ok(): 1 after any FAIL."""
    return 1 if FAILS else 0


def wait_for(pred, secs):
    """Poll pred every 50 ms for at most secs seconds; its last value."""
    t = time.time() + secs
    while time.time() < t:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def setup():
    """The server tests' setting: (build dir, scratch dir, k3chat, under ASan, environment) with
    a generated tiny checkpoint in SCRATCH/m (made here; FAIL and exit when that fails).
    K3_BITS=4 pins the numerics (the fit would choose the bits by the machine's memory otherwise);
    t-serve-batch's disconnect case relies on greedy "greetings" running past 1,500 tokens under them
    and checks that premise itself. Checks that need a turn to outlive some event on any machine
    script its reply instead (K3_SERVE_SCRIPT)."""
    b, t = os.environ["K3_BUILD"], os.environ["K3_TMP"]
    env = dict(os.environ, OMP_NUM_THREADS="1", K3_MAXT="2048", K3_BITS="4", HOME=t, XDG_DATA_HOME=t,
               XDG_STATE_HOME=t)
    env.pop("K3_API_KEY", None)
    r = subprocess.run([os.path.join(b, "k3-mkmodel"), "--preset", "tiny", "--seed", "1", "--quiet",
                        os.path.join(t, "m")], capture_output=True, timeout=60)
    if r.returncode:
        print("FAIL: k3-mkmodel --preset tiny: " + r.stderr.decode()[-200:])
        raise SystemExit(1)
    return b, t, os.path.join(b, "k3chat"), "asan" in os.path.basename(b), env


def read(path):
    with open(path, "rb") as f:
        return f.read()


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def launch(k3, model, log, env, args=("--serve", "127.0.0.1:0")):
    """`k3 MODEL ARGS` with its stderr in the file log (made afresh) and stdout discarded."""
    return subprocess.Popen([k3, model] + list(args), stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env)


def await_port(p, log, secs=60):
    """Wait at most secs for the server p to log that it is serving, or to exit: (whether it did
    either in time, its port from the log or None)."""
    up = wait_for(lambda: b"serving" in read(log) or p.poll() is not None, secs)
    m = re.search(rb"http://(?:127\.0\.0\.1|\[[0-9a-f:]+\]):(\d+)/v1", read(log))
    return up, (int(m.group(1)) if m else None)


def stop(p, secs=30):
    """SIGTERM, then SIGKILL when p has not exited after secs."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=secs)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def start_server(k3, model, tmp, env, procs, name, extra=(), key=None, wait=True, **more_env):
    """A server on 127.0.0.1:0 (or extra's address), added to procs: (process, port, log path)."""
    log = os.path.join(tmp, name + ".log")
    e = dict(env, K3_API_KEY=key, **more_env) if key else dict(env, **more_env)
    p = launch(k3, model, log, e, list(extra) or ["--serve", "127.0.0.1:0"])
    procs.append(p)
    if not wait:
        return p, None, log
    return p, await_port(p, log, 60)[1], log


def post_chat(port, body, timeout=60):
    """POST body (a dict, or text sent as it is) to /v1/chat/completions: (status, data, streamed)
    where data is the SSE text of a stream, else the parsed JSON, else the text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/chat/completions", body=body if isinstance(body, str) else json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    c.close()
    if r.getheader("Content-Type", "").startswith("text/event-stream"):
        return r.status, data, True
    try:
        return r.status, json.loads(data), False
    except ValueError:
        return r.status, data, False


def open_stream(port, data, src=None):
    """A raw streaming request (data: the JSON text; src: the client's address) whose first event
    has arrived: (socket, bytes so far)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(src, 0) if src else None)
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(data), data)).encode())
    first = b""
    t_end = time.time() + 30
    while b"data: " not in first and time.time() < t_end:
        b = s.recv(4096)
        if not b:
            break
        first += b
    return s, first


def read_until_closed(s):
    """Read s until the peer closes it (a stream's client that keeps reading)."""
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass


def rss_kb(pid, field="VmRSS"):
    """The resident set of process pid (field VmHWM: its peak so far), in kB."""
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1))


def sse_objects(text):
    """The JSON objects of an SSE text's data lines, and whether it ends with data: [DONE]."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if block.startswith("data: ") and block[6:] != "[DONE]":
            out.append(json.loads(block[6:]))
    return out, text.rstrip().endswith("data: [DONE]")


def openai_sdk(packages):
    """The directory whose node_modules hold the official OpenAI SDK for JavaScript and packages
    (npm names with versions, e.g. "openai@5"), installed there once: $K3_OPENAI_JS, default
    ~/.cache/k3chat/openai-js (outside the repository). None, after a SKIP line, without node/npm
    or when npm install fails."""
    # (under HOME, not XDG_CACHE_HOME: tests/run.sh gives each test a cache folder of its own,
    # which made every run install again)
    cache = os.environ.get("K3_OPENAI_JS") or os.path.join(os.path.expanduser("~"), ".cache", "k3chat", "openai-js")
    if not (shutil.which("node") and shutil.which("npm")):
        print("SKIP: node/npm are not installed (needed for the OpenAI SDK checks)")
        return None
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w") as lock:  # one install at a time (suites may run at once)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _openai_install(cache, packages)


def _openai_install(cache, packages):
    if not os.path.exists(os.path.join(cache, "package.json")):
        with open(os.path.join(cache, "package.json"), "w") as f:
            f.write('{"name":"k3chat-openai-ref","private":true}\n')
    names = [p.rpartition("@")[0] or p for p in packages]
    if not all(os.path.exists(os.path.join(cache, "node_modules", n, "package.json")) for n in names):
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund"] + list(packages), cwd=cache,
                           capture_output=True, timeout=300)
        if p.returncode:
            print("SKIP: npm install %s failed: " % " ".join(packages) + p.stderr.decode()[-160:].replace("\n", " "))
            return None
    return cache


def run_sdk(body, args, cache, env, timeout, tmp, name, requires="", cwd=None):
    """Run body, JavaScript that fills the object `out`, with `client` in scope (the official SDK's
    OpenAI client at the base URL args[0], without retries) and args[1:] as process.argv[3:], as
    the file tmp/name; requires: lines before it (more modules). The object, as run_node gives it."""
    js = os.path.join(tmp, name)
    with open(js, "w") as f:
        f.write('const OpenAI = require("openai").default;  // CommonJS: found through NODE_PATH\n' + requires +
                '(async () => {\nconst client = new OpenAI({ baseURL: process.argv[2], apiKey: "none", maxRetries: 0 });\n'
                'const out = {};\n' + body + '\nconsole.log(JSON.stringify(out));\n'
                '})().catch((e) => { console.error(e); process.exit(1); });\n')
    return run_node(js, args, cache, env, timeout, cwd)


def run_node(script, args, cache, env, timeout, cwd=None):
    """Run the JavaScript file script with node (modules from cache): the JSON object of its last
    stdout line, {} (and its stderr's end printed) when there is none."""
    p = subprocess.run(["node", script] + list(args), capture_output=True, timeout=timeout, cwd=cwd,
                       env=dict(env, NODE_PATH=os.path.join(cache, "node_modules")))
    try:
        return json.loads(p.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        print("# node: " + p.stderr.decode()[-400:])
        return {}


# ---- a fake OpenAI-compatible server (loopback): subclass FakeHandler with do_POST, start_fake it

class FakeHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.0 (the connection's end ends each body), no request log; GET answers the model list
    MODELS. Helpers for do_POST: read_json, send_json, start_stream."""
    protocol_version = "HTTP/1.0"
    MODELS = [{"id": "fake-model", "object": "model"}]

    def log_message(self, *a):
        pass

    def read_json(self):
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send_json(self, code, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def do_GET(self):
        self.send_json(200, {"object": "list", "data": self.MODELS})


def sse(obj, eol="\n"):
    """One SSE event of obj's JSON, its lines ended by eol."""
    return ("data: " + json.dumps(obj) + eol + eol).encode()


def delta(d, finish=None, **more):
    """A chat.completion.chunk's object: one choice with delta d and finish_reason finish."""
    return dict(more, choices=[{"index": 0, "delta": d, "finish_reason": finish}])


class _Fake6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def start_fake(handler, addr="127.0.0.1"):
    """A threading HTTP server of handler on addr (127.0.0.1, or an IPv6 one such as ::1; a free
    port), served from a daemon thread."""
    srv = (_Fake6 if ":" in addr else http.server.ThreadingHTTPServer)((addr, 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def exchange(port, data, src=None, shut=False, timeout=60, chunks=None):
    """Send data (or write it in chunks), optionally half-close, read to the end: (bytes, how).
    The default timeout only catches a hang: a chat answer from a sanitizer build on a loaded
    machine can take longer than the 15 s it was (no caller waits for it to expire)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(src, 0) if src else None)
    except OSError as e:
        return b"", "connect: %s" % e
    out, how = b"", "timeout"
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        end = time.time() + timeout
        while time.time() < end:
            b = s.recv(65536)
            if not b:
                how = "eof"
                break
            out += b
    except socket.timeout:
        how = "timeout"
    except OSError as e:
        how = "reset" if isinstance(e, ConnectionResetError) else "error: %s" % e
    finally:
        s.close()
    return out, how


def read_rest(s, timeout):
    """What the socket still delivers until EOF, a reset or timeout seconds of silence; closes it."""
    got = b""
    s.settimeout(timeout)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except OSError:
        pass
    s.close()
    return got


def parse(buf, head_only=False):
    """HTTP/1.1 responses in buf: ([(status, {header: value}, body)], leftover, problem); head_only:
    the answer to a HEAD request (no body whatever Content-Length says)."""
    res = []
    while buf:
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if not sep:
            return res, buf, "a head without its end"
        lines = head.split(b"\r\n")
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", lines[0] + b" ")
        if not m:
            return res, buf, "status line %r" % lines[0][:60]
        hdr = {}
        for ln in lines[1:]:
            k, c, v = ln.partition(b":")
            if not c:
                return res, buf, "header line %r" % ln[:60]
            hdr[k.strip().lower().decode()] = v.strip().decode("latin-1")
        st = int(m.group(1))
        if st < 200:
            res.append((st, hdr, b""))
            buf = rest
            continue
        if head_only:
            body = b""
            buf = rest
        elif "content-length" in hdr:
            n = int(hdr["content-length"])
            if len(rest) < n:
                return res, buf, "a body shorter than Content-Length"
            body, buf = rest[:n], rest[n:]
        elif hdr.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                ln, c, rest = rest.partition(b"\r\n")
                if not c:
                    return res, buf, "a chunked body cut short (no last chunk)"
                n = int(ln.split(b";")[0], 16)
                if n == 0:
                    if not rest.startswith(b"\r\n"):
                        return res, buf, "no CRLF after the last chunk"
                    rest = rest[2:]
                    break
                body, rest = body + rest[:n], rest[n + 2:]
            buf = rest
        else:
            body, buf = rest, b""
        res.append((st, hdr, body))
    return res, b"", None


def one_json_error(buf, want):
    """The bytes hold one final response with status want and a JSON error object, nothing more."""
    res, left, prob = parse(buf)
    final = [r for r in res if r[0] >= 200]
    if prob or left or len(final) != 1 or final[0][0] != want:
        return False, "%s; %d final responses; %r" % (prob, len(final), buf[:200])
    st, hdr, body = final[0]
    try:
        err = json.loads(body.decode("utf-8"))["error"]
        good = isinstance(err["message"], str) and err["message"] and err["type"] and err["code"]
    except (ValueError, KeyError, TypeError):
        return False, "body %r" % body[:120]
    return bool(good and hdr.get("content-type") == "application/json"), err.get("code", "") + ": " + err["message"]


def req(method, path, body=b"", headers=(), key=None, host=True, ctype="application/json"):
    h = ["%s %s HTTP/1.1" % (method, path)]
    if host:
        h.append("Host: 127.0.0.1")
    if key:
        h.append("Authorization: Bearer " + key)
    if body and ctype:
        h.append("Content-Type: " + ctype)
    if body or method == "POST":
        h.append("Content-Length: %d" % len(body))
    h += list(headers)
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def chat(**kw):
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps(kw).encode()


def final(buf):
    res, _, _ = parse(buf)
    f = [r for r in res if r[0] >= 200]
    return f[0] if f else (0, {}, b"")


def sse_events(body):
    ev = []
    for block in body.decode("utf-8", "replace").split("\n\n"):
        if block.startswith("data: "):
            d = block[6:]
            ev.append("[DONE]" if d == "[DONE]" else json.loads(d))
    return ev


def sanitizer_clean(tmp):
    """No sanitizer or runtime error report in the servers' logs under tmp (one PASS/FAIL line)."""
    logs = b"".join(read(os.path.join(tmp, f)) for f in os.listdir(tmp) if f.endswith(".log"))
    return ok(b"Sanitizer" not in logs and b"runtime error" not in logs, "no sanitizer or runtime error report")


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
