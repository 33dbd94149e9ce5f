#!/usr/bin/env python3
"""Runs a command under a pseudo-terminal, types keys and reads the screen:
for the specs of the REPL.

    pty_run.py SCRIPT.json

SCRIPT: {"cmd": [...], "cwd": dir, "env": {k: v},
         "steps": [{"send": text} | {"expect": regex, "timeout": s} | {"sleep": s}]}
Prints {"ok": bool, "step": index of the step that failed or null,
        "output": everything the command wrote, "status": exit status}.
"""
import json
import os
import pty
import re
import select
import signal
import sys
import time


def main():
    with open(sys.argv[1]) as f:
        script = json.load(f)
    env = dict(os.environ)
    env.update(script.get("env", {}))
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(script.get("cwd", "."))
        os.execvpe(script["cmd"][0], script["cmd"], env)
    output = b""
    failed = None

    def read_some(timeout):
        nonlocal output
        r, _, _ = select.select([fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(fd, 65536)
        except OSError:
            return None
        if not data:
            return None
        output += data
        return True

    for i, step in enumerate(script["steps"]):
        if "send" in step:
            os.write(fd, step["send"].encode())
        elif "sleep" in step:
            end = time.monotonic() + step["sleep"]
            while time.monotonic() < end:
                if read_some(end - time.monotonic()) is None:
                    break
        elif "expect" in step:
            pattern = re.compile(step["expect"].encode(), re.S)
            start = len(output) if step.get("new") else 0
            end = time.monotonic() + step.get("timeout", 5)
            found = pattern.search(output, start)
            while not found and time.monotonic() < end:
                if read_some(end - time.monotonic()) is None:
                    break
                found = pattern.search(output, start)
            if not found:
                failed = i
                break
    # the command should end by itself; else it is stopped
    status = None
    end = time.monotonic() + script.get("exit_timeout", 15)
    while time.monotonic() < end:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
        read_some(0.05)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    while read_some(0.01):
        pass
    print(json.dumps({"ok": failed is None, "step": failed, "status": status,
                      "output": output.decode("utf-8", "replace")}))


if __name__ == "__main__":
    main()
