"""A small base for background services: `run_once()` on an interval, `wake()`, `stop()`.

A loop stops between iterations (an event), so a transaction is never cut in half; task
cancellation is the crash path only. Database errors are logged and retried with backoff:
a service never dies because PostgreSQL went away for a while.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass

from supervisor.core.db import DB_ERRORS
from supervisor.core.log import log_event

# Between a service's passes while it has nothing to do: a duty this host does not hold (it is
# woken when it takes one: Duties.on_gained), or no child to watch (woken by the next start).
# An idle host in a fleet of hundreds wakes about once a second, not eight times: each
# wake-up costs its Python process about 0.3 ms of CPU, and on a host shared by many
# processes (bench/fleet.py) that was a fleet's drain's tenth.
GATED_EVERY = 30.0
IDLE_EVERY = 5.0


@dataclass(frozen=True)
class Pass:
    """What one `run_once()` did; each service extends it with its own counts, which tests
    assert on. `next_in`: seconds until the next pass, None for the service's interval."""

    next_in: float | None = None


class Loop(ABC):
    """Calls `run_once()` every `interval` seconds (±jitter), or sooner after `wake()`."""

    name = "loop"

    def __init__(self, interval: float, jitter: float = 0.1, max_backoff: float = 5.0) -> None:
        self.interval = interval
        self.jitter = jitter
        self.max_backoff = max_backoff
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.errors = 0
        self.resting = False  # sleeping IDLE_EVERY for want of work: rouse() wakes it
        self.log = logging.getLogger(f"punchclock.{self.name}")

    @abstractmethod
    async def run_once(self) -> Pass:
        """Do one iteration and say what it did (and when the next is due)."""

    def jittered_interval(self) -> float:
        """The interval, ± its jitter: the usual gap between passes."""
        return self.interval * (1 + random.uniform(-self.jitter, self.jitter))

    def wake(self) -> None:
        self._wake.set()

    def rouse(self) -> None:
        """Work arrived (a child started): wake the loop if it rests, not on every start."""
        if self.resting:
            self.resting = False
            self._wake.set()

    def db_error(self, exc: BaseException) -> None:
        """A database error this service rides out: counted (punchclock_db_errors), logged."""
        self.errors += 1
        log_event(self.log, "db_error", level=logging.WARNING, service=self.name, error=repr(exc))

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                delay = (await self.run_once()).next_in
                backoff = 0.05
            except DB_ERRORS as exc:
                self.db_error(exc)
                delay = backoff
                backoff = min(backoff * 2, self.max_backoff)
            if delay is None:
                delay = self.jittered_interval()
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        if delay <= 0 or self._stopping.is_set():
            self._wake.clear()
            return
        try:
            async with asyncio.timeout(delay):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()
