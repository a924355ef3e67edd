#!/usr/bin/env python3
"""E2E handler that never ends and resists SIGTERM, with two grandchildren that resist too.

One grandchild stays in the handler's process group; the other escapes it with setsid(),
so only a kill that hunts descendants outside the group ends it. Readiness: payload["dir"]
gets `<run_id>.pids` = "handler_pid in_group_pid escaped_pid" once all three ignore SIGTERM.
"""

import json
import os
import signal
import sys
import time

payload = json.load(sys.stdin)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the forks below


def grandchild(escape: bool, ready_w: int) -> None:
    if escape:
        os.setsid()
    os.write(ready_w, b"x")
    while True:
        time.sleep(60)


pids = [os.getpid()]
for escape in (False, True):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        grandchild(escape, w)
    os.close(w)
    os.read(r, 1)  # it has called setsid() (or not) before we report it
    os.close(r)
    pids.append(pid)

base = os.path.join(payload["dir"], os.environ["PUNCHCLOCK_RUN_ID"])
with open(base + ".pids.tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.replace(base + ".pids.tmp", base + ".pids")
while True:
    time.sleep(60)
