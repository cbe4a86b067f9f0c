# t-docs.py: the repository's own format documents (doc/, issue 35 item 7) stand alone and agree
# with the program: no tracked text refers to a specification outside the repository
# (../shared/...); every relative link of README.md and doc/*.md names a file that exists; every
# release figure doc/model-format.md gives for a config.json key ("`key` [value]") equals what
# `k3-mkmodel --preset release` (the release's config, every figure) writes; k3chat(1)'s example
# of the memory fit's refusal is what k3chat prints for that release.
# The man pages render without groff warnings at every line length from 50 to 132 columns.
# Documents, not code: the first tree only (the sanitizer tree ran 174 groff renders and the
# 93-layer replica again, 11 CPU-s; its t-release runs the same generator and refusal on the
# release's widths under the sanitizers).
# run-once
import json
import os
import re
import shutil
import subprocess

SRC = os.environ.get("K3_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
B, T = os.environ["K3_BUILD"], os.environ["K3_TMP"]
fails = 0


def ok(cond, desc):
    global fails
    fails += not cond
    print(("PASS: " if cond else "FAIL: ") + desc, flush=True)


p = subprocess.run(["git", "-C", SRC, "ls-files"], capture_output=True, timeout=60)
files = p.stdout.decode().split() if p.returncode == 0 else []
outside = []
for f in files:
    if f.startswith("tests/t-docs.py") or not f.endswith((".c", ".h", ".md", ".py", ".sh", ".1", ".5", ".txt")):
        continue
    with open(os.path.join(SRC, f), encoding="utf-8", errors="replace") as fh:
        if "shared/spec" in fh.read():
            outside.append(f)
ok(len(files) > 100 and not outside, "no tracked file points at a specification outside the repository "
   "(%d files; %r)" % (len(files), outside[:5]))

docs = ["README.md"] + sorted("doc/" + f for f in os.listdir(os.path.join(SRC, "doc")) if f.endswith(".md"))
broken, n_links = [], 0
for d in docs:
    text = open(os.path.join(SRC, d), encoding="utf-8").read()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        n_links += 1
        if not os.path.exists(os.path.normpath(os.path.join(SRC, os.path.dirname(d), target))):
            broken.append((d, target))
ok(len(docs) >= 4 and n_links >= 8 and not broken and "doc/model-format.md" in open(os.path.join(SRC, "README.md")).read(),
   "README links the format documents; all %d relative links of %d documents resolve (%r)" % (n_links, len(docs), broken))

# the release figures against the release preset's config.json
out = os.path.join(T, "rel")
p = subprocess.run([os.path.join(B, "k3-mkmodel"), "--preset", "release", "--layers", "2", "--quiet", out],
                   capture_output=True, timeout=300)
cfg = json.load(open(os.path.join(out, "config.json"))) if p.returncode == 0 else {}
tc = cfg.get("text_config", {})
flat = dict(cfg, **tc, **tc.get("linear_attn_config", {}))
model_doc = open(os.path.join(SRC, "doc", "model-format.md"), encoding="utf-8").read()
sec2 = model_doc[model_doc.find("## 2."):model_doc.find("## 3.")]  # the settings read from text_config
pairs = re.findall(r"`([a-z_]+)`(?: [A-Z])? \[([^\]]+)\]", sec2)
wrong, seen = [], set()
for key, val in pairs:
    if key == "num_hidden_layers":  # the preset was cut to 2 layers here
        continue
    seen.add(key)
    want = {"true": True, "false": False}.get(val, None)
    if want is None:
        want = float(val.replace(",", ""))
    got = flat.get(key, "absent")
    if got != want:
        wrong.append((key, val, got))
ok(len(seen) >= 25 and not wrong, "doc/model-format.md: its %d release figures of config.json keys match "
   "`k3-mkmodel --preset release` (%r)" % (len(seen), wrong[:4]))
ok(str(cfg.get("eos_token_id")) in model_doc and "163586" in open(os.path.join(SRC, "doc", "chat-format.md")).read()
   and cfg.get("eos_token_id") == 163586, "the eos id the documents give is the release's (%r)" % cfg.get("eos_token_id"))
# k3chat(1) MEMORY FIT's example refusal ("the release on a 24 GB machine") is what k3chat prints
# for the release's config with K3_MEM_GB=24: it refuses from config.json alone, before any shard
# is read, so the whole preset (sparse, seconds to write) costs no compute
man1 = open(os.path.join(SRC, "man", "k3chat.1"), encoding="utf-8").read()
m = re.search(r"For example, the release on a 24 GB machine:\n\.PP\n\.nf\n\.RS\n(.*?)\n\.RE\n", man1, re.S)
want = " ".join(m.group(1).split()) if m else "(no example in the man page)"
full = os.path.join(T, "release")
p = subprocess.run([os.path.join(B, "k3-mkmodel"), "--preset", "release", "--quiet", full],
                   capture_output=True, timeout=300)
got = ""
if p.returncode == 0:
    p = subprocess.run([os.path.join(B, "k3chat"), full, "--prompt", "hi"], capture_output=True, timeout=120,
                       env=dict(os.environ, K3_MEM_GB="24", HOME=T, XDG_DATA_HOME=T, XDG_CACHE_HOME=T))
    err = p.stderr.decode(errors="replace")
    got = " ".join(err[err.find("memory: "):].split()) if "memory: " in err else err.strip()[:300]
shutil.rmtree(full, ignore_errors=True)
ok(m is not None and got == want, "k3chat(1) MEMORY FIT: the example refusal of the release at K3_MEM_GB=24 is "
   "what k3chat prints (%r)" % (got if got != want else "")[:400])
# every variable k3chat's sources read besides the settings table's K3_* rows (getenv, xdg_dir)
# has its entry in k3chat(1) ENVIRONMENT (XDG_CACHE_HOME, TERM, VTE_VERSION, TERM_PROGRAM and
# TMPDIR were read and not listed there)
man_env = man1[man1.find("\n.SH ENVIRONMENT"):]
man_env = man_env[:man_env.find("\n.SH ", 1)].replace("\\-", "-")
read = set()
for f in files:
    if f.startswith(("src/", "ui/", "tools/")) and f.endswith((".c", ".h")):
        text = open(os.path.join(SRC, f), encoding="utf-8", errors="replace").read()
        read |= set(re.findall(r'(?:getenv|xdg_dir)\("([A-Z][A-Z0-9_]*)"', text))
unlisted = sorted(v for v in read if not re.search(r"\b%s\b" % v, man_env))
ok(len(read) >= 8 and not unlisted, "k3chat(1) ENVIRONMENT lists every variable the sources read by name "
   "(%d: %s; not listed: %r)" % (len(read), " ".join(sorted(read)), unlisted))
# every program's --help: on standard output, status 0, and every line fits an 80-column terminal
# (k3chat's printed the settings table's docs on one line each, up to 129 columns; k3-mkmodel,
# k3-repack, k3-ab and k3-bench's were 92 to 125 wide); each lists its own option -h, --help
wide, nohelp = [], []
for prog in ("k3chat", "k3-mkmodel", "k3-repack", "k3-ab", "k3-bench"):
    p = subprocess.run([os.path.join(B, prog), "--help"], capture_output=True, timeout=60)
    out = p.stdout.decode("utf-8", errors="replace")
    lines = out.splitlines()
    if p.returncode != 0 or len(lines) < 2 or p.stderr:
        nohelp.append((prog, p.returncode, p.stderr[:100]))
    wide += [(prog, len(line), line) for line in lines if len(line.expandtabs()) > 80]
    if prog != "k3-bench" and "--help" not in out:  # k3-bench takes -h/--help as its one option
        nohelp.append((prog, "no --help line"))
ok(not wide and not nohelp, "the --help of k3chat, k3-mkmodel, k3-repack, k3-ab and k3-bench: status 0, on "
   "standard output, lines of at most 80 columns (%d too wide, first %r; %r)" % (len(wide), wide[:1], nohelp))
# the man pages render without a groff warning (-ww) at every width a terminal may give man,
# not only the default 80 columns: a long token with no break point leaves a line troff cannot
# adjust at some widths (79 columns once), and -Tascii (man in a C locale) lacks the chat's glyphs
if shutil.which("groff"):
    def groff_warnings(page, dev, width):
        args = ["groff", "-ww", "-man", "-T" + dev, "-z"] + (["-rLL=%dn" % width] if width else [])
        p = subprocess.run(args + [os.path.join(SRC, "man", page)], capture_output=True, timeout=60)
        return p.stderr.decode(errors="replace").strip() or (p.returncode and "exit %d" % p.returncode)

    for page in ("k3chat.1", "k3chat.5"):
        runs = [("utf8", 0), ("ascii", 0)] + [("utf8", w) for w in list(range(50, 133)) + [160, 200]]
        bad = [(dev, w, groff_warnings(page, dev, w)) for dev, w in runs]
        bad = [b for b in bad if b[2]]
        ok(not bad, "groff -ww renders man/%s without warnings, -Tutf8 and -Tascii, at line lengths "
           "50..132, 160, 200 (%d renders; first: %r)" % (page, len(runs), bad[:1]))
else:
    print("SKIP: groff not installed (man pages not checked for warnings)")
raise SystemExit(1 if fails else 0)
