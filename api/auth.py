"""Bearer-token authentication with two roles: `read` (GET only) and `admin` (everything).

Without configured tokens the API must listen on loopback only (serve() refuses anything
else) and every loopback caller is admin. Tokens are compared in constant time and never
logged.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from api.problems import ApiError, Handler
from supervisor.core.config import ConfigError

READ, ADMIN = "read", "admin"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PROTECTED_PREFIX = "/v1/"
# /metrics names jobs and counts: it needs a token too (read is enough). /healthz and
# /readyz stay open for load balancers and systemd checks.
PROTECTED_PATHS = frozenset({"/metrics"})
# Where the role is kept on the request (aiohttp >= 3.13 wants typed keys; older has none).
ROLE_KEY: Any = web.RequestKey("role", str) if hasattr(web, "RequestKey") else "punchclock_role"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="punchclock"'}


@dataclass(frozen=True)
class Tokens:
    """(role, sha256 of the token) pairs; hashing gives every comparison the same length."""

    entries: tuple[tuple[str, bytes], ...]

    @classmethod
    def parse(cls, specs: tuple[str, ...] | list[str]) -> Tokens:
        entries = []
        for spec in specs:
            role, sep, secret = spec.partition(":")
            if not sep or role not in (READ, ADMIN) or not secret:
                raise ConfigError("api_tokens: each entry is read:TOKEN or admin:TOKEN")
            entries.append((role, _digest(secret)))
        return cls(tuple(entries))

    def role_of(self, token: str) -> str | None:
        given = _digest(token)
        found = None
        for role, digest in self.entries:  # no early exit: the time does not depend on which
            if hmac.compare_digest(digest, given) and found != ADMIN:
                found = role
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, tokens: Tokens) -> None:
    """Refuse to serve without authentication anywhere but loopback."""
    if not tokens.entries and not is_loopback(host):
        raise ConfigError(
            f"api_listen: refusing to listen on {host} without API tokens; configure "
            "api_tokens (--api-token ROLE:TOKEN) or listen on a loopback address"
        )


def auth_middleware(tokens: Tokens) -> Middleware:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not (request.path.startswith(PROTECTED_PREFIX) or request.path in PROTECTED_PATHS):
            return await handler(request)
        role = _authenticate(request, tokens)
        if request.method not in READ_METHODS and role != ADMIN:
            raise ApiError(403, f"the {role} role may only read; this needs an admin token")
        request[ROLE_KEY] = role
        return await handler(request)

    return auth


def _authenticate(request: web.Request, tokens: Tokens) -> str:
    if not tokens.entries:
        # Without tokens the listener is loopback-only; a proxied or odd peer is refused too.
        if request.remote is None or not is_loopback(request.remote):
            raise ApiError(403, "unauthenticated access is allowed from loopback only")
        return ADMIN
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise ApiError(401, "Authorization: a bearer token is required", headers=_CHALLENGE)
    role = tokens.role_of(credentials.strip())
    if role is None:
        raise ApiError(
            401,
            "Authorization: the bearer token is not valid",
            headers={"WWW-Authenticate": 'Bearer realm="punchclock", error="invalid_token"'},
        )
    return role
