"""The overview without a browser: late runs first (what makes /readyz fail), counts, the
inline SVG charts, jobs no live worker serves, and the next runs due; its queries never
scan runs."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import asyncpg
import pytest

from api.ui import fmt, pages_overview
from api.ui.pages_overview import DAY_REFRESH, day_snapshot
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
    assert len(bars) == 60 + 168 and any(float(h) > 0 for h in bars)
    titles = [
        tuple(map(int, t)) for t in re.findall(r"(\d+) succeeded, (\d+) failed</title>", html)
    ]
    minutes, hours = titles[:60], titles[60:]
    assert len(hours) == 168  # a week, per hour
    assert len(re.findall(r'<rect class="bar-p50"', html)) == 168  # lateness, per hour
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
                ("ui_fill_hours", "6"),
                ("ui_week_hours", ""),
                ("ui_job_types", ""),
            ]
        ):
            await conn.execute(f"PREPARE q{n} AS {QUERIES[query]}")
            call = f"q{n}({args})" if args else f"q{n}"
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {call}")
            assert "Seq Scan" not in _scans(json.loads(plan), "runs"), (query, plan)


def _scans(plan: object, relation: str) -> set[str]:
    """The node types of the plan that read `relation`."""
    found: set[str] = set()
    if isinstance(plan, list):
        for p in plan:
            found |= _scans(p, relation)
    elif isinstance(plan, dict):
        if plan.get("Relation Name") == relation:
            found.add(str(plan.get("Node Type")))
        for v in plan.values():
            found |= _scans(v, relation)
    return found


async def test_day_snapshot_is_served_at_once_and_refreshed_behind(store: Store) -> None:
    d, snap = Dashboard.over(store), day_snapshot()
    job_id = (await jobs.create_job(store, job("day", cron="0 0 1 1 *"), factory.LIMITS)).id
    first = await snap.get(d)  # the first view waits for it
    await factory.insert_runs(store, job_id, 1, status="dead", start_s=30)
    assert await snap.get(d) is first  # fresh: not read again
    snap.taken = time.monotonic() - DAY_REFRESH - 1
    stale = await snap.get(d)
    assert stale is first  # served at once, refreshed behind it
    await wait_for(lambda: snap.value is not first, 10, "the refresh")
    assert snap.value is not None and snap.value.counts[RunStatus.DEAD] == 1


async def _hour_ago(store: Store, hours: int) -> tuple[datetime, int]:
    """The start of the (epoch-aligned) hour `hours` before the current one, and the
    insert_runs start_s that puts runs 30 minutes into it."""
    now = await store.now()
    start = datetime.fromtimestamp(now.timestamp() // 3600 * 3600 - hours * 3600, tz=UTC)
    return start, int((now - start).total_seconds()) - 1800


async def test_week_rolls_up_closed_hours_and_freezes_settled_ones(
    ui_reader: Ui, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages_overview, "FILL_SECONDS", 60.0)  # the first view fills it all
    d = Dashboard.over(store)
    job_id = (await jobs.create_job(store, job("week", cron="0 0 1 1 *"), factory.LIMITS)).id
    old, old_s = await _hour_ago(store, 72)  # three days ago: settled once computed
    await factory.insert_runs(store, job_id, 5, start_s=old_s)
    await factory.insert_runs(store, job_id, 2, status="dead", start_s=old_s + 10)
    young, young_s = await _hour_ago(store, 2)
    await factory.insert_runs(store, job_id, 3, start_s=young_s)
    status, html = await ui_reader.get("/ui/")
    assert status == 200
    assert f"{fmt.utc(old)}: 5 succeeded, 2 failed</title>" in html
    assert f"{fmt.utc(old)}: p50 1 s, p99 1 s over 7 runs</title>" in html  # started 1 s late
    assert f"{fmt.utc(young)}: 3 succeeded, 0 failed</title>" in html
    week = {h.hour: h for h in await d.ui_week_hours()}
    assert len(week) == 167  # every closed hour of the week has its row
    # A run that ends later in a settled hour is not counted again; a young hour's row is
    # rewritten once it is 10 minutes old.
    await factory.insert_runs(store, job_id, 1, start_s=old_s + 100)
    await factory.insert_runs(store, job_id, 4, start_s=young_s + 100)
    assert await d.ui_fill_hours(6) == 0  # nothing missing, nothing stale yet
    await factory.sql(store, "UPDATE run_hours SET computed_at = now() - interval '11 minutes'")
    # The hours that were younger than a day when computed: 24, or 25 in the first 11
    # minutes of an hour.
    assert await d.ui_fill_hours(200) in (24, 25)
    week = {h.hour: h for h in await d.ui_week_hours()}
    assert (week[old].succeeded, week[old].dead) == (5, 2)
    assert week[young].succeeded == 7
