"""The API's /metrics (with the database-wide gauges), /healthz and /readyz.

Database-wide gauges come from the API only, refreshed from one query right before each
scrape, so several supervisors never multiply them. /readyz is computed at most once a
second and shared by concurrent callers (SharedReadiness); its details need a token.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from supervisor.core.db import Pool
from supervisor.core.health import SharedReadiness, database_snapshot, readiness
from supervisor.core.httpd import bearer_check, health_routes
from supervisor.core.metrics import Metrics
from supervisor.core.store import Store


def observability_routes(
    pool: Pool,
    max_lag: float,
    metrics: Metrics,
    tokens: Sequence[str],
    ready: SharedReadiness | None = None,
) -> list[web.RouteDef]:
    """`tokens`: the `api_tokens` entries whose holders see /readyz's details."""
    metrics.database_gauges()
    store = Store(pool)

    async def refresh() -> None:
        metrics.snapshot = await database_snapshot(store)

    shared = ready or SharedReadiness(lambda: readiness(pool, max_lag))
    return health_routes(shared.get, metrics, details=bearer_check(tokens), before_scrape=refresh)
