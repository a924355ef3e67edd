"""The overview (/ui/): the runs that make /readyz fail, at the top; open runs and the last
24 h by status; succeeded and failed per minute over the last hour and per hour over the
last 24 h (inline SVG); start lateness; live workers; jobs no live worker serves; the next
runs due. Every figure reads one index range (ui.sql), never the whole of runs."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from api.ui import svg
from api.ui.site import UI_CONFIG, dash, render, store
from supervisor.core import runs
from supervisor.core.runs import RunFilters

routes = web.RouteTableDef()
DAY, HOUR = 86400.0, 3600.0
LATENESS_SAMPLE = 5000


@routes.get("/")
async def overview(request: web.Request) -> web.StreamResponse:
    s, d = store(request), dash(request)
    now = await s.now()
    max_lag = request.app[UI_CONFIG].ready_max_lag
    minutes = await d.ui_outcome_buckets(HOUR, 60)
    hours = await d.ui_outcome_buckets(DAY, 3600)
    workers = [w for w in await s.list_workers(0.0, 1000) if w.live]
    context = {
        "now": now,
        "max_lag": max_lag,
        "late": await s.late_runs(max_lag, 20),
        "open": await d.ui_open_counts(),
        "day": await d.ui_status_counts(DAY),
        "lateness": await d.ui_lateness(HOUR, LATENESS_SAMPLE),
        "per_minute": svg.outcome_chart(minutes, now, timedelta(minutes=1), 60, 10, "%H:%M"),
        "per_hour": svg.outcome_chart(hours, now, timedelta(hours=1), 24, 4, "%H:00"),
        "workers": workers,
        "unserved": await d.ui_unserved_jobs(20),
        "next_runs": await runs.list_runs(s, RunFilters(upcoming=True), None, 10),
    }
    return render(request, "overview.html", context)
