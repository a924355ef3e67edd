"""JSON representations of jobs, runs, attempts and workers (the OpenAPI schemas mirror
these): timestamps ISO-8601 in UTC with a Z offset, durations in seconds, enums lowercase."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from supervisor.core import schedule
from supervisor.core.db import Record
from supervisor.core.domain import Job, JobSchedule, UnloadableSchedule
from supervisor.core.model import utc_iso


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


def job(j: Job) -> dict[str, Any]:
    spec = j.spec
    return {
        "id": j.id,
        "name": spec.name,
        "type": spec.type,
        "payload": spec.payload,
        "cron": spec.cron,
        "run_at": iso(spec.run_at),
        "timezone": spec.timezone,
        "max_attempts": spec.max_attempts,
        "timeout_seconds": spec.timeout_seconds,
        "retry": {
            "base_seconds": spec.retry_base_seconds,
            "cap_seconds": spec.retry_cap_seconds,
        },
        "catchup": str(spec.catchup),
        "catchup_window_seconds": spec.catchup_window_seconds,
        "overlap": str(spec.overlap),
        "paused": spec.paused,
        "created_at": iso(j.created_at),
        "updated_at": iso(j.updated_at),
    }


def job_detail(j: Job, after: datetime, warnings: list[str]) -> dict[str, Any]:
    return {**job(j), "next": next_instants(j.spec.schedule, after), "warnings": warnings}


def run(row: Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "job_id": row["job_id"],
        "job_name": row["job_name"],
        "scheduled_at": iso(row["scheduled_at"]),
        "scheduled_at_local": local(row["scheduled_at"], row["timezone"]),
        "status": str(row["status"]),
        "trigger": str(row["trigger"]),
        "attempts": row["attempts"],
        "max_attempts": row["max_attempts"],
        "run_after": iso(row["run_after"]),
        "worker_id": row["lease_owner"],
        "lease_expires_at": iso(row["lease_expires_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "duration_seconds": seconds_between(row["started_at"], row["finished_at"]),
        "error": row["last_error"],
        "skip_reason": row["skip_reason"],
        "idempotency_key": row["idempotency_key"],
        "created_at": iso(row["created_at"]),
    }


def attempt(row: Record) -> dict[str, Any]:
    return {
        "attempt": row["attempt"],
        "worker_id": row["worker_id"],
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "duration_seconds": seconds_between(row["started_at"], row["finished_at"]),
        "outcome": str(row["outcome"]),
        "exit_code": row["exit_code"],
        "signal": row["signal"],
        "error": row["error"],
        "stdout_tail": row["stdout_tail"],
        "stderr_tail": row["stderr_tail"],
        "stdout_replaced": row["stdout_replaced"],
        "stderr_replaced": row["stderr_replaced"],
        "cpu_seconds": row["cpu_seconds"],
        "peak_rss_bytes": row["peak_rss_bytes"],
    }


def run_detail(row: Record, attempts: list[Record]) -> dict[str, Any]:
    return {**run(row), "payload": row["payload"], "history": [attempt(a) for a in attempts]}


def worker(row: Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "host": row["host"],
        "pid": row["pid"],
        "types": list(row["types"]),
        "concurrency": row["concurrency"],
        "running": row["running"],
        "version": row["version"],
        "lease_ttl_seconds": row["lease_ttl"],
        "started_at": iso(row["started_at"]),
        "last_heartbeat_at": iso(row["last_seen_at"]),
        "stopped_at": iso(row["stopped_at"]),
        "live": row["live"],
    }
