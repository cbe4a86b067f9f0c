# Transcripts at scale: `k3chat MODEL --plain --load FILE` with nothing to send (the load, the
# context report and its /forget --fit plan, exit) on transcripts of N exchanges made of one real
# k3-nano exchange (its user line and its assistant line with token_ids and stats, repeated), in
# alternating rounds of each binary given; prints the median wall seconds and peak RSS per size and
# binary, with the load average. Usage: transcript-scale.py [--turns=K] MODEL TMP ROUNDS N1,N2,... K3CHAT [K3CHAT...]
# --turns=K: each run also sends K messages after the load ("hi"; at these sizes each is refused
# as too long for the context, after the turn's renderings of the history), and the figure is the
# median seconds per message: (the run with K messages - the run with none) / K, both timed in
# the same round.
import json, os, statistics, subprocess, sys
turns = int(sys.argv.pop(1).split("=")[1]) if sys.argv[1].startswith("--turns=") else 0
model, tmp, rounds, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
bins = sys.argv[5:]
os.makedirs(tmp, exist_ok=True)
env = dict(os.environ, XDG_DATA_HOME=os.path.join(tmp, "xdg"), OMP_NUM_THREADS="1")
seed = os.path.join(tmp, "seed.jsonl")
subprocess.run([bins[0], model, "--plain", "--temp", "0"], input=b"What is 2 + 3?\n/save %s\n" % seed.encode(),
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
head, user, asst = open(seed).read().splitlines()[:3]
files = {}
for n in sizes:
    files[n] = os.path.join(tmp, "t%d.jsonl" % n)
    with open(files[n], "w") as f:
        f.write(head + "\n" + ("%s\n%s\n" % (user, asst)) * n)
res = {(b, n): [] for b in bins for n in sizes}


def run(b, n, msgs):  # wall seconds and peak RSS (kB) of one run sending msgs lines
    t = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", b, model, "--plain", "--load", files[n]],
                       input=b"hi\n" * msgs, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    last = [l for l in t.stderr.decode().splitlines() if l.startswith("TIME ")][-1].split()
    return float(last[1]), int(last[2])


for r in range(rounds):
    for n in sizes:
        for b in (bins if r % 2 == 0 else bins[::-1]):
            base = run(b, n, 0)
            res[(b, n)].append(((run(b, n, turns)[0] - base[0]) / turns, base[1]) if turns else base)
print("load average: %s" % open("/proc/loadavg").read().strip())
for n in sizes:
    mb = os.path.getsize(files[n]) / 1e6
    for b in bins:
        s = res[(b, n)]
        print("%6d exchanges %6.1f MB  %-40s  %.3f s%s  %.0f MB peak RSS  (rounds: %s)" %
              (n, mb, b, statistics.median(x[0] for x in s), " per message" if turns else "",
               statistics.median(x[1] for x in s) / 1024, " ".join("%.3f" % x[0] for x in s)))
