"""Issue 63, item 5: a backfill of 60 instants of the last hour, run just now, is not start
lateness (the overview's p50/p99 and the week's hourly rows measure runs due at their
instant), and the charts place runs when they ended, not at their instants: a journey in a
real Chromium against a real `punchclock api`, and the week's rollup read directly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from playwright.async_api import Page, expect

from supervisor.core import jobs
from supervisor.core.dashboard import Dashboard
from supervisor.core.store import Store

from .. import factory
from ..api_support import ADMIN, TOKENS, api_process
from ..helpers import job
from .journeys import Watched
from .test_journey_jobs import login

# $2 runs, one per $3 seconds going back from now - $3, of `trigger` $4, each starting
# $5 seconds after now - $6 (a backfill: all just now; on time: $5 after its instant) and
# ending 2 s later. attempts = $7 (2: a requeued run's second attempt).
RUNS = """
INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status, attempts,
                  started_at, finished_at, trigger)
SELECT $1, now() - make_interval(secs => g * $3), now() - make_interval(secs => g * $3),
       'echo', 3, 'succeeded', $7,
       CASE WHEN $6 THEN now() - interval '20 seconds'
            ELSE now() - make_interval(secs => g * $3) END + make_interval(secs => $5),
       CASE WHEN $6 THEN now() - interval '20 seconds'
            ELSE now() - make_interval(secs => g * $3) END + make_interval(secs => $5 + 2),
       $4::run_trigger
FROM generate_series(1, $2) g
"""


async def _runs(
    store: Store, job_id: int, n: int, every_s: float, trigger: str, late_s: float,
    just_now: bool, attempts: int = 1,
) -> None:  # fmt: skip
    await factory.sql(store, RUNS, job_id, n, every_s, trigger, late_s, just_now, attempts)


async def test_a_backfill_is_not_late_and_charts_show_when_runs_ran(
    tab: Page, store: Store, dsn: str, tmp_path: Path
) -> None:
    etl = await jobs.create_job(store, job("etl", cron="0 0 1 1 *"), factory.LIMITS)
    await _runs(store, etl.id, 60, 60.0, "backfill", 0, True)  # backfilled, ran just now
    await _runs(store, etl.id, 3, 61.5, "schedule", 1.0, False)  # on time, 1 s late
    await _runs(store, etl.id, 1, 50 * 60 + 7, "schedule", 0, True, attempts=2)  # requeued
    with api_process(dsn, "--listen", "127.0.0.1:0", "--api-token", TOKENS[0]) as api:
        url = api.url()
        w = Watched(tab, tmp_path)
        await login(tab, url, ADMIN)
        stat = tab.locator(".stat").filter(has_text="start lateness")
        await expect(stat.locator(".value")).to_have_text("1 s")
        await expect(stat.locator(".label")).to_have_text("start lateness p50 (p99 1 s), last hour")
        minutes = tab.get_by_role("img", name="runs succeeded and failed per minute")
        bars = {
            text.split(": ")[0]: text.split(": ")[1]
            for text in await minutes.locator("title").all_text_contents()
        }
        busy = {at: counts for at, counts in bars.items() if not counts.startswith("0 ")}
        # The 61 that ran in the last minute (or two, across a minute's turn), and the three
        # on-time runs at their own minutes: nothing where the backfill's instants were.
        assert sum(int(c.split()[0]) for c in busy.values()) == 64, busy
        assert len(busy) <= 5, busy
        await w.shot("overview-after-backfill")
        w.no_errors()


async def test_week_rollup_counts_runs_when_they_ended_and_skips_backfills(store: Store) -> None:
    d = Dashboard.over(store)
    etl = await jobs.create_job(store, job("etl", cron="0 0 1 1 *"), factory.LIMITS)
    now = await store.now()
    hour = 3600.0
    three_days = datetime.fromtimestamp(now.timestamp() // hour * hour - 72 * hour, tz=UTC)
    back = (now - three_days).total_seconds() - 1800  # 30 min into that hour
    await _runs(store, etl.id, 1, back, "backfill", 0, True)  # its instant then, ran now
    await _runs(store, etl.id, 1, back + 60, "schedule", 2.0, False)  # ran then, 2 s late
    while await d.ui_fill_hours(50):
        pass
    week = {h.hour: h for h in await d.ui_week_hours()}
    then = week[three_days]
    assert (then.succeeded, then.late_n, then.late_p99) == (1, 1, 2.0), then
