"""What other hosts leave in the tables: a backlog of a type nobody offers (its hosts are
down, or a large backfill waits for them), and a crowd of runs running on other hosts.

In one database, with supervisors' sessions (generic plans): the claim of 8 due runs of an
offered type, and the renewal and completion of 8 runs this host holds (each in a
transaction rolled back, p50 of many), and a 2-supervisor drain of N /bin/true runs. First
with neither; then behind B older due runs of a type no supervisor offers; then beside R
runs running on other hosts too. Ratios to the same figure without them, same run.

Before the per-type claim (migration 0012) each claim walked the backlog in run_after
order; before completions and renewals went by primary key only, each scanned every
running run of every host.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from bench.common import Context, ScenarioResult, summary
from bench.throughput import drain_in
from supervisor.claimer import CATCHUP_WINDOW
from supervisor.core.db import create_pool
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.runpath import Completion
from supervisor.core.store import Store

NAME = "backlog"
PROBE_TYPE = "probe"  # due runs the probes take (and give back)
UNSERVED_TYPE = "unserved"
OWNER = "bench-probe"


class _Rollback(Exception):
    pass


async def _insert_due(
    conn: asyncpg.Connection, type_: str, n: int, age_s: float, *, apart: float = 0.001
) -> None:
    """`n` manual runs of one job of `type_`, scheduled `age_s` seconds ago and older, a
    millisecond apart, and due `apart` seconds apart (0: all at one instant, as runs given
    back together are, by a reaper pass or a drained host)."""
    job_id = await conn.fetchval(
        """INSERT INTO jobs (name, type, run_at, planned_until, plan_after)
           VALUES ($1, $1, now() + interval '1 year', now() + interval '1 year', 'infinity')
           RETURNING id""",
        type_,
    )
    await conn.execute(
        """INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts)
           SELECT $1, now() - make_interval(secs => $3 + g / 1000.0),
                  now() - make_interval(secs => $3 + g * $5::float8), 'manual', $2, 3
           FROM generate_series(1, $4::int) g""",
        job_id, type_, age_s, n, apart,
    )  # fmt: skip
    await conn.execute("ANALYZE jobs, runs")


async def _insert_running(conn: asyncpg.Connection, n: int) -> None:
    """`n` runs running on other hosts, leased for a day, one per job, with their attempts."""
    await conn.execute("ANALYZE jobs, runs, run_attempts")
    await conn.execute(
        """WITH j AS (
               INSERT INTO jobs (name, type, run_at, planned_until, plan_after)
               SELECT 'elsewhere-' || g, 'elsewhere', now() + interval '1 year',
                      now() + interval '1 year', 'infinity'
               FROM generate_series(1, $1::int) g RETURNING id
           ), r AS (
               INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts,
                                 status, attempts, lease_owner, lease_token, lease_expires_at,
                                 started_at)
               SELECT id, now(), now(), 'manual', 'elsewhere', 3, 'running', 1,
                      'elsewhere-' || (id % 20), 1, now() + interval '1 day', now()
               FROM j RETURNING id, lease_owner
           )
           INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token)
           SELECT id, 1, lease_owner, 1 FROM r""",
        n,
    )
    # No ANALYZE: the statistics are from before they started, as after a quiet night
    # (autovacuum analyzes a big table only every 10 % of changes); the drain after the
    # probes analyzes, as a busy day's autovacuum would.


async def probe_ms(dsn: str, samples: int) -> dict[str, dict[str, float]]:
    """p50/p99 of a catch-up pass (the claimer's, once a second), a claim of 8 probe runs,
    their renewal and their completion, in one transaction rolled back each time, on a pool
    set up as a supervisor's."""
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    out: dict[str, list[float]] = {"catch-up": [], "claim": [], "renew": [], "complete": []}
    try:
        store = Store(pool)
        for i in range(samples + 10):  # the first executions plan and warm the cache
            took: dict[str, float] = {}
            try:
                async with store.transaction() as tx:
                    t = time.perf_counter()
                    await tx.skip_missed_runs(3600.0, CATCHUP_WINDOW)
                    took["catch-up"] = time.perf_counter() - t
                    t = time.perf_counter()
                    claims = await tx.claim_runs([PROBE_TYPE], 8, OWNER, 30.0)
                    took["claim"] = time.perf_counter() - t
                    assert len(claims) == 8, len(claims)
                    t = time.perf_counter()
                    renewed = await tx.renew_leases(
                        [(c.id, c.lease_token) for c in claims], OWNER, 30.0
                    )
                    took["renew"] = time.perf_counter() - t
                    done = [
                        Completion(c.id, c.lease_token, RunStatus.SUCCEEDED, 0.0,
                                   Outcome.SUCCEEDED, exit_code=0)
                        for c in claims
                    ]  # fmt: skip
                    t = time.perf_counter()
                    recorded = await tx.complete_runs(done, OWNER)
                    took["complete"] = time.perf_counter() - t
                    assert len(renewed) == len(recorded) == 8
                    raise _Rollback
            except _Rollback:
                pass
            if i >= 10:
                for key, seconds in took.items():
                    out[key].append(seconds * 1000)
    finally:
        await pool.close()
    return {key: summary(values) for key, values in out.items()}


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    smoke = ctx.smoke
    n, backlog, running, samples = (
        (300, 2_000, 1_000, 20) if smoke else (10_000, 50_000, 20_000, 200)
    )
    out: dict[str, Any] = {}
    async with ctx.dbs.fresh("backlog") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await _insert_due(conn, PROBE_TYPE, 100, 1.0)
            out["probe_clear"] = await probe_ms(dsn, samples)
            out["clear"] = await drain_in(ctx, dsn, n, "clear")
            # Older than every other run, and than the drains' misfire grace (3,600 s): the
            # catch-up pass reads them too. All due at one instant: ties in run_after, which
            # its (run_after, id) window must not sort whole on every pass (migration 0017).
            await _insert_due(conn, UNSERVED_TYPE, backlog, 7200.0, apart=0.0)
            out["probe_backlog"] = await probe_ms(dsn, samples)
            out["backlog"] = await drain_in(ctx, dsn, n, "backlog")
            await _insert_running(conn, running)
            out["probe_crowd"] = await probe_ms(dsn, samples)
            out["crowd"] = await drain_in(ctx, dsn, n, "crowd")
        finally:
            await conn.close()
    clear = out["probe_clear"]
    behind = f"behind {backlog:,} unserved runs due at one instant"
    beside = f"beside {running:,} running elsewhere"
    res.add(f"claim of 8 {behind}: p50", out["probe_backlog"]["claim"]["p50"], "ms",
            baseline=clear["claim"]["p50"])  # fmt: skip
    res.add(f"catch-up pass {behind}: p50", out["probe_backlog"]["catch-up"]["p50"], "ms",
            baseline=clear["catch-up"]["p50"])  # fmt: skip
    res.add(f"{n:,}-run drain {behind}", out["backlog"]["runs_per_s"], "runs/s",
            baseline=out["clear"]["runs_per_s"])  # fmt: skip
    for op in ("claim", "renew", "complete"):
        res.add(f"{op} of 8 {beside} (and {behind}): p50", out["probe_crowd"][op]["p50"],
                "ms", baseline=clear[op]["p50"])  # fmt: skip
    res.add(f"{n:,}-run drain {beside} (and {behind})", out["crowd"]["runs_per_s"], "runs/s",
            baseline=out["clear"]["runs_per_s"])  # fmt: skip
    for key in ("clear", "backlog", "crowd"):
        res.checks[f"exactly once: {key}"] = bool(out[key]["exactly_once"])
    res.details = out
    return res
