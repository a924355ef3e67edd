"""Request hygiene in front of authentication: what a web page or a rebound DNS name could send.

- `Host` must name this API (loopback, the api_listen host, or api_allowed_hosts): a page
  whose name was rebound to 127.0.0.1 gets 421 (/healthz and /readyz stay open to probes).
- On /v1: `Sec-Fetch-Site: cross-site|same-site` or an `Origin` other than the Host is 403,
  and a body that is not application/json is 415, so no HTML form and no CORS-simple request
  gets a body parsed.
- Failed bearer tokens and dashboard logins are counted per client address (the TCP peer,
  never a Forwarded/X-Forwarded-For header): past api_auth_throttle a minute, 429 + Retry-After.
- 401 and 403 answers are logged with the client address and the path (never the token).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from api.problems import ApiError, Handler
from supervisor.core.config import Config, parse_listen
from supervisor.core.log import log_event

log = logging.getLogger("punchclock.api")
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
API_PREFIX = "/v1/"
AUTH_PATHS = ("/v1/", "/metrics")  # where a bearer token is checked (api.auth)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
THROTTLE_LIMIT = 10  # failures per client address (api_auth_throttle's default) ...
THROTTLE_WINDOW = 60.0  # ... within this many seconds
THROTTLE_CLIENTS = 10_000  # addresses remembered at most (least recently failed forgotten)


class Throttle:
    """Failed authentications per client address in a sliding window, in memory, bounded."""

    def __init__(
        self,
        limit: int = THROTTLE_LIMIT,
        window: float = THROTTLE_WINDOW,
        max_clients: int = THROTTLE_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.max_clients, self._clock = limit, window, max_clients, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str | None) -> int | None:
        """Seconds until `client` may try again, None if it is not throttled."""
        times = self._failures.get(client or "")
        if times is None or not self.limit:
            return None
        now = self._clock()
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - now))

    def failed(self, client: str | None) -> None:
        if not self.limit:  # api_auth_throttle = 0: no limit
            return
        key = client or ""
        times = self._failures.pop(key, None) or deque(maxlen=self.limit)
        times.append(self._clock())
        self._failures[key] = times  # most recent last
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)


THROTTLE = web.AppKey("auth_throttle", Throttle)


def throttled(request: web.Request) -> int | None:
    """Retry-After seconds if this request's client is throttled (the API's or, from the
    dashboard sub-application, its parent's counter)."""
    return request.config_dict[THROTTLE].retry_after(request.remote)


def auth_failed(request: web.Request) -> None:
    request.config_dict[THROTTLE].failed(request.remote)


def host_name(value: str) -> str | None:
    """The host of a Host header or an Origin's netloc, lower case, without port or brackets;
    None if malformed."""
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        name, rest = text[1:end], text[end + 1 :]
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        return name
    name, sep, port = text.rpartition(":")
    if not sep:
        name = text
    elif not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """Which Host names reach this API. `any_host`: api_listen is a wildcard and no
    api_allowed_hosts are set, so every name is accepted (tokens still guard everything)."""

    def __init__(self, cfg: Config) -> None:
        listen = parse_listen(cfg.api_listen)[0].lower() if cfg.api_listen else ""
        self.names = frozenset(h.lower().rstrip(".") for h in cfg.api_allowed_hosts if h)
        if listen not in WILDCARDS:
            self.names |= {listen}
        self.any_host = listen in WILDCARDS and not cfg.api_allowed_hosts
        # A TLS-terminating proxy in front: its X-Forwarded-Proto is believed, nobody else's.
        self.behind_proxy = cfg.behind_proxy

    def allows(self, name: str | None) -> bool:
        if name is None:
            return False
        if self.any_host or _is_loopback(name) or name in self.names:
            return True
        return any(n.startswith(".") and (name.endswith(n) or name == n[1:]) for n in self.names)


def config_warnings(cfg: Config) -> list[str]:
    """What `punchclock check` should say about the Host check."""
    if HostPolicy(cfg).any_host:
        return [
            f"api_listen is {cfg.api_listen}: without api_allowed_hosts the API accepts any "
            "Host header (no DNS-rebinding check); set api_allowed_hosts to the names clients use"
        ]
    return []


def same_origin(request: web.Request, origin: str) -> bool:
    """An Origin (or Referer) names this API: its host:port is the Host header, or its host is
    one of the configured api_allowed_hosts. "null" and anything unparsable are foreign."""
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:
        return False
    host = request.headers.get("Host", "").strip().lower()
    if netloc and netloc == host:
        return True
    policy: HostPolicy = request.config_dict[HOST_POLICY]
    name = host_name(netloc) if netloc else None
    return name is not None and name in policy.names and not _is_loopback(name)


HOST_POLICY = web.AppKey("host_policy", HostPolicy)


def gate_middleware(cfg: Config) -> Middleware:
    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in OPEN_PATHS:
            return await handler(request)
        try:
            _check_host(request)
            if path.startswith(API_PREFIX):
                _check_site(request)
                _check_content_type(request)
            if path.startswith(AUTH_PATHS) and (wait := throttled(request)) is not None:
                raise ApiError(
                    429,
                    "too many failed authentications from this address; retry later",
                    headers={"Retry-After": str(wait)},
                )
            return await handler(request)
        except ApiError as exc:
            if exc.status == 401 and "Authorization" in request.headers:
                auth_failed(request)  # a wrong token, not a forgotten one
            if exc.status in (401, 403, 421, 429):
                _log_refusal(request, exc.status, exc.detail)
            raise

    return gate


def _log_refusal(request: web.Request, status: int, detail: str) -> None:
    log_event(
        log,
        "api_refused",
        level=logging.WARNING,
        status=status,
        method=request.method,
        path=request.path,
        remote=request.remote,
        detail=detail,  # the problem's text: never a token or a header's value
    )


def _check_host(request: web.Request) -> None:
    policy: HostPolicy = request.config_dict[HOST_POLICY]
    if not policy.allows(host_name(request.headers.get("Host", ""))):
        raise ApiError(
            421,
            "Host: this API is not served under that name; use a loopback address, the "
            "api_listen host, or a name listed in api_allowed_hosts",
        )


def _check_site(request: web.Request) -> None:
    site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        raise ApiError(403, f"Sec-Fetch-Site: {site} requests to the API are refused")
    origin = request.headers.get("Origin")
    if origin is not None and not same_origin(request, origin):
        raise ApiError(403, "Origin: requests from another site to the API are refused")


def _check_content_type(request: web.Request) -> None:
    if request.method not in WRITE_METHODS:
        return
    if not request.body_exists:
        return  # no body (trigger, pause...): nothing parsed, whatever the header claims
    given = request.headers.get("Content-Type")
    if given is None or request.content_type != "application/json":
        raise ApiError(
            415,
            "Content-Type: a request body must be application/json"
            + (f", not {request.content_type}" if given is not None else "; the header is missing"),
        )
