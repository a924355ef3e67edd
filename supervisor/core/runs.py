"""Run operations over the store for the API: history lists, requeue and cancel.

Each operation is one transaction. The filters are validated by the caller (api/params);
this module picks the index-driven list query that fits them and owns the state rules
(which statuses may be requeued or cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from supervisor.core.errors import Conflict, InvalidSpec, NotFound
from supervisor.core.groups import groups
from supervisor.core.history import OpenRange, RunKey, TimeRange
from supervisor.core.model import INFINITY, MAX_ID, MINUS_INFINITY, REQUEUEABLE, WAITING, RunStatus
from supervisor.core.records import Attempt, Run
from supervisor.core.store import Store

FIRST_PAGE: RunKey = (INFINITY, MAX_ID)  # history; the queries clamp it to (now(), max id)
FIRST_UPCOMING: RunKey = (MINUS_INFINITY, 0)  # the plan ahead; clamped up to (now(), max id)
CANCEL_REASON = "cancelled by the API"
JOB_MATCHES = 200  # a name substring lists the runs of at most this many jobs (by name)


@dataclass(frozen=True)
class RunFilters:
    """The list filters; `scheduled_*`/`finished_*` are half-open ranges [after, before).

    `upcoming` picks the list's mode (bulk requeue ignores it): False is history, runs with
    scheduled_at <= now(), newest first; True is the plan ahead, scheduled_at > now(),
    soonest first. The other filters narrow either mode. `now()` is the database's clock.
    """

    job_id: int | None = None
    job_name: str | None = None
    job_text: str | None = None  # a substring of the name, any case (the dashboard's filter)
    statuses: tuple[str, ...] = ()
    scheduled_after: datetime | None = None
    scheduled_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    upcoming: bool = False

    def canonical(self) -> dict[str, Any]:
        """A stable form for hashing (cursors remember which filters made them)."""
        return {
            "job_id": self.job_id,
            "job_name": self.job_name,
            "job_text": self.job_text,
            "status": sorted(set(self.statuses)),
            "upcoming": self.upcoming,
            **{
                name: None if value is None else value.isoformat()
                for name, value in (
                    ("scheduled_after", self.scheduled_after),
                    ("scheduled_before", self.scheduled_before),
                    ("finished_after", self.finished_after),
                    ("finished_before", self.finished_before),
                )
            },
        }

    @property
    def scheduled(self) -> TimeRange:
        return (self.scheduled_after or MINUS_INFINITY, self.scheduled_before or INFINITY)

    @property
    def finished(self) -> OpenRange:
        return (self.finished_after, self.finished_before)


async def jobs_filtered(store: Store, f: RunFilters) -> list[int] | None:
    """The job ids the filters allow; None when they do not filter by job."""
    if f.job_id is None and f.job_name is None and f.job_text is None:
        return None
    ids = [f.job_id] if f.job_id is not None else []
    if f.job_name is not None:
        named = await store.job_ids_by_name(f.job_name)
        ids = [i for i in named if f.job_id is None or i == f.job_id]
    if f.job_text is not None:
        matching = set(await store.job_ids_matching(f.job_text, JOB_MATCHES))
        ids = [i for i in ids if i in matching] if f.job_id or f.job_name else sorted(matching)
    return ids


async def list_runs(store: Store, f: RunFilters, key: RunKey | None, limit: int) -> list[Run]:
    """At most `limit` runs in the filters' mode after the cursor `key` (None: first page):
    history newest first with (scheduled_at, id) < key, or upcoming soonest first with
    (scheduled_at, id) > key."""
    if f.upcoming:
        key = key or FIRST_UPCOMING
        if f.scheduled_after is not None:
            key = max(key, (f.scheduled_after, 0))  # start the scan at the range's start
    else:
        key = key or FIRST_PAGE
        if f.scheduled_before is not None:
            # The same rows (ids are positive), but the index scan starts at the range's
            # end: from the first page's (infinity, max) key it would step over every newer run.
            key = min(key, (f.scheduled_before, 0))
    job_ids = await jobs_filtered(store, f)
    statuses = sorted(set(f.statuses))
    window = (key, f.scheduled, f.finished, limit, f.upcoming)
    if job_ids is not None:
        if not job_ids:
            return []
        return await _with_workers(
            store, await store.list_runs_by_job(job_ids, statuses or None, *window)
        )
    # Across jobs, every list is a merge of per-status ranges: no filter is every status.
    every = statuses or [s.value for s in RunStatus]
    return await _with_workers(store, await store.list_runs_by_status(every, *window))


async def _with_workers(store: Store, rows: list[Run]) -> list[Run]:
    """Each ended run's last worker (Run.worker), read for the page's runs only."""
    ended = [r.id for r in rows if r.lease_owner is None and r.attempts > 0]
    found = await store.last_attempt_workers(ended) if ended else {}
    return [replace(r, last_worker=found[r.id]) if r.id in found else r for r in rows]


async def run_detail(store: Store, run_id: int) -> tuple[Run, list[Attempt]]:
    """The run with its job's name and zone, and every attempt in order."""
    row = await store.get_run_detail(run_id)
    if row is None:
        raise NotFound(f"run {run_id} not found")
    attempts = await store.list_run_attempts(run_id)
    if attempts:
        row = replace(row, last_worker=attempts[-1].worker_id)
    return row, attempts


async def waiting_for(store: Store, run: Run) -> str | None:
    """What concurrency limit holds a due, waiting run back (None: none does)."""
    if run.status not in WAITING:
        return None
    return await groups(store).run_waiting_for(run.id)


async def requeue_run(store: Store, run_id: int) -> None:
    """A dead or failed run becomes scheduled now with a fresh attempt budget."""
    async with store.transaction() as tx:
        if await tx.requeue_run(run_id) is not None:
            await tx.notify_wake()
            return
        row = await tx.get_run_detail(run_id)
        if row is None:
            raise NotFound(f"run {run_id} not found")
        if row.status in REQUEUEABLE:
            raise Conflict(f"run {run_id}: its job was deleted; it cannot run again")
        raise Conflict(f"run {run_id} is {row.status}; only dead or failed runs can be requeued")


async def requeue_runs(store: Store, f: RunFilters) -> int:
    """Bulk requeue of dead (or failed) runs matching the filters; returns how many moved."""
    statuses = sorted(set(f.statuses) or {RunStatus.DEAD.value})
    wrong = [s for s in statuses if s not in REQUEUEABLE]
    if wrong:
        raise InvalidSpec("status", f"only dead or failed runs can be requeued, not {wrong[0]}")
    job_ids = await jobs_filtered(store, f)
    if job_ids == []:
        return 0
    async with store.transaction() as tx:
        moved = await tx.requeue_runs(statuses, job_ids, f.scheduled, f.finished)
        if moved:
            await tx.notify_wake()
    return moved


async def cancel_run(store: Store, run_id: int) -> None:
    """A waiting run becomes cancelled; a running one has its lease revoked (its supervisor
    kills the child at its next renewal) and ends cancelled. Other states: Conflict."""
    async with store.transaction() as tx:
        status = await tx.lock_run(run_id)
        if status is None:
            raise NotFound(f"run {run_id} not found")
        if status == RunStatus.RUNNING:
            await tx.revoke_running_run(run_id, CANCEL_REASON)
        elif status in WAITING:
            await tx.cancel_waiting_run(run_id, CANCEL_REASON)
        else:
            raise Conflict(
                f"run {run_id} is {status}; only scheduled, failed or running runs can be cancelled"
            )
