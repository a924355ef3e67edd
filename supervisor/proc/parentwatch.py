"""The one way a helper process notices that the process that started it is gone, and how to
start such a helper. The helpers are the keeper (keeperd), and the watchdog that stops what
`punchclock up` and the local server tooling started (local/watchdog).

The parent holds the write end of the helper's stdin, so EOF means the parent is gone however
it died (SIGKILL and OOM kill included). getppid() is checked at least once a second too, for
when a forked-but-not-exec'd process (multiprocessing's fork start method) inherited that
write end and keeps it open. PR_SET_PDEATHSIG is not used: it fires when the *thread* that
spawned the helper exits (a parent whose event loop runs in a worker thread would see a false
death), and it is Linux-only.

Stdlib only, and nothing heavy at import time (no asyncio, no subprocess): the keeper process
imports this, and its ~9 MB RSS is the point.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

# `-m supervisor.<helper>` must work whatever the cwd and whether or not we are installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHECK_PARENT = 1.0  # seconds between getppid() checks


def spawn(
    module: str, args: list[str], drop_env: tuple[str, ...] = (), **popen: Any
) -> subprocess.Popen[bytes]:
    """Start `python -S -m <module> <args>` with a pipe to its stdin, the parent's end of a
    ParentPipe. -S skips site-packages: helpers need only the stdlib and this package."""
    import subprocess  # here, not at import time: the helpers themselves never spawn

    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-S", "-m", module, *args],
        stdin=subprocess.PIPE,
        env=env,
        bufsize=0,
        **popen,
    )


class ParentPipe:
    """The helper's side: lines from the parent on `fd` (stdin) until the parent is gone."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.parent = os.getppid()
        self._buffer = b""

    def read(self, timeout: float | None = None) -> list[bytes] | None:
        """The complete lines that arrive within `timeout` seconds (None: until some do),
        maybe none; None once the parent is gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while os.getppid() == self.parent:
            left = _CHECK_PARENT if deadline is None else deadline - time.monotonic()
            if select.select([self.fd], [], [], max(0.0, min(_CHECK_PARENT, left)))[0]:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return None  # EOF: every holder of the write end is gone
                *lines, self._buffer = (self._buffer + chunk).split(b"\n")
                if lines:
                    return lines
            elif deadline is not None and time.monotonic() >= deadline:
                return []
        return None
