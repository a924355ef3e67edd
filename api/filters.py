"""The runs and jobs lists' filters, for the API and the dashboard in one place.

The API reads strict query parameters (params.Query: an unknown or repeated one is a 422,
every problem collected); the dashboard reads a form's text, forgiving what a person types:
a substring of a job's name, a date and time without an offset (UTC), blanks for "any".
Both parse instants with request.instant and give supervisor.core.runs the same RunFilters.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from api.instants import instant
from api.params import Query
from supervisor.core.dashboard import JobFilters
from supervisor.core.errors import InvalidSpec
from supervisor.core.model import MAX_ID, NAME, NAME_RULE, TYPE, TYPE_RULE, RunStatus
from supervisor.core.runs import RunFilters

RUN_STATUSES = [s.value for s in RunStatus]
RANGES = ("scheduled_after", "scheduled_before", "finished_after", "finished_before")
RUN_FILTERS = {"job_id", "job_name", "status", *RANGES}  # the API's query parameters
KEPT = ("tab", "job", "status", *RANGES)  # the dashboard's runs list: what a link keeps
MAX_SEARCH = 200  # characters of a dashboard search text
FORM_EXAMPLE = "2026-12-01T10:00"  # how a form's date and time is written
PAUSED = {"": None, "yes": True, "no": False}  # the dashboard's jobs list
SORTS = ("name", "next")


# ---------------------------------------------------------------- the API


def api_runs(q: Query) -> RunFilters:
    """GET /v1/runs and POST /v1/runs/requeue: an exact job (id or name), statuses
    (repeatable or comma-separated), half-open instant ranges with offsets."""
    return RunFilters(
        job_id=q.integer("job_id", 1, MAX_ID),
        job_name=q.string("job_name", NAME, NAME_RULE),
        statuses=q.choices("status", RUN_STATUSES),
        scheduled_after=q.instant("scheduled_after"),
        scheduled_before=q.instant("scheduled_before"),
        finished_after=q.instant("finished_after"),
        finished_before=q.instant("finished_before"),
    )


def api_jobs(q: Query) -> tuple[str | None, bool | None, str | None]:
    """GET /v1/jobs: (type, paused, name prefix)."""
    type_ = q.string("type", TYPE, TYPE_RULE)
    paused = q.boolean("paused")
    return type_, paused, q.string("name_prefix", NAME, NAME_RULE)


# ---------------------------------------------------------------- the dashboard


def form_instant(form: Any, name: str) -> datetime | None:
    """A form's date and time (without an offset: UTC) or an ISO 8601 instant with one;
    None when blank."""
    text = form.get(name, "").strip()
    return instant(text, name, naive=UTC, example=FORM_EXAMPLE) if text else None


def _search(form: Any, name: str) -> str | None:
    text = form.get(name, "").strip()
    if len(text) > MAX_SEARCH:
        raise InvalidSpec(name, f"must be at most {MAX_SEARCH} characters")
    return text or None


def ui_runs(form: Any) -> RunFilters:
    """The runs list's form: a substring of the job's name (any case, as the jobs list's),
    statuses, the date ranges and the tab (history or upcoming)."""
    job = _search(form, "job")
    statuses = tuple(s for s in form.getall("status", []) if s)
    wrong = [s for s in statuses if s not in RUN_STATUSES]
    if wrong:
        raise InvalidSpec("status", f"{wrong[0]!r} is not one of {', '.join(RUN_STATUSES)}")
    tab = form.get("tab", "history")
    if tab not in ("history", "upcoming"):
        raise InvalidSpec("tab", "must be history or upcoming")
    return RunFilters(
        job_text=job,
        statuses=statuses,
        scheduled_after=form_instant(form, "scheduled_after"),
        scheduled_before=form_instant(form, "scheduled_before"),
        finished_after=form_instant(form, "finished_after"),
        finished_before=form_instant(form, "finished_before"),
        upcoming=tab == "upcoming",
    )


def ui_range_errors(form: Any) -> dict[str, str]:
    """The date filters that are not instants, each with its error (shown at the field)."""
    errors = {}
    for name in RANGES:
        try:
            form_instant(form, name)
        except InvalidSpec as exc:
            errors[name] = exc.message
    return errors


def ui_jobs(form: Any) -> tuple[JobFilters, str]:
    """The jobs list's form: a search text, a type, paused (yes, no or any), the last
    run's status; and the sort (name or next)."""
    text = _search(form, "q")
    type_ = form.get("type", "")
    if type_ and not TYPE.fullmatch(type_):
        raise InvalidSpec("type", TYPE_RULE)
    choice = form.get("paused", "")
    if choice not in PAUSED:
        raise InvalidSpec("paused", "must be yes, no or empty")
    last = form.get("last", "")
    if last and last not in RUN_STATUSES:
        raise InvalidSpec("last", f"must be one of {', '.join(RUN_STATUSES)}")
    sort = form.get("sort", "name")
    if sort not in SORTS:
        raise InvalidSpec("sort", "must be name or next")
    status = RunStatus(last) if last else None
    return JobFilters(text, type_ or None, PAUSED[choice], status), sort
