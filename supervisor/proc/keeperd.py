"""The keeper process: a tiny companion that kills a supervisor's children when the
supervisor can no longer be trusted to: when it dies without closing the keeper (SIGKILL,
OOM kill, crash), and when a child's kill-by deadline passes unrenewed (the supervisor is
frozen, or its event loop is blocked, past the child's deadline). It kills nothing else. The
supervisor's handle on it is `keeper.Keeper`.

Run as `python -m supervisor.proc.keeperd <instance_id>`; it reads lines on stdin:
`=<child_id> <kill_by>` announces a child about to be spawned (written before the spawn, so
a supervisor frozen right after it cannot leave the child without a deadline); `=<prefix>*`
announces every child whose id starts with prefix (a batch; `-0 <prefix>*` withdraws
it once they are named),
`+<pgid> <kill_by> <child_id>` names its process group (or moves its deadline); either may
end in `\t<dir>`... naming the child's cgroup directories, killed whole (cgkill.py) with it,
`-<pgid> <child_id>` forgets it, `exit` stops without killing. kill_by is a CLOCK_MONOTONIC instant
(time.monotonic(), the same clock in every process of the host), 0 for none. At kill_by the
keeper SIGKILLs the group, its cgroup, and every process carrying PUNCHCLOCK_CHILD_ID=<child_id>
(a descendant that left the group). When the supervisor is gone (parentwatch: EOF without
`exit`, or a new parent) it SIGKILLs every registered group and cgroup (then removes the
cgroups once empty), and every process whose
environment carries PUNCHCLOCK_SUPERVISOR_INSTANCE=<instance_id> (a child spawned after its
last message).

It makes itself non-dumpable (`undumpable`) and is started with a minimal environment
(keeper.KEEPER_ENV): a handler of the supervisor's uid cannot read either from /proc.

This module imports only the stdlib's os, sys, signal, select and time (and ctypes once, at
start), parentwatch and cgkill (about 10 MB RSS; asyncio would double it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from supervisor.proc import cgkill
from supervisor.proc.parentwatch import ParentPipe

if TYPE_CHECKING:
    from collections.abc import Callable

INSTANCE_ENV = "PUNCHCLOCK_SUPERVISOR_INSTANCE"
CHILD_ID_ENV = "PUNCHCLOCK_CHILD_ID"
READY = b"ready\n"  # written once the keeper ignores terminal signals and reads its stdin
_PR_SET_DUMPABLE = 4


def undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0), as core/procsafe.py does for the daemons (proc/ imports
    nothing of supervisor/ but core/log): a process of the supervisor's uid can then no
    longer read the keeper's /proc files nor ptrace it."""
    import ctypes  # here, not at import time: about 0.7 MB of the keeper's RSS, paid once

    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def _sigkill(kill: Callable[[int, int], None], target: int) -> bool:
    try:
        kill(target, signal.SIGKILL)
    except OSError:
        return False
    return True


def _kill_marked(marker: bytes, prefix: bool = False) -> None:
    """SIGKILL every process whose environment holds `marker` (NAME=value), or with
    `prefix` an entry that starts with it."""
    me = os.getpid()
    # Repeat: a marked process may fork between our reading its environ and killing it.
    for _ in range(5):
        killed = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            entries = environ.split(b"\0")
            if marker in entries or (prefix and any(e.startswith(marker) for e in entries)):
                killed = _sigkill(os.kill, int(name)) or killed
        if not killed:
            return


class Entry:
    """One child: its kill-by instant (0: none), process group (0: not yet known), cgroup."""

    __slots__ = ("cgroup", "kill_by", "pgid")

    def __init__(self, kill_by: float, pgid: int, cgroup: list[str]) -> None:
        self.kill_by, self.pgid, self.cgroup = kill_by, pgid, cgroup


# child_id (or "pg<pgid>" for a group registered without one) -> Entry
Table = dict[str, Entry]
_REMOVE_WAIT = 2.0  # seconds the keeper waits for killed cgroups to empty before rmdir


def _kill_everything(children: Table, instance_id: str) -> None:
    for entry in children.values():
        if entry.cgroup:
            cgkill.kill_all(entry.cgroup)
        if entry.pgid:
            _sigkill(os.killpg, entry.pgid)
    _kill_marked(f"{INSTANCE_ENV}={instance_id}".encode())
    _remove_cgroups([d for entry in children.values() for d in entry.cgroup])


def _remove_cgroups(dirs: list[str]) -> None:
    """rmdir the killed children's cgroups once their processes are gone (bounded wait)."""
    deadline = time.monotonic() + _REMOVE_WAIT
    while dirs:
        dirs = cgkill.remove(dirs)
        if not dirs or time.monotonic() > deadline:
            return
        time.sleep(0.01)  # exiting processes leave a cgroup without an event we could wait on


def _kill_overdue(children: Table, now: float) -> None:
    """Kill every child whose kill-by deadline passed without a renewal moving it."""
    for child_id, entry in list(children.items()):
        kill_by, pgid = entry.kill_by, entry.pgid
        if kill_by and kill_by <= now:
            del children[child_id]
            if entry.cgroup:
                cgkill.kill_all(entry.cgroup)
                # Kept (no deadline, no group) so that it is removed if the supervisor dies
                # too; the supervisor's unregister drops it after removing it itself.
                children[child_id] = Entry(0.0, 0, entry.cgroup)
            if pgid:
                _sigkill(os.killpg, int(pgid))
            if child_id.endswith("*"):  # a batch announcement
                _kill_marked(f"{CHILD_ID_ENV}={child_id[:-1]}".encode(), prefix=True)
            elif not child_id.startswith("pg"):
                _kill_marked(f"{CHILD_ID_ENV}={child_id}".encode())
            late = round(now - kill_by, 3)
            sys.stderr.write(
                f'{{"event": "keeper_deadline_kill", "pgid": {int(pgid)}, "child_id": '
                f'"{child_id}", "late_seconds": {late}}}\n'
            )


def _number(text: bytes) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _apply(line: bytes, children: Table) -> bool:
    """Apply one message; False for `exit`.

    `=<child_id> <kill_by>`: a child about to be spawned (found by its marker until named);
    `+<pgid> <kill_by> <child_id>`: its process group, or a new deadline;
    `-<pgid> <child_id>`: forget it.
    """
    if line == b"exit":
        return False
    line, *dirs = line.split(b"\t")
    cgroup = [os.fsdecode(d) for d in dirs if d]
    op, _, rest = line.partition(b" ")
    kind, arg = op[:1], op[1:]
    if kind == b"=" and arg:
        children[arg.decode(errors="replace")] = Entry(_number(rest), 0, cgroup)
    elif kind in (b"+", b"-") and arg.isdigit():
        pgid = int(arg)
        if kind == b"+":
            kill_by, _, child_id = rest.partition(b" ")
            key = child_id.decode(errors="replace") or f"pg{pgid}"
            children[key] = Entry(_number(kill_by), pgid, cgroup)
        else:
            key = rest.decode(errors="replace") or f"pg{pgid}"
            children.pop(key, None)
    return True


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m supervisor.proc.keeperd <instance_id>\n")
        return 2
    instance_id = argv[1]
    # Ctrl-C or a TERM sent to the whole group must not remove the safety net first.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    pipe = ParentPipe()
    try:
        # Being the OOM killer's last choice is the point; it only works with CAP_SYS_RESOURCE.
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass
    # After the write above: a non-dumpable process's /proc files belong to root.
    undumpable()
    os.write(1, READY)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)

    children: Table = {}
    while True:
        now = time.monotonic()
        _kill_overdue(children, now)
        next_due = min((e.kill_by for e in children.values() if e.kill_by), default=None)
        lines = pipe.read(None if next_due is None else max(0.0, next_due - now))
        if lines is None:
            break  # the supervisor is gone
        for line in lines:
            if not _apply(line, children):
                return 0
    _kill_everything(children, instance_id)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
