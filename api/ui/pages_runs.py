"""Runs: the history (due by now, newest first) or the plan ahead (the "upcoming" tab) with
the API's filters and keyset pages; one run with every attempt; cancel and requeue.

The list and detail come from supervisor.core.runs (the API's own), so both show the same
rows in the same order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

import aiohttp_jinja2
from aiohttp import web
from multidict import MultiDict

from api import cursor
from api.auth import sees_payloads
from api.filters import KEPT, RUN_STATUSES, ui_range_errors, ui_runs
from api.ui import fmt, live
from api.ui.common import common, payload_download, render, store
from api.ui.guard import PREFIX, redirect
from supervisor.core import runs
from supervisor.core.model import CANCELLABLE, REQUEUEABLE

routes = web.RouteTableDef()
PAGE = 50
RUN = r"/runs/{id:[0-9]{1,18}}"
DONE = {
    "cancelled": "Cancelled run #{run}.",
    "requeued": "Requeued run #{run}: it is due now.",
    "triggered": "Triggered run #{run}: it is due now.",
}


@routes.get("/runs")
async def list_runs(request: web.Request) -> web.StreamResponse:
    q = request.query
    errors = ui_range_errors(q)
    f = ui_runs(MultiDict((k, v) for k, v in q.items() if k not in errors))
    fhash = cursor.filters_hash("ui-runs", f.canonical())
    token = q.get("cursor")
    key = cursor.parse_run_key(cursor.decode(token, fhash)) if token else None
    s = store(request)
    rows = [] if errors else await runs.list_runs(s, f, key, PAGE + 1)
    last = rows[PAGE - 1] if len(rows) > PAGE else None
    here = [(k, v) for k, v in q.items() if k in KEPT and v]
    next_url = None
    if last is not None:
        at = cursor.run_key(last.scheduled_at, last.id)
        next_url = f"{PREFIX}runs?{urlencode([*here, ('cursor', cursor.encode(at, fhash))])}"
    tabs = {
        t: f"{PREFIX}runs?{urlencode([*[(k, v) for k, v in here if k != 'tab'], ('tab', t)])}"
        for t in ("history", "upcoming")
    }
    context = {
        "runs": rows[:PAGE],
        "now": await s.now(),
        "f": f,
        "query": q,
        "statuses": RUN_STATUSES,
        "chosen": set(f.statuses),
        "tab": "upcoming" if f.upcoming else "history",
        "tabs": tabs,
        "next_url": next_url,
        "first_url": f"{PREFIX}runs?{urlencode(here)}" if token else None,
        "requeue_url": f"{PREFIX}runs/requeue?{urlencode(here)}",
        "notice": f"Requeued {q.get('n', '?')} runs: they are due now."
        if q.get("done") == "requeued_bulk"
        else None,
        "too_many": f.job_text is not None
        and len(await s.job_ids_matching(f.job_text, runs.JOB_MATCHES + 1)) > runs.JOB_MATCHES,
        "job_matches": runs.JOB_MATCHES,
        "errors": errors,
    }
    return render(request, "runs.html", context, 422 if errors else 200)


async def _run_context(request: web.Request, run_id: int) -> dict[str, Any]:
    return _view(request, await live.fetch_run(store(request), run_id))


def _view(request: web.Request, state: live.RunState) -> dict[str, Any]:
    """What this viewer may see of a run as read (the live stream shares one read between
    viewers of every role: what depends on the viewer belongs here)."""
    row = state.run
    if not sees_payloads(request):  # not even in the template's context
        row = replace(row, payload=None)
    status = str(row.status)
    return {
        "run": row,
        "payload": None if row.payload is None else fmt.payload(row.payload),
        "status": status,
        "attempts": list(reversed(state.attempts)),
        "now": state.now,
        "can_cancel": status in CANCELLABLE,
        "can_requeue": status in REQUEUEABLE,
        "live": state.live,
        "waiting_for": state.waiting_for,
    }


@routes.get(RUN)
async def run_detail(request: web.Request) -> web.StreamResponse:
    run_id = int(request.match_info["id"])
    context = await _run_context(request, run_id)
    return render(request, "run.html", {**context, "notice": _notice(request, run_id)})


@routes.get(RUN + "/payload")
async def run_payload(request: web.Request) -> web.StreamResponse:
    """The run's own payload as a JSON download (the page shows fmt.SHOWN characters)."""
    run_id = int(request.match_info["id"])
    row, _ = await runs.run_detail(store(request), run_id)
    return payload_download(request, row.payload, f"run-{run_id}-payload.json")


@routes.get(RUN + "/live")
async def run_live(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the run's live part (run_body.html) whenever it changes, then
    `done` once the run is final; one poller per run serves every viewer, streams are
    capped per session and per process (live.py)."""
    run_id = int(request.match_info["id"])
    await runs.run_detail(store(request), run_id)  # 404 before the stream starts

    def html(state: live.RunState) -> str:
        context = {**common(request), **_view(request, state)}
        return aiohttp_jinja2.render_string("run_body.html", request, context)

    return await live.stream(request, run_id, html)


def _notice(request: web.Request, run_id: int) -> str | None:
    template = DONE.get(request.query.get("done", ""))
    return None if template is None else template.format(run=run_id)


@routes.post(RUN + "/cancel")
async def cancel(request: web.Request) -> web.StreamResponse:
    run_id = int(request.match_info["id"])
    await runs.cancel_run(store(request), run_id)
    return redirect(f"{PREFIX}runs/{run_id}?done=cancelled")


@routes.post(RUN + "/requeue")
async def requeue(request: web.Request) -> web.StreamResponse:
    run_id = int(request.match_info["id"])
    await runs.requeue_run(store(request), run_id)
    return redirect(f"{PREFIX}runs/{run_id}?done=requeued")
