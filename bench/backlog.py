"""A backlog of a type nobody offers: its hosts are down (or a large backfill waits for
them) while the other types' runs go on.

In one database: the claim of 8 due runs of an offered type (the claim statement as a
supervisor sends it, in a transaction rolled back each time, p50 of many) and a 2-supervisor
drain of N /bin/true runs, first with no backlog, then behind B older due runs of a type no
supervisor offers. Ratios to the same figure without the backlog, same run. Before the
per-type claim (migration 0012) each claim walked the backlog in run_after order.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from bench.common import Context, ScenarioResult, summary
from bench.throughput import drain_in
from supervisor.core.db import create_pool
from supervisor.core.sql import QUERIES

NAME = "backlog"
PROBE_TYPE = "probe"  # due runs the claim probe takes (and gives back)
UNSERVED_TYPE = "unserved"


async def _insert_due(conn: asyncpg.Connection, type_: str, n: int, age_s: float) -> None:
    """`n` manual runs of one job of `type_`, due `age_s` seconds ago and older."""
    job_id = await conn.fetchval(
        """INSERT INTO jobs (name, type, run_at, planned_until, plan_after)
           VALUES ($1, $1, now() + interval '1 year', now() + interval '1 year', 'infinity')
           RETURNING id""",
        type_,
    )
    await conn.execute(
        """INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts)
           SELECT $1, now() - make_interval(secs => $3 + g / 1000.0),
                  now() - make_interval(secs => $3 + g / 1000.0), 'manual', $2, 3
           FROM generate_series(1, $4::int) g""",
        job_id, type_, age_s, n,
    )  # fmt: skip
    await conn.execute("ANALYZE jobs, runs")


async def claim_ms(dsn: str, samples: int) -> dict[str, float]:
    """p50/p99 of one claim of 8 probe runs, rolled back: as a supervisor's session plans it."""
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        async with pool.acquire() as conn:
            out = []
            for i in range(samples + 10):
                tx = conn.transaction()
                await tx.start()
                started = time.perf_counter()
                rows = await conn.fetch(
                    QUERIES["claim_runs"], [PROBE_TYPE], 8, "bench", 30.0, None, 0.0, 60.0
                )
                elapsed = (time.perf_counter() - started) * 1000
                await tx.rollback()
                assert len(rows) == 8, len(rows)
                if i >= 10:  # the first executions plan and warm the cache
                    out.append(elapsed)
    finally:
        await pool.close()
    return summary(out)


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n, backlog, samples = (300, 2_000, 20) if ctx.smoke else (10_000, 50_000, 200)
    out: dict[str, Any] = {}
    async with ctx.dbs.fresh("backlog") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await _insert_due(conn, PROBE_TYPE, 100, 1.0)
            out["claim_before"] = await claim_ms(dsn, samples)
            out["before"] = await drain_in(ctx, dsn, n, "before")
            # Older than every other run, and than the drains' misfire grace (3,600 s): the catch-up
            # pass reads them too.
            await _insert_due(conn, UNSERVED_TYPE, backlog, 7200.0)
            out["claim_behind"] = await claim_ms(dsn, samples)
            out["behind"] = await drain_in(ctx, dsn, n, "behind")
        finally:
            await conn.close()
    before, behind = out["claim_before"]["p50"], out["claim_behind"]["p50"]
    what = f"behind {backlog:,} unserved due runs"
    res.add(f"claim of 8 {what}: p50", behind, "ms", baseline=before)
    rate, base = out["behind"]["runs_per_s"], out["before"]["runs_per_s"]
    res.add(f"{n:,}-run drain {what}", rate, "runs/s", baseline=base)
    for key in ("before", "behind"):
        res.checks[f"exactly once: {key}"] = bool(out[key]["exactly_once"])
    res.details = out
    return res
