"""The supervisor's small HTTP side door: /metrics, /healthz and /readyz on metrics_listen."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from supervisor.health import readiness
from supervisor.metrics import CONTENT_TYPE, Metrics


def health_routes(pool: asyncpg.Pool, max_lag: float, metrics: Metrics) -> list[web.RouteDef]:
    """Routes shared by the supervisor's metrics port and the API."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_: web.Request) -> web.Response:
        ok, body = await readiness(pool, max_lag)
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_)]


async def start_side_door(host: str, port: int, routes: list[web.RouteDef]) -> web.AppRunner:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
