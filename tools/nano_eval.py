#!/usr/bin/python3
"""nano_eval.py: check k3-nano through the C engine (build/k3chat).

  nano_eval.py accuracy MODEL_DIR [--n 200] [--think on|off] [--effort max] [--jobs 2] [--json OUT]
      The held-out prompts of nano_corpus.heldout (never trained on: see numeric_key), answered
      by k3chat with greedy decoding; prints the accuracy per task (2-digit add/sub separately).
  nano_eval.py logits MODEL_DIR [--n 8]
      The exported files loaded into the PyTorch model (train_nano.load_export) against
      k3chat's logits (K3_LOGITS, f32 weights) on held-out conversations: worst relative L2.
  nano_eval.py ids MODEL_DIR [--n 3]
      The ids of n held-out conversations per task as one line (real text for tools/k3-ab).
  nano_eval.py render MODEL_DIR [--n 300]
      This module's tokenizer and chat renderer (nano_tok) against k3chat --tokenize and
      --chat-ids on corpus conversations (multi-turn, system prompts, thinking on and off).
  nano_eval.py multiturn MODEL_DIR [--n 50] [--min-all F]
      Two held-out questions of different tasks in one k3chat --plain conversation (greedy,
      thinking on): how often the second is answered right with the first turn in context.

Exit status 1 when a check fails its bar (accuracy: --min-add2 / --min-other; logits: 1e-4;
render: any difference). K3CHAT overrides the path of the k3chat binary.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nano_corpus  # noqa: E402
import nano_tok  # noqa: E402

K3CHAT = os.environ.get("K3CHAT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "k3chat"))
NUM = re.compile(r"[0-9]+")


def expected(ex):
    """What a right answer must say: a function of the response text -> bool."""
    task, msgs = ex["task"], ex["messages"]
    q, ans = msgs[-2]["content"], msgs[-1]["content"]
    if task in ("add", "sub", "count"):
        want = NUM.findall(ans)[-1]
        return lambda r: NUM.findall(r)[-1:] == [want]
    if task == "reverse":  # the reversed word ends the reference answer (the question's wording varies)
        want = re.findall(r"[a-z]+", ans)[-1]
        return lambda r: re.findall(r"[a-z]+", r)[-1:] == [want]
    if task == "compare":
        a, b = map(int, NUM.findall(q)[:2])
        if q.startswith("Is"):
            return lambda r: r.lower().startswith("yes" if a > b else "no")
        return lambda r: NUM.findall(r)[:1] == [str(max(a, b))]
    if task == "sort":
        want = NUM.findall(ans)
        return lambda r: NUM.findall(r) == want
    if task == "chat":
        for qs, _, answers in nano_corpus.CHAT:
            if q in qs:
                return lambda r, answers=answers: r.strip() in answers
    raise ValueError(task)


def k3chat(d, args, think, effort, stdin=None):
    """k3chat on model d, greedy, at most 400 tokens a turn, one thread, CPU only."""
    return subprocess.run([K3CHAT, d, *args, "--temp", "0", "--max-tokens", "400", "--think", think,
                           "--effort", effort], input=stdin, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", K3_VK="0"), timeout=120)


def run_one(d, ex, think, effort):
    msgs = ex["messages"]
    args = ["--prompt", msgs[-2]["content"]]
    if msgs[0]["role"] == "system":
        args += ["--system", msgs[0]["content"]]
    r = k3chat(d, args, think, effort)
    # stderr carries the reasoning and k3chat's own notices (loading progress, memory fit), which
    # all start with "k3chat: "
    err = "".join(l for l in r.stderr.splitlines(True) if not l.startswith("k3chat: "))
    return r.returncode, r.stdout, err


def accuracy(a):
    held = nano_corpus.heldout(a.seed, a.n)
    jobs = [(t, ex) for t, exs in held.items() for ex in exs[:a.n]]
    with ThreadPoolExecutor(a.jobs) as pool:
        outs = list(pool.map(lambda j: run_one(a.model, j[1], a.think, a.effort), jobs))
    res, samples, answered = {}, {}, 0
    for (task, ex), (rc, out, err) in zip(jobs, outs):
        # an answer in the response channel; reasoning exactly when thinking is on
        answered += rc == 0 and out.strip() != "" and (err.strip() != "") == (a.think == "on")
        name = task
        if task in ("add", "sub"):
            nd = max(len(x) for x in NUM.findall(ex["messages"][-2]["content"])[:2])
            name = f"{task}{nd}"
        ok = rc == 0 and expected(ex)(out)
        for k in {name, task}:
            r = res.setdefault(k, [0, 0])
            r[0] += ok
            r[1] += 1
        if not ok and len(samples.setdefault(task, [])) < 3:
            samples[task].append({"q": ex["messages"][-2]["content"], "response": out.strip(),
                                  "reasoning": err.strip()[:300], "rc": rc})
    print(f"k3-nano accuracy, {a.n} held-out prompts per task, greedy, thinking {a.think}"
          f"{' (effort ' + a.effort + ')' if a.think == 'on' else ''}:")
    for k in sorted(res):
        print(f"  {k:8s} {100 * res[k][0] / res[k][1]:6.1f} %  ({res[k][0]}/{res[k][1]})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"n": a.n, "answered": answered, "prompts": len(jobs), "think": a.think, "effort": a.effort, "seed": a.seed,
                       "accuracy": {k: v[0] / v[1] for k, v in res.items()},
                       "counts": res, "failures": samples}, f, indent=1)
    print(f"  {answered}/{len(jobs)} answered in the response channel"
          f"{', with reasoning in the think channel' if a.think == 'on' else ', with no reasoning'}")
    acc = {k: v[0] / v[1] for k, v in res.items()}
    if a.plot:
        bars(acc, res, a)
    right = sum(v[0] for k, v in res.items() if k in nano_corpus.TASKS)
    print(f"  {right}/{len(jobs)} right in all ({100 * right / len(jobs):.1f} %)")
    bad = [] if answered >= a.min_answered * len(jobs) else ["answers in the right channels"]
    bad += [] if right >= a.min_all * len(jobs) else ["all tasks together"]
    bad += [k for k in ("add2", "sub2") if acc.get(k, 0) < a.min_add2]
    bad += [k for k in nano_corpus.TASKS if k not in ("add", "sub") and acc.get(k, 0) < a.min_other]
    if bad:
        print(f"below the bar: {', '.join(bad)}")
    return 1 if bad else 0


def bars(acc, res, a):
    """A bar chart of the accuracy per task (and per operand length for add/sub)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [k for k in ("add1", "add2", "add3", "sub1", "sub2", "sub3", "count", "reverse", "compare", "sort", "chat")
            if k in acc]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(keys, [100 * acc[k] for k in keys], color=["#4c72b0" if k[-1].isdigit() else "#55a868" for k in keys])
    for i, k in enumerate(keys):
        ax.text(i, 100 * acc[k] + 1, f"{100 * acc[k]:.0f}", ha="center", fontsize=8)
    ax.axhline(95, color="#c44e52", lw=0.8, ls="--")
    ax.axhline(80, color="#dd8452", lw=0.8, ls="--")
    ax.set_ylim(0, 108)
    ax.set_ylabel("right answers (%)")
    ax.set_title(f"k3-nano through k3chat: {a.n} held-out prompts per task, greedy, thinking {a.think}")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=90)


def logits(a):
    import numpy as np
    import torch
    import train_nano
    torch.set_num_threads(1)
    model, _ = train_nano.load_export(a.model)
    tok = nano_tok.Tok.load(a.model)
    V = tok.n + 256
    rng = random.Random(a.seed + 7)
    held = nano_corpus.heldout(a.seed, a.n)
    worst = 0.0
    with tempfile.TemporaryDirectory() as td:
        for i in range(a.n):
            ex = held[list(held)[i % len(held)]][i]
            ctx, tgt = tok.render(ex["messages"], ex["think"], ex["effort"])
            ids = ctx + tgt[:rng.randrange(1, len(tgt))]
            with torch.no_grad():
                lt = model(torch.tensor([ids]))[0].double().numpy()
            lf = os.path.join(td, "l.f32")
            env = dict(os.environ, K3_BITS="32", K3_MLA_BITS="32", K3_HEAD_BITS="32", K3_IDOT="0",
                       K3_LOGITS=lf, K3_VK="0")
            r = subprocess.run([K3CHAT, a.model, "--ids", " ".join(map(str, ids)), "--max-tokens", "1",
                                "--temp", "0"], capture_output=True, text=True, env=env, timeout=120)
            if r.returncode:
                print(f"k3chat failed: {r.stderr.strip()[-300:]}")
                return 1
            lc = np.fromfile(lf, dtype="<f4").reshape(-1, V)[:len(ids)].astype(np.float64)
            rel = np.linalg.norm(lc - lt, axis=1) / np.linalg.norm(lt, axis=1)
            worst = max(worst, rel.max())
            print(f"  {ex['task']:8s} {len(ids):4d} positions  max rel L2 {rel.max():.2e}")
    print(f"PyTorch vs C engine logits over {a.n} conversations: worst relative L2 {worst:.2e} (bar 1e-4)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"conversations": a.n, "seed": a.seed, "worst_rel_l2": worst, "bar": 1e-4}, f, indent=1)
    return 0 if worst <= 1e-4 else 1


def render(a):
    tok = nano_tok.Tok.load(a.model)
    rng = random.Random(a.seed + 11)
    bad = 0
    with tempfile.TemporaryDirectory() as td:
        texts = []
        for i in range(a.n):
            first, second = nano_corpus.example(rng), nano_corpus.example(rng)
            think, effort = first["think"], first["effort"]
            msgs = first["messages"] + [m for m in second["messages"] if m["role"] != "system"]
            if not think:
                for m in msgs:
                    m.pop("reasoning_content", None)
            texts += [m["content"] for m in msgs] + [m.get("reasoning_content", "") for m in msgs]
            path = os.path.join(td, "t.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps({"format": "k3chat-transcript", "version": 1,
                                    "settings": {"think": think, "effort": effort}}) + "\n")
                for m in msgs[:-1]:
                    f.write(json.dumps(m) + "\n")
            r = subprocess.run([K3CHAT, "--chat-ids", a.model, path], capture_output=True, text=True, timeout=60)
            c = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
            p, _ = tok.render(msgs, think, effort)
            if c != p:
                bad += 1
                if bad <= 3:
                    print(f"  conversation {i}: k3chat {r.stderr.strip()[:200]} {c and c[:20]} python {p[:20]}")
        path = os.path.join(td, "corpus.txt")
        with open(path, "w") as f:
            f.write("\n".join(texts))
        r = subprocess.run([K3CHAT, "--tokenize", a.model, path], capture_output=True, text=True, timeout=60)
        c = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        p = tok.encode("\n".join(texts))
    print(f"chat renderer: {a.n - bad}/{a.n} conversations give the same ids in Python and k3chat")
    print(f"tokenizer: {len(p)} tokens of corpus text, {'identical' if c == p else 'DIFFERENT'} in Python and k3chat")
    return 0 if bad == 0 and c == p else 1


def ids(a):
    """The ids of n held-out conversations per task (thinking on), one sequence: real text for
    tools/k3-ab."""
    tok = nano_tok.Tok.load(a.model)
    out = []
    for exs in nano_corpus.heldout(a.seed, a.n).values():
        for ex in exs[:a.n]:
            ctx, tgt = tok.render(ex["messages"], ex["think"], ex["effort"])
            out += ctx + tgt
    print(" ".join(map(str, out)))
    return 0


def multiturn(a):
    """Conversations of two questions through k3chat's line mode (greedy, thinking on): the second
    question is answered with the model's own first turn, reasoning included, in its context.
    Pairs of held-out prompts from different tasks; the second answer is what is scored."""
    held = nano_corpus.heldout(a.seed, a.n)
    tasks = list(held)
    rng = random.Random(a.seed + 13)
    pairs = []
    for i in range(a.n):
        t1, t2 = rng.sample(tasks, 2)
        pairs.append((held[t1][i], held[t2][(i + 1) % a.n]))

    def one(pair):
        with tempfile.TemporaryDirectory() as td:
            path = os.path.join(td, "t.jsonl")
            script = "".join(ex["messages"][-2]["content"] + "\n" for ex in pair) + f"/save {path}\n"
            r = k3chat(a.model, ["--plain"], "on", a.effort, stdin=script)
            try:
                with open(path) as f:
                    turns = [json.loads(line) for line in f][1:]
            except OSError:
                return None, r.stderr.strip()[-200:]
            return [m.get("content", "") for m in turns if m.get("role") == "assistant"], ""

    with ThreadPoolExecutor(a.jobs) as pool:
        outs = list(pool.map(one, pairs))
    first = second = both = 0
    res, fails = {}, []
    for pair, (answers, err) in zip(pairs, outs):
        if answers is None or len(answers) != 2:
            fails.append(f"  no transcript of two answers: {err}")
            answers = ["", ""]
        ok1, ok2 = expected(pair[0])(answers[0]), expected(pair[1])(answers[1])
        first += ok1
        second += ok2
        both += ok1 and ok2
        r = res.setdefault(pair[1]["task"], [0, 0])
        r[0] += ok2
        r[1] += 1
        if not ok2 and len(fails) < 5:
            fails.append(f"  {pair[0]['messages'][-2]['content']!r} then {pair[1]['messages'][-2]['content']!r}: "
                         f"second answer {answers[1]!r}")
    print(f"k3-nano, {a.n} two-question conversations through k3chat --plain, greedy, thinking on "
          f"(effort {a.effort}):")
    print(f"  first question right {first}/{a.n}, second question right {second}/{a.n}, both {both}/{a.n}")
    print("  second question by task: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(res.items())))
    print("\n".join(fails))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"n": a.n, "effort": a.effort, "first": first, "second": second, "both": both,
                       "second_by_task": res}, f, indent=1)
    return 0 if second >= a.min_all * a.n else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["accuracy", "logits", "render", "ids", "multiturn"])
    ap.add_argument("model")
    ap.add_argument("--n", type=int)
    ap.add_argument("--seed", type=int, default=1, help="the training seed (held-out prompts derive from it)")
    ap.add_argument("--think", choices=["on", "off"], default="on")
    ap.add_argument("--effort", choices=["low", "high", "max"], default="max")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--plot", help="accuracy: also draw the figures as a bar chart (PNG; needs matplotlib)")
    ap.add_argument("--min-add2", type=float, default=0.95)
    ap.add_argument("--min-other", type=float, default=0.80)
    ap.add_argument("--min-all", type=float, default=0.0, help="accuracy: bar for all prompts together; multiturn: for the second answers")
    ap.add_argument("--min-answered", type=float, default=1.0,
                    help="accuracy: share of prompts that must get an answer in the right channel")
    a = ap.parse_args()
    a.n = a.n or {"accuracy": 200, "logits": 8, "render": 300, "ids": 3, "multiturn": 50}[a.mode]
    sys.exit({"accuracy": accuracy, "logits": logits, "render": render, "ids": ids,
              "multiturn": multiturn}[a.mode](a))


if __name__ == "__main__":
    main()
