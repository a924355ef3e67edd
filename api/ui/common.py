"""What the dashboard's pages share: the application's keys and their accessors, rendering
(a page, or the fragment htmx asks for, and the error page), the way back after a form, the
job a path names, confirmations, and payload downloads.

A leaf under the pages: no page module imports another, and site.py only composes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import aiohttp_jinja2
from aiohttp import web

from api import permissions
from api.auth import ADMIN, OPERATOR, sees_payloads
from api.request import find_job
from api.ui.guard import PREFIX, SESSION_KEY, SESSIONS, Refused, session
from api.ui.session import Session
from supervisor.core.config import Config
from supervisor.core.dashboard import Dashboard
from supervisor.core.domain import Job
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

DASH = web.AppKey("ui_dashboard", Dashboard)
UI_STORE = web.AppKey("ui_store", Store)
UI_CONFIG = web.AppKey("ui_config", Config)
UI_LIMITS = web.AppKey("ui_limits", PlanLimits)
DONE = {  # ?done=...&job=...&run=...: the confirmation a job action's redirect shows
    "created": "Created {job}.",
    "saved": "Saved {job}.",
    "paused": "Paused {job}.",
    "resumed": "Resumed {job}.",
    "triggered": "Triggered {job}: run #{run} is due now.",
    "deleted": "Deleted {job}; its waiting runs were cancelled.",
}


def dash(request: web.Request) -> Dashboard:
    return request.app[DASH]


def store(request: web.Request) -> Store:
    return request.app[UI_STORE]


def is_admin(request: web.Request) -> bool:
    return session(request).role == ADMIN


# ---------------------------------------------------------------- rendering


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


# ---------------------------------------------------------------- pages' helpers


def safe_next(value: object) -> str:
    """Where to go after login or a form: a dashboard path only (never another site)."""
    text = str(value or "")
    if text.startswith(PREFIX) and not text.startswith(("//", "/\\")) and "\\" not in text:
        return text
    return PREFIX


def back_of(value: object) -> str:
    """A form's or link's `back` (a dashboard path), or the jobs list."""
    return safe_next(value) if value else PREFIX + "jobs"


async def job_of(request: web.Request) -> Job:
    """The job the path's {id} names (request.find_job: NotFound, a 404 page)."""
    return await find_job(store(request), int(request.match_info["id"]))


def notice(request: web.Request) -> str | None:
    """The confirmation of a job action (DONE), from the redirect's query."""
    template = DONE.get(request.query.get("done", ""))
    if template is None:
        return None
    return template.format(
        job=request.query.get("job", "the job"), run=request.query.get("run", "?")
    )


def payload_download(request: web.Request, value: Any, filename: str) -> web.Response:
    """A job's or a run's payload as a JSON download (pages show fmt.SHOWN characters)."""
    if not sees_payloads(request):  # permissions.TABLE lists the route for operators too
        raise Refused(403, "Payloads are withheld from read sessions.")
    return web.Response(
        text=json.dumps(value, indent=2, sort_keys=True),
        content_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
