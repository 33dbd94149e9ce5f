#!/usr/bin/env python3
"""Runs a command as the session leader of a new pseudo-terminal, as an
interactive shell would be, and prints what it wrote there, then "pty:
exited N". spec/39 runs a host under it with job control (bash's set -m),
so that the host's process group is a job of a shell in the same session.

usage: pty_job.py SECONDS COMMAND [ARG...]"""
import os
import pty
import select
import signal
import sys
import time

limit = float(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
out = b""
deadline = time.time() + limit
while time.time() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.2)
    if not ready:
        continue
    try:
        data = os.read(fd, 4096)
    except OSError:   # EIO: every process of the session closed the terminal
        break
    if not data:
        break
    out += data
sys.stdout.write(out.decode(errors="replace").replace("\r\n", "\n"))
done, status = os.waitpid(pid, os.WNOHANG)
if not done:
    # the leader's end hangs up the session: its stopped jobs get SIGHUP
    os.kill(pid, signal.SIGKILL)
    done, status = os.waitpid(pid, 0)
    print("pty: timed out")
else:
    print("pty: exited %d" % os.waitstatus_to_exitcode(status))
