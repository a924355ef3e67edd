"""The request layer the API (routes_*.py) and the dashboard (ui/pages_*.py) share: ISO
instants as people and URLs write them, the job lookup, and the one table from a domain
error to its HTTP status, which each surface renders its own way (problems.py as
problem+json, ui/guard.py as an HTML page).

The list filters of both surfaces are in filters.py; the API's strict query parameters and
JSON bodies in params.py. A leaf of api/: it imports supervisor.core only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from aiohttp import web

from supervisor.core.db import DB_ERRORS
from supervisor.core.domain import Job
from supervisor.core.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, RefusedValue
from supervisor.core.jobspec import checked_instant
from supervisor.core.log import log_event
from supervisor.core.store import Store

log = logging.getLogger("punchclock.api")


# ---------------------------------------------------------------- instants


def parse_iso(text: str) -> datetime:
    """datetime.fromisoformat (Z for UTC included), with the '+' of an offset that an
    unencoded query string turned into a space put back ("...T00:00:00 01:00"). Naive when
    the text has no offset; ValueError when it is no ISO 8601 date-time."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        head, sep, tail = text.rpartition(" ")
        if sep and ":" in tail and "T" in head:
            return datetime.fromisoformat(f"{head}+{tail}")
        raise


def instant(
    text: str, name: str, *, naive: tzinfo | None = None, example: str | None = None
) -> datetime:
    """The instant `text` names, in UTC with its microseconds, or InvalidSpec(name): not a
    date-time, without an offset when `naive` is None (else read in that zone), or outside
    jobspec's supported range. `example`: a form's wording of the first ("must be a date
    and time, e.g. ..."); without it the message quotes the text, as the API's do."""
    try:
        at = parse_iso(text)
    except ValueError:
        rule = f"must be a date and time, e.g. {example}" if example else None
        raise InvalidSpec(name, rule or f"'{text}' is not an ISO-8601 date-time") from None
    if at.tzinfo is None or at.utcoffset() is None:
        if naive is None:
            raise InvalidSpec(name, f"'{text}' must include a UTC offset")
        at = at.replace(tzinfo=naive)
    return checked_instant(at, name, text)


# ---------------------------------------------------------------- the job lookup


async def find_job(store: Store, ref: int | str) -> Job:
    """A job by id (an int) or by name (a str); NotFound names what was looked for."""
    if isinstance(ref, int):
        job = await store.get_job(ref)
        if job is None:
            raise NotFound(f"job {ref} not found")
        return job
    job = await store.get_job_by_name(ref)
    if job is None:
        raise NotFound(f"no job named {ref!r}")
    return job


# ---------------------------------------------------------------- errors


@dataclass(frozen=True)
class Failure:
    """What a domain error tells the caller: a status, a detail, the fields at fault."""

    status: int
    detail: str
    errors: list[InvalidSpec] | None = None
    headers: dict[str, str] = field(default_factory=dict)


# The one error-to-status table, for the API and the dashboard alike: the first row whose
# kind the error is decides. Anything else is the surface's own (its HTTP errors) or a
# logged 500.
STATUS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int], ...] = (
    (InvalidSpecs, 422),
    (InvalidSpec, 422),
    (RefusedValue, 422),  # a value the database refuses: the caller's, and a validation gap
    (NotFound, 404),
    (Conflict, 409),
    (DB_ERRORS, 503),  # lost, restarting, read-only, shutting down, deadlocked
)
UNAVAILABLE = "the database is unavailable; retry later"


def failure(request: web.Request, exc: BaseException, body: str = "body") -> Failure | None:
    """The table's answer for `exc` (None: not a domain error). `body`: how the surface calls
    a request's body in a refused value's error (the API's "body", the dashboard's "form")."""
    status = next((s for kinds, s in STATUS if isinstance(exc, kinds)), None)
    if status is None:
        return None
    if isinstance(exc, InvalidSpecs):
        errors = exc.errors
    elif isinstance(exc, InvalidSpec):
        errors = [exc]
    elif isinstance(exc, RefusedValue):
        errors = [_refused(request, exc, body if request.body_exists else "query")]
    elif isinstance(exc, DB_ERRORS):
        log.warning("api_database_unavailable", extra={"punchclock_fields": {"error": str(exc)}})
        return Failure(status, UNAVAILABLE, headers={"Retry-After": "1"})
    else:
        return Failure(status, str(exc))
    return Failure(status, "; ".join(f"{e.field}: {e.message}" for e in errors), errors)


def _refused(request: web.Request, exc: RefusedValue, where: str) -> InvalidSpec:
    """The request held a value the database cannot take (errors.RefusedValue). The
    caller's error, but also a validation gap, so logged."""
    log_event(
        log,
        "api_data_error",
        level=logging.WARNING,
        method=request.method,
        path=request.path,
        sqlstate=exc.sqlstate,
        error=str(exc)[:300],
    )
    return InvalidSpec(where, f"a value the database refuses: {str(exc)[:300]}")
