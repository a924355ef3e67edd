"""/v1/jobs and /v1/schedule/preview: create, list, show, update, delete, pause, resume,
trigger, backfill, and the schedule preview. Validation is supervisor.core.jobspec's (shared
with the CLI)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from api import cursor, views
from api.auth import sees_payloads
from api.filters import api_jobs
from api.params import MAX_ZONE, NO_BODY, Query, no_query, path_id, read_json
from api.request import find_job
from api.state import config, limits, store
from supervisor.core import jobs, runs, schedule
from supervisor.core.channels import notifications
from supervisor.core.domain import Job
from supervisor.core.egress import destinations
from supervisor.core.errors import InvalidSpec

routes = web.RouteTableDef()
JOB = "/v1/jobs/{id:[0-9]+}"
MAX_PAGE = 500
PREVIEW_MAX = 100


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers)


async def _detail(request: web.Request, job: Job, run_at_set: bool = False) -> dict[str, Any]:
    s = store(request)
    warnings = await jobs.job_warnings(s, job.spec)
    now = await s.now()
    past = jobs.past_run_at(job.spec, now) if run_at_set else None
    if past:
        warnings.append(past)
    data = views.job_detail(job, now, warnings, sees_payloads(request))
    data["notify"] = [r.view() for r in await notifications(s).job_notify(job.id)]
    return data


@routes.post("/v1/jobs")
async def create_job(request: web.Request) -> web.Response:
    no_query(request)
    body = await read_json(request, config(request).api_max_body, required=True)
    spec = jobs.validate_job(body, allowed_hosts=destinations(config(request)))
    job = await jobs.create_job(store(request), spec, limits(request))
    headers = {"Location": f"/v1/jobs/{job.id}"}
    return _json(await _detail(request, job, run_at_set=True), 201, headers)


@routes.get("/v1/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    q = Query(request, {"type", "paused", "name_prefix", "limit", "cursor"})
    type_, paused, prefix = api_jobs(q)
    limit = q.integer("limit", 1, MAX_PAGE, 100)
    token = q.text("cursor")
    q.done()
    assert limit is not None
    fhash = cursor.filters_hash("jobs", {"type": type_, "paused": paused, "prefix": prefix})
    after_id = cursor.parse_id_key(cursor.decode(token, fhash)) if token else 0
    found = await store(request).list_jobs(
        type=type_, paused=paused, name_prefix=prefix, after_id=after_id, limit=limit + 1
    )
    more = len(found) > limit
    found = found[:limit]
    next_cursor = cursor.encode([found[-1].id], fhash) if more else None
    payloads = sees_payloads(request)
    return _json({"jobs": [views.job(j, payloads) for j in found], "next_cursor": next_cursor})


@routes.get(JOB)
async def get_job(request: web.Request) -> web.Response:
    no_query(request)
    job = await find_job(store(request), path_id(request, "job"))
    return _json(await _detail(request, job))


@routes.patch(JOB)
async def update_job(request: web.Request) -> web.Response:
    no_query(request)
    job_id = path_id(request, "job")
    body = await read_json(request, config(request).api_max_body, required=True)
    allowed = destinations(config(request))
    job = await jobs.update_job(store(request), job_id, body, limits(request), allowed)
    given = isinstance(body, dict) and "run_at" in body
    return _json(await _detail(request, job, run_at_set=given))


@routes.delete(JOB)
async def delete_job(request: web.Request) -> web.Response:
    no_query(request)
    job_id = path_id(request, "job")
    cancelled = await jobs.delete_job(store(request), job_id)
    return _json({"id": job_id, "deleted": True, "cancelled_runs": cancelled})


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    no_query(request)
    job_id = path_id(request, "job")
    reason = None
    if paused:  # an optional body: {"reason": "..."}
        body = await read_json(request, config(request).api_max_body, required=False)
        reason = jobs.validate_pause({} if body is NO_BODY else body)
    job = await jobs.set_paused(store(request), job_id, paused, limits(request), reason)
    return _json(await _detail(request, job))


@routes.post(JOB + "/pause")
async def pause_job(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


@routes.post(JOB + "/resume")
async def resume_job(request: web.Request) -> web.Response:
    return await _set_paused(request, False)


@routes.post(JOB + "/trigger")
async def trigger_job(request: web.Request) -> web.Response:
    no_query(request)
    job_id = path_id(request, "job")
    body = await read_json(request, config(request).api_max_body, required=False)
    key = request.headers.get("Idempotency-Key")
    payload = jobs.validate_trigger({} if body is NO_BODY else body, key)
    s = store(request)
    run_id, created = await jobs.trigger_job(s, job_id, payload, key)
    row, attempts = await runs.run_detail(s, run_id)
    data = views.run_detail(row, attempts, await runs.waiting_for(s, row), sees_payloads(request))
    return _json(data, 201 if created else 200, {"Location": f"/v1/runs/{run_id}"})


@routes.post(JOB + "/backfill")
async def backfill_job(request: web.Request) -> web.Response:
    """Runs at the instants in [from, to) that have none; dry_run counts them only."""
    no_query(request)
    job_id = path_id(request, "job")
    body = await read_json(request, config(request).api_max_body, required=True)
    start, end, dry_run = jobs.validate_backfill(body)
    done = await jobs.backfill(store(request), job_id, start, end, dry_run)
    return _json(views.backfill(job_id, done, dry_run), 200 if dry_run else 201)


@routes.get("/v1/schedule/preview")
async def preview(request: web.Request) -> web.Response:
    q = Query(request, {"cron", "timezone", "count", "after"})
    expression = q.text("cron")
    zone = q.text("timezone", MAX_ZONE) or "UTC"
    count = q.integer("count", 1, PREVIEW_MAX, 10)
    after = q.instant("after")
    q.done()
    assert count is not None
    if expression is None:
        raise InvalidSpec("cron", "is required")
    sched = schedule.parse_cron(expression, zone, "cron")
    start: datetime = after or await store(request).now()
    try:
        instants = schedule.preview(sched, start, count)
    except (OverflowError, ValueError):
        raise InvalidSpec("after", "is too close to the end of supported time") from None
    return _json({"cron": sched.expression, "timezone": zone, "instants": instants})
