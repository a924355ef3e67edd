"""The overview (/ui/): the runs that make /readyz fail, at the top; open runs and the last
24 h by status; succeeded and failed per minute over the last hour and per hour over the
last 24 h (inline SVG); start lateness; live workers; jobs no live worker serves; the next
runs due. Every figure reads one index range (ui.sql), never the whole of runs.

The history figures (the day's counts, both charts, start lateness) read up to a day of the
history indexes (at 10,000 runs an hour, about 240,000 entries and 100 ms), so each API
process keeps them as a snapshot at most DAY_REFRESH seconds old: a stale snapshot is served
at once while one refresh runs behind it, so no page view waits for them but the first.
What is due, running and late now is read live."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiohttp import web

from api.ui import svg
from api.ui.site import UI_CONFIG, dash, render, store
from supervisor.core import runs
from supervisor.core.dashboard import Dashboard, Lateness
from supervisor.core.db import DB_ERRORS
from supervisor.core.model import RunStatus
from supervisor.core.runs import RunFilters

routes = web.RouteTableDef()
DAY, HOUR = 86400.0, 3600.0
LATENESS_SAMPLE = 5000
DAY_REFRESH = 10.0  # seconds: how old the 24 h figures may be


@dataclass(frozen=True)
class Day:
    counts: dict[RunStatus, int]  # runs scheduled in the last 24 h and due, per status
    hours: dict[tuple[datetime, RunStatus], int]  # ended runs per hour bucket and status
    minutes: dict[tuple[datetime, RunStatus], int]  # the same per minute, last hour
    lateness: Lateness
    taken_at: datetime
    taken: float  # monotonic


class DaySnapshot:
    """The overview's 24 h figures of this process, refreshed behind the page views."""

    def __init__(self) -> None:
        self.day: Day | None = None
        self._refresh: asyncio.Task[None] | None = None

    async def get(self, d: Dashboard, now: datetime) -> Day:
        if self.day is None:
            await self._take(d, now)
        elif time.monotonic() - self.day.taken > DAY_REFRESH and not self._refreshing:
            self._refresh = asyncio.get_running_loop().create_task(self._take_quietly(d, now))
        assert self.day is not None
        return self.day

    @property
    def _refreshing(self) -> bool:
        return self._refresh is not None and not self._refresh.done()

    async def _take(self, d: Dashboard, now: datetime) -> None:
        counts = await d.ui_status_counts(DAY)
        hours = await d.ui_outcome_buckets(DAY, 3600)
        minutes = await d.ui_outcome_buckets(HOUR, 60)
        lateness = await d.ui_lateness(HOUR, LATENESS_SAMPLE)
        self.day = Day(counts, hours, minutes, lateness, now, time.monotonic())

    async def _take_quietly(self, d: Dashboard, now: datetime) -> None:
        with contextlib.suppress(*DB_ERRORS):  # the next view tries again
            await self._take(d, now)


SNAPSHOT = web.AppKey("ui_day_snapshot", DaySnapshot)


@routes.get("/")
async def overview(request: web.Request) -> web.StreamResponse:
    s, d = store(request), dash(request)
    now = await s.now()
    max_lag = request.app[UI_CONFIG].ready_max_lag
    day = await request.app[SNAPSHOT].get(d, now)
    workers = [w for w in await s.list_workers(0.0, 1000) if w.live]
    context = {
        "now": now,
        "max_lag": max_lag,
        "late": await s.late_runs(max_lag, 20),
        "open": await d.ui_open_counts(),
        "day": day.counts,
        "day_taken_at": day.taken_at,
        "lateness": day.lateness,
        "per_minute": svg.outcome_chart(day.minutes, now, timedelta(minutes=1), 60, 10, "%H:%M"),
        "per_hour": svg.outcome_chart(day.hours, now, timedelta(hours=1), 24, 4, "%H:00"),
        "workers": workers,
        "unserved": await d.ui_unserved_jobs(20),
        "next_runs": await runs.list_runs(s, RunFilters(upcoming=True), None, 10),
    }
    return render(request, "overview.html", context)
