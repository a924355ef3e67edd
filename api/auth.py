"""Bearer-token authentication: each token has a name and a role (read < operator < admin);
what each role may do is api/permissions.py's table, enforced here for everything but /ui/.

There is no tokenless mode: loopback is no trust boundary (other local users, containers
sharing the network, a same-host proxy), so every caller needs a token (`punchclock api`
generates an admin one when none is configured, see serve()). Forwarded/X-Forwarded-For
carry no authority. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from api import permissions
from api.problems import ApiError, Handler
from supervisor.core.config import ConfigError
from supervisor.core.tokenspec import ADMIN, OPERATOR, READ, parse_tokens

__all__ = ["ADMIN", "OPERATOR", "READ", "Caller", "Tokens", "auth_middleware"]
PROTECTED_PREFIX = "/v1/"
# Unrouted paths under these answer 401 before 404 (nothing to learn without a token).
# /metrics names jobs and counts: it needs a token too (read is enough); /healthz and
# /readyz stay open for load balancers and systemd checks (permissions.TABLE says so).
PROTECTED_PATHS = frozenset({"/metrics"})
UI_PREFIX = "/ui/"  # the dashboard's gate (ui/guard.py) applies the same table to sessions
# Where the role and the token's name are kept on the request (aiohttp >= 3.13 wants typed
# keys; older has none). ACTOR_KEY is what log lines and records call the caller.
ROLE_KEY: Any = web.RequestKey("role", str) if hasattr(web, "RequestKey") else "punchclock_role"
ACTOR_KEY: Any = web.RequestKey("actor", str) if hasattr(web, "RequestKey") else "punchclock_actor"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="punchclock"'}


@dataclass(frozen=True)
class Caller:
    role: str
    name: str


@dataclass(frozen=True)
class Tokens:
    """(role, name, sha256 of the token) entries; hashing gives every comparison the same
    length. Entries are supervisor.core.tokenspec's (names unique, one entry per token)."""

    entries: tuple[tuple[str, str, bytes], ...]

    @classmethod
    def parse(cls, specs: tuple[str, ...] | list[str]) -> Tokens:
        try:
            parsed = parse_tokens(specs)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(tuple((t.role, t.name, _digest(t.secret)) for t in parsed))

    def identify(self, token: str) -> Caller | None:
        given = _digest(token)
        found = None
        for role, name, digest in self.entries:  # no early exit: the time does not say which
            if hmac.compare_digest(digest, given):
                found = Caller(role, name)
        return found

    def role_of(self, token: str) -> str | None:
        caller = self.identify(token)
        return None if caller is None else caller.role


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(tokens: Tokens) -> None:
    """No tokens, no API: every request would be refused (create_app calls this)."""
    if not tokens.entries:
        raise ConfigError(
            "api_tokens: at least one token is required (`punchclock api` generates an admin "
            "token into its state directory when none is configured)"
        )


def auth_middleware(tokens: Tokens) -> Middleware:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(UI_PREFIX):
            return await handler(request)
        least = permissions.least_role(request)
        if least == permissions.PUBLIC:
            # Open routes still learn a valid caller (e.g. /readyz's details need a token).
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            found = tokens.identify(given.strip()) if scheme.lower() == "bearer" else None
            if found is not None:
                _remember(request, found)
            return await handler(request)
        if least == permissions.UNROUTED and not (
            request.path.startswith(PROTECTED_PREFIX) or request.path in PROTECTED_PATHS
        ):
            return await handler(request)
        caller = _authenticate(request, tokens)
        _remember(request, caller)
        if least is None:  # a route nobody listed: refused until it is (default deny)
            raise ApiError(403, f"{request.method} {request.path} is not open to any role")
        if least != permissions.UNROUTED and not permissions.allows(caller.role, least):
            what = f"{request.method} {permissions.route_of(request)}"
            raise ApiError(403, permissions.refusal(caller.role, caller.name, least, what))
        return await handler(request)

    return auth


def sees_payloads(request: web.Request) -> bool:
    """The payload policy (permissions.can_see_payloads) for this request's caller: an API
    token's role, or a dashboard session's (ui/guard.py sets the same key)."""
    return permissions.can_see_payloads(request.get(ROLE_KEY))


def _remember(request: web.Request, caller: Caller) -> None:
    request[ROLE_KEY] = caller.role
    request[ACTOR_KEY] = caller.name


def _authenticate(request: web.Request, tokens: Tokens) -> Caller:
    # No exception for loopback peers (nor for what Forwarded headers claim): a token always.
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise ApiError(401, "Authorization: a bearer token is required", headers=_CHALLENGE)
    caller = tokens.identify(credentials.strip())
    if caller is None:
        raise ApiError(
            401,
            "Authorization: the bearer token is not valid",
            headers={"WWW-Authenticate": 'Bearer realm="punchclock", error="invalid_token"'},
        )
    return caller
