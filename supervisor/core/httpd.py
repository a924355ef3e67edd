"""Health and metrics routes, and the supervisor's small HTTP side door on metrics_listen."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from aiohttp import web

from supervisor.core.health import readiness
from supervisor.core.metrics import CONTENT_TYPE, Metrics


def health_routes(
    pool: asyncpg.Pool,
    max_lag: float,
    metrics: Metrics,
    before_scrape: Callable[[], Awaitable[None]] | None = None,
    local_details: Callable[[], dict[str, Any]] | None = None,
) -> list[web.RouteDef]:
    """/healthz, /readyz and /metrics, shared by the supervisor's side door and the API.

    `before_scrape` refreshes what the gauges read (the API's database snapshot);
    `local_details` adds what only this process knows to /readyz (jobs it cannot plan).
    """

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_: web.Request) -> web.Response:
        ok, body = await readiness(pool, max_lag)
        if local_details is not None:
            body.update(local_details())
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_(_: web.Request) -> web.Response:
        if before_scrape is not None:
            await before_scrape()
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_)]


async def start_side_door(host: str, port: int, routes: list[web.RouteDef]) -> web.AppRunner:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
