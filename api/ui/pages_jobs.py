"""The jobs list (search, filters, keyset pages, sort by name or next run) and the job
actions: pause with a reason, resume, trigger now (optionally with a payload), delete.

Every action is a POST form that works without JavaScript and answers with a redirect back
to the list it came from; pause, trigger-with-payload and delete have a page of their own
(the reason, the payload, the confirmation).
"""

from __future__ import annotations

import bisect
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from api import cursor
from api.filters import RUN_STATUSES, ui_jobs
from api.request import find_job
from api.ui import forms
from api.ui.common import DONE, UI_LIMITS, back_of, dash, job_of, notice, render, store
from api.ui.guard import PREFIX, redirect
from api.ui.snapshot import Snapshot
from supervisor.core import jobs
from supervisor.core.dashboard import Dashboard, JobBrief, JobFilters, JobLine
from supervisor.core.domain import Job
from supervisor.core.errors import InvalidSpec, NotFound
from supervisor.core.model import RunStatus

routes = web.RouteTableDef()
PAGE = 50
EARLIEST = datetime.min.replace(tzinfo=UTC)


def _hash(f: JobFilters, sort: str) -> str:
    return cursor.filters_hash(
        "ui-jobs", {"f": [f.text, f.type, f.paused, f.last_status], "sort": sort}
    )


async def _page(request: web.Request, f: JobFilters, sort: str) -> tuple[list[JobLine], str | None]:
    token = request.query.get("cursor")
    fhash = _hash(f, sort)
    key = cursor.decode(token, fhash) if token else None
    d = dash(request)
    if sort == "name":
        after = key[0] if key and isinstance(key[0], str) else ""
        if key and not isinstance(key[0], str):
            raise InvalidSpec("cursor", "is not a valid cursor")
        if f.last_status is None:
            found = await d.ui_jobs_by_name(f, after, PAGE + 1)
            nxt = [found[PAGE - 1].name] if len(found) > PAGE else None
        else:
            found, nxt = await _by_last_status(request, f, after)
    else:
        at, run_id = cursor.parse_run_key(key) if key else (EARLIEST, 0)
        found = await d.ui_jobs_by_next(f, (at, run_id), PAGE + 1)
        last = found[PAGE - 1] if len(found) > PAGE else None
        nxt = None
        if last is not None and last.next_at is not None and last.next_run_id is not None:
            nxt = cursor.run_key(last.next_at, last.next_run_id)
    return found[:PAGE], None if nxt is None else cursor.encode(nxt, fhash)


async def _by_last_status(
    request: web.Request, f: JobFilters, after: str
) -> tuple[list[JobLine], list[Any] | None]:
    """A page by name of the jobs whose last run has f.last_status: the candidates come from
    this process's snapshot (at most LAST_REFRESH seconds old), every listed row is checked
    live by the query. Walking all jobs in name order with one probe each would cost 17 ms
    and more per page at 10,000 jobs when the status is rare (dead: 2 % of jobs)."""
    assert f.last_status is not None
    d = dash(request)
    briefs = (await request.app[LAST].get(d))[f.last_status]
    start = bisect.bisect_right(briefs, (after,), key=lambda b: (b.name,))
    chosen: list[JobBrief] = []
    for b in briefs[start:]:
        if b.matches(f):
            chosen.append(b)
            if len(chosen) > PAGE:
                break
    if not chosen:
        return [], None
    found = await d.ui_jobs_by_name(f, after, PAGE, among=[b.id for b in chosen[:PAGE]])
    return found, [chosen[PAGE - 1].name] if len(chosen) > PAGE else None


LAST_REFRESH = 10.0  # seconds: how old the last-status filter's candidates may be
LAST = web.AppKey("ui_last_statuses", Snapshot[dict[RunStatus, list[JobBrief]]])


def last_snapshot() -> Snapshot[dict[RunStatus, list[JobBrief]]]:
    return Snapshot(Dashboard.ui_job_last_statuses, LAST_REFRESH)


@routes.get("/jobs")
async def list_jobs(request: web.Request) -> web.StreamResponse:
    f, sort = ui_jobs(request.query)
    found, next_cursor = await _page(request, f, sort)
    here = {k: v for k, v in request.query.items() if k in ("q", "type", "paused", "last", "sort")}
    context = {
        "jobs": found,
        "now": await store(request).now(),
        "types": await dash(request).ui_job_types(),
        "statuses": RUN_STATUSES,
        "query": here,
        "sort": sort,
        "next_url": f"{PREFIX}jobs?{urlencode({**here, 'cursor': next_cursor})}"
        if next_cursor
        else None,
        "first_url": f"{PREFIX}jobs?{urlencode(here)}" if "cursor" in request.query else None,
        "back": request.path_qs,
        "notice": notice(request),
        "warning": await past_warning(request),
    }
    fragment = request.headers.get("HX-Target") == "jobs-table"
    return render(request, "jobs_table.html" if fragment else "jobs.html", context)


async def past_warning(request: web.Request) -> str | None:
    """After a save that set a one-off's run_at already past (?warn=run_at): what the
    catch-up rules do with its run, as the API's warning says (jobs.past_run_at)."""
    if request.query.get("warn") != "run_at" or request.query.get("done") not in DONE:
        return None
    s = store(request)
    try:
        job = await find_job(s, request.query.get("job", ""))
    except NotFound:
        return None
    return jobs.past_run_at(job.spec, await s.now())


def _back(form: Any, done: str, job: Job, **extra: Any) -> web.Response:
    base, _, query = back_of(form.get("back")).partition("?")
    kept = [
        p
        for p in query.split("&")
        if p and not p.startswith(("done=", "job=", "run=", "warn=", "cursor="))
    ]
    kept.append(urlencode({"done": done, "job": job.spec.name, **extra}))
    return redirect(f"{base}?{'&'.join(kept)}")


ACTIONS = r"/jobs/{id:[0-9]{1,18}}/{action:pause|trigger|delete}"


@routes.get(ACTIONS)
async def action_page(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    back = back_of(request.query.get("back"))
    context = {"job": job, "action": request.match_info["action"], "back": back, "errors": {}}
    return render(request, "job_action.html", context)


@routes.post(r"/jobs/{id:[0-9]{1,18}}/pause")
async def pause(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    form = await request.post()
    try:  # the API's rules for a reason (its length, no NUL)
        reason = jobs.validate_pause({"reason": str(form.get("reason", ""))})
    except jobs.InvalidSpecs as exc:
        errors = {e.field: e.message for e in exc.errors}
        context = {
            "job": job,
            "action": "pause",
            "back": back_of(form.get("back")),
            "errors": errors,
        }
        return render(request, "job_action.html", context, 422)
    await jobs.set_paused(store(request), job.id, True, request.app[UI_LIMITS], reason)
    return _back(form, "paused", job)


@routes.post(r"/jobs/{id:[0-9]{1,18}}/resume")
async def resume(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    await jobs.set_paused(store(request), job.id, False, request.app[UI_LIMITS])
    return _back(await request.post(), "resumed", job)


@routes.post(r"/jobs/{id:[0-9]{1,18}}/trigger")
@forms.tolerant  # a payload over api_max_body: the form again, with the error at the field
async def trigger(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    form = await request.post()
    text = str(form.get("payload", "")).strip()
    too_big = forms.dropped(request)
    if too_big:  # never run without a field it was sent
        size = too_big.get("payload", max(too_big.values()))  # the form's one large field
        problem = forms.too_large(size, request.client_max_size)
        return _trigger_form(request, job, form, "", problem, 413)
    try:
        body = {"payload": json.loads(text)} if text else {}
        payload = jobs.validate_trigger(body, None)
    except ValueError as exc:
        return _trigger_form(request, job, form, text, f"is not valid JSON: {exc}")
    except jobs.InvalidSpecs as exc:
        return _trigger_form(request, job, form, text, exc.errors[0].message)
    run_id, _ = await jobs.trigger_job(store(request), job.id, payload, None)
    if form.get("then") == "run":  # from the job's page: follow the run, live
        return redirect(f"{PREFIX}runs/{run_id}?done=triggered")
    return _back(form, "triggered", job, run=run_id)


def _trigger_form(
    request: web.Request,
    job: Job,
    form: Any,
    text: str,
    problem: str,
    status: int = 422,
) -> web.Response:
    context = {
        "job": job,
        "action": "trigger",
        "back": back_of(form.get("back")),
        "errors": {"payload": problem},
        "payload": text,
    }
    return render(request, "job_action.html", context, status)


@routes.post(r"/jobs/{id:[0-9]{1,18}}/delete")
async def delete(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    await jobs.delete_job(store(request), job.id)
    return _back(await request.post(), "deleted", job)
