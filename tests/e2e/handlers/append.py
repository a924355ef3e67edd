#!/usr/bin/env python3
"""E2E handler: append `run_id,lease_token,attempt,start_ns,end_ns,pid` to payload["out"].

Optional payload["sleep"] seconds of work between the two stamps. The line is written at the
very end with one O_APPEND write, so a killed execution leaves no line and concurrent
handlers never interleave: one line in the file means one completed execution.
"""

import json
import os
import sys
import time

start_ns = time.time_ns()
payload = json.load(sys.stdin)
time.sleep(float(payload.get("sleep", 0)))
env = os.environ
line = ",".join(
    [
        env["PUNCHCLOCK_RUN_ID"],
        env["PUNCHCLOCK_LEASE_TOKEN"],
        env["PUNCHCLOCK_ATTEMPT"],
        str(start_ns),
        str(time.time_ns()),
        str(os.getpid()),
    ]
)
fd = os.open(payload["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
try:
    os.write(fd, (line + "\n").encode())
finally:
    os.close(fd)
