"""The overview page (/ui/)."""

from __future__ import annotations

from aiohttp import web

from api.ui.site import dash, render

routes = web.RouteTableDef()


@routes.get("/")
async def overview(request: web.Request) -> web.StreamResponse:
    now = await dash(request).now()
    return render(request, "overview.html", {"now": now})
