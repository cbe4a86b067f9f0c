#!/usr/bin/python3
"""hostile-config.py: the time k3chat takes to refuse a model directory whose config.json has one
hostile value (BENCHMARKS.md, "Hostile model files").

    bench/hostile-config.py K3CHAT TINY_DIR [KEY ...]

TINY_DIR: a checkpoint of k3-mkmodel --preset tiny. For each integer key of text_config and
linear_attn_config (or the keys given), config.json gets the value 65,536 (and the largest the
reader accepts, 1 << 24, for the widths), the shards stay as they are, and
`k3chat DIR --prompt hi --max-tokens 1` runs with an empty speed cache (XDG_CACHE_HOME), at most
60 s. One line a case: key, value, exit status, wall seconds, the first line of the error.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

K3, SRC = sys.argv[1], sys.argv[2]
KEYS = sys.argv[3:]
cfg0 = json.load(open(os.path.join(SRC, "config.json")))
tc0 = cfg0["text_config"]
cases = []
for k, v in tc0.items():
    if isinstance(v, int) and not isinstance(v, bool):
        cases.append(((k,), v))
for k, v in tc0["linear_attn_config"].items():
    if isinstance(v, int) and not isinstance(v, bool):
        cases.append((("linear_attn_config", k), v))
if KEYS:
    cases = [c for c in cases if c[0][-1] in KEYS]
tmp = tempfile.mkdtemp(prefix="aload-hostile-")
try:
    d = os.path.join(tmp, "m")
    shutil.copytree(SRC, d)
    for path, orig in cases:
        for val in (65536, 1 << 24):
            cfg = json.loads(json.dumps(cfg0))
            o = cfg["text_config"]
            for p in path[:-1]:
                o = o[p]
            o[path[-1]] = val
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            cache = os.path.join(tmp, "cache")
            shutil.rmtree(cache, ignore_errors=True)
            env = dict(os.environ, XDG_CACHE_HOME=cache, HOME=tmp)
            t0 = time.time()
            try:
                r = subprocess.run([K3, d, "--prompt", "hi", "--max-tokens", "1"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
                rc, err = r.returncode, r.stderr.decode(errors="replace")
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            secs = time.time() - t0
            first = [l for l in err.splitlines() if "expected speed" not in l][:1]
            print("%-40s %9d  rc %-7s %6.2f s  %s" % (".".join(path), val, rc, secs,
                                                   (first[0] if first else "")[:150]), flush=True)
finally:
    shutil.rmtree(tmp)
