"""The data layer against a real PostgreSQL: migrations and the named queries."""

from __future__ import annotations

import asyncio
import inspect
import re
import uuid
from pathlib import Path

import asyncpg
import pytest

from supervisor.core import migrator as store_mod
from supervisor.core.db import connect
from supervisor.core.errors import SchemaMismatch
from supervisor.core.migrator import migrate, pending_migrations
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from ..conftest import with_database
from ..helpers import fresh_database


async def test_migrate_from_empty_then_idempotent(admin_dsn: str) -> None:
    dsn = await fresh_database(admin_dsn, "pc_mig_empty")
    conn = await connect(dsn)
    try:
        first = await migrate(conn)
        assert first == [name for name, _ in store_mod.bundled_migrations()]
        assert await migrate(conn) == []
        assert await pending_migrations(conn) == []
        tables = {
            r["tablename"]
            for r in await conn.fetch("select tablename from pg_tables where schemaname='public'")
        }
        assert {"jobs", "runs", "run_attempts", "workers", "schema_migrations"} <= tables
    finally:
        await conn.close()


async def test_refuses_unknown_newer_migration_and_changed_checksum(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO schema_migrations (name, checksum) VALUES ('9999_future', 'x')"
        )
        with pytest.raises(SchemaMismatch, match="9999_future"):
            await migrate(conn)
        with pytest.raises(SchemaMismatch, match="does not know"):
            await pending_migrations(conn)
        await conn.execute("DELETE FROM schema_migrations WHERE name = '9999_future'")
        await conn.execute(
            "UPDATE schema_migrations SET checksum = 'tampered' WHERE name LIKE '0001%'"
        )
        with pytest.raises(SchemaMismatch, match="changed"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_many_hosts_migrate_at_once(admin_dsn: str) -> None:
    dsn = await fresh_database(admin_dsn, "pc_mig_race")
    conns = [await connect(dsn) for _ in range(6)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        applied = [r for r in results if r]
        assert len(applied) == 1, "exactly one migrator applies; the others find nothing to do"
        count = await conns[0].fetchval("select count(*) from schema_migrations")
        assert count == len(store_mod.bundled_migrations())
    finally:
        for c in conns:
            await c.close()


async def test_every_query_prepares_against_the_schema(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        for name, sql in QUERIES.items():
            try:
                await conn.prepare(sql)
            except asyncpg.PostgresError as exc:  # pragma: no cover - the failure message
                pytest.fail(f"query {name} does not prepare: {exc}")


def test_every_query_is_used_by_exactly_one_store_method() -> None:
    """Each `-- name:` block is run from one place in the data layer (the Queries classes of
    supervisor/core), by a method of the same name; a run list's upcoming twin is run by
    its history method (History picks the block by direction)."""
    core = Path(inspect.getfile(Store)).parent
    source = "".join(p.read_text() for p in sorted(core.glob("*.py")) if "(Queries)" in p.read_text()
                     or p.name == "store.py")  # fmt: skip
    for name in QUERIES:
        uses = re.findall(rf'"{name}"', source)
        assert len(uses) == 1, f"query {name} used {len(uses)} times in the data layer"
        method = name.replace("list_runs_upcoming_", "list_runs_")
        assert re.search(rf"def {method}\(", source), f"no data-layer method named {method}"


def test_migrations_are_numbered_and_forward_only() -> None:
    root = Path(__file__).resolve().parents[2] / "migrations"
    names = sorted(p.name for p in root.glob("*.sql"))
    assert names == [n for n, _ in store_mod.bundled_migrations()]
    numbers = [int(n[:4]) for n in names]
    assert numbers == list(range(1, len(numbers) + 1))


async def test_python_enums_mirror_the_database(pool: asyncpg.Pool) -> None:
    from supervisor.core.model import Catchup, Outcome, Overlap, RunStatus, Trigger

    pairs = {
        "run_status": RunStatus,
        "attempt_outcome": Outcome,
        "catchup_policy": Catchup,
        "overlap_policy": Overlap,
        "run_trigger": Trigger,
    }
    for db_type, enum in pairs.items():
        labels = await pool.fetchval(f"SELECT enum_range(NULL::{db_type})::text[]")
        assert labels == [e.value for e in enum], db_type


async def test_every_query_prepares_against_the_required_schema(admin_dsn: str) -> None:
    """A database migrated only up to REQUIRED_MIGRATION must run every query of this build
    (supervisors and API processes accept such a schema): bump REQUIRED_MIGRATION when a
    query starts using what a newer migration adds."""
    from supervisor.core.migrator import REQUIRED_MIGRATION, bundled_migrations

    name = f"pc_required_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(with_database(admin_dsn, name))
        try:
            for migration, sql in bundled_migrations():
                if migration <= REQUIRED_MIGRATION:
                    await conn.execute(sql)
            for query, text in QUERIES.items():
                try:
                    await conn.prepare(text)
                except asyncpg.PostgresError as exc:
                    pytest.fail(f"query {query} needs more than {REQUIRED_MIGRATION}: {exc}")
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def test_a_schema_behind_but_compatible_is_accepted() -> None:
    from supervisor.core.migrator import REQUIRED_MIGRATION, check_schema

    check_schema([])
    check_schema(["9000_added_later.sql"])  # newer than what this build needs: keeps running
    with pytest.raises(SchemaMismatch, match="needs"):
        check_schema([REQUIRED_MIGRATION])


async def test_pools_turn_jit_off(dsn: str) -> None:
    """The claim's estimates cross jit_above_cost: with JIT on, every claim compiled for
    190 ms (a 10x drop in throughput), so no pool of ours may have it on."""
    from supervisor.core.db import create_pool

    for generic in (False, True):
        pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=generic)
        try:
            assert await pool.fetchval("SHOW jit") == "off"
        finally:
            await pool.close()
