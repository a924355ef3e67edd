"""Figures too costly to read on every page view, kept by each API process: the first
reader waits for them; after that a value older than `max_age` is served at once while one
refresh runs behind it. A refresh that fails (the database is away) keeps the old value and
the next reader tries again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from supervisor.core.dashboard import Dashboard
from supervisor.core.db import DB_ERRORS

T = TypeVar("T")


class Snapshot(Generic[T]):
    def __init__(self, take: Callable[[Dashboard], Awaitable[T]], max_age: float) -> None:
        self.take = take
        self.max_age = max_age
        self.value: T | None = None
        self.taken = 0.0  # monotonic
        self._refresh: asyncio.Task[None] | None = None

    async def get(self, d: Dashboard) -> T:
        if self.value is None:
            await self._take(d)
        elif time.monotonic() - self.taken > self.max_age and not self.refreshing:
            self._refresh = asyncio.get_running_loop().create_task(self._take_quietly(d))
        assert self.value is not None
        return self.value

    @property
    def refreshing(self) -> bool:
        return self._refresh is not None and not self._refresh.done()

    async def _take(self, d: Dashboard) -> None:
        value = await self.take(d)
        self.value, self.taken = value, time.monotonic()

    async def _take_quietly(self, d: Dashboard) -> None:
        with contextlib.suppress(*DB_ERRORS):
            await self._take(d)
