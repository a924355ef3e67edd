"""The API's /metrics (with the database-wide gauges), /healthz and /readyz.

Database-wide gauges come from the API only, refreshed from one query right before each
scrape, so several supervisors never multiply them.
"""

from __future__ import annotations

from aiohttp import web

from supervisor.core.db import Pool
from supervisor.core.health import database_snapshot
from supervisor.core.httpd import health_routes
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store


def observability_routes(pool: Pool, max_lag: float, metrics: Metrics) -> list[web.RouteDef]:
    metrics.database_gauges()
    store = Store(pool)

    async def refresh() -> None:
        metrics.snapshot = await database_snapshot(store)

    return health_routes(pool, max_lag, metrics, before_scrape=refresh)
