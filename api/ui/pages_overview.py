"""The overview (/ui/): the runs that make /readyz fail, at the top; open runs and the last
24 h by status; succeeded and failed per minute over the last hour and per hour over the
last week (by when they ended), start lateness p50/p99 over both (first attempts from their
instants, backfilled runs left out; inline SVG); live workers; jobs no live worker
serves; the next runs due. Every figure reads index ranges (ui.sql), never the whole of runs.

The history figures read up to a day of the history indexes (at 10,000 runs an hour, about
240,000 entries and 100 ms), so each API process keeps them as a snapshot at most
DAY_REFRESH seconds old: a stale snapshot is served at once while one refresh runs behind
it, so no page view waits for them but the first. The week's closed hours come from
run_hours, which each refresh tops up by at most FILL_BATCH hours (ui_fill_hours); the
current hour is summed from the minute buckets. What is due, running and late now is read
live."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiohttp import web
from markupsafe import Markup

from api.ui import svg
from api.ui.common import UI_CONFIG, dash, render, store
from api.ui.snapshot import Snapshot
from supervisor.core import runs
from supervisor.core.dashboard import Dashboard, Hour, Lateness
from supervisor.core.model import RunStatus
from supervisor.core.runs import RunFilters

routes = web.RouteTableDef()
DAY, HOUR = 86400.0, 3600.0
LATENESS_SAMPLE = 5000
DAY_REFRESH = 10.0  # seconds: how old the history figures may be
FILL_BATCH = 6  # run_hours rows per statement (about 40 ms each at 10,000 runs an hour)
FILL_SECONDS = 0.2  # a refresh starts no new batch after this long
WEEK = 168  # hours


@dataclass(frozen=True)
class Day:
    counts: dict[RunStatus, int]  # runs scheduled in the last 24 h and due, per status
    lateness: Lateness  # the last hour's
    late_hours: dict[datetime, tuple[float | None, float | None, int]]  # p50, p99, n
    charts: dict[str, Markup]  # drawn once per snapshot
    taken_at: datetime


async def take_day(d: Dashboard) -> Day:
    """The week's missing hours (at most FILL_SECONDS of batches), then every figure."""
    deadline = time.monotonic() + FILL_SECONDS
    while await d.ui_fill_hours(FILL_BATCH) and time.monotonic() < deadline:
        pass
    now = await d.store().now()
    counts = await d.ui_status_counts(DAY)
    minutes = await d.ui_outcome_buckets(HOUR, 60)
    lateness = await d.ui_lateness(HOUR, LATENESS_SAMPLE)
    week = await d.ui_week_hours()
    hours = week_counts(week, minutes, now)
    late_hours = {h.hour: (h.late_p50, h.late_p99, h.late_n) for h in week}
    charts = {
        "per_minute": svg.outcome_chart(minutes, now, timedelta(minutes=1), 60, 10, "%H:%M").svg(
            "runs succeeded and failed per minute over the last hour"
        ),
        "per_hour": svg.outcome_chart(hours, now, timedelta(hours=1), WEEK, 24, "%a %d").svg(
            "runs succeeded and failed per hour over the last week"
        ),
        "late_hours": svg.lateness_chart(late_hours, now, WEEK, 24, "%a %d").svg(
            "start lateness p50 and p99 per hour over the last week"
        ),
    }
    return Day(counts, lateness, late_hours, charts, now)


def day_snapshot() -> Snapshot[Day]:
    return Snapshot(take_day, DAY_REFRESH)


def week_counts(
    week: list[Hour], minutes: dict[tuple[datetime, RunStatus], int], now: datetime
) -> dict[tuple[datetime, RunStatus], int]:
    """Ended runs per (hour, status): closed hours from run_hours, the current one summed
    from the minute buckets."""
    out: dict[tuple[datetime, RunStatus], int] = {}
    for h in week:
        out[h.hour, RunStatus.SUCCEEDED] = h.succeeded
        out[h.hour, RunStatus.FAILED] = h.failed
        out[h.hour, RunStatus.DEAD] = h.dead
    current = datetime.fromtimestamp(now.timestamp() // HOUR * HOUR, tz=now.tzinfo)
    for (minute, status), n in minutes.items():
        if minute >= current:
            out[current, status] = out.get((current, status), 0) + n
    return out


SNAPSHOT = web.AppKey("ui_day_snapshot", Snapshot[Day])


@routes.get("/")
async def overview(request: web.Request) -> web.StreamResponse:
    s, d = store(request), dash(request)
    now = await s.now()
    max_lag = request.app[UI_CONFIG].ready_max_lag
    day = await request.app[SNAPSHOT].get(d)
    workers = [w for w in await s.list_workers(0.0, 1000) if w.live]
    context = {
        "now": now,
        "max_lag": max_lag,
        "late": await s.late_runs(max_lag, 20),
        "open": await d.ui_open_counts(),
        "day": day.counts,
        "day_taken_at": day.taken_at,
        "lateness": day.lateness,
        "charts": day.charts,
        "week_p99": max((p99 for _, p99, n in day.late_hours.values() if n and p99), default=None),
        "workers": workers,
        "unserved": await d.ui_unserved_jobs(20),
        "next_runs": await runs.list_runs(s, RunFilters(upcoming=True), None, 10),
    }
    return render(request, "overview.html", context)
