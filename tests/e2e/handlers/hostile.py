#!/usr/bin/env python3
"""E2E handler that misbehaves on purpose. Payload: {"mode": M, "dir": D, ...}.

- binary: NUL bytes and invalid UTF-8 on stdout and stderr, then exit 0.
- flood: payload["mb"] MiB of bytes on stdout, then exit 0.
- daemon: leave a daemon behind (double fork, setsid, SIGTERM ignored, stdio on /dev/null,
  environment cleared by exec), write its pid to D/<run_id>.daemon, then exit 0
  (payload["linger"]: or sleep that long instead, to be killed by the job's timeout).
- close_stdout: close stdout and stderr at once, keep working payload["seconds"], then write
  D/<run_id>.end with the wall-clock ns and exit 0.
"""

import json
import os
import sys
import time

payload = json.load(sys.stdin)
mode = payload["mode"]
run_id = os.environ["PUNCHCLOCK_RUN_ID"]
out = payload.get("dir", "")

DAEMON = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def daemonise() -> None:
    r, w = os.pipe()
    if os.fork() == 0:  # the intermediate: leaves the group and session, then forks again
        os.close(r)
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            os.execve(sys.executable, [sys.executable, "-I", "-S", "-c", DAEMON], {})
        os._exit(0)
    os.close(w)
    pid = b""
    while chunk := os.read(r, 64):
        pid += chunk  # EOF once the daemon has exec'd (the pipe is not close-on-exec: exit)
    tmp = os.path.join(out, f"{run_id}.daemon.tmp")
    with open(tmp, "w") as f:
        f.write(pid.decode())
    os.replace(tmp, os.path.join(out, f"{run_id}.daemon"))


if mode == "binary":
    sys.stdout.buffer.write(b"gz\x1f\x8b\x00\x00\xff\xfe tail\x00end")
    sys.stderr.buffer.write(b"err\x00\xc3\x28 progress\r\x00")
elif mode == "flood":
    block = bytes(range(256)) * 4096  # 1 MiB of every byte value, NUL and invalid UTF-8 too
    for _ in range(int(payload["mb"])):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.write(b"\nTHE END\n")
elif mode == "daemon":
    daemonise()
    if payload.get("linger"):
        time.sleep(float(payload["linger"]))
elif mode == "close_stdout":
    os.close(1)
    os.close(2)
    time.sleep(float(payload["seconds"]))  # still working, with no output pipes open
    with open(os.path.join(out, f"{run_id}.end.tmp"), "w") as f:
        f.write(str(time.time_ns()))
    os.replace(os.path.join(out, f"{run_id}.end.tmp"), os.path.join(out, f"{run_id}.end"))
    os._exit(0)  # no flush of the closed streams at exit
