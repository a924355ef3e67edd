"""A child process from its start to its result: started (launch.py) with the payload on stdin,
watched (watcher.py: its exit via pidfd, its first moments under a shared timer), its output
captured (output.py), its tree killed on request, at its timeout or for what it leaves behind
(kill.py), its ending read as a ChildResult (ending.py).

Output pipes are read at exit, or watched once the child has run for WATCH_AFTER: a child
that ends sooner (most do) costs the event loop its pidfd alone, and no timer of its own.
What a result means to whoever started the child is theirs to decide, not this module's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import resource
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from supervisor.core.log import log_event
from supervisor.proc import tree
from supervisor.proc.cgchild import ChildCgroup
from supervisor.proc.child import ChildEnd, ChildResult, ChildSpec
from supervisor.proc.ending import child_result
from supervisor.proc.keeperd import CHILD_ID_ENV
from supervisor.proc.kill import TreeKill
from supervisor.proc.launch import launch
from supervisor.proc.output import Capture
from supervisor.proc.watcher import WATCH_AFTER, Watcher

if TYPE_CHECKING:
    from supervisor.proc.keeper import Keeper
    from supervisor.proc.orphans import Orphans

_LEFTOVER_GRACE = 1.0  # cap on the TERM→KILL grace for what a handler leaves in its group
_PIPE_LINGER = 0.2  # how long output pipes may stay open once the process group is gone
_SEQUENCE = itertools.count()
_log = logging.getLogger("punchclock.runner")


class Child:
    """One handler process and everything it starts; its descendants do not outlive it.

    At its exit what is left in its group gets SIGTERM, then SIGKILL after min(1s,
    kill_grace), and a descendant holding the output pipes is killed too; kill() and timeouts
    also hunt descendants marked with PUNCHCLOCK_CHILD_ID. A Keeper kills the lot if the
    supervisor dies (or freezes past `kill_by`); Orphans kills what daemonised away.
    The common case (an empty group and closed pipes at exit) completes from event-loop
    callbacks alone: no task, no thread, no timer beyond an optional timeout.

    With `spec.cgroup`, the child runs in a cgroup of its own, created before it starts and
    removed after: "the tree" is then the cgroup's members (nothing leaves it by setsid, a
    double fork or a cleared environment), SIGKILL is the cgroup's kill, and CPU and peak
    memory are the whole tree's.
    """

    pid: int | None
    started_monotonic: float

    def __init__(
        self,
        spec: ChildSpec,
        watcher: Watcher,
        keeper: Keeper | None = None,
        orphans: Orphans | None = None,
    ) -> None:
        self.spec = spec
        self.watcher = watcher
        self.keeper = keeper
        self.orphans = orphans
        batch = spec.announced if spec.cgroup is None else ""
        # A batch's children: its random prefix and a counter (no urandom call per child).
        self.child_id = f"{batch}{next(_SEQUENCE):020x}" if batch else uuid.uuid4().hex
        self.pid = None
        self.started_monotonic = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._popen: subprocess.Popen[bytes] | None = None
        self._pidfd = -1
        self._status: int | None = None
        self._rusage: resource.struct_rusage | None = None
        self._ended = self.started_monotonic
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self._done: asyncio.Future[ChildResult] = self._loop.create_future()
        self._on_done: Callable[[ChildResult], None] | None = None  # when_done's callback
        self._output: Capture | None = None  # from _track on
        self._pipes: tuple[int, int] = (-1, -1)  # the output pipes, from _spawn to _track
        self._stop: tuple[ChildEnd, str] | None = None  # (outcome, error) of the first kill request
        self._timer: asyncio.TimerHandle | None = None
        self._settling = False  # the tree is gone; only the pipes may still be open
        self._killer: TreeKill | None = None  # the kill that `_stop` asked for
        self._leftovers: TreeKill | None = None  # the kill of what it left behind at its exit
        self._helper: asyncio.Task[None] | None = None  # a strong reference (the loop's is weak)
        self.cgroup: ChildCgroup | None = None
        # With a cgroup: ((CPU seconds, peak bytes), OOM kills, memory limit), read at the end.
        self._accounting: tuple[tuple[float | None, int | None], int, int | None] | None = None

    @classmethod
    def start(
        cls,
        spec: ChildSpec,
        watcher: Watcher,
        keeper: Keeper | None = None,
        orphans: Orphans | None = None,
    ) -> Child:
        """Start `spec.argv`; a command that cannot be executed yields a spawn_failed result."""
        child = cls(spec, watcher, keeper, orphans)
        if child._spawn():
            child._track()
        return child

    @classmethod
    def start_many(
        cls,
        specs: list[ChildSpec],
        watcher: Watcher,
        keeper: Keeper | None = None,
        orphans: Orphans | None = None,
    ) -> list[Child]:
        """`start` for several children at once: the spawns back to back, then what watches
        each. Each spawn leaves this CPU's caches to the new process, and the Python that
        followed ran 2-3x slower (an OpenTelemetry record 19 us against 6.5, DESIGN.md);
        watching all of them after the last spawn runs it warm."""
        children = [cls(spec, watcher, keeper, orphans) for spec in specs]
        spawned = []
        for child in children:
            try:
                if child._spawn():
                    spawned.append(child)
            except Exception as exc:  # before the process started (see _spawn)
                child._abandon(exc)
        for child in spawned:
            try:
                child._track()
            except Exception as exc:
                child._abandon(exc)
        return children

    @classmethod
    async def spawn(
        cls,
        spec: ChildSpec,
        watcher: Watcher,
        keeper: Keeper | None = None,
        orphans: Orphans | None = None,
    ) -> Child:
        """`start`, for a coroutine."""
        return cls.start(spec, watcher, keeper, orphans)

    def when_done(self, callback: Callable[[ChildResult], None]) -> None:
        """Call `callback` with the result once the child and its leftovers are gone (at
        once if they are), from the event-loop callback that saw it: a caller's hot path,
        with no task, future or extra loop iteration per child. One callback per child."""
        if self._done.done():
            callback(self._done.result())
        else:
            self._on_done = callback

    def live_output(self) -> tuple[int, str, str] | None:
        """While it runs: (bytes received so far, stdout tail, stderr tail), for a live view
        of its output; None once it has ended or if it never started."""
        if self._done.done() or self._output is None:
            return None
        return self._output.live()

    async def wait(self) -> ChildResult:
        """The result once the child and its leftovers are gone. Idempotent; safe to cancel."""
        return await asyncio.shield(self._done)

    async def kill(self, reason: str, grace: float | None = None) -> None:
        """TERM the group, wait `grace` (default kill_grace), KILL the group and escapees.

        Returns once the direct child is reaped. If it already exited by itself, its own
        outcome stands; otherwise the first kill request (or the timeout) names the outcome.
        """
        if self.pid is None:
            return
        self._request_stop(ChildEnd.KILLED, f"killed: {reason}", grace)
        if self._killer is not None:
            await asyncio.shield(self._killer.task)
        await asyncio.shield(self._exited)

    def set_kill_by(self, kill_by: float) -> None:
        """The keeper's deadline for it moves (to `kill_by`, monotonic)."""
        if self.keeper is not None and self.pid is not None and not self._exited.done():
            self.keeper.register(self.pid, kill_by, self.child_id, self._cgroup_dirs(), moved=True)

    # ------------------------------------------------------------ the watcher's calls

    def grown(self) -> None:
        """It has run for WATCH_AFTER: read its output as it comes (and the live tail with
        it), and arm its timeout."""
        if self._exited.done():
            return
        assert self._output is not None
        self._output.watch()
        if self._timer is None and self.spec.timeout is not None:
            self._arm_timeout(self.spec.timeout)

    def reap(self) -> None:
        """Its pidfd is readable (or a poll found it gone): collect its status, read what its
        pipes hold, and settle at once unless something is left in its group or cgroup."""
        assert self.pid is not None
        try:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by a waitpid(-1) elsewhere: the status is lost
            returncode = 255
        else:
            if pid == 0:
                return
            self._status, self._rusage = status, usage
            returncode = os.waitstatus_to_exitcode(status)
        if self._popen is not None:
            # Popen must know the child is reaped, or it would wait() or warn about it later.
            self._popen.returncode = returncode
        self._ended = time.monotonic()
        if self._pidfd >= 0:
            self.watcher.forget(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        assert self._output is not None
        self._output.drain()
        self._exited.set_result(None)
        if self._killer is not None:
            self._killer.child_exited()
            return  # it settles once it has killed what is left
        if self.cgroup is not None:
            if not self.cgroup.populated():  # the usual case: nothing left in the cgroup
                self._settle()
                return
        else:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:  # the usual case: nothing left in the group
                self._settle()
                return
            except PermissionError:
                pass
        grace = min(_LEFTOVER_GRACE, max(self.spec.kill_grace, 0.0))
        self._leftovers = TreeKill(
            self.pid, self.cgroup, self.child_id, self._exited, time.monotonic() + grace,
            hunt=False, then=self._settle,
        )  # fmt: skip

    # ------------------------------------------------------------ starting

    def _cgroup_dirs(self) -> tuple[str, ...]:
        return () if self.cgroup is None else self.cgroup.dirs

    def _spawn(self) -> bool:
        """Start the process, which nothing watches yet (`_track` does); False if it could not
        start (its result is set then)."""
        started = launch(self.spec, self.child_id, self.keeper)
        if isinstance(started, str):
            self._done.set_result(ChildResult.not_started(started))
            return False
        (self.pid, out, err, self._popen), self.cgroup = started
        self._pipes = (out, err)
        return True

    def _track(self) -> None:
        """Watch the started process: the keeper and the orphan sweep learn its group, its
        output pipes and exit are watched, its timeout armed."""
        spec = self.spec
        assert self.pid is not None
        if self.keeper is not None:
            self.keeper.register(self.pid, spec.kill_by, self.child_id, self._cgroup_dirs())
        if self.orphans is not None:
            self.orphans.started(self.pid, self.child_id)
        out, err = self._pipes
        self._output = Capture(self._loop, out, err, spec.output_limit, self._pipe_closed)
        if spec.timeout is not None and spec.timeout <= WATCH_AFTER:
            self._arm_timeout(spec.timeout)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError:  # no pidfds (kernel < 5.3, some seccomp profiles): poll instead
            self.watcher.watch(self, -1)
            self._helper = self._loop.create_task(self._poll_exit())
        else:
            self.watcher.watch(self, self._pidfd)

    def _abandon(self, exc: Exception) -> None:
        """Tracking a started process failed (a bug, or no memory for an epoll entry): kill
        it, and end as not started (its caller may try again)."""
        self._loop.call_exception_handler({"message": "tracking a child failed", "exception": exc})
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        if self._output is None:
            for fd in self._pipes:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if not self._done.done():
            self._done.set_result(ChildResult.not_started(f"could not watch the child: {exc!r}"))

    def _arm_timeout(self, timeout: float) -> None:
        error = f"timed out after {timeout:g}s"
        self._timer = self._loop.call_at(
            self.started_monotonic + timeout, self._request_stop, ChildEnd.TIMED_OUT, error, None
        )

    async def _poll_exit(self) -> None:
        delay = 0.001
        while not self._exited.done():
            self.reap()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    # ------------------------------------------------------------ ending

    def _request_stop(self, outcome: ChildEnd, error: str, grace: float | None) -> None:
        grace = self.spec.kill_grace if grace is None else grace
        deadline = time.monotonic() + max(grace, 0.0)
        if self._killer is not None:
            self._killer.hurry(deadline)
        elif not self._exited.done():
            assert self.pid is not None
            self._stop = (outcome, error)
            self._killer = TreeKill(
                self.pid, self.cgroup, self.child_id, self._exited, deadline,
                hunt=True, then=self._settle,
            )  # fmt: skip

    def _settle(self) -> None:
        """The tree is gone; finish once the pipes close, or deal with whoever holds them."""
        self._settling = True
        assert self._output is not None
        if self._output.closed:
            self._finish()
        else:
            self._timer = self._loop.call_later(_PIPE_LINGER, self._on_pipes_held)

    def _pipe_closed(self) -> None:
        assert self._output is not None
        if self._settling and self._output.closed:
            self._finish()

    def _on_pipes_held(self) -> None:
        async def kill_holders() -> None:
            # Something that left the group still holds our pipes; it must not outlive us.
            await asyncio.to_thread(tree.kill_strays, CHILD_ID_ENV, self.child_id, [])
            self._timer = self._loop.call_later(_PIPE_LINGER, self._finish)

        if not self._done.done():
            self._helper = self._loop.create_task(kill_holders())

    def _finish(self) -> None:
        if self._done.done():
            return
        if self._timer is not None:
            self._timer.cancel()
        assert self._output is not None
        self._output.close()
        if (cgroup := self.cgroup) is not None:
            limit = self.spec.cgroup_limits.memory_max
            self._accounting = (cgroup.usage(), cgroup.oom_kills(), limit)
            if left := cgroup.remove():
                log_event(
                    _log, "cgroup_not_removed", level=logging.WARNING, child_id=self.child_id,
                    dirs=left,
                )  # fmt: skip
        if self.keeper is not None and self.pid is not None:
            self.keeper.unregister(self.pid, self.child_id)
        if self.orphans is not None and self.pid is not None:
            self.orphans.finished(self.pid)  # kills what daemonised and was adopted by us
        result = child_result(
            self._status, self._rusage, self._stop, self._output,
            self._ended - self.started_monotonic, self._accounting,
        )  # fmt: skip
        self._done.set_result(result)
        if (callback := self._on_done) is not None:
            self._on_done = None
            try:
                callback(result)
            except Exception as exc:  # the child is settled; report it as the loop would
                self._loop.call_exception_handler(
                    {"message": "a child's when_done callback failed", "exception": exc}
                )
