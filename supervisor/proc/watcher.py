"""The process watcher: what watches every child of one owner (who makes one and passes it
to each child it starts), so that a child costs the event loop little of its own.

The young (their first WATCH_AFTER seconds), in start order, behind one timer: most exit
within it and so never cost a timer of their own (a timer and its cancellation each, for the
output watch and the timeout, were a tenth of the runner's Python calls per child). Their
pidfds, in an epoll set of its own that the loop watches as one reader: adding a child is one
epoll_ctl and forgetting it another, and the exits found at one wake-up are reaped together
(the loop's add_reader and remove_reader cost 6.3 µs per child against 0.8).
"""

from __future__ import annotations

import asyncio
import select
import time
from collections import deque
from typing import Protocol

# A child still running this long gets its output pipes watched (before, a chatty one may
# wait up to this long on a full 64 KiB pipe); one that exits sooner is read at exit.
WATCH_AFTER = 0.025
_YOUNG_SLACK = 0.001  # a timer may run this early (the loop's clock resolution)


class Watched(Protocol):
    """A child as the watcher sees it (runner.Child)."""

    @property
    def started_monotonic(self) -> float: ...

    def grown(self) -> None:
        """It has run for WATCH_AFTER (called only if it has not exited by then)."""

    def reap(self) -> None:
        """Its pidfd is readable: it has exited."""


class Watcher:
    """Watches children's youth and exits, on the event loop that starts the first of them.

    watch(child, pidfd): the child's first WATCH_AFTER seconds under the shared timer (then
    child.grown()), and its exit through the shared epoll set (child.reap() once its pidfd is
    readable; pidfd -1: it has none, and polls). forget(pidfd): before the pidfd is closed.
    close(): stop watching (nothing is left to watch; the watcher cannot be used again).
    """

    def __init__(self) -> None:
        self._young: deque[Watched] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._epoll: select.epoll | None = None
        self._exiting: dict[int, Watched] = {}  # pidfd -> its child

    def watch(self, child: Watched, pidfd: int) -> None:
        loop = self._loop
        if loop is None:
            loop = self._bind()
        self._young.append(child)
        if self._timer is None:
            self._timer = loop.call_at(child.started_monotonic + WATCH_AFTER, self._grow)
        if pidfd >= 0:
            assert self._epoll is not None
            self._epoll.register(pidfd, select.EPOLLIN)
            self._exiting[pidfd] = child

    def forget(self, pidfd: int) -> None:
        """Before the pidfd is closed (its number may be reused at once)."""
        del self._exiting[pidfd]
        assert self._epoll is not None
        self._epoll.unregister(pidfd)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._epoll is not None and self._loop is not None:
            if not self._loop.is_closed():
                self._loop.remove_reader(self._epoll.fileno())
            self._epoll.close()
        self._young.clear()
        self._exiting.clear()

    def _bind(self) -> asyncio.AbstractEventLoop:
        """At the first child: the running loop watches the epoll set from now on."""
        loop = self._loop = asyncio.get_running_loop()
        self._epoll = select.epoll()
        loop.add_reader(self._epoll.fileno(), self._reap_exited)
        return loop

    def _grow(self) -> None:
        self._timer = None
        young = self._young
        until = time.monotonic() - WATCH_AFTER + _YOUNG_SLACK  # the loop's clock
        while young:
            if young[0].started_monotonic > until:
                assert self._loop is not None
                self._timer = self._loop.call_at(
                    young[0].started_monotonic + WATCH_AFTER, self._grow
                )
                return
            young.popleft().grown()

    def _reap_exited(self) -> None:
        assert self._epoll is not None and self._loop is not None
        for pidfd, _ in self._epoll.poll(0, 64):  # level-triggered: the rest come next time
            child = self._exiting.get(pidfd)
            if child is None:
                continue
            try:
                child.reap()
            except Exception as exc:  # as the loop reports a failed reader callback
                self._loop.call_exception_handler(
                    {"message": "reaping a child failed", "exception": exc}
                )
