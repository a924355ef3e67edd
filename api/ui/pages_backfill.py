"""Backfill from a job's page: "run the instants between A and B that have no run". The GET
counts them (the API's dry run) and offers to create them; the POST creates them, as the
API's POST /v1/jobs/{id}/backfill does (jobs.backfill, trigger `backfill`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from api.filters import form_instant
from api.ui.common import job_of, render, store
from api.ui.guard import PREFIX, redirect
from supervisor.core import jobs
from supervisor.core.domain import Job
from supervisor.core.errors import InvalidSpec
from supervisor.core.model import utc_iso

routes = web.RouteTableDef()
BACKFILL = r"/jobs/{id:[0-9]{1,18}}/backfill"


def _window(form: Any) -> tuple[Any, Any, dict[str, str]]:
    """(from, to) as the API validates them, or the errors by field."""
    errors: dict[str, str] = {}
    body: dict[str, str] = {}
    for name in ("from", "to"):
        try:
            at = form_instant(form, name)
        except InvalidSpec as exc:
            errors[name] = exc.message
            continue
        if at is None:
            errors[name] = "is required"
        else:
            body[name] = utc_iso(at)
    if errors:
        return None, None, errors
    try:
        start, end, _ = jobs.validate_backfill(body)
    except jobs.InvalidSpecs as exc:
        return None, None, {e.field: e.message for e in exc.errors}
    return start, end, {}


async def _page(request: web.Request, job: Job, form: Any, status: int = 200) -> web.Response:
    start, end, errors = _window(form)
    result = None
    if not errors:
        try:
            result = await jobs.backfill(store(request), job.id, start, end, dry_run=True)
        except jobs.InvalidSpecs as exc:
            errors = {e.field: e.message for e in exc.errors}
        except InvalidSpec as exc:  # a schedule this host cannot load
            errors = {exc.field: exc.message}
    context = {
        "job": job,
        "v": {k: str(form.get(k, "")) for k in ("from", "to")},
        "errors": errors,
        "result": result,
    }
    return render(request, "job_backfill.html", context, 422 if errors else status)


@routes.get(BACKFILL)
async def count(request: web.Request) -> web.StreamResponse:
    return await _page(request, await job_of(request), request.query)


@routes.post(BACKFILL)
async def create(request: web.Request) -> web.StreamResponse:
    job = await job_of(request)
    form = await request.post()
    start, end, errors = _window(form)
    if errors:
        return await _page(request, job, form)
    done = await jobs.backfill(store(request), job.id, start, end, dry_run=False)
    query = urlencode({"done": "backfilled", "n": len(done.created)})
    return redirect(f"{PREFIX}jobs/{job.id}?{query}")
