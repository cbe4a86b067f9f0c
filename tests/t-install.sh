#!/bin/sh
# t-install.sh: `make install DESTDIR=... PREFIX=/usr` into a scratch root: programs (executable),
# man pages 1 and 5, themes; the installed k3chat runs (--version, and finds its installed themes);
# `k3chat --help`, the man page's OPTIONS and the getopt table in ui/cli/main.c name the same options;
# the man pages render without groff warnings.
# The install reuses the already built tree K3_BUILD and never compiles into it (that would race
# other tests): when `make -q` says the tree is not up to date, the test reports SKIP.
# run-once
. "$K3_SRC/tests/lib.sh" # pass, fail, check (check STATUS DESC here), ok
set -u
B=${K3_BUILD:?}; S=${K3_SRC:?}; T=${K3_TMP:?}

[ -x "$B/k3chat" ] || { fail "$B/k3chat not built"; exit 1; }
# same knobs as the tree was built with (the sanitizer tree is never the first tree, but be safe)
SAN=; case "$B" in *asan*) SAN=1 ;; esac
progs=$(cd "$B" && ls k3chat k3-* 2>/dev/null | sed "s|^|$B/|")
if ! make -C "$S" -q B="$B" SAN="$SAN" $progs >/dev/null 2>&1; then
    echo "SKIP: $B is not up to date (make -q); install would rebuild the shared tree"
    exit 0
fi

R=$T/root
make -C "$S" -s B="$B" SAN="$SAN" DESTDIR="$R" PREFIX=/usr install >"$T/log" 2>&1
check $? "make install DESTDIR=\$K3_TMP/root PREFIX=/usr (log: $(tail -c 300 "$T/log"))"

for p in "$B"/k3chat "$B"/k3-*; do
    [ -f "$p" ] && [ -x "$p" ] || continue
    n=$(basename "$p")
    [ -x "$R/usr/bin/$n" ]; check $? "program installed and executable: /usr/bin/$n"
done
for f in "$S"/man/*.1; do
    [ -f "$R/usr/share/man/man1/$(basename "$f")" ]; check $? "man page installed: man1/$(basename "$f")"
done
for f in "$S"/man/*.5; do
    [ -f "$R/usr/share/man/man5/$(basename "$f")" ]; check $? "man page installed: man5/$(basename "$f")"
done
for f in "$S"/themes/*.theme; do
    [ -f "$R/usr/share/k3chat/themes/$(basename "$f")" ]; check $? "theme installed: $(basename "$f")"
done
n=$(find "$R" -type f -perm -u+x -path '*/share/*' | wc -l)
check "$([ "$n" -eq 0 ]; echo $?)" "nothing under share/ is executable ($n files)"
n=$(find "$R" ! -path "$R/usr*" -mindepth 1 | wc -l)
check "$([ "$n" -eq 0 ]; echo $?)" "everything lands under DESTDIR/PREFIX ($n stray paths)"

v=$("$R/usr/bin/k3chat" --version 2>&1); rc=$?
check $rc "installed k3chat --version exits 0"
[ "$v" = "k3chat $(cat "$S/VERSION")" ]; check $? "installed k3chat --version prints 'k3chat $(cat "$S/VERSION")' (got '$v')"

# ---- --help, the man page and the getopt table agree ----
"$R/usr/bin/k3chat" --help >"$T/help" 2>&1; check $? "k3chat --help exits 0"
# the options in ui/cli/main.c (the getopt rows; the mode options' table, picks: {"name", CLI_...}),
# the settings' flags (column 9) in include/k3-settings.h
{ grep -oE '\{"[a-z][a-z0-9-]*", *((no|required|optional)_argument|CLI_[A-Z_]+)' "$S/ui/cli/main.c" |
      sed 's/^{"//; s/".*//'
  sed -n 's/^ *X(\([^,]*,\)\{8\} *"\([a-z][a-z0-9-]*\)",.*/\2/p' "$S/include/k3-settings.h"; } | sort -u >"$T/getopt"
[ -s "$T/getopt" ]; check $? "getopt table found in ui/cli/main.c ($(wc -l <"$T/getopt") options)"
# the man page's OPTIONS section, \- unescaped
sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$S/man/k3chat.1" | sed 's/\\-/-/g' | grep -oE -- '--[a-z][a-z0-9-]*' |
    sed 's/^--//' | sort -u >"$T/man"
grep -oE -- '--[a-z][a-z0-9-]*' "$T/help" | sed 's/^--//' | sort -u >"$T/helpopts"
for o in $(cat "$T/getopt"); do
    grep -qx -- "$o" "$T/helpopts"; check $? "--help lists --$o"
    grep -qx -- "$o" "$T/man"; check $? "man page OPTIONS lists --$o"
done
for o in $(cat "$T/man" "$T/helpopts" | sort -u); do
    grep -qx -- "$o" "$T/getopt"; check $? "--$o (in --help or the man page) is a real option"
done
# the k3chat command lines README.md, the k3-nano card, doc/ and the man page's EXAMPLES show use
# real options only (a renamed option would leave them failing as written)
{ grep -ohE '`[^`]*k3chat [^`]*`' "$S/README.md" "$S/models/k3-nano/README.md" "$S"/doc/*.md
  grep -hE '^    .*k3chat ' "$S/README.md" "$S/models/k3-nano/README.md"
  sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$S/man/k3chat.1" | sed 's/\\-/-/g' | grep 'k3chat '; } |
    grep -oE -- 'k3chat .*' | grep -oE -- ' --[a-z][a-z0-9-]*' | sed 's/^ --//' | sort -u >"$T/docopts"
n=$(wc -l <"$T/docopts")
[ "$n" -ge 10 ]; check $? "README, the k3-nano card, doc/ and EXAMPLES show k3chat command lines ($n options)"
for o in $(cat "$T/docopts"); do
    grep -qx -- "$o" "$T/getopt"; check $? "--$o (in a k3chat command line of the documents) is a real option"
done

# ---- the man pages render without warnings ----
if command -v groff >/dev/null 2>&1; then
    for f in "$R"/usr/share/man/man1/*.1 "$R"/usr/share/man/man5/*.5; do
        groff -man -Tutf8 -ww -z "$f" >"$T/gw" 2>&1
        [ $? -eq 0 ] && [ ! -s "$T/gw" ]; check $? "groff -ww renders $(basename "$f") without warnings ($(head -c 200 "$T/gw"))"
    done
else
    echo "SKIP: groff not installed (man pages not lint-checked)"
fi
