"""Killing everything in a child's cgroup, shared by the runner (cgchild.py) and the keeper
(keeperd.py, which must stay small: this imports only os, signal and time).

v2: one write of "1" to cgroup.kill (kernel 5.14+). v1 without cgroup.kill: freeze the
freezer cgroup, SIGKILL every member while none can fork, thaw; the kills land on thaw.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

_FREEZE_WAIT = 1.0  # seconds a v1 freeze may take before we kill what we see anyway


def members(directory: str) -> list[int]:
    """The pids in one cgroup directory (empty when it is gone)."""
    try:
        with open(os.path.join(directory, "cgroup.procs")) as f:
            return [int(line) for line in f.read().split()]
    except (OSError, ValueError):
        return []


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        return False
    return True


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def freeze_kill(directory: str) -> None:
    """v1 freezer: FROZEN, then SIGKILL each member (none can fork meanwhile), then THAWED."""
    state = os.path.join(directory, "freezer.state")
    if not _write(state, "FROZEN"):
        for pid in members(directory):
            _signal(pid, signal.SIGKILL)
        return
    deadline = time.monotonic() + _FREEZE_WAIT
    delay = 0.0005
    while _read(state) == "FREEZING" and time.monotonic() < deadline:
        time.sleep(delay)  # the kernel offers no event for it; bounded
        delay = min(delay * 2, 0.02)
    for pid in members(directory):
        _signal(pid, signal.SIGKILL)
    _write(state, "THAWED")


def kill_all(dirs: tuple[str, ...] | list[str]) -> bool:
    """SIGKILL every process of a child's cgroup given as its directories (v2 and/or v1).
    False when none of them offers a whole-tree kill (nothing was sent then)."""
    for d in dirs:
        kill = os.path.join(d, "cgroup.kill")
        if os.path.exists(kill) and _write(kill, "1"):
            return True
    for d in dirs:
        if os.path.exists(os.path.join(d, "freezer.state")):
            freeze_kill(d)
            return True
    return False


def remove(dirs: tuple[str, ...] | list[str]) -> list[str]:
    """rmdir each directory (children of a v1 hierarchy first is not needed: they are
    leaves); returns the ones that could not be removed (still populated, or gone wrong)."""
    left = []
    for d in dirs:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(d)
    return left


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)
