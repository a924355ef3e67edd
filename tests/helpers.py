"""Small shared helpers for tests: job fields, waiting on conditions with a deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from supervisor.jobs import DEFAULTS

DEADLINE = 30.0


def job(name: str, type: str = "echo", **kw: Any) -> dict[str, Any]:
    fields = dict(DEFAULTS)
    fields.update(name=name, type=type)
    if "cron" not in kw and "run_at" not in kw:
        kw["cron"] = "* * * * *"
    fields.update(kw)
    return fields


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
