"""JSON representations of jobs (their fields as supervisor/core/jobfields.py declares
them), runs, attempts and workers (the OpenAPI schemas mirror these): timestamps ISO-8601
in UTC with a Z offset, durations in seconds, enums lowercase. A payload is shown only when
`payloads` is true (permissions.can_see_payloads): otherwise it is null with
`payload_withheld: true`."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from operator import attrgetter
from typing import Any
from zoneinfo import ZoneInfo

from supervisor.core import schedule
from supervisor.core.domain import Job, JobSchedule, JobSpec, UnloadableSchedule
from supervisor.core.events import destination
from supervisor.core.jobfields import FIELDS, JobField
from supervisor.core.jobs import Backfill
from supervisor.core.model import utc_iso
from supervisor.core.records import Attempt, Run, Worker


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return utc_iso(value)


def local(value: datetime | None, zone: str) -> str | None:
    if value is None:
        return None
    try:
        return value.astimezone(ZoneInfo(zone)).isoformat()
    except (ValueError, OverflowError, KeyError):
        return None


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 6)


def next_instants(sched: JobSchedule, after: datetime, count: int = 5) -> list[dict[str, str]]:
    """The job's next fire instants after `after`, in UTC and in its own zone; none when
    this host cannot load its schedule (domain.UnloadableSchedule)."""
    if isinstance(sched, UnloadableSchedule):
        return []
    try:
        return schedule.preview(sched, after, count)
    except (OverflowError, ValueError):
        return []


# A write-only field's view: where it points, never itself (such URLs hold a token).
SHOWN_AS = {"ping_url": "ping_destination"}


def field_value(spec: JobSpec, f: JobField) -> Any:
    """A declared field's value (jobfields.py) in a spec, as the API's JSON shows it."""
    if f.attr == "exit_policy":  # exit statuses as numbers, named endings as strings
        return spec.exit_policy.view()[f.name]
    value = attrgetter(f.attr)(spec)
    if isinstance(value, datetime):
        return iso(value)
    return str(value) if isinstance(value, StrEnum) else value


def job(j: Job, payloads: bool) -> dict[str, Any]:
    """Every viewed field of jobfields.FIELDS, in their order, nested as a body nests them."""
    spec = j.spec
    out: dict[str, Any] = {"id": j.id}
    for f in FIELDS:
        if not f.viewed:  # notify: job_detail's caller reads it apart
            continue
        value = field_value(spec, f)
        if f.write_only:
            out[SHOWN_AS[f.name]] = None if value is None else destination(value)
        elif f.name == "payload":
            out["payload"], out["payload_withheld"] = (value if payloads else None), not payloads
        elif len(f.path) > 1:
            out.setdefault(f.path[0], {})[f.path[1]] = value
        else:
            out[f.name] = value
        if f.name == "paused":
            out["pause_reason"] = j.pause_reason
    out["created_at"], out["updated_at"] = iso(j.created_at), iso(j.updated_at)
    return out


def job_detail(j: Job, after: datetime, warnings: list[str], payloads: bool) -> dict[str, Any]:
    return {**job(j, payloads), "next": next_instants(j.spec.schedule, after), "warnings": warnings}


def backfill(job_id: int, b: Backfill, dry_run: bool) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "from": iso(b.start),
        "to": iso(b.end),
        "dry_run": dry_run,
        "instants": b.instants,
        "missing": len(b.missing),
        "created": len(b.created),
        "run_ids": b.created,
    }


def run(r: Run) -> dict[str, Any]:
    return {
        "id": r.id,
        "job_id": r.job_id,
        "job_name": r.job_name,
        "scheduled_at": iso(r.scheduled_at),
        "scheduled_at_local": local(r.scheduled_at, r.timezone),
        "status": str(r.status),
        "trigger": str(r.trigger),
        "attempts": r.attempts,
        "max_attempts": r.max_attempts,
        "run_after": iso(r.run_after),
        "worker_id": r.worker,  # the last attempt's once it ended
        "lease_expires_at": iso(r.lease_expires_at),
        "started_at": iso(r.started_at),
        "finished_at": iso(r.finished_at),
        "duration_seconds": seconds_between(r.started_at, r.finished_at),
        "error": r.last_error,
        "skip_reason": None if r.skip_reason is None else str(r.skip_reason),
        "idempotency_key": r.idempotency_key,
        "created_at": iso(r.created_at),
    }


def attempt(a: Attempt) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "worker_id": a.worker_id,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "duration_seconds": seconds_between(a.started_at, a.finished_at),
        "outcome": str(a.outcome),
        "exit_code": a.exit_code,
        "signal": a.signal,
        "error": a.error,
        "stdout_tail": a.stdout_tail,
        "stderr_tail": a.stderr_tail,
        "stdout_replaced": a.stdout_replaced,
        "stderr_replaced": a.stderr_replaced,
        "cpu_seconds": a.cpu_seconds,
        "peak_rss_bytes": a.peak_rss_bytes,
    }


def run_detail(
    r: Run, attempts: list[Attempt], waiting_for: str | None, payloads: bool
) -> dict[str, Any]:
    return {
        **run(r),
        "waiting_for": waiting_for,
        "payload": r.payload if payloads else None,
        "payload_withheld": not payloads,
        "history": [attempt(a) for a in attempts],
    }


def worker(w: Worker) -> dict[str, Any]:
    return {
        "id": w.id,
        "host": w.host,
        "pid": w.pid,
        "types": list(w.types),
        "concurrency": w.concurrency,
        "running": w.running,
        "version": w.version,
        "lease_ttl_seconds": w.lease_ttl,
        "started_at": iso(w.started_at),
        "last_heartbeat_at": iso(w.last_seen_at),
        "stopped_at": iso(w.stopped_at),
        "live": w.live,
    }
