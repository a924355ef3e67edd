"""Small shared helpers for tests: job specs, waiting on conditions with a deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from supervisor.core.domain import JobSpec, cron_schedule
from supervisor.core.model import Catchup, Overlap
from supervisor.core.schedule import OneOffSchedule, load_zone

DEADLINE = 30.0


def job(
    name: str,
    type: str = "echo",
    *,
    cron: str | None = "* * * * *",
    run_at: datetime | None = None,
    timezone: str = "UTC",
    **kw: Any,
) -> JobSpec:
    """A JobSpec with the API's defaults, not validated (tests may go past the API's bounds).

    Every minute unless `run_at` is given (then `cron` must be None); `kw` are JobSpec fields,
    catchup and overlap as strings or enums.
    """
    if run_at is not None:
        assert cron is None, "give cron=None with run_at"
        sched: Any = OneOffSchedule(run_at, load_zone(timezone))
    else:
        assert cron is not None
        sched = cron_schedule(cron, timezone)
    for key, enum in (("catchup", Catchup), ("overlap", Overlap)):
        if key in kw:
            kw[key] = enum(kw[key])
    return JobSpec(name=name, type=type, schedule=sched, **kw)


async def wait_for(
    predicate: Callable[[], Awaitable[Any] | Any],
    timeout: float = DEADLINE,
    what: str = "condition",
) -> Any:
    """Poll a predicate (async or plain) every 20 ms until it is truthy; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
