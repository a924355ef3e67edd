"""A job's fields, declared once (in the style of config.py's Config): what each holds (its
kind, bounds, whether it may be null), what it means (help), and where it goes (its path in
the API's JSON body, the JobSpec attribute it sets, its flag on the CLI).

Read by validation (jobspec.py, limits.py, events.py), the API's views and OpenAPI schema
(api/views.py, api/openapi_schemas.py), the dashboard's job form (api/ui/pages_edit.py and
job_form.html) and the CLI's flags (api/client_jobs.py); tests/unit/test_jobfields.py
checks that every field declared here reaches all of them. A new field is declared here,
then handled where its kind asks (a new kind: in each of those readers). Standard library
and model.py only: the CLI imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from supervisor.core.model import MAX_URL, NAME_PATTERN, TYPE_PATTERN, Catchup, Overlap

# The kinds of value a job field holds (each reader knows how to read and show each).
STRING = "string"
INSTANT = "instant"  # ISO 8601 with an offset
INTEGER = "integer"
NUMBER = "number"
BOOLEAN = "boolean"
CHOICE = "choice"  # one of `choices`
OBJECT = "object"  # any JSON object
CODES = "codes"  # a list of exit statuses
ENDINGS = "endings"  # a list of exit statuses or named endings (exitpolicy.NAMED)
RULES = "rules"  # the notify list: [{channel, events}]
LISTS = (CODES, ENDINGS)  # typed as comma-separated items in the form and on the CLI
NUMBERS = (INTEGER, NUMBER)
DAY = 86400
WEEK = 7 * DAY


def _job(kind: str, help: str, **rules: Any) -> Any:
    """A field declared: no default (JobFields is read, never made), its rules as metadata."""
    return field(metadata={"kind": kind, "help": help, **rules})


@dataclass(frozen=True)
class JobFields:
    """A job as a request gives it, field by field, in the order the API's view shows them.
    The annotations are the JSON values' types; `_job`'s keywords are JobField's."""

    name: str = _job(
        STRING,
        "a unique name: 1-200 letters, digits or -_.:, not starting with a dot",
        pattern=NAME_PATTERN,
        required=True,
    )
    type: str = _job(STRING, "a handler type name", pattern=TYPE_PATTERN, required=True)
    payload: Mapping[str, Any] = _job(OBJECT, "any JSON object, given to the handler on stdin")
    cron: str | None = _job(
        STRING,
        "5 fields, or 6 with seconds first; null only together with run_at",
        nullable=True,
    )
    run_at: str | None = _job(
        INSTANT,
        "a one-off instant (with an offset, 0001-01-02 to 9999-12-30 UTC); null only"
        " together with cron",
        nullable=True,
    )
    timezone: str = _job(STRING, "IANA zone of the cron expression (default UTC)")
    max_attempts: int = _job(
        INTEGER, "attempts a run gets before it is dead (default 3)", least=1, most=100
    )
    timeout_seconds: float | None = _job(
        NUMBER,
        "seconds an attempt may run; null: none of the job's own (the handler's, else 1 hour)",
        least=1,
        most=WEEK,
        nullable=True,
        flag="--timeout",
    )
    retry_base_seconds: float = _job(
        NUMBER,
        "the retry backoff's base: the first retry waits up to this long, each next"
        " one twice as long (default 10)",
        least=0,
        most=DAY,
        path=("retry", "base_seconds"),
        flag="--retry-base",
    )
    retry_cap_seconds: float = _job(
        NUMBER,
        "the retry backoff's cap: no retry waits longer (default 3600)",
        least=0,
        most=WEEK,
        path=("retry", "cap_seconds"),
        flag="--retry-cap",
    )
    catchup: str = _job(
        CHOICE,
        "instants missed while no host ran it: run the latest (default), all, or none (skipped)",
        choices=tuple(c.value for c in Catchup),
    )
    catchup_window_seconds: float = _job(
        NUMBER,
        "a missed run older than this is skipped whatever the catch-up policy (default 3600)",
        least=0,
        most=30 * DAY,
        flag="--catchup-window",
    )
    overlap: str = _job(
        CHOICE,
        "when the previous run still runs: start anyway (allow, default), skip this one, or wait",
        choices=tuple(o.value for o in Overlap),
    )
    paused: bool = _job(BOOLEAN, "not planned nor claimed until resumed (default false)")
    success_exit_codes: Sequence[int] = _job(
        CODES,
        "exit statuses that count as success (default [0])",
        least=1,
        blank=[0],
        attr="exit_policy",
    )
    dead_on: Sequence[int | str] = _job(
        ENDINGS,
        "endings that make the run dead at once (default [65]): exit statuses,"
        " signal, timeout, oom_killed",
        blank=[],
        attr="exit_policy",
    )
    retry_on: Sequence[int | str] | None = _job(
        ENDINGS,
        "the only endings retried; null (default): every failure not in dead_on",
        nullable=True,
        blank=None,
        attr="exit_policy",
    )
    concurrency_group: str | None = _job(
        STRING,
        "the concurrency group it joins (it must exist, else 422)",
        pattern=TYPE_PATTERN,
        nullable=True,
        attr="limits.group",
    )
    max_concurrent: int | None = _job(
        INTEGER,
        "at most this many of its runs at once on all hosts (above 1 needs overlap"
        " allow); null: no limit of its own",
        least=1,
        most=1000,
        nullable=True,
        attr="limits.max_concurrent",
    )
    pause_after_failures: int | None = _job(
        INTEGER,
        "pause the job after this many consecutive runs ended dead by the handler's"
        " own doing (exit status, signal, timeout; not a lost lease, a shutdown or a cancel),"
        " raising job_auto_paused; resume starts the count again. null (default): never",
        least=1,
        most=1000,
        nullable=True,
    )
    job_failing_after: int = _job(
        INTEGER,
        "job_failing once this many consecutive runs ended dead (default 1)",
        least=1,
        most=1000,
    )
    expect_success_within_seconds: float | None = _job(
        NUMBER,
        "job_silent (a dead-man's switch) once the job has had no success for this"
        " long, counted from its latest success or its last change or resume, on the database"
        " clock; sent once until the next success. null (default): never",
        least=1,
        most=366 * DAY,
        nullable=True,
        flag="--expect-success-within",
    )
    late_after_seconds: float | None = _job(
        NUMBER,
        "run_late once a due run waited this long (null, default: the deployment's ready_max_lag)",
        least=1,
        most=WEEK,
        nullable=True,
        flag="--late-after",
    )
    ping_url: str | None = _job(
        STRING,
        "outbound pings (healthchecks.io, Cronitor): GET {ping_url}/start when a run"
        " starts, {ping_url} on success, {ping_url}/fail when it ends dead; http or https"
        " without a query, its host in notify_allowed_hosts when that is set; write-only (the"
        " view shows ping_destination)",
        most=MAX_URL,
        nullable=True,
        uri=True,
        write_only=True,
    )
    notify: Sequence[Mapping[str, Any]] = _job(
        RULES,
        "channels told about this job's events (each must exist, else 422); PATCH"
        " replaces the whole list",
        most=20,
        blank=[],
        viewed=False,
    )


@dataclass(frozen=True, slots=True)
class JobField:
    """One declared field, as its readers use it."""

    name: str  # the form's input, the JobSpec attribute (unless `attr`), the column
    kind: str
    help: str
    path: tuple[str, ...]  # where a JSON body holds it: ("retry", "base_seconds")
    least: float | None = None  # a number's bounds; a list's least and most items;
    most: float | None = None  # a string's most characters
    nullable: bool = False  # null is a value (none); otherwise null is refused
    required: bool = False  # when a job is created
    pattern: str | None = None  # a string's (fullmatch)
    choices: tuple[str, ...] = ()
    uri: bool = False
    blank: Any = None  # what an empty form field or an empty CLI list means
    flag: str = ""  # the CLI's
    attr: str = ""  # the JobSpec attribute it is read from (dotted)
    write_only: bool = False  # never shown back (the view says where it points)
    viewed: bool = True  # in the job view (notify: in the detail, read apart)

    @property
    def key(self) -> str:
        """How an error names it: "max_attempts", "retry.base_seconds"."""
        return ".".join(self.path)

    @property
    def integer(self) -> bool:
        return self.kind == INTEGER


def _declared(f: Any) -> JobField:
    rules = dict(f.metadata)
    rules.setdefault("path", (f.name,))
    rules.setdefault("flag", "--" + f.name.replace("_", "-"))
    rules.setdefault("attr", f.name)
    return JobField(name=f.name, **rules)


FIELDS: tuple[JobField, ...] = tuple(_declared(f) for f in fields(JobFields))
FIELD = {f.name: f for f in FIELDS}
BODY_KEYS = tuple(dict.fromkeys(f.path[0] for f in FIELDS))  # a JSON body's keys
NULLABLE_KEYS = frozenset(f.path[0] for f in FIELDS if f.nullable)


def typed_items(f: JobField, text: str) -> Any:
    """A list field as a person types it (the form, the CLI): items separated by commas or
    spaces, exit statuses as numbers; nothing typed is the field's `blank`."""
    items = [i for i in text.replace(",", " ").split() if i]
    if not items:
        return None if f.blank is None else list(f.blank)
    return [int(i) if i.isdigit() else i for i in items]


def bounds(f: JobField) -> str:
    """A number's bounds as help says them: "1-100"."""
    return f"{_plain(f.least)}-{_plain(f.most)}"


def _plain(x: float | None) -> str:
    return "" if x is None else str(int(x)) if float(x).is_integer() else f"{x:g}"
