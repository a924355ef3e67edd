"""The API's reads of run history and workers: keyset pages over the history indexes, one
method per `-- name:` block (a part of Store)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from supervisor.core.db import Record
from supervisor.core.sql import Queries

# A keyset position (scheduled_at, id), a [from, to) range with +-infinity for an open end,
# and a range whose ends may be absent (no filter).
RunKey = tuple[datetime, int]
TimeRange = tuple[datetime, datetime]
OpenRange = tuple[datetime | None, datetime | None]


class History(Queries):
    async def get_run_detail(self, run_id: int) -> Record | None:
        return await self._fetchrow("get_run_detail", run_id)

    async def list_run_attempts(self, run_id: int) -> list[Record]:
        return await self._fetch("list_run_attempts", run_id)

    async def list_runs_page(
        self, before: RunKey, scheduled: TimeRange, finished: OpenRange, limit: int
    ) -> list[Record]:
        return await self._fetch("list_runs_page", *before, *scheduled, *finished, limit)

    async def list_runs_by_status(
        self,
        statuses: Sequence[str],
        before: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
    ) -> list[Record]:
        return await self._fetch(
            "list_runs_by_status", list(statuses), *before, *scheduled, *finished, limit
        )

    async def list_runs_by_job(
        self,
        job_ids: Sequence[int],
        statuses: Sequence[str] | None,
        before: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
    ) -> list[Record]:
        return await self._fetch(
            "list_runs_by_job",
            list(job_ids),
            None if statuses is None else list(statuses),
            *before,
            *scheduled,
            *finished,
            limit,
        )

    async def list_runs_upcoming_page(
        self, after: RunKey, scheduled: TimeRange, finished: OpenRange, limit: int
    ) -> list[Record]:
        return await self._fetch("list_runs_upcoming_page", *after, *scheduled, *finished, limit)

    async def list_runs_upcoming_by_status(
        self,
        statuses: Sequence[str],
        after: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
    ) -> list[Record]:
        return await self._fetch(
            "list_runs_upcoming_by_status", list(statuses), *after, *scheduled, *finished, limit
        )

    async def list_runs_upcoming_by_job(
        self,
        job_ids: Sequence[int],
        statuses: Sequence[str] | None,
        after: RunKey,
        scheduled: TimeRange,
        finished: OpenRange,
        limit: int,
    ) -> list[Record]:
        return await self._fetch(
            "list_runs_upcoming_by_job",
            list(job_ids),
            None if statuses is None else list(statuses),
            *after,
            *scheduled,
            *finished,
            limit,
        )

    async def list_workers(self, recent_seconds: float, limit: int) -> list[Record]:
        return await self._fetch("list_workers", recent_seconds, limit)
