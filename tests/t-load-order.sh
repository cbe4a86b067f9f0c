#!/bin/sh
# t-load-order.sh: the model's open checks what config.json and the shard headers can settle before
# any expensive work. A config.json claiming widths far beyond its checkpoint (65,536 over the tiny
# preset's) is refused with the shape error naming the shard, the tensor and both shapes, before the
# speed estimate measures this machine's kernels at the claimed shapes: no speed figure is written
# to the (empty) cache, and the refusal comes within 5 s (the probes at those shapes took 1.4-12 s
# before, up to 26 s under load, and over 60 s at a width of 16,777,216 that a large K3_MEM_GB let
# through the first memory fit; the order is what is checked, the bound only catches a return to
# the old one).
. "$K3_SRC/tests/lib.sh"
set -u
B=${K3_BUILD:?}; T=${K3_TMP:?}
K3=$B/k3chat; PY=/usr/bin/python3
[ -x "$K3" ] || { fail "$K3 not built"; exit 1; }
tiny_model "$T/tiny" 3
# KEY VALUE K3_MEM_GB: the last one passes the config-only memory fit by K3_MEM_GB and made the
# old probes run at a 16,777,216-wide expert (over 60 s)
for c in "moe_intermediate_size 65536 24" "routed_expert_hidden_size 65536 24" "kv_lora_rank 65536 24" \
    "qk_rope_head_dim 65536 24" "routed_expert_hidden_size 16777216 100000"; do
    set -- $c
    key="$1 $2"
    rm -rf "$T/m" "$T/cache"
    cp -r "$T/tiny" "$T/m"
    $PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['text_config'][sys.argv[2]]=int(sys.argv[3]); json.dump(c, open(p, 'w'))" \
        "$T/m/config.json" "$1" "$2" || fail "config.json edit"
    t0=$(date +%s%N)
    K3_MEM_GB=$3 XDG_CACHE_HOME="$T/cache" timeout 30 "$K3" "$T/m" --prompt hi --max-tokens 1 >"$T/out" 2>"$T/err"; rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
        grep -Eq "^k3chat: model-0000[0-9]-of-000008\.safetensors: tensor '[^']+' has shape \[[0-9, ]+\], expected \[[0-9, ]+\]$" "$T/err"
    check $? "$key: exit 1, one line naming the shard, the tensor and both shapes ($(head -c 250 "$T/err"))"
    n=$(find "$T/cache" -type f 2>/dev/null | wc -l)
    [ "$n" -eq 0 ]; check $? "$key: refused before the speed probes ran (files in the speed cache: $n)"
    [ $ms -lt $((5000 * slow)) ]; check $? "$key: refused in $ms ms (bound $((5000 * slow)) ms)"
done

# A bad tokenizer is refused before any shard is opened: --prompt loaded every weight and only then
# read tiktoken.model (on a 1.5 TB checkpoint, a whole load before the error). The order shows
# without timing: each shard is a FIFO here, which a shard open refuses ("not a regular file (a
# FIFO)"), so the error must be the tokenizer's. Both tokenizer files, and a vocabulary too large
# for config.json's vocab_size.
for bad in "tiktoken.model:line 3: bad base64" "tokenizer_config.json:line 1" "tiktoken.model:856 tokens and 256 reserved ids do not fit"; do
    f=${bad%%:*}; want=${bad#*:}
    rm -rf "$T/tk"; cp -r "$K3_SRC/models/k3-nano" "$T/tk"
    for s in "$T/tk"/*.safetensors; do rm -f "$s"; mkfifo "$s"; done
    case $want in
    line\ 3*) $PY -c "import sys; p=sys.argv[1]; l=open(p).read().split('\n'); l[2]='!!!notbase64 2'; open(p,'w').write('\n'.join(l))" "$T/tk/$f" ;;
    line\ 1) printf '{"added_tokens_decoder": {,}' >"$T/tk/$f" ;;
    *) $PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); t=c['text_config']; t['vocab_size']-=1; [d.__setitem__('pad_token_id', 0) for d in (c, t) if 'pad_token_id' in d]; json.dump(c, open(p, 'w'))" "$T/tk/config.json" ;;
    esac
    timeout 60 "$K3" "$T/tk" --prompt hi --max-tokens 1 >"$T/out" 2>"$T/err"; rc=$?
    [ $rc -eq 1 ] && grep -qF "$f: $want" "$T/err" && ! grep -q "safetensors" "$T/err"
    check $? "bad $f ($want): refused before any shard is opened (exit $rc: $(head -c 250 "$T/err"))"
done
# The tokenizer is read once, at the model's open, and the front ends take the model's
# (k3_model_tok): --prompt, line mode (the chat's turns, as the full-screen chat runs them) and
# the server each read tiktoken.model once, as K3_VERBOSE's line for each read counts. They read
# it again after the open (a second parse, 163,584 ranks on the release: BENCHMARKS.md).
reads() { grep -c "k3-nano/tiktoken.model: 856 ranks and 256 reserved ids read in" "$1"; }
K3_VERBOSE=1 timeout 120 "$K3" "$K3_SRC/models/k3-nano" --prompt hi --think off --max-tokens 1 >/dev/null 2>"$T/err"
n=$(reads "$T/err"); check "--prompt reads the tokenizer once ($n reads)" [ "$n" -eq 1 ]
printf 'hi\n' | K3_VERBOSE=1 timeout 120 "$K3" "$K3_SRC/models/k3-nano" --plain --think off --max-tokens 1 >/dev/null 2>"$T/err"
n=$(reads "$T/err"); check "--plain reads the tokenizer once, a turn included ($n reads)" [ "$n" -eq 1 ]
# the server: two slots answering at once (each slot's conversation read its own copy at its first
# request, the structured-output vocabulary another: 4 reads)
K3_VERBOSE=1 "$K3" "$K3_SRC/models/k3-nano" --serve 127.0.0.1:0 --parallel 2 2>"$T/err" &
pid=$!
serving() { grep -q "serving" "$T/err" || ! kill -0 $pid 2>/dev/null; }
wait_until "the server to say it is serving" 60 serving
url=$(grep -o 'http://[^ ]*/v1' "$T/err" | head -n 1)
rq=""
for i in 1 2; do
    $PY -c 'import json, sys, urllib.request as u
b = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
u.urlopen(u.Request(sys.argv[1] + "/chat/completions", b, {"Content-Type": "application/json"}), timeout=120).read()' \
        "$url" >"$T/req$i" 2>&1 &
    rq="$rq $!"
done
wait $rq
kill -TERM $pid 2>/dev/null
wait $pid
n=$(reads "$T/err"); a=$(grep -c " 200: " "$T/err")
[ "$n" -eq 1 ] && [ "$a" -eq 2 ]
check $? "--serve --parallel 2, two requests at once: the tokenizer read once ($n reads, $a answers; $(cat "$T/req1" "$T/req2" | head -c 100))"
finish
