"""Memory: supervisor RSS idle and while running K children, and API RSS.

RSS of the supervisor process itself (its children and its keeper are separate processes;
the keeper is reported on its own). The baseline is a Python process that only imports the
supervisor's modules and sleeps: what is left above it is what the running services hold.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import asyncpg
import psutil

from bench.common import AUTH, Context, Proc, ScenarioResult, api_url, start_supervisors
from bench.throughput import insert_due_runs
from supervisor.local.plumbing import wait_until

NAME = "memory"
TYPE = "sleep"
IDLE_TARGET_MB = 80.0
MB = 1024 * 1024
IMPORT_ONLY = "import supervisor.app, supervisor.cli, api.app, time; print('ready', flush=True); time.sleep(60)"  # noqa: E501


async def peak_rss(proc: Proc, seconds: float, every: float = 0.1) -> float:
    """The highest RSS (MB) seen over `seconds`."""
    peak = 0
    for _ in range(max(1, int(seconds / every))):
        peak = max(peak, proc.rss())
        await asyncio.sleep(every)
    return peak / MB


def keeper_rss(proc: Proc) -> float | None:
    for child in psutil.Process(proc.pid).children():
        try:
            if "supervisor.proc.keeper" in " ".join(child.cmdline()):
                return float(child.memory_info().rss) / MB
        except psutil.Error:
            continue
    return None


async def import_only_rss(ctx: Context) -> float:
    proc = ctx.procs.python("import-only", ["-c", IMPORT_ONLY])
    try:
        await wait_until(
            lambda: _ready(proc), timeout=30, what="the import-only process", every=0.05
        )
        await asyncio.sleep(0.5)
        return await peak_rss(proc, 0.5)
    finally:
        ctx.procs.stop(proc, timeout=2)


async def _ready(proc: Proc) -> bool:
    return "ready" in proc.log_path.read_text(errors="replace")


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    k = 10 if ctx.smoke else 50
    child_seconds = 3 if ctx.smoke else 6
    out: dict[str, Any] = {}
    baseline = await import_only_rss(ctx)
    out["import_only_mb"] = baseline
    async with ctx.dbs.fresh("mem") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            (sup,) = await start_supervisors(
                ctx.procs,
                1,
                dsn=dsn,
                handlers={TYPE: ["/bin/sleep", str(child_seconds)]},
                concurrency=k,
                extra_args=["--log-runs", "all"],  # run_started says a child is up
            )
            await asyncio.sleep(2.0 if ctx.smoke else 5.0)  # planner, claimer, pools settle
            out["supervisor_idle_mb"] = await peak_rss(sup, 1.0)
            out["keeper_mb"] = keeper_rss(sup)
            await insert_due_runs(conn, k, TYPE, jobs=k)

            async def all_running() -> bool:
                n = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'running'")
                return bool(n == k) and len(sup.events("run_started")) == k

            await wait_until(all_running, 30, f"{k} children running", 0.05)
            out["children_running"] = len(psutil.Process(sup.pid).children()) - 1  # - keeper
            out["supervisor_busy_mb"] = await peak_rss(sup, 1.0)

            async def all_done() -> bool:
                n = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'succeeded'")
                return bool(n == k)

            await wait_until(all_done, 60, f"{k} runs done", 0.1)
            ctx.procs.stop(sup)

            api_proc = ctx.procs.api(dsn)
            base = await api_url(api_proc)
            await asyncio.sleep(1.0)
            out["api_idle_mb"] = await peak_rss(api_proc, 1.0)
            async with aiohttp.ClientSession(headers=AUTH) as http:
                for i in range(100):
                    async with http.get(base + "/v1/runs", params={"limit": "500"}) as r:
                        await r.read()
                    body = {"name": f"mem-{i}", "type": TYPE, "cron": "*/5 * * * *"}
                    async with http.post(base + "/v1/jobs", json=body) as r:
                        await r.read()
            out["api_after_requests_mb"] = await peak_rss(api_proc, 0.5)
            ctx.procs.stop(api_proc)
        finally:
            await conn.close()
    res.details = out
    res.add(
        "supervisor idle RSS",
        out["supervisor_idle_mb"],
        "MB",
        target=f"< {IDLE_TARGET_MB:g} MB",
        ok=out["supervisor_idle_mb"] < IDLE_TARGET_MB,
        baseline=baseline,
        note="baseline: python importing supervisor + api, idle",
    )
    res.add(f"supervisor RSS, {k} children", out["supervisor_busy_mb"], "MB", baseline=baseline)
    if out["keeper_mb"] is not None:
        res.add("keeper RSS", out["keeper_mb"], "MB")
    res.add("API RSS idle", out["api_idle_mb"], "MB", baseline=baseline)
    res.add("API RSS after 200 requests", out["api_after_requests_mb"], "MB", baseline=baseline)
    res.checks[f"{k} children ran at once"] = out["children_running"] >= k
    return res
