#!/bin/sh
# t-chat-files.sh: the files the chat writes when asked (chatfile.h), in line mode on the mock
# (and the full-screen chat in tmux for a typed newline): /save without a name claims a new
# name atomically (8 processes at once get 8 files); /save FILE and /export FILE replace only
# what k3chat wrote as that kind (or an empty file), never a symbolic link or another file
# unless given --force; quotes around a name are removed and a name with a newline is refused;
# /retry keeps the answer it replaces as "abandoned" (memory and autosave).
. "$K3_SRC/tests/count.sh"
set -u
k="$K3_BUILD/k3chat"
m="$K3_TMP/mock.txt"
d="$K3_TMP/f"
mkdir -p "$d"
printf 'delay 0\nresponse Hello, {user}!\n' >"$m"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
say() { printf "$1" | K3_MOCK="$m" "$k" /no/model >/dev/null 2>"$K3_TMP/err"; }

# 3: eight processes save in the same second: eight files, each its own conversation
i=1
while [ $i -le 8 ]; do
    (printf 'from%s\n/save\n' $i | XDG_DATA_HOME="$K3_TMP/many" K3_MOCK="$m" "$k" /no/model >/dev/null 2>"$K3_TMP/save$i") &
    i=$((i + 1))
done
wait
names=$(cat "$K3_TMP"/save? | sed -n 's/.*saved 2 messages to //p' | sort -u | wc -l)
files=$(ls "$K3_TMP/many/k3chat/transcripts" | wc -l)
own=0
for i in 1 2 3 4 5 6 7 8; do
    f=$(sed -n 's/.*saved 2 messages to //p' "$K3_TMP/save$i")
    [ -n "$f" ] && grep -q "\"from$i\"" "$f" && own=$((own + 1))
done
t "8 concurrent /save: 8 names, 8 files, each holding its own conversation ($names, $files, $own)" \
    '[ "$names" -eq 8 ] && [ "$files" -eq 8 ] && [ "$own" -eq 8 ]'

# 4: a file that is not k3chat's, a symbolic link: refused, left as they were
printf 'my notes\n' >"$d/notes.txt"
chmod 644 "$d/notes.txt"
say "hi\n/save $d/notes.txt\n"
t "/save over a file that is not a transcript is refused and names it" \
    'grep -q "/save: $d/notes.txt exists and is not a k3chat transcript" "$K3_TMP/err" && grep -q -- "--force" "$K3_TMP/err"'
t "... the file is untouched (content and mode)" \
    '[ "$(cat "$d/notes.txt")" = "my notes" ] && [ "$(stat -c %a "$d/notes.txt")" = 644 ]'
say "hi\n/export $d/notes.txt\n"
t "/export over it is refused too" 'grep -q "/export: $d/notes.txt exists and is not a k3chat export" "$K3_TMP/err" && [ "$(cat "$d/notes.txt")" = "my notes" ]'
ln -s notes.txt "$d/link.jsonl"
say "hi\n/save $d/link.jsonl\n/export $d/link.jsonl\n"
t "a symbolic link is refused by /save and /export, and stays a link" \
    '[ "$(grep -c "link.jsonl is a symbolic link" "$K3_TMP/err")" -eq 2 ] && [ -L "$d/link.jsonl" ] && [ "$(cat "$d/notes.txt")" = "my notes" ]'
say "hi\n/save $d/t.jsonl\n/export $d/t.md\n"
say "again\n/save $d/t.jsonl\n/export $d/t.md\n"
t "k3chat's own transcript and export are replaced without asking" \
    'grep -q "\"again\"" "$d/t.jsonl" && grep -q "again" "$d/t.md" && ! grep -q "refused\|not a k3chat" "$K3_TMP/err"'
say "hi\n/export $d/t.jsonl\n"
t "an export never replaces a transcript" 'grep -q "not a k3chat export" "$K3_TMP/err" && head -c 30 "$d/t.jsonl" | grep -q k3chat-transcript'
say "forced\n/save --force $d/notes.txt\n/export --force $d/link.jsonl\n"
t "--force replaces them" \
    'grep -q "\"forced\"" "$d/notes.txt" && [ ! -L "$d/link.jsonl" ] && grep -q forced "$d/link.jsonl"'
# a directory: refused with or without --force, naming a file to give instead (the refusal
# offered --force, whose rename then failed with "Is a directory")
mkdir -p "$d/dir"
say "hi\n/save $d/dir\n/save --force $d/dir/\n/export --force $d/dir\n"
t "/save and /export of a directory, --force or not: refused, naming a file in it, the directory untouched" \
    '[ "$(grep -c "$d/dir/* is a directory; nothing was written (name a file in it: /[a-z]* $d/dir/NAME\.[jm]" "$K3_TMP/err")" -eq 3 ] &&
     ! grep -q "rename\|--force $d/dir" "$K3_TMP/err" && [ -d "$d/dir" ] && [ -z "$(ls -A "$d/dir")" ]'
# a device (a copy of /dev/full's node, made where root may): refused even with --force; the
# rename put a regular file in place of the node (as root, /dev/full itself would go)
if mknod "$d/full" c 1 7 2>/dev/null; then
    say "hi\n/save --force $d/full\n/export --force $d/full\n"
    t "/save and /export --force of a device: refused, the node left as it was" \
        '[ "$(grep -c "$d/full is a device; nothing was written, --force or not" "$K3_TMP/err")" -eq 2 ] && [ -c "$d/full" ]'
else
    echo "SKIP: a device node cannot be made here (not root)"
fi
: >"$d/empty.jsonl"
say "hi\n/save $d/empty.jsonl\n"
t "an empty file is replaced (nothing is lost)" 'grep -q "\"hi\"" "$d/empty.jsonl"'
(cd "$d" && printf 'hi\n/save --force --force x.jsonl\n/export --forse y.md\n/load --z\n/save ./--w.jsonl\n' |
    K3_MOCK="$m" "$k" /no/model >/dev/null 2>"$K3_TMP/err")
t "a mistyped or repeated option is refused and named, and writes no file called --..." \
    'grep -q "/save: unknown option .--force. (the one option is --force, once)" "$K3_TMP/err" &&
     grep -q "/export: unknown option .--forse." "$K3_TMP/err" && grep -q "/load: unknown option .--z." "$K3_TMP/err" &&
     [ "$(ls -A "$d" | grep -c -- "^--")" -eq 1 ] && [ -s "$d/--w.jsonl" ]'

# 13: quotes around a name are removed; a name with a newline (Alt-Enter) is refused
say "hi\n/save \"$d/with space.jsonl\"\n/export '$d/q.md'\n"
t "quotes around a file name are removed" '[ -s "$d/with space.jsonl" ] && [ -s "$d/q.md" ] && ! ls "$d" | grep -q "\""'
if command -v tmux >/dev/null; then
    . "$K3_SRC/tests/tui-lib.sh"
    run_mock 100 20 "$m"
    wait_for "mock · 3 layers" 10
    type_line hi
    wait_for "Hello, hi!" 10
    keys -l "/save $d/a"; keys M-Enter; keys -l "b.jsonl"; keys Enter
    check "the full-screen chat refuses a file name with a newline" wait_for "a name is one line" 5
    check "... and writes no file" sh -c "! ls '$d' | grep -q '^a'"
    tmux_end "$T"
fi

# 5: /retry keeps the replaced answer, abandoned, in memory (/save) and in the autosave
printf 'delay 0\nresponse first {user}\n---\nresponse second {user}\n' >"$K3_TMP/m2.txt"
printf 'hi\n/retry\n/save %s/r.jsonl\n' "$d" | K3_MOCK="$K3_TMP/m2.txt" "$k" /no/model >/dev/null 2>&1
t "/retry: the first answer stays in the transcript, marked abandoned" \
    'grep "\"first hi\"" "$d/r.jsonl" | grep -q "\"abandoned\":1" && grep "\"second hi\"" "$d/r.jsonl" | grep -vq abandoned'
nano="$K3_SRC/models/k3-nano"
if [ -f "$nano/model.safetensors" ]; then
    printf 'Reverse the word planet.\n/temp 1\n/retry\n' |
        XDG_DATA_HOME="$K3_TMP/auto" "$k" --think off --max-tokens 8 "$nano" >/dev/null 2>&1
    a=$(ls "$K3_TMP"/auto/k3chat/*.jsonl 2>/dev/null | head -1)
    t "/retry on k3-nano: the autosave keeps both answers, the first abandoned" \
        '[ -n "$a" ] && [ "$(grep -c "\"role\":\"assistant\"" "$a")" -eq 2 ] && [ "$(grep -c "\"abandoned\":1" "$a")" -eq 1 ]'
fi
