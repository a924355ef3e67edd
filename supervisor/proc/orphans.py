"""Handler descendants that daemonised. The supervisor is a child subreaper
(PR_SET_CHILD_SUBREAPER), so a process that double-forked or setsid()ed away from its handler
is reparented to us, not to init, whatever it did to its environment. `sweep()` SIGKILLs and
reaps every child of ours that is neither a handler we started (nor the keeper) nor still in
the process group of, or marked with the child id of, a handler that has not finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal

from supervisor.core.log import log_event
from supervisor.proc.keeperd import CHILD_ID_ENV

_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_DELAY = 0.02  # sweeps requested by finishing handlers go out together

log = logging.getLogger("punchclock.orphans")


class Orphans:
    def __init__(self) -> None:
        self.enabled = False
        self.killed = 0
        self._handlers: dict[int, bytes] = {}  # pid (= pgid) -> b"PUNCHCLOCK_CHILD_ID=..."
        self._exempt: set[int] = set()
        self._pending: asyncio.TimerHandle | None = None

    def enable(self) -> bool:
        """Become a child subreaper. Only the daemon does this: in a process that starts
        children of its own (a test runner), the sweep would kill them."""
        libc = ctypes.CDLL(None, use_errno=True)
        self.enabled = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        if not self.enabled:
            log_event(
                log,
                "subreaper_unavailable",
                level=logging.WARNING,
                error=os.strerror(ctypes.get_errno()),
            )
        return self.enabled

    def exempt(self, pid: int) -> None:
        """A child of ours that is not a handler (the keeper)."""
        self._exempt.add(pid)

    def started(self, pid: int, child_id: str) -> None:
        self._handlers[pid] = f"{CHILD_ID_ENV}={child_id}".encode()

    def finished(self, pid: int) -> None:
        """The handler and its group are gone: whatever it left behind is an orphan now."""
        self._handlers.pop(pid, None)
        self.sweep_soon()

    def sweep_soon(self) -> None:
        if self.enabled and self._pending is None:
            self._pending = asyncio.get_running_loop().call_later(_SWEEP_DELAY, self.sweep)

    def sweep(self) -> int:
        """Kill adopted orphans and reap dead ones; returns how many were killed."""
        self._pending = None
        killed = 0
        for pid in _children():
            if pid in self._handlers or pid in self._exempt:
                continue
            state, pgid = _state(pid)
            if state is None:
                continue
            if state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                continue
            if pgid in self._handlers or self._marked_by_live_handler(pid):
                continue  # the runner ends it with its handler
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # our child: its pid cannot be reused yet
                killed += 1
                log_event(log, "orphan_killed", level=logging.WARNING, pid=pid, cmd=_cmd(pid))
        if killed:
            self.killed += killed
            self.sweep_soon()  # reap them once they are dead
        return killed

    def _marked_by_live_handler(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            return False
        return any(marker in environ for marker in self._handlers.values())


def _children() -> list[int]:
    me = os.getpid()
    pids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                pids += map(int, f.read().split())
        except OSError:
            continue
    return pids


def _state(pid: int) -> tuple[str | None, int]:
    """(state letter, process group) from /proc/<pid>/stat; (None, 0) if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None, 0
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and parens
    return fields[0].decode(), int(fields[2])


def _cmd(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(500)
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()
