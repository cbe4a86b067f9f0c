# chat_hostile.py: a hostile or broken OpenAI-compatible server for t-chat-hostile.sh (loopback
# only). Usage: python3 chat_hostile.py PORTFILE LOGFILE
# It listens on 127.0.0.1 (a free port, written to PORTFILE once it listens) and appends one JSON
# line per chat request to LOGFILE: {"model": the requested model, "auth": the Authorization
# header or null, "n_calls": the tool calls its messages carry, "path": the request's path and
# query}; each GET's path and query go to LOGFILE.get, a line each. It serves [::1] too, its port
# written to PORTFILE.6 (none where the machine has no IPv6); with HOSTILE_TLS=CERT:KEY in the
# environment it serves TLS with that certificate too, its port written to PORTFILE.tls. GET .../models under a path starting
# /long/ names a model id of 302 bytes (two
# bytes a character past the first two, so a cut at 255 bytes falls inside one); anything else names
# "fake-model" with max_model_len 4096 (under /nulid/ followed by a model whose id holds a NUL; under
# /surr/ instead one id "m\udcff", a lone surrogate as vLLM writes a path's Latin-1 byte; under
# /ctlid/ one id "m ESC ]0;EVIL BEL x"); under
# /hang/ it never answers (60 s); under /html/ every GET and POST gets a web page (200, text/html); under /err200/ a GET gets 200
# {"error": {"message": "invalid api key"}}, under /nomodels/ 404 {"detail": "Not Found"}, under /redir/ 301 to
# http://127.0.0.2:9/api/v1/models/?api-version=2 (a slash added), under /biglist/ "fake-model"
# and 1000 more, about 2 MB;
# under /textplain/ a chat request's stream comes labelled text/plain. What a chat request gets
# depends on its last message:
#   forever   an endless stream of 64,000-byte content events (1 GiB at most); when the client
#             goes, LOGFILE.forever gets the bytes sent
#   evterr    "partial " then an SSE "event: error" whose data is {"message": "quota exceeded ..."}
#   evterr2   the same with an error event that has no data line, then the connection closes
#   tools     two tool calls streamed as OpenAI deltas: get_weather {"city": "Paris"} in three
#             pieces (the id repeated in the last), then get_time {}
#   toolid    the same with the first call's id changed in its third piece
#   toolidx   a call that opens at index 3
#   toolmd    "Steps:" and a list item as text, then a call of shell whose arguments (TOOLMD_ARGS,
#             in pieces of 7 characters) hold what Markdown would rewrite and a control character
#   toolcut   get_weather {"city": "Paris"}, then get_time cut after '{"days": ' by finish_reason
#             "length" (max_tokens inside the call)
#   length    "cut" with finish_reason "length" after 3 tokens (usage: prompt 5, completion 3)
#   cr        "ok-cr" in events whose lines end with a lone CR
#   crlf      "ok-crlf" with CR LF ends, each written as two pieces cut between the CR and the LF
#   thinkevil OSC 52, OSC 0 and a C1 CSI in the reasoning, OSC 0 in the answer
#   cut       "half " and the connection closes (no finish_reason, no [DONE])
#   keepalive "ka-", then keep-alive comments and empty deltas every 0.1 s for 120 s: no answer
#   drip      "d0" .. "d7", one a second, then "-end" and the stream's end
#   nodata    a JSON chunk on a line of its own, without "data:"
#   rtokens   reasoning in 3 pieces, "ok-rt"; usage: 10 completion tokens, 7 of them reasoning
#   usage     "ok-usage" with usage prompt_tokens and completion_tokens 2^31 - 1 each
#   jsontools one JSON answer (not a stream) whose message calls lookup {"q": 1}
#   err400    400 {"error": {"message": "the first error"}}; err502: 502 without a body
#   err500big 500 with an 8 MiB body, as a failing proxy's page
#   sse400    400 labelled text/event-stream, its error as an event: data: {"error": {...}}
#   empty200  200 with an empty body
#   redirect  307 to http://127.0.0.2:9/v1/chat/completions (nothing listens there)
#   surrogate "a", then a lone high surrogate (\ud83d, its low half never comes), a pair (U+1F600), a
#             lone low one (\udcff, surrogateescape's byte) and "\\ud800" (an escaped backslash,
#             text, not an escape) in the reasoning and the answer, then a call note whose
#             arguments hold a lone \ud83d; surrerr: the answer, then an "event: error" whose
#             message holds a lone \udcff
#   surrsplit the halves of U+1F600 (\ud83d, \ude00) split between two events of the reasoning, of
#             the content (an empty piece and a reasoning piece between), of a call's arguments;
#             a high half followed by a piece without its low one, a low one mid-piece, a low one
#             at a piece's start with no high one before it, and a high one before the call
#   surrcalls calls whose arguments end in a high half that no low one follows: call 0 (named
#             only after call 1 came), call 1 "two", call 2 "three"
#   surrend   "g" and a high half, then U+100400 (the private-use code point k3chat parses such a
#             low half as) and "h", then "i" and a high half that ends the answer
#   gzip      "ok-gzip" as a stream compressed with gzip, though the request asked for identity (a
#             proxy's doing); LOGFILE.enc gets the request's Accept-Encoding headers
#   gzerr     429 with Retry-After: 7 and a gzip-compressed error body {"error": {"message":
#             "rate limited"}}
#   err200    200 {"error": {"message": "model overloaded"}}, a gateway's error as an answer
#   errnull   "ok-errnull" in events that carry "error": null beside the answer
#   argsobj   a call get_weather whose arguments are a JSON object, not its text, in the stream;
#             then one JSON answer (not a stream) with such a call lookup
#   filter    "part" with finish_reason "content_filter"; abort: "part" with "abort"
#   rawutf8   content JSON with raw bytes that are not UTF-8 (FF, E4 B8 cut before its last byte)
#   midcut    "half " and part of the next event, then the connection closes (no end of line)
#   interleave two calls whose pieces come interleaved: one {"x": 1}, two {"y": 2}, one's rest
#             after two began
#   noindex   two calls without "index", each whole in a chunk (ids call_1, call_2), as Gemini's
#             OpenAI compatibility streams them; the second's arguments in two pieces, the later
#             without an id
#   donehang  "ok-dh" and "data: [DONE]", then the connection stays open (60 s); finhang: "ok-fh"
#             with finish_reason "stop" and its usage, then the same without "[DONE]"
#   anything else streams "ok"
# It runs until killed, 300 s at the most.
import gzip
import http.server
import json
import os
import ssl
import sys
import threading
import time

from serve_lib import FakeHandler, delta, sse, start_fake

# \\ and \" (JSON escapes), *x*, backticks (a run of four), a line break and "# x" at a line's start,
# BEL (a control character); the arguments need not be JSON
TOOLMD_ARGS = '{"cmd": "a \\\\ \\"q\\" *x* `id` ````",\n# x\n"bell": "\x07"}'
LONG_ID = "mm" + "\u00e9" * 150


class Fake(FakeHandler):
    MODELS = [{"id": "fake-model", "object": "model", "max_model_len": 4096}]

    def html(self):  # a web page, as a site's front end answers any path
        body = b"<!doctype html><html><body>Chat UI</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with open(sys.argv[2] + ".get", "a") as f:
            f.write(self.path + "\n")
        if self.path.startswith("/html/"):
            self.html()
            return
        if self.path.startswith("/redir/"):  # http:// sent to https://, say: another origin
            self.send_response(301)
            self.send_header("Location", "http://127.0.0.2:9/api/v1/models/?api-version=2")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/biglist/"):  # a model list past 1 MiB (a router's hundreds of models)
            pad = [{"id": "other-%d" % k, "object": "model", "description": "d" * 2000} for k in range(1000)]
            self.send_json(200, {"object": "list", "data": self.MODELS + pad})
            return
        if self.path.startswith("/nomodels/"):  # a server (a proxy) without a model list
            self.send_json(404, {"detail": "Not Found"})
            return
        if self.path.startswith("/err200/"):  # a gateway's error with status 200
            self.send_json(200, {"error": {"message": "invalid api key", "type": "auth"}})
            return
        if self.path.startswith("/hang/"):  # a server that takes the request and never answers
            time.sleep(60)
            return
        if self.path.startswith("/long/"):
            self.send_json(200, {"object": "list", "data": [{"id": LONG_ID, "object": "model"}]})
            return
        if self.path.startswith("/surr/"):  # vLLM's id for a model path with a Latin-1 byte
            self.send_json(200, {"object": "list", "data": [{"id": "m\udcff", "object": "model"}]})
            return
        if self.path.startswith("/ctlid/"):  # control characters in the model's id
            self.send_json(200, {"object": "list", "data": [{"id": "m\x1b]0;EVIL\x07x", "object": "model"}]})
            return
        if self.path.startswith("/nulid/"):  # a NUL in the id of a model after the first
            self.send_json(200, {"object": "list", "data": self.MODELS + [{"id": "lora\0x", "object": "model"}]})
            return
        super().do_GET()

    def do_POST(self):
        if self.path.startswith("/html/"):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.html()
            return
        req = self.read_json()
        with open(sys.argv[2], "a") as f:
            calls = [c for m in req["messages"] for c in m.get("tool_calls") or []]
            f.write(json.dumps({"model": req.get("model"), "auth": self.headers.get("Authorization"),
                                "n_calls": len(calls), "path": self.path}) + "\n")
        last = req["messages"][-1]["content"]
        if last == "jsontools":  # one JSON answer (no stream) whose message is a tool call
            call = {"id": "call_j", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
            self.send_json(200, {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
                                 "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]})
            return
        if last in ("err400", "err502"):  # an error with its message, then one without a body
            body = b'{"error": {"message": "the first error"}}' if last == "err400" else b""
            self.send_response(400 if last == "err400" else 502)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if last in ("sse400", "empty200"):
            body = b'data: {"error": {"message": "bad request x"}}\n\n' if last == "sse400" else b""
            self.send_response(400 if body else 200)
            self.send_header("Content-Type", "text/event-stream" if body else "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if last == "err500big":  # 500 with a body without end (8 MiB at most)
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            try:
                for _ in range(128):
                    self.wfile.write(b"<p>Internal error</p>" * 3000)
            except OSError:
                pass
            return
        if last == "redirect":
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.2:9/v1/chat/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if last in ("gzip", "gzerr"):  # compressed though the request asks for identity
            with open(sys.argv[2] + ".enc", "a") as f:
                f.write(repr(self.headers.get_all("Accept-Encoding")) + "\n")
            if last == "gzip":
                code, ctype, body = 200, "text/event-stream", sse(delta({"content": "ok-gzip"}, "stop")) + b"data: [DONE]\n\n"
            else:
                code, ctype, body = 429, "application/json", b'{"error": {"message": "rate limited"}}'
            body = gzip.compress(body)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Retry-After", "7")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if last == "err200":
            self.send_json(200, {"error": {"message": "model overloaded", "code": 503}})
            return
        if last == "argsobj" and len(req["messages"]) > 2:  # the second time: one JSON answer
            call = {"id": "call_o", "type": "function", "function": {"name": "lookup", "arguments": {"q": 1}}}
            self.send_json(200, {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
                                 "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]})
            return
        if self.path.startswith("/textplain/"):  # the stream labelled text/plain (a proxy's doing)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            self.wfile.write(sse(delta({"content": "ok-plain"}, "stop")) + b"data: [DONE]\n\n")
            return
        self.start_stream()
        if last == "forever":
            ev, sent = sse(delta({"content": "B" * 64000})), 0
            try:
                while sent < 1 << 30:
                    self.wfile.write(ev)
                    sent += len(ev)
            except OSError:
                pass
            with open(sys.argv[2] + ".forever", "w") as f:
                f.write(str(sent))
            return
        if last == "toolcut":  # get_weather whole, then get_time cut by max_tokens (finish_reason length)
            out = sse(delta({"tool_calls": [{"index": 0, "id": "call_w", "type": "function", "function":
                                             {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}))
            out += sse(delta({"tool_calls": [{"index": 1, "id": "call_t", "type": "function", "function":
                                              {"name": "get_time", "arguments": '{"days": '}}]}))
            self.wfile.write(out + sse(delta({}, "length")) + b"data: [DONE]\n\n")
            return
        if last == "toolmd":  # a call whose arguments Markdown would rewrite, after a list
            out = sse(delta({"content": "Steps:\n\n- first"}))
            out += sse(delta({"tool_calls": [{"index": 0, "id": "call_m", "type": "function",
                                              "function": {"name": "shell", "arguments": ""}}]}))
            for k in range(0, len(TOOLMD_ARGS), 7):
                out += sse(delta({"tool_calls": [{"index": 0, "function": {"arguments": TOOLMD_ARGS[k:k + 7]}}]}))
            self.wfile.write(out + sse(delta({}, "tool_calls")) + b"data: [DONE]\n\n")
            return
        if last in ("tools", "toolid", "toolidx"):  # OpenAI stream deltas of tool calls
            def tc(**c):
                return sse(delta({"tool_calls": [c]}))
            fn = {"name": "get_weather", "arguments": ""}
            if last == "toolidx":  # a call that opens at index 3, with no 0..2 before it
                out = tc(index=3, id="call_3", type="function", function=fn)
            else:
                out = tc(index=0, id="call_a", type="function", function=fn)
                out += tc(index=0, function={"arguments": '{"city": '})
                out += tc(index=0, id="call_a" if last == "tools" else "call_b", function={"arguments": '"Paris"}'})
                out += tc(index=1, id="call_c", type="function", function={"name": "get_time", "arguments": "{}"})
            self.wfile.write(out + sse(delta({}, "tool_calls")) + b"data: [DONE]\n\n")
            return
        if last == "length":  # cut by the server's own default max_tokens, the context far from full
            out = sse(delta({"content": "cut"}, "length")) + \
                sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
            self.wfile.write(out + b"data: [DONE]\n\n")
            return
        if last == "rtokens":  # reasoning in 3 pieces of 7 tokens as usage counts them, the answer in 1 of 3
            out = b"".join(sse(delta({"reasoning_content": t})) for t in ("ab", "cd", "ef")) + \
                sse(delta({"content": "ok-rt"}, "stop")) + \
                sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 10,
                                              "completion_tokens_details": {"reasoning_tokens": 7}}})
            self.wfile.write(out + b"data: [DONE]\n\n")
            return
        if last == "usage":  # token counts no server could mean: prompt + completion overflow an int
            big = 2 ** 31 - 1
            out = sse(delta({"content": "ok-usage"}, "stop")) + \
                sse({"choices": [], "usage": {"prompt_tokens": big, "completion_tokens": big}})
            self.wfile.write(out + b"data: [DONE]\n\n")
            return
        if last == "cr":  # lines ended by a lone CR, as the event-stream format allows
            self.wfile.write(sse(delta({"content": "ok-"}), "\r") + sse(delta({"content": "cr"}, "stop"), "\r") +
                             b"data: [DONE]\r\r")
            return
        if last == "crlf":  # CR LF ends, each cut between its CR and its LF across two writes
            for piece in (sse(delta({"content": "ok-"}), "\r\n"), sse(delta({"content": "crlf"}, "stop"), "\r\n"),
                          b"data: [DONE]\r\n\r\n"):
                for part in piece.split(b"\n"):
                    self.wfile.write(part)
                    self.wfile.flush()
                    time.sleep(0.05)
                    self.wfile.write(b"\n")
            return
        if last == "thinkevil":  # terminal commands (OSC 52 clipboard, OSC 0 title, a C1 CSI) in the reasoning
            out = sse(delta({"reasoning_content": "r \x1b]52;c;ZXZpbA==\x07 \x1b]0;T\x07 \u009b1m end"})) + \
                sse(delta({"content": "a \x1b]0;A\x07 end"}, "stop"))
            self.wfile.write(out + b"data: [DONE]\n\n")
            return
        if last == "keepalive":  # "ka-" then keep-alive comments and empty deltas, never an answer (120 s)
            self.wfile.write(sse(delta({"content": "ka-"})))
            try:
                for _ in range(1200):
                    self.wfile.write(b": keep-alive\n\n" + sse(delta({})))
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass
            return
        if last == "drip":  # "d0" .. "d7", one a second, then the end: slow, but each brings a part
            for i in range(8):
                self.wfile.write(sse(delta({"content": "d%d" % i})))
                self.wfile.flush()
                time.sleep(1)
            self.wfile.write(sse(delta({"content": "-end"}, "stop")) + b"data: [DONE]\n\n")
            return
        if last in ("surrogate", "surrerr"):  # lone UTF-16 surrogates, as json.dumps writes them
            odd = "a\ud83d b\U0001F600 c\udcff d\\ud800 e"
            if last == "surrerr":
                self.wfile.write(sse(delta({"content": odd})) + b"event: error\n" +
                                 ("data: " + json.dumps({"message": "bad \udcff byte"}) + "\n\n").encode())
                return
            fn = {"name": "note", "arguments": '{"t": "x\ud83d y"}'}
            out = sse(delta({"reasoning_content": odd})) + sse(delta({"content": odd})) + \
                sse(delta({"tool_calls": [{"index": 0, "id": "call_s", "type": "function", "function": fn}]}))
            self.wfile.write(out + sse(delta({}, "tool_calls")) + b"data: [DONE]\n\n")
            return
        if last == "surrsplit":  # the halves of U+1F600 split between two events of the same field
            hi, lo = "\ud83d", "\ude00"
            ev = [{"reasoning_content": "r" + hi}, {"reasoning_content": lo + "s"}, {"content": "a" + hi},
                  {"content": lo + "b " + hi}, {"reasoning_content": "!"}, {"content": lo + " c" + hi},
                  {"content": ""}, {"content": "d " + lo + "e"}, {"content": lo + "f" + hi},
                  {"tool_calls": [{"index": 0, "id": "call_h", "type": "function",
                                   "function": {"name": "note", "arguments": '{"t": "x' + hi}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": lo + 'y"}'}}]}]
            self.wfile.write(b"".join(sse(delta(d)) for d in ev) + sse(delta({}, "tool_calls")) + b"data: [DONE]\n\n")
            return
        if last == "surrcalls":  # calls whose arguments end in a high half (each a box of its own); call 0
            hi = "\ud83d"       # is named only after call 1 came, so its box comes after call 1's
            ev = [{"index": 0, "id": "call_a", "type": "function", "function": {"arguments": '{"a": "p' + hi}},
                  {"index": 1, "id": "call_b", "type": "function", "function": {"name": "two", "arguments": '{"b": "q' + hi}},
                  {"index": 0, "function": {"name": "one"}},
                  {"index": 2, "id": "call_c", "type": "function", "function": {"name": "three", "arguments": '{"c": "r' + hi}}]
            self.wfile.write(b"".join(sse(delta({"tool_calls": [d]})) for d in ev) + sse(delta({}, "tool_calls")) +
                             b"data: [DONE]\n\n")
            return
        if last == "surrend":  # high halves whose low ones never come; a private-use character between
            out = sse(delta({"content": "g\ud83d"})) + sse(delta({"content": "\U00100400h"})) + \
                sse(delta({"content": "i\ud83d"}, "stop"))
            self.wfile.write(out + b"data: [DONE]\n\n")
            return
        if last == "interleave":  # the calls' pieces interleaved
            ev = [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "one", "arguments": '{"x": '}},
                  {"index": 1, "id": "call_2", "type": "function", "function": {"name": "two", "arguments": '{"y": '}},
                  {"index": 0, "function": {"arguments": '1}'}}, {"index": 1, "function": {"arguments": '2}'}}]
            self.wfile.write(b"".join(sse(delta({"tool_calls": [d]})) for d in ev) + sse(delta({}, "tool_calls")) +
                             b"data: [DONE]\n\n")
            return
        if last == "noindex":  # calls without "index"
            ev = [{"id": "call_1", "type": "function", "function": {"name": "one", "arguments": '{"a": 1}'}},
                  {"id": "call_2", "type": "function", "function": {"name": "two", "arguments": '{"b": '}},
                  {"function": {"arguments": '2}'}}]
            self.wfile.write(b"".join(sse(delta({"tool_calls": [d]})) for d in ev) + sse(delta({}, "tool_calls")) +
                             b"data: [DONE]\n\n")
            return
        if last in ("donehang", "finhang"):  # the stream's end, but not the connection's
            if last == "donehang":
                self.wfile.write(sse(delta({"content": "ok-dh"}, "stop")) + b"data: [DONE]\n\n")
            else:
                self.wfile.write(sse(delta({"content": "ok-fh"}, "stop")) +
                                 sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}))
            self.wfile.flush()
            time.sleep(60)
            return
        if last == "errnull":
            self.wfile.write(sse(delta({"content": "ok-"}, error=None)) + sse(delta({"content": "errnull"}, "stop", error=None)) +
                             b"data: [DONE]\n\n")
            return
        if last == "argsobj":
            fn = {"name": "get_weather", "arguments": {"city": "Paris"}}
            self.wfile.write(sse(delta({"tool_calls": [{"index": 0, "id": "call_w", "type": "function", "function": fn}]},
                                       "tool_calls")) + b"data: [DONE]\n\n")
            return
        if last in ("filter", "abort"):
            self.wfile.write(sse(delta({"content": "part"}, "content_filter" if last == "filter" else "abort")) +
                             b"data: [DONE]\n\n")
            return
        if last == "rawutf8":
            self.wfile.write(b'data: {"choices":[{"index":0,"delta":{"content":"a\xffb\xe4\xb8c"},"finish_reason":"stop"}]}\n\n'
                             b"data: [DONE]\n\n")
            return
        if last == "midcut":
            self.wfile.write(sse(delta({"content": "half "})) + b'data: {"choices":[{"index":0,"delta":{"content":"mo')
            return
        if last == "cut":  # one event, then the connection closes: no finish_reason, no [DONE]
            self.wfile.write(sse(delta({"content": "half "})))
            return
        if last == "nodata":  # JSON lines, not events: no line starts with data:
            self.wfile.write(json.dumps(delta({"content": "x"}, "stop")).encode() + b"\n\n")
            return
        if last in ("evterr", "evterr2"):
            out = sse(delta({"content": "partial "})) + b"event: error\n"
            out += b'data: {"message": "quota exceeded for this key"}\n\n' if last == "evterr" else b"\n"
            self.wfile.write(out)
            return
        self.wfile.write(sse(delta({"content": "ok"}, "stop")) + b"data: [DONE]\n\n")


srv = start_fake(Fake)
if os.environ.get("HOSTILE_TLS"):  # CERT:KEY: the same server over TLS, its port in PORTFILE.tls
    tls = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*os.environ["HOSTILE_TLS"].split(":"))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    with open(sys.argv[1] + ".tls", "w") as f:
        f.write(str(tls.server_address[1]))
try:
    srv6 = start_fake(Fake, "::1")
    with open(sys.argv[1] + ".6", "w") as f:
        f.write(str(srv6.server_address[1]))
except OSError:
    pass
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
