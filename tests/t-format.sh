#!/bin/sh
# t-format.sh: every C source and header follows .clang-format (the tree was formatted in one
# commit; `git ls-files '*.c' '*.h' '*.inc' | xargs clang-format -i` fixes a file that drifted).
# run-once
. "$K3_SRC/tests/count.sh"
cd "$K3_SRC" || exit 1
if ! command -v clang-format >/dev/null 2>&1; then
    echo "SKIP: clang-format is not installed (scripts/deps.sh installs it)"
    exit 0
fi
bad=$(git ls-files '*.c' '*.h' '*.inc' | xargs clang-format --dry-run -Werror --style=file 2>&1 |
    sed -n 's/^\([^ :]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u)
[ -z "$bad" ] && echo "PASS: every C file follows .clang-format" ||
    echo "FAIL: not formatted (clang-format -i FILE): $(echo $bad)"
long=$(git ls-files '*.c' '*.h' '*.inc' | /usr/bin/python3 -c '
import sys
for f in sys.stdin.read().split():
    for i, l in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        if len(l.rstrip("\n")) > 110: print(f"{f}:{i}")' | head -20)
[ -z "$long" ] && echo "PASS: no line over 110 columns" || echo "FAIL: lines over 110 columns: $(echo $long)"
