"""Database-side helpers for e2e tests: create due runs, read runs and attempt history."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from supervisor.core import jobs
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

from ..helpers import job
from .procs import Execution

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
            job_ids.append((await jobs.create_job(tx, fields, LIMITS)).id)
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


def execution_problems(
    executions: list[Execution],
    history: list[asyncpg.Record],
    alive_until: Callable[[Execution], int],
) -> list[str]:
    """What the handlers' own stamps (and a pid monitor) contradict in the attempt rows.

    - no two executions of one run overlap: each starts after the one before it was last
      known alive (`alive_until`, a lower bound of its death, so no false alarms);
    - an execution is one attempt: a (run, attempt) executes at most once, under the lease
      token its attempt row carries;
    - a completed execution (it stamped its end, then exited 0) is recorded `succeeded` or
      `lease_lost` (its result came too late), nothing else;
    - an attempt given back as never started really never started;
    - every `succeeded` attempt is an execution that completed.
    """
    problems = []
    by_run: dict[int, list[Execution]] = {}
    for e in executions:
        by_run.setdefault(e.run_id, []).append(e)
    for run_id, execs in by_run.items():
        execs.sort(key=lambda e: e.start_ns)
        for i, earlier in enumerate(execs):
            for later in execs[i + 1 :]:
                overlap = alive_until(earlier) - later.start_ns
                if overlap > 0:
                    problems.append(
                        f"run {run_id}: attempt {later.attempt} (pid {later.pid}) started"
                        f" {overlap / 1e6:.1f} ms before attempt {earlier.attempt}"
                        f" (pid {earlier.pid}, supervisor pid {earlier.ppid}) was last seen alive"
                    )
        attempts_seen = Counter(e.attempt for e in execs)
        problems += [
            f"run {run_id}: attempt {a} executed {n} times"
            for a, n in attempts_seen.items()
            if n > 1
        ]
    rows = {(a["run_id"], a["attempt"]): a for a in history}
    done = {(e.run_id, e.attempt): e for e in executions}
    for key, e in done.items():
        row = rows.get(key)
        if row is None:
            problems.append(f"run {key[0]} attempt {key[1]}: executed, but no attempt row")
            continue
        if row["lease_token"] != e.lease_token:
            problems.append(f"{_name(row)}: executed under token {e.lease_token}")
        if e.end_ns is not None and row["outcome"] not in ("succeeded", "lease_lost"):
            problems.append(
                f"{_name(row)}: its handler completed, but it is recorded as {row['outcome']}"
                f" ({row['error']!r}, worker {row['worker_id']})"
            )
    for key, row in rows.items():
        ran = done.get(key)
        unstarted = row["outcome"] == "interrupted" and "unstarted" in (row["error"] or "")
        if unstarted and ran is not None:
            state = "completed" if ran.end_ns is not None else "started"
            problems.append(f"{_name(row)}: recorded {row['error']!r}, but its handler {state}")
        if row["outcome"] == "succeeded" and (ran is None or ran.end_ns is None):
            problems.append(f"{_name(row)}: recorded succeeded without a completed execution")
    return problems


def _name(row: asyncpg.Record) -> str:
    return f"run {row['run_id']} attempt {row['attempt']}"
