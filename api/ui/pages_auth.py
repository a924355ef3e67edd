"""Login with an API token (read or admin), and logout."""

from __future__ import annotations

import logging

from aiohttp import web

from api.gate import auth_failed, throttled
from api.ui.common import render, safe_next
from api.ui.guard import PREFIX, SESSIONS, redirect, session, set_session
from supervisor.core.log import log_event

log = logging.getLogger("punchclock.ui")
routes = web.RouteTableDef()


@routes.get("/login")
async def login_page(request: web.Request) -> web.StreamResponse:
    target = safe_next(request.query.get("next"))
    if session(request).role is not None:
        return redirect(target)
    return render(request, "login.html", {"next": target, "error": None})


@routes.post("/login")
async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    target = safe_next(form.get("next"))
    sessions = request.app[SESSIONS]
    token = str(form.get("token", "")).strip()
    if token and (wait := throttled(request)) is not None:
        # Shared with the API's bearer failures: no guessing through either door.
        log_event(log, "ui_login_throttled", level=logging.WARNING, remote=request.remote)
        error = f"Too many failed logins from this address; try again in {wait} s."
        page = render(request, "login.html", {"next": target, "error": error}, 429)
        page.headers["Retry-After"] = str(wait)
        return page
    opened = sessions.login(token) if token else None
    if opened is None:
        if token:
            auth_failed(request)
        log_event(
            log, "ui_login_failed", level=logging.WARNING, remote=request.remote, path=request.path
        )
        error = "Enter an API token." if not token else "That token is not valid."
        return render(request, "login.html", {"next": target, "error": error}, 401)
    log_event(log, "ui_login", role=opened.role, remote=request.remote)
    response = redirect(target)
    set_session(request, response, opened)
    return response


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    sessions = request.app[SESSIONS]
    response = redirect(PREFIX + "login")
    set_session(request, response, sessions.new(None))
    return response
