"""A pool connection knows every type the statements use from the start: no statement's
first use waits on asyncpg's type introspection (a catalog query of 2-35 ms per statement
per connection, db.KNOWN_TYPES)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from supervisor.core import db
from supervisor.core.db import create_pool
from supervisor.core.migrator import migrate
from supervisor.core.sql import QUERIES

from ..helpers import drop_database, fresh_database


@pytest.fixture
def introspections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[int]]]:
    """The type oids of every introspection query any connection sends meanwhile."""
    seen: list[list[int]] = []
    original = asyncpg.Connection._introspect_types

    async def counted(self: asyncpg.Connection, typeoids: Any, timeout: Any) -> Any:
        seen.append(sorted(typeoids))
        return await original(self, typeoids, timeout)

    monkeypatch.setattr(asyncpg.Connection, "_introspect_types", counted)
    yield seen


async def test_every_statement_prepares_without_introspection(
    dsn: str, introspections: list[list[int]]
) -> None:
    for generic_plans in (True, False):  # the supervisor's pool and the API's
        pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=generic_plans)
        try:
            assert len(introspections) == 1  # the connection's one, at connect
            introspections.clear()
            async with pool.acquire() as conn:
                for name, sql in sorted(QUERIES.items()):
                    await conn.prepare(sql)
                    assert introspections == [], f"{name} needed types {introspections[0]}"
        finally:
            await pool.close()


async def test_known_types_hold_every_enum_of_the_schema(pool: asyncpg.Pool) -> None:
    enums = await pool.fetch(
        """SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE n.nspname = 'public' AND t.typtype = 'e'"""
    )
    missing = {r["typname"] for r in enums} - set(db.KNOWN_TYPES)
    assert not missing, f"add to db.KNOWN_TYPES: {sorted(missing)}"


async def test_a_pool_opened_before_the_migration_works_after_it(admin_dsn: str) -> None:
    """`supervise --auto-migrate` opens its pool on an empty database (no enums yet), then
    migrates through it: those connections resolve the types on first use instead."""
    name = "pc_known_types_empty"
    pool = await create_pool(
        await fresh_database(admin_dsn, name), min_size=1, max_size=1, generic_plans=True
    )
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        assert await pool.fetchval("SELECT 'running'::run_status") == "running"
    finally:
        await pool.close()
    await drop_database(admin_dsn, name)
