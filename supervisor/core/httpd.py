"""Health and metrics routes, and the supervisor's small HTTP side door on metrics_listen.

/readyz answers anyone with its status and a one-word reason; a bearer token of
`api_tokens` (any role) gets the details as well. A token that is not valid gets 401.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from supervisor.core.health import Readiness, public_view
from supervisor.core.metrics import CONTENT_TYPE, Metrics
from supervisor.core.tokenspec import parse_tokens

# Whether a request may see /readyz's details: True (a valid token), False (no token), or
# None (a token that is not valid: 401).
DetailsCheck = Callable[[web.Request], bool | None]


def bearer_check(entries: Sequence[str]) -> DetailsCheck:
    """Checks the request's bearer token against `api_tokens` entries, in constant time."""
    digests = [_digest(spec.secret) for spec in parse_tokens(tuple(entries))]

    def check(request: web.Request) -> bool | None:
        header = request.headers.get("Authorization")
        if header is None:
            return False
        scheme, _, given = header.partition(" ")
        digest = _digest(given.strip())
        found = False
        for d in digests:  # no early exit: the time does not depend on which
            found |= hmac.compare_digest(d, digest)
        return (found and scheme.lower() == "bearer") or None

    return check


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def _line(body: Any) -> str:
    """JSON ending in a newline: `curl /readyz` leaves the shell's prompt on a line of its own."""
    return json.dumps(body) + "\n"


def health_routes(
    ready: Callable[[], Awaitable[Readiness]],
    metrics: Metrics,
    *,
    details: DetailsCheck,
    before_scrape: Callable[[], Awaitable[None]] | None = None,
    local_details: Callable[[], dict[str, Any]] | None = None,
) -> list[web.RouteDef]:
    """/healthz, /readyz and /metrics, shared by the supervisor's side door and the API.

    `ready` computes (or returns a shared, recent) readiness; `details` says who sees more
    than the status and reason; `before_scrape` refreshes what the gauges read (the API's
    database snapshot); `local_details` adds what only this process knows to /readyz (jobs
    it cannot plan).
    """

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"}, dumps=_line)

    async def readyz(request: web.Request) -> web.Response:
        allowed = details(request)
        if allowed is None:
            return web.json_response(
                {"status": "unauthorized", "detail": "Authorization: the token is not valid"},
                dumps=_line,
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="punchclock", error="invalid_token"'},
            )
        ok, body = await ready()
        if local_details is not None:
            body.update(local_details())
        status = 200 if ok else 503
        body = body if allowed else public_view(ok, body)
        return web.json_response(body, status=status, dumps=_line)

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
