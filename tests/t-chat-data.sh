#!/bin/sh
# t-chat-data.sh: the chat's data paths, driven through pipes (issue 26): invalid UTF-8 at every
# entry point (one rule: U+FFFD, and say so), /save names, edits reaching the autosave at once,
# loaded settings, queued messages and Ctrl-C, --prompt/--load, exit statuses, line-mode
# commands, knob parsing, wording, the Markdown export. On models/k3-nano (real, 2.4 MB) where
# the autosave or the tokenizer matters, on the scripted mock (K3_MOCK) elsewhere.
set -u
k="$K3_BUILD/k3chat"
M="$K3_SRC/models/k3-nano"
mock="$K3_TMP/mock.txt"
printf 'delay 0\nthink thinking about {user}\nresponse answer to {user}\n' >"$mock"
export XDG_DATA_HOME="$K3_TMP/data" HOME="$K3_TMP/home"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
auto() { cat "$XDG_DATA_HOME"/k3chat/*.jsonl 2>/dev/null; }
fresh() { rm -rf "$XDG_DATA_HOME"; }

# ---- 1. invalid UTF-8: U+FFFD and a notice, never "out of memory", the autosave keeps going
fresh
printf 'What is 27 + 58?\nReverse the word caf\351.\nReverse the word planet.\n/save %s/x.jsonl\n' "$K3_TMP" |
    "$k" "$M" --think off >"$K3_TMP/o1" 2>"$K3_TMP/e1"
t "1: a line with a Latin-1 byte is reported with its line and byte" \
    'grep -q "line 2: invalid UTF-8 (byte 21 is 0xe9) replaced with U+FFFD" "$K3_TMP/e1"'
t "1: nothing is reported as memory" '! grep -qi "memory" "$K3_TMP/e1"'
t "1: the autosave keeps every turn (3 user messages)" '[ "$(auto | grep -c "\"role\":\"user\"")" -eq 3 ]'
t "1: the autosave has the line with U+FFFD" 'auto | grep -q "caf�\."'
t "1: /save works afterwards" 'grep -q "saved 6 messages" "$K3_TMP/e1" && [ "$(grep -c "\"role\"" "$K3_TMP/x.jsonl")" -eq 6 ]'
"$k" "$M" --think off --max-tokens 2 --prompt "$(printf 'caf\351')" >/dev/null 2>"$K3_TMP/e1b"
t "1: --prompt follows the same rule" 'grep -q "^k3chat: --prompt: invalid UTF-8 (byte 4 is 0xe9) replaced with U+FFFD" "$K3_TMP/e1b"'
printf 'hi\n' | "$k" "$M" --think off --max-tokens 2 --system "$(printf 'be \377brief')" >/dev/null 2>"$K3_TMP/e1c"
t "1: --system follows the same rule" 'grep -q "^k3chat: --system: invalid UTF-8 (byte 4 is 0xff)" "$K3_TMP/e1c"'
printf '{"role":"user","content":"caf\351?"}\n{"role":"assistant","content":"yes"}\n' >"$K3_TMP/l1.jsonl"
printf '/save %s/l1-saved.jsonl\n' "$K3_TMP" | "$k" --load "$K3_TMP/l1.jsonl" "$M" 2>"$K3_TMP/e1d"
t "1: a loaded transcript follows the same rule, saying where" \
    'grep -q "loaded 2 messages .*invalid UTF-8 replaced with U+FFFD: 1 sequence, the first at line 1, byte 30" "$K3_TMP/e1d"'

# ---- 2. /save without a name never reuses an earlier save's name
fresh
printf 'What is 27 + 58?\n/save\n/clear\nReverse the word planet.\n/save\n' | "$k" "$M" --think off >/dev/null 2>"$K3_TMP/e2"
n=$(grep -o "saved 2 messages to .*" "$K3_TMP/e2" | sort -u | wc -l)
t "2: two /save in the same second name two files ($n)" '[ "$n" -eq 2 ]'
t "2: both conversations are on disk" 'grep -l "27 + 58" "$XDG_DATA_HOME"/k3chat/transcripts/*.jsonl >/dev/null &&
    grep -l "planet" "$XDG_DATA_HOME"/k3chat/transcripts/*.jsonl >/dev/null &&
    [ "$(ls "$XDG_DATA_HOME"/k3chat/transcripts/*.jsonl | wc -l)" -eq 2 ]'

# ---- 3. /undo, /forget, /system reach the autosave file at once (/quit right after included)
fresh
printf 'my password is hunter2\n/undo\n' | "$k" "$M" --think off >/dev/null 2>&1
t "3: /undo takes the message out of the autosave file" '[ -n "$(auto)" ] && ! auto | grep -q hunter2'
fresh
printf 'my password is hunter2\nWhat is 1 + 1?\n/forget\n/quit\n' | "$k" "$M" --think off >/dev/null 2>&1
t "3: /forget then /quit: the file no longer has the oldest exchange" '! auto | grep -q hunter2 && auto | grep -q "1 + 1"'
fresh
printf 'hello\n/system be terse\n/quit\n' | "$k" "$M" --think off >/dev/null 2>&1
t "3: /system then /quit: the file has the new system prompt" 'auto | grep -q "\"role\":\"system\",\"content\":\"be terse\""'
