# chat_fake.py: a small fake OpenAI-compatible server for the line-mode and TUI tests of
# --endpoint (loopback only). Usage: python3 chat_fake.py PORTFILE LOGFILE
# It listens on 127.0.0.1 (a free port, written to PORTFILE once it listens) and appends each
# chat request's JSON body to LOGFILE, one line each. What it answers depends on the last
# message: "nul" streams a NUL byte in reasoning_content and content; "evil" streams terminal
# commands (OSC 52 clipboard, OSC 0 title, CSI colour, a C1
# CSI) in content and reasoning_content; "e500" answers HTTP 500 with such commands in the error
# message; anything else streams "ok". It runs until killed, 300 s at the most.
import http.server
import json
import os
import sys
import threading
import time

EVIL = "\x1b]52;c;ZXZpbA==\x07 \x1b]0;EVIL\x07 \x1b[31m red \u009b32m c1"


class Fake(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b'{"object":"list","data":[{"id":"fake-model","object":"model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[2], "ab") as f:
            f.write(raw.replace(b"\n", b" ") + b"\n")
        last = json.loads(raw)["messages"][-1]["content"]
        if last == "e500":
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"error": {"message": "boom " + EVIL.replace("EVIL", "EVIL500"),
                                                   "type": "server_error"}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def ev(d, fin=None):
            return ("data: " + json.dumps({"choices": [{"index": 0, "delta": d, "finish_reason": fin}]}) +
                    "\n\n").encode()
        if last == "nul":  # a model may write a NUL byte: JSON "\u0000" in both channels
            out = ev({"reasoning_content": "r\x00s"}) + ev({"content": "a\x00b"}) + \
                ev({"content": " end"}, "stop")
        elif last == "evil":
            out = ev({"reasoning_content": "think " + EVIL.replace("EVIL", "EVILR")}) + \
                ev({"content": "ans " + EVIL}) + ev({"content": " end"}, "stop")
        else:
            out = ev({"content": "ok"}, "stop")
        self.wfile.write(out + b"data: [DONE]\n\n")


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
threading.Thread(target=srv.serve_forever, daemon=True).start()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
