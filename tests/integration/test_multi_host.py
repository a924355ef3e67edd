"""Multi-host database URLs and read-only servers, against the shared server (nothing here
changes it: read-only is a session setting). The failover itself: tests/e2e/test_failover.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from supervisor.core.config import ConfigError, dsn_problems, load, split_hosts
from supervisor.core.db import DB_ERRORS, HOST_CONNECT_TIMEOUT, connect, create_pool
from supervisor.core.store import Store

URL = "postgresql://u:p%40ss@h1:5432,h2:5433/db?target_session_attrs=read-write"


def test_split_hosts_keeps_credentials_database_and_query() -> None:
    assert split_hosts(URL) == [
        "postgresql://u:p%40ss@h1:5432/db?target_session_attrs=read-write",
        "postgresql://u:p%40ss@h2:5433/db?target_session_attrs=read-write",
    ]
    single = "postgresql://u:p@h1:5432/db"
    assert split_hosts(single) == [single]


def test_several_hosts_need_a_writable_target() -> None:
    assert dsn_problems(URL, {}) == []
    assert dsn_problems(URL.replace("read-write", "primary"), {}) == []
    problems = dsn_problems("postgresql://u:secret@h1,h2/db", {})
    assert len(problems) == 1 and "target_session_attrs=read-write" in problems[0]
    assert "secret" not in problems[0]
    assert dsn_problems("postgresql://u@h1,h2/db", {"PGTARGETSESSIONATTRS": "read-write"}) == []
    assert dsn_problems("postgresql://u@h1:54x,h2/db?target_session_attrs=primary", {}) == [
        "database_url: host 1 has an invalid port"
    ]
    with pytest.raises(ConfigError, match="target_session_attrs"):
        load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL": "postgresql://h1,h2/db"})


def _with_hosts(dsn: str, *hosts: str) -> str:
    parts = urlsplit(dsn)
    userinfo, at, _ = parts.netloc.rpartition("@")
    query = "target_session_attrs=read-write"
    return urlunsplit(parts._replace(netloc=userinfo + at + ",".join(hosts), query=query))


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port that accepts TCP connections and never answers: a hung or partitioned host."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


async def test_a_silent_first_host_costs_one_host_timeout(dsn: str, silent_port: int) -> None:
    real = urlsplit(dsn)
    url = _with_hosts(dsn, f"127.0.0.1:{silent_port}", f"{real.hostname}:{real.port or 5432}")
    started = time.monotonic()
    conn = await connect(url)  # asyncpg's own timeout would span both hosts (60 s)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    assert time.monotonic() - started < HOST_CONNECT_TIMEOUT + 5
    # The host that answered is tried first from now on: no wait at all.
    started = time.monotonic()
    await (await connect(url)).close()
    assert time.monotonic() - started < HOST_CONNECT_TIMEOUT


async def test_a_connection_that_hit_a_read_only_server_is_not_reused(dsn: str) -> None:
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        store = Store(pool)
        async with pool.acquire() as conn:
            # What a standby, or a primary fenced with default_transaction_read_only, answers.
            await conn.execute("SET default_transaction_read_only = on")
            fenced_pid = await conn.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError) as caught:
            await store.upsert_worker("w", "h", 1, ["t"], 1, "v", 30.0)
        assert isinstance(caught.value, DB_ERRORS), "services retry it like a lost database"
        # The next acquire reconnects (and a multi-host URL would pick the writable host).
        await store.upsert_worker("w", "h", 1, ["t"], 1, "v", 30.0)
        assert await pool.fetchval("SELECT pg_backend_pid()") != fenced_pid
    finally:
        await pool.close()
