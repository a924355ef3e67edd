"""The supervisor's handle on its keeper process (keeperd.py, which says what the keeper
does): start it, register and unregister children's process groups with their kill-by
deadlines, close it without it killing anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess

from supervisor.proc import parentwatch
from supervisor.proc.keeperd import READY

_START_TIMEOUT = 10.0
_CLOSE_TIMEOUT = 5.0
# Messages wait this long to go out together: one pipe write (and one keeper wake-up) per
# window instead of two per child. A child spawned inside the window the supervisor dies in
# is still killed, by its environment marker (DESIGN.md, the keeper).
_COALESCE_SECONDS = 0.01


class Keeper:
    """The supervisor-side handle of one keeper process (one per supervisor instance)."""

    def __init__(self, instance_id: str, proc: subprocess.Popen[bytes]) -> None:
        self.instance_id = instance_id
        self.pid = proc.pid
        self._proc = proc
        assert proc.stdin is not None
        self._stdin = proc.stdin
        self._pending = bytearray()  # taken from _queued by _flush, being written
        self._queued: list[bytes] = []  # messages of this coalescing window
        # Children whose one `+` is still in _queued (its index there): a child that ends
        # inside the window needs no message at all (_drop_unsent).
        self._unsent: dict[str, int] = {}
        self._solo: set[str] = set()  # announced on their own (`=`): their `-` must go out
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
                ready.set_result(os.read(fd, len(READY)))

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
        if line != READY:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            assert proc.stdin is not None
            proc.stdin.close()
            raise RuntimeError(f"keeper for {instance_id!r} failed to start")
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)
        return cls(instance_id, proc)

    def announce(self, child_id: str, kill_by: float, cgroup: tuple[str, ...] = ()) -> None:
        """Before a child is spawned: have the keeper kill the processes marked `child_id`
        at `kill_by`. Written at once, not coalesced: a supervisor that freezes right after
        the spawn must not leave the child without a deadline (the keeper finds it by its
        marker until `register` names its group). `cgroup`: the child's cgroup directories,
        killed whole (cgkill.py) wherever its processes went."""
        self._solo.add(child_id)
        self._send(f"={child_id} {kill_by:.6f}{_dirs(cgroup)}\n".encode(), now=True)

    def announce_batch(self, prefix: str, kill_by: float) -> None:
        """`announce` for every child whose id will start with `prefix` (a batch of
        children: one write and one keeper wake-up instead of one per child). `withdraw`
        it once they are all registered."""
        self._send(f"={prefix}* {kill_by:.6f}\n".encode(), now=True)

    def withdraw(self, prefix: str) -> None:
        """The children of `announce_batch(prefix)` are registered (or never started)."""
        self._send(f"-0 {prefix}*\n".encode())

    def register(
        self,
        pgid: int,
        kill_by: float | None = None,
        child_id: str = "",
        cgroup: tuple[str, ...] = (),
        *,
        moved: bool = False,
    ) -> None:
        """Have the keeper kill process group `pgid` (and cgroup `cgroup`) if the supervisor
        dies, or at the monotonic instant `kill_by` (and the processes marked with
        `child_id`). Sent again with `moved`, it moves the deadline."""
        message = f"+{pgid} {kill_by or 0:.6f} {child_id}{_dirs(cgroup)}\n".encode()
        # Unsent while every `+` of the child is in this window (a moved deadline replaces
        # the queued one: the keeper keeps only the last).
        unsent = self._drop_unsent(child_id) or not moved
        if unsent and child_id and not self._closed and not self._broken:
            self._unsent[child_id] = len(self._queued)
        self._send(message)

    def unregister(self, pgid: int, child_id: str = "") -> None:
        """Forget the child (its group is gone; the number may be reused)."""
        solo = child_id in self._solo
        if solo:
            self._solo.discard(child_id)
        if self._drop_unsent(child_id) and not solo:
            # Its `+` never left: the keeper applies a window's messages in order, so `+`
            # then `-` would leave it as it is now. Most children end inside their window.
            return
        self._send(f"-{pgid} {child_id}\n".encode())

    def _drop_unsent(self, child_id: str) -> bool:
        """Take the child's queued `+` back out of this window; False if none is queued."""
        index = self._unsent.pop(child_id, None) if child_id else None
        if index is None:
            return False
        self._queued[index] = b""
        return True

    async def sync(self) -> None:
        """Write what is queued now and wait until the keeper has it."""
        if self._pending or self._queued:
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
        self._queued.append(message)
        if now:
            self._flush()
        elif self._flush_timer is None and self._writer_loop is None:
            loop = asyncio.get_running_loop()
            self._flush_timer = loop.call_later(_COALESCE_SECONDS, self._flush)

    def _flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._queued:
            self._pending += b"".join(self._queued)
            self._queued.clear()
            self._unsent.clear()
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
            self._solo.clear()
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


def _dirs(cgroup: tuple[str, ...]) -> str:
    # cgroups.probe refuses paths with a tab or a newline
    return "".join(f"\t{d}" for d in cgroup)


# All the keeper keeps of the supervisor's environment: it runs no program and reads no
# setting, and the supervisor's secrets must not sit in a second
# process's /proc/<pid>/environ. Nor keeperd.INSTANCE_ENV: it must not carry the marker it
# kills by.
KEEPER_ENV = frozenset({"PATH", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "PYTHONHOME"})


def _spawn_keeper(instance_id: str) -> subprocess.Popen[bytes]:
    drop = tuple(name for name in os.environ if name not in KEEPER_ENV)
    return parentwatch.spawn(
        "supervisor.proc.keeperd", [instance_id], drop_env=drop, stdout=subprocess.PIPE
    )
