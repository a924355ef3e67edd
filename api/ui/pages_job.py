"""One job: its definition, its next 20 instants (in UTC and its zone), and its actions.
The payload is shown to admin sessions only (it may hold secrets)."""

from __future__ import annotations

import json

from aiohttp import web

from api.ui.site import render, store
from supervisor.core import schedule
from supervisor.core.domain import UnloadableSchedule
from supervisor.core.errors import NotFound

routes = web.RouteTableDef()
NEXT = 20


@routes.get(r"/jobs/{id:[0-9]{1,18}}")
async def job_detail(request: web.Request) -> web.StreamResponse:
    job_id = int(request.match_info["id"])
    s = store(request)
    job = await s.get_job(job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found (it may have been deleted)")
    now = await s.now()
    sched = job.spec.schedule
    instants: list[dict[str, str]] = []
    problem = None
    if isinstance(sched, UnloadableSchedule):
        problem = str(sched.error)
    else:
        try:
            instants = schedule.preview(sched, now, NEXT)
        except (OverflowError, ValueError):
            problem = "no instant within supported time"
    context = {
        "job": job,
        "spec": job.spec,
        "now": now,
        "instants": instants,
        "problem": problem,
        "reason": job.pause_reason,
        "payload": json.dumps(job.spec.payload, indent=2, sort_keys=True),
        "back": request.path,
    }
    return render(request, "job.html", context)
