"""A dashboard form whose body is over the server's limit (api_max_body, the app's
client_max_size): for a page that says it can take one (`tolerant`), the body is read and
every field that fits is kept, the fields that do not are dropped and named with their sizes
(`dropped`), so the page can show the form again with what was typed and an error at the
field. Anywhere else, and past READ_AT_MOST, it is refused (413) before being read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote_plus

from aiohttp import web
from multidict import MultiDict, MultiDictProxy

URLENCODED = "application/x-www-form-urlencoded"
READ_AT_MOST = 32 * 1024 * 1024  # bytes of an oversized form read (and dropped) at most
NAME_MAX = 200  # bytes of a dropped field kept to read its name
DROPPED = web.RequestKey("ui_dropped_fields", dict[str, int])
TOLERANT: set[Any] = set()
H = TypeVar("H", bound=Callable[..., Any])


def tolerant(handler: H) -> H:
    """Mark a POST handler that reads `dropped` and shows the form again."""
    TOLERANT.add(handler)
    return handler


def dropped(request: web.Request) -> dict[str, int]:
    """The fields of an oversized form that were not kept: name -> bytes as sent."""
    return dict(request.get(DROPPED, {}))


def too_large(size: int, limit: int) -> str:
    """A dropped field's error: its size and the limit."""
    return (
        f"is {_size(size)} as sent; a form may be at most {_size(limit)} (the server's"
        " api_max_body), so what was typed here was not kept"
    )


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


async def read(request: web.Request, *, trusted: bool) -> MultiDictProxy[Any]:
    """The POST's fields (request.post() returns them from then on). `trusted`: a session
    that may have its oversized form read (never a request without one)."""
    limit, size = request.client_max_size, request.content_length
    if (
        size is None
        or size <= limit
        or not trusted
        or request.content_type != URLENCODED
        or request.match_info.handler not in TOLERANT
    ):
        return await request.post()  # over the limit: 413, the body unread
    if size > READ_AT_MOST:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
    pairs = _Pairs(limit)
    while chunk := await request.content.read(1 << 16):
        start = 0
        while (amp := chunk.find(b"&", start)) >= 0:
            pairs.feed(chunk[start:amp])
            pairs.end()
            start = amp + 1
        pairs.feed(chunk[start:])
    pairs.end()
    request[DROPPED] = pairs.dropped
    # aiohttp keeps the parsed form here: the handler's request.post() returns it.
    request._post = MultiDictProxy(MultiDict(pairs.kept))
    return request._post


class _Pairs:
    """name=value pairs of an urlencoded body, fed in pieces: kept while they fit `room`."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.kept: list[tuple[str, str]] = []
        self.dropped: dict[str, int] = {}
        self.buf = bytearray()
        self.size = 0

    def feed(self, piece: bytes) -> None:
        self.size += len(piece)
        keep = max(self.room, NAME_MAX) - len(self.buf)
        if keep > 0:
            self.buf += piece[:keep]

    def end(self) -> None:
        text = self.buf.decode("ascii", "replace")
        if self.size <= self.room:
            self.kept += parse_qsl(text, keep_blank_values=True)
            self.room -= self.size
        elif self.size:
            self.dropped[unquote_plus(text.split("=", 1)[0])] = self.size
        self.buf, self.size = bytearray(), 0
