"""The notifier's HTTP side: a client session that cannot reach refused addresses, bounded
response reads, and the Standard Webhooks retry rules.

Refused addresses (supervisor/core/egress.py) are checked where the connection is made: the
resolver drops them from every answer (a name that resolves or rebinds inward fails with
no address left), and the socket factory refuses the address each connect() is about to use,
which also covers address literals (aiohttp never asks the resolver about those). Redirects
are not followed (allow_redirects=False at every request), so a 3xx cannot lead elsewhere.
"""

from __future__ import annotations

import email.utils
import socket
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from supervisor.core.egress import parse_ip, refusal

BODY_LIMIT = 4096  # bytes of a response read; the rest is never read (the connection drops)
RETRY_AFTER_CAP = 3600.0  # a receiver's Retry-After is honoured up to an hour
CLIENT_ERROR_ATTEMPTS = 3  # a 3xx or 4xx (but 408, 410, 429) fails after this many attempts
BACK_OFF = frozenset({429, 502, 503, 504})  # honour Retry-After
TRANSIENT = frozenset({408, 425})  # retried like a 5xx


class RefusedDestination(OSError):
    """A connection to a refused address was not made."""


class GuardedResolver(AbstractResolver):
    """aiohttp's default resolver without the refused addresses."""

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept, why = [], ""
        for r in found:
            ip = parse_ip(r["host"])
            problem = "unparsable address" if ip is None else refusal(ip, self.allow_private)
            if problem is None:
                kept.append(r)
            else:
                why = why or problem
        if not kept:
            raise RefusedDestination(f"refused: {host} resolves to {why}")
        return kept

    async def close(self) -> None:
        await self._inner.close()


def socket_factory(allow_private: bool) -> Any:
    """aiohttp's socket_factory: refuses to create the socket for a refused address."""

    def make(addr_info: tuple[Any, ...]) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        ip = parse_ip(str(sockaddr[0]))
        problem = "unparsable address" if ip is None else refusal(ip, allow_private)
        if problem is not None:
            raise RefusedDestination(f"refused: {problem}")
        return socket.socket(family=family, type=type_, proto=proto)

    return make


def session(timeout: float, limit: int, allow_private: bool) -> aiohttp.ClientSession:
    """The notifier's session: guarded connector, total timeout, no proxy from the
    environment (trust_env off: a proxy would connect for us, past the guard)."""
    connector = aiohttp.TCPConnector(
        limit=limit,
        resolver=GuardedResolver(allow_private),
        socket_factory=socket_factory(allow_private),
    )
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout), connector=connector, trust_env=False
    )


def refused_in(exc: BaseException) -> RefusedDestination | None:
    """The RefusedDestination behind an aiohttp error (it wraps the resolver's and the
    socket factory's errors), if any."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, RefusedDestination):
            return e
        if isinstance(e, OSError) and str(e).startswith("refused: "):
            return RefusedDestination(str(e))  # happy eyeballs may re-wrap it
        todo += [e.__cause__, e.__context__, getattr(e, "os_error", None)]
        todo += list(getattr(e, "exceptions", ()))
    return None


async def read_bounded(resp: aiohttp.ClientResponse, limit: int = BODY_LIMIT) -> bytes:
    """At most `limit` bytes of the body; a longer (or endless) one is cut and its
    connection closed instead of drained."""
    data = b""
    while len(data) < limit:
        chunk = await resp.content.read(limit - len(data))
        if not chunk:
            return data
        data += chunk
    if not resp.content.at_eof():
        resp.close()
    return data


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds (delta-seconds or an HTTP date), capped; None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_CAP)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


@dataclass(frozen=True)
class Verdict:
    """What an attempt's answer means: delivered, retry (after at least `wait`), give up
    (failed), or gone (failed, and stop sending there)."""

    action: str  # delivered | retry | give_up | gone
    wait: float = 0.0  # the receiver's Retry-After, when it asked (back-off statuses)


def judge(status: int | None, headers: Any, attempt: int) -> Verdict:
    """Standard Webhooks guidance: 2xx delivered; 410 gone; 429/502/503/504 back off
    honouring Retry-After; 408/425, other 5xx and network errors back off as before; any
    other 3xx/4xx is the receiver's refusal, not retried for the whole window."""
    if status is None:
        return Verdict("retry")
    if 200 <= status < 300:
        return Verdict("delivered")
    if status == 410:
        return Verdict("gone")
    if status in BACK_OFF:
        return Verdict("retry", retry_after(headers.get("Retry-After")) or 0.0)
    if status >= 500 or status in TRANSIENT:
        return Verdict("retry")
    return Verdict("give_up" if attempt >= CLIENT_ERROR_ATTEMPTS else "retry")
