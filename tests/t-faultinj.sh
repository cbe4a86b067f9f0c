#!/bin/sh
# t-faultinj.sh: read faults in the model files (tests/faultinj.c as an LD_PRELOAD shim, plus a
# real truncation and a vanished shard between turns). The streaming expert tier is forced with
# K3_EXPERT_GB=0 (one slot per MoE layer, so every token reads experts). Checks: a clear error
# naming the file and offset, no crash or sanitizer report, short reads change nothing, and in
# plain mode the conversation survives: the failed turn stays (marked interrupted) and, once
# the fault is gone, /retry answers exactly as a run that never saw the fault.
. "$K3_SRC/tests/lib.sh" # wait_until
set -u
k="$K3_BUILD/k3chat"
M="$K3_TMP/m"
so="$K3_TMP/faultinj.so"
t() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fi; }
slow=1
case "$K3_BUILD" in *asan*)
    slow=4
    ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export ASAN_OPTIONS ;;
esac
if ! cc -shared -fPIC -O1 -o "$so" "$K3_SRC/tests/faultinj.c" -ldl 2>"$K3_TMP/cc.err"; then
    echo "SKIP: cannot build the fault-injection shim: $(head -n 1 "$K3_TMP/cc.err")"
    exit 0
fi
if ! "$K3_BUILD/k3-mkmodel" --preset tiny --seed 3 "$M" >/dev/null 2>&1; then
    echo "FAIL: k3-mkmodel --preset tiny"
    exit 0
fi
K3_VK=0 K3_EXPERT_GB=0
export K3_VK K3_EXPERT_GB
opts="--temp 0 --max-tokens 6 --think off"
san() { ! grep -qE "ERROR: AddressSanitizer|runtime error:|LeakSanitizer" "$1"; }
# fi VAR=VALUE... -- ARGS: k3chat under the shim, every shard of the model matched
fi_run() {
    _e="LD_PRELOAD=$so FI_PATH=$M/model- FI_LOG=$K3_TMP/fi.log"
    while [ "$1" != "--" ]; do _e="$_e $1"; shift; done
    shift
    rm -f "$K3_TMP/fi.log"
    # shellcheck disable=SC2086
    env $_e "$k" "${MD:-$M}" "$@"
}
# wait_grep FILE PATTERN SECONDS: poll until FILE matches (a FAIL line on timeout)
wait_grep() { wait_until "'$2' in $1" "$3" grep -q -- "$2" "$1"; }
size_ge() { [ "$(wc -c <"$1" 2>/dev/null || echo 0)" -ge "$2" ]; }
# wait_size FILE BYTES SECONDS (answers are random text, newlines included)
wait_size() { wait_until "$1 to reach $2 bytes" "$3" size_ge "$1" "$2"; }

# baselines (no shim): one-shot, and plain mode with one and two turns
# shellcheck disable=SC2086
"$k" "$M" --prompt hello $opts >"$K3_TMP/base" 2>/dev/null
# shellcheck disable=SC2086
printf 'hello\n' | "$k" "$M" --plain $opts >"$K3_TMP/base1" 2>/dev/null
# shellcheck disable=SC2086
printf 'hello\nagain\n' | "$k" "$M" --plain $opts >"$K3_TMP/base2" 2>/dev/null
n1=$(wc -c <"$K3_TMP/base1")
t "baseline answers exist" '[ -s "$K3_TMP/base" ] && [ "$n1" -gt 0 ] && [ "$(wc -c <"$K3_TMP/base2")" -gt "$n1" ]'

# how many reads loading takes (plain mode, no input), and that generation reads experts
fi_run FI_MODE=pass -- --plain </dev/null >/dev/null 2>&1
nload=$(wc -l <"$K3_TMP/fi.log" 2>/dev/null || echo 0)
# shellcheck disable=SC2086
fi_run FI_MODE=pass -- --prompt hello $opts >"$K3_TMP/o" 2>/dev/null
nall=$(wc -l <"$K3_TMP/fi.log" 2>/dev/null || echo 0)
t "the shim sees the loader's reads ($nload) and streamed expert reads ($nall in all)" \
    '[ "$nload" -gt 0 ] && [ "$nall" -gt "$nload" ]'
t "the pass-through shim changes nothing" 'cmp -s "$K3_TMP/o" "$K3_TMP/base"'

# one-shot faults
pat='model-[0-9]*-of-[0-9]*\.safetensors: expert read of [0-9]* bytes at offset [0-9]*'
# shellcheck disable=SC2086
fi_run FI_MODE=eio FI_AFTER="$nload" -- --prompt hello $opts >/dev/null 2>"$K3_TMP/e1"
rc=$?
t "EIO on an expert read: exit 1 (got $rc)" '[ $rc -eq 1 ]'
t "EIO: the error names the file and offset" 'grep -q "$pat failed: Input/output error" "$K3_TMP/e1"'
t "EIO: no sanitizer report" 'san "$K3_TMP/e1"'
# shellcheck disable=SC2086
fi_run FI_MODE=trunc FI_AFTER="$nload" -- --prompt hello $opts >/dev/null 2>"$K3_TMP/e2"
rc=$?
t "a file truncated under an expert read: exit 1 (got $rc)" '[ $rc -eq 1 ]'
t "truncated: the error names the file and offset" \
    'grep -q "model-[0-9]*-of-[0-9]*\.safetensors: unexpected end of file at offset [0-9]*" "$K3_TMP/e2"'
t "truncated: no sanitizer report" 'san "$K3_TMP/e2"'
# shellcheck disable=SC2086
fi_run FI_MODE=eio -- --prompt hello $opts >/dev/null 2>"$K3_TMP/e3"
rc=$?
t "EIO while loading: exit 1 (got $rc)" '[ $rc -eq 1 ]'
t "EIO while loading: the error names the file and offset" \
    'grep -q "model-[0-9]*-of-[0-9]*\.safetensors: .*offset [0-9]*.*Input/output error" "$K3_TMP/e3" && san "$K3_TMP/e3"'
# shellcheck disable=SC2086
fi_run FI_MODE=short -- --prompt hello $opts >"$K3_TMP/o4" 2>"$K3_TMP/e4"
rc=$?
t "every read short (loader and experts): same answer, exit 0 (got $rc)" \
    '[ $rc -eq 0 ] && cmp -s "$K3_TMP/o4" "$K3_TMP/base" && [ -s "$K3_TMP/fi.log" ] && san "$K3_TMP/e4"'

# plain mode: the fault is on for the first turn only (FI_CTL), the conversation survives
fifo="$K3_TMP/in"
mkfifo "$fifo"
plain_start() { # plain_start VAR=VALUE...: k3chat --plain reading the FIFO (fd 3 writes it)
    rm -f "$K3_TMP/po" "$K3_TMP/pe"
    # shellcheck disable=SC2086
    fi_run "$@" -- --plain $opts <"$fifo" >"$K3_TMP/po" 2>"$K3_TMP/pe" &
    pid=$!
    exec 3>"$fifo"
}
plain_end() {
    exec 3>&-
    wait "$pid"
    prc=$?
}
: >"$K3_TMP/ctl"
plain_start FI_MODE=eio FI_AFTER="$nload" FI_CTL="$K3_TMP/ctl"
echo hello >&3
wait_grep "$K3_TMP/pe" "expert read" 30
t "plain mode: the failed turn is reported with file and offset" 'grep -q "$pat failed" "$K3_TMP/pe"'
rm -f "$K3_TMP/ctl"
echo /retry >&3
plain_end
t "plain mode: after the fault clears /retry answers as without it (exit $prc)" \
    '[ $prc -eq 0 ] && cmp -s "$K3_TMP/po" "$K3_TMP/base1" && san "$K3_TMP/pe"'

# halve DIR: each shard of DIR kept in $K3_TMP/keep, then cut to half its size
mkdir "$K3_TMP/keep"
halve() {
    rm -f "$K3_TMP"/keep/*
    for f in "$1"/model-*.safetensors; do
        cp "$f" "$K3_TMP/keep/"
        truncate -s "$(($(wc -c <"$f") / 2))" "$f"
    done
}
# real truncation between turns (shim passes through): turn 2 fails, the files come back,
# /retry answers turn 2
plain_start FI_MODE=pass
echo hello >&3
wait_size "$K3_TMP/po" "$n1" 30
halve "$M"
echo again >&3
wait_grep "$K3_TMP/pe" "unexpected end of file" 30
t "real truncation between turns: reported with file and offset" \
    'grep -q "model-[0-9]*-of-[0-9]*\.safetensors: unexpected end of file at offset [0-9]*" "$K3_TMP/pe"'
for f in "$K3_TMP"/keep/*; do cp "$f" "$M/"; done # in place: the same inodes
echo /retry >&3
plain_end
t "restored files: the next turn answers as without the fault (exit $prc)" \
    '[ $prc -eq 0 ] && cmp -s "$K3_TMP/po" "$K3_TMP/base2" && san "$K3_TMP/pe"'

# a vanished shard: the files are renamed away and the open descriptors fail (EIO), so the
# retry's reopen by path cannot find them; then they come back and /retry answers
rm -f "$K3_TMP/ctl"
plain_start FI_MODE=eio FI_CTL="$K3_TMP/ctl" FI_PATH=.safetensors
echo hello >&3
wait_size "$K3_TMP/po" "$n1" 30
mkdir "$K3_TMP/away"
mv "$M"/model-*.safetensors "$K3_TMP/away/"
: >"$K3_TMP/ctl"
echo again >&3
wait_grep "$K3_TMP/pe" "expert read" 30
t "vanished shard: the error names the file and says it cannot be opened" \
    'grep -q "model-[0-9]*-of-[0-9]*\.safetensors: cannot open: No such file" "$K3_TMP/pe"'
# FIFOs in their place: the reopen by path blocked in open() for ever, the tier's lock held (the
# chat hung); now the turn fails naming the file. A FIFO that a blocked open still waits on is
# opened for writing (under a timeout), so the old code ends instead of hanging the test
for f in "$K3_TMP"/away/*; do mkfifo "$M/${f##*/}"; done
echo /retry >&3
wait_grep "$K3_TMP/pe" "not a regular file" 15
t "a FIFO in place of a shard at the reopen: the turn fails naming it" \
    'grep -q "model-[0-9]*-of-[0-9]*\.safetensors: not a regular file (a FIFO)" "$K3_TMP/pe"'
for f in "$K3_TMP"/away/*; do
    timeout 1 sh -c ': >"$1"' sh "$M/${f##*/}" 2>/dev/null
    rm -f "$M/${f##*/}"
done
mv "$K3_TMP"/away/* "$M/"
rm -f "$K3_TMP/ctl"
echo /retry >&3
plain_end
t "shard back: the next turn answers as without the fault (exit $prc)" \
    '[ $prc -eq 0 ] && cmp -s "$K3_TMP/po" "$K3_TMP/base2" && san "$K3_TMP/pe"'

# K3_MMAP=1 on a k3-repack container: the mapped weights shrink under the engine between turns
# (before: SIGBUS ended k3chat and the conversation). The turn fails naming the file, tensor,
# offset and sizes; /retry while still short says so again; the files restored in place, /retry
# answers as a run that never saw the fault
C="$K3_TMP/c8"
if ! "$K3_BUILD/k3-repack" "$M" "$C" --bits 8 --quiet 2>"$K3_TMP/rp.err"; then
    echo "FAIL: k3-repack of the tiny model: $(head -n 1 "$K3_TMP/rp.err")"
    exit 0
fi
# shellcheck disable=SC2086
printf 'hello\n' | K3_MMAP=1 "$k" "$C" --plain $opts >"$K3_TMP/cbase1" 2>/dev/null
# shellcheck disable=SC2086
printf 'hello\nagain\n' | K3_MMAP=1 "$k" "$C" --plain $opts >"$K3_TMP/cbase2" 2>/dev/null
c1=$(wc -c <"$K3_TMP/cbase1")
MD=$C plain_start K3_MMAP=1 FI_MODE=pass
echo hello >&3
wait_size "$K3_TMP/po" "$c1" 30
halve "$C"
echo again >&3
wait_grep "$K3_TMP/pe" "shrank under" 30
mpat="model-[0-9]*-of-[0-9]*\.safetensors: mapped tensor '[a-z0-9_.]*' at offset [0-9]* is past the end of the file"
t "K3_MMAP=1, container shrunk between turns: the turn fails naming file, tensor and offset" \
    'grep -q "$mpat (it shrank under the running engine): the file is now [0-9]* bytes, [0-9]* when" "$K3_TMP/pe"'
echo /retry >&3
wait_grep "$K3_TMP/pe" "is still past the end" 30
t "K3_MMAP=1: /retry while still short fails the same way, the process alive" \
    'kill -0 $pid && grep -q "is still past the end of the file: the file is now" "$K3_TMP/pe"'
for f in "$K3_TMP"/keep/*; do cp "$f" "$C/"; done # in place: the same inodes
echo /retry >&3
plain_end
t "K3_MMAP=1: restored files: /retry answers as without the fault (exit $prc)" \
    '[ $prc -eq 0 ] && cmp -s "$K3_TMP/po" "$K3_TMP/cbase2" && san "$K3_TMP/pe"'

# the same under the server: the request that reads past the new end gets a 500 naming the file,
# tensor and offset, the server keeps serving, and once the files are back the next request
# answers as the first did (the shards restored in place)
K3_MMAP=1 /usr/bin/python3 - "$k" "$C" "$K3_TMP" "$K3_SRC/tests" <<'PYEOF'
import glob, os, sys
sys.path.insert(0, sys.argv[4])
from serve_lib import ok, post_chat, read_text, start_server, stop

k3, c, tmp = sys.argv[1:4]
procs = []
p, port, log = start_server(k3, c, tmp, dict(os.environ), procs, "mmap-serve")
body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}
try:
    s1, d1, _ = post_chat(port, body)
    ok(s1 == 200 and d1["choices"][0]["message"], f"K3_MMAP=1 server: the first request answers ({s1})")
    keep = {}
    for f in glob.glob(os.path.join(c, "model-*.safetensors")):
        with open(f, "rb") as fh:
            keep[f] = fh.read()
        os.truncate(f, len(keep[f]) // 2)
    s2, d2, _ = post_chat(port, body)
    msg = d2.get("error", {}).get("message", "") if isinstance(d2, dict) else str(d2)
    ok(s2 == 500 and "mapped tensor '" in msg and "at offset" in msg and "shrank under the running engine" in msg
       and ".safetensors: " in msg, f"K3_MMAP=1 server, shards shrunk: 500 naming file, tensor, offset ({s2}: {msg[:160]})")
    ok(p.poll() is None, "K3_MMAP=1 server: still running after the failed request")
    for f, b in keep.items():
        with open(f, "r+b") as fh:  # in place: the same inodes
            fh.write(b)
    s3, d3, _ = post_chat(port, body)
    ok(s3 == 200 and d3["choices"][0]["message"] == d1["choices"][0]["message"],
       f"K3_MMAP=1 server, files restored: the next request answers as the first ({s3})")
finally:
    stop(p)
ok("AddressSanitizer" not in read_text(log) and "runtime error:" not in read_text(log), "K3_MMAP=1 server: no sanitizer report")
PYEOF
