"""A long transaction elsewhere: a report query's snapshot held while runs drain.

Dead tuples behind an old snapshot cannot be pruned, so a queue whose claim walks them
slows down as the backlog churns (what degrades PostgreSQL queues in practice). In one
database, 2 supervisors drain N due runs of /bin/true three times: undisturbed; while
another session holds a REPEATABLE READ snapshot taken before the drain, for HOLD seconds
(at least the whole drain); and once more after it ended, without anything done to help
(the queue must recover by itself). Ratios to the undisturbed drain.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from bench.common import Context, ScenarioResult
from bench.throughput import drain_in

NAME = "snapshot"
HOLD_SECONDS = 60.0
HELD_RATIO_TARGET = 0.8  # a long transaction costs at most 20 % of throughput


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n, hold = (500, 2.0) if ctx.smoke else (50_000, HOLD_SECONDS)
    out: dict[str, Any] = {}
    async with ctx.dbs.fresh("snap") as dsn:
        out["before"] = await drain_in(ctx, dsn, n, "before")
        report = await asyncpg.connect(dsn)
        try:
            tx = report.transaction(isolation="repeatable_read", readonly=True)
            await tx.start()
            await report.fetchval("SELECT count(*) FROM runs")  # the snapshot is taken here
            held_from = time.monotonic()
            out["held"] = await drain_in(ctx, dsn, n, "held")
            # The report runs on past the drain: its snapshot lasts HOLD seconds in all.
            await asyncio.sleep(max(0.0, hold - (time.monotonic() - held_from)))
            out["held_seconds"] = time.monotonic() - held_from
            await tx.rollback()
        finally:
            await report.close()
        out["after"] = await drain_in(ctx, dsn, n, "after")
    base = out["before"]["runs_per_s"]
    res.add(f"{n:,} runs under a {hold:g} s snapshot", out["held"]["runs_per_s"], "runs/s",
            target=f">= {HELD_RATIO_TARGET:g}x", baseline=base,
            ok=out["held"]["runs_per_s"] >= HELD_RATIO_TARGET * base)  # fmt: skip
    res.add(f"{n:,} runs after it ended", out["after"]["runs_per_s"], "runs/s", baseline=base)
    for key in ("before", "held", "after"):
        res.checks[f"exactly once: {key}"] = bool(out[key]["exactly_once"])
    res.details = out
    return res
