#!/bin/sh
# t-conv-cli.sh: the transcript command-line entries on a generated model: --chat-ids
# (one line of decimal ids, thinking mode and effort from the header or --think/--effort),
# and bad transcripts through --chat-ids and --replay: a line-numbered error, exit 1,
# before any weights are loaded.
. "$K3_SRC/tests/lib.sh"
set -u
B=$K3_BUILD
T=$K3_TMP

tiny_model "$T/m" 4
export OMP_NUM_THREADS=1

printf '%s\n' '{"format":"k3chat-transcript","version":1,"settings":{"think":true,"effort":"low"}}' \
    '{"role":"system","content":"Be brief."}' \
    '{"role":"user","content":"Hi <|open|> there"}' \
    '{"role":"assistant","content":"Hello.","reasoning_content":"greet"}' \
    '{"role":"user","content":"Again?"}' >"$T/t.jsonl"

on=$("$B/k3chat" --chat-ids "$T/m" "$T/t.jsonl" 2>"$T/err"); rc=$?
echo "$on" | grep -Eq '^[0-9]+( [0-9]+)+$' && [ "$rc" = 0 ] && [ "$(echo "$on" | wc -l)" = 1 ]
ok $? "--chat-ids: one line of decimal ids, exit 0 (rc $rc, $(echo "$on" | wc -w) ids)"

off=$("$B/k3chat" --chat-ids --think off "$T/m" "$T/t.jsonl" 2>/dev/null)
[ -n "$off" ] && [ "$(echo "$off" | wc -w)" -lt "$(echo "$on" | wc -w)" ]
ok $? "--think off: fewer ids (no effort message, no think blocks)"

high=$("$B/k3chat" --chat-ids --effort high "$T/m" "$T/t.jsonl" 2>/dev/null)
[ -n "$high" ] && [ "$high" != "$on" ]; ok $? "--effort high changes the effort message"

# the control-token look-alike in user text is not the control id
open_id=$("$B/k3chat" --chat-ids --think off "$T/m" "$T/t.jsonl" | tr ' ' '\n' | head -1)
n_open=$(echo "$off" | tr ' ' '\n' | grep -cx "$open_id")
# think off: system, user, assistant (message + response tags), user, prompt (message + response)
[ "$n_open" = 7 ]; ok $? "user text '<|open|>' is ordinary text: exactly 7 <|open|> ids with thinking off (got $n_open)"

# a transcript with tools (header "tools" and tool_choice, OpenAI tool_calls, a tool result):
# --chat-ids renders them as k3-tools.md says; checked as text through --detokenize
printf '%s\n' '{"format":"k3chat-transcript","version":1,"settings":{"think":false,"tool_choice":"required"},"tools":[{"type":"function","function":{"parameters":{"type":"object"},"name":"get_weather"}}]}' \
    '{"role":"user","content":"Weather?"}' \
    '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}' \
    '{"role":"tool","tool_call_id":"c1","content":"18 C"}' >"$T/tools.jsonl"
"$B/k3chat" --chat-ids "$T/m" "$T/tools.jsonl" >"$T/tools.ids" 2>"$T/err" &&
    "$B/k3chat" --detokenize "$T/m" "$T/tools.ids" >"$T/tools.txt" 2>>"$T/err"
printf '%s' '<|open|>message role="system" type="tool-declare"<|sep|># Tools
Here are the available tools, described in JSONSchema.

```json
[{"function":{"name":"get_weather","parameters":{"type":"object"}},"type":"function"}]
```<|close|>message<|sep|><|end_of_msg|><|open|>message role="user"<|sep|>Weather?<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|><|open|>message role="tool" tool="get_weather" index="1"<|sep|>18 C<|close|>message<|sep|><|end_of_msg|><|open|>message role="system" type="tool-choice"<|sep|>The system is invoked with `tool_choice=required`.
You MUST call tools in the next message.<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>response<|sep|>' >"$T/tools.want"
cmp -s "$T/tools.txt" "$T/tools.want"
ok $? "--chat-ids of a transcript with tools, a call and a result: the spec's rendering ($(head -c 200 "$T/err"))"
n_open=$(tr ' ' '\n' <"$T/tools.ids" | grep -cx "$open_id")
[ "$n_open" = 11 ]; ok $? "... with exactly 11 <|open|> control ids (got $n_open)"

bad() { # name, file content (printf format), expected text
    printf "$2" >"$T/bad.jsonl"
    "$B/k3chat" --chat-ids "$T/m" "$T/bad.jsonl" >/dev/null 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -q "bad.jsonl:$3" "$T/err"
    ok $? "--chat-ids, $1: exit 1 and '$3' ($(head -c 160 "$T/err"))"
}
bad "truncated line" '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":"x\n{"role":"user","content":"y"}\n' '2: invalid JSON'
bad "wrong type" '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":["a"]}\n' '2: "content"\[0\]'
bad "unknown version" '{"format":"k3chat-transcript","version":9}\n' '1: unknown transcript version 9'
# invalid UTF-8 is not an error: U+FFFD (as everywhere text comes in, k3chat(1)), and a note
printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":"\377"}\n' >"$T/latin.jsonl"
"$B/k3chat" --chat-ids "$T/m" "$T/latin.jsonl" >"$T/out" 2>"$T/err"; rc=$?
[ "$rc" = 0 ] && [ -s "$T/out" ] && grep -q "latin.jsonl: invalid UTF-8 replaced with U+FFFD: 1 sequence, the first at line 2, byte 27" "$T/err"
ok $? "--chat-ids, invalid UTF-8: U+FFFD, exit 0, and a note naming line and byte ($(head -c 160 "$T/err"))"
bad "tool_calls not an array" '{"format":"k3chat-transcript","version":1}\n{"role":"assistant","content":"","tool_calls":{}}\n' '2: "tool_calls" is an object'
bad "arguments not a string" '{"format":"k3chat-transcript","version":1}\n{"role":"assistant","content":"","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]}\n' '2: "tool_calls"\[0\].function.arguments is an object'

printf '%s\n' '{"format":"k3chat-transcript","version":1}' '{"role":"user","content":5}' >"$T/bad.jsonl"
"$B/k3chat" "$T/m" --replay "$T/bad.jsonl" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q 'bad.jsonl:2: "content" is an integer' "$T/err"
ok $? "--replay of a malformed transcript: exit 1 with the line ($(head -c 160 "$T/err"))"

"$B/k3chat" "$T/nomodel" --replay "$T/t.jsonl" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && [ -s "$T/err" ]; ok $? "--replay with a missing model directory: exit 1 ($(head -c 120 "$T/err"))"

# standard output that cannot be written (a full disk: /dev/full): every mode that ran to its end
# says so and exits 1. The tokenizer's tools and --chat-ids exited 1 without a word, --inspect
# did for a short report, --help and --version exited 0, and --replay exited 3 ("a turn differs")
# with its report lost.
printf 'hello world\n' >"$T/in.txt"
echo "1 2 3" >"$T/ids.txt"
bad_full=
for a in "--tokenize $T/m $T/in.txt" "--detokenize $T/m $T/ids.txt" "--chat-ids $T/m $T/t.jsonl" \
    "--inspect $T/m" "--help" "--version" "$T/m --replay $T/t.jsonl --max-tokens 4"; do
    # shellcheck disable=SC2086
    "$B/k3chat" $a >/dev/full 2>"$T/err"; rc=$?
    [ "$rc" = 1 ] && grep -q "^k3chat: cannot write to standard output: No space left on device" "$T/err" ||
        bad_full="$bad_full [${a%% *} rc $rc: $(tail -n 1 "$T/err" | head -c 100)]"
done
[ -z "$bad_full" ]; ok $? "a full standard output: exit 1 with the reason, in every mode (failed:${bad_full:- none})"
