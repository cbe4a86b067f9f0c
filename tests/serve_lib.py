# serve_lib.py: helpers shared by the server tests (t-serve.py, t-serve-attack.py): one
# assertion line per check in tests/run.sh's protocol, and a bounded wait.
import os
import subprocess
import time


def ok(cond, desc):
    """Print PASS: or FAIL: desc (run.sh counts the lines)."""
    print(("PASS: " if cond else "FAIL: ") + desc, flush=True)
    return bool(cond)


def wait_for(pred, secs):
    """Poll pred every 50 ms for at most secs seconds; its last value."""
    t = time.time() + secs
    while time.time() < t:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def setup():
    """The server tests' setting: (build dir, scratch dir, k3chat, under ASan, environment) with
    a generated tiny checkpoint in SCRATCH/m (made here; FAIL and exit when that fails).
    K3_BITS=4 pins the numerics (the fit would choose the bits by the machine's memory otherwise);
    t-serve-batch's disconnect case relies on greedy "greetings" running past 1,500 tokens under them
    and checks that premise itself. Checks that need a turn to outlive some event on any machine
    script its reply instead (K3_SERVE_SCRIPT)."""
    b, t = os.environ["K3_BUILD"], os.environ["K3_TMP"]
    env = dict(os.environ, OMP_NUM_THREADS="1", K3_MAXT="2048", K3_BITS="4", HOME=t, XDG_DATA_HOME=t,
               XDG_STATE_HOME=t)
    env.pop("K3_API_KEY", None)
    r = subprocess.run([os.path.join(b, "k3-mkmodel"), "--preset", "tiny", "--seed", "1", "--quiet",
                        os.path.join(t, "m")], capture_output=True, timeout=60)
    if r.returncode:
        print("FAIL: k3-mkmodel --preset tiny: " + r.stderr.decode()[-200:])
        raise SystemExit(1)
    return b, t, os.path.join(b, "k3chat"), "asan" in os.path.basename(b), env
