#!/usr/bin/env python3
"""E2E handler: works for a while and leaves evidence of when it was alive.

Payload: {"dir": D, "seconds": S or {"<attempt>": S, ...}, "ignore_term": bool,
"grandchild": bool}. Files in D, named after `<run_id>-<attempt>`:
- `.pids`  (written atomically once running: readiness) "pid [grandchild_pid]";
- `.tick`  the wall-clock ns of the last moment it was surely alive, rewritten every 10 ms;
- `done.csv` gets `run_id,lease_token,attempt,start_ns,end_ns,pid` when it finishes.
The grandchild (forked, same process group) sleeps forever: only a group kill ends it.
"""

import json
import os
import signal
import sys
import time

start_ns = time.time_ns()
payload = json.load(sys.stdin)
env = os.environ
run_id, attempt = env["PUNCHCLOCK_RUN_ID"], env["PUNCHCLOCK_ATTEMPT"]
seconds = payload.get("seconds", 1)
if isinstance(seconds, dict):
    seconds = seconds.get(attempt, seconds.get("default", 1))
if payload.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
base = os.path.join(payload["dir"], f"{run_id}-{attempt}")
pids = [os.getpid()]
if payload.get("grandchild"):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(60)
    pids.append(pid)

tmp = base + ".pids.tmp"
with open(tmp, "w") as f:
    f.write(" ".join(map(str, pids)))
os.replace(tmp, base + ".pids")

tick = os.open(base + ".tick", os.O_WRONLY | os.O_CREAT, 0o644)
deadline = time.monotonic() + float(seconds)
while True:
    os.pwrite(tick, b"%020d" % time.time_ns(), 0)
    left = deadline - time.monotonic()
    if left <= 0:
        break
    time.sleep(min(0.01, left))

line = (
    f"{run_id},{env['PUNCHCLOCK_LEASE_TOKEN']},{attempt},{start_ns},{time.time_ns()},{os.getpid()}"
)
fd = os.open(os.path.join(payload["dir"], "done.csv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
os.write(fd, (line + "\n").encode())
if len(pids) > 1:
    os.kill(pids[1], signal.SIGKILL)
    os.waitpid(pids[1], 0)
