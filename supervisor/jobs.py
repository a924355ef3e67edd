"""Job validation and job operations over the store, shared by the API and the CLI.

Validation lives here only: one function turns a request body into job fields or raises
InvalidSpecs naming every bad field. Each operation is one transaction, so a failed request
writes nothing, and a schedule change replans in the same transaction.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from supervisor import schedule
from supervisor.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, UniqueConflict
from supervisor.model import NAME, NAME_RULE, TYPE, TYPE_RULE, Catchup, Overlap
from supervisor.planning import PlanLimits, plan_jobs
from supervisor.store import Record, Store

WEEK = 7 * 24 * 3600
FIELDS = {
    "name",
    "type",
    "payload",
    "cron",
    "timezone",
    "run_at",
    "max_attempts",
    "timeout_seconds",
    "retry",
    "catchup",
    "catchup_window_seconds",
    "overlap",
    "paused",
}
DEFAULTS: dict[str, Any] = {
    "payload": {},
    "cron": None,
    "run_at": None,
    "timezone": "UTC",
    "max_attempts": 3,
    "timeout_seconds": None,
    "retry_base_seconds": 10.0,
    "retry_cap_seconds": 3600.0,
    "catchup": Catchup.LATEST.value,
    "catchup_window_seconds": 3600.0,
    "overlap": Overlap.ALLOW.value,
    "paused": False,
}
SCHEDULE_FIELDS = ("cron", "run_at", "timezone")
# null means "no value"; only these job fields can have none (cron and run_at: one of them).
NULLABLE = {"timeout_seconds", "cron", "run_at"}
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
        errors.append(InvalidSpec(field, f"must be between {lo:g} and {hi:g}, got {value}"))
        return None
    return int(value) if integer else float(value)


def _choice(errors: list[InvalidSpec], field: str, value: Any, choices: list[str]) -> Any:
    if value not in choices:
        errors.append(InvalidSpec(field, f"must be one of {', '.join(choices)}, got {value!r}"))
        return None
    return value


def validate_job(body: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Request body -> complete job fields. With `base` (an existing job) it is a PATCH.

    Raises InvalidSpecs listing every invalid field at once.
    """
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    errors: list[InvalidSpec] = []
    for key in sorted(set(body) - FIELDS):
        errors.append(InvalidSpec(key, "unknown field"))
    out: dict[str, Any] = dict(DEFAULTS) if base is None else dict(base)
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
    if "max_attempts" in body:
        out["max_attempts"] = _number(errors, "max_attempts", body["max_attempts"], 1, 100, True)
    if "timeout_seconds" in body:
        t = body["timeout_seconds"]
        out["timeout_seconds"] = (
            None if t is None else _number(errors, "timeout_seconds", t, 1, WEEK)
        )
    if "retry" in body:
        _validate_retry(errors, body["retry"], out)
    if "catchup" in body:
        out["catchup"] = _choice(errors, "catchup", body["catchup"], [c.value for c in Catchup])
    if "catchup_window_seconds" in body:
        out["catchup_window_seconds"] = _number(
            errors, "catchup_window_seconds", body["catchup_window_seconds"], 0, 30 * 24 * 3600
        )
    if "overlap" in body:
        out["overlap"] = _choice(errors, "overlap", body["overlap"], [o.value for o in Overlap])
    if "paused" in body:
        if not isinstance(body["paused"], bool):
            errors.append(InvalidSpec("paused", "must be true or false"))
        out["paused"] = body["paused"]
    _validate_schedule(errors, body, out, patch=base is not None)
    if errors:
        raise InvalidSpecs(errors)
    return out


def _validate_retry(errors: list[InvalidSpec], retry: Any, out: dict[str, Any]) -> None:
    if not isinstance(retry, dict):
        errors.append(InvalidSpec("retry", "must be an object with base_seconds and cap_seconds"))
        return
    for key in sorted(set(retry) - {"base_seconds", "cap_seconds"}):
        errors.append(InvalidSpec(f"retry.{key}", "unknown field"))
    for key in sorted({"base_seconds", "cap_seconds"} & set(retry)):
        if retry[key] is None:
            errors.append(InvalidSpec(f"retry.{key}", "cannot be null"))
    retry = {k: v for k, v in retry.items() if v is not None}
    if "base_seconds" in retry:
        out["retry_base_seconds"] = _number(
            errors, "retry.base_seconds", retry["base_seconds"], 0, 86400
        )
    if "cap_seconds" in retry:
        out["retry_cap_seconds"] = _number(
            errors, "retry.cap_seconds", retry["cap_seconds"], 0, WEEK
        )
    base, cap = out["retry_base_seconds"], out["retry_cap_seconds"]
    if base is not None and cap is not None and cap < base:
        errors.append(InvalidSpec("retry.cap_seconds", f"must be at least base_seconds ({base:g})"))


def _validate_schedule(
    errors: list[InvalidSpec], body: dict[str, Any], out: dict[str, Any], *, patch: bool
) -> None:
    if "timezone" in body:
        out["timezone"] = body["timezone"]
        if not isinstance(body["timezone"], str):
            errors.append(InvalidSpec("timezone", "must be an IANA time zone name"))
            return
        try:
            schedule.load_zone(body["timezone"])
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
        out["cron"], out["run_at"] = body["cron"], None
    elif has_run_at:
        out["cron"], out["run_at"] = None, body["run_at"]
    if (out["cron"] is None) == (out["run_at"] is None):
        if not patch or has_cron or has_run_at or "cron" in body or "run_at" in body:
            errors.append(InvalidSpec("cron", "give exactly one of cron or run_at"))
        return
    if out["cron"] is not None:
        if not isinstance(out["cron"], str):
            errors.append(InvalidSpec("cron", "must be a string"))
            return
        try:
            schedule.parse_cron(out["cron"], out["timezone"], "cron")
            out["cron"] = out["cron"].strip()
        except InvalidSpec as exc:
            errors.append(exc)
    elif isinstance(out["run_at"], str):
        try:
            parsed = schedule.parse_instant(out["run_at"], "run_at")
            out["run_at"] = checked_instant(parsed, "run_at", out["run_at"])
        except InvalidSpec as exc:
            errors.append(exc)
    elif not isinstance(out["run_at"], datetime):
        errors.append(InvalidSpec("run_at", "must be an ISO-8601 instant with a UTC offset"))


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


def job_fields(row: Record) -> dict[str, Any]:
    """An existing job row as the fields validate_job merges a PATCH into."""
    return {k: row[k] for k in DEFAULTS | {"name": None, "type": None}}


# ---------------------------------------------------------------- operations


async def create_job(store: Store, fields: dict[str, Any], limits: PlanLimits) -> Record:
    try:
        async with store.transaction() as tx:
            row = await tx.insert_job(fields)
            await _plan_now(tx, row["id"], limits)
    except UniqueConflict:
        raise Conflict(f"name: a job named {fields['name']!r} already exists") from None
    return row


async def update_job(store: Store, job_id: int, body: Any, limits: PlanLimits) -> Record:
    try:
        async with store.transaction() as tx:
            current = await tx.lock_job(job_id)
            if current is None:
                raise NotFound(f"job {job_id} not found")
            fields = validate_job(body, job_fields(current))
            row = await tx.update_job(job_id, fields)
            assert row is not None
            if any(current[k] != row[k] for k in SCHEDULE_FIELDS):
                await tx.delete_unstarted_future_runs(job_id)
                await tx.reset_job_plan(job_id)
                if row["cron"] is None:  # a one-off is planned once, from a NULL mark
                    await tx.replan_one_off(job_id)
            await tx.sync_unstarted_runs(
                job_id, row["type"], row["overlap"] != Overlap.ALLOW, row["max_attempts"]
            )
            if not row["paused"]:
                await _plan_now(tx, job_id, limits)
    except UniqueConflict:
        raise Conflict(f"name: a job named {body.get('name')!r} already exists") from None
    return row


async def _plan_now(tx: Store, job_id: int, limits: PlanLimits) -> None:
    job = await tx.lock_job(job_id)
    assert job is not None
    if job["paused"]:
        return
    if await plan_jobs(tx, [job], await tx.now(), limits):
        await tx.notify_wake()


async def delete_job(store: Store, job_id: int) -> int:
    """Soft-delete: unstarted runs are cancelled; history stays. Returns runs cancelled."""
    async with store.transaction() as tx:
        if await tx.soft_delete_job(job_id) is None:
            raise NotFound(f"job {job_id} not found")
        return await tx.cancel_unstarted_runs(job_id, "job deleted")


async def set_paused(store: Store, job_id: int, paused: bool, limits: PlanLimits) -> Record:
    """Pause stops planning and claiming; resume plans at once (catch-up policy applies)."""
    async with store.transaction() as tx:
        row = await tx.set_job_paused(job_id, paused)
        if row is None:
            raise NotFound(f"job {job_id} not found")
        if not paused:
            await _plan_now(tx, job_id, limits)
            await tx.notify_wake()
    return row


async def trigger_job(
    store: Store, job_id: int, payload: dict[str, Any] | None, key: str | None
) -> tuple[int, bool]:
    """Insert a manual run due now; returns (run id, created).

    With an idempotency key, a repeated request returns the run the first one created
    (a different payload for the same key is a conflict). A paused job's run waits for
    the resume, like its scheduled runs.
    """
    async with store.transaction() as tx:
        # A retry shifts scheduled_at by a microsecond when a planned run holds the instant.
        for shift_us in range(4):
            run_id = await tx.trigger_run(job_id, payload, key, shift_us)
            if run_id is not None:
                await tx.notify_wake()
                return run_id, True
            if key is not None:
                existing = await tx.run_by_idempotency_key(job_id, key)
                if existing is not None:
                    if existing["payload"] != payload:
                        raise Conflict(
                            "Idempotency-Key: this key was used for a trigger with a different"
                            " payload"
                        )
                    return int(existing["id"]), False
            if await tx.get_job(job_id) is None:
                raise NotFound(f"job {job_id} not found")
    raise Conflict(f"job {job_id}: could not find a free instant for a manual run; retry")


async def job_warnings(store: Store, row: Record) -> list[str]:
    """Accepted but worth saying: no live worker offers the type, or the job is paused."""
    warnings = []
    if not await store.type_has_live_worker(row["type"]):
        warnings.append(
            f"type: no live worker offers type '{row['type']}'; its runs wait until one does"
        )
    if row["paused"]:
        warnings.append("paused: the job is paused; its runs wait until it is resumed")
    return warnings
