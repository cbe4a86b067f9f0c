#!/usr/bin/python3
"""nano_card.py: write k3-nano's model card (README.md) from its measurements.

The prose lives in tools/nano_card.md; the figures come from the files `make nano` leaves in the
model directory, so the card cannot drift from what was measured:
  accuracy.json            nano_eval.py accuracy (thinking on, effort max)
  accuracy-think-off.json  nano_eval.py accuracy --think off
  multiturn.json           nano_eval.py multiturn
  logits.json              nano_eval.py logits --json
Placeholders in the template: @TABLE@ (results per task), @ANSWERED@ (which channel the answers
came in), @RIGHT@ (right answers in all, thinking on), @MULTITURN@ (second questions right),
@LOGITS@ (PyTorch against the engine, worst relative L2), @ON:key@ and @OFF:key@ (one row's
figure with thinking on / off, e.g. @ON:sort@ -> "78.0 %"; keys as in accuracy.json).

Usage: nano_card.py MODEL_DIR [--template FILE] [--out FILE]   (default out: MODEL_DIR/README.md)
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nano_corpus  # noqa: E402  (its task list)

# (row name, accuracy key, bar of issue 10 or None)
ROWS = [("2-digit addition", "add2", 95), ("2-digit subtraction", "sub2", 95),
        ("1-digit addition", "add1", None), ("3-digit addition", "add3", None),
        ("1-digit subtraction", "sub1", None), ("3-digit subtraction", "sub3", None),
        ("counting letters", "count", 80), ("reversing a word", "reverse", 80),
        ("comparing numbers", "compare", 80), ("sorting numbers", "sort", 80),
        ("identity and small talk", "chat", 80)]


class CardError(Exception):
    pass


def load(path, keys):
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise CardError(f"{path}: {e.strerror}")
    except json.JSONDecodeError as e:
        raise CardError(f"{path}: not JSON ({e})")
    if not isinstance(d, dict):
        raise CardError(f"{path}: expected a JSON object")
    for k in keys:
        if k not in d:
            raise CardError(f"{path}: no field \"{k}\"")
    return d


def pair(d, path, k):
    c = d["counts"].get(k)
    if not (isinstance(c, list) and len(c) == 2 and all(isinstance(x, int) for x in c) and c[1] > 0):
        raise CardError(f"{path}: counts.{k}: expected [right, asked] with asked > 0")
    return c


def share(c):
    return f"{100 * c[0] / c[1]:.1f} %"


def sci(x):
    """1e-4 style: 3.6e-6, not 3.6e-06."""
    m, e = f"{x:.1e}".split("e")
    return f"{m}e{int(e)}"


def card(model, template):
    p_on, p_off = os.path.join(model, "accuracy.json"), os.path.join(model, "accuracy-think-off.json")
    p_mt, p_lg = os.path.join(model, "multiturn.json"), os.path.join(model, "logits.json")
    on = load(p_on, ["counts", "answered", "prompts"])
    off = load(p_off, ["counts", "answered", "prompts"])
    mt = load(p_mt, ["n", "second"])
    lg = load(p_lg, ["worst_rel_l2", "conversations"])

    pct = lambda c: f"{share(c)} ({c[0]}/{c[1]})"
    t = ["| task | thinking on (effort max) | thinking off | bar (issue 10) |", "|---|---|---|---|"]
    for name, k, bar in ROWS:
        t.append(f"| {name} | {pct(pair(on, p_on, k))} | {pct(pair(off, p_off, k))} | "
                 f"{'≥ %d %%' % bar if bar else ''} |")
    right = [pair(on, p_on, k) for k in nano_corpus.TASKS]
    n_right, n_asked = sum(c[0] for c in right), sum(c[1] for c in right)
    gave_none = on["prompts"] - on["answered"]
    answered = (f"{on['answered']} of {on['prompts']} answers with thinking on came in the response channel "
                f"after reasoning in the think channel"
                f"{' (the other %d gave none)' % gave_none if gave_none else ''}; with thinking off, "
                f"{off['answered']} of {off['prompts']} came in the response channel with no reasoning.")
    fill = {"TABLE": "\n".join(t), "ANSWERED": answered, "RIGHT": f"{n_right:,} of {n_asked:,}",
            "MULTITURN": f"{mt['second']} of {mt['n']}", "LOGITS": sci(lg["worst_rel_l2"])}
    for tag, d, path in (("ON", on, p_on), ("OFF", off, p_off)):
        fill.update({f"{tag}:{key}": share(pair(d, path, key)) for key in d["counts"]})
    pattern = r"@([A-Z]+(?::[a-z0-9]+)?)@"
    out = re.sub(pattern, lambda m: fill.get(m.group(1), m.group(0)), template)
    left = sorted(set(re.findall(pattern, out)))
    if left:
        raise CardError(f"template: unknown placeholder(s) {', '.join('@%s@' % x for x in left)} "
                        f"(known: {', '.join('@%s@' % x for x in fill if ':' not in x)}, @ON:key@, @OFF:key@)")
    return out


def main():
    ap = argparse.ArgumentParser(description="write k3-nano's model card from its measurements")
    ap.add_argument("model")
    ap.add_argument("--template", default=os.path.join(HERE, "nano_card.md"))
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        with open(a.template) as f:
            template = f.read()
    except OSError as e:
        print(f"nano_card: {a.template}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        text = card(a.model, template)
    except CardError as e:
        print(f"nano_card: {e}", file=sys.stderr)
        return 1
    out = a.out or os.path.join(a.model, "README.md")
    try:
        with open(out + ".tmp", "w") as f:
            f.write(text)
        os.replace(out + ".tmp", out)
    except OSError as e:
        print(f"nano_card: {out}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
