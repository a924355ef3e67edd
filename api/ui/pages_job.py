"""One job: its definition, its next 20 instants (in UTC and its zone), a timeline of the
last 7 days and the next 24 h (one mark per planned instant, coloured by outcome), the
durations of its recent runs, its runs (keyset pages), and its actions. The payload is
withheld from read sessions (permissions.can_see_payloads: it may hold secrets)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from api import cursor
from api.auth import sees_payloads
from api.ui import fmt, preview, svg
from api.ui.common import dash, job_of, notice, payload_download, render, store
from api.ui.fmt import utc
from api.ui.guard import PREFIX
from supervisor.core import runs, schedule
from supervisor.core.dashboard import JobFilters, JobLine
from supervisor.core.domain import Job, UnloadableSchedule
from supervisor.core.events import destination
from supervisor.core.runs import RunFilters

routes = web.RouteTableDef()
NEXT = 20
PAGE = 25
PAST, AHEAD = timedelta(days=7), timedelta(hours=24)
MARKS = 2000  # the timeline's most; a denser schedule shows its latest
DURATIONS = 60


@routes.get(r"/jobs/{id:[0-9]{1,18}}")
async def job_detail(request: web.Request) -> web.StreamResponse:
    s = store(request)
    job = await job_of(request)
    job_id = job.id
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
    found = await dash(request).ui_job_durations(job_id, DURATIONS)
    recent = [(d.id, d.scheduled_at, str(d.status), d.seconds) for d in reversed(found)]
    context = {
        "job": job,
        "spec": job.spec,
        "now": now,
        "instants": instants,
        "utc_only": preview.utc_only(job.spec.timezone),
        "problem": problem,
        "reason": job.pause_reason,
        "payload": fmt.payload(job.spec.payload) if sees_payloads(request) else None,
        "ping_destination": destination(job.spec.ping_url) if job.spec.ping_url else None,
        "back": request.path,
        "notice": _notice(request),
        "timeline": await _timeline(request, job, now),
        "one_off": await _ended_one_off(request, job),
        "durations": svg.durations(recent, f"{PREFIX}runs/") if recent else None,
        **await _runs_page(request, job_id),
    }
    return render(request, "job.html", context)


@routes.get(r"/jobs/{id:[0-9]{1,18}}/payload")
async def job_payload(request: web.Request) -> web.StreamResponse:
    """The whole payload as a JSON download (the page shows fmt.SHOWN characters of it)."""
    job = await job_of(request)
    return payload_download(request, job.spec.payload, f"job-{job.id}-payload.json")


async def _ended_one_off(request: web.Request, job: Job) -> JobLine | None:
    """A one-off job whose run is over, as the jobs list reads it (JobLine.ended)."""
    if job.spec.cron is not None:
        return None
    found = await dash(request).ui_jobs_by_name(JobFilters(), "", 1, among=[job.id])
    return found[0] if found and found[0].ended else None


def _notice(request: web.Request) -> str | None:
    if request.query.get("done") != "backfilled":
        return notice(request)  # pause, resume, run with payload: as the jobs list says
    n = request.query.get("n", "?")
    return f"Backfilled: created {n} run{'' if n == '1' else 's'}, due now."


async def _timeline(request: web.Request, job: Job, now: datetime) -> svg.Timeline:
    start, end = now - PAST, now + AHEAD
    rows = await dash(request).ui_job_timeline(job.id, start, end, MARKS)
    marks: list[tuple[datetime, str, str, str | None]] = []
    for r in rows:
        title = f"{utc(r.scheduled_at)} · run #{r.id} · {r.status}"
        if r.skip_reason:
            title += f": {r.skip_reason}"
        if r.trigger != "schedule":
            title += f" · {r.trigger}"
        if r.error and r.status in ("failed", "dead"):
            title += f" · {r.error[:200]}"
        marks.append((r.scheduled_at, str(r.status), title, f"{PREFIX}runs/{r.id}"))
    sched = job.spec.schedule
    if not job.spec.paused and not isinstance(sched, UnloadableSchedule):
        # Instants the planner has not written as rows yet (its horizon is shorter).
        after = max(now, job.planned_until or now)
        try:
            ahead = sched.between(after, end, MARKS)
        except (OverflowError, ValueError):
            ahead = []
        for t in ahead:
            marks.append((t, "planned", f"{utc(t)} · planned (no run row yet)", None))
    return svg.timeline(marks, start, end, now)


async def _runs_page(request: web.Request, job_id: int) -> dict[str, Any]:
    """The job's runs, newest first, through the API's list (runs_job_scheduled_at)."""
    f = RunFilters(job_id=job_id)
    fhash = cursor.filters_hash("ui-job-runs", f.canonical())
    token = request.query.get("cursor")
    key = cursor.parse_run_key(cursor.decode(token, fhash)) if token else None
    rows = await runs.list_runs(store(request), f, key, PAGE + 1)
    next_url = None
    if len(rows) > PAGE:
        last = rows[PAGE - 1]
        at = cursor.encode(cursor.run_key(last.scheduled_at, last.id), fhash)
        next_url = f"{PREFIX}jobs/{job_id}?cursor={at}#runs"
    first_url = f"{PREFIX}jobs/{job_id}#runs" if token else None
    return {"runs": rows[:PAGE], "runs_next": next_url, "runs_first": first_url}
