#!/bin/bash
# relayout.sh: issue 20 items 2 and 6, in the root of a k3chat checkout. The move ran once
# (commit "layout: folders", ff09928); on the laid-out tree it says "nothing to move". What is
# left is `format`, run by the integrator after every branch has merged, as a commit of its own.
#
#   bash relayout.sh          move: folders per engine part and per front end (git mv), per-folder
#                             include paths in the Makefile, #include lines and path mentions
#                             rewritten, README's Layout table, then `make -j2 all CI=true`
#   bash relayout.sh check    only the plan: where every file goes; fails listing the files no
#                             rule places (nothing is changed)
#   bash relayout.sh format   optional second step, its own commit: clang-format over the tree
#
# Nothing is committed: look at `git status`, run the tests, then commit ("layout: ...").
#
# THE MAP (the architecture; the same table writes the Makefile's include paths)
#   include/k3.h          the public engine API, the only engine header a front end sees
#   src/base/             errors, logging, memory, time, shared helpers (k3-impl.h, util.c)
#   src/kern/             CPU kernels and quantized matrices (kern*.c, quant.c)
#   src/format/           file formats: safetensors read/write, k3 container, config.json, the
#                         tensor table (st*.c, repack.c, config.c, tensors.c)
#   src/tok/              tokenizer and the XTML chat format (tok*.c, chat-format.c)
#   src/conv/             conversations: transcript, generation, replay (conv*.c, transcript.c)
#   src/model/            the model: loading (load.c), forward pass (forward.c), session,
#                         sampling, routed-expert tier, --inspect
#   src/vk/               Vulkan device and GPU tier
#   ui/common/            what the front ends share: engine adapter and backends (worker,
#                         remote, mock), events, slash commands, settings, input line, text,
#                         Markdown, themes, clipboard
#   ui/tui/               the full-screen terminal UI
#   ui/cli/               k3chat's main, line mode and the CLI modes
#   ui/serve/             the OpenAI-compatible HTTP server
# A folder compiles with -I for itself and the folders listed in INC below, nothing else: a
# front end that includes an engine internal, or an engine part that reaches past its
# neighbours, fails to compile. Files are placed by name (RULES): a file another branch added
# whose name no rule matches stops the script with a list; add a rule and run it again.
set -euo pipefail
mode=${1:-move}
here=$(cd "$(dirname "$0")" && pwd)
[ -f Makefile ] && [ -d src ] && [ -d ui ] && [ -d .git -o -f .git ] ||
    { echo "relayout.sh: run it in the root of a k3chat checkout" >&2; exit 2; }

if [ "$mode" = format ]; then
    # .clang-format: SortIncludes is set to Never first (sorting reorders includes inside a block,
    # and some order matters: headers relying on an earlier one, the two kern-idot.inc inclusions
    # between macro definitions); tables stay verbatim inside "clang-format off" regions. Then the
    # whole tree is formatted, deps.sh installs clang-format, and the committed tests/t-format.sh
    # (make check runs it) checks the result here and keeps it so.
    command -v clang-format >/dev/null || { echo "relayout.sh: clang-format is not installed" >&2; exit 2; }
    grep -q '^SortIncludes:' .clang-format || echo 'SortIncludes: Never' >>.clang-format
    git ls-files '*.c' '*.h' '*.inc' | xargs clang-format -i --style=file
    grep -q 'clang-format' scripts/deps.sh || sed -i 's/^clang libclang-rt-dev/clang clang-format libclang-rt-dev/' scripts/deps.sh
    K3_SRC=$PWD sh tests/t-format.sh || echo "relayout.sh: fix the lines above by hand (clang-format cannot shorten them)"
    echo "relayout.sh: formatted; commit it on its own (\"format: clang-format over the tree\")"
    exit 0
fi
[ "$mode" = move ] || [ "$mode" = check ] || { echo "usage: relayout.sh [move|check|format]" >&2; exit 2; }
[ "$mode" = check ] || [ -z "$(git status --porcelain --untracked-files=no)" ] ||
    { echo "relayout.sh: the work tree has changes; commit or stash them first" >&2; exit 2; }

MODE=$mode /usr/bin/python3 - <<'PY'
import fnmatch, os, re, subprocess, sys

MODE = os.environ["MODE"]

# ---- rules: first match wins; (glob on the path, destination folder, new base name or None) ----
RULES = [
    ("src/k3.h", "include", None),
    ("src/k3-impl.h", "src/base", None),
    ("src/util*", "src/base", None),
    ("src/buf*", "src/base", None),
    ("src/json*", "src/base", None),
    ("src/kern*", "src/kern", None),
    ("src/gemm*", "src/kern", None),
    ("src/quant*", "src/kern", None),
    ("src/st.[ch]", "src/format", None),
    ("src/st-*", "src/format", None),
    ("src/dtype*", "src/format", None),
    ("src/repack*", "src/format", None),
    ("src/config*", "src/format", None),
    ("src/tensors*", "src/format", None),
    ("src/tok*", "src/tok", None),
    ("src/chat.c", "src/tok", "chat-format.c"),
    ("src/chat*", "src/tok", None),
    ("src/tool*", "src/tok", None),
    ("src/conv*", "src/conv", None),
    ("src/transcript*", "src/conv", None),
    ("src/vk*", "src/vk", None),
    ("src/model.c", "src/model", "load.c"),
    ("src/layers.c", "src/model", "forward.c"),
    ("src/model*", "src/model", None),
    ("src/layers*", "src/model", None),
    ("src/moe*", "src/model", None),
    ("src/session*", "src/model", None),
    ("src/sample*", "src/model", None),
    ("src/experts*", "src/model", None),
    ("src/inspect*", "src/model", None),
    ("src/fit*", "src/model", None),
    ("src/plan*", "src/model", None),
    ("src/mem*", "src/model", None),
    ("src/prefill*", "src/model", None),
    ("src/speed*", "src/model", None),
    ("ui/tui*", "ui/tui", None),
    ("ui/theme*", "ui/common", None),  # color roles: Markdown styling (md.h) uses them in line mode too
    ("ui/draw*", "ui/tui", None),
    ("ui/main.c", "ui/cli", None),
    ("ui/plain*", "ui/cli", None),
    ("ui/cli-*", "ui/cli", None),
    ("ui/replay*", "ui/cli", None),
    # serve-tools: the server's request side of tool calling; the OpenAI tool-call JSON that the
    # remote backend shares is ui/tool-json.c (ui/tool* -> ui/common)
    ("ui/serve*", "ui/serve", None),
    ("ui/http*", "ui/serve", None),
    ("ui/openai*", "ui/serve", None),
    ("ui/chat.c", "ui/common", "settings.c"),
    ("ui/chat.h", "ui/common", "settings.h"),
    ("ui/cli.h", "ui/common", None),
    ("ui/engine*", "ui/common", None),
    ("ui/worker*", "ui/common", None),
    ("ui/remote*", "ui/common", None),
    ("ui/mock*", "ui/common", None),
    ("ui/ev.[ch]", "ui/common", None),
    ("ui/ev-*", "ui/common", None),
    ("ui/text*", "ui/common", None),
    ("ui/xdg*", "ui/common", None),
    ("ui/cmd*", "ui/common", None),
    ("ui/input*", "ui/common", None),
    ("ui/md*", "ui/common", None),
    ("ui/clip*", "ui/common", None),
    ("ui/markdown*", "ui/common", None),
    ("ui/stats*", "ui/common", None),
    ("ui/tool*", "ui/common", None),
    ("ui/loadprog*", "ui/common", None),
]

# ---- the architecture: include paths per folder (a folder sees itself and these) ----
ENGINE = ["src/model", "src/vk", "src/format", "src/kern", "src/tok", "src/conv", "src/base", "include"]
FRONT = ["ui/common", "ui/tui", "ui/cli", "ui/serve"]
INC = {
    "include":    ["include"],
    "src/base":   ["src/base", "include"],
    "src/kern":   ["src/kern", "src/base", "include"],
    "src/format": ["src/format", "src/kern", "src/base", "include"],
    "src/tok":    ["src/tok", "src/base", "include"],
    "src/conv":   ["src/conv", "src/base", "include"],
    "src/model":  ["src/model", "src/vk", "src/format", "src/kern", "src/base", "include"],
    "src/vk":     ["src/vk", "src/kern", "src/base", "include", "$(B)/gen"],
    "ui/common":  ["ui/common", "include"],
    "ui/tui":     ["ui/tui", "ui/common", "include"],
    "ui/cli":     ["ui/cli", "ui/common", "include"],
    "ui/serve":   ["ui/serve", "ui/common", "include"],
    "tools":      ["tools", "src/format", "src/kern", "src/base", "include"],
    "bench":      ["bench"] + ENGINE,
    "tests":      ["tests"] + ENGINE + FRONT,
    "tests/fuzz": ["tests/fuzz"] + ENGINE + FRONT,
}
WHAT = {
    "include": "the public engine API (`k3.h`), the only engine header the front ends see",
    "src/base": "errors, logging, memory, time (`k3-impl.h`, `util.c`)",
    "src/kern": "CPU kernels and quantized matrices (`kern*.c`, `quant.c`)",
    "src/format": "file formats: safetensors read and write, the k3 container, `config.json`, "
                  "the tensor table (`tensors.h`)",
    "src/tok": "tokenizer and the XTML chat format (`chat-format.c`)",
    "src/conv": "conversations: transcript, generation, replay",
    "src/model": "the model: loading (`load.c`), the forward pass (`forward.c`), sessions, sampling, "
                 "the routed-expert tier, `--inspect`",
    "src/vk": "Vulkan device and GPU tier (built when `VK=1`)",
    "ui/common": "what the front ends share: the engine adapter and its backends (local worker, "
                 "remote, mock), events, slash commands, settings, the input line, text, Markdown, "
                 "themes, the clipboard",
    "ui/tui": "the full-screen terminal UI",
    "ui/cli": "`k3chat`'s `main`, line mode and the CLI modes",
    "ui/serve": "the OpenAI-compatible HTTP server",
}

def git(*a, out=False):
    r = subprocess.run(["git", *a], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"relayout.sh: git {' '.join(a)}: {r.stderr.strip()}")
    return r.stdout

files = [f for f in git("ls-files", "src", "ui").split("\n") if f]
moves, unplaced = {}, []
for f in files:
    if f.count("/") != 1:  # already in a subfolder: the layout ran before
        continue
    for pat, dst, new in RULES:
        if fnmatch.fnmatch(f, pat):
            moves[f] = dst + "/" + (new or os.path.basename(f))
            break
    else:
        unplaced.append(f)
if unplaced:
    print("relayout.sh: no rule places these files (add a RULES line and run again):", file=sys.stderr)
    for f in unplaced:
        print("  " + f, file=sys.stderr)
    sys.exit(1)
if not moves:
    sys.exit("relayout.sh: nothing to move (already laid out?)")
dests = list(moves.values())
clash = sorted({d for d in dests if dests.count(d) > 1})
if clash:
    sys.exit("relayout.sh: two files would land on " + ", ".join(clash))
# ---- seams: every #include "x" resolves inside the folder's include paths ----
# where: {path after the move: path to read it from now}; inc_map rewrites an include as the
# move would (renamed headers, "../src/X"), so `check` sees the seams before anything moves.
def seams(where, inc_map=lambda s: s):
    bad = []
    for f, src in sorted(where.items()):
        if not f.endswith((".c", ".h", ".inc")) or f.startswith("tests/fuzz/corpus/"):
            continue
        d = os.path.dirname(f)
        paths = INC.get(d)
        if paths is None:
            bad.append(f"{f}: no include paths for folder {d}")
            continue
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(src, errors="replace").read(), re.M):
            inc = inc_map(inc)
            cands = [os.path.normpath(os.path.join(d, inc))] + \
                    [os.path.join(p, inc) for p in paths if not p.startswith("$(")]
            if not any(c in where for c in cands) and inc != "shaders_spv.h":
                bad.append(f'{f}: #include "{inc}" is not visible from {d}')
    if bad:
        print("relayout.sh: includes that cross a seam (fix the include or the INC table):", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        sys.exit(1)

if MODE == "check":
    for f in sorted(moves):
        print(f"{f:28s} -> {moves[f]}")
    hdr = {os.path.basename(f): os.path.basename(d) for f, d in moves.items() if f.endswith(".h")}
    rel = lambda i: re.sub(r"^\.\./((?:src|ui)/.*)$", lambda m: "../" + moves.get(m.group(1), m.group(1)), i)
    seams({moves.get(f, f): f for f in git("ls-files", "src", "ui", "include", "tools", "bench",
                                            "tests").split("\n") if f},
          lambda i: rel(hdr.get(i, i)))
    print(f"relayout.sh: check: {len(moves)} files placed, every include resolves within its folder's seams")
    sys.exit(0)

# ---- move ----
for f, d in sorted(moves.items()):
    os.makedirs(os.path.dirname(d), exist_ok=True)
    git("mv", f, d)

# ---- rewrite text: moved paths, #include lines of renamed headers, renamed base names ----
text_files = [f for f in git("ls-files").split("\n") if f and not f.startswith(("models/", "tests/fuzz/corpus/",
              "tests/fixtures/")) and f != "scripts/relayout.sh" and os.path.isfile(f) and not os.path.islink(f)]
# (not this script: bash is still reading it, and its rules name the old paths on purpose)
def is_text(f):
    with open(f, "rb") as h:
        return b"\0" not in h.read(65536)
text_files = [f for f in text_files if is_text(f)]

path_map = dict(moves)
for f, d in moves.items():  # object files of moved sources (per-file Makefile rules)
    if f.endswith(".c"):
        path_map[f[:-2] + ".o"] = d[:-2] + ".o"
path_re = re.compile(r"(?<![A-Za-z0-9_.-])(" + "|".join(re.escape(p) for p in sorted(path_map, key=len, reverse=True))
                     + r")(?![A-Za-z0-9_-])")
renamed = {os.path.basename(f): os.path.basename(d) for f, d in moves.items()
           if os.path.basename(f) != os.path.basename(d)}
def base_re(name):
    return re.compile(r"(?<![A-Za-z0-9_./-])" + re.escape(name) + r"(?![A-Za-z0-9_-])")

changed = 0
for f in text_files:
    with open(f, encoding="utf-8", errors="surrogateescape") as h:
        s = h.read()
    o = s
    s = path_re.sub(lambda m: path_map[m.group(1)], s)
    # "../src/X" style includes: to the moved path, relative to the repository root's parent
    s = re.sub(r'#include "\.\./((?:src|ui)/[^"]+)"', lambda m: '#include "../' + moves.get(m.group(1), m.group(1)) + '"', s)
    # renamed files: the base name in #include lines and in prose, in the part of the tree it belongs to
    for old, new in renamed.items():
        # src or ui: "chat.c" in src/ and include/ means the chat format, in ui/ the settings
        mine = "ui" if f.startswith("ui/") else "src"
        owner = [d for f0, d in moves.items() if os.path.basename(f0) == old]
        if len(owner) != 1:
            owner = [d for d in owner if d.startswith(mine + "/")]
            if len(owner) != 1 or not f.startswith(("src/", "include/", "ui/")):
                continue
        top, new = owner[0].split("/")[0], os.path.basename(owner[0])
        if top == "src" and f.startswith("include/"):
            top = "include"
        if old.endswith(".h"):
            s = re.sub(r'#include "' + re.escape(old) + '"', '#include "' + new + '"', s)
        if f.startswith(top + "/") or (old in ("model.c", "layers.c")):
            s = base_re(old).sub(new, s)
    if s != o:
        with open(f, "w", encoding="utf-8", errors="surrogateescape") as h:
            h.write(s)
        changed += 1

# ---- Makefile ----
mk = open("Makefile").read()
inc_lines = ["# Include paths per folder (relayout): a folder sees its own headers and these, nothing else.",
             "# The seams are enforced here: a front end that includes an engine internal fails to compile."]
for d, l in INC.items():
    inc_lines.append(f"INC_{d} := {' '.join(l)}")
inc_lines += ["# -I flags for source file $(1): its folder's INC_ list (an unknown folder is an error)",
              "incs = $(addprefix -I,$(or $(INC_$(patsubst %/,%,$(dir $(1)))),$(error no INC_ line in the Makefile for $(dir $(1)))))",
              ""]
subs = [  # (the path rewrite above already ran on the Makefile: ui/main.c is ui/cli/main.c)
    (r"-Isrc -Iui -Itests/fuzz", r"$(call incs,tests/fuzz/x.c)"),
    (r"-Isrc -Iui ", r""),
    (r"\$\(sort \$\(wildcard src/\*\.c\)\)", r"$(sort $(wildcard src/*/*.c))"),
    (r"\$\(filter-out src/vk%\.c,", r"$(filter-out src/vk/%.c,"),
    (r"\$\(filter-out ui/(cli/)?main\.c,\$\(sort \$\(wildcard ui/\*\.c\)\)\)",
     r"$(filter-out ui/cli/main.c,$(sort $(wildcard ui/*/*.c)))"),
    (r"\$\(CC\) \$\(CFLAGS\) -c \$< -o \$@", r"$(CC) $(CFLAGS) $(call incs,$<) -c $< -o $@"),
]
for a, b in subs:
    mk, n = re.subn(a, b, mk)
    if n == 0:
        print(f"relayout.sh: Makefile: no match for {a!r} (the Makefile changed: patch it by hand)", file=sys.stderr)
mk = mk.replace("# ---- sources ----", "\n".join(inc_lines) + "# ---- sources ----", 1)
layout = ["# Layout is architecture (README's Layout table; include paths per folder: INC_ below):",
          "#   include/k3.h       public engine API: the only engine header ui/ sees",
          "#   src/*/*.c    -> $(B)/libk3.a    engine parts: base, kern, format, tok, conv, model, vk",
          "#   ui/*/*.c     -> $(B)/libk3ui.a  front ends: common, tui, cli (ui/cli/main.c is k3chat's main), serve"]
mk = re.sub(r"# Layout is architecture:\n(#   (src|ui)/.*\n)+", "\n".join(layout) + "\n", mk, count=1)
stale = [p for p in (r"-Isrc\b", r"-Iui\b", r"wildcard src/\*\.c", r"wildcard ui/\*\.c", r"obj/ui/main\.o") if re.search(p, mk)]
open("Makefile", "w").write(mk)
if stale:
    sys.exit("relayout.sh: the Makefile still has " + ", ".join(stale) + ": patch it by hand")

# ---- README Layout table ----
rd = open("README.md").read()
m = re.search(r"## Layout\n\n\| path \| what \|\n\|---\|---\|\n((?:\|.*\n)+)", rd)
if m:
    rows = [r for r in m.group(1).splitlines() if not re.match(r"\| `(src|ui)/", r)]
    new = [f"| `{d}/` | {w} |" for d, w in WHAT.items()]
    rd = rd[:m.start(1)] + "\n".join(new + rows) + "\n" + rd[m.end(1):]
    open("README.md", "w").write(rd)
else:
    print("relayout.sh: README.md: no Layout table found", file=sys.stderr)

where = {f: f for f in git("ls-files", "src", "ui", "include", "tools", "bench", "tests").split("\n") if f}
seams(where)
print(f"relayout.sh: moved {len(moves)} files, rewrote {changed} files, Makefile and README updated")
PY

[ "$mode" = check ] && exit 0
if [ "${RELAYOUT_BUILD:-1}" = 1 ]; then
    rm -rf build/obj build-asan/obj
    make -j2 all CI=true
fi
echo "relayout.sh: done; now: TEST_FILTER=... sh tests/run.sh build, git add -A, git commit"
