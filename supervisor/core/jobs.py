"""Job operations over the store, shared by the API, the CLI and `punchclock up`.

Each operation is one transaction, so a failed request writes nothing, and a schedule change
replans in the same transaction. Validation (body -> JobSpec) is jobspec.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from supervisor.core.channels import set_job_notify
from supervisor.core.domain import Job, JobSpec
from supervisor.core.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, UniqueConflict
from supervisor.core.groups import store_job_limits
from supervisor.core.jobspec import checked_instant, validate_job, validate_trigger
from supervisor.core.model import Catchup, Overlap
from supervisor.core.planning import PlanLimits, plan_jobs
from supervisor.core.schedule import parse_instant
from supervisor.core.store import Store

# The API's entry points, re-exported so callers need one module for a whole request.
__all__ = [
    "Backfill",
    "InvalidSpecs",
    "backfill",
    "create_job",
    "delete_job",
    "job_warnings",
    "past_run_at",
    "set_paused",
    "trigger_job",
    "update_job",
    "validate_backfill",
    "validate_job",
    "validate_pause",
    "validate_trigger",
]
MAX_BACKFILL = 1000  # instants in one backfill window
MAX_PAUSE_REASON = 500  # the jobs_pause_reason_length constraint (migration 0004)

# ---------------------------------------------------------------- operations


async def create_job(store: Store, spec: JobSpec, limits: PlanLimits) -> Job:
    try:
        async with store.transaction() as tx:
            job = await tx.insert_job(spec)  # locked until commit: plan it as inserted
            if spec.limits.limited:
                job = Job.from_row(await store_job_limits(tx, job.id, spec.limits), spec.schedule)
            await set_job_notify(tx, job.id, spec.notify)
            await _plan_now(tx, job, limits)
    except UniqueConflict:
        raise Conflict(f"name: a job named {spec.name!r} already exists") from None
    return job


async def update_job(
    store: Store, job_id: int, body: Any, limits: PlanLimits, allowed_hosts: tuple[str, ...] = ()
) -> Job:
    """PATCH: the given fields change. `pause_reason` (a string, or null for none) may come
    with them only when the job ends up paused; resuming (`paused: false`) forgets it.
    `allowed_hosts`: notify_allowed_hosts, for ping_url."""
    fields, reason = _split_pause_reason(body)
    try:
        async with store.transaction() as tx:
            current = await tx.lock_job(job_id)
            if current is None:
                raise NotFound(f"job {job_id} not found")
            wanted, reason = _validated(fields, current.spec, reason, allowed_hosts)
            job = await tx.update_job(job_id, wanted)
            assert job is not None
            if wanted.limits != current.spec.limits:
                row = await store_job_limits(tx, job_id, wanted.limits)
                job = Job.from_row(row, wanted.schedule)
            if job.spec.paused and not isinstance(reason, _Keep):  # resuming clears it
                job = await tx.set_pause_reason(job_id, reason)
                assert job is not None
            spec = job.spec
            await set_job_notify(tx, job_id, wanted.notify)
            changed = current.spec.schedule_columns != spec.schedule_columns
            if changed:
                await tx.delete_unstarted_future_runs(job_id)
                await tx.reset_job_plan(job_id)
                if spec.cron is None:  # a one-off is planned once, from a NULL mark
                    await tx.replan_one_off(job_id)
            await tx.sync_unstarted_runs(
                job_id, spec.type, spec.overlap != Overlap.ALLOW, spec.max_attempts
            )
            planned = await tx.lock_job(job_id) if changed else job  # the marks moved
            assert planned is not None
            await _plan_now(tx, planned, limits)
    except UniqueConflict:
        raise Conflict(f"name: a job named {body.get('name')!r} already exists") from None
    return job


async def _plan_now(tx: Store, job: Job, limits: PlanLimits) -> None:
    """Plan a job this transaction holds locked, with its current marks."""
    if job.spec.paused:
        return
    if await plan_jobs(tx, [job], await tx.now(), limits):
        await tx.notify_wake([job.spec.type])


async def delete_job(store: Store, job_id: int) -> int:
    """Soft-delete: unstarted runs are cancelled; history stays. Returns runs cancelled."""
    async with store.transaction() as tx:
        if await tx.soft_delete_job(job_id) is None:
            raise NotFound(f"job {job_id} not found")
        return await tx.cancel_unstarted_runs(job_id, "job deleted")


async def set_paused(
    store: Store, job_id: int, paused: bool, limits: PlanLimits, reason: str | None = None
) -> Job:
    """Pause stops planning and claiming and stores `reason` (None: none given); resume
    plans at once (catch-up policy applies) and forgets the reason (a trigger clears it)."""
    async with store.transaction() as tx:
        job = await tx.set_job_paused(job_id, paused)
        if job is not None and paused:
            job = await tx.set_pause_reason(job_id, reason)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if not paused:
            await _plan_now(tx, job, limits)
            await tx.notify_wake([job.spec.type])
    return job


class _Keep:
    """PATCH without pause_reason: the stored reason stays."""


KEEP = _Keep()


def _split_pause_reason(body: Any) -> tuple[Any, str | _Keep | None]:
    """(the job fields, the pause_reason given or KEEP); the reason not yet checked."""
    if not isinstance(body, dict) or "pause_reason" not in body:
        return body, KEEP
    fields = {k: v for k, v in body.items() if k != "pause_reason"}
    return fields, body["pause_reason"]


def _validated(
    fields: Any, base: JobSpec, reason: Any, allowed_hosts: tuple[str, ...]
) -> tuple[JobSpec, str | _Keep | None]:
    """validate_job and the pause_reason (stripped), its errors among the fields' (one 422
    for all)."""
    errors: list[InvalidSpec] = []
    wanted: JobSpec | None = None
    try:
        wanted = validate_job(fields, base, allowed_hosts)
    except InvalidSpecs as exc:
        errors = list(exc.errors)
    if reason is not KEEP:
        try:
            reason = validate_pause({"reason": reason})
        except InvalidSpecs as exc:
            errors += [InvalidSpec("pause_reason", e.message) for e in exc.errors]
        paused = wanted.paused if wanted is not None else fields.get("paused", base.paused)
        if reason is not None and paused is not True:
            errors.append(InvalidSpec("pause_reason", "can be set only on a paused job"))
    if errors:
        raise InvalidSpecs(errors)
    assert wanted is not None
    return wanted, reason


def validate_pause(body: Any) -> str | None:
    """A pause request's body ({} when none) -> its reason, stripped (None: none given)."""
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    errors = [InvalidSpec(name, "unknown field") for name in sorted(set(body) - {"reason"})]
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        errors.append(InvalidSpec("reason", "must be a string or null"))
    elif reason is not None and "\x00" in reason:
        errors.append(InvalidSpec("reason", "must not contain NUL characters"))
    elif reason is not None and len(reason) > MAX_PAUSE_REASON:  # as sent (OpenAPI maxLength)
        errors.append(InvalidSpec("reason", f"must be at most {MAX_PAUSE_REASON} characters"))
    if errors:
        raise InvalidSpecs(errors)
    return reason.strip() or None if isinstance(reason, str) else None


async def trigger_job(
    store: Store, job_id: int, payload: dict[str, Any] | None, key: str | None
) -> tuple[int, bool]:
    """Insert a manual run due now; returns (run id, created).

    With an idempotency key, a repeated request returns the run the first one created
    (a different payload for the same key is a conflict). A paused job runs it (claim_runs
    takes manual runs of paused jobs) and stays paused: checking a job before resuming it.
    """
    async with store.transaction() as tx:
        # A retry shifts scheduled_at by a microsecond when a planned run holds the instant.
        for shift_us in range(4):
            run_id = await tx.trigger_run(job_id, payload, key, shift_us)
            if run_id is not None:  # its wake-up is sent with it
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


async def job_warnings(store: Store, spec: JobSpec) -> list[str]:
    """Accepted but worth saying: no live worker offers the type, or the job is paused."""
    warnings = []
    if not await store.type_has_live_worker(spec.type):
        warnings.append(
            f"type: no live worker offers type '{spec.type}'; its runs wait until one does"
        )
    if spec.paused:
        warnings.append("paused: the job is paused; its runs wait until it is resumed")
    return warnings


def past_run_at(spec: JobSpec, now: datetime) -> str | None:
    """A one-off's run_at that has passed is accepted with this warning, not refused (a
    client's "now" is past by the time it arrives; DESIGN.md, Dashboard): it says what the
    catch-up rules will do with the run."""
    if spec.cron is not None or spec.run_at is None or spec.run_at > now:
        return None
    age = (now - spec.run_at).total_seconds()
    window = spec.catchup_window_seconds
    if age > window:
        fate = (
            f"older than the catch-up window ({window:g} s), its run is recorded as skipped"
            " (missed) and never starts"
        )
    elif spec.catchup == Catchup.NONE:
        fate = "catch-up none skips its run (missed) unless it starts within misfire_grace"
    else:
        fate = f"its run is due at once (within the catch-up window of {window:g} s)"
    return (
        f"run_at: {spec.run_at.isoformat()} is already past ({age:.0f} s ago): {fate};"
        " give a future run_at, or trigger the job to run it now"
    )


# ---------------------------------------------------------------- backfill


@dataclass(frozen=True, slots=True)
class Backfill:
    """A backfill window's instants, those without a run, and the runs created for them."""

    start: datetime
    end: datetime
    instants: int  # the schedule's instants in [start, end)
    missing: list[datetime]  # those with no run (before this backfill)
    created: list[int]  # the runs created (none on a dry run)


def validate_backfill(body: Any) -> tuple[datetime, datetime, bool]:
    """{"from", "to", "dry_run"?} -> (start, end, dry_run): instants with an offset, from < to."""
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    errors = [
        InvalidSpec(k, "unknown field") for k in sorted(set(body) - {"from", "to", "dry_run"})
    ]
    when: dict[str, datetime] = {}
    for name in ("from", "to"):
        value = body.get(name)
        if not isinstance(value, str):
            errors.append(InvalidSpec(name, "is required: an ISO-8601 instant with a UTC offset"))
            continue
        try:
            when[name] = checked_instant(parse_instant(value, name), name, value)
        except InvalidSpec as exc:
            errors.append(exc)
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        errors.append(InvalidSpec("dry_run", "must be true or false"))
    if len(when) == 2 and when["from"] >= when["to"]:
        errors.append(InvalidSpec("to", "must be after from"))
    if errors:
        raise InvalidSpecs(errors)
    return when["from"], when["to"], bool(dry_run)


async def backfill(
    store: Store, job_id: int, start: datetime, end: datetime, dry_run: bool
) -> Backfill:
    """Runs (trigger 'backfill', due now) at the job's instants in [start, end) that have no
    run; at most MAX_BACKFILL instants in the window, which must not reach past now. A
    paused job's runs wait for the resume, like its other runs."""
    async with store.transaction() as tx:
        job = await tx.lock_job(job_id)  # a schedule change waits for this backfill
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if end > await tx.now():
            raise InvalidSpecs(
                [InvalidSpec("to", "must not be after now: the planner runs what lies ahead")]
            )
        tiny = timedelta(microseconds=1)
        instants = job.spec.schedule.between(start - tiny, end - tiny, MAX_BACKFILL + 1)
        if len(instants) > MAX_BACKFILL:
            raise InvalidSpecs(
                [
                    InvalidSpec(
                        "to",
                        f"the window holds more than {MAX_BACKFILL} instants of the schedule;"
                        " end it sooner",
                    )
                ]
            )
        missing = await tx.backfill_holes(job_id, instants) if instants else []
        created = [] if dry_run or not missing else await tx.insert_backfill_runs(job_id, missing)
        if created:
            await tx.notify_wake([job.spec.type])
    return Backfill(start, end, len(instants), missing, created)
