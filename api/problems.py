"""RFC 9457 problem details: every error the API answers is application/problem+json.

One middleware maps ApiError and aiohttp's HTTP errors (404 route, 405, 413) to a problem,
and domain errors by the table the dashboard uses too (request.STATUS: InvalidSpec(s) and
a value the database refuses 422, NotFound 404, Conflict 409, a lost database 503);
anything else is a logged 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from api.request import failure
from supervisor.core.errors import InvalidSpec

log = logging.getLogger("punchclock.api")
PROBLEM_JSON = "application/problem+json"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """An error with its HTTP status, raised by handlers and middlewares."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


def problem(
    status: int,
    detail: str,
    *,
    errors: list[InvalidSpec] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = [{"field": e.field, "message": e.message} for e in errors]
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type=PROBLEM_JSON,
        headers=headers,
    )


def invalid(errors: list[InvalidSpec]) -> web.Response:
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
    return problem(422, detail, errors=errors)


# Headers of aiohttp's own HTTP errors worth keeping (405 says which methods are allowed).
_KEEP_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")


def _from_http_exception(exc: web.HTTPException, max_body: int) -> web.Response:
    headers = {h: exc.headers[h] for h in _KEEP_HEADERS if h in exc.headers}
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        detail = f"body: the request body exceeds the limit of {max_body} bytes"
    elif isinstance(exc, web.HTTPNotFound):
        detail = "no such resource"
    elif isinstance(exc, web.HTTPMethodNotAllowed):
        detail = f"method {exc.method} is not allowed here; allowed: {headers.get('Allow', '')}"
    else:
        detail = exc.reason
    return problem(exc.status, detail, headers=headers)


def error_middleware(max_body: int) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return problem(exc.status, exc.detail, headers=exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _from_http_exception(exc, max_body)
        except Exception as exc:
            known = failure(request, exc)
            if known is not None:
                return problem(
                    known.status, known.detail, errors=known.errors, headers=known.headers
                )
            log.exception(
                "api_internal_error",
                extra={"punchclock_fields": {"method": request.method, "path": request.path}},
            )
            return problem(500, "internal error; the server log has the details")

    return errors
