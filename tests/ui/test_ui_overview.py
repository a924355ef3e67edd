"""The overview without a browser: late runs first (what makes /readyz fail), counts, the
inline SVG charts, jobs no live worker serves, and the next runs due; its queries never
scan runs."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import asyncpg

from api.ui.pages_overview import DAY_REFRESH, DaySnapshot
from supervisor.core import jobs
from supervisor.core.dashboard import Dashboard
from supervisor.core.model import RunStatus
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from .. import factory
from ..helpers import job, wait_for
from .conftest import Ui


async def test_overview_puts_late_runs_first_and_counts(ui_reader: Ui, store: Store) -> None:
    served = (await jobs.create_job(store, job("served", cron="0 0 1 1 *"), factory.LIMITS)).id
    await factory.insert_runs(store, served, 4, start_s=120)  # succeeded in the last hour
    await factory.insert_runs(store, served, 1, status="dead", start_s=30)
    late = await factory.due_run(store, "stuck", type="nobody-runs-this")
    await factory.set_run(
        store, late, run_after=await factory.sql_value(store, "SELECT now() - interval '5 minutes'")
    )
    await store.upsert_worker("host-a:1", "host-a", 1, ["echo"], 4, "1.0", 30.0)
    status, html = await ui_reader.get("/ui/")
    assert status == 200
    alert = html[html.index('class="alert"') : html.index("</section>")]
    assert f"#{late}" in alert and "stuck" in alert and "/readyz fails" in alert
    assert "no: start a supervisor" in alert  # nobody offers its type
    assert re.search(r'<span class="value">1</span><span class="label">dead, last 24 h', html)
    assert re.search(r'<span class="value">4</span><span class="label">succeeded, last 24 h', html)
    bars = re.findall(r'<rect class="bar-ok"[^>]* height="([0-9.]+)"', html)
    assert len(bars) == 60 + 24 and any(float(h) > 0 for h in bars)
    titles = [
        tuple(map(int, t)) for t in re.findall(r"(\d+) succeeded, (\d+) failed</title>", html)
    ]
    minutes, hours = titles[:60], titles[60:]
    assert len(hours) == 24
    for chart in (minutes, hours):  # every run in exactly one bar of each chart
        assert sum(o for o, _ in chart) == 4 and sum(b for _, b in chart) == 1
    unserved = html[html.index("Jobs no live worker serves") :]
    assert "stuck" in unserved[:400] and "served" not in unserved[:400]
    assert "host-a:1" in html  # live workers


async def test_overview_queries_read_index_ranges(store: Store) -> None:
    job_id = (await jobs.create_job(store, job("many", cron="0 0 1 1 *"), factory.LIMITS)).id
    await factory.insert_runs(store, job_id, 20000, start_s=0)
    await factory.sql(store, "ANALYZE runs")
    pool = factory.raw(store)
    assert isinstance(pool, asyncpg.Pool)
    async with pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for n, (query, args) in enumerate(
            [
                ("ui_open_counts", ""),
                ("ui_status_counts", "86400"),
                ("ui_outcome_buckets", "3600, 60"),
                ("ui_lateness", "3600, 5000"),
            ]
        ):
            await conn.execute(f"PREPARE q{n} AS {QUERIES[query]}")
            call = f"q{n}({args})" if args else f"q{n}"
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {call}")
            assert '"Seq Scan"' not in json.dumps(json.loads(plan)), (query, plan)


async def test_day_snapshot_is_served_at_once_and_refreshed_behind(store: Store) -> None:
    d, snap = Dashboard.over(store), DaySnapshot()
    job_id = (await jobs.create_job(store, job("day", cron="0 0 1 1 *"), factory.LIMITS)).id
    first = await snap.get(d, await store.now())  # the first view waits for it
    await factory.insert_runs(store, job_id, 1, status="dead", start_s=30)
    assert await snap.get(d, await store.now()) is first  # fresh: not read again
    snap.day = replace(first, taken=time.monotonic() - DAY_REFRESH - 1)
    stale = await snap.get(d, await store.now())
    assert stale.counts == first.counts  # served at once, refreshed behind it
    await wait_for(lambda: snap.day is not stale, 10, "the refresh")
    assert snap.day is not None and snap.day.counts[RunStatus.DEAD] == 1
