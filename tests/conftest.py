"""Test fixtures: a real PostgreSQL, and a fresh migrated database per test.

The server comes from supervisor.local.pgchain (first that works): PUNCHCLOCK_TEST_DATABASE_URL
(CI sets it), an admin DSN; testcontainers' PostgreSQL when a Docker engine answers; a
throwaway local cluster (supervisor.local.pgserver, the same code as `punchclock up`).
Each test gets `CREATE DATABASE ... TEMPLATE` of a database migrated once per session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from supervisor.core.db import create_pool
from supervisor.core.store import Store
from supervisor.local import pgchain
from supervisor.local.pgchain import with_database
from supervisor.local.plumbing import TemplateDatabase

__all__ = ["with_database"]  # tests/integration/test_store.py imports it from here

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    with pgchain.admin_dsn(("PUNCHCLOCK_TEST_DATABASE_URL",), "pc-test-") as url:
        yield url


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[TemplateDatabase]:
    template = TemplateDatabase(admin_dsn)
    asyncio.run(template.create())
    yield template
    asyncio.run(template.drop())


@pytest.fixture
async def dsn(template_db: TemplateDatabase) -> AsyncIterator[str]:
    """A fresh migrated database for this test; dropped (with its sessions) afterwards."""
    async with template_db.copy() as url:
        yield url


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(dsn, min_size=1, max_size=20)
    yield p
    await p.close()


@pytest.fixture
async def store(pool: asyncpg.Pool) -> Store:
    return Store(pool)


@pytest.fixture(autouse=True)
def no_stray_children() -> Iterator[None]:
    """Fail a test that leaves a child process of this pytest behind (River checks goroutines)."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leftover: list[psutil.Process] = []
    for _ in range(100):  # up to ~5 s for exiting children to go
        leftover = [p for p in me.children(recursive=True) if p.pid not in before and _alive(p)]
        if not leftover:
            break
        psutil.wait_procs(leftover, timeout=0.05)
    for p in leftover:
        p.kill()
    assert not leftover, f"test left child processes behind: {[p.cmdline() for p in leftover]}"


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
