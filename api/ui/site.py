"""The dashboard as an aiohttp sub-application mounted under /ui/ by api.app.create_app:
templates (Jinja2, autoescaped), static files, the gate middleware and the pages.

Pages render whole documents; the same handlers answer htmx requests (HX-Request) with the
fragment the page names, so every page also works with JavaScript off.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

from api import permissions
from api.auth import ADMIN, OPERATOR, Tokens
from api.ui import fmt, live
from api.ui.guard import PREFIX, SESSION_KEY, SESSIONS, gate, session
from api.ui.session import Session, Sessions
from supervisor.core.config import Config
from supervisor.core.dashboard import Dashboard
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

HERE = Path(__file__).resolve().parent
DASH = web.AppKey("ui_dashboard", Dashboard)
UI_STORE = web.AppKey("ui_store", Store)
UI_CONFIG = web.AppKey("ui_config", Config)
UI_LIMITS = web.AppKey("ui_limits", PlanLimits)


def create_ui(cfg: Config, store: Store, limits: PlanLimits | None = None) -> web.Application:
    from api.ui import (
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
    for module in (
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
    ):
        app.add_routes(module.routes)
    return app


def dash(request: web.Request) -> Dashboard:
    return request.app[DASH]


def store(request: web.Request) -> Store:
    return request.app[UI_STORE]


def is_admin(request: web.Request) -> bool:
    return session(request).role == ADMIN


def may(request: web.Request, method: str, route: str) -> bool:
    """permissions.TABLE for this session: pages show a control only when it would work."""
    return permissions.can(session(request).role, method, route)


def render(
    request: web.Request, template: str, context: Mapping[str, Any], status: int = 200
) -> web.Response:
    """A page (or, for htmx, the fragment it names) with what every template uses."""
    full = {**common(request), **context}
    return aiohttp_jinja2.render_template(template, request, full, status=status)


def common(request: web.Request) -> dict[str, Any]:
    """What every template uses: the session's role and CSRF token, the prefix, the path."""
    s: Session | None = request.get(SESSION_KEY)  # absent on a request refused before it had one
    sessions = request.app[SESSIONS]
    role = s.role if s else None
    return {
        "prefix": PREFIX,
        "role": role,
        "actor": s.name if s else None,
        "admin": role == ADMIN,  # may create, edit and delete (jobs)
        "operator": permissions.allows(role, OPERATOR),  # may trigger, pause, cancel, requeue...
        "see_payloads": permissions.can_see_payloads(role),
        "csrf": sessions.csrf(s) if s else "",
        "path": request.path,
        "htmx": bool(request.headers.get("HX-Request")),
    }


def render_error(request: web.Request, status: int, detail: str) -> web.Response:
    title = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    context = {"status": status, "title": title, "detail": detail, "back": None}
    if status == 413:  # a form over api_max_body: what the limit is, and the way back to it
        limit = request.client_max_size
        context["title"] = "Form too large"
        context["detail"] = (
            f"This form was {_mib(request.content_length or 0)} as sent; the server takes at"
            f" most {_mib(limit)} ({limit} bytes, its api_max_body setting). Nothing was"
            " saved. A long payload is the usual cause: shorten it, or send it with the API"
            " or the CLI, which have the same limit."
        )
        if request.method == "POST":  # the form's own page (GET of the same path)
            context["back"] = request.path
    return render(request, "error.html", context, status)


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"
