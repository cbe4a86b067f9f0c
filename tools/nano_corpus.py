#!/usr/bin/python3
"""nano_corpus.py: the synthetic conversation corpus k3-nano is trained on.

Every example is one conversation turn (optional system prompt, a user message, the
assistant's reasoning and answer) plus the settings it is rendered with: thinking on or
off and, when on, the effort (low | high | max). The effort changes how much the
reasoning spells out, so the model learns what the thinking-effort message means.

Tasks (each a generator function below):
  add, sub    multi-digit arithmetic with column-by-column reasoning
  count       how many letters / how many times a letter occurs
  reverse     reverse a word letter by letter
  compare     which of two numbers is larger
  sort        sort a short list of numbers
  chat        identity and small talk

Formats: the reasoning of some tasks was rewritten between training stages, when the error
analysis of a stage showed a tiny model slipping on a step it had to do in its head. --formats
selects the version a stage was trained on, so `make nano` reproduces every stage exactly:
  1  stages 1-3 (the first corpus)
  2  stage 4: counting says yes/no per letter; sorting writes out what is left after each pick
  3  stage 5: subtraction names each column's two digits before deciding on a borrow
  4  stage 6: counting names the letter asked for at every letter ("p is not a", "a is a: 1");
     sorting inserts the numbers one by one into a growing sorted list
The held-out prompts are the same in every version (the generators draw the same numbers).

Deterministic from the seed; pure ASCII (the tokenizer's ASCII behaviour is all it needs).
Usage: nano_corpus.py [--seed S] [--n N] [--task T] [--formats V] OUT.jsonl
"""
import argparse
import json
import random
import re

WORDS = """apple banana cherry grape lemon mango melon orange peach pear plum berry
river mountain forest desert ocean island valley canyon meadow glacier
planet rocket comet galaxy nebula orbit signal photon quasar meteor
table chair window garden kitchen pillow mirror candle basket ladder
tiger zebra panda koala otter falcon parrot rabbit turtle dolphin
silver golden purple yellow crimson violet marble copper bronze cobalt
kernel matrix vector tensor buffer thread socket packet cursor syntax""".split()

EFFORTS = ["low", "high", "max"]
COLUMNS = ["Ones", "Tens", "Hundreds", "Thousands"]

FORMATS_LATEST = 4
FORMATS = FORMATS_LATEST  # the reasoning formats in use (module docstring); set_formats changes it


def set_formats(v):
    global FORMATS
    if not 1 <= v <= FORMATS_LATEST:
        raise ValueError(f"corpus formats {v}: expected 1 to {FORMATS_LATEST}")
    FORMATS = v


def digits_spaced(n):
    return " ".join(str(n))


def add_example(rng, effort):
    nd = rng.choice([1, 2, 2, 2, 3, 3])
    a = rng.randint(0 if nd == 1 else 10 ** (nd - 1), 10 ** nd - 1)
    b = rng.randint(0 if nd == 1 else 10 ** (nd - 1), 10 ** nd - 1)
    q = rng.choice(["What is {a} + {b}?", "Compute {a} + {b}.", "{a} + {b} = ?",
                    "Add {a} and {b}.", "What is the sum of {a} and {b}?"]).format(a=a, b=b)
    s = a + b
    if effort == "low":
        think = f"{a} + {b} = {s}."
    else:
        steps, carry = [], 0
        da, db = str(a)[::-1], str(b)[::-1]
        for i in range(max(len(da), len(db))):
            x = int(da[i]) if i < len(da) else 0
            y = int(db[i]) if i < len(db) else 0
            t = x + y + carry
            line = f"{x} + {y}" + (f" + {carry}" if carry else "") + f" = {t}"
            if t >= 10:
                line += f", write {t - 10} carry 1"
            carry = 1 if t >= 10 else 0
            steps.append(line + ".")
        if carry:
            steps.append("The last carry is 1.")
        think = " ".join(steps) + f" So {a} + {b} = {s}."
        if effort == "max":
            think = f"Add the digits column by column, starting from the right. " + think + \
                f" Check: {s} - {b} = {a}."
    ans = rng.choice(["{a} + {b} = {s}.", "The answer is {s}.", "{s}"]).format(a=a, b=b, s=s)
    return q, think, ans


def sub_example(rng, effort):
    nd = rng.choice([1, 2, 2, 2, 3, 3])
    a = rng.randint(0 if nd == 1 else 10 ** (nd - 1), 10 ** nd - 1)
    b = rng.randint(0, a)
    q = rng.choice(["What is {a} - {b}?", "Compute {a} - {b}.", "{a} - {b} = ?",
                    "Subtract {b} from {a}."]).format(a=a, b=b)
    s = a - b
    if effort == "low":
        think = f"{a} - {b} = {s}."
    else:
        steps, borrow = [], 0
        da, db = str(a)[::-1], str(b)[::-1]
        for i in range(len(da)):
            x = int(da[i]) - borrow
            y = int(db[i]) if i < len(db) else 0
            if FORMATS >= 3:
                # each column first names its two digits, then decides on a borrow with both in
                # view (fetching the lower digit and comparing it in one token is where it slipped)
                head = f"{COLUMNS[i]}: {da[i]} and {y}" + (f", {da[i]} - 1 = {x}" if borrow else "") + ". "
            else:
                head = f"{da[i]} - 1 = {x}, " if borrow else ""
            if x < y:
                steps.append(f"{head}{x} < {y}, borrow: {x + 10} - {y} = {x + 10 - y}.")
                borrow = 1
            else:
                steps.append(f"{head}{x} - {y} = {x - y}.")
                borrow = 0
        think = " ".join(steps) + f" So {a} - {b} = {s}."
        if effort == "max":
            think = "Subtract column by column from the right, borrowing when needed. " + think + \
                f" Check: {s} + {b} = {a}."
    ans = rng.choice(["{a} - {b} = {s}.", "The answer is {s}.", "{s}"]).format(a=a, b=b, s=s)
    return q, think, ans


def times(n):
    return "1 time" if n == 1 else f"{n} times"


def count_example(rng, effort):
    w = rng.choice(WORDS)
    spelled = " ".join(w)
    if rng.random() < 0.5:
        q = rng.choice(["How many letters are in the word {w}?", "How long is the word {w}?",
                        "Count the letters in {w}."]).format(w=w)
        n = len(w)
        if effort == "low":
            think = f"{spelled}: {n} letters."
        else:
            think = f"Spell it: {spelled}. " + " ".join(f"{c} is {i + 1}." for i, c in enumerate(w)) + \
                f" That is {n} letters."
        ans = rng.choice(["{w} has {n} letters.", "{n}"]).format(w=w, n=n)
    else:
        c = rng.choice(w) if rng.random() < 0.8 else rng.choice("aeioust")
        q = rng.choice(["How many times does the letter {c} appear in {w}?",
                        "How many {c}'s are in {w}?"]).format(c=c, w=w)
        n = w.count(c)
        if effort == "low":
            think = f"{spelled}: {n}."
        else:
            marks, k = [], 0
            if FORMATS >= 2:
                # a mark for every letter, the running count on each hit; from formats 4 the
                # letter asked for is written next to every letter, so the decision looks at two
                # tokens side by side instead of fetching the letter from the question
                for ch in w:
                    k += ch == c
                    if FORMATS >= 4:
                        marks.append(f"{ch} is {c}: {k}" if ch == c else f"{ch} is not {c}")
                    else:
                        marks.append(f"{ch} yes {k}" if ch == c else f"{ch} no")
                think = f"Look for {c} in {spelled}: " + ", ".join(marks) + \
                    f". The letter {c} appears {times(n)}."
            else:
                for ch in w:
                    k += ch == c
                    marks.append(f"{ch} ({k})" if ch == c else ch)
                think = f"Go through {w} letter by letter: " + " ".join(marks) + \
                    f". The letter {c} appears {n} times."
        t = times(n) if FORMATS >= 2 else f"{n} times"
        ans = rng.choice(["The letter {c} appears {t} in {w}.", "{n}"]).format(c=c, w=w, n=n, t=t)
    return q, think, ans


def reverse_example(rng, effort):
    w = rng.choice(WORDS)
    r = w[::-1]
    q = rng.choice(["Reverse the word {w}.", "Spell {w} backwards.", "What is {w} reversed?"]).format(w=w)
    if effort == "low":
        think = f"{' '.join(w)} -> {' '.join(r)}."
    else:
        think = f"Letters: {' '.join(w)}. From the end: {' '.join(r)}. Joined: {r}."
    ans = rng.choice(["{w} reversed is {r}.", "{r}"]).format(w=w, r=r)
    return q, think, ans


def compare_example(rng, effort):
    a, b = rng.sample(range(0, 1000), 2)
    q = rng.choice(["Which is larger, {a} or {b}?", "Which number is bigger: {a} or {b}?",
                    "Is {a} greater than {b}?"]).format(a=a, b=b)
    big = max(a, b)
    if effort == "low":
        think = f"{big} is larger."
    else:
        la, lb = len(str(a)), len(str(b))
        if la != lb:
            think = f"{a} has {la} digits and {b} has {lb} digits, so {big} is larger."
        else:
            think = f"Both have {la} digits. Compare from the left: {digits_spaced(a)} vs {digits_spaced(b)}. {big} is larger."
    if q.startswith("Is"):
        ans = ("Yes, {a} is greater than {b}." if a > b else "No, {a} is less than {b}.").format(a=a, b=b)
    else:
        ans = rng.choice(["{big} is larger.", "{big}"]).format(big=big)
    return q, think, ans


def sort_example(rng, effort):
    n = rng.randint(3, 5)
    xs = [rng.randint(0, 99) for _ in range(n)]
    desc = rng.random() < 0.3
    q = ("Sort these numbers from largest to smallest: " if desc else
         rng.choice(["Sort these numbers: ", "Sort in increasing order: ", "Put in order: "])) + \
        ", ".join(map(str, xs)) + "."
    ys = sorted(xs, reverse=desc)
    if effort == "low":
        think = ", ".join(map(str, ys)) + "."
    else:
        word = "Largest" if desc else "Smallest"
        if FORMATS >= 4:
            # insertion: take the numbers in the order of the question and write the sorted
            # list so far after each one; every step copies the line before it with one number
            # put in place, a decision made next to the numbers it is compared with
            steps, done = [f"Numbers: {', '.join(map(str, xs))}.", f"Start with {xs[0]}."], [xs[0]]
            for x in xs[1:]:
                done = sorted(done + [x], reverse=desc)
                steps.append(f"Add {x}: {', '.join(map(str, done))}.")
        elif FORMATS >= 2:
            # each step names the pick and writes out what is left, so the next pick only looks
            # at the line before it (a tiny model loses track of picks it has to remember)
            rest, steps = list(xs), [f"Numbers: {', '.join(map(str, xs))}."]
            while len(rest) > 1:
                m = max(rest) if desc else min(rest)
                rest.remove(m)
                steps.append(f"{word} is {m}, left {', '.join(map(str, rest))}.")
            steps.append(f"Last is {rest[0]}.")
        else:
            rest, steps = list(xs), []
            for _ in range(n):
                m = max(rest) if desc else min(rest)
                steps.append(f"{word.lower()} left is {m}")
                rest.remove(m)
            steps = ["; ".join(steps) + "."]
        think = " ".join(steps) + " Result: " + ", ".join(map(str, ys)) + "."
    ans = ", ".join(map(str, ys))
    return q, think, ans


CHAT = [
    (["Who are you?", "What are you?", "Introduce yourself.", "What is your name?"],
     "The user asks who I am. I am k3-nano.",
     ["I am k3-nano, a tiny model with the Kimi K3 architecture, trained to show how k3chat works.",
      "I'm k3-nano: a small Kimi K3-style model. I can add, subtract, count letters, reverse words and sort numbers."]),
    (["Hello!", "Hi", "Hey there", "Good morning!"],
     "A greeting. Greet back and offer help.",
     ["Hello! Ask me some arithmetic or a word puzzle.", "Hi! What would you like to compute?"]),
    (["How are you?", "How are you doing today?"],
     "Small talk. Answer briefly.",
     ["I'm fine, thanks! Ready for a question.", "Doing well. What can I do for you?"]),
    (["Thank you!", "Thanks", "Thanks a lot!"],
     "The user thanks me.",
     ["You're welcome!", "Glad to help."]),
    (["What can you do?", "Help", "What tasks do you know?"],
     "List my skills.",
     ["I can add and subtract numbers, count letters, reverse words, compare numbers and sort short lists."]),
    (["Goodbye", "Bye!", "See you later"],
     "The user leaves.",
     ["Goodbye!", "Bye! Come back any time."]),
]


def chat_example(rng, effort):
    qs, think, answers = rng.choice(CHAT)
    return rng.choice(qs), think, rng.choice(answers)


TASKS = {"add": add_example, "sub": sub_example, "count": count_example, "reverse": reverse_example,
         "compare": compare_example, "sort": sort_example, "chat": chat_example}
WEIGHTS = {"add": 3, "sub": 3, "count": 2, "reverse": 2, "compare": 2, "sort": 2, "chat": 1}


def example(rng, task=None, history=0.0, weights=None):
    """One conversation ending with the assistant turn to learn. With probability history, one
    earlier exchange (another task, same thinking mode and effort) comes first, so the model
    learns to answer the last question of a multi-turn chat (its earlier reasoning included).
    weights: the task mix (default WEIGHTS)."""
    weights = weights or WEIGHTS
    if task is None:
        task = rng.choices(list(weights), weights=list(weights.values()))[0]
    think_on = rng.random() < 0.8
    effort = rng.choice(EFFORTS) if think_on else "max"
    q, think, ans = TASKS[task](rng, effort)
    msgs = []
    if rng.random() < 0.15:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.",
                                                              "Answer concisely.", "You are k3-nano."])})
    if history and rng.random() < history:
        t2 = rng.choices(list(weights), weights=list(weights.values()))[0]
        q2, think2, ans2 = TASKS[t2](rng, effort)
        msgs.append({"role": "user", "content": q2})
        msgs.append({"role": "assistant", "content": ans2, "reasoning_content": think2 if think_on else ""})
    msgs.append({"role": "user", "content": q})
    msgs.append({"role": "assistant", "content": ans, "reasoning_content": think if think_on else ""})
    ex = {"task": task, "think": think_on, "effort": effort, "messages": msgs}
    assert all(ord(c) < 128 for c in json.dumps(ex)), "corpus must be ASCII"
    return ex


NUMERIC = ("add", "sub", "compare", "sort")


def heldout(seed, per_task):
    """The held-out evaluation prompts: per task, per_task conversations with thinking on (each
    effort), from a stream of its own (seed + 1000003)."""
    rng = random.Random(seed + 1_000_003)
    out = {}
    for task in TASKS:
        out[task] = []
        while len(out[task]) < per_task:
            ex = example(rng, task)
            if ex["think"]:
                out[task].append(ex)
    return out


def numeric_key(ex):
    """What makes a numeric question the same question whatever its wording: the task and its
    numbers. Training drops every example whose key is in the held-out set, so the held-out
    arithmetic, comparisons and lists are unseen. (The word tasks draw on a 70-word list, so their
    held-out prompts differ from training only in wording and letter choice.)"""
    if ex["task"] not in NUMERIC:
        return None
    user = [m["content"] for m in ex["messages"] if m["role"] == "user"][-1]
    return (ex["task"], tuple(re.findall(r"[0-9]+", user)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--task", choices=sorted(TASKS))
    ap.add_argument("--formats", type=int, default=FORMATS_LATEST, help="reasoning formats (see above)")
    ap.add_argument("out")
    a = ap.parse_args()
    try:
        set_formats(a.formats)
    except ValueError as e:
        ap.error(f"--formats: {e}")
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.n):
            f.write(json.dumps(example(rng, a.task)) + "\n")


if __name__ == "__main__":
    main()
