"""A server with no connection left (max_connections reached by others): the supervisor says
so plainly (one `db_full` line per attempt naming max_connections, no traceback), keeps
trying with backoff, and registers and runs work once a connection frees. On a throwaway
cluster of the test's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from supervisor.core.db import connect
from supervisor.core.store import Store

from ..factory import create_runs, statuses
from ..helpers import wait_for
from .procs import Cluster, ThrowawayPostgres
from .scenario import start_migrated

pytestmark = pytest.mark.slow
SLOTS = 6


@pytest.fixture
async def tiny() -> AsyncIterator[str]:
    """A migrated cluster taking SLOTS connections, none kept for superusers."""
    server = ThrowawayPostgres(
        settings={"max_connections": str(SLOTS), "superuser_reserved_connections": "0"}
    )
    try:
        yield await start_migrated(server)
    finally:
        await asyncio.to_thread(server.close)


async def _fill(dsn: str) -> list[asyncpg.Connection]:
    """Every connection slot taken (background workers may hold none: count what fits)."""
    held: list[asyncpg.Connection] = []
    while True:
        try:
            held.append(await asyncpg.connect(dsn))
        except asyncpg.TooManyConnectionsError:
            return held


async def test_a_full_server_is_named_not_looped_through_and_left_when_it_frees(
    tiny: str, tmp_path: Path
) -> None:
    held = await _fill(tiny)
    cluster = Cluster(tmp_path, tiny)
    try:
        sup = cluster.start("w1", ["append"])
        first = await sup.wait_event("db_full", timeout=20)
        assert "max_connections" in first["detail"] and first["level"] == "error"
        await wait_for(lambda: len(sup.events("db_full")) >= 3, 30, "retries, with backoff")
        assert sup.running and "Traceback" not in sup.log_text()
        for conn in held[:3]:  # two for the supervisor (queries, LISTEN), one for us
            await conn.close()
        await sup.wait_event("supervisor_started", timeout=30)
        conn = await connect(tiny)
        try:
            store = Store(conn)
            ids = await create_runs(store, "append", 3, {"out": str(tmp_path / "out")})

            async def done() -> bool:
                return await statuses(store, ids) == {"succeeded": 3}

            await wait_for(done, 30, "the runs to succeed")
        finally:
            await conn.close()
    finally:
        cluster.stop_all()
        for conn in held[3:]:
            await conn.close()
