"""The watchdog process: it stops the processes its parent names once the parent is gone,
however it died (parentwatch). pgserver runs one for each local PostgreSQL it starts, and
`punchclock up` one for its supervisor and API children. PostgreSQL itself has no option to
watch its parent.

Run as `python -m supervisor.local.watchdog` (see `parentwatch.spawn`); it reads lines on stdin:
`+<pid> <SIG>:<grace> ...` names a process and how to stop it, each signal in turn, the next
only if the process still lives `grace` seconds after the last; `-<pid>` forgets it (`lines`
builds both). Once the parent is gone it stops every named process at once, then exits, which
also releases whatever the parent passed it to hold (pgserver: the data directory's lock). A
process is known by its pid and its start time, read when it is named: a pid that was reused
by the time the parent dies is never signalled.

Stdlib only, like the keeper: it starts in a few milliseconds and uses about 9 MB.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from supervisor.proc.parentwatch import ParentPipe

_POLL = 0.05
Steps = list[tuple[signal.Signals, float]]


def watch_line(pid: int, steps: Steps) -> bytes:
    """The message that names `pid` and how to stop it."""
    return f"+{pid} {' '.join(f'{sig.name[3:]}:{grace:g}' for sig, grace in steps)}\n".encode()


def forget_line(pid: int) -> bytes:
    return f"-{pid}\n".encode()


def _identity(pid: int) -> str | None:
    """pid's start time (clock ticks since boot; "" without procfs); None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        if os.path.exists("/proc/self"):
            return None
        try:  # no procfs (macOS): trust kill()
            os.kill(pid, 0)
        except OSError:
            return None
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return None if fields[0] in ("Z", "X") else fields[19]


def _apply(line: bytes, targets: dict[int, tuple[str, Steps]]) -> None:
    op, *words = line.decode(errors="replace").split()
    if not op[1:].isdigit():
        return
    pid = int(op[1:])
    if op[0] == "-":
        targets.pop(pid, None)
        return
    try:
        steps = [
            (signal.Signals[f"SIG{name}"], float(grace))
            for name, _, grace in (w.partition(":") for w in words)
        ]
    except (KeyError, ValueError):
        sys.stderr.write(f"watchdog: ignoring {line!r}\n")
        return
    if op[0] == "+" and (identity := _identity(pid)) is not None:
        targets[pid] = (identity, steps)


def _stop(targets: dict[int, tuple[str, Steps]]) -> None:
    due = dict.fromkeys(targets, 0.0)  # pid -> when its next step is due
    while due:
        now = time.monotonic()
        for pid in list(due):
            identity, steps = targets[pid]
            if _identity(pid) != identity or (now >= due[pid] and not steps):
                del due[pid]
            elif now >= due[pid]:
                sig, grace = steps.pop(0)
                with contextlib.suppress(OSError):  # it exited meanwhile
                    os.kill(pid, sig)
                due[pid] = now + grace
        if due:
            time.sleep(_POLL)


def main() -> None:
    pipe = ParentPipe()
    targets: dict[int, tuple[str, Steps]] = {}
    while (lines := pipe.read()) is not None:
        for line in lines:
            if line.strip():
                _apply(line, targets)
    _stop(targets)


if __name__ == "__main__":
    main()
