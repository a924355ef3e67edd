"""/v1/runs and /v1/workers: run history or, with upcoming=true, the plan ahead (keyset
pages), one run with its attempts, requeue (single and bulk), cancel, and the workers list."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from api import cursor, views
from api.auth import sees_payloads
from api.filters import RUN_FILTERS, api_runs
from api.params import Query, no_query, path_id
from api.state import store
from supervisor.core import runs

routes = web.RouteTableDef()
RUN = "/v1/runs/{id:[0-9]+}"
MAX_PAGE = 500
FILTERS = RUN_FILTERS  # the list's filters, and all the bulk requeue takes
WORKERS_RECENT_SECONDS = 24 * 3600.0
WORKERS_MAX = 1000


async def _detail(request: web.Request, run_id: int) -> dict[str, Any]:
    row, attempts = await runs.run_detail(store(request), run_id)
    waiting = await runs.waiting_for(store(request), row)
    return views.run_detail(row, attempts, waiting, sees_payloads(request))


@routes.get("/v1/runs")
async def list_runs(request: web.Request) -> web.Response:
    q = Query(request, FILTERS | {"upcoming", "limit", "cursor"}, repeatable=frozenset({"status"}))
    # History by default; upcoming=true lists the plan ahead. The mode is in the cursor's hash.
    filters = replace(api_runs(q), upcoming=q.boolean("upcoming") or False)
    limit = q.integer("limit", 1, MAX_PAGE, 100)
    token = q.text("cursor")
    q.done()
    assert limit is not None
    fhash = cursor.filters_hash("runs", filters.canonical())
    key = cursor.parse_run_key(cursor.decode(token, fhash)) if token else None
    rows = await runs.list_runs(store(request), filters, key, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    next_cursor = cursor.encode(cursor.run_key(last.scheduled_at, last.id), fhash) if last else None
    return web.json_response({"runs": [views.run(r) for r in rows], "next_cursor": next_cursor})


@routes.get(RUN)
async def get_run(request: web.Request) -> web.Response:
    no_query(request)
    return web.json_response(await _detail(request, path_id(request, "run")))


@routes.post(RUN + "/requeue")
async def requeue_run(request: web.Request) -> web.Response:
    no_query(request)
    run_id = path_id(request, "run")
    await runs.requeue_run(store(request), run_id)
    return web.json_response({"requeued": 1, "run": await _detail(request, run_id)})


@routes.post("/v1/runs/requeue")
async def requeue_runs(request: web.Request) -> web.Response:
    q = Query(request, FILTERS, repeatable=frozenset({"status"}))
    filters = api_runs(q)
    q.done()
    return web.json_response({"requeued": await runs.requeue_runs(store(request), filters)})


@routes.post(RUN + "/cancel")
async def cancel_run(request: web.Request) -> web.Response:
    no_query(request)
    run_id = path_id(request, "run")
    await runs.cancel_run(store(request), run_id)
    return web.json_response(await _detail(request, run_id))


@routes.get("/v1/workers")
async def list_workers(request: web.Request) -> web.Response:
    no_query(request)
    rows = await store(request).list_workers(WORKERS_RECENT_SECONDS, WORKERS_MAX)
    return web.json_response({"workers": [views.worker(r) for r in rows]})
