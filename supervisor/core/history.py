"""The API's reads of run history and workers: keyset pages over the history indexes, one
method per `-- name:` block (a part of Store), rows returned as records.py values."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from supervisor.core.db import Record
from supervisor.core.records import Attempt, Run, Worker
from supervisor.core.sql import Queries

# A keyset position (scheduled_at, id), a [from, to) range with +-infinity for an open end,
# and a range whose ends may be absent (no filter).
RunKey = tuple[datetime, int]
TimeRange = tuple[datetime, datetime]
OpenRange = tuple[datetime | None, datetime | None]


def _runs(rows: Sequence[Record]) -> list[Run]:
    return [Run.from_row(r) for r in rows]


# (history, upcoming) blocks of each run list: the plan ahead reads the same index the
# other way; queries.sql keeps them apart so each plan is tested on its own.
_BY_STATUS = ("list_runs_by_status", "list_runs_upcoming_by_status")
_BY_JOB = ("list_runs_by_job", "list_runs_upcoming_by_job")


class History(Queries):
    """Run pages take `key` exclusive: history (newest first, before `key`) or, with
    `upcoming`, the plan ahead (soonest first, after `key`)."""

    async def get_run_detail(self, run_id: int) -> Run | None:
        row = await self._fetchrow("get_run_detail", run_id)
        return None if row is None else Run.from_row(row)

    async def job_ids_matching(self, text: str, limit: int) -> list[int]:
        """Jobs (deleted ones too) whose name holds `text`, any case, first `limit` by name."""
        return [r["id"] for r in await self._fetch("job_ids_matching", text, limit)]

    async def last_attempt_workers(self, run_ids: Sequence[int]) -> dict[int, str]:
        """The worker of each run's last attempt (runs without one are absent)."""
        rows = await self._fetch("last_attempt_workers", list(run_ids))
        return {r["run_id"]: r["worker_id"] for r in rows}

    async def list_run_attempts(self, run_id: int) -> list[Attempt]:
        return [Attempt.from_row(r) for r in await self._fetch("list_run_attempts", run_id)]

    async def list_runs_by_status(
        self,
        statuses: Sequence[str],
        key: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
        upcoming: bool,
    ) -> list[Run]:
        name = _BY_STATUS[upcoming]
        return _runs(await self._fetch(name, list(statuses), *key, *scheduled, *finished, limit))

    async def list_runs_by_job(
        self,
        job_ids: Sequence[int],
        statuses: Sequence[str] | None,
        key: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
        upcoming: bool,
    ) -> list[Run]:
        wanted = None if statuses is None else list(statuses)
        name = _BY_JOB[upcoming]
        rows = await self._fetch(name, list(job_ids), wanted, *key, *scheduled, *finished, limit)
        return _runs(rows)

    async def list_workers(self, recent_seconds: float, limit: int) -> list[Worker]:
        rows = await self._fetch("list_workers", recent_seconds, limit)
        return [Worker.from_row(r) for r in rows]
