#!/bin/sh
# t-tools-escape.sh: the command-line tools quote file names, option values and a model's names
# through the one escaping function (ui/common/text.c txt_term_printf): a name holding
# ESC ] 0 ; ... BEL (sets the terminal's title; ESC ] 52 writes the clipboard) shows as \x1B and
# \x07, never as the raw bytes. The messages go to a file here: txt_term_printf escapes wherever
# they go (a log read with cat reaches a terminal too). Covered: k3chat --tokenize, --json-schema,
# --ids and an unknown option (getopt's own message quoted it raw); k3-repack's shard lines,
# errors and option values; k3-mkmodel's OUT_DIR; k3-ab's --text and settings. Then getopt's
# refusals in the tools' words (an ambiguous prefix, a value to a switch, a missing value).
. "$K3_SRC/tests/lib.sh"
set -u
B=$K3_BUILD
T=$K3_TMP
E=$(printf '\033')
X="$E]0;PWNED$(printf '\a')" # the title command, whole
tiny_model "$T/m" 3

# esc_ok DESC STATUS WANT-STATUS FILE: exit status as wanted, FILE names the escaped command
# (\x1B]0;PWNED\x07) and holds no ESC or BEL byte
esc_ok() {
    if [ "$2" = "$3" ] && grep -qF '\x1B]0;PWNED\x07' "$4" && ! grep -q "$E" "$4" && ! grep -q "$(printf '\a')" "$4"; then
        pass "$1: exit $2, the name escaped ($(head -c 140 "$4" | tr -d '\n'))"
    else
        fail "$1: exit $2 (want $3), stderr: $(head -c 200 "$4" | od -c | head -n 4 | tr -s ' ' | tr '\n' ' ')"
    fi
}

# ---- k3chat: the tokenizer and generation CLI --------------------------------------------------
"$B/k3chat" --tokenize "$T/m" "$T/in$X.txt" >/dev/null 2>"$T/e1"
esc_ok "k3chat --tokenize of a missing file named with ESC" $? 1 "$T/e1"
mkdir "$T/dir$X"
"$B/k3chat" --tokenize "$T/m" "$T/dir$X" >/dev/null 2>"$T/e2"
esc_ok "k3chat --tokenize of a directory named with ESC (read error)" $? 1 "$T/e2"
"$B/k3chat" "$T/m" --prompt hi --max-tokens 1 --json-schema "$T/schema$X.json" >/dev/null 2>"$T/e3"
esc_ok "k3chat --json-schema naming a missing file" $? 1 "$T/e3"
"$B/k3chat" "$T/m" --ids "1 2$X" --max-tokens 1 >/dev/null 2>"$T/e4"
esc_ok "k3chat --ids with a bad id holding ESC" $? 2 "$T/e4"
"$B/k3chat" "--frob$X" "$T/m" >/dev/null 2>"$T/e5"
esc_ok "k3chat with an unknown option holding ESC (getopt's own message was raw)" $? 2 "$T/e5"

# ---- k3-repack --------------------------------------------------------------------------------
"$B/k3-repack" "$T/m" "$T/c" --bits "8$X" >/dev/null 2>"$T/e6"
esc_ok "k3-repack --bits holding ESC" $? 2 "$T/e6"
"$B/k3-repack" "$T/m" "$T/c" --bits 8 --shards "1$X" >/dev/null 2>"$T/e7"
esc_ok "k3-repack --shards holding ESC" $? 2 "$T/e7"
"$B/k3-repack" "$T/m" "$T/c" --bits 8 "--frob$X" >/dev/null 2>"$T/e8"
esc_ok "k3-repack with an unknown option holding ESC" $? 2 "$T/e8"
: >"$T/file$X"
"$B/k3-repack" "$T/m" "$T/file$X" --bits 8 >/dev/null 2>"$T/e9"
esc_ok "k3-repack to a DST that is a file named with ESC" $? 1 "$T/e9"
# a source whose index names a shard with ESC in its file name: the 'shard N/M NAME: written' lines
cp -r "$T/m" "$T/mx"
mv "$T/mx/model-00002-of-000008.safetensors" "$T/mx/model-00002$X.safetensors"
/usr/bin/python3 - "$T/mx" "model-00002$X.safetensors" <<'EOF'
import json, sys
p = sys.argv[1] + "/model.safetensors.index.json"
idx = json.load(open(p))
idx["weight_map"] = {k: (sys.argv[2] if v == "model-00002-of-000008.safetensors" else v) for k, v in idx["weight_map"].items()}
json.dump(idx, open(p, "w"))
EOF
"$B/k3-repack" "$T/mx" "$T/cx" --bits 8 >/dev/null 2>"$T/e10"
esc_ok "k3-repack of a source with a shard named with ESC (its progress lines)" $? 0 "$T/e10"

# ---- k3-mkmodel and k3-ab -----------------------------------------------------------------------
"$B/k3-mkmodel" --preset tiny --quiet "$T/file$X" >/dev/null 2>"$T/e11"
esc_ok "k3-mkmodel to an OUT_DIR that is a file named with ESC" $? 1 "$T/e11"
"$B/k3-mkmodel" --preset "tiny$X" "$T/n" >/dev/null 2>"$T/e12"
esc_ok "k3-mkmodel --preset holding ESC" $? 2 "$T/e12"
"$B/k3-ab" --text "$T/none$X" "$T/m" "" "" >/dev/null 2>"$T/e13"
esc_ok "k3-ab --text naming a missing file with ESC" $? 2 "$T/e13"
"$B/k3-ab" "$T/m" "K3_BITS$X" "" >/dev/null 2>"$T/e14"
esc_ok "k3-ab with a setting holding ESC" $? 2 "$T/e14"

# ---- getopt's refusals, said by txt_getopt_error (opterr = 0): each names the option ------------
for c in "k3chat --th x:k3chat: '--th' is ambiguous: --think --think-budget --theme" \
    "k3-repack --quiet=1:k3-repack: --quiet takes no value" "k3-repack --bits:k3-repack: --bits needs a value" \
    "k3-mkmodel --s x:k3-mkmodel: '--s' is ambiguous: --seed --single --shared" \
    "k3-mkmodel --frob x:k3-mkmodel: unknown option '--frob'"; do
    cmd=${c%%:*}
    # shellcheck disable=SC2086
    "$B/"$cmd >/dev/null 2>"$T/eo"; rc=$?
    [ "$rc" = 2 ] && [ "$(head -n 1 "$T/eo")" = "${c#*:}" ]; ok $? "$cmd: exit $rc, '$(head -n 1 "$T/eo")'"
done
exit 0
