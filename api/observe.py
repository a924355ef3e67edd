"""The API's /metrics (with the database-wide gauges), /healthz and /readyz.

Database-wide gauges come from the API only, refreshed from one query right before each
scrape, so several supervisors never multiply them.
"""

from __future__ import annotations

import asyncpg
from aiohttp import web

from supervisor.health import database_snapshot, readiness
from supervisor.metrics import CONTENT_TYPE, Metrics
from supervisor.store import Store


def observability_routes(
    pool: asyncpg.Pool, max_lag: float, metrics: Metrics
) -> list[web.RouteDef]:
    metrics.database_gauges()
    store = Store(pool)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_: web.Request) -> web.Response:
        ok, body = await readiness(pool, max_lag)
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_(_: web.Request) -> web.Response:
        metrics.snapshot = await database_snapshot(store)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_)]
