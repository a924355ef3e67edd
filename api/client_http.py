"""The CLI's HTTP transport to the management API (standard library only: urllib).

Its bearer token goes to the API's own origin (scheme, host, port) and nowhere else:
- a redirect to another origin (another host or port, or https -> http) is refused, never
  followed, so the Authorization header cannot be replayed there;
- plain http is refused to a host that is not loopback (the token would cross the network
  in clear) unless PUNCHCLOCK_API_ALLOW_HTTP=1 says the path is private;
- plain http never goes through an http_proxy from the environment.
HTTPS certificates are verified (a private CA: SSL_CERT_FILE=/path/ca.pem).
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPMessage
from typing import IO, Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ALLOW_HTTP_ENV = "PUNCHCLOCK_API_ALLOW_HTTP"
DEFAULT_PORTS = {"http": 80, "https": 443}
TOKEN_HINT = (
    "  give a token with --api-token TOKEN or PUNCHCLOCK_API_TOKEN (to a loopback --api-url "
    "without one, the CLI sends the admin token `punchclock up` and `punchclock api` keep in "
    "their state directory)"
)


class ClientError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, allow_http: bool | None = None) -> None:
    """Refuse a URL the token must not be sent to (ClientError, exit 2)."""
    scheme, host, _ = origin(url)
    if scheme not in DEFAULT_PORTS or not host:
        raise ClientError(f"--api-url: expected http(s)://HOST[:PORT], got {url!r}", EXIT_USAGE)
    if allow_http is None:
        allow_http = os.environ.get(ALLOW_HTTP_ENV, "") in ("1", "true", "yes")
    if scheme == "http" and not _loopback(host) and not allow_http:
        raise ClientError(
            f"--api-url: refusing plain http to {host}: the API token would cross the "
            f"network in clear; use https:// (or set {ALLOW_HTTP_ENV}=1 for a private path)",
            EXIT_USAGE,
        )


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within the API's origin only."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if origin(newurl) != origin(req.full_url):
            where = urllib.parse.urlsplit(newurl)
            raise ClientError(
                f"the API answered {code} with a redirect to another origin "
                f"({where.scheme}://{where.netloc}): not followed, so the token is not "
                "sent there; check --api-url"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class ApiClient:
    def __init__(
        self, url: str, token: str | None, timeout: float = 30.0, allow_http: bool | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        check_url(self.url, allow_http)
        handlers: list[urllib.request.BaseHandler] = [_SameOriginRedirects()]
        if origin(self.url)[0] == "http":  # a proxy would see the token in clear
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer; raises ClientError for a problem or no answer."""
        url = self.url + path
        pairs = [(k, v) for k, v in (query or []) if v is not None]
        if pairs:
            url += "?" + urllib.parse.urlencode(pairs)
        all_headers = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _problem(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach the API at {self.url}: {reason}") from None


def _problem(status: int, raw: bytes) -> ClientError:
    try:
        data = json.loads(raw)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    detail = data.get("detail") or raw[:200].decode("utf-8", "replace")
    errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
    if errors:  # the detail repeats them: one line per field instead
        lines = [f"{status} {data.get('title', 'error')}:"]
        lines += [f"  {e.get('field')}: {e.get('message')}" for e in errors]
    else:
        lines = [f"{status} {data.get('title', 'error')}: {detail}"]
    if status == 401:
        lines.append(TOKEN_HINT)
    code = EXIT_USAGE if status in (400, 413, 422) else EXIT_FAILED
    return ClientError("\n".join(lines), code)
