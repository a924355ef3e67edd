"""Database-side helpers for e2e tests: create due runs, read runs and attempt history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg

from supervisor import jobs
from supervisor.planning import PlanLimits
from supervisor.store import Store

from ..helpers import job

LIMITS = PlanLimits()


async def create_runs(
    store: Store, type_: str, n: int, payload: dict[str, Any], prefix: str | None = None, **kw: Any
) -> list[int]:
    """`n` one-off jobs of `type_` due now, committed (and announced) in one transaction.

    Supervisors see all of them at once, so none gets a head start on part of the batch.
    """
    prefix = prefix or type_
    async with store.transaction() as tx:
        now = await tx.now()
        job_ids = []
        for i in range(n):
            fields = job(f"{prefix}-{i}", type_, cron=None, run_at=now, payload=payload, **kw)
            job_ids.append((await jobs.create_job(tx, fields, LIMITS))["id"])
        rows = await tx._ex.fetch(
            "SELECT id FROM runs WHERE job_id = ANY($1::bigint[]) ORDER BY id", job_ids
        )
    assert len(rows) == n
    return [r["id"] for r in rows]


async def runs(store: Store, ids: list[int]) -> dict[int, asyncpg.Record]:
    rows = await store._ex.fetch("SELECT * FROM runs WHERE id = ANY($1::bigint[])", ids)
    return {r["id"]: r for r in rows}


async def statuses(store: Store, ids: list[int]) -> dict[str, int]:
    rows = await store._ex.fetch(
        "SELECT status::text, count(*) FROM runs WHERE id = ANY($1::bigint[]) GROUP BY 1", ids
    )
    return {r["status"]: r["count"] for r in rows}


async def all_in(store: Store, ids: list[int], *wanted: str) -> bool:
    got = await statuses(store, ids)
    return sum(got.get(s, 0) for s in wanted) == len(ids)


async def attempts(store: Store, run_id: int) -> list[asyncpg.Record]:
    return await store._ex.fetch(
        "SELECT *, outcome::text AS outcome FROM run_attempts WHERE run_id = $1 ORDER BY attempt",
        run_id,
    )


async def all_attempts(store: Store, ids: list[int]) -> list[asyncpg.Record]:
    return await store._ex.fetch(
        "SELECT *, outcome::text AS outcome FROM run_attempts"
        " WHERE run_id = ANY($1::bigint[]) ORDER BY run_id, attempt",
        ids,
    )


def read_lines(path: Path) -> list[dict[str, int]]:
    """The handlers' `run_id,lease_token,attempt,start_ns,end_ns,pid` lines."""
    if not path.exists():
        return []
    keys = ("run_id", "lease_token", "attempt", "start_ns", "end_ns", "pid")
    out = []
    for line in path.read_text().splitlines():
        values = [int(v) for v in line.split(",")]
        assert len(values) == len(keys), line
        out.append(dict(zip(keys, values, strict=True)))
    return out


async def status_is(store: Store, run_id: int, status: str) -> bool:
    row = await store._ex.fetchrow("SELECT status::text FROM runs WHERE id = $1", run_id)
    return row is not None and row["status"] == status
