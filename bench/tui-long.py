# tui-long.py: the full-screen chat's drawing cost with a long history or a long answer
# (BENCHMARKS.md, "Long histories and answers in the full-screen chat").
#
#   python3 bench/tui-long.py K3CHAT TURNS MODE
#
# Runs K3CHAT in a pseudo-terminal (120x40, TERM=xterm-256color) on the scripted mock engine
# (K3_MOCK) and prints the figures K3_UI_STATS writes at exit: draw_frames, draw_cpu_s (the UI
# thread's CPU time of drawing them) and draw_max_ms (the most one frame took).
#   TURNS > 0: the conversation starts from a generated transcript of TURNS exchanges (--load),
#              each a question and a Markdown answer (heading, paragraph, list, code block) with
#              its reasoning.
#   MODE scroll: Ctrl-Home (the top) and Ctrl-End three times, PgUp 40 times, Ctrl-End, then
#              three resizes (100, 80, 120 columns).
#   MODE long: one message, answered with 52 kB of reasoning (the think pane) and then 3,000 list
#              items in one list (110 kB), a 3-byte token every millisecond.
#   MODE table: the same with a table of 3,000 rows (75 kB; a column widens at row 2,500).
import json
import os
import pty
import select
import shutil
import signal
import struct
import sys
import termios
import fcntl
import time

exe, turns, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
d = '/tmp/k3-tui-long.%d' % os.getpid()
os.makedirs(d)
tr = d + '/t.jsonl'
with open(tr, 'w') as f:
    f.write(json.dumps({"format": "k3chat-transcript", "version": 1}) + '\n')
    for i in range(turns):
        f.write(json.dumps({"role": "user", "content": "question %d about something" % i}) + '\n')
        f.write(json.dumps({"role": "assistant", "reasoning_content": "thinking about %d" % i,
                            "content": "## Answer %d\n\nSome **bold** text and `code` here, a paragraph "
                                       "that wraps over a couple of lines at eighty columns or so.\n\n"
                                       "- item one\n- item two\n\n```c\nint x%d = %d;\n```\n" % (i, i, i)})
                + '\n')
mock = d + '/mock.txt'
with open(mock, 'w') as f:
    f.write("delay 1\n")
    for i in range(400):
        f.write("think " + "reasoning words " * 8 + "\n")
    f.write("response ")
    if mode == 'long':
        for i in range(3000):
            f.write("- item %d with some words\nresponse " % i)
    if mode == 'table':
        f.write("| id | name | value |\nresponse |---:|---|---|\nresponse ")
        for i in range(3000):
            f.write("| %d | item %d | %s |\nresponse " % (i, i * 7, "wider value here" if i == 2500 else "v"))
    f.write("done\n")
stats = d + '/stats.txt'
pid, fd = pty.fork()
if pid == 0:
    os.environ.update(TERM='xterm-256color', LC_ALL='C.UTF-8', K3_MOCK=mock, K3_UI_STATS=stats,
                      XDG_STATE_HOME=d, XDG_DATA_HOME=d, XDG_CONFIG_HOME=d)
    os.execv(exe, [exe, '/bench/mock'] + (['--load', tr] if turns else []))


def setsize(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
    os.kill(pid, signal.SIGWINCH)


tail = b''


def pump(secs, needle=None):
    """Read the terminal's output for secs seconds, or until needle shows."""
    global tail
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                b = os.read(fd, 65536)
            except OSError:
                return False
            tail = (tail + b)[-20000:]
            if needle and needle in tail:
                tail = b''
                return True
    return needle is None


setsize(40, 120)
pump(3)
if mode == 'scroll':
    for rep in range(3):
        os.write(fd, b'\x1b[1;5H')  # Ctrl-Home
        pump(0.5)
        os.write(fd, b'\x1b[1;5F')  # Ctrl-End
        pump(0.5)
    for k in range(40):
        os.write(fd, b'\x1b[5~')  # PgUp
        pump(0.05)
    os.write(fd, b'\x1b[1;5F')
    pump(0.3)
    for cols in (100, 80, 120):
        setsize(40, cols)
        pump(0.5)
else:
    os.write(fd, b'go\r')
    pump(90, b'thought for')
    pump(1)
os.write(fd, b'\x04')  # Ctrl-D at the empty prompt: quit
pump(1)
try:
    os.waitpid(pid, 0)
except ChildProcessError:
    pass
figures = {}
if os.path.exists(stats):
    for line in open(stats):
        k, v = line.split()
        figures[k] = v
shutil.rmtree(d, ignore_errors=True)
if not figures:
    sys.exit('tui-long: k3chat wrote no figures')
print('%s %d turns: %s frames drawn, %s s of UI CPU drawing them, the most %s ms' %
      (mode, turns, figures.get('draw_frames'), figures.get('draw_cpu_s'), figures.get('draw_max_ms')))
