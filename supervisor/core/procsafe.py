"""What a daemon holding secrets does to itself (the supervisor and the API; the keeper has
its own copy, as proc/ imports nothing of core/ but the log)."""

from __future__ import annotations

_PR_SET_DUMPABLE = 4


def undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): a process of our uid (a handler without `user`) can then no
    longer read our /proc/<pid>/environ or mem, nor ptrace us; only CAP_SYS_PTRACE can. Core
    dumps are off too. An execve of an ordinary binary makes a child dumpable again, so
    handlers and the keeper are not affected (the keeper calls this itself)."""
    import ctypes  # here, not at import time: about 0.7 MB of the keeper's RSS, paid once

    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
