"""Migrations: numbered SQL files in migrations/, applied in order under one advisory lock.

Each file runs in its own transaction and is recorded with a checksum; a database with a
migration this build does not know, or a changed one, is refused.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from supervisor.core.db import Conn
from supervisor.core.errors import SchemaMismatch

MIGRATION_LOCK_KEY = 0x70756E6368  # "punch": one advisory lock for all migrators


def bundled_migrations() -> list[tuple[str, str]]:
    """(name, sql) of the migrations shipped with this build, in order."""
    files = resources.files("migrations")
    found = sorted(
        (p.name, p.read_text()) for p in files.iterdir() if re.fullmatch(r"\d{4}_\w+\.sql", p.name)
    )
    return found


def _checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


async def migrate(conn: Conn) -> list[str]:
    """Apply pending migrations in order; returns the names applied.

    Many hosts may start at once: a session advisory lock serialises them, and each file
    runs in its own transaction. Refuses (SchemaMismatch) a database that has a migration
    this build does not know or whose checksum changed.
    """
    known = bundled_migrations()
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   name text PRIMARY KEY,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        applied = {
            r["name"]: r["checksum"]
            for r in await conn.fetch("SELECT name, checksum FROM schema_migrations")
        }
        _check_compatible(known, applied)
        done: list[str] = []
        for name, sql in known:
            if name in applied:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (name, checksum) VALUES ($1, $2)",
                    name,
                    _checksum(sql),
                )
            done.append(name)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)


def _check_compatible(known: list[tuple[str, str]], applied: dict[str, str]) -> None:
    by_name = dict(known)
    unknown = sorted(set(applied) - set(by_name))
    if unknown:
        raise SchemaMismatch(
            f"database has migrations this punchclock does not know: {', '.join(unknown)}; "
            "upgrade punchclock on this host"
        )
    changed = sorted(n for n, c in applied.items() if _checksum(by_name[n]) != c)
    if changed:
        raise SchemaMismatch(f"migration files changed after they were applied: {changed}")


# The newest migration this build's queries need. A database behind the bundled migrations
# but at or past this one is compatible: the code keeps running while an upgrade rolls out.
REQUIRED_MIGRATION = "0019_channel_disabled.sql"


def check_schema(pending: list[str]) -> None:
    """Raise SchemaMismatch when a pending migration is one this build's queries need."""
    needed = [n for n in pending if n <= REQUIRED_MIGRATION]
    if needed:
        raise SchemaMismatch(
            f"database schema is behind this punchclock (needs {', '.join(needed)}); "
            "run `punchclock migrate` first"
        )


async def pending_migrations(conn: Conn) -> list[str]:
    """Names not yet applied; raises SchemaMismatch like migrate() would."""
    known = bundled_migrations()
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied: dict[str, str] = {}
    if exists:
        applied = {
            r["name"]: r["checksum"]
            for r in await conn.fetch("SELECT name, checksum FROM schema_migrations")
        }
    _check_compatible(known, applied)
    return [n for n, _ in known if n not in applied]
