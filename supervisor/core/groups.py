"""Concurrency groups and a job's concurrency limits (DESIGN.md, Concurrency limits): the
input rules, the queries of groups.sql (class Groups) and the operations the API calls.
claim_runs (queries.sql) enforces them; this module only keeps their definitions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from supervisor.core.db import Record
from supervisor.core.domain import JobLimits
from supervisor.core.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, UniqueConflict
from supervisor.core.limits import validate_group
from supervisor.core.sql import Queries
from supervisor.core.store import Store


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    max_running: int
    running: int  # its runs running now, on every host
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, r: Record) -> Group:
        return cls(r["name"], r["max_running"], r["running"], r["created_at"], r["updated_at"])


class Groups(Queries):
    """The queries of groups.sql."""

    async def insert_group(self, name: str, max_running: int) -> Group:
        row = await self._fetchrow("insert_group", name, max_running)
        assert row is not None
        return Group.from_row(row)

    async def update_group(self, name: str, max_running: int) -> Group | None:
        row = await self._fetchrow("update_group", name, max_running)
        return None if row is None else Group.from_row(row)

    async def list_groups(self, name: str | None = None) -> list[Group]:
        return [Group.from_row(r) for r in await self._fetch("list_groups", name)]

    async def delete_group(self, name: str) -> bool:
        return await self._fetchval("delete_group", name) is not None

    async def group_members(self, name: str) -> int:
        return int(await self._fetchval("group_members", name))

    async def set_job_limits(self, job_id: int, limits: JobLimits) -> Record | None:
        return await self._fetchrow("set_job_limits", job_id, limits.group, limits.max_concurrent)

    async def run_waiting_for(self, run_id: int) -> str | None:
        value = await self._fetchval("run_waiting_for", run_id)
        return None if value is None else str(value)


def groups(store: Store) -> Groups:
    """The group queries over the store's pool or connection (its transaction too)."""
    return Groups(store._ex, store._pool)


async def create_group(store: Store, body: Any) -> Group:
    name, most = validate_group(body, create=True)
    assert name is not None and most is not None
    try:
        return await groups(store).insert_group(name, most)
    except UniqueConflict:
        raise Conflict(f"name: a concurrency group named {name!r} already exists") from None


async def get_group(store: Store, name: str) -> Group:
    found = await groups(store).list_groups(name)
    if not found:
        raise NotFound(f"concurrency group {name!r} not found")
    return found[0]


async def update_group(store: Store, name: str, body: Any) -> Group:
    _, most = validate_group(body, create=False)
    assert most is not None
    group = await groups(store).update_group(name, most)
    if group is None:
        raise NotFound(f"concurrency group {name!r} not found")
    return group


async def delete_group(store: Store, name: str) -> None:
    async with store.transaction() as tx:
        g = groups(tx)
        if await g.delete_group(name):
            return
        members = await g.group_members(name)
        if not members and not await g.list_groups(name):
            raise NotFound(f"concurrency group {name!r} not found")
    raise Conflict(
        f"concurrency group {name!r} has {members} job(s): move them to another group "
        "(PATCH concurrency_group) before deleting it"
    )


async def store_job_limits(tx: Store, job_id: int, limits: JobLimits) -> Record:
    """Writes a job's limits inside its create/update transaction; the group must exist."""
    row = await groups(tx).set_job_limits(job_id, limits)
    if row is None:
        raise InvalidSpecs(
            [InvalidSpec("concurrency_group", f"no concurrency group named {limits.group!r}")]
        )
    return row
