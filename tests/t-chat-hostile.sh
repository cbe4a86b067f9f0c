#!/bin/sh
# t-chat-hostile.sh: --endpoint against a hostile or broken server (chat_hostile.py, loopback):
# an endless stream is stopped at the answer bound with a line saying so and the conversation goes
# on; tool calls streamed as deltas are shown and kept (an id that changes mid-stream or a call out
# of order is a malformed stream); finish_reason "length" with room in the context names the
# server's limit; absurd usage counts are not believed; an SSE "event: error" shows the server's
# reason; lines may end with CR; a stream labelled text/plain is read; a web page instead of the
# API says so; the reasoning on stderr is escaped in a file or a pipe; a redirect is not followed
# and names its target; a URL without a scheme is http (never ftp/dict); a long model id and a
# long key go whole, a key with a CR LF is refused; Ctrl-C before /models answered is a stop; a
# password in the URL never shows, and a key or password that would cross the network
# unencrypted (http:// to a host that is not loopback) draws a warning. A stream of keep-alives
# without an answer is stopped after K3_ENDPOINT_IDLE_SECS (a slow one that progresses is not); a
# /models list with a NUL or a lone surrogate in an id, an error body past 1 MiB and an error
# without a body after one with a message are each named for what they are. A lone UTF-16
# surrogate escape in a stream's JSON is one U+FFFD, not a malformed stream; the halves of a pair
# split between two events of one field are joined; a half left at a call's end is U+FFFD in
# that call's own box. The reasoning's token count is the server's
# usage.completion_tokens_details.reasoning_tokens. --endpoint URLs are
# read as libcurl reads them: a query, a fragment, IPv6 and loopback forms, encoded userinfo. A
# body compressed unasked is decoded; an error in a 200 answer (chat or /models) is that error,
# and "error": null is none; a call's arguments as an object are its text; finish_reason
# "content_filter" or "abort" is said and the reply kept interrupted; raw bytes that are not UTF-8
# are U+FFFD; a connection closed inside an event says so; a loopback server is reached without
# the environment's proxy.
. "$K3_SRC/tests/tui-lib.sh"

# a self-signed certificate for the server's TLS port, where openssl(1) is at hand
tls=""
if command -v openssl >/dev/null 2>&1 &&
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout "$K3_TMP/key.pem" \
        -out "$K3_TMP/cert.pem" >/dev/null 2>&1; then
    tls="$K3_TMP/cert.pem:$K3_TMP/key.pem"
fi
HOSTILE_TLS="$tls" /usr/bin/python3 "$K3_SRC/tests/chat_hostile.py" "$K3_TMP/port" "$K3_TMP/reqs" &
fpid=$!
trap 'tmux_end "$T"; kill $fpid 2>/dev/null; wait $fpid' EXIT
wait_until "the fake server's port in $K3_TMP/port" 10 test -s "$K3_TMP/port"
port=$(cat "$K3_TMP/port")
ep="http://127.0.0.1:$port"
cd "$K3_TMP" || exit 1
export XDG_STATE_HOME="$K3_TMP/state" HOME="$K3_TMP"

# an endless stream: stopped at 64 MiB (it took all the memory the server sent), the reply kept
# as interrupted, and the next message is answered
printf 'forever\nhi\n/save %s/forever.jsonl\n' "$K3_TMP" |
    timeout 300 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out1" 2>"$K3_TMP/err1"
check "an endless stream: the turn fails with the bound's reason" \
    grep -q "^k3chat: $ep/v1: the answer went past 64 MiB (reasoning, text and tool calls together) and was stopped (the conversation is kept" \
    "$K3_TMP/err1"
wait_until "the server's count of the bytes it sent" 30 test -s "$K3_TMP/reqs.forever"
sent=$(cat "$K3_TMP/reqs.forever")
check "... the client stopped reading soon after the bound ($sent bytes sent)" [ "$sent" -lt $((96 << 20)) ]
check "... and the next message is answered" grep -q "^ok$" "$K3_TMP/out1"
check "... the cut reply is saved as interrupted, before the next turn" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
a = [x for x in m if x.get("role") == "assistant"]
sys.exit(not (len(a) == 2 and a[0].get("interrupted") and len(a[0]["content"]) <= 64 << 20
              and set(a[0]["content"]) == {"B"} and a[1]["content"] == "ok"))' "$K3_TMP/forever.jsonl"

# a stream that goes on with keep-alive comments and empty deltas but no answer: it held the chat
# for ever (the 300 s without a byte never came); K3_ENDPOINT_IDLE_SECS counts parts of the answer
printf 'keepalive\nhi\n/save %s/ka.jsonl\n' "$K3_TMP" |
    K3_ENDPOINT_IDLE_SECS=3 timeout 100 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out1k" 2>"$K3_TMP/err1k"
check "keep-alives without an answer: stopped after K3_ENDPOINT_IDLE_SECS, saying so" grep -q \
    "^k3chat: $ep/v1: no part of the answer came for 3 s (K3_ENDPOINT_IDLE_SECS) and the request was stopped (the conversation is kept" \
    "$K3_TMP/err1k"
check "... the next message is answered" grep -q "^ok$" "$K3_TMP/out1k"
check "... and what came is kept as interrupted" /usr/bin/python3 -c '
import json, sys
a = [x for x in map(json.loads, open(sys.argv[1])) if x.get("role") == "assistant"]
sys.exit(not (len(a) == 2 and a[0]["content"] == "ka-" and a[0].get("interrupted") and a[1]["content"] == "ok"))' \
    "$K3_TMP/ka.jsonl"
# a slow stream whose every second brings a part is not cut by the same deadline (5 s here)
printf 'drip\n' | K3_ENDPOINT_IDLE_SECS=5 timeout 100 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out1d" 2>"$K3_TMP/err1d"
check "a part a second for 8 s: the whole answer, under a 5 s deadline" grep -qx "d0d1d2d3d4d5d6d7-end" "$K3_TMP/out1d"
# with a message typed: that error alone (line mode added "no model is loaded", none was to be)
printf 'hi\n' | K3_ENDPOINT_IDLE_SECS=0 "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err1z"
check "K3_ENDPOINT_IDLE_SECS=0 is refused at start, that error alone" \
    grep -qx "k3chat: K3_ENDPOINT_IDLE_SECS: '0' is not an integer in 1..86400" "$K3_TMP/err1z"
check "... and no other line ($(cat "$K3_TMP/err1z"))" [ "$(wc -l <"$K3_TMP/err1z")" -eq 1 ]
# the full-screen chat after that failure: a message sent said "no model is loaded, so nothing
# can answer" (no model was to be loaded) and the message was gone. Now it names the connection
# (not its URL: a password may be in it) and the error, says what to do, and the message is back
# in the input line
tui_start 120 30 K3_ENDPOINT_IDLE_SECS=0 -- "$K3CHAT --endpoint $ep; echo EXIT=\$?; sleep 60"
wait_for "is not an integer in 1..86400" 10
type_line "my question"
check "--endpoint failed at start, full screen: a message sent names the connection and the error" \
    wait_for "nothing can answer: the --endpoint connection did not start (K3_ENDPOINT_IDLE_SECS" 10
check "... says what to do" has "quit (Ctrl-D) and start k3chat again"
check "... the message is back in the input line" wait_input "my question" 5
check "... the status bar names no model" has "remote: did not start"
keys C-u
type_line "/save $K3_TMP/fz.jsonl"
check "... a command says the engine did not start, and why" \
    wait_for "not done: the engine did not start (K3_ENDPOINT_IDLE_SECS" 10
check "... nowhere 'no model is loaded'" hasnt "no model"
keys C-d
check "... and Ctrl-D quits with 1" wait_for "EXIT=1" 10

# tool calls streamed as OpenAI deltas: shown as the local engine shows them, kept with the reply
# (saved, sent back on the next turn); they were dropped (an empty answer). A call whose id changes
# mid-stream, or one that opens out of order, is a malformed stream. The turn before (thinkevil)
# has an answer and reasoning: the calls' reply, which has neither, was saved and sent back with
# that turn's text as its own (the buffers emptied by length only).
: >"$K3_TMP/reqs"
printf 'thinkevil\ntools\n/save %s/tools.jsonl\nhi\ntoolid\ntoolidx\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8" 2>"$K3_TMP/err8"
check "tool calls: shown as '-> name(arguments)'" \
    grep -qx -e '-> get_weather({"city": "Paris"})' "$K3_TMP/out8"
check "... the second one too" grep -qx -e '-> get_time({})' "$K3_TMP/out8"
check "... kept with the reply in the transcript" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][3:]
c = m[1].get("tool_calls", [])
sys.exit(not (m[1]["role"] == "assistant" and not m[1].get("interrupted") and
              [(x["id"], x["function"]["name"], x["function"]["arguments"]) for x in c] ==
              [("call_a", "get_weather", "{\"city\": \"Paris\"}"), ("call_c", "get_time", "{}")]))' \
    "$K3_TMP/tools.jsonl"
check "... with no text of the turn before as its own (content and reasoning empty)" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
sys.exit(not ("end" in m[1]["content"] and m[3]["content"] == "" and not m[3].get("reasoning_content")))' \
    "$K3_TMP/tools.jsonl"
check "... and sent back with the next message" /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (len(r) >= 3 and r[2]["n_calls"] == 2))' "$K3_TMP/reqs"
printf 'jsontools\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8j" 2>"$K3_TMP/err8j"
check "a tool call in a JSON answer (not a stream): shown too" grep -qx -e '-> lookup({"q": 1})' "$K3_TMP/out8j"
# a call's arguments are shown as the model wrote them: in a code block of their own after the
# text (a list left open included), never as Markdown (\\ showed as \, \" as ", *x* in italics,
# `id` as code, "# x" as a heading in the full-screen chat), a control character escaped even in
# line mode's answer into a pipe (it went out raw); the export has them in a fence longer than the
# run of four backticks inside
printf 'toolmd\n/export %s/toolmd.md\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8m" 2>"$K3_TMP/err8m"
printf '%s\n' 'Steps:' '' '- first' '' '```tool-call' '-> shell({"cmd": "a \\ \"q\" *x* `id` ````",' \
    '    # x' '    "bell": "\x07"})' '```' >"$K3_TMP/want8m"
check "line mode: a tool call's arguments exactly as written, in a code block of their own" \
    cmp "$K3_TMP/want8m" "$K3_TMP/out8m"
printf '%s\n' '`````json' '{"cmd": "a \\ \"q\" *x* `id` ````",' '# x' '"bell": "\x07"}' '`````' >"$K3_TMP/want8e"
check "/export: the arguments in a fence longer than their backticks, the control escaped" \
    /usr/bin/python3 -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open(sys.argv[2]).read())' \
    "$K3_TMP/want8e" "$K3_TMP/toolmd.md"
check "a call's id that changes mid-stream: refused, saying so" grep -qF \
    "malformed stream: tool call 0's id changed from 'call_a' to 'call_b' (the conversation is kept" "$K3_TMP/err8"
check "... what came of it is shown closed" grep -qx -e '-> get_weather({"city": )' "$K3_TMP/out8"
check "a call that opens at index 3: refused" grep -qF \
    "malformed stream: tool call index 3 out of order (calls open in order from 0, 0 came so far, at most 128)" \
    "$K3_TMP/err8"

# a tool call cut by finish_reason "length" (max_tokens inside it, doc/tool-calls.md): shown, but
# not kept as a call, as the local engine keeps whole calls only (it was kept with arguments that
# are not JSON and went back to the server with every later message); the whole call before it stays
: >"$K3_TMP/reqs"
printf 'toolcut\n/save %s/toolcut.jsonl\nhi\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8c" 2>"$K3_TMP/err8c"
check "a call cut by length: shown as far as it came" grep -qxF -e '-> get_time({"days": )' "$K3_TMP/out8c"
check "... the answer is said to be cut off" grep -q "^k3chat: the answer was cut off" "$K3_TMP/err8c"
check "... the transcript keeps the whole call only" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
c = m[1].get("tool_calls") or []
sys.exit(not ([(x["id"], x["function"]["arguments"]) for x in c] == [("call_w", "{\"city\": \"Paris\"}")]))' \
    "$K3_TMP/toolcut.jsonl"
check "... and so does the next request" /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (len(r) == 2 and r[1]["n_calls"] == 1))' "$K3_TMP/reqs"

# lone UTF-16 surrogates in the JSON of a stream (\ud83d without its low half, \udcff alone), as
# Python's json.dumps writes a string that holds one: each is one U+FFFD and the turn stands (the
# whole turn was refused as 'malformed stream: an event is not a JSON object'); a pair is its
# character and an escaped backslash before "ud800" is text
printf 'surrogate\n/save %s/surr.jsonl\nsurrerr\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8s" 2>"$K3_TMP/err8s"
check "lone surrogates in a stream: the answer comes, each one U+FFFD" \
    grep -qxF "$(printf 'a\357\277\275 b\360\237\230\200 c\357\277\275 d\\ud800 e')" "$K3_TMP/out8s"
check "... in a tool call's arguments too" \
    grep -qxF -e "$(printf -- '-> note({"t": "x\357\277\275 y"})')" "$K3_TMP/out8s"
check "... no stream is called malformed" sh -c "! grep -q malformed '$K3_TMP/err8s'"
check "... kept whole in the transcript: reasoning, answer, call" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
odd = "a\ufffd b\U0001F600 c\ufffd d\\ud800 e"
c = m[1].get("tool_calls") or [{}]
sys.exit(not (m[1]["content"] == odd and m[1].get("reasoning_content") == odd and not m[1].get("interrupted") and
              c[0].get("function", {}).get("arguments") == "{\"t\": \"x\ufffd y\"}"))' "$K3_TMP/surr.jsonl"
check "an error event whose message holds one: the message, with U+FFFD" grep -qF \
    "$(printf 'the server failed mid-answer: bad \357\277\275 byte (the conversation')" "$K3_TMP/err8s"

# the halves of a surrogate pair split between two events of one field, as a token that ends
# between them is streamed: joined into the character, as a JavaScript client shows it (each half
# was one U+FFFD); a half without its other half is still U+FFFD, at the answer's end too
printf 'surrsplit\n/save %s/split.jsonl\nsurrend\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8h" 2>"$K3_TMP/err8h"
check "a pair split between two content events: the character" grep -qxF \
    "$(printf 'a\360\237\230\200b \360\237\230\200 c\357\277\275d \357\277\275e\357\277\275f\357\277\275')" \
    "$K3_TMP/out8h"
check "... in the reasoning, in the arguments, and U+FFFD for each half alone: the transcript" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
c = m[1].get("tool_calls") or [{}]
sys.exit(not (m[1]["content"] == "a\U0001F600b \U0001F600 c\ufffdd \ufffde\ufffdf\ufffd" and
              m[1].get("reasoning_content") == "r\U0001F600s!" and
              c[0].get("function", {}).get("arguments") == "{\"t\": \"x\U0001F600y\"}"))' "$K3_TMP/split.jsonl"
check "... the call shows whole" grep -qxF -e "$(printf -- '-> note({"t": "x\360\237\230\200y"})')" "$K3_TMP/out8h"
check "a high half before U+100400, and one that ends the answer: U+FFFD; U+100400 is itself" grep -qxF \
    "$(printf 'g\357\277\275\364\200\220\200hi\357\277\275')" "$K3_TMP/out8h"

# calls whose arguments end in a high half with no low half after it: U+FFFD in each call's own
# box, shown as kept. A call named only after a later one came (its box after that one's) put its
# U+FFFD in the box open at the answer's end (another call's), and a box closed by the next call
# never showed its own
printf 'surrcalls\n/save %s/calls.jsonl\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out8c" 2>"$K3_TMP/err8c"
for line in '-> two({"b": "q\357\277\275)' '-> one({"a": "p\357\277\275)' '-> three({"c": "r\357\277\275)'; do
    check "a call's half alone at its end: U+FFFD in its own box ($line)" \
        grep -qxF -e "$(printf -- "$line")" "$K3_TMP/out8c"
done
check "... and in the calls kept, in their order" /usr/bin/python3 -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
c = [(t["function"]["name"], t["function"]["arguments"]) for t in m[1].get("tool_calls") or []]
sys.exit(c != [("one", "{\"a\": \"p\ufffd"), ("two", "{\"b\": \"q\ufffd"), ("three", "{\"c\": \"r\ufffd")])' \
    "$K3_TMP/calls.jsonl"

# finish_reason "length" with the context far from full: the server's own default max_tokens
# (SGLang's is 128); line mode said 'the context is full (4096 tokens); /forget drops ...'
printf 'length\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out9" 2>"$K3_TMP/err9"
check "finish_reason length, 8 of 4096 tokens used: the server's limit, not a full context" grep -qx \
    "k3chat: the answer was cut off: the server stopped it at a length limit after 3 tokens (its default max_tokens: the context has room); --max-tokens N asks for more" \
    "$K3_TMP/err9"
check "... and the answer is shown" grep -qx "cut" "$K3_TMP/out9"

# usage figures past any real count (2^31 - 1 each): not believed (prompt + completion overflowed
# an int: a negative context figure, and UBSan stops the sanitizer build there)
printf 'usage\n/stats\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out10" 2>"$K3_TMP/err10"
check "usage of 2^31 - 1 tokens: the answer comes" grep -qx "ok-usage" "$K3_TMP/out10"
check "... and /stats counts the context as nothing known" grep -q "^k3chat: context: 0 of 4096 tokens" "$K3_TMP/err10"

# usage.completion_tokens_details.reasoning_tokens: the server's count of the reasoning (the pieces
# streamed were counted as tokens: 3 reasoning + 7 answer where the server said 7 + 3)
printf 'rtokens\n/stats\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out10r" 2>"$K3_TMP/err10r"
check "reasoning_tokens 7 of 10: /stats says 7 reasoning + 3 answer tokens" \
    grep -q "^k3chat: last turn: 7 reasoning + 3 answer tokens" "$K3_TMP/err10r"

# an API key of 3000 bytes (a JWT can run to kilobytes) goes whole: it was cut at 578 bytes
: >"$K3_TMP/reqs"
key=$(/usr/bin/python3 -c 'print("k" * 3000)')
printf 'hi\n' | K3_API_KEY="$key" timeout 60 "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>&1
check "a 3000-byte API key is sent whole" /usr/bin/python3 -c '
import json, sys
sys.exit(json.loads(open(sys.argv[1]).readline())["auth"] != "Bearer " + "k" * 3000)' "$K3_TMP/reqs"

# SSE "event: error": its data is the reason (it was dropped: 'the stream ended before ...')
printf 'evterr\nevterr2\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out2" 2>"$K3_TMP/err2"
check "event: error: the server's reason is shown" \
    grep -q "^k3chat: $ep/v1: the server failed mid-answer: quota exceeded for this key (the conversation" "$K3_TMP/err2"
check "... an error event without data says so" \
    grep -q "^k3chat: $ep/v1: the server failed mid-answer: (no message) (the conversation" "$K3_TMP/err2"
check "... and what came before it is shown" grep -q "^partial" "$K3_TMP/out2"

# a redirect is not followed (the key would go to the other host): the message says where to
printf 'redirect\n' | K3_API_KEY=k3-secret-key timeout 60 "$K3CHAT" --endpoint "$ep" --plain \
    >/dev/null 2>"$K3_TMP/err3"
check "a redirect names its target and is not followed" grep -qF \
    "k3chat: the server answered 307, a redirect to http://127.0.0.2:9/v1/chat/completions, which k3chat does not follow" \
    "$K3_TMP/err3"
check "... a key to 127.0.0.1 draws no warning" sh -c "! grep -q warning '$K3_TMP/err3'"
check "... and the key is not shown" sh -c "! grep -q k3-secret-key '$K3_TMP/err3'"
check "... the line gives the API base to use it" grep -qF \
    "which k3chat does not follow: give --endpoint http://127.0.0.2:9/v1 to use it" "$K3_TMP/err3"
# /models redirected: the base to give is the target without /models (the line said to give the
# whole target, which as a base asked /api/v1/models/models)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/redir/v1" --plain >/dev/null 2>"$K3_TMP/err3m"
check "a redirect of /models: the base to give, its query kept" grep -qF \
    "which k3chat does not follow: give --endpoint http://127.0.0.2:9/api/v1?api-version=2 to use it" \
    "$K3_TMP/err3m"

# a URL without a scheme is http: libcurl guessed the protocol from the host's name (ftp.HOST spoke
# FTP to the HTTP server and timed out; dict.HOST, ldap.HOST likewise)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "ftp.localhost:$port" --plain >"$K3_TMP/out11" 2>"$K3_TMP/err11"
check "--endpoint ftp.localhost:PORT (no scheme) speaks http" grep -qx "ok" "$K3_TMP/out11"

# an error whose body is over the 1 MiB read: the status was lost ('the answer is over 1048576 bytes
# and is not a stream')
printf 'err500big\nhi\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out12b" 2>"$K3_TMP/err12b"
check "a 500 with an 8 MiB body: the status is named" grep -qF \
    "k3chat: $ep/v1: the server answered 500 with a body of over 1048576 bytes, not read (the conversation is kept" \
    "$K3_TMP/err12b"
check "... and the next message is answered" grep -qx "ok" "$K3_TMP/out12b"

# an error without a body after one with a message: the earlier message was shown again (the
# buffer kept it past the new body's length)
printf 'err400\nerr502\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err12e"
check "a 400 with its message: shown" grep -qF "k3chat: the server answered 400: the first error" "$K3_TMP/err12e"
check "... then a 502 without a body: '(no message)', not the 400's" grep -qF \
    "k3chat: the server answered 502: (no message)" "$K3_TMP/err12e"

# a 400 whose error comes as an event ("data: {...}"): its message (the line showed 'data: ' and the
# JSON raw, the body's blank line inside it); a 200 without a body says so (it was 'the stream
# ended without one data: event', of a stream that never began)
printf 'sse400\nempty200\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err12d"
check "a 400 sent as an event: its message" grep -qxF \
    "k3chat: the server answered 400: bad request x (the conversation is kept: /retry sends the message again)" \
    "$K3_TMP/err12d"
check "a 200 with an empty body: said so" grep -qF \
    "k3chat: $ep/v1: the server answered 200 with an empty body (the conversation" "$K3_TMP/err12d"

# a URL that names a web page, not the API: the lines say so (they said 'names no model: use --model
# NAME', then 'malformed answer: no choices[0].message in <!doctype html>...')
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/html" --plain >/dev/null 2>"$K3_TMP/err12"
check "a web page at /models: not JSON, is URL the API base?" grep -qF \
    "k3chat: $ep/html/models answered text/html; charset=utf-8, not JSON: is $ep/html the server's API base (it usually ends in /v1)?" \
    "$K3_TMP/err12"
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/html" --model m --plain >/dev/null 2>"$K3_TMP/err13"
check "... and with --model, at the chat request" grep -qF \
    "k3chat: $ep/html: answered text/html; charset=utf-8, not JSON: is $ep/html the server's API base" \
    "$K3_TMP/err13"

# a /models answer that is JSON with one bad string: a NUL in another model's id made the whole
# list 'not JSON: is URL the server's API base?'; a lone surrogate (vLLM's escape for a path's
# Latin-1 byte) is named by the parser's reason, not by that question
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/nulid/v1" --plain >"$K3_TMP/out12n" 2>"$K3_TMP/err12n"
check "/models with a NUL in a later model's id: the first model is used" grep -qx "ok" "$K3_TMP/out12n"
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/surr/v1" --plain >/dev/null 2>"$K3_TMP/err12s"
check "/models with a lone surrogate in an id: the parser's reason, not the API-base question" grep -qF \
    "k3chat: $ep/surr/v1/models answered JSON that does not parse (line 1 column " "$K3_TMP/err12s"
check "... naming the escape" grep -qF "invalid Unicode '\uDCFF'" "$K3_TMP/err12s"

# an event stream labelled text/plain (a proxy's doing) is read as a stream (it was parsed as JSON)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/textplain/v1" --plain >"$K3_TMP/out14" 2>"$K3_TMP/err14"
check "a stream labelled text/plain: read as a stream" grep -qx "ok-plain" "$K3_TMP/out14"

# lines ended by a lone CR (the event-stream format allows LF, CR LF and CR): the stream was one
# endless line; CR LF cut between two reads still counts as one end
printf 'cr\ncrlf\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out15" 2>"$K3_TMP/err15"
check "a stream whose lines end with a lone CR is read" grep -qx "ok-cr" "$K3_TMP/out15"
check "... and one whose CR LF ends are cut between reads" grep -qx "ok-crlf" "$K3_TMP/out15"

# line mode with stderr a file or a pipe: the reasoning goes there among the notices and is escaped
# (it went raw: a log of stderr shown later wrote the clipboard); the answer on stdout is the data
noesc() { ! grep -q "$(printf '\033')" "$1"; } # no raw ESC byte in file $1
printf 'thinkevil\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/out16" 2>"$K3_TMP/err16"
check "stderr a file: the reasoning's commands show escaped" \
    grep -qF 'r \x1B]52;c;ZXZpbA==\x07 \x1B]0;T\x07 \u009B1m end' "$K3_TMP/err16"
check "... no raw ESC is in the file" noesc "$K3_TMP/err16"
{ printf 'thinkevil\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain 2>&1 >/dev/null; } | cat >"$K3_TMP/err16p"
check "... through a pipe: escaped too" grep -qF 'r \x1B]52;c;ZXZpbA==\x07' "$K3_TMP/err16p"
check "... with no raw ESC" noesc "$K3_TMP/err16p"
check "... and the answer on stdout is the model's, byte for byte" \
    [ "$(cat "$K3_TMP/out16")" = "$(printf 'a \033]0;A\007 end')" ]

# a stream of JSON lines without "data:": said so (it was 'the stream ended before the answer was
# complete', as for a cut stream)
printf 'nodata\ncut\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err18"
check "a stream without one data: line says so" grep -qF \
    "k3chat: $ep/v1: the stream ended without one 'data:' event: is it an OpenAI-compatible server?" "$K3_TMP/err18"
check "... a stream cut after its first event still says 'ended before the answer was complete'" grep -qF \
    "k3chat: $ep/v1: the stream ended before the answer was complete" "$K3_TMP/err18"

# a model id longer than 255 bytes: requested whole (it was cut inside a character and every turn
# failed with 'out of memory')
: >"$K3_TMP/reqs"
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/long/v1" --plain >"$K3_TMP/out4" 2>"$K3_TMP/err4"
check "a 302-byte model id: the turn is answered" grep -q "^ok$" "$K3_TMP/out4"
check "... and the request names the model whole" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
sys.exit(r["model"] != "mm" + "\u00e9" * 150)' "$K3_TMP/reqs"

# a --model that is not UTF-8: said so (json_pack refused it and the line was 'out of memory')
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --model "$(printf 'm\377')" --plain >/dev/null 2>"$K3_TMP/err17"
check "a --model that is not UTF-8: said so" grep -q "the model name (--model) is not valid UTF-8" "$K3_TMP/err17"

# a password in the URL: sent (Basic authentication) but never shown; http:// to an address that
# is not loopback (0.0.0.0 reaches this machine's 127.0.0.1 on Linux) draws a warning
ep0="http://k3user:pw-secret@0.0.0.0:$port"
printf 'evterr\n' | timeout 60 "$K3CHAT" --endpoint "$ep0" --plain >/dev/null 2>"$K3_TMP/err5"
check "a password in the URL: the warning names the host" grep -q \
    "^k3chat: warning: the password in the URL goes to 0.0.0.0 over plain http://" "$K3_TMP/err5"
check "... the error line shows the URL without it" \
    grep -q "^k3chat: http://0.0.0.0:$port/v1: the server failed mid-answer: quota" "$K3_TMP/err5"
check "... and the password shows nowhere" sh -c "! grep -q pw-secret '$K3_TMP/err5'"
check "... it went to the server as Basic authentication" grep -q '"auth": "Basic ' "$K3_TMP/reqs"
printf 'hi\n' | K3_API_KEY=k3-secret-key timeout 60 "$K3CHAT" --endpoint "http://0.0.0.0:$port" --plain \
    >/dev/null 2>"$K3_TMP/err6"
check "an API key over http:// to 0.0.0.0: a warning" \
    grep -q "^k3chat: warning: the API key goes to 0.0.0.0 over plain http://" "$K3_TMP/err6"
printf 'hi\n' | K3_API_KEY=k3-secret-key timeout 60 "$K3CHAT" --endpoint "0.0.0.0:$port" --plain \
    >"$K3_TMP/out6b" 2>"$K3_TMP/err6b"
check "... without a scheme (libcurl takes http://): a warning too" \
    grep -q "^k3chat: warning: the API key goes to 0.0.0.0 over plain http://" "$K3_TMP/err6b"
check "... and the chat works" grep -q "^ok$" "$K3_TMP/out6b"
: >"$K3_TMP/reqs"
printf 'hi\n' | K3_API_KEY="$(printf 'k3-key\r\nX-Other: 1')" "$K3CHAT" --endpoint "$ep" --plain >/dev/null 2>"$K3_TMP/err6c"
check "a key with a CR LF (libcurl would send the rest as another header): refused, status 2" [ $? -eq 2 ]
check "... saying which byte" grep -q "^k3chat: --api-key (or K3_API_KEY): a key is printable ASCII (byte 6 is 0x0D)" \
    "$K3_TMP/err6c"
check "... and nothing was sent" [ ! -s "$K3_TMP/reqs" ]
printf 'hi\n' | K3_API_KEY=k3-secret-key timeout 60 "$K3CHAT" --endpoint "http://localhost:$port" --plain \
    >/dev/null 2>"$K3_TMP/err7"
check "... to localhost: none" sh -c "! grep -q warning '$K3_TMP/err7'"

# --endpoint is read by libcurl's URL parser, the one that connects (a reading by hand beside it
# put a query or a fragment before each request's path, kept "/v1" before an explicit
# "/chat/completions", cut a URL at 1 KiB, took 127.1 and ::ffff:127.0.0.1 for hosts that are not
# loopback and a user name alone for no secret). url_to URL [KEY]: 'hi' to URL (with API key KEY);
# url_went CHAT MODELS: the answer came, the chat request went to CHAT and /models to MODELS
url_to() {
    : >"$K3_TMP/reqs"
    : >"$K3_TMP/reqs.get"
    printf 'hi\n' | K3_API_KEY="${2:-}" timeout 60 "$K3CHAT" --endpoint "$1" --plain >"$K3_TMP/outu" 2>"$K3_TMP/erru"
}
url_went() {
    grep -qx ok "$K3_TMP/outu" && [ "$(head -n 1 "$K3_TMP/reqs.get")" = "$2" ] &&
        [ "$(/usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["path"])' \
            "$K3_TMP/reqs")" = "$1" ]
}
nowarn() { ! grep -q warning "$K3_TMP/erru"; }
url_to "$ep?api-version=2"
check "a URL with a query and no path: /v1, the query after each request's path" \
    url_went "/v1/chat/completions?api-version=2" "/v1/models?api-version=2"
url_to "$ep/v1/?api-version=2#top"
check "... with /v1/ and a fragment: the fragment is not sent" \
    url_went "/v1/chat/completions?api-version=2" "/v1/models?api-version=2"
url_to "$ep/v1#top"
check "a fragment alone is dropped" url_went "/v1/chat/completions" "/v1/models"
url_to "$ep/chat/completions"
check "a URL that names /chat/completions at the root: the API is at the root" \
    url_went "/chat/completions" "/models"
url_to "$ep/v1/chat/completions/"
check "... /v1/chat/completions/: the base is /v1" url_went "/v1/chat/completions" "/v1/models"
url_to "$ep//"
check "a path of slashes only: /v1" url_went "/v1/chat/completions" "/v1/models"
long=$(/usr/bin/python3 -c 'print("/" + "p" * 1100)')
url_to "$ep$long/v1"
check "a 1.1 KiB path goes whole (it was cut at 1 KiB)" url_went "$long/v1/chat/completions" "$long/v1/models"
url_to "http://127.1:$port" k3-secret-key
check "an API key to http://127.1 (libcurl's 127.0.0.1): answered" url_went "/v1/chat/completions" "/v1/models"
check "... and no warning: it is loopback" nowarn
url_to "http://[::ffff:127.0.0.1]:$port" k3-secret-key
check "an API key to [::ffff:127.0.0.1] (IPv4-mapped loopback): answered, no warning" \
    sh -c "grep -qx ok '$K3_TMP/outu' && ! grep -q warning '$K3_TMP/erru'"
url_to "http://k3-token@0.0.0.0:$port"
check "a user name alone in the URL (a key sent as Basic authentication): a warning" grep -q \
    "^k3chat: warning: the user name in the URL goes to 0.0.0.0 over plain http://" "$K3_TMP/erru"
check "... and it is sent" grep -q '"auth": "Basic ' "$K3_TMP/reqs"
url_to "http://k3%40user:pw%3Asecret@0.0.0.0:$port/v1"
check "a user and password with a percent-encoded @ and : go decoded as Basic authentication" \
    grep -qF "\"auth\": \"Basic $(printf 'k3@user:pw:secret' | base64)\"" "$K3_TMP/reqs"
check "... with the warning about the password" grep -q \
    "^k3chat: warning: the password in the URL goes to 0.0.0.0 over plain http://" "$K3_TMP/erru"
check "... which shows nowhere" sh -c "! grep -q 'pw%3Asecret\|pw:secret' '$K3_TMP/erru'"
printf 'evterr\n' | timeout 60 "$K3CHAT" --endpoint "http://u:pw-secret@127.0.0.1:$port/v1/?api-version=2" --plain \
    >/dev/null 2>"$K3_TMP/erru"
check "an error line shows the base without the password or the query" \
    grep -q "^k3chat: http://127.0.0.1:$port/v1: the server failed mid-answer: quota" "$K3_TMP/erru"
if [ -s "$K3_TMP/port.6" ]; then
    port6=$(cat "$K3_TMP/port.6")
    url_to "http://k3user:pw-secret@[::1]:$port6" k3-secret-key
    check "an IPv6 literal [::1] with a user and password: answered at /v1" \
        url_went "/v1/chat/completions" "/v1/models"
    check "... no warning (loopback)" nowarn
    printf 'evterr\n' | timeout 60 "$K3CHAT" --endpoint "http://k3user:pw-secret@[::1]:$port6/v1/" --plain \
        >/dev/null 2>"$K3_TMP/erru"
    check "... its error line names [::1] without the password" \
        grep -q "^k3chat: http://\[::1\]:$port6/v1: the server failed mid-answer" "$K3_TMP/erru"
else
    echo "SKIP: no IPv6 loopback here ([::1] endpoints)"
fi

# calls_kept FILE LIST: the tool calls of transcript FILE's assistant messages, in order, as
# (id, name, arguments) are the Python literal LIST
calls_kept() {
    /usr/bin/python3 -c '
import ast, json, sys
m = [x for x in map(json.loads, open(sys.argv[1])) if x.get("role") == "assistant"]
c = [(t["id"], t["function"]["name"], t["function"]["arguments"]) for x in m for t in x.get("tool_calls") or []]
sys.exit(c != ast.literal_eval(sys.argv[2]))' "$1" "$2"
}

# a body compressed though the request asked for none (a proxy's gzip): decoded (the stream was
# read as its compressed bytes, 'without one data: event', an error as '\x1F\x8B\x08')
printf 'gzip\ngzerr\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outz" 2>"$K3_TMP/errz"
check "a gzip-compressed stream is read" grep -qx "ok-gzip" "$K3_TMP/outz"
check "... a gzip-compressed 429: its message and the wait asked" grep -qF \
    "k3chat: the server answered 429: rate limited (it asks to wait 7 s before retrying) (the conversation" \
    "$K3_TMP/errz"
check "... and no compression was asked" [ "$(sort -u "$K3_TMP/reqs.enc")" = "['identity']" ]

# an error as a 200 answer (a gateway's): its message (the chat said 'malformed answer: no
# choices[0].message', /models 'names no model: use --model NAME'); "error": null beside an answer
# is no error (it failed the turn as 'the server failed mid-answer: (no message)')
printf 'err200\nerrnull\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/oute" 2>"$K3_TMP/erre"
check "200 with an error body: the server's message" grep -qF \
    "k3chat: $ep/v1: the server answered 200 with an error: model overloaded (the conversation" "$K3_TMP/erre"
check "... events with \"error\": null are an answer" grep -qx "ok-errnull" "$K3_TMP/oute"
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/err200/v1" --plain >/dev/null 2>"$K3_TMP/erre2"
check "/models answering 200 with an error: the server's message" grep -qF \
    "k3chat: $ep/err200/v1/models answered 200 with an error: invalid api key" "$K3_TMP/erre2"

# a server without a model list (404 at /models): without --model the line names the request and
# the way on (it said only 'the server answered 404: Not Found'); with --model no line at all (each
# start showed that error for a chat that worked)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/nomodels/v1" --plain >/dev/null 2>"$K3_TMP/errm"
check "no model list, no --model: the request named, --model suggested" grep -qF \
    "k3chat: $ep/nomodels/v1/models: the server answered 404: Not Found (is that the API base? a server without a model list needs --model NAME)" \
    "$K3_TMP/errm"
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/nomodels/v1" --model m --plain \
    >"$K3_TMP/outm2" 2>"$K3_TMP/errm2"
check "... with --model: answered" grep -qx "ok" "$K3_TMP/outm2"
check "... and no error line ($(head -c 200 "$K3_TMP/errm2"))" [ ! -s "$K3_TMP/errm2" ]

# a model list past 1 MiB (a router's hundreds of models): read (it failed as 'the answer is over
# 1048576 bytes and is not a stream' and no model was known)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "$ep/biglist/v1" --plain >"$K3_TMP/outbl" 2>"$K3_TMP/errbl"
check "a 2 MB model list: its first model answers" grep -qx "ok" "$K3_TMP/outbl"
check "... no error line ($(head -c 200 "$K3_TMP/errbl"))" [ ! -s "$K3_TMP/errbl" ]

# a call's arguments as a JSON object instead of its text, in a stream and in a JSON answer: that
# object's text (they were dropped: '-> get_weather()', kept with arguments "", which is no JSON)
printf 'argsobj\nargsobj\n/save %s/argsobj.jsonl\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outa" 2>"$K3_TMP/erra"
check "arguments as an object in a stream: shown as JSON text" \
    grep -qxF -e '-> get_weather({"city":"Paris"})' "$K3_TMP/outa"
check "... in a JSON answer too" grep -qxF -e '-> lookup({"q":1})' "$K3_TMP/outa"
check "... and kept as that text" calls_kept "$K3_TMP/argsobj.jsonl" \
    '[("call_w", "get_weather", "{\"city\":\"Paris\"}"), ("call_o", "lookup", "{\"q\":1}")]'

# two calls whose pieces come interleaved (the first's rest after the second began): each box shows
# its call whole, in order (the first showed '-> one({"x": )', the rest of it never, though kept)
printf 'interleave\n/save %s/inter.jsonl\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outil" 2>"$K3_TMP/erril"
check "interleaved calls: each shown whole, in order" [ "$(grep -e '^-> ' "$K3_TMP/outil")" = \
    "$(printf '%s\n' '-> one({"x": 1})' '-> two({"y": 2})')" ]
check "... and kept" calls_kept "$K3_TMP/inter.jsonl" \
    '[("call_1", "one", "{\"x\": 1}"), ("call_2", "two", "{\"y\": 2}")]'

# tool-call deltas without an "index" (each call whole in a chunk, as Gemini's OpenAI compatibility
# sends them): a new call for each new id, a piece without one continues the last (the turn failed
# as 'malformed stream: a tool call delta has no index')
printf 'noindex\n/save %s/noindex.jsonl\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outni" 2>"$K3_TMP/errni"
check "calls without an index: both shown" sh -c "grep -qxF -e '-> one({\"a\": 1})' '$K3_TMP/outni' &&
    grep -qxF -e '-> two({\"b\": 2})' '$K3_TMP/outni'"
check "... and kept" calls_kept "$K3_TMP/noindex.jsonl" \
    '[("call_1", "one", "{\"a\": 1}"), ("call_2", "two", "{\"b\": 2}")]'

# finish_reason "content_filter" or "abort": the server, not the model, ended the answer; a line says
# so and the reply is kept marked interrupted (it showed and saved as a whole answer)
printf 'filter\nabort\n/save %s/filter.jsonl\n' "$K3_TMP" |
    timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outf" 2>"$K3_TMP/errf"
check "content_filter: a line names the filter" grep -qF \
    "k3chat: $ep/v1: the server's content filter withheld the rest of the answer (finish_reason 'content_filter'" \
    "$K3_TMP/errf"
check "... abort: the server ended it" grep -qF \
    "k3chat: $ep/v1: the server ended the answer before the model did (finish_reason 'abort'" "$K3_TMP/errf"
check "... both replies shown and kept, marked interrupted" /usr/bin/python3 -c '
import json, sys
a = [x for x in map(json.loads, open(sys.argv[1])) if x.get("role") == "assistant"]
sys.exit(not (len(a) == 2 and all(x["content"] == "part" and x.get("interrupted") for x in a)))' \
    "$K3_TMP/filter.jsonl"

# bytes that are not UTF-8 in a stream's JSON (a token's bytes written raw): U+FFFD each, the turn
# stands (jansson refused the event and the turn failed as a malformed stream); a connection that
# closes inside an event says so (it was 'malformed stream: an event is not a JSON object')
printf 'rawutf8\nmidcut\n' | timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outu8" 2>"$K3_TMP/erru8"
check "raw bytes that are not UTF-8: U+FFFD each" \
    grep -qxF "$(printf 'a\357\277\275b\357\277\275c')" "$K3_TMP/outu8"
check "... no malformed stream" sh -c "! grep -q malformed '$K3_TMP/erru8'"
check "a connection closed inside an event: said so" grep -qF \
    "k3chat: $ep/v1: the stream ended inside an event, before the answer was complete (premature end of input" \
    "$K3_TMP/erru8"

# "data: [DONE]", or a finish_reason and its usage without "[DONE]", and the connection left open
# after it (a proxy's keep-alive gone wrong): the answer ends there (the whole answer waited for
# K3_ENDPOINT_IDLE_SECS, then was called stopped and kept as interrupted)
printf 'donehang\nfinhang\n/stats\n/save %s/dh.jsonl\n' "$K3_TMP" |
    K3_ENDPOINT_IDLE_SECS=5 timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outdh" 2>"$K3_TMP/errdh"
check "[DONE] and the connection left open: the answer" grep -qx "ok-dh" "$K3_TMP/outdh"
check "... a finish_reason without [DONE] too" grep -qx "ok-fh" "$K3_TMP/outdh"
check "... whole: no error line" sh -c "! grep -q 'was stopped' '$K3_TMP/errdh'"
check "... the usage after the finish counted" grep -q "^k3chat: context: 7 of 4096 tokens" "$K3_TMP/errdh"
check "... and neither kept as interrupted" /usr/bin/python3 -c '
import json, sys
a = [x for x in map(json.loads, open(sys.argv[1])) if x.get("role") == "assistant"]
sys.exit(not ([x["content"] for x in a] == ["ok-dh", "ok-fh"] and not any(x.get("interrupted") for x in a)))' \
    "$K3_TMP/dh.jsonl"

# a proxy in the environment (http_proxy, all_proxy; nothing listens at 127.0.0.2:9): a server on
# this machine is reached directly (libcurl sent the request, the key with it, to the proxy)
printf 'hi\n' | http_proxy=http://127.0.0.2:9 HTTPS_PROXY=http://127.0.0.2:9 all_proxy=http://127.0.0.2:9 \
    K3_API_KEY=k3-secret-key timeout 60 "$K3CHAT" --endpoint "$ep" --plain >"$K3_TMP/outp" 2>"$K3_TMP/errp"
check "a proxy in the environment: a loopback server is answered directly" grep -qx "ok" "$K3_TMP/outp"

# TLS failures name their likely cause (OpenSSL's words alone: 'error:0A00010B:SSL
# routines::wrong version number' for https:// to a server that speaks plain HTTP)
printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "https://127.0.0.1:$port" --plain >/dev/null 2>"$K3_TMP/errt"
check "https:// to a plain-HTTP server: the handshake failed, use http://" grep -qF \
    "(the TLS handshake failed: a server that speaks plain HTTP, as vLLM and SGLang do unless given a certificate, needs http://)" \
    "$K3_TMP/errt"
if [ -n "$tls" ] && wait_until "the TLS port" 10 test -s "$K3_TMP/port.tls"; then
    printf 'hi\n' | timeout 60 "$K3CHAT" --endpoint "https://localhost:$(cat "$K3_TMP/port.tls")" --plain \
        >/dev/null 2>"$K3_TMP/errt2"
    check "a self-signed certificate: refused, saying what a certificate must be" grep -qF \
        "(the server's certificate was refused: it must name the URL's host, and a private CA's must be among the system's certificates, update-ca-certificates(8))" \
        "$K3_TMP/errt2"
else
    echo "SKIP: no openssl(1) here (a self-signed certificate)"
fi

# Ctrl-C while the server has not answered the model query (/models): 'stopped', not libcurl's
# 'Callback aborted' as an error line
tui_start 160 20 -- "$K3CHAT --endpoint $ep/hang/v1 --plain; echo EXIT=\$?; sleep 60"
type_line hi
wait_for "> hi" 10
keys C-c
check "Ctrl-C before the server answered: stopped" wait_for "k3chat: stopped" 30
check "... without libcurl's words" hasnt "Callback aborted"

# the full-screen chat: the status bar shows the URL without its password
tui_start 160 20 -- "$K3CHAT --endpoint $ep0; echo EXIT=\$?; sleep 60"
check "full-screen: the status bar shows the URL without the password" wait_for "remote http://0.0.0.0:$port/v1" 15
check "... the warning is shown" wait_for "warning: the password in the URL goes to 0.0.0.0" 5
check "... and the password is not" hasnt "pw-secret"
type_line tools
check "full-screen: a streamed tool call shows in the answer" wait_for '-> get_weather({"city": "Paris"})' 15
check "... the second one too" wait_for '-> get_time({})' 5
type_line toolmd
check "full-screen: a call's arguments as written, not rendered as Markdown" \
    wait_for '-> shell({"cmd": "a \\ \"q\" *x* `id` ````",' 15
check "... '# x' at a line's start too (no heading)" has '│     # x'
check "... and the control character escaped" has '"bell": "\x07"})'
keys C-d
check "... and Ctrl-D exits 0 (the warning is not a failure)" wait_for "EXIT=0" 10
# a model id with control characters (the server's /models): the status bar showed it without
# them ("m]0;EVILx"), not what the server named
tui_start 160 20 -- "$K3CHAT --endpoint $ep/ctlid/v1; echo EXIT=\$?; sleep 60"
check "full-screen: the server's model id shows escaped in the status bar" \
    wait_for 'm\x1B]0;EVIL\x07x · remote' 15
keys C-d
finish
