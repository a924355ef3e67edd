"""Killing a child's tree: TERM, a grace, then KILL, whether the child is still running (kill(),
its timeout) or has exited and left processes behind in its group or cgroup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

from supervisor.proc import tree
from supervisor.proc.cgchild import ChildCgroup
from supervisor.proc.keeperd import CHILD_ID_ENV

_POLL_MAX = 0.1
# A kill whose grace ends sooner than this signals before it looks for descendants.
_HURRIED = 0.5
_CGROUP_EMPTY_WAIT = 5.0  # after the cgroup's kill, how long its members may take to go


class TreeKill:
    """One kill of one child's tree, from its start until the tree is gone: TERM the group
    (or every member of the cgroup), allow it until `deadline`, then KILL it (the cgroup's
    kill); with `hunt` (kill() or the timeout, not leftovers), every descendant that left
    the group too. `then` is called once all is gone and the child is reaped (`exited`)."""

    def __init__(
        self,
        pid: int,
        cgroup: ChildCgroup | None,
        child_id: str,
        exited: asyncio.Future[None],
        deadline: float,
        *,
        hunt: bool,
        then: Callable[[], None],
    ) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.child_id = child_id
        self.deadline = deadline
        self._exited = exited
        self._hunt = hunt
        self._then = then
        self._wake: asyncio.Event | None = None  # made when it waits
        self._gone = False  # the group (or cgroup) is empty: its pgid may be someone else's
        # A strong reference: the event loop keeps only weak ones to tasks.
        self.task = exited.get_loop().create_task(self._run())

    def hurry(self, deadline: float) -> None:
        """A more urgent request shortens the grace."""
        if deadline < self.deadline:
            self.deadline = deadline
            if self._wake is not None:
                self._wake.set()

    def child_exited(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        # A kill with (almost) no grace left (a deadline running out) signals before the snapshot:
        # it reads every process's /proc entry in a thread, which took seconds on a loaded host
        # with hundreds of kills queued (a child outlived its deadline: test_fleet_faults). Strays
        # are still found by their CHILD_ID_ENV mark, and reparented ones by the orphan sweep.
        if self.deadline - time.monotonic() < _HURRIED and not self._exited.done():
            urgent = self.deadline <= time.monotonic()
            self._signal(signal.SIGKILL if urgent else signal.SIGTERM)
        # Snapshot first: once the child dies, its children are reparented and the tree is lost.
        snapshot: list[tree.Descendant] = []
        if not self._exited.done() and self.cgroup is None:
            snapshot = await asyncio.to_thread(tree.descendants, self.pid)
        if self.deadline > time.monotonic():
            self._signal(signal.SIGTERM)
        if not await self._until_gone():
            self._signal(signal.SIGKILL)
            if self.cgroup is not None:  # dying members keep it busy: wait before rmdir
                self.deadline = time.monotonic() + _CGROUP_EMPTY_WAIT
                await self._until_gone()
        if self._hunt and self.cgroup is None:
            await asyncio.to_thread(tree.kill_strays, CHILD_ID_ENV, self.child_id, snapshot)
        await asyncio.shield(self._exited)
        self._then()

    async def _until_gone(self) -> bool:
        """Wait until nothing alive is left in the group, or the deadline passes."""
        poll = 0.005
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            self._wake.clear()
            if not await self._alive():
                return True
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return False
            # While the direct child lives its exit wakes us; afterwards we must poll.
            wait = remaining if not self._exited.done() else min(poll, remaining)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            poll = min(poll * 2, _POLL_MAX)

    async def _alive(self) -> bool:
        if not self._exited.done():
            return True
        if not self._gone and self.cgroup is not None:
            self._gone = not self.cgroup.populated()
        elif not self._gone:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                self._gone = True
            except PermissionError:
                return True
            else:  # killpg also counts zombies, which a PID 1 that never wait()s leaves around
                self._gone = not await asyncio.to_thread(tree.group_has_live_members, self.pid)
        return not self._gone

    def _signal(self, sig: int) -> None:
        # Once the leader is reaped and the group empty, the pgid may belong to someone else.
        if self._gone:
            return
        if self.cgroup is not None:
            self.cgroup.signal(sig)  # every member, wherever it went; KILL: the cgroup's kill
            if self._exited.done():
                return  # the pgid may have been reused already
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
