# slow_tty.py [--no-replies] SECONDS CMD...: run CMD on a pseudo-terminal of its own whose input
# (keys, and the terminal's replies to queries) reaches it SECONDS late, as over a slow ssh link;
# its output goes through at once. The outer terminal is put in raw mode meanwhile (and back at
# the end); the exit status is CMD's. For t-tui-term.sh: replies that come after k3chat stopped
# waiting for them. --no-replies: the cursor position and device attributes queries (ESC [6n,
# ESC [c) are taken out of CMD's output, as on a terminal that never answers them.
import fcntl
import os
import pty
import select
import sys
import termios
import time
import tty

args = sys.argv[1:]
mute = args[0] == "--no-replies"
if mute:
    args = args[1:]
delay = float(args[0])
QUERIES = (b"\x1b[6n", b"\x1b[c")
pid, fd = pty.fork()
if pid == 0:
    os.execvp(args[1], args[1:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
saved = termios.tcgetattr(0)
tty.setraw(0)
late = []  # (when to deliver, bytes)
held = b""  # --no-replies: the output's end while it may be the start of a query


def unasked(out):
    """out without the queries; a query's start at its end is held for the next piece"""
    global held
    out = held + out
    for q in QUERIES:
        out = out.replace(q, b"")
    held = b""
    for q in QUERIES:
        for k in range(len(q) - 1, 0, -1):
            if out.endswith(q[:k]) and k > len(held):
                held = q[:k]
    return out[: len(out) - len(held)]


try:
    while True:
        now = time.monotonic()
        while late and late[0][0] <= now:
            os.write(fd, late.pop(0)[1])
        ready, _, _ = select.select([0, fd], [], [], max(0.0, late[0][0] - now) if late else 0.5)
        if 0 in ready:
            late.append((time.monotonic() + delay, os.read(0, 4096)))
        if fd in ready:
            try:
                out = os.read(fd, 65536)
            except OSError:  # EIO: CMD and its terminal are gone
                break
            if not out:
                break
            os.write(1, unasked(out) if mute else out)
finally:
    termios.tcsetattr(0, termios.TCSANOW, saved)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
