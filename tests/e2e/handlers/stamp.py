#!/usr/bin/env python3
"""E2E handler that stamps its own start and end, for observers that do not trust the code
under test (overlap, orphan and outcome checks: procs.PidMonitor, scenario.execution_problems).

Payload: {"dir": D, "sleep": S} (seconds of work, default 0). Appends to D/stamps.csv, one
O_APPEND write per line: `start,run_id,attempt,lease_token,pid,ppid,ns` as soon as it runs,
`end,...` just before it exits 0. A killed execution leaves a start without an end; its pid
(and ppid, its supervisor) lets a monitor watch it.
"""

import json
import os
import sys
import time

env = os.environ
payload = json.load(sys.stdin)
path = os.path.join(payload["dir"], "stamps.csv")
ids = [env["PUNCHCLOCK_RUN_ID"], env["PUNCHCLOCK_ATTEMPT"], env["PUNCHCLOCK_LEASE_TOKEN"]]
ids += [str(os.getpid()), str(os.getppid())]


def stamp(kind: str) -> None:
    line = ",".join([kind, *ids, str(time.time_ns())]) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


stamp("start")
time.sleep(float(payload.get("sleep", 0)))
stamp("end")
