"""Rows as they leave the store: frozen values built once by `from_row` at the store
boundary (as domain.Job is), so no code past it reads an asyncpg Record by key. Enum
columns arrive as text and are parsed here into model.py's enums."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from supervisor.core.db import Record
from supervisor.core.exitpolicy import ExitPolicy
from supervisor.core.model import Outcome, RunStatus, SkipReason, Trigger


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this host has just leased (claim_runs): what the executor needs to run it."""

    id: int
    job_id: int
    job_name: str
    type: str
    scheduled_at: datetime
    run_after: datetime  # its place in the claim order (the claimer's cursor)
    started_at: datetime
    db_now: datetime  # the database clock at the claim: the timeout's deadline counts from it
    attempts: int  # this attempt's number
    max_attempts: int
    lease_token: int
    trigger: Trigger
    wakes_others: bool  # its end may let another host start a run (overlap or a limit)
    payload: str  # the run's own payload, else the job's, as JSON text (the child's stdin)
    timeout_seconds: float | None
    retry_base_seconds: float
    retry_cap_seconds: float
    exit_policy: ExitPolicy
    held_back: int = 0  # runs this claim locked but left waiting for a concurrency limit
    ping_url: str | None = None  # the job's: its completion writes the success/fail ping
    start_in: float = 0.0  # seconds from the claim to the run's instant (claimed ahead)
    overlap_due: bool = False  # a due run of an exclusive job waited for a running one

    @property
    def due_at(self) -> datetime:
        """When this attempt became due (queue delay counts from it): a first attempt at its
        instant; a backfilled run's instant had passed when it was created, and a retry or
        requeue is due again from run_after (neither is late by the time in between)."""
        if self.attempts == 1 and self.trigger != Trigger.BACKFILL:
            return self.scheduled_at
        return max(self.scheduled_at, self.run_after)

    @classmethod
    def from_row(cls, r: Record) -> Claim:
        return cls(
            r["id"],
            r["job_id"],
            r["job_name"],
            r["type"],
            r["scheduled_at"],
            r["run_after"],
            r["started_at"],
            r["db_now"],
            r["attempts"],
            r["max_attempts"],
            r["lease_token"],
            Trigger(r["trigger"]),
            r["wakes_others"],
            r["payload"],
            r["timeout_seconds"],
            r["retry_base_seconds"],
            r["retry_cap_seconds"],
            ExitPolicy.from_columns(r["success_exit_codes"], r["dead_on"], r["retry_on"]),
            r["held_back"],
            r["ping_url"],
            r["start_in"],
            r["overlap_due"],
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    """A due run recorded skipped instead of claimed (skip_missed_runs)."""

    id: int
    job_id: int
    reason: SkipReason

    @classmethod
    def from_row(cls, r: Record) -> Skipped:
        return cls(r["id"], r["job_id"], SkipReason(r["reason"]))


@dataclass(frozen=True, slots=True)
class CatchUp:
    """One catch-up pass (skip_missed_runs): what it skipped, and where the next pass reads
    on in the old unstarted runs, (run_after, id); None: from the start again."""

    skipped: list[Skipped]
    resume_after: tuple[datetime, int] | None

    @classmethod
    def from_rows(cls, rows: list[Record]) -> CatchUp:
        skipped = [Skipped.from_row(r) for r in rows if r["id"] is not None]
        # The one row without a run id carries the position (UNION ALL promises no order).
        [mark] = [r for r in rows if r["id"] is None]
        resume = None if mark["next_id"] is None else (mark["next_after"], mark["next_id"])
        return cls(skipped, resume)


@dataclass(frozen=True, slots=True)
class Reaped:
    """A run whose lease expired, taken back from its dead holder (reap_expired)."""

    id: int
    job_id: int
    job_name: str
    type: str
    attempts: int
    status: RunStatus  # failed (retry pending) or dead
    lease_owner: str | None  # the worker that lost it

    @classmethod
    def from_row(cls, r: Record) -> Reaped:
        return cls(
            r["id"],
            r["job_id"],
            r["job_name"],
            r["type"],
            r["attempts"],
            RunStatus(r["status"]),
            r["lease_owner"],
        )


@dataclass(frozen=True, slots=True)
class Run:
    """A run as the API and the dashboard show it, with its job's name and zone."""

    id: int
    job_id: int
    job_name: str
    timezone: str
    scheduled_at: datetime
    status: RunStatus
    trigger: Trigger
    attempts: int
    max_attempts: int
    run_after: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    skip_reason: SkipReason | None
    idempotency_key: str | None
    created_at: datetime
    payload: Any = None  # only read with the detail of one run
    last_worker: str | None = None  # its last attempt's (runs.py fills it in)

    @property
    def worker(self) -> str | None:
        """Who runs it now, else who ran its last attempt (an ended attempt clears
        lease_owner; the attempt keeps the worker)."""
        return self.lease_owner or self.last_worker

    @classmethod
    def from_row(cls, r: Record) -> Run:
        reason = r["skip_reason"]
        return cls(
            r["id"],
            r["job_id"],
            r["job_name"],
            r["timezone"],
            r["scheduled_at"],
            RunStatus(r["status"]),
            Trigger(r["trigger"]),
            r["attempts"],
            r["max_attempts"],
            r["run_after"],
            r["lease_owner"],
            r["lease_expires_at"],
            r["started_at"],
            r["finished_at"],
            r["last_error"],
            None if reason is None else SkipReason(reason),
            r["idempotency_key"],
            r["created_at"],
            r.get("payload"),
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a run: who ran it, how it ended, what it printed and cost."""

    run_id: int
    attempt: int
    worker_id: str
    lease_token: int
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome
    exit_code: int | None
    signal: int | None
    error: str | None
    stdout_tail: str | None
    stderr_tail: str | None
    stdout_replaced: bool
    stderr_replaced: bool
    cpu_seconds: float | None
    peak_rss_bytes: int | None

    @classmethod
    def from_row(cls, r: Record) -> Attempt:
        return cls(
            r["run_id"],
            r["attempt"],
            r["worker_id"],
            r["lease_token"],
            r["started_at"],
            r["finished_at"],
            Outcome(r["outcome"]),
            r["exit_code"],
            r["signal"],
            r["error"],
            r["stdout_tail"],
            r["stderr_tail"],
            r["stdout_replaced"],
            r["stderr_replaced"],
            r["cpu_seconds"],
            r["peak_rss_bytes"],
        )


@dataclass(frozen=True, slots=True)
class Worker:
    """A supervisor as it registered and last heartbeat; `live` by worker_is_live()."""

    id: str
    host: str
    pid: int
    types: tuple[str, ...]
    concurrency: int
    running: int
    version: str
    lease_ttl: float
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    live: bool

    @classmethod
    def from_row(cls, r: Record) -> Worker:
        return cls(
            r["id"],
            r["host"],
            r["pid"],
            tuple(r["types"]),
            r["concurrency"],
            r["running"],
            r["version"],
            r["lease_ttl"],
            r["started_at"],
            r["last_seen_at"],
            r["stopped_at"],
            r["live"],
        )
