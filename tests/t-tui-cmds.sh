#!/bin/sh
# t-tui-cmds.sh: every slash command of the full-screen chat, with good and bad arguments,
# on the scripted mock engine in tmux.
. "$K3_SRC/tests/tui-lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 0; }

m="$K3_TMP/mock.txt"
printf 'delay 0\nthink pondering {user}\nresponse reply to {user}\n' >"$m"
mkdir -p "$K3_TMP/config/k3chat/themes"
printf 'user = red default bold\n' >"$K3_TMP/config/k3chat/themes/mine.theme"
printf 'user = purple default\n' >"$K3_TMP/config/k3chat/themes/broken.theme"
mkdir "$K3_TMP/config/k3chat/themes/adir.theme" # a directory, a theme past 16 KB, a NUL byte
{ printf 'user = red default\n'; i=0; while [ $i -lt 1100 ]; do printf '# %s\n' "padding line $i"; i=$((i + 1)); done
  printf 'user = purple default\n'; } >"$K3_TMP/config/k3chat/themes/big.theme"
printf 'user = red default\n\000user = purple default\n' >"$K3_TMP/config/k3chat/themes/nul.theme"
run_mock 110 40 "$m"
wait_for "mock · 3 layers" 10
# cmd TEXT EXPECT DESC: type a command, wait for EXPECT on screen
cmd() {
    keys C-l; type_line "$1"
    check "$3" wait_for "$2" 5
}
cmd "/help" "Commands:" "/help lists the commands"
check "/help lists the keys" has "F3"
cmd "/help temp" "/temp X  sampling temperature" "/help COMMAND explains one command"
cmd "/help nosuch" "/help: no command /nosuch" "/help with an unknown command"
cmd "/clear" "type a message and press Enter" "/clear empties the conversation"
cmd "/temp 0.3" "temperature 0.30" "/temp X"
check "status bar shows the new temperature" has "T 0.30"
cmd "/temp" "/temp X: missing the value" "/temp without a value"
cmd "/temp hot" "'hot' is not a number in 0..2" "/temp with a word"
cmd "/temp 9" "'9' is not a number in 0..2" "/temp out of range"
cmd "/top-p 0.8" "top-p 0.80" "/top-p X"
cmd "/top-p 1.5" "'1.5' is not a number in 0..1" "/top-p out of range"
cmd "/think off" "thinking off" "/think off"
check "status bar shows think off" has "think off"
cmd "/think maybe" "'maybe' is not on or off" "/think with a bad word"
cmd "/think on" "thinking on" "/think on"
cmd "/effort low" "thinking effort low" "/effort low"
check "status bar shows the effort" has "think low"
cmd "/effort medium" "the release rejects medium" "/effort medium is rejected with a reason"
cmd "/effort" "missing the value (low, high or max)" "/effort without a value"
cmd "/show-thinking off" "think pane hidden" "/show-thinking off"
cmd "/show-thinking sometimes" "'sometimes' is not on or off" "/show-thinking with a bad word"
cmd "/show-thinking on" "think pane shown" "/show-thinking on"
cmd "/experts 2.5" "expert-cache budget 2.5 GB requested" "/experts GB"
check "... and the mock says it applied it, as the local engine does" wait_for "expert-cache budget now 2.5 GB" 3
check "status bar shows the expert budget" wait_for "of 2.5 GB" 3
cmd "/experts lots" "'lots' is not a number" "/experts with a word"
cmd "/system You are terse." "system prompt set" "/system TEXT"
cmd "/system" "system prompt: You are terse." "/system shows the prompt"
keys C-l; type_line "first question"
check "a message gets its answer" wait_for "reply to first question" 5
type_line "second question"
check "a second message gets its answer" wait_for "reply to second question" 5
# the mock keeps a k3_conv: 5 messages are the system prompt and two exchanges, as with a model
cmd "/save $K3_TMP/t1.jsonl" "saved 5 messages" "/save FILE"
check "/save wrote the file" [ -s "$K3_TMP/t1.jsonl" ]
cmd "/save" "saved 5 messages to $K3_TMP/data/k3chat/transcripts/chat-" "/save without a file uses the data directory"
cmd "/save /nonexistent-dir/x.jsonl" "next to it: directory /nonexistent-dir" \
    "/save into a directory that does not exist is an error naming it"
cmd "/export $K3_TMP/t1.md" "exported 5 messages" "/export FILE.md"
check "/export wrote Markdown with the reasoning folded" grep -q "<details>" "$K3_TMP/t1.md"
cmd "/export" "missing the file name" "/export without a file"
keys C-l; type_line "third question"
check "a third message gets its answer" wait_for "reply to third question" 5
cmd "/forget" "dropped the oldest exchange (2 messages)" "/forget drops the oldest exchange"
check "/forget removed the first exchange" wait_gone "reply to first question" 5
check "/forget kept the later ones" has "reply to third question"
cmd "/forget now" "/forget [--fit]: 'now' is not --fit" "/forget with an argument"
cmd "/undo" "" "/undo runs"
check "/undo drops the last exchange" wait_gone "third question" 5
check "/undo keeps the earlier exchange" has "reply to second question"
cmd "/retry" "reply to second question" "/retry regenerates the last answer"
cmd "/retry now" "/retry takes no argument" "/retry with an argument"
cmd "/clear" "type a message and press Enter" "/clear starts a new conversation"
cmd "/load $K3_TMP/t1.jsonl" "loaded 5 messages" "/load FILE"
check "/load shows the saved conversation" has "reply to second question"
printf '{"format":"k3chat-transcript","version":1}\n{"role":"user","content":5}\n' >"$K3_TMP/bad.jsonl"
cmd "/load $K3_TMP/bad.jsonl" "bad.jsonl:2:" "/load of a malformed transcript names the line"
check "a failed /load keeps the conversation" has "reply to second question"
cmd "/load" "missing the file name" "/load without a file"
cmd "/replay $K3_TMP/t1.jsonl" "replay" "/replay FILE runs (the mock cannot replay)"
cmd "/replay" "/replay FILE: missing the file name" "/replay without a file"
cmd "/stats" "tok/s decode" "/stats"
cmd "/stats now" "/stats takes no argument" "/stats with an argument"
cmd "/theme" "themes: " "/theme lists the themes"
check "/theme lists light, high-contrast and the user's theme" sh -c "$T capture-pane -p | grep 'themes: ' | grep -q 'high-contrast.*light.*mine'"
cmd "/theme light" "theme light" "/theme light"
cmd "/theme high-contrast" "theme high-contrast" "/theme high-contrast"
cmd "/theme mine" "theme mine" "/theme from the XDG config directory"
cmd "/theme broken" "broken.theme:1: user: 'purple' is not a color" "a bad theme file names file, line and field"
cmd "/theme nope" "no theme 'nope'" "/theme with an unknown name"
cmd "/theme adir" "adir.theme: cannot read: Is a directory" "a directory NAME.theme is refused, not an empty theme"
cmd "/theme big" "big.theme: larger than 16383 bytes, not a theme" "a theme past 16 KB is refused, not cut"
cmd "/theme nul" "nul.theme: a NUL byte (byte 20), not a theme" "a theme with a NUL byte is refused, not cut there"
cmd "/theme dark" "theme dark" "/theme dark"
cmd "/tmep 1" "unknown command /tmep; did you mean /temp?" "a misspelled command suggests the nearest"
cmd "/qiut" "did you mean /quit?" "/qiut suggests /quit"
cmd "/xyzzy" "unknown command /xyzzy (/help" "an unknown command far from all"
cmd "/quit now" "/quit takes no argument" "/quit with an argument"
keys C-l; type_line "/quit"
check "/quit exits with 0" wait_for "EXIT=0" 5

# --load at start-up: the saved conversation is shown and continues
tui_start 110 40 K3_MOCK="$m" -- "$K3CHAT --load $K3_TMP/t1.jsonl /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
check "--load FILE shows the saved conversation" wait_for "reply to second question" 10
type_line "next one"
check "and the conversation continues" wait_for "reply to next one" 5
keys C-d
check "exit with 0" wait_for "EXIT=0" 5

# the directory k3chat runs in is removed: a /save or /export to a bare name says so (it said
# "No such file or directory" of the file), and a path from / still works
mkdir -p "$K3_TMP/gone"
tui_start 110 40 K3_MOCK="$m" -- "cd $K3_TMP/gone && $K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
wait_for "mock · 3 layers" 10
type_line "hello"
wait_for "reply to hello" 5
rmdir "$K3_TMP/gone"
cmd "/save here.jsonl" "the current directory was removed" \
    "/save in a removed current directory says so"
cmd "/export here.md" "here.md: cannot create a temporary file" \
    "/export too"
cmd "/save $K3_TMP/there.jsonl" "saved 2 messages" "a path from / still saves"
keys C-d
wait_for "EXIT=0" 5
check "no sanitizer or runtime error report on stderr" sh -c "! grep -q -e Sanitizer -e 'runtime error' $K3_TMP/stderr.txt"
finish
