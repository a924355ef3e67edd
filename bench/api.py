"""API latency over a large history: N runs generated with SQL over J jobs.

p50/p99 of GET /v1/runs, first page and a deep page (a cursor far into the history), for
no filter and filters by job, by status and by date range; and of POST /v1/jobs (a cron job,
planned in the same transaction). Requests are sequential from one client and interleaved
across the cases so noise hits every case alike. The baseline is GET /healthz on the same
process (the HTTP stack, no database). Each list query's generic plan (what a prepared
statement settles on) is recorded with EXPLAIN ANALYZE.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import asyncpg

from api import cursor
from bench.common import (
    AUTH,
    Context,
    ScenarioResult,
    api_url,
    interleaved,
    settle,
    summary,
    timed_request,
)
from supervisor.core import runs as run_ops
from supervisor.core.runs import RunFilters
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

NAME = "api"
LIST_P99_TARGET_MS = 20.0
PAGE = 100  # the API's default page size


async def generate(conn: asyncpg.Connection, n_runs: int, n_jobs: int) -> None:
    """n_jobs hourly jobs, each with n_runs/n_jobs hourly runs ending two hours from now.

    Statuses: 90% succeeded, 5% dead (3% of the last day failed instead, their retry due in
    an hour), 3% skipped, 1% cancelled, ~1% other succeeded; runs after now are scheduled.
    No run is due: a history is what has happened, not a backlog. Written out (`settle`)
    before it returns, so the bulk load is not flushed during a measurement in it.
    """
    per_job = n_runs // n_jobs
    # Committed durably before the VACUUM below: an asynchronous commit (the throwaway
    # clusters' synchronous_commit=off) is not yet flushed when VACUUM reads its rows, so
    # VACUUM can neither set their hint bits nor mark a page all-visible, and every
    # index-only scan of the history then read the heap (the overview's open counts: 61 ms
    # p50 instead of 3 on PostgreSQL 18, until a later VACUUM).
    await conn.execute("SET synchronous_commit = on")
    # The same history every time: a random one could lack what a check looks for (the smoke
    # size's 200 jobs had no job whose last run was dead about once in 50 runs).
    await conn.execute("SELECT setseed(0.5)")
    first = await conn.fetchval("SELECT coalesce(max(id), 0) + 1 FROM jobs")
    await conn.execute(
        """INSERT INTO jobs (name, type, cron, timezone, planned_until, plan_after)
           SELECT 'job-' || g, 'noop', (g % 60) || ' * * * *', 'UTC',
                  now() + interval '1 day', 'infinity'
           FROM generate_series(1, $1::int) g""",
        n_jobs,
    )
    # In slices of about a million rows: one statement of ten million holds a transaction
    # (and its WAL) for minutes.
    step = max(1, 1_000_000 // max(per_job, 1))
    for lo in range(first, first + n_jobs, step):
        await _generate_runs(conn, per_job, lo, min(lo + step, first + n_jobs) - 1)
    await conn.execute("VACUUM ANALYZE jobs")
    await conn.execute("VACUUM ANALYZE runs")
    await settle(conn)


async def _generate_runs(conn: asyncpg.Connection, per_job: int, lo: int, hi: int) -> None:
    await conn.execute(
        """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status,
                             attempts, lease_token, started_at, finished_at, last_error,
                             skip_reason)
           SELECT j.id, t.at,
                  CASE WHEN s.st = 'failed' THEN now() + interval '1 hour' ELSE t.at END,
                  'noop', 3, s.st, s.att, s.att, s.started, s.finished, s.err, s.skip
           FROM jobs j
           CROSS JOIN generate_series(-2, $1::int - 3) h
           CROSS JOIN LATERAL (
               SELECT date_trunc('hour', now()) - make_interval(hours => h)
                      + make_interval(mins => (j.id % 60)::int) AS at,
                      random() AS r) t
           CROSS JOIN LATERAL (
               SELECT st, CASE WHEN st IN ('scheduled', 'skipped') THEN 0 ELSE 1 END AS att,
                      CASE WHEN st IN ('scheduled', 'skipped') THEN NULL
                           ELSE t.at + interval '10 ms' END AS started,
                      CASE WHEN st IN ('scheduled', 'failed') THEN NULL
                           ELSE t.at + interval '1.5 s' END AS finished,
                      CASE WHEN st IN ('failed', 'dead') THEN 'exited with status 1' END AS err,
                      CASE WHEN st = 'skipped' THEN 'missed' END AS skip
               FROM (SELECT CASE
                   WHEN t.at > now() THEN 'scheduled'
                   WHEN t.r < 0.90 THEN 'succeeded'
                   WHEN t.r < 0.93 THEN CASE WHEN h < 24 THEN 'failed' ELSE 'dead' END
                   WHEN t.r < 0.95 THEN 'dead'
                   WHEN t.r < 0.98 THEN 'skipped'
                   WHEN t.r < 0.99 THEN 'cancelled'
                   ELSE 'succeeded' END::run_status AS st) x
           ) s
           WHERE j.id BETWEEN $2::bigint AND $3::bigint""",
        per_job,
        lo,
        hi,
    )


def _iso(ts: datetime) -> str:
    return ts.isoformat()


async def cases(conn: asyncpg.Connection, n_jobs: int) -> dict[str, dict[str, Any]]:
    """name -> {"params", "filters", "before"}: first and deep page of each filter."""
    job_id = n_jobs // 2
    span = await conn.fetchrow("SELECT min(scheduled_at) AS a, max(scheduled_at) AS b FROM runs")
    assert span is not None
    oldest, newest = span["a"], span["b"]
    middle = oldest + (newest - oldest) / 2  # a day in the middle of the history
    day_from = middle.replace(minute=0, second=0, microsecond=0)
    day_to = day_from + timedelta(days=1)

    async def key_at(where: str, offset: int, *args: Any) -> tuple[datetime, int]:
        row = await conn.fetchrow(
            f"SELECT scheduled_at, id FROM runs WHERE {where} "
            f"ORDER BY scheduled_at DESC, id DESC OFFSET {offset} LIMIT 1",
            *args,
        )
        assert row is not None, where
        return row["scheduled_at"], row["id"]

    total = await conn.fetchval("SELECT count(*) FROM runs")
    per_job = await conn.fetchval("SELECT count(*) FROM runs WHERE job_id = $1", job_id)
    dead = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'dead'")
    in_day = await conn.fetchval(
        "SELECT count(*) FROM runs WHERE scheduled_at >= $1 AND scheduled_at < $2",
        day_from,
        day_to,
    )
    specs: list[tuple[str, RunFilters, dict[str, str], str, tuple[Any, ...], int]] = [
        ("all", RunFilters(), {}, "true", (), total),
        ("by job", RunFilters(job_id=job_id), {"job_id": str(job_id)}, "job_id = $1",
         (job_id,), per_job),
        ("by status", RunFilters(statuses=("dead",)), {"status": "dead"},
         "status = 'dead'", (), dead),
        ("by date range",
         RunFilters(scheduled_after=day_from, scheduled_before=day_to),
         {"scheduled_after": _iso(day_from), "scheduled_before": _iso(day_to)},
         "scheduled_at >= $1 AND scheduled_at < $2", (day_from, day_to), in_day),
    ]  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for label, filters, params, where, args, count in specs:
        fhash = cursor.filters_hash("runs", filters.canonical())
        out[f"{label}, first page"] = {
            "params": params,
            "filters": filters,
            "before": None,
            "rows_in": 0,
            "matching": count,
        }
        deep = max(0, int(count * 0.9) - 1)  # 90% of the way down the filtered history
        at, run_id = await key_at(where, deep, *args)
        token = cursor.encode(cursor.run_key(at, run_id), fhash)
        out[f"{label}, deep page"] = {
            "params": {**params, "cursor": token},
            "filters": filters,
            "before": (at, run_id),
            "rows_in": deep,
            "matching": count,
        }
    return out


class Explainer:
    """Stands in for a connection under Store: EXPLAIN ANALYZEs each query's generic plan
    (force_generic_plan, as a prepared statement settles on), then runs it."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.plans: list[tuple[str, str]] = []

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        name = next((k for k, v in QUERIES.items() if v == sql), "?")
        literals = ", ".join(_literal(a) for a in args)
        stmt = f"bench_q{len(self.plans)}"
        async with self.conn.transaction():
            await self.conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await self.conn.execute(f"PREPARE {stmt} AS {sql.rstrip(';')}")
            rows = await self.conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {stmt}({literals})")
        await self.conn.execute(f"DEALLOCATE {stmt}")
        self.plans.append((name, "\n".join(r[0] for r in rows)))
        return await self.conn.fetch(sql, *args)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):  # an untyped array literal: the cast in the query types it
        items = ",".join(str(v) if isinstance(v, int) else '"' + str(v) + '"' for v in value)
        return "'{" + items + "}'"
    return "'" + str(value).replace("'", "''") + "'"


async def explain(conn: asyncpg.Connection, case: dict[str, Any]) -> list[tuple[str, str]]:
    ex = Explainer(conn)
    before = case["before"] or run_ops.FIRST_PAGE
    await run_ops.list_runs(Store(ex), case["filters"], before, PAGE + 1)  # type: ignore[arg-type]
    return ex.plans


def indexes_used(plan: str) -> list[str]:
    found = []
    for line in plan.splitlines():
        if " using " in line and " on runs" in line:
            found.append(line.split(" using ", 1)[1].split()[0])
        elif "Bitmap Index Scan on " in line:
            found.append(line.split("Bitmap Index Scan on ", 1)[1].split()[0])
        elif "Seq Scan on runs" in line:
            found.append("SEQ SCAN")
    return sorted(set(found))


# A Prometheus scrape of the API: the database-wide gauges (reported, no target: what
# matters is that it does not grow with the history; the history scenario shows it at 10M).
SCRAPE = "GET /metrics"


def ok(status: int) -> bool:
    return status < 300


async def latencies(
    base: str, cases_: dict[str, dict[str, Any]], rounds: int, warmup: int
) -> dict[str, list[float]]:
    names = [*cases_, "POST /v1/jobs", SCRAPE, "baseline: GET /healthz"]
    async with aiohttp.ClientSession(headers=AUTH) as http:

        async def request(name: str, i: int) -> float:
            if name == "POST /v1/jobs":
                body = {
                    "name": f"bench-post-{i}",
                    "type": "noop",
                    "cron": "*/5 * * * *",
                    "timezone": "Europe/Berlin",
                }
                return await timed_request(http, "POST", base + "/v1/jobs", ok, json=body)
            if name == "baseline: GET /healthz":
                return await timed_request(http, "GET", base + "/healthz", ok)
            if name == SCRAPE:
                return await timed_request(http, "GET", base + "/metrics", ok)
            params = cases_[name]["params"]
            return await timed_request(http, "GET", base + "/v1/runs", ok, params=params)

        return await interleaved(names, rounds, warmup, 3, request)


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n_runs, n_jobs = (20_000, 100) if ctx.smoke else (1_000_000, 1_000)
    rounds, warmup = (10, 5) if ctx.smoke else (300, 30)
    async with ctx.dbs.fresh("api") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            started = time.perf_counter()
            await generate(conn, n_runs, n_jobs)
            res.details["generate_seconds"] = time.perf_counter() - started
            res.details["runs"] = await conn.fetchval("SELECT count(*) FROM runs")
            cs = await cases(conn, n_jobs)
            api_proc = ctx.procs.api(dsn)
            base = await api_url(api_proc)
            try:
                lat = await latencies(base, cs, rounds, warmup)
            finally:
                ctx.procs.stop(api_proc)
            plans = {name: await explain(conn, case) for name, case in cs.items()}
        finally:
            await conn.close()
    healthz = summary(lat.pop("baseline: GET /healthz"))
    res.details["baseline_healthz_ms"] = healthz
    res.details["latency_ms"] = {k: summary(v) for k, v in lat.items()}
    res.details["cases"] = {
        k: {"query": v["params"], "rows_in": v["rows_in"], "matching": v["matching"]}
        for k, v in cs.items()
    }
    res.details["plans"] = {k: [{"query": q, "plan": p} for q, p in v] for k, v in plans.items()}
    for name, values in lat.items():
        s = summary(values)
        is_list = name not in ("POST /v1/jobs", SCRAPE)
        label = f"GET /v1/runs {name}" if is_list else name
        res.add(f"{label}: p50", s["p50"], "ms", baseline=healthz["p50"])
        res.add(
            f"{label}: p99",
            s["p99"],
            "ms",
            target=f"<= {LIST_P99_TARGET_MS:g} ms" if is_list else "",
            ok=s["p99"] <= LIST_P99_TARGET_MS if is_list else None,
            baseline=healthz["p99"],
        )
    for name, found in plans.items():
        used = sorted({i for _, p in found for i in indexes_used(p)})
        res.details.setdefault("indexes", {})[name] = used
        res.checks[f"{name}: served by an index ({', '.join(used)})"] = bool(used) and (
            "SEQ SCAN" not in used
        )
    return res
