"""The request layer the API (routes_*.py) and the dashboard (ui/pages_*.py) share: the
job lookup, and the one table from a domain error to its HTTP status, which each surface
renders its own way (problems.py as problem+json, ui/guard.py as an HTML page).

The rest of the layer: instants.py (ISO instants as people and URLs write them) and
filters.py (the runs and jobs lists' filters of both surfaces); the API's strict query
parameters and JSON bodies are params.py's. A leaf of api/: it imports supervisor.core only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aiohttp import web

from supervisor.core.db import DB_ERRORS
from supervisor.core.domain import Job
from supervisor.core.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, RefusedValue
from supervisor.core.log import log_event
from supervisor.core.store import Store

log = logging.getLogger("punchclock.api")


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
