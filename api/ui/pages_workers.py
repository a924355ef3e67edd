"""The workers page: live supervisors and those gone within the last day."""

from __future__ import annotations

from aiohttp import web

from api.ui.common import render, store

routes = web.RouteTableDef()
RECENT_SECONDS = 24 * 3600.0
MAX_WORKERS = 1000


@routes.get("/workers")
async def workers(request: web.Request) -> web.StreamResponse:
    s = store(request)
    found = await s.list_workers(RECENT_SECONDS, MAX_WORKERS)
    return render(request, "workers.html", {"workers": found, "now": await s.now()})
