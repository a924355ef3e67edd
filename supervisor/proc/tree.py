"""A handler's process tree: find its descendants and kill the ones that left its group.
The only importer of psutil (which refuses to signal a pid reused since it was looked up).
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

Descendant = psutil.Process


def descendants(pid: int) -> list[Descendant]:
    """Everything below `pid` now: taken before it dies, when the tree is still linked."""
    with contextlib.suppress(psutil.Error):
        return list(psutil.Process(pid).children(recursive=True))
    return []


def kill_strays(marker: str, value: str, snapshot: list[Descendant]) -> None:
    """SIGKILL `snapshot` and every process whose environment has `marker`=`value`."""
    marked = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(marker) == value:
                marked.append(proc)
    for proc in snapshot + marked:
        with contextlib.suppress(psutil.Error):
            proc.kill()  # psutil refuses if the pid was reused since the snapshot


def group_has_live_members(pgid: int) -> bool:
    """Is anything but a zombie left in process group `pgid`?"""
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
    return False


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
