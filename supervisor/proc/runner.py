"""Child processes: start one (spawn.py) with the payload on stdin, watch exit via pidfd,
keep output tails (output.py), TERM→grace→KILL the whole tree (tree.py), report rusage.
Output pipes are read at exit, or watched once the child has run for _WATCH_AFTER: a child
that ends sooner (most do) costs the event loop its pidfd alone, and no timer of its own
(_Watch: one timer for every young child, whose timeout is armed when its output watch
starts; one epoll set of all the children's pidfds).
Deciding what a result means for a run (retries, fencing) belongs to the services, not here."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import resource
import select
import signal
import subprocess
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from supervisor.core.log import log_event
from supervisor.proc import tree
from supervisor.proc.cgchild import JOIN_FAILED, JOIN_FAILED_TEXT, ChildCgroup
from supervisor.proc.cglimits import mib
from supervisor.proc.child import ChildEnd, ChildResult, ChildSpec
from supervisor.proc.keeperd import CHILD_ID_ENV, INSTANCE_ENV
from supervisor.proc.output import Tail
from supervisor.proc.spawn import spawn_error_text, start_process

if TYPE_CHECKING:
    from supervisor.proc.keeper import Keeper
    from supervisor.proc.orphans import Orphans

_READ_SIZE = 1 << 16  # the default pipe capacity: one read empties a full pipe
_LEFTOVER_GRACE = 1.0  # cap on the TERM→KILL grace for what a handler leaves in its group
_PIPE_LINGER = 0.2  # how long output pipes may stay open once the process group is gone
_POLL_MAX = 0.1
# A child still running this long gets its output pipes watched (before, a chatty one may
# wait up to this long on a full 64 KiB pipe); one that exits sooner is read at exit.
_WATCH_AFTER = 0.025
_YOUNG_SLACK = 0.001  # a timer may run this early (the loop's clock resolution)
_DRAIN_READS = 16  # reads of a pipe at exit before it is watched instead
# A kill whose grace ends sooner than this signals before it looks for descendants.
_HURRIED = 0.5
_CGROUP_EMPTY_WAIT = 5.0  # after the cgroup's kill, how long its members may take to go
_SEQUENCE = itertools.count()
_log = logging.getLogger("punchclock.runner")


class _Watch:
    """What one event loop keeps for all its children.

    The young (their first _WATCH_AFTER seconds), in start order, behind one timer: most exit
    within it and so never cost a timer of their own (a timer and its cancellation each, for
    the output watch and the timeout, were a tenth of the runner's Python calls per child).

    Their pidfds, in an epoll set of our own that the loop watches as one reader: adding a
    child is one epoll_ctl and forgetting it another, and the exits found at one wake-up
    are reaped together (the loop's add_reader and remove_reader cost 6.3 µs per
    child against 0.8).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._young: deque[Child] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._epoll = select.epoll()
        self._exiting: dict[int, Child] = {}  # pidfd -> its child
        loop.add_reader(self._epoll.fileno(), self._reap_exited)

    def add(self, child: Child) -> None:
        self._young.append(child)
        if self._timer is None:
            self._arm(child)

    def _arm(self, child: Child) -> None:
        self._timer = child._loop.call_at(child.started_monotonic + _WATCH_AFTER, self._grow)

    def _grow(self) -> None:
        self._timer = None
        young = self._young
        until = time.monotonic() - _WATCH_AFTER + _YOUNG_SLACK  # the loop's clock
        while young:
            if young[0].started_monotonic > until:
                self._arm(young[0])
                return
            young.popleft()._grown()

    def watch_exit(self, pidfd: int, child: Child) -> None:
        self._epoll.register(pidfd, select.EPOLLIN)
        self._exiting[pidfd] = child

    def forget_exit(self, pidfd: int) -> None:
        """Before the pidfd is closed (its number may be reused at once)."""
        del self._exiting[pidfd]
        self._epoll.unregister(pidfd)

    def _reap_exited(self) -> None:
        for pidfd, _ in self._epoll.poll(0, 64):  # level-triggered: the rest come next time
            child = self._exiting.get(pidfd)
            if child is None:
                continue
            try:
                child._reap()
            except Exception as exc:  # as the loop reports a failed reader callback
                child._loop.call_exception_handler(
                    {"message": "reaping a child failed", "exception": exc}
                )


_own_peak = 0  # this process's peak RSS in bytes, as last read


def _inherited_peak(rss: int) -> bool:
    """Whether a child's peak RSS is no more than ours: a vfork child reports its parent's
    peak, not its own. Ours only grows, so it is read again only when `rss` is above the
    last reading (not once per child)."""
    global _own_peak
    if rss > _own_peak:
        _own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss <= _own_peak


def _watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    """The loop's _Watch, kept on the loop itself: it is collected with the loop (a
    WeakKeyDictionary's value would keep its loop alive through the timer and children)."""
    watch: _Watch | None = loop.__dict__.get("_punchclock_watch")
    if watch is None:
        watch = loop.__dict__["_punchclock_watch"] = _Watch(loop)
    return watch


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

    def __init__(self, spec: ChildSpec, keeper: Keeper | None, orphans: Orphans | None) -> None:
        self.spec = spec
        self.keeper = keeper
        self.orphans = orphans
        batch = spec.announced if spec.cgroup is None else ""
        # A claim's children: its random prefix and a counter (no urandom call per child).
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
        # Made when a kill waits; set on exit and when a kill deadline moves closer.
        self._wake: asyncio.Event | None = None
        self._tails: list[Tail] = []
        self._pipes: tuple[int, int] = (-1, -1)  # the output pipes, from _spawn to _track
        self._stop: tuple[ChildEnd, str] | None = None  # (outcome, error) of the first kill request
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._settling = False  # the tree is gone; only the pipes may still be open
        self._group_gone = False
        # Strong references: the event loop keeps only weak ones to tasks.
        self._killer: asyncio.Task[None] | None = None
        self._helper: asyncio.Task[None] | None = None
        self.cgroup: ChildCgroup | None = None
        self._usage: tuple[float | None, int | None] = (None, None)
        self._oom_kills = 0

    @classmethod
    def start(
        cls, spec: ChildSpec, keeper: Keeper | None = None, orphans: Orphans | None = None
    ) -> Child:
        """Start `spec.argv`; a command that cannot be executed yields a spawn_failed result."""
        child = cls(spec, keeper, orphans)
        child._start()
        return child

    @classmethod
    def start_many(
        cls, specs: list[ChildSpec], keeper: Keeper | None = None, orphans: Orphans | None = None
    ) -> list[Child]:
        """`start` for several children at once: the spawns back to back, then what watches
        each. Each spawn leaves this CPU's caches to the new process, and the Python that
        followed ran 2-3x slower (an OpenTelemetry record 19 us against 6.5, DESIGN.md);
        watching all of them after the last spawn runs it warm."""
        children = [cls(spec, keeper, orphans) for spec in specs]
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
        cls, spec: ChildSpec, keeper: Keeper | None = None, orphans: Orphans | None = None
    ) -> Child:
        """`start`, for a coroutine."""
        return cls.start(spec, keeper, orphans)

    def when_done(self, callback: Callable[[ChildResult], None]) -> None:
        """Call `callback` with the result once the child and its leftovers are gone (at
        once if they are), from the event-loop callback that saw it: the executor's path,
        with no task, future or extra loop iteration per child. One callback per child."""
        if self._done.done():
            callback(self._done.result())
        else:
            self._on_done = callback

    def live_output(self) -> tuple[int, str, str] | None:
        """While it runs: (bytes received so far, stdout tail, stderr tail), for the live
        view of a running attempt; None once it has ended or if it never started."""
        if self._done.done() or len(self._tails) != 2:
            return None
        out, err = self._tails
        return out.fed + err.fed, out.text()[0], err.text()[0]

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
            await asyncio.shield(self._killer)
        await asyncio.shield(self._exited)

    def set_kill_by(self, kill_by: float) -> None:  # after a lease renewal
        if self.keeper is not None and self.pid is not None and not self._exited.done():
            self.keeper.register(self.pid, kill_by, self.child_id, self._cgroup_dirs(), moved=True)

    def _cgroup_dirs(self) -> tuple[str, ...]:
        return () if self.cgroup is None else self.cgroup.dirs

    def _start(self) -> None:
        if self._spawn():
            self._track()

    def _spawn(self) -> bool:
        """Start the process, which nothing watches yet (`_track` does); False if it could not
        start (its result is set then)."""
        spec = self.spec
        env = {**spec.env, CHILD_ID_ENV: self.child_id}
        if spec.cgroup is not None:
            try:
                self.cgroup = ChildCgroup.create(
                    spec.cgroup, self.child_id[:16], spec.cgroup_limits
                )
            except OSError as exc:
                error = f"cannot create the run's cgroup: {exc}"
                self._done.set_result(ChildResult.not_started(error))
                return False
        if self.keeper is not None:
            env[INSTANCE_ENV] = self.keeper.instance_id
            announced = spec.announced != "" and self.cgroup is None
            if (spec.kill_by is not None and not announced) or self.cgroup is not None:
                self.keeper.announce(self.child_id, spec.kill_by or 0.0, self._cgroup_dirs())
        try:
            proc = start_process(
                spec.argv,
                env,
                spec.cwd,
                user=spec.user,
                group=spec.group,
                extra_groups=spec.extra_groups,
                umask=spec.umask,
                limits=spec.limits,
                cgroup=self.cgroup,
                stdin=spec.stdin,
            )
        except (OSError, ValueError) as exc:
            if self.keeper is not None:
                self.keeper.unregister(0, self.child_id)
            if self.cgroup is not None:
                self.cgroup.remove()
            error = spawn_error_text(spec.argv, spec.cwd, exc)
            self._done.set_result(ChildResult.not_started(error))
            return False
        self._popen, self.pid = proc.popen, proc.pid
        self._pipes = (proc.stdout, proc.stderr)
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
        self._tails = [Tail(out, spec.output_limit), Tail(err, spec.output_limit)]
        if spec.timeout is not None and spec.timeout <= _WATCH_AFTER:
            self._arm_timeout(spec.timeout)
        watch = _watch(self._loop)
        watch.add(self)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError:  # no pidfds (kernel < 5.3, some seccomp profiles): poll instead
            self._helper = self._loop.create_task(self._poll_exit())
        else:
            watch.watch_exit(self._pidfd, self)

    def _abandon(self, exc: Exception) -> None:
        """Tracking a started process failed (a bug, or no memory for an epoll entry): kill
        it, and end as not started, so the attempt fails and is retried."""
        self._loop.call_exception_handler({"message": "tracking a child failed", "exception": exc})
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        if not self._tails:
            for fd in self._pipes:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if not self._done.done():
            self._done.set_result(ChildResult.not_started(f"could not watch the child: {exc!r}"))

    def _grown(self) -> None:
        """It has run for _WATCH_AFTER: read its output as it comes (and the live tail with
        it), and arm its timeout."""
        if self._exited.done():
            return
        for tail in self._tails:
            self._watch(tail)
        if self._timer is None and self.spec.timeout is not None:
            self._arm_timeout(self.spec.timeout)

    def _arm_timeout(self, timeout: float) -> None:
        error = f"timed out after {timeout:g}s"
        self._timer = self._loop.call_at(
            self.started_monotonic + timeout, self._request_stop, ChildEnd.TIMED_OUT, error, None
        )

    def _watch(self, tail: Tail) -> None:
        if not tail.watched and not tail.closed:
            tail.watched = True
            self._loop.add_reader(tail.fd, self._on_readable, tail)

    def _drain(self, tail: Tail) -> None:
        """At exit: read what the pipe holds; close it at EOF, else watch it (a descendant
        still holds it open, or writes on)."""
        if tail.closed or tail.watched:
            return
        for _ in range(_DRAIN_READS):
            try:
                data = os.read(tail.fd, _READ_SIZE)
            except BlockingIOError:
                self._watch(tail)
                return
            except OSError:
                data = b""
            if not data:
                self._close_stream(tail)
                return
            tail.feed(data)
        self._watch(tail)  # a descendant writes on as fast as we read: take turns

    def _on_readable(self, tail: Tail) -> None:
        try:
            data = os.read(tail.fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            tail.feed(data)
            return
        self._close_stream(tail)
        if self._settling and all(t.closed for t in self._tails):
            self._finish()

    def _close_stream(self, tail: Tail) -> None:
        if not tail.closed:
            if tail.watched:
                self._loop.remove_reader(tail.fd)
            tail.close()

    def _reap(self) -> None:
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
            _watch(self._loop).forget_exit(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for tail in self._tails:
            self._drain(tail)
        self._exited.set_result(None)
        if self._wake is not None:
            self._wake.set()
        if self._killer is not None:
            return  # it settles once it has killed what is left
        if self.cgroup is not None:
            if not self.cgroup.populated():  # the usual case: nothing left in the cgroup
                self._group_gone = True
                self._settle()
                return
        else:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:  # the usual case: nothing left in the group
                self._group_gone = True
                self._settle()
                return
            except PermissionError:
                pass
        grace = min(_LEFTOVER_GRACE, max(self.spec.kill_grace, 0.0))
        self._deadline = time.monotonic() + grace
        self._helper = self._loop.create_task(self._terminate())

    async def _poll_exit(self) -> None:
        delay = 0.001
        while not self._exited.done():
            self._reap()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _request_stop(self, outcome: ChildEnd, error: str, grace: float | None) -> None:
        grace = self.spec.kill_grace if grace is None else grace
        deadline = time.monotonic() + max(grace, 0.0)
        if self._stop is None:
            if self._exited.done():
                return
            self._stop, self._deadline = (outcome, error), deadline
            self._killer = self._loop.create_task(self._terminate())
        elif deadline < self._deadline:  # a more urgent request shortens the grace
            self._deadline = deadline
            if self._wake is not None:
                self._wake.set()

    async def _terminate(self) -> None:
        """TERM the group, allow it until self._deadline, then KILL it (and on kill() or
        timeout, every escaped descendant); used too for what a handler leaves behind."""
        # A kill with (almost) no grace left, a lease running out, signals before the snapshot:
        # it reads every process's /proc entry in a thread, which took seconds on a loaded host
        # with hundreds of kills queued (a child outlived its lease: test_fleet_faults). Strays
        # are still found by their CHILD_ID_ENV mark, and reparented ones by the orphan sweep.
        if self._deadline - time.monotonic() < _HURRIED and not self._exited.done():
            urgent = self._deadline <= time.monotonic()
            self._signal_group(signal.SIGKILL if urgent else signal.SIGTERM)
        # Snapshot first: once the child dies, its children are reparented and the tree is lost.
        snapshot: list[tree.Descendant] = []
        if not self._exited.done() and self.pid is not None and self.cgroup is None:
            snapshot = await asyncio.to_thread(tree.descendants, self.pid)
        if self._deadline > time.monotonic():
            self._signal_group(signal.SIGTERM)
        if not await self._await_group_gone():
            self._signal_group(signal.SIGKILL)
            if self.cgroup is not None:  # dying members keep it busy: wait before rmdir
                self._deadline = time.monotonic() + _CGROUP_EMPTY_WAIT
                await self._await_group_gone()
        if self._stop is not None and self.cgroup is None:
            await asyncio.to_thread(tree.kill_strays, CHILD_ID_ENV, self.child_id, snapshot)
        await asyncio.shield(self._exited)
        self._settle()

    def _settle(self) -> None:
        """The tree is gone; finish once the pipes close, or deal with whoever holds them."""
        self._settling = True
        if all(t.closed for t in self._tails):
            self._finish()
        else:
            self._timer = self._loop.call_later(_PIPE_LINGER, self._on_pipes_held)

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
        for tail in self._tails:
            self._close_stream(tail)
        if self.cgroup is not None:
            self._usage, self._oom_kills = self.cgroup.usage(), self.cgroup.oom_kills()
            if left := self.cgroup.remove():
                log_event(
                    _log, "cgroup_not_removed", level=logging.WARNING, child_id=self.child_id,
                    dirs=left,
                )  # fmt: skip
        if self.keeper is not None and self.pid is not None:
            self.keeper.unregister(self.pid, self.child_id)
        if self.orphans is not None and self.pid is not None:
            self.orphans.finished(self.pid)  # kills what daemonised and was adopted by us
        result = self._result()
        self._done.set_result(result)
        if (callback := self._on_done) is not None:
            self._on_done = None
            try:
                callback(result)
            except Exception as exc:  # the child is settled; report it as the loop would
                self._loop.call_exception_handler(
                    {"message": "a child's when_done callback failed", "exception": exc}
                )

    async def _await_group_gone(self) -> bool:
        """Wait until nothing alive is left in the group, or self._deadline passes."""
        poll = 0.005
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            self._wake.clear()
            if not await self._group_alive():
                return True
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                return False
            # While the direct child lives its exit wakes us; afterwards we must poll.
            wait = remaining if not self._exited.done() else min(poll, remaining)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            poll = min(poll * 2, _POLL_MAX)

    async def _group_alive(self) -> bool:
        if not self._exited.done():
            return True
        if not self._group_gone and self.cgroup is not None:
            self._group_gone = not self.cgroup.populated()
        elif not self._group_gone:
            assert self.pid is not None
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                self._group_gone = True
            except PermissionError:
                return True
            else:  # killpg also counts zombies, which a PID 1 that never wait()s leaves around
                self._group_gone = not await asyncio.to_thread(
                    tree.group_has_live_members, self.pid
                )
        return not self._group_gone

    def _signal_group(self, sig: int) -> None:
        # Once the leader is reaped and the group empty, the pgid may belong to someone else.
        if self._group_gone or self.pid is None:
            return
        if self.cgroup is not None:
            self.cgroup.signal(sig)  # every member, wherever it went; KILL: the cgroup's kill
            if self._exited.done():
                return  # the pgid may have been reused already
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _oom_error(self) -> str:
        limit = self.spec.cgroup_limits.memory_max
        peak = self._usage[1]
        text = "killed by the kernel: memory limit"
        text += f" {mib(limit)} reached" if limit is not None else " reached"
        return text + (f" (peak {mib(peak)})" if peak is not None else "")

    def _join_failed(self) -> bool:
        return any(t.text()[0].startswith(JOIN_FAILED_TEXT) for t in self._tails[1:])

    def _result(self) -> ChildResult:
        code = sig = None
        if self._status is not None:
            rc = os.waitstatus_to_exitcode(self._status)
            code, sig = (None, -rc) if rc < 0 else (rc, None)
        error: str | None
        if self._stop is not None:
            outcome, error = self._stop
        elif self._status is None:
            outcome, error = ChildEnd.FAILED, "exit status lost: the child was reaped elsewhere"
        elif (sig is not None or code) and self._oom_kills:
            # It (or a descendant it depended on) was killed for the run's memory limit.
            outcome, error = ChildEnd.OOM_KILLED, self._oom_error()
        elif sig is not None:
            outcome, error = ChildEnd.FAILED, f"killed by signal {sig} ({tree.signal_name(sig)})"
        elif code == JOIN_FAILED and self.cgroup is not None and self._join_failed():
            outcome, error = ChildEnd.SPAWN_FAILED, JOIN_FAILED_TEXT
        elif code:
            outcome, error = ChildEnd.FAILED, f"exited with status {code}"
        else:
            outcome, error = ChildEnd.SUCCEEDED, None
        (out, out_replaced), (err, err_replaced) = (tail.text() for tail in self._tails)
        cpu = rss = None
        if (usage := self._rusage) is not None:
            cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024
            if _inherited_peak(rss):
                rss = None
        if self.cgroup is not None:  # the whole tree's, not only the direct child's
            cg_cpu, cg_peak = self._usage
            cpu = cg_cpu if cg_cpu is not None else cpu
            rss = cg_peak if cg_peak is not None else rss
        return ChildResult(
            outcome,
            code,
            sig,
            error,
            out,
            err,
            cpu,
            rss,
            self._ended - self.started_monotonic,
            out_replaced,
            err_replaced,
        )
