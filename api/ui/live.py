"""A run page's live stream (server-sent events): one poller per run, shared by everyone
watching it, and a cap on streams per session and per process.

A RunPoller reads the run once per LIVE_POLL (a few queries) for all its viewers and stops with
the last of them, or once the run is final; each viewer renders what its role may see
(`view`, pages_runs.py). A stream ends after LIVE_FOR (the browser reconnects). A session
with PER_SESSION streams open, or a process with PER_PROCESS, gets 429 for another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from aiohttp_sse import sse_response

from api.ui.guard import Refused, session
from supervisor.core import runs
from supervisor.core.log import log_event
from supervisor.core.model import FINAL
from supervisor.core.records import Attempt, Run
from supervisor.core.store import Store

log = logging.getLogger("punchclock.ui")
PER_SESSION = 4  # live streams one dashboard session may hold open
PER_PROCESS = 64  # in all, for this API process (each holds a connection, not a query)
LIVE_POLL = 1.0  # seconds between a run's polls, whoever watches it
LIVE_FOR = 600.0  # a stream's longest life


@dataclass(frozen=True)
class RunState:
    """What a poll read: the same for every viewer (a view may hide part of it)."""

    run: Run
    attempts: list[Attempt]
    now: datetime
    waiting_for: str | None

    @property
    def live(self) -> bool:
        return str(self.run.status) not in FINAL

    @property
    def version(self) -> tuple[Any, ...]:
        """Changes when the page would: the elapsed time moves every second while it runs."""
        run = self.run
        running = str(run.status) == "running"
        tick = self.now.replace(microsecond=0) if running else None
        return (run.status, run.attempts, run.finished_at, len(self.attempts), tick)


async def fetch_run(store: Store, run_id: int) -> RunState:
    run, attempts = await runs.run_detail(store, run_id)
    return RunState(run, list(attempts), await store.now(), await runs.waiting_for(store, run))


class RunPoller:
    """Polls one run until it is final or stopped; viewers iterate `updates`."""

    def __init__(self, fetch: Callable[[], Awaitable[RunState]], every: float) -> None:
        self._fetch, self.every = fetch, every
        self.state: RunState | None = None
        self.seq = 0  # bumped with each new state
        self.viewers = 0
        self.done = False
        self._changed = asyncio.Event()
        self._poked = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while True:
                state = await self._fetch()
                if self.state is None or state.version != self.state.version:
                    self.state, self.seq = state, self.seq + 1
                    self._wake()
                if not state.live:
                    return
                with contextlib.suppress(TimeoutError):  # the interval, or a poke
                    async with asyncio.timeout(self.every):
                        await self._poked.wait()
                self._poked.clear()
        except Exception as exc:  # the run deleted, the database gone: every stream ends
            log_event(log, "live_poll_failed", level=logging.WARNING, error=repr(exc))
        finally:
            self.done = True
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def updates(self, until: float) -> AsyncGenerator[RunState, None]:
        """Each new state (the current one first), until the poller ends or `until`."""
        seen = 0
        while True:
            if self.seq != seen and self.state is not None:
                seen = self.seq
                yield self.state
                continue
            if self.done:
                return
            changed = self._changed
            try:
                async with asyncio.timeout(until - time.monotonic()):
                    await changed.wait()
            except TimeoutError:
                return

    def poke(self) -> None:
        """Poll now rather than at the end of the interval."""
        self._poked.set()

    def stop(self) -> None:
        self._task.cancel()


class Hub:
    """The process's live streams: their pollers by run, and the counts the caps check."""

    def __init__(
        self,
        store: Store,
        *,
        per_session: int = PER_SESSION,
        per_process: int = PER_PROCESS,
        every: float = LIVE_POLL,
        live_for: float = LIVE_FOR,
    ) -> None:
        self.store = store
        self.per_session, self.per_process = per_session, per_process
        self.every, self.live_for = every, live_for
        self.pollers: dict[int, RunPoller] = {}
        self.by_session: Counter[str] = Counter()
        self.open = 0
        self.polls = 0  # fetches by every poller: what the database sees
        self.pollers_started = 0

    @contextlib.contextmanager
    def watching(self, sid: str, run_id: int) -> Iterator[RunPoller]:
        if self.by_session[sid] >= self.per_session:
            raise Refused(
                429,
                f"Too many live run pages: a session may follow {self.per_session} at once. "
                "Close another run's page (or reload this one later).",
            )
        if self.open >= self.per_process:
            raise Refused(
                429,
                f"Too many live run pages on this server ({self.per_process} at once); "
                "reload this page later.",
            )
        self.by_session[sid] += 1
        self.open += 1
        poller = self.pollers.get(run_id)
        if poller is None:
            poller = self.pollers[run_id] = RunPoller(lambda: self._fetch(run_id), self.every)
            self.pollers_started += 1
        poller.viewers += 1
        try:
            yield poller
        finally:
            poller.viewers -= 1
            if poller.viewers == 0:
                poller.stop()
                del self.pollers[run_id]
            self.open -= 1
            self.by_session[sid] -= 1
            if not self.by_session[sid]:
                del self.by_session[sid]

    async def _fetch(self, run_id: int) -> RunState:
        self.polls += 1
        return await fetch_run(self.store, run_id)


HUB = web.AppKey("ui_live_hub", Hub)


async def stream(
    request: web.Request, run_id: int, view: Callable[[RunState], str]
) -> web.StreamResponse:
    """The run's live part, `view(state)` for this viewer, whenever it changes, then `done`
    once the run is final."""
    hub = request.app[HUB]
    # A viewer who closed the page ends its stream: not an error.
    with (
        hub.watching(session(request).sid, run_id) as poller,
        contextlib.suppress(ConnectionResetError),
    ):
        async with sse_response(request, ping_interval=15) as sse:
            updates = poller.updates(time.monotonic() + hub.live_for)
            async with contextlib.aclosing(updates):
                async for state in updates:
                    await sse.send(view(state), event="run")
                    if not state.live:
                        await sse.send("final", event="done")
                        break
    return sse
