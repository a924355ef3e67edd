"""Bulk requeue from the runs page: the dead runs matching its filters (or the failed and
dead ones the status filter names) run again. The GET counts them (up to COUNT_CAP) and
asks; the POST (CSRF, operator) moves them through runs.requeue_runs, the API's own bulk
requeue."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from api.filters import KEPT, ui_runs
from api.ui.common import dash, render, store
from api.ui.guard import PREFIX, redirect
from supervisor.core import runs
from supervisor.core.model import REQUEUEABLE
from supervisor.core.runs import RunFilters

routes = web.RouteTableDef()
COUNT_CAP = 1000  # counted exactly up to here (an index range each); beyond: "at least"


def _chosen(q: Any) -> tuple[RunFilters, list[tuple[str, str]]]:
    """The filters as requeue reads them (history, dead unless dead/failed are named) and
    the query that reproduces the list."""
    f = ui_runs(q)
    wanted = [s for s in f.statuses if s in REQUEUEABLE]
    statuses = tuple(sorted(set(wanted))) if f.statuses else ("dead",)
    here = [(k, v) for k, v in q.items() if k in KEPT and v and k != "tab"]
    return replace(f, statuses=statuses, upcoming=False), here


@routes.get("/runs/requeue")
async def confirm(request: web.Request) -> web.StreamResponse:
    f, here = _chosen(request.query)
    n = 0
    ids = await runs.jobs_filtered(store(request), f)
    if f.statuses and ids != []:
        n = await dash(request).ui_count_requeueable(
            list(f.statuses), ids, f.scheduled, f.finished, COUNT_CAP
        )
    context = {
        "count": n,
        "at_least": n >= COUNT_CAP,
        "statuses": f.statuses,
        "hidden": here,
        "back": f"{PREFIX}runs?{urlencode(here)}",
    }
    return render(request, "runs_requeue.html", context)


@routes.post("/runs/requeue")
async def requeue(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    f, here = _chosen(form)
    moved = await runs.requeue_runs(store(request), f) if f.statuses else 0
    return redirect(f"{PREFIX}runs?{urlencode([*here, ('done', 'requeued_bulk'), ('n', moved)])}")
