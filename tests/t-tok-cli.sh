#!/bin/sh
# t-tok-cli.sh: k3chat --tokenize / --detokenize on a vocabulary made here (no network):
# output format, round trip of arbitrary bytes, --pattern, and one-line errors that
# name the file (missing vocabulary, bad base64 line, bad id in the ids file).
. "$K3_SRC/tests/count.sh"
set -u
: "${K3_BUILD:?}" "${K3_TMP:?}"
K3="$K3_BUILD/k3chat"
V="$K3_TMP/vocab"
mkdir -p "$V"

# the 256 single bytes (rank = byte value), then "ab" and "abab"
i=0
: > "$V/tiktoken.model"
while [ $i -lt 256 ]; do
    printf "$(printf '\\%03o' $i)" | base64 | tr -d '\n' >> "$V/tiktoken.model"
    echo " $i" >> "$V/tiktoken.model"
    i=$((i + 1))
done
printf 'YWI= 256\nYWJhYg== 257\n' >> "$V/tiktoken.model"

printf 'abab ab' > "$K3_TMP/in.txt"
out=$("$K3" --tokenize "$V" "$K3_TMP/in.txt" 2>&1)
[ "$out" = "257 32 256" ] && echo "PASS: --tokenize prints ids on one line ($out)" || echo "FAIL: --tokenize printed '$out', want '257 32 256'"

# arbitrary bytes (invalid UTF-8, NUL, CRLF) survive the round trip
printf 'x\000\377\376 y\r\n\342\202 <|reserved_token_258|> \344\275\240' > "$K3_TMP/bytes.bin"
for pat in kimi o200k; do
    "$K3" --tokenize "$V" "$K3_TMP/bytes.bin" --pattern $pat > "$K3_TMP/ids.txt" &&
        "$K3" --detokenize "$V" "$K3_TMP/ids.txt" --pattern $pat > "$K3_TMP/back.bin" &&
        cmp -s "$K3_TMP/bytes.bin" "$K3_TMP/back.bin" &&
        echo "PASS: --pattern $pat: --detokenize(--tokenize(bytes)) == bytes" ||
        echo "FAIL: --pattern $pat: round trip of arbitrary bytes"
done
awk '{ for (i = 1; i <= NF; i++) if ($i >= 258) bad = 1 } END { exit bad }' "$K3_TMP/ids.txt" &&
    echo "PASS: special names are ordinary text for --tokenize" ||
    echo "FAIL: --tokenize produced a special id for <|reserved_token_258|>"

# errors: one line, non-zero exit, naming the file
err=$("$K3" --tokenize "$K3_TMP/nowhere" "$K3_TMP/in.txt" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$err" | grep -q "nowhere/tiktoken.model" && echo "PASS: missing vocabulary names the file" ||
    echo "FAIL: missing vocabulary: rc $rc, '$err'"
mkdir -p "$K3_TMP/bad"
sed '3s/.*/A!== 2/' "$V/tiktoken.model" > "$K3_TMP/bad/tiktoken.model"
err=$("$K3" --tokenize "$K3_TMP/bad" "$K3_TMP/in.txt" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$err" | grep -q "bad/tiktoken.model: line 3: bad base64" && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
    echo "PASS: bad base64: one line naming file and line ($err)" || echo "FAIL: bad base64: rc $rc, '$err'"
printf '97, 98,\n256' > "$K3_TMP/commas.txt"
out=$("$K3" --detokenize "$V" "$K3_TMP/commas.txt" 2>&1)
[ "$out" = "abab" ] && echo "PASS: --detokenize takes ids separated by commas too ($out)" ||
    echo "FAIL: --detokenize of '97, 98, 256' printed '$out', want 'abab'"
printf '1 2 abc 4\n' > "$K3_TMP/badids.txt"
err=$("$K3" --detokenize "$V" "$K3_TMP/badids.txt" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$err" | grep -q "badids.txt: token 3: 'abc'" && echo "PASS: bad id names file and position ($err)" ||
    echo "FAIL: bad id: rc $rc, '$err'"
printf '1 999999\n' > "$K3_TMP/badids.txt"
err=$("$K3" --detokenize "$V" "$K3_TMP/badids.txt" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$err" | grep -q "token 2: '999999' is not an id" && echo "PASS: out-of-range id rejected ($err)" ||
    echo "FAIL: out-of-range id: rc $rc, '$err'"
err=$("$K3" --tokenize "$V" "$K3_TMP" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$err" | grep -q "read error: Is a directory" && echo "PASS: a directory to --tokenize says it is one ($err)" ||
    echo "FAIL: --tokenize DIR: rc $rc, '$err' (want the reason, not a bare 'read error')"
# a flag that changes nothing in the mode is a usage error (it was taken without a word): the
# tokenizer's tools take --pattern only, --chat-ids --pattern, --think and --effort, --inspect
# none, and --pattern goes with the first three only; so in the other modes: --prompt and --ids
# take no server flag, --ids none of the chat format's, --serve no sampling (a request brings
# its own), --replay no --system, the chat no server flag and --endpoint no --serve flag (all of
# these were taken and ignored; --serve P --temp 0 served at the requests' temperatures); and
# --prompt's --think-budget with --think off (the chat keeps it for a later /think on)
for a in "--tokenize $V $K3_TMP/in.txt --temp 0.5:--temp has no effect with --tokenize" \
    "$V --prompt hi --parallel 8:--parallel has no effect with --prompt" \
    "$V --ids 1 --system s:--system has no effect with --ids" \
    "$V --serve 0 --temp 0:--temp has no effect with --serve (a request gives it as 'temperature')" \
    "$V --replay $K3_TMP/none.jsonl --system s:--system has no effect with --replay" \
    "$V --serve 0 --api-key k --allow-host h:--allow-host has no effect with --api-key" \
    "$V --plain --model m:--model has no effect with the chat on MODEL_DIR" \
    "--endpoint localhost --plain --parallel 2:--parallel has no effect with --endpoint" \
    "--detokenize $V $K3_TMP/commas.txt --max-tokens 3:--max-tokens has no effect with --detokenize" \
    "--tokenize $V $K3_TMP/in.txt --think off:--think has no effect with --tokenize" \
    "$V --prompt hi --pattern o200k:--pattern goes with --tokenize, --detokenize and --chat-ids only" \
    "--inspect $V --pattern kimi:--pattern has no effect with --inspect" \
    "--inspect $V --temp 1:--temp has no effect with --inspect" \
    "--chat-ids $V $K3_TMP/in.txt --max-tokens 3:--max-tokens has no effect with --chat-ids" \
    "$V --prompt hi --think off --think-budget 5:--think-budget has no effect with --think off"; do
    # shellcheck disable=SC2086
    err=$(timeout 60 "$K3" ${a%%:*} 2>&1 >/dev/null </dev/null); rc=$?
    [ $rc -eq 2 ] && echo "$err" | grep -qF -- "${a#*:}" && echo "PASS: k3chat ${a%%:*}: usage error ($err)" ||
        echo "FAIL: k3chat ${a%%:*}: rc $rc, '$err' (want 2 and '${a#*:}')"
done
# an empty --model or --endpoint's --api-key: a usage error (--serve listed a model called '',
# --endpoint sent "Authorization: Bearer ")
err=$(timeout 60 "$K3" "$V" --serve 0 --model "" 2>&1 >/dev/null </dev/null); rc=$?
[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--model: the name is empty" && echo "PASS: --serve --model '': usage error ($err)" ||
    echo "FAIL: --serve --model '': rc $rc, '$err'"
err=$(timeout 60 "$K3" --endpoint localhost --plain --api-key "" 2>&1 >/dev/null </dev/null); rc=$?
[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--api-key: the key is empty" && echo "PASS: --endpoint --api-key '': usage error ($err)" ||
    echo "FAIL: --endpoint --api-key '': rc $rc, '$err'"
# --serve's port is digits only (strtol took " 0" and "+80" and served): a usage error naming the
# form, before the model loads
for spec in " 0" "+80" "80 " "127.0.0.1:-1" "70000" "[::1]:" "000000080"; do
    err=$(timeout 60 "$K3" "$V" --serve "$spec" 2>&1 >/dev/null </dev/null); rc=$?
    [ $rc -eq 2 ] && echo "$err" | grep -qF -- "is not [ADDR:]PORT" && echo "PASS: --serve '$spec': usage error ($err)" ||
        echo "FAIL: --serve '$spec': rc $rc, '$err' (want 2 and 'is not [ADDR:]PORT')"
done
exit 0
