"""Job validation, shared by the API, the CLI and `punchclock up`: one function turns a
request body into a JobSpec (schedule parsed) or raises InvalidSpecs naming every bad field.
The operations that store jobs are in jobs.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, fields
from datetime import UTC, datetime
from typing import Any

from supervisor.core import schedule
from supervisor.core.domain import JobSpec, UnloadableSchedule, cron_schedule, stored_schedule
from supervisor.core.errors import InvalidSpec, InvalidSpecs
from supervisor.core.events import check_ping_url, parse_notify
from supervisor.core.exitpolicy import FIELDS as POLICY_FIELDS
from supervisor.core.exitpolicy import parse_policy
from supervisor.core.jobfields import BODY_KEYS, FIELD, NULLABLE_KEYS
from supervisor.core.jobfields import FIELDS as JOB_FIELDS
from supervisor.core.limits import LIMIT_FIELDS, parse_limits
from supervisor.core.model import NAME, NAME_RULE, TYPE, TYPE_RULE, Catchup, Overlap

# The body's fields and which may be null, from their declaration (jobfields.py); null means
# "no value" (cron and run_at: one of them; retry_on: every failure not in dead_on;
# pause_after_failures: never auto-paused; expect_success_within_seconds: no job_silent;
# late_after_seconds: ready_max_lag; the concurrency limits: none).
FIELDS = set(BODY_KEYS)
NULLABLE = set(NULLABLE_KEYS)
RETRY_KEYS = {f.path[1] for f in JOB_FIELDS if f.path[0] == "retry"}
# Instants accepted from users: a day inside Python's datetime range on each side, so no
# offset or day of arithmetic overflows, and never the instants asyncpg sends as -infinity
# (0001-01-01T00:00Z) and infinity (9999-12-31T23:59:59.999999Z).
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
RANGE_TEXT = "out of the supported range (0001-01-02 to 9999-12-30 UTC)"


def checked_instant(value: datetime, field: str, text: str) -> datetime:
    """An aware instant in UTC, or InvalidSpec(field) outside [EARLIEST, LATEST]."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise InvalidSpec(field, f"'{text}' is {RANGE_TEXT}") from None
    if not EARLIEST <= utc <= LATEST:
        raise InvalidSpec(field, f"'{text}' is {RANGE_TEXT}")
    return utc


def _number(
    errors: list[InvalidSpec], field: str, value: Any, lo: float, hi: float, integer: bool = False
) -> Any:
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.append(InvalidSpec(field, f"must be {kind}, got {type(value).__name__}"))
        return None
    if integer and not (isinstance(value, int) or value.is_integer()):
        errors.append(InvalidSpec(field, f"must be {kind}, got {value}"))
        return None
    if not lo <= value <= hi:
        errors.append(
            InvalidSpec(field, f"must be between {_plain(lo)} and {_plain(hi)}, got {value}")
        )
        return None
    return int(value) if integer else float(value)


def _plain(x: float) -> str:
    """A bound as people write it: 31622400, not 3.16224e+07."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _declared(errors: list[InvalidSpec], name: str, value: Any) -> Any:
    """A number within its declared bounds (jobfields.FIELD); None if null and nullable."""
    f = FIELD[name]
    if value is None and f.nullable:
        return None
    assert f.least is not None and f.most is not None
    return _number(errors, f.key, value, f.least, f.most, f.integer)


def _choice(errors: list[InvalidSpec], field: str, value: Any, choices: list[str]) -> Any:
    if value not in choices:
        errors.append(InvalidSpec(field, f"must be one of {', '.join(choices)}, got {value!r}"))
        return None
    return value


def _spec_fields(spec: JobSpec | None) -> dict[str, Any]:
    """A spec's fields by name; with None, the defaults of the fields that have one."""
    if spec is not None:
        return {f.name: getattr(spec, f.name) for f in fields(JobSpec)}
    out: dict[str, Any] = {}
    for f in fields(JobSpec):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def validate_job(
    body: Any, base: JobSpec | None = None, allowed_hosts: tuple[str, ...] = ()
) -> JobSpec:
    """Request body -> a JobSpec. With `base` (an existing job's) it is a PATCH.
    `allowed_hosts`: notify_allowed_hosts, for ping_url (empty: any host).

    Raises InvalidSpecs listing every invalid field at once.
    """
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    errors: list[InvalidSpec] = []
    for key in sorted(set(body) - FIELDS):
        errors.append(InvalidSpec(key, "unknown field"))
    out = _spec_fields(base)
    if base is None:
        for required in ("name", "type"):
            if required not in body:
                errors.append(InvalidSpec(required, "is required"))
    for key in sorted(FIELDS - NULLABLE):
        if key in body and body[key] is None:
            errors.append(InvalidSpec(key, "cannot be null"))
    body = {k: v for k, v in body.items() if v is not None or k in NULLABLE}

    if "name" in body:
        if not isinstance(body["name"], str) or not NAME.fullmatch(body["name"]):
            errors.append(InvalidSpec("name", NAME_RULE))
        out["name"] = body["name"]
    if "type" in body:
        if not isinstance(body["type"], str) or not TYPE.fullmatch(body["type"]):
            errors.append(InvalidSpec("type", TYPE_RULE))
        out["type"] = body["type"]
    if "payload" in body:
        if not isinstance(body["payload"], dict):
            errors.append(InvalidSpec("payload", "must be a JSON object"))
        elif problem := unstorable(body["payload"]):
            errors.append(InvalidSpec("payload", problem))
        out["payload"] = body["payload"]
    for name in ("max_attempts", "timeout_seconds"):
        if name in body:
            out[name] = _declared(errors, name, body[name])
    if "retry" in body:
        _validate_retry(errors, body["retry"], out)
    if "catchup" in body:
        catchup = _choice(errors, "catchup", body["catchup"], list(FIELD["catchup"].choices))
        out["catchup"] = catchup and Catchup(catchup)
    if "catchup_window_seconds" in body:
        out["catchup_window_seconds"] = _declared(
            errors, "catchup_window_seconds", body["catchup_window_seconds"]
        )
    if "overlap" in body:
        overlap = _choice(errors, "overlap", body["overlap"], list(FIELD["overlap"].choices))
        out["overlap"] = overlap and Overlap(overlap)
    if "paused" in body:
        if not isinstance(body["paused"], bool):
            errors.append(InvalidSpec("paused", "must be true or false"))
        out["paused"] = body["paused"]
    if "notify" in body:
        out["notify"] = parse_notify(errors, body["notify"])
    for name in ("pause_after_failures", "job_failing_after"):
        if name in body:
            out[name] = _declared(errors, name, body[name])
    if "ping_url" in body:
        url = body["ping_url"]
        out["ping_url"] = None if url is None else check_ping_url(errors, url, allowed_hosts)
    for name in ("expect_success_within_seconds", "late_after_seconds"):
        if name in body:
            out[name] = _declared(errors, name, body[name])
    if body.keys() & set(POLICY_FIELDS):
        out["exit_policy"] = parse_policy(errors, body, out["exit_policy"])
    if body.keys() & {*LIMIT_FIELDS, "overlap"}:
        out["limits"] = parse_limits(errors, body, out["limits"], out["overlap"])
    _validate_schedule(errors, body, out, base)
    if errors:
        raise InvalidSpecs(errors)
    return JobSpec(**out)


def _validate_retry(errors: list[InvalidSpec], retry: Any, out: dict[str, Any]) -> None:
    if not isinstance(retry, dict):
        errors.append(InvalidSpec("retry", "must be an object with base_seconds and cap_seconds"))
        return
    for key in sorted(set(retry) - RETRY_KEYS):
        errors.append(InvalidSpec(f"retry.{key}", "unknown field"))
    for key in sorted(RETRY_KEYS & set(retry)):
        if retry[key] is None:
            errors.append(InvalidSpec(f"retry.{key}", "cannot be null"))
    retry = {k: v for k, v in retry.items() if v is not None}
    for name in ("retry_base_seconds", "retry_cap_seconds"):
        key = FIELD[name].path[1]
        if key in retry:
            out[name] = _declared(errors, name, retry[key])
    base, cap = out["retry_base_seconds"], out["retry_cap_seconds"]
    if base is not None and cap is not None and cap < base:
        errors.append(InvalidSpec("retry.cap_seconds", f"must be at least base_seconds ({base:g})"))


def _validate_schedule(
    errors: list[InvalidSpec], body: dict[str, Any], out: dict[str, Any], base: JobSpec | None
) -> None:
    """Sets out["schedule"], parsed once here, from the body merged into `base`'s."""
    if base is not None and not body.keys() & {"cron", "run_at", "timezone"}:
        # Unchanged. A cron this host cannot load is refused as when it was checked again.
        if isinstance(base.schedule, UnloadableSchedule) and base.schedule.cron is not None:
            errors.append(base.schedule.error)
        return
    cron, run_at, timezone = base.schedule_columns if base else (None, None, "UTC")
    if "timezone" in body:
        timezone = body["timezone"]
        if not isinstance(timezone, str):
            errors.append(InvalidSpec("timezone", "must be an IANA time zone name"))
            return
        try:
            schedule.load_zone(timezone)
        except InvalidSpec as exc:
            errors.append(exc)
            return
    has_cron = body.get("cron") is not None
    has_run_at = body.get("run_at") is not None
    # null removes a schedule; a job has exactly one, so only while giving the other.
    for name, other, given in (("cron", "run_at", has_run_at), ("run_at", "cron", has_cron)):
        if name in body and body[name] is None and not given:
            errors.append(InvalidSpec(name, f"cannot be null unless {other} is given"))
            return
    if has_cron and has_run_at:
        errors.append(InvalidSpec("cron", "give exactly one of cron or run_at, not both"))
        return
    if has_cron:
        cron, run_at = body["cron"], None
    elif has_run_at:
        cron, run_at = None, body["run_at"]
    if (cron is None) == (run_at is None):
        errors.append(InvalidSpec("cron", "give exactly one of cron or run_at"))
        return
    if cron is not None:
        if not isinstance(cron, str):
            errors.append(InvalidSpec("cron", "must be a string"))
            return
        try:
            out["schedule"] = cron_schedule(cron.strip(), timezone)
        except InvalidSpec as exc:
            errors.append(exc)
        return
    if isinstance(run_at, str):
        try:
            run_at = checked_instant(schedule.parse_instant(run_at, "run_at"), "run_at", run_at)
        except InvalidSpec as exc:
            errors.append(exc)
            return
    if not isinstance(run_at, datetime):
        errors.append(InvalidSpec("run_at", "must be an ISO-8601 instant with a UTC offset"))
        return
    # A one-off needs no zone to plan: one kept from `base` that this host lacks stays.
    out["schedule"] = stored_schedule(None, run_at, timezone)


def unstorable(value: Any) -> str | None:
    """Why PostgreSQL's jsonb would refuse this parsed JSON value, or None if it stores.

    jsonb rejects NUL characters, unpaired surrogates and non-finite numbers, which
    Python's json module lets through; catching them here keeps them a 422, not a 500.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "must not contain NUL characters (\\u0000)"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "must not contain unpaired UTF-16 surrogates"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
    return None


IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
TRIGGER_FIELDS = {"payload"}


def validate_trigger(body: Any, key: str | None) -> dict[str, Any] | None:
    """A trigger request -> the payload override (None: the job's own).

    `body` is the parsed JSON body ({} when there is none); `key` the Idempotency-Key header.
    """
    errors: list[InvalidSpec] = []
    payload = None
    if not isinstance(body, dict):
        errors.append(InvalidSpec("body", "must be a JSON object"))
    else:
        for name in sorted(set(body) - TRIGGER_FIELDS):
            errors.append(InvalidSpec(name, "unknown field"))
        payload = body.get("payload")
        if payload is not None and not isinstance(payload, dict):
            errors.append(InvalidSpec("payload", "must be a JSON object or null"))
        elif payload is not None and (problem := unstorable(payload)):
            errors.append(InvalidSpec("payload", problem))
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        errors.append(
            InvalidSpec("Idempotency-Key", "must be 1-255 visible ASCII characters, no spaces")
        )
    if errors:
        raise InvalidSpecs(errors)
    return payload
