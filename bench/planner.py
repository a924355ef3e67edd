"""Planner scale: N cron jobs with mixed expressions and zones, planned from empty.

For 10,000 and 100,000 jobs: the time 1 and 2 supervisors take to plan the first horizon
(from the first batch's start to the last batch's commit, from their `planned` log lines),
and the cost of a planner tick when nothing needs planning (Planner.run_once in this
process, p50/p99). The baseline is the pure computation (planning.plan_job for every job,
no database) measured here in the same run. The planner computes less than that: a batch's
jobs of one schedule share its walk (planning.FireTimes); that computation, in batches as
the planner picks them, is reported beside it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench.common import Context, Proc, ScenarioResult, start_supervisors, summary
from supervisor.core.db import create_pool
from supervisor.core.domain import Job
from supervisor.core.planning import FireTimes, PlanLimits, plan_job
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store
from supervisor.local.plumbing import wait_until
from supervisor.planner import BATCH as PLAN_BATCH
from supervisor.planner import Planner

NAME = "planner"
EXPRESSIONS = [
    "0 * * * *",
    "*/15 * * * *",
    "*/5 * * * *",
    "30 2 * * *",
    "0 6 * * MON-FRI",
    "0 0 1 * *",
    "15 3 * * 0",
    "0 */6 * * *",
    "0 9-17 * * 1-5",
    "@daily",
    "0 12 L * *",
    "* * * * *",
    "30 1 * * *",
    "45 */2 * * *",
    "0 0 * * SAT,SUN",
    "5 4 1,15 * *",
]
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Tokyo",
    "Europe/London",
]
FIRST_PLAN_TARGET_S = 10.0  # 10,000 jobs
FIRST_PLAN_TARGET_RATIO = 2.0  # 100,000 jobs, one planner: at most this many times the computation
NOOP_TICK_TARGET_MS = 20.0  # at 100,000 jobs


async def insert_jobs(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(
        """INSERT INTO jobs (name, type, cron, timezone)
           SELECT 'cron-' || g, 'plan', ($2::text[])[1 + g % cardinality($2::text[])],
                  ($3::text[])[1 + (g / 7) % cardinality($3::text[])]
           FROM generate_series(1, $1::int) g""",
        n,
        EXPRESSIONS,
        ZONES,
    )
    await conn.execute("ANALYZE jobs")


def compute_only(jobs: list[Job]) -> float:
    """Seconds plan_job takes for every job, no database (the baseline)."""
    now = datetime.now(UTC)
    limits = PlanLimits()
    started = time.perf_counter()
    for job in jobs:
        plan_job(job, now, limits)
    return time.perf_counter() - started


def compute_shared(jobs: list[Job], batch: int) -> float:
    """Seconds the same plans take with each batch's walks shared, as the planner plans."""
    now = datetime.now(UTC)
    limits = PlanLimits()
    started = time.perf_counter()
    for i in range(0, len(jobs), batch):
        fire_times = FireTimes(now, limits)
        for job in jobs[i : i + batch]:
            plan_job(job, now, limits, fire_times)
    return time.perf_counter() - started


def planned_span(sups: list[Proc]) -> dict[str, Any]:
    """First batch start to last batch commit, from every supervisor's `planned` lines."""
    starts, ends, per = [], [], {}
    for s in sups:
        events = s.events("planned")
        per[s.name] = {
            "batches": len(events),
            "jobs": sum(e["jobs"] for e in events),
            "runs": sum(e["runs"] for e in events),
        }
        for e in events:
            end = datetime.fromisoformat(e["ts"]).timestamp()
            ends.append(end)
            starts.append(end - e["seconds"])
    return {
        "seconds": max(ends) - min(starts),
        "jobs": sum(p["jobs"] for p in per.values()),
        "runs": sum(p["runs"] for p in per.values()),
        "per_supervisor": per,
    }


async def first_planning(ctx: Context, n: int, planners: int) -> dict[str, Any]:
    async with ctx.dbs.fresh(f"plan{n}x{planners}") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await insert_jobs(conn, n)
            baseline = shared = None
            if planners == 1:
                rows = await conn.fetch("SELECT * FROM jobs ORDER BY plan_after, id")
                jobs = [Job.from_row(r) for r in rows]
                baseline = await asyncio.to_thread(compute_only, jobs)
                shared = await asyncio.to_thread(compute_shared, jobs, PLAN_BATCH)
                del jobs, rows
            sups = await start_supervisors(ctx.procs, planners, dsn=dsn, handlers={})

            async def all_planned() -> bool:
                behind = await conn.fetchval(QUERIES["count_jobs_behind"])
                return bool(behind == 0)

            try:
                await wait_until(all_planned, max(120.0, n / 100), f"{n} jobs planned", 0.2)
                await asyncio.sleep(0.3)  # the last batch's log line
            finally:
                for s in sups:
                    ctx.procs.stop(s)
            span = planned_span(sups)
            span["runs_in_db"] = await conn.fetchval("SELECT count(*) FROM runs")
            span["baseline_compute_seconds"] = baseline
            span["shared_compute_seconds"] = shared
            if planners == 1:
                span["noop_tick_ms"] = await noop_ticks(dsn, 20 if ctx.smoke else 300)
                span["pick_plan"] = await explain_pick(conn)
        finally:
            await conn.close()
    return span


async def noop_ticks(dsn: str, samples: int) -> dict[str, float]:
    """Planner.run_once() when no job needs planning: one short transaction."""
    pool = await create_pool(dsn, min_size=1, max_size=2, generic_plans=True)  # as supervisors
    try:
        planner = Planner(Store(pool), PlanLimits(horizon=timedelta(hours=24)))
        for _ in range(10):  # warm the connection's statement cache
            await planner.run_once()
        out = []
        for _ in range(samples):
            started = time.perf_counter()
            await planner.run_once()
            out.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.005)
    finally:
        await pool.close()
    return summary(out)


async def explain_pick(conn: asyncpg.Connection) -> str:
    async with conn.transaction():
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["pick_jobs_to_plan"].rstrip(";"), 500
        )
    return "\n".join(r[0] for r in rows)


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    sizes = (300,) if ctx.smoke else (10_000, 100_000)
    out: dict[str, Any] = {}
    for n in sizes:
        for planners in (1, 2):
            span = await first_planning(ctx, n, planners)
            out[f"{n}x{planners}"] = span
            ok = None
            target = ""
            if n == 10_000:
                target, ok = f"< {FIRST_PLAN_TARGET_S:g} s", span["seconds"] < FIRST_PLAN_TARGET_S
            elif n == 100_000 and planners == 1:
                ratio = span["seconds"] / out[f"{n}x1"]["baseline_compute_seconds"]
                target = f"<= {FIRST_PLAN_TARGET_RATIO:g}x computation"
                ok = ratio <= FIRST_PLAN_TARGET_RATIO
                res.add(
                    f"{n:,} jobs: computation with shared walks",
                    span["shared_compute_seconds"],
                    "s",
                    baseline=span["baseline_compute_seconds"],
                    note="what the planner computes (FireTimes), against plan_job per job",
                )
            res.add(
                f"{n:,} jobs, {planners} planner{'s' if planners > 1 else ''}: first planning",
                span["seconds"],
                "s",
                target=target,
                ok=ok,
                baseline=out[f"{n}x1"]["baseline_compute_seconds"],
                note=f"{span['runs']:,} runs inserted",
            )
            res.checks[f"{n} jobs x {planners}: every job planned once"] = (
                span["jobs"] == n and span["runs"] == span["runs_in_db"]
            )
        tick = out[f"{n}x1"]["noop_tick_ms"]
        big = n == 100_000
        res.add(f"{n:,} jobs: no-op tick p50", tick["p50"], "ms")
        res.add(
            f"{n:,} jobs: no-op tick p99",
            tick["p99"],
            "ms",
            target=f"< {NOOP_TICK_TARGET_MS:g} ms" if big else "",
            ok=tick["p99"] < NOOP_TICK_TARGET_MS if big else None,
        )
    res.details = out
    return res
