"""The keeper: a tiny companion process that kills a supervisor's children when the
supervisor can no longer be trusted to: when it dies without closing the keeper (SIGKILL,
OOM kill, crash), and when a child's kill-by deadline passes unrenewed (the supervisor is
frozen, or its event loop is blocked, past the child's lease). It kills nothing else.

Run as `python -m supervisor.keeper <instance_id>`; it reads lines on stdin:
`+<pgid> <kill_by> <child_id>` registers (or moves the deadline of) a child's process group,
`-<pgid>` forgets it, `exit` stops without killing. kill_by is a CLOCK_MONOTONIC instant
(time.monotonic(), the same clock in every process of the host), 0 for none. At kill_by the
keeper SIGKILLs the group and every process carrying PUNCHCLOCK_CHILD_ID=<child_id> (a
descendant that left the group). EOF without `exit` means the supervisor is gone: SIGKILL
every registered group and every process whose environment carries
PUNCHCLOCK_SUPERVISOR_INSTANCE=<instance_id> (a child spawned after its last message).

Parent death is also noticed by checking getppid() at least once a second, for when a
forked-but-not-exec'd process (multiprocessing's fork start method) inherited the write end
of our stdin and keeps it open. PR_SET_PDEATHSIG is not used: it fires when the *thread*
that spawned us exits, so a supervisor whose event loop runs in a worker thread could
trigger a false kill of every child. The getppid() check has neither problem.

The keeper process imports only os, sys, signal, select and time (about 9 MB RSS; asyncio
would double it): the supervisor-side imports below are skipped when it runs as __main__.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

if __name__ != "__main__":  # the keeper process itself needs none of these (asyncio: +10 MB)
    import asyncio
    import logging
    import subprocess

INSTANCE_ENV = "PUNCHCLOCK_SUPERVISOR_INSTANCE"
CHILD_ID_ENV = "PUNCHCLOCK_CHILD_ID"
# `-m supervisor.keeper` must work whatever the cwd and whether or not we are installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_READY = b"ready\n"
_START_TIMEOUT = 10.0
_CLOSE_TIMEOUT = 5.0
# Messages wait this long to go out together: one pipe write (and one keeper wake-up) per
# window instead of two per child. A child spawned inside the window the supervisor dies in
# is still killed, by its environment marker (DESIGN.md, Lease and fencing protocol).
_COALESCE_SECONDS = 0.01


class Keeper:
    """The supervisor-side handle of one keeper process (one per supervisor instance)."""

    def __init__(self, instance_id: str, proc: subprocess.Popen[bytes]) -> None:
        self.instance_id = instance_id
        self.pid = proc.pid
        self._proc = proc
        assert proc.stdin is not None
        self._stdin = proc.stdin
        self._pending = bytearray()
        self._writer_loop: asyncio.AbstractEventLoop | None = None
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._broken = False
        self._closed = False
        self._flush_timer: asyncio.TimerHandle | None = None

    @classmethod
    async def start(cls, instance_id: str) -> Keeper:
        """Spawn the keeper and wait until it ignores terminal signals and reads its stdin."""
        if not instance_id or "\0" in instance_id or "\n" in instance_id:
            raise ValueError(f"invalid keeper instance id {instance_id!r}")
        proc = _spawn_keeper(instance_id)
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[bytes] = loop.create_future()
        fd = proc.stdout.fileno()

        def on_readable() -> None:
            if not ready.done():
                ready.set_result(os.read(fd, len(_READY)))

        os.set_blocking(fd, False)
        loop.add_reader(fd, on_readable)
        try:
            async with asyncio.timeout(_START_TIMEOUT):
                line = await ready
        except TimeoutError:
            line = b""
        finally:
            loop.remove_reader(fd)
            proc.stdout.close()
        if line != _READY:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            assert proc.stdin is not None
            proc.stdin.close()
            raise RuntimeError(f"keeper for {instance_id!r} failed to start")
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)
        return cls(instance_id, proc)

    def register(self, pgid: int, kill_by: float | None = None, child_id: str = "") -> None:
        """Have the keeper kill process group `pgid` if the supervisor dies, or at the
        monotonic instant `kill_by` (and the processes marked with `child_id`). Sent again,
        it moves the deadline."""
        self._send(f"+{pgid} {kill_by or 0:.6f} {child_id}\n".encode())

    def unregister(self, pgid: int) -> None:
        """Forget `pgid` (its group is gone; the number may be reused)."""
        self._send(f"-{pgid}\n".encode())

    async def sync(self) -> None:
        """Write what is queued now and wait until the keeper has it."""
        if self._pending:
            self._flush()
        await self._flushed.wait()

    async def close(self) -> None:
        """Stop the keeper without it killing anything. Idempotent."""
        if self._closed:
            return
        self._send(b"exit\n", now=True)
        self._closed = True
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await self._flushed.wait()
        except TimeoutError:
            pass
        self._stop_writer()
        self._stdin.close()
        try:
            await asyncio.to_thread(self._proc.wait, _CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            # A keeper that is stuck cannot be trusted to exit cleanly; SIGKILL kills only it.
            self._proc.kill()
            await asyncio.to_thread(self._proc.wait)

    def _send(self, message: bytes, now: bool = False) -> None:
        if self._closed or self._broken:
            return
        self._pending += message
        if now:
            self._flush()
        elif self._flush_timer is None and self._writer_loop is None:
            loop = asyncio.get_running_loop()
            self._flush_timer = loop.call_later(_COALESCE_SECONDS, self._flush)

    def _flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        # Non-blocking so a stalled keeper can never block the supervisor's event loop.
        try:
            while self._pending:
                del self._pending[: os.write(self._stdin.fileno(), self._pending)]
        except BlockingIOError:
            self._flushed.clear()
            if self._writer_loop is None:
                self._writer_loop = asyncio.get_running_loop()
                self._writer_loop.add_writer(self._stdin.fileno(), self._flush)
            return
        except OSError as exc:
            self._broken = True
            self._pending.clear()
            logging.getLogger(__name__).error(
                "keeper %d for %s is gone (%s): children will not be killed if this "
                "supervisor dies",
                self.pid,
                self.instance_id,
                exc,
            )
        self._stop_writer()
        self._flushed.set()

    def _stop_writer(self) -> None:
        if self._writer_loop is not None:
            self._writer_loop.remove_writer(self._stdin.fileno())
            self._writer_loop = None


def _spawn_keeper(instance_id: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    env.pop(INSTANCE_ENV, None)
    # -S: skip site-packages; the keeper needs only the stdlib and this package.
    return subprocess.Popen(
        [sys.executable, "-S", "-m", "supervisor.keeper", instance_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        close_fds=True,
        bufsize=0,
    )


def _sigkill(kill: Callable[[int, int], None], target: int) -> bool:
    try:
        kill(target, signal.SIGKILL)
    except OSError:
        return False
    return True


def _kill_marked(marker: bytes) -> None:
    """SIGKILL every process whose environment holds `marker` (NAME=value)."""
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
            if marker in environ.split(b"\0"):
                killed = _sigkill(os.kill, int(name)) or killed
        if not killed:
            return


def _kill_everything(groups: dict[int, tuple[float, str]], instance_id: str) -> None:
    for pgid in groups:
        _sigkill(os.killpg, pgid)
    _kill_marked(f"{INSTANCE_ENV}={instance_id}".encode())


def _kill_overdue(groups: dict[int, tuple[float, str]], now: float) -> None:
    """Kill every child whose kill-by deadline passed without a renewal moving it."""
    for pgid, (kill_by, child_id) in list(groups.items()):
        if kill_by and kill_by <= now:
            del groups[pgid]
            _sigkill(os.killpg, pgid)
            if child_id:
                _kill_marked(f"{CHILD_ID_ENV}={child_id}".encode())
            late = round(now - kill_by, 3)
            sys.stderr.write(
                f'{{"event": "keeper_deadline_kill", "pgid": {pgid}, "late_seconds": {late}}}\n'
            )


def _apply(line: bytes, groups: dict[int, tuple[float, str]]) -> bool:
    """Apply one message; False for `exit`."""
    if line == b"exit":
        return False
    op, _, rest = line.partition(b" ")
    if op[1:].isdigit():
        pgid = int(op[1:])
        if op[:1] == b"+":
            kill_by, _, child_id = rest.partition(b" ")
            try:
                deadline = float(kill_by) if kill_by else 0.0
            except ValueError:
                deadline = 0.0
            groups[pgid] = (deadline, child_id.decode(errors="replace"))
        elif op[:1] == b"-":
            groups.pop(pgid, None)
    return True


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m supervisor.keeper <instance_id>\n")
        return 2
    instance_id = argv[1]
    # Ctrl-C or a TERM sent to the whole group must not remove the safety net first.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()
    try:
        # Being the OOM killer's last choice is the point; it only works with CAP_SYS_RESOURCE.
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass
    os.write(1, _READY)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)

    groups: dict[int, tuple[float, str]] = {}  # pgid -> (kill_by, child_id)
    buffer = b""
    while os.getppid() == parent:
        now = time.monotonic()
        _kill_overdue(groups, now)
        next_due = min((t for t, _ in groups.values() if t), default=now + 1.0)
        timeout = min(1.0, max(0.0, next_due - now))
        if not select.select([0], [], [], timeout)[0]:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break  # EOF: the supervisor is gone
        *lines, buffer = (buffer + chunk).split(b"\n")
        for line in lines:
            if not _apply(line, groups):
                return 0
    _kill_everything(groups, instance_id)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
