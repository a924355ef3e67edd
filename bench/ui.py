"""Dashboard latency over a large history: 1,000,000 runs over 10,000 jobs (bench/api.py's
generator), every page and fragment of /ui/ requested in turn from one client, against
GET /healthz on the same process, logged in with the bench's admin token. Target (issue 13):
p99 <= 50 ms for each.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import asyncpg

from bench.api import generate, indexes_used
from bench.common import (
    Context,
    ScenarioResult,
    api_url,
    dashboard_session,
    interleaved,
    summary,
    timed_request,
)
from supervisor.core.sql import QUERIES

NAME = "ui"
P99_TARGET_MS = 50.0
# Text each page must hold (pages() adds the ones that name its rows): a page that answers
# 200 but shows nothing would otherwise be timed as fast.
MARKERS: dict[str, str] = {
    "overview": "succeeded, last 24 h",
    "jobs by name": "job-",
    "jobs by next run": "job-",
    "jobs failing (fragment)": "job-",
    "job preview (fragment)": "UTC",
    "runs history": "job-",
    "runs dead": "dead",
    "runs upcoming": "scheduled",
    "workers": "Workers",
    "job new (form)": 'name="cron"',
    "runs requeue count (dead)": 'id="requeue-count"',
}


async def pages(conn: asyncpg.Connection, n_jobs: int) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (path, headers): every page and fragment, on rows in the middle of the data.
    MARKERS says what each must contain (checked once before the timing)."""
    job_id = n_jobs // 2
    run_id = await conn.fetchval(
        "SELECT id FROM runs WHERE job_id = $1 AND status = 'succeeded' ORDER BY id LIMIT 1",
        job_id,
    )
    fragment = {"HX-Request": "true", "HX-Target": "jobs-table"}
    now = await conn.fetchval("SELECT date_trunc('second', now())")
    window = urlencode({"from": (now - timedelta(days=2)).isoformat(), "to": now.isoformat()})
    MARKERS.update(
        {
            "job edit (form)": f'value="job-{job_id}"',
            "job pause (form)": 'name="reason"',
            "job backfill count": "no run.",
            "runs requeue count (job)": 'id="requeue-count"',
            "job detail": f"job-{job_id}",
            "run detail": f"#{run_id}",
            "runs of a job": f"job-{job_id}<",
            "jobs search (fragment)": f"job-{job_id // 10}",
        }
    )
    return {
        "overview": ("/ui/", {}),
        "jobs by name": ("/ui/jobs", {}),
        "jobs by next run": ("/ui/jobs?sort=next", {}),
        "jobs search (fragment)": (f"/ui/jobs?q=job-{job_id // 10}", fragment),
        "jobs failing (fragment)": ("/ui/jobs?last=dead", fragment),
        "job detail": (f"/ui/jobs/{job_id}", {}),
        "job preview (fragment)": (
            "/ui/jobs/preview?cron=30+2+*+*+*&timezone=Europe%2FBerlin",
            {"HX-Request": "true"},
        ),
        "runs history": ("/ui/runs", {}),
        "runs dead": ("/ui/runs?status=dead", {}),
        "runs upcoming": ("/ui/runs?tab=upcoming", {}),
        "runs of a job": (f"/ui/runs?job=job-{job_id}", {}),
        "run detail": (f"/ui/runs/{run_id}", {}),
        "workers": ("/ui/workers", {}),
        "job new (form)": ("/ui/jobs/new", {}),
        "job edit (form)": (f"/ui/jobs/{job_id}/edit", {}),
        "job pause (form)": (f"/ui/jobs/{job_id}/pause", {}),
        "job backfill count": (f"/ui/jobs/{job_id}/backfill?{window}", {}),
        "runs requeue count (dead)": ("/ui/runs/requeue?status=dead", {}),
        "runs requeue count (job)": (f"/ui/runs/requeue?status=dead&job=job-{job_id}", {}),
    }


# The overview's queries with arguments as the page passes them (EXPLAIN ANALYZE of each
# generic plan is recorded; ui_fill_hours writes, so all of it runs in a rolled-back
# transaction).
OVERVIEW_QUERIES = {
    "ui_open_counts": "",
    "ui_status_counts": "86400",
    "ui_outcome_buckets": "3600, 60",
    "ui_lateness": "3600, 5000",
    "ui_fill_hours": "6",
    "ui_week_hours": "",
    "ui_unserved_jobs": "20",
    "late_runs": "60, 20",
}


async def overview_plans(conn: asyncpg.Connection) -> dict[str, dict[str, Any]]:
    """query -> {"indexes": on runs, "plan": text} of each overview query's generic plan."""
    out: dict[str, dict[str, Any]] = {}
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for n, (name, args) in enumerate(OVERVIEW_QUERIES.items()):
            await conn.execute(f"PREPARE ov{n} AS {QUERIES[name].rstrip().rstrip(';')}")
            call = f"ov{n}({args})" if args else f"ov{n}"
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {call}")
            plan = "\n".join(r[0] for r in rows)
            out[name] = {"indexes": indexes_used(plan), "plan": plan}
    finally:
        await tx.rollback()
    return out


async def contents(base: str, cases: dict[str, tuple[str, dict[str, str]]]) -> dict[str, bool]:
    out = {}
    async with dashboard_session(base) as http:
        for name, (path, headers) in cases.items():
            async with http.get(base + path, headers=headers, allow_redirects=False) as resp:
                out[name] = resp.status == 200 and MARKERS.get(name, "") in await resp.text()
    return out


async def latencies(
    base: str, cases: dict[str, tuple[str, dict[str, str]]], rounds: int, warmup: int
) -> dict[str, list[float]]:
    async with dashboard_session(base) as http:

        async def request(name: str, _round: int) -> float:
            path, headers = cases.get(name, ("/healthz", {}))
            url = base + path
            kw = {"headers": headers, "allow_redirects": False}
            return await timed_request(http, "GET", url, lambda s: s == 200, **kw)

        return await interleaved([*cases, "baseline: GET /healthz"], rounds, warmup, 5, request)


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n_runs, n_jobs = (20_000, 200) if ctx.smoke else (1_000_000, 10_000)
    rounds, warmup = (5, 2) if ctx.smoke else (200, 20)
    async with ctx.dbs.fresh("ui") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            started = time.perf_counter()
            await generate(conn, n_runs, n_jobs)
            res.details["generate_seconds"] = time.perf_counter() - started
            res.details["runs"] = await conn.fetchval("SELECT count(*) FROM runs")
            res.details["jobs"] = n_jobs
            cases = await pages(conn, n_jobs)
            plans = await overview_plans(conn)
            res.details["overview_plans"] = plans
            for name, p in plans.items():
                res.checks[f"overview query {name}: no scan of runs"] = (
                    "SEQ SCAN" not in p["indexes"]
                )
        finally:
            await conn.close()
        api_proc = ctx.procs.api(dsn)
        try:
            base = await api_url(api_proc)
            for name, ok in (await contents(base, cases)).items():
                res.checks[f"{name}: shows {MARKERS.get(name, '')!r}"] = ok
            lat = await latencies(base, cases, rounds, warmup)
        finally:
            ctx.procs.stop(api_proc)
    healthz = summary(lat.pop("baseline: GET /healthz"))
    res.details["baseline_healthz_ms"] = healthz
    res.details["latency_ms"] = {k: summary(v) for k, v in lat.items()}
    res.details["pages"] = {k: v[0] for k, v in cases.items()}
    for name, values in lat.items():
        s: dict[str, Any] = summary(values)
        res.add(f"{name}: p50", s["p50"], "ms", baseline=healthz["p50"])
        res.add(
            f"{name}: p99",
            s["p99"],
            "ms",
            target=f"<= {P99_TARGET_MS:g} ms",
            ok=s["p99"] <= P99_TARGET_MS,
            baseline=healthz["p99"],
        )
    return res
