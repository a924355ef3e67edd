"""Small shared helpers for tests: job specs, an empty database, and `wait_for` (a condition
with a deadline: supervisor.local.plumbing.wait_until, which bench uses too)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from supervisor.core.domain import JobSpec, cron_schedule
from supervisor.core.model import Catchup, Overlap
from supervisor.core.schedule import OneOffSchedule, load_zone
from supervisor.local.pgchain import with_database
from supervisor.local.plumbing import wait_until as wait_for

__all__ = ["drop_database", "fresh_database", "job", "wait_for"]


async def fresh_database(admin_dsn: str, name: str) -> str:
    """An empty database `name` (dropped first if left over); its DSN."""
    await _on_admin(admin_dsn, _drop(name), f'CREATE DATABASE "{name}"')
    return with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop `fresh_database`'s database `name`, with any session still on it."""
    await _on_admin(admin_dsn, _drop(name))


def _drop(name: str) -> str:
    return f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'


async def _on_admin(admin_dsn: str, *statements: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        for sql in statements:
            await admin.execute(sql)
    finally:
        await admin.close()


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
