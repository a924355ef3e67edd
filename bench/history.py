"""A long history: 10,000,000 runs over 1,000 jobs (bench.api's generator).

In one run: claim throughput (2 supervisors drain N due runs of /bin/true) in an empty
database and in the 10-million-run one, their ratio; p50/p99 of every `GET /v1/runs` list
case of bench/api.py and of a `GET /metrics` scrape on the big history; and retention: the
pruner deletes the runs past a retention that leaves the oldest ~9 % (about 900,000 runs)
past it in its 500-run batches while another drain runs beside it, reporting the longest
batch (the longest transaction), the deletion rate, the drain's ratio to the undisturbed
one, and whether `runs` kept its file (no rewrite).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from bench import api
from bench.common import Context, ScenarioResult, api_url, summary
from bench.throughput import drain_in
from supervisor.core.db import create_pool
from supervisor.core.store import Store
from supervisor.pruner import Pruner

NAME = "history"
# The supervisors' own pruner keeps the generated history (KEEP_SHARE is measured alone).
KEEP_ALL = {"PUNCHCLOCK_RETENTION_SUCCEEDED_DAYS": "100000",
            "PUNCHCLOCK_RETENTION_FAILED_DAYS": "100000"}  # fmt: skip
CLAIM_RATIO_TARGET = 0.9  # claim throughput within 10 % of an empty table
LIST_P99_TARGET_MS = 20.0
# The generator writes one run per job per hour back from now (10,000 per job: ~417 days);
# keeping 91 % of that span leaves the oldest ~9 % past retention.
KEEP_SHARE = 0.91


async def prune_all(dsn: str, keep_days: float) -> dict[str, Any]:
    """The pruner's passes until nothing is past retention: one transaction per pass."""
    pool = await create_pool(dsn, min_size=1, max_size=2, generic_plans=True)
    try:
        pruner = Pruner(Store(pool), keep_succeeded_days=keep_days, keep_failed_days=keep_days)
        passes: list[float] = []
        started = time.perf_counter()
        while True:
            t = time.perf_counter()
            done = await pruner.run_once()
            passes.append((time.perf_counter() - t) * 1000)
            if done.pruned < pruner.batch:
                break
        seconds = time.perf_counter() - started
    finally:
        await pool.close()
    return {"pruned": pruner.pruned, "seconds": seconds, "pass_ms": summary(passes)}


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n_runs, n_jobs = (100_000, 100) if ctx.smoke else (10_000_000, 1_000)
    drained = 500 if ctx.smoke else 10_000
    rounds, warmup = (10, 5) if ctx.smoke else (100, 10)
    out: dict[str, Any] = {}
    async with ctx.dbs.fresh("hist0") as dsn:
        out["drain_empty"] = await drain_in(ctx, dsn, drained, "empty", env=KEEP_ALL)
    async with ctx.dbs.fresh("hist") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            started = time.perf_counter()
            await api.generate(conn, n_runs, n_jobs)
            out["generate_seconds"] = time.perf_counter() - started
            out["runs"] = await conn.fetchval("SELECT count(*) FROM runs")
            out["drain_history"] = await drain_in(ctx, dsn, drained, "full", env=KEEP_ALL)
            cs = await api.cases(conn, n_jobs)
            api_proc = ctx.procs.api(dsn)
            try:
                lat = await api.latencies(await api_url(api_proc), cs, rounds, warmup)
            finally:
                ctx.procs.stop(api_proc)
            file_before = await conn.fetchval("SELECT pg_relation_filenode('runs')")
            keep_days = KEEP_SHARE * (n_runs // n_jobs) / 24
            pruning = asyncio.ensure_future(prune_all(dsn, keep_days))
            out["drain_pruning"] = await drain_in(ctx, dsn, drained, "pruning", env=KEEP_ALL)
            out["prune"] = await pruning
            out["rewritten"] = file_before != await conn.fetchval(
                "SELECT pg_relation_filenode('runs')"
            )
        finally:
            await conn.close()
    empty, full = out["drain_empty"]["runs_per_s"], out["drain_history"]["runs_per_s"]
    res.add(f"claim throughput, {n_runs:,} runs of history", full, "runs/s",
            target=f">= {CLAIM_RATIO_TARGET:g}x empty", ok=full >= CLAIM_RATIO_TARGET * empty,
            baseline=empty, note="baseline: the same drain in an empty database")  # fmt: skip
    healthz = summary(lat.pop("baseline: GET /healthz"))
    lat.pop("POST /v1/jobs", None)
    scrape = summary(lat.pop(api.SCRAPE))
    for p in ("p50", "p99"):
        res.add(f"{api.SCRAPE} (database gauges) at {n_runs:,}: {p}", scrape[p], "ms",
                baseline=healthz[p])  # fmt: skip
    for name, values in lat.items():
        s = summary(values)
        res.add(f"GET /v1/runs {name} at {n_runs:,}: p99", s["p99"], "ms",
                target=f"<= {LIST_P99_TARGET_MS:g} ms", ok=s["p99"] <= LIST_P99_TARGET_MS,
                baseline=healthz["p99"])  # fmt: skip
    prune = out["prune"]
    res.add("retention: longest pruning transaction", prune["pass_ms"]["max"], "ms",
            note=f"{prune['pruned']:,} runs in {prune['seconds']:.1f} s")  # fmt: skip
    res.add("retention: runs deleted per second", prune["pruned"] / prune["seconds"], "runs/s")
    pruning = out["drain_pruning"]["runs_per_s"]
    res.add("claim throughput while pruning", pruning, "runs/s", baseline=full,
            note="baseline: the drain in the same history before pruning")  # fmt: skip
    res.checks["retention rewrote no table (runs kept its file)"] = not out["rewritten"]
    for key in ("drain_empty", "drain_history", "drain_pruning"):
        res.checks[f"exactly once: {key}"] = bool(out[key]["exactly_once"])
    out["latency_ms"] = {k: summary(v) for k, v in lat.items()}
    res.details = out
    return res
