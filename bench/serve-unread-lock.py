# The lockout: --parallel 2, K3_SERVE_QUEUE 62 (64 jobs: every request thread), 64 streaming clients
# from one address that never read (SO_RCVBUF 4 kB) on an endless scripted reply; once they are all
# cancelled (256 kB unsent each), a normal client's chat: how long it waits and its status, and the
# server's threads against before. Usage: lock.py K3CHAT MODEL TMP
import json, os, re, socket, subprocess, sys, time
k3, model, tmp = sys.argv[1:4]
hold = os.path.join(tmp, "hold.txt")
open(hold, "w").write("la " * 40000)
env = dict(os.environ, OMP_NUM_THREADS="1", K3_MAXT="65536", K3_BITS="4", K3_SERVE_SCRIPT=hold, K3_SERVE_QUEUE="62")
log = os.path.join(tmp, "lock.log")
p = subprocess.Popen([k3, model, "--serve", "127.0.0.1:0", "--parallel", "2"], stderr=open(log, "wb"),
                     stdout=subprocess.DEVNULL, env=env)
def rd(): return open(log, "rb").read()
t = time.time()
while b"serving" not in rd() and time.time() - t < 60: time.sleep(0.1)
port = int(re.search(rb":(\d+)/v1", rd()).group(1))
def req(body):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body
def chat(**kw):
    kw.setdefault("messages", [{"role": "user", "content": "hi"}]); return json.dumps(kw).encode()
def one(body, timeout=90):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout); s.sendall(req(body)); out = b""
    while True:
        b = s.recv(65536)
        if not b: break
        out += b
    return out
one(chat(max_tokens=2))
th0 = len(os.listdir("/proc/%d/task" % p.pid))
N = 64
us = []
for _ in range(N):
    u = socket.socket(); u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    u.connect(("127.0.0.1", port)); u.sendall(req(chat(max_tokens=100000, stream=True))); us.append(u)
t = time.time()
while rd().count(b"too slowly") < N and time.time() - t < 240: time.sleep(0.1)
t_all = time.time() - t
th1 = len(os.listdir("/proc/%d/task" % p.pid))
t0 = time.time()
out = one(chat(max_tokens=2))
dt = time.time() - t0
t1 = time.time()
while len(os.listdir("/proc/%d/task" % p.pid)) > th0 and time.time() - t1 < 90: time.sleep(0.1)
back = time.time() - t1
print("threads back to %d %.1f s after the chat" % (th0, back))
print("%s: %d cancelled in %.1f s; threads %d (before %d); a chat then: %s in %.2f s; threads after %d"
      % (os.path.basename(os.path.dirname(os.path.dirname(k3))) or k3, rd().count(b"too slowly"), t_all, th1, th0,
         out.split(b"\r\n", 1)[0].decode(), dt, len(os.listdir("/proc/%d/task" % p.pid))))
for u in us: u.close()
p.kill(); p.wait()
