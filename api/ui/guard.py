"""The dashboard's gate, one middleware: who may see a page, and which POSTs are accepted.

Every response gets the security headers (a CSP without inline scripts or styles). Without
API tokens only loopback callers get in, as admin; with tokens a page needs a session (else
the login page). A POST needs a same-origin Origin (or Referer) and the session's CSRF token.
Every request then needs the role api/permissions.py's table names for its route, the API's
own table (a route missing there is refused). Errors become HTML pages, with the status
the API would answer (request.STATUS, one table for both).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.typedefs import Middleware

from api import permissions
from api.auth import ACTOR_KEY, ROLE_KEY
from api.gate import HOST_POLICY, same_origin
from api.problems import Handler
from api.request import failure
from api.ui import forms
from api.ui.session import COOKIE, SECURE_COOKIE, SESSION_SECONDS, Session, Sessions
from supervisor.core.log import log_event

log = logging.getLogger("punchclock.ui")
PREFIX = "/ui/"
PUBLIC = (PREFIX + "login", PREFIX + "static/")
LOGOUT = PREFIX + "logout"
SESSIONS = web.AppKey("ui_sessions", Sessions)
SESSION_KEY: Any = web.RequestKey("ui_session", Session) if hasattr(web, "RequestKey") else "ui"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


class Refused(Exception):
    """A request the gate or a page refuses: rendered as an HTML error page."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def is_tls(request: web.Request) -> bool:
    """Served over TLS, or behind_proxy and the proxy says so (X-Forwarded-Proto: https)."""
    if request.secure:
        return True
    if not request.config_dict[HOST_POLICY].behind_proxy:
        return False
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return proto == "https"


def cookie_name(request: web.Request) -> str:
    """Over TLS the `__Secure-` name: a browser sets it only with Secure, from https."""
    return SECURE_COOKIE if is_tls(request) else COOKIE


def set_session(request: web.Request, response: web.StreamResponse, s: Session) -> None:
    sessions: Sessions = request.app[SESSIONS]
    response.set_cookie(
        cookie_name(request),
        sessions.encode(s),
        max_age=SESSION_SECONDS,
        path=PREFIX,
        httponly=True,
        samesite="Strict",
        secure=is_tls(request),
    )


def redirect(location: str) -> web.Response:
    """303 See Other: after a form POST the browser GETs the result (no resubmission)."""
    return web.Response(status=303, headers={"Location": location})


def session(request: web.Request) -> Session:
    s: Session = request[SESSION_KEY]
    return s


def gate(render_error: Any) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await _guarded(request, handler)
        except Refused as exc:
            response = render_error(request, exc.status, exc.detail)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = render_error(request, exc.status, exc.reason)
        except Exception as exc:
            known = failure(request, exc, body="form")
            if known is None:
                where = {"punchclock_fields": {"path": request.path}}
                log.exception("ui_internal_error", extra=where)
                response = render_error(request, 500, "Internal error; the server log has details.")
            else:  # the API's table (request.STATUS): a refused value is its 422 here too
                response = render_error(request, known.status, known.detail)
                response.headers.update(known.headers)
        if not response.prepared:  # a stream (SSE) has sent its headers already
            response.headers.update(HEADERS)
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    return middleware


async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    sessions: Sessions = request.app[SESSIONS]
    current = sessions.decode(request.cookies.get(cookie_name(request)))
    fresh = current is None
    if current is None:
        current = sessions.new(None)
    request[SESSION_KEY] = current
    request[ROLE_KEY] = current.role
    request[ACTOR_KEY] = current.name
    path = request.path
    public = path.startswith(PUBLIC)
    if request.method == "POST":
        await _check_post(request, sessions, current, fresh)
    elif current.role is None and not public:
        return _to_login(request)
    _check_role(request, current)
    if request.method == "POST" and path == LOGOUT and current.role is not None:
        sessions.revoke(current)  # this cookie, replayed, is refused from now on
    response = await handler(request)
    renewed = current if fresh else sessions.touch(current)  # the idle timeout restarts
    if (
        renewed is not None
        and not response.prepared
        and not path.startswith(PREFIX + "static/")
        and cookie_name(request) not in response.cookies
    ):
        set_session(request, response, renewed)
    return response


def _check_role(request: web.Request, s: Session) -> None:
    """The permission table, as the API applies it to tokens."""
    least = permissions.least_role(request)
    if least is None:  # a route nobody listed: refused until it is (default deny)
        raise Refused(403, "This page is not open to any role.")
    if least != permissions.UNROUTED and not permissions.allows(s.role, least):
        what = f"{request.method} {permissions.route_of(request)}"
        raise Refused(403, permissions.refusal(s.role, s.name, least, what))


def _to_login(request: web.Request) -> web.StreamResponse:
    target = f"{PREFIX}login?next={quote(request.path_qs, safe='')}"
    if request.headers.get("HX-Request"):
        return web.Response(status=204, headers={"HX-Redirect": target})
    return redirect(target)


async def _check_post(request: web.Request, sessions: Sessions, s: Session, fresh: bool) -> None:
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if not origin or not same_origin(request, origin):
        _refuse(request, "origin", "This form must be sent from the dashboard's own pages.")
    form = await forms.read(request, trusted=not fresh and s.role is not None)
    given = request.headers.get("X-CSRF-Token") or str(form.get("csrf", ""))
    if fresh or not sessions.csrf_ok(s, given):
        _refuse(request, "csrf", "The form has expired or was not sent by this dashboard.")
    if s.role is None and request.path not in (PREFIX + "login", LOGOUT):
        raise Refused(401, "Log in first.")


def _refuse(request: web.Request, check: str, detail: str) -> None:
    log_event(log, "ui_post_refused", level=logging.WARNING, check=check, path=request.path)
    raise Refused(403, detail)
