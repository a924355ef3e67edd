"""Request input: strict query parameters (unknown ones are a 422) and JSON bodies.

Every handler names the parameters it accepts; values are validated and converted here,
all problems are collected and raised together so a caller can fix them in one go.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from aiohttp import web

from api.instants import instant
from api.problems import ApiError
from supervisor.core.errors import InvalidSpec, InvalidSpecs
from supervisor.core.model import MAX_ID

MAX_TEXT = 1000  # characters of a free-text query parameter (cron, cursor)
MAX_ZONE = 100  # characters of a time zone name


class Query:
    """The query string of one request, checked against the names a handler accepts."""

    def __init__(
        self, request: web.Request, allowed: set[str], repeatable: frozenset[str] = frozenset()
    ) -> None:
        self.q = request.rel_url.query
        self.errors: list[InvalidSpec] = []
        for name in sorted(set(self.q.keys())):
            if not name.strip():  # `?=x`: nothing to name, so the problem names the query
                self.errors.append(InvalidSpec("query", "a parameter without a name"))
            elif name not in allowed:
                self.errors.append(InvalidSpec(name, "unknown query parameter"))
            elif name not in repeatable and len(self.q.getall(name)) > 1:
                self.errors.append(InvalidSpec(name, "may be given only once"))

    def done(self) -> None:
        if self.errors:
            raise InvalidSpecs(self.errors)

    def _raw(self, name: str) -> str | None:
        values = self.q.getall(name, [])
        return values[0] if values else None

    def string(self, name: str, pattern: re.Pattern[str], rule: str) -> str | None:
        """A value matching `pattern`; `rule` is the message otherwise ("must be ...")."""
        value = self._raw(name)
        if value is None:
            return None
        if not pattern.fullmatch(value):
            self.errors.append(InvalidSpec(name, rule))
            return None
        return value

    def text(self, name: str, max_length: int = MAX_TEXT) -> str | None:
        value = self._raw(name)
        if value is not None and (len(value) > max_length or "\x00" in value):
            self.errors.append(InvalidSpec(name, f"must be at most {max_length} characters"))
            return None
        return value

    def integer(self, name: str, lo: int, hi: int, default: int | None = None) -> int | None:
        value = self._raw(name)
        if value is None:
            return default
        number = _digits(value)
        if number is None or not lo <= number <= hi:
            self.errors.append(InvalidSpec(name, f"must be a whole number from {lo} to {hi}"))
            return default
        return number

    def boolean(self, name: str) -> bool | None:
        value = self._raw(name)
        if value is None:
            return None
        if value not in ("true", "false"):
            self.errors.append(InvalidSpec(name, "must be true or false"))
            return None
        return value == "true"

    def instant(self, name: str) -> datetime | None:
        """An ISO 8601 instant with an offset (request.instant; unlike a body's run_at, a
        filter keeps its microseconds)."""
        value = self._raw(name)
        if value is None:
            return None
        try:
            return instant(value, name)
        except InvalidSpec as exc:
            self.errors.append(exc)
            return None

    def choices(self, name: str, allowed: list[str]) -> tuple[str, ...]:
        """A repeatable parameter; each value may also be a comma-separated list."""
        out: list[str] = []
        for raw in self.q.getall(name, []):
            for value in raw.split(","):
                if value not in allowed:
                    self.errors.append(
                        InvalidSpec(name, f"must be one of {', '.join(allowed)}, got {value!r}")
                    )
                    return ()
                out.append(value)
        return tuple(dict.fromkeys(out))


def _digits(value: str) -> int | None:
    """ASCII digits as an int; None otherwise, or when longer than any bigint (int() refuses
    strings over 4300 digits with a ValueError)."""
    if not (value.isascii() and value.isdigit()):
        return None
    value = value.lstrip("0") or "0"
    return int(value) if len(value) <= 20 else None


def no_query(request: web.Request) -> None:
    Query(request, set()).done()


def path_id(request: web.Request, what: str) -> int:
    """The {id} of the path; ids outside bigint cannot exist, so they are not found."""
    raw = request.match_info["id"]
    value = _digits(raw)
    if value is None or not 1 <= value <= MAX_ID:
        raise ApiError(404, f"{what} {raw[:30]} not found")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


NO_BODY: Any = type("NoBody", (), {"__repr__": lambda self: "NO_BODY"})()


async def read_json(request: web.Request, max_body: int, *, required: bool) -> Any:
    """The parsed body; NO_BODY when empty and not required. 400 malformed, 413 too large."""
    if request.content_length is not None and request.content_length > max_body:
        raise ApiError(413, f"body: the request body exceeds the limit of {max_body} bytes")
    raw = await request.read()  # the application's client_max_size bounds chunked bodies
    if not raw:  # only a truly empty body is "no body"; whitespace is malformed JSON
        if required:
            raise ApiError(400, "body: a JSON object is required")
        return NO_BODY
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise ApiError(400, "body: malformed JSON: not UTF-8") from None
    except RecursionError:
        raise ApiError(400, "body: malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"body: malformed JSON: {exc}") from None
