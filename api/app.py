"""The management API process: composes the routes and middlewares, and serves them.

`create_app` does no I/O (the caller owns the pool); `serve` is `punchclock api`: it checks
the exposure rules and the schema, listens, logs where, and stops cleanly on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from api import openapi, routes_channels, routes_groups, routes_jobs, routes_runs
from api.auth import ACTOR_KEY, ROLE_KEY, Tokens, auth_middleware, check_exposure
from api.gate import HOST_POLICY, THROTTLE, HostPolicy, Throttle, config_warnings, gate_middleware
from api.observe import observability_routes
from api.problems import Handler, error_middleware
from api.state import CONFIG, LIMITS, STORE
from api.tls import check_wire, server_context
from api.ui.site import create_ui
from supervisor.core.config import Config, parse_listen
from supervisor.core.db import CONNECT_ERRORS, create_pool
from supervisor.core.errors import PunchclockError, SchemaMismatch
from supervisor.core.log import log_event
from supervisor.core.metrics import Metrics
from supervisor.core.migrator import check_schema, migrate, pending_migrations
from supervisor.core.planning import PlanLimits
from supervisor.core.procsafe import undumpable
from supervisor.core.secretfile import generated_admin_token
from supervisor.core.store import Store

log = logging.getLogger("punchclock.api")
# The longest request line served (aiohttp's default is 8190 bytes): a URL with every query
# parameter at its documented maxLength, percent-encoded, fits, so an over-long value gets
# the 422 that names it rather than the HTTP layer's bare 400.
MAX_REQUEST_LINE = 64 * 1024


@web.middleware
async def request_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One line per request: method, path (never the query, headers or body), status, and
    who: the role and the name of the token (or of a dashboard session's token)."""
    started = time.monotonic()
    response = await handler(request)
    log_event(
        log,
        "http_request",
        method=request.method,
        path=request.path,
        status=response.status,
        role=request.get(ROLE_KEY),
        actor=request.get(ACTOR_KEY),  # the token's name (a session's: its token's)
        duration_ms=round((time.monotonic() - started) * 1000, 2),
    )
    return response


def plan_limits(cfg: Config) -> PlanLimits:
    return PlanLimits(horizon=timedelta(seconds=cfg.plan_horizon), max_runs=cfg.plan_max_runs)


def create_app(
    cfg: Config, store: Store, *, extra_routes: list[web.RouteDef] | None = None
) -> web.Application:
    """The API application. `extra_routes` (metrics, health) are served without auth.
    ConfigError without api_tokens: there is no tokenless mode (serve() generates one)."""
    tokens = Tokens.parse(cfg.api_tokens)
    check_exposure(tokens)
    app = web.Application(
        client_max_size=cfg.api_max_body,
        middlewares=[
            request_log,
            error_middleware(cfg.api_max_body),
            gate_middleware(cfg),  # Host, cross-site, Content-Type, throttling: before auth
            auth_middleware(tokens),
        ],
    )
    app[HOST_POLICY] = HostPolicy(cfg)
    app[THROTTLE] = Throttle(cfg.api_auth_throttle)  # shared with the dashboard's login
    app[CONFIG] = cfg
    app[STORE] = store
    app[LIMITS] = plan_limits(cfg)
    app.add_routes(routes_jobs.routes)
    app.add_routes(routes_runs.routes)
    app.add_routes(routes_channels.routes)
    app.add_routes(routes_groups.routes)
    app.add_routes(openapi.routes)
    app.add_subapp("/ui/", create_ui(cfg, store, app[LIMITS]))
    if extra_routes:
        app.add_routes(extra_routes)
    return app


async def serve(
    cfg: Config,
    *,
    auto_migrate: bool = False,
    extra_routes: list[web.RouteDef] | None = None,
    stop: asyncio.Event | None = None,
    on_listening: Callable[[list[str]], None] | None = None,
) -> int:
    """Run the API until SIGTERM/SIGINT (or `stop`). Returns the exit status."""
    undumpable()  # its tokens and database URL: not for a same-uid process to read in /proc
    cfg, token_file = with_admin_token(cfg)
    tokens = Tokens.parse(cfg.api_tokens)
    host, port = parse_listen(cfg.api_listen)
    check_wire(cfg)  # no tokens in clear over a network
    tls = server_context(cfg)
    if auto_migrate and cfg.pooled:  # migrations hold a session advisory lock
        raise PunchclockError(
            "--migrate behind a transaction pooler: run `punchclock migrate` with "
            "listen_database_url (a direct connection) instead"
        )
    try:
        pool = await create_pool(cfg.database_url, min_size=1, max_size=10, pooled=cfg.pooled)
    except CONNECT_ERRORS as exc:
        raise PunchclockError(f"cannot connect to the database: {exc}") from None
    runner: web.AppRunner | None = None
    try:
        async with pool.acquire() as conn:
            if auto_migrate:
                await migrate(conn)
            pending = await pending_migrations(conn)
        try:
            check_schema(pending)
        except SchemaMismatch as exc:
            raise PunchclockError(str(exc)) from None
        metrics = Metrics("api")
        # /readyz's details go to holders of the same tokens the API accepts.
        health = observability_routes(pool, cfg.ready_max_lag, metrics, cfg.api_tokens)
        routes = [*(extra_routes or []), *health]
        app = create_app(cfg, Store(pool), extra_routes=routes)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, max_line_size=MAX_REQUEST_LINE
        )
        await runner.setup()
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
        urls = [_url(addr, tls is not None) for addr in runner.addresses]
        log_event(
            log,
            "api_listening",
            urls=urls,
            auth="bearer tokens",
            tokens=len(tokens.entries),
        )
        if token_file is not None:  # where, never what: the CLI reads it from there too
            log_event(
                log,
                "api_token_generated",
                path=str(token_file),
                detail="no api_tokens configured: callers need the admin token in this file",
            )
        for warning in config_warnings(cfg):
            log_event(log, "api_host_check_off", level=logging.WARNING, detail=warning)
        if on_listening is not None:
            on_listening(urls)
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log_event(log, "api_stopping")
        return 0
    finally:
        if runner is not None:
            await runner.cleanup()
        await pool.close()


def with_admin_token(cfg: Config) -> tuple[Config, Path | None]:
    """`cfg` as is when it has api_tokens; else with the admin token of this user's state
    directory (created the first time, shared with `punchclock up`) and that file's path."""
    if cfg.api_tokens:
        return cfg, None
    path, token = generated_admin_token()
    return replace(cfg, api_tokens=(f"admin:local-admin:{token}",)), path


def _url(addr: Any, secure: bool = False) -> str:
    host, port = addr[0], addr[1]  # (host, port) for IPv4, (host, port, flow, scope) for IPv6
    host = f"[{host}]" if ":" in str(host) else host
    return f"{'https' if secure else 'http'}://{host}:{port}"
