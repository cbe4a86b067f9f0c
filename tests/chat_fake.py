# chat_fake.py: a small fake OpenAI-compatible server for the line-mode and TUI tests of
# --endpoint (loopback only). Usage: python3 chat_fake.py PORTFILE LOGFILE
# It listens on 127.0.0.1 (a free port, written to PORTFILE once it listens) and appends each
# chat request's JSON body to LOGFILE, one line each. What it answers depends on the last
# message: "nul" streams a NUL byte in reasoning_content and content; "evil" streams terminal
# commands (OSC 52 clipboard, OSC 0 title, CSI colour, a C1
# CSI) in content and reasoning_content; "e500" answers HTTP 500 with such commands in the error
# message; "flood" streams one endless line (up to 64 MB, the bytes it sent written to
# LOGFILE.flood); "once" streams "ok" the first time and answers HTTP 500 after (a /retry that
# fails); anything else streams "ok". It runs until killed, 300 s at the most.
import json
import os
import sys
import time

from serve_lib import FakeHandler, delta, sse, start_fake

EVIL = "\x1b]52;c;ZXZpbA==\x07 \x1b]0;EVIL\x07 \x1b[31m red \u009b32m c1"


class Fake(FakeHandler):
    once = 0  # requests that ended with "once" so far

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[2], "ab") as f:
            f.write(raw.replace(b"\n", b" ") + b"\n")
        last = json.loads(raw)["messages"][-1]["content"]
        if last == "flood":  # one endless stream line (64 MB at most); LOGFILE.flood: the bytes sent
            self.start_stream()
            sent = 0
            try:
                self.wfile.write(b'data: {"choices":[{"index":0,"delta":{"content":"')
                while sent < 64 << 20:
                    self.wfile.write(b"A" * 65536)
                    sent += 65536
            except OSError:
                pass
            with open(sys.argv[2] + ".flood", "w") as f:
                f.write(str(sent))
            return
        if last == "once":
            Fake.once += 1
        if last == "e500" or (last == "once" and Fake.once > 1):
            self.send_json(500, {"error": {"message": "boom " + EVIL.replace("EVIL", "EVIL500"),
                                           "type": "server_error"}})
            return
        self.start_stream()

        def ev(d, fin=None):
            return sse(delta(d, fin))
        if last == "nul":  # a model may write a NUL byte: JSON "\u0000" in both channels
            out = ev({"reasoning_content": "r\x00s"}) + ev({"content": "a\x00b"}) + \
                ev({"content": " end"}, "stop")
        elif last == "evil":
            out = ev({"reasoning_content": "think " + EVIL.replace("EVIL", "EVILR")}) + \
                ev({"content": "ans " + EVIL}) + ev({"content": " end"}, "stop")
        else:
            out = ev({"content": "ok"}, "stop")
        self.wfile.write(out + b"data: [DONE]\n\n")


srv = start_fake(Fake)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
