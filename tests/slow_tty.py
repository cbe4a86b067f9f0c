# slow_tty.py SECONDS CMD...: run CMD on a pseudo-terminal of its own whose input (keys, and the
# terminal's replies to queries) reaches it SECONDS late, as over a slow ssh link; its output goes
# through at once. The outer terminal is put in raw mode meanwhile (and back at the end); the
# exit status is CMD's. For t-tui-term.sh: replies that come after k3chat stopped waiting for them.
import fcntl
import os
import pty
import select
import sys
import termios
import time
import tty

delay = float(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
saved = termios.tcgetattr(0)
tty.setraw(0)
late = []  # (when to deliver, bytes)
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
            os.write(1, out)
finally:
    termios.tcsetattr(0, termios.TCSANOW, saved)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
