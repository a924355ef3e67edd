"""The dashboard as an aiohttp sub-application mounted under /ui/ by api.app.create_app:
templates (Jinja2, autoescaped), static files, the gate middleware and the pages.

Pages render whole documents; the same handlers answer htmx requests (HX-Request) with the
fragment the page names, so every page also works with JavaScript off. This module only
composes: what pages share is in common.py, which imports no page.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web

from api.auth import Tokens
from api.ui import (
    fmt,
    live,
    pages_auth,
    pages_backfill,
    pages_bulk,
    pages_deliveries,
    pages_edit,
    pages_job,
    pages_jobs,
    pages_overview,
    pages_runs,
    pages_workers,
)
from api.ui.common import DASH, UI_CONFIG, UI_LIMITS, UI_STORE, render_error
from api.ui.guard import SESSIONS, gate
from api.ui.session import Sessions
from supervisor.core.config import Config
from supervisor.core.dashboard import Dashboard
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

HERE = Path(__file__).resolve().parent
PAGES = (
    pages_auth,
    pages_overview,
    pages_bulk,
    pages_backfill,
    pages_edit,
    pages_jobs,
    pages_job,
    pages_runs,
    pages_workers,
    pages_deliveries,
)


def create_ui(cfg: Config, store: Store, limits: PlanLimits | None = None) -> web.Application:
    app = web.Application(middlewares=[gate(render_error)])
    tokens = Tokens.parse(cfg.api_tokens)
    app[SESSIONS] = Sessions(tokens, cfg.session_secret, cfg.session_idle_timeout)
    app[DASH] = Dashboard.over(store)
    app[UI_STORE] = store
    app[live.HUB] = live.Hub(store)  # the run pages' live streams
    app[pages_overview.SNAPSHOT] = pages_overview.day_snapshot()
    app[pages_jobs.LAST] = pages_jobs.last_snapshot()
    app[UI_CONFIG] = cfg
    app[UI_LIMITS] = limits or PlanLimits()
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        filters=fmt.FILTERS,
        default_helpers=False,
    )
    app.router.add_static("/static/", HERE / "static", append_version=False)
    for module in PAGES:
        app.add_routes(module.routes)
    return app
