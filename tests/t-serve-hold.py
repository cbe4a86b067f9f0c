# t-serve-hold.py: `k3chat --serve` against clients that hold its request threads or its exit, on a
# generated tiny checkpoint, loopback only:
#   - 70 clients that ask for a large plain answer (300 tokens with top_logprobs 20: ~590 kB) and
#     then do not read it (a slow reader: K3_SERVE_SEND_SECS is an hour here, so the server waits
#     on them) held a request thread each, in the write of the answer: once 64 were held, every
#     other client waited in the gate for its 503 server_busy. Now what the socket does not take
#     is written by the gate's event loop: the threads come back, another client is answered, and
#     a slow reader that reads at last gets its whole answer;
#   - the same with 70 streams (90 tokens with top_logprobs 20: ~200 kB, more than the sockets
#     hold, less than the unread bytes that cancel a stream): each stream's thread wrote it to the
#     end, blocked on the client, so 64 slow stream readers held every request thread; now the
#     finished tail goes to the gate's writer: another client is answered, and a slow stream
#     reader that reads at last gets its whole stream (every token's chunk, [DONE], the chunked end);
#   - a client that connects while the server lingers on answered connections at shutdown
#     (SIGTERM) crashed it: the listening socket's event was taken for a connection's, an index
#     past the records' end. Clients connect in a loop across the stop; the server exits 0.
# Each check waits on an event (the log's lines, a response), with generous bounds; the servers
# are killed at the end.
import json
import os
import signal
import socket
import threading
import time

import serve_lib
from serve_lib import ok, post_chat, read_text, start_server, wait_for

B, T, K3, ASAN, env = serve_lib.setup()
M = os.path.join(T, "m")
procs = []
N_ATTACK = 70  # more than the gate's 64 request threads (HTTP_MAX_CONN)

try:
    hold = os.path.join(T, "hold.txt")
    with open(hold, "w") as f:
        f.write("la " * 40000)

    def slow_readers(name, stream, n_tok):
        """70 clients ask for n_tok tokens with top_logprobs 20 and do not read; another client is
        answered; the first slow reader then reads its whole answer."""
        srv, port, log = start_server(K3, M, T, env, procs, name, ["--serve", "127.0.0.1:0", "--parallel", "8"],
                                      K3_SERVE_QUEUE="100", K3_SERVE_SEND_SECS="3600", K3_MAXT="4096",
                                      K3_SERVE_SCRIPT=hold)
        what = "stream" if stream else "answer"
        ok(port is not None, "%s: a server with K3_SERVE_SEND_SECS=3600 starts" % name)
        if port is None:
            return
        body = json.dumps(dict(messages=[{"role": "user", "content": "x"}], max_tokens=n_tok, logprobs=True,
                               top_logprobs=20, reasoning_effort="none", stream=stream))
        req = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode()
        socks = []
        for i in range(N_ATTACK):  # from 35 addresses: the gate's per-address limits are not what is tested
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("127.0.0.%d" % (2 + i % 35), 0))
            s.settimeout(60)
            s.connect(("127.0.0.1", port))
            s.sendall(req)
            socks.append(s)
        answered = lambda: read_text(log).count(" 200 stream: " if stream else " 200: ")
        ok(wait_for(lambda: answered() >= 64, 600), "64 of the slow readers' %ss are made (%d)" % (what, answered()))
        t0 = time.time()
        st, o, _ = post_chat(port, dict(messages=[{"role": "user", "content": "y"}], max_tokens=2), timeout=120)
        ok(st == 200, "another client is answered while 64 slow readers have not read their %ss (%d %s, %.1f s)"
           % (what, st, json.dumps(o)[:160] if isinstance(o, dict) else o[:160], time.time() - t0))
        others = 0 if stream else 1  # the other client's answer is a plain one
        ok(wait_for(lambda: answered() >= N_ATTACK + others, 300), "all %d slow readers' %ss are made (%d)"
           % (N_ATTACK, what, answered() - others))
        def comm():
            """The server's threads' names (a thread that ends between the listing and the read is
            left out: its comm is gone, or reads ESRCH)."""
            names = []
            for t in os.listdir("/proc/%d/task" % srv.pid):
                try:
                    with open("/proc/%d/task/%s/comm" % (srv.pid, t)) as f:
                        names.append(f.read().strip())
                except (FileNotFoundError, ProcessLookupError):
                    pass
            return names
        ok(wait_for(lambda: "k3-request" not in comm(), 60), "no request thread is left waiting on them")
        buf = b""
        s = socks[0]
        try:  # the first one reads at last: its whole answer, as the gate wrote it
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                buf += b
        except OSError as e:
            buf += b"<%s>" % str(e).encode()
        head, _, rest = buf.partition(b"\r\n\r\n")
        if stream:  # chunked: size CRLF data CRLF ... 0 CRLF CRLF
            data, ended, r = b"", False, rest
            while r:
                size, _, r = r.partition(b"\r\n")
                try:
                    k = int(size, 16)
                except ValueError:
                    break
                if k == 0:
                    ended = r == b"\r\n"
                    break
                data, r = data + r[:k], r[k + 2:]
            ev, _ = serve_lib.sse_objects(data.decode(errors="replace"))
            lp = [x for e in ev for c in e.get("choices", []) for x in ((c.get("logprobs") or {}).get("content") or [])]
            ok(head.startswith(b"HTTP/1.1 200") and ended and data.rstrip().endswith(b"data: [DONE]") and
               len(lp) == n_tok and len(rest) > 150000, "a slow stream reader that reads gets its whole stream "
               "(%d bytes, %d logprobs entries, [DONE] and the chunked end: %s)" % (len(rest), len(lp), ended))
        else:
            try:
                lp = json.loads(rest)["choices"][0]["logprobs"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                lp = []
            ok(head.startswith(b"HTTP/1.1 200") and len(lp) == n_tok, "a slow reader that reads gets its whole "
               "answer (%d bytes, %d logprobs entries)" % (len(rest), len(lp)))
        for s in socks:
            s.close()
        srv.kill()
        srv.wait()

    slow_readers("hold", False, 300)
    slow_readers("holds", True, 90)

    # ---- SIGTERM while answered connections linger, with clients connecting all along
    srv2, port2, log2 = start_server(K3, M, T, env, procs, "stop", ["--serve", "127.0.0.1:0"])
    ok(port2 is not None, "a second server starts")
    if port2:
        stop = [False]
        held = []

        def knock():  # connections that ask, are answered and stay open (the server lingers on them)
            while not stop[0]:
                try:
                    c = socket.create_connection(("127.0.0.1", port2), timeout=5)
                    c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    held.append(c)
                    if len(held) > 200:
                        held.pop(0).close()
                except OSError:
                    time.sleep(0.01)
        ths = [threading.Thread(target=knock) for _ in range(4)]
        for t in ths:
            t.start()
        wait_for(lambda: len(held) > 50, 30)
        srv2.send_signal(signal.SIGTERM)
        try:
            rc = srv2.wait(60)
        except Exception:
            rc = None
        stop[0] = True
        for t in ths:
            t.join(30)
        for c in held:
            c.close()
        ok(rc == 0, "SIGTERM while clients keep connecting: the server exits 0 (%r; log: %r)"
           % (rc, read_text(log2)[-300:]))
    serve_lib.sanitizer_clean(T)
finally:
    serve_lib.kill_all(procs)
raise SystemExit(serve_lib.status())
