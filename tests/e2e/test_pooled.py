"""punchclock behind a real PgBouncer in transaction mode (Debian's 1.18), on a throwaway
cluster of the test's own: statements with parameters run whole however the server
connections change hands between asyncpg's round trips, the role's settings are checked, and a
supervisor and the API work through it (the supervisor polling: no LISTEN there)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from supervisor.core.db import (
    ROLE_SETTINGS,
    connect,
    create_pool,
    role_settings_problems,
)
from supervisor.core.fleet import DUTIES
from supervisor.core.migrator import migrate
from supervisor.core.store import Store
from supervisor.local.pgbouncer import LocalPgBouncer, find_pgbouncer
from supervisor.local.pgserver import SUPERUSER, LocalPostgres

from ..api_support import ADMIN, TOKENS, http
from ..factory import create_runs, statuses
from ..helpers import wait_for
from .procs import ROOT, Cluster, free_port, scrape

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_pgbouncer() is None, reason="no pgbouncer: apt-get install pgbouncer"),
]
CLIENTS = 40
ROUNDS = 30
# Each statement has parameters, so asyncpg sends it in two round trips, and the server
# connection may change hands between them.
STATEMENT = "SELECT $1::int + count(*) FROM pg_class WHERE relname <> $2::text"


@pytest.fixture
def servers() -> Iterator[tuple[LocalPostgres, LocalPgBouncer]]:
    base = Path(tempfile.mkdtemp(prefix="pc-pooled-", dir="/var/tmp"))  # the servers' user
    base.chmod(0o755)  # must be able to enter it
    try:
        with (
            LocalPostgres(base / "pg", persistent=False, settings={"max_connections": "100"}) as pg,
            LocalPgBouncer(base / "bouncer", pg.dsn, pool_size=3) as bouncer,
        ):
            yield pg, bouncer
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def migrated(servers: tuple[LocalPostgres, LocalPgBouncer]) -> AsyncIterator[str]:
    """The direct DSN, migrated, its role carrying the supervisor's settings."""
    pg, _ = servers
    conn = await connect(pg.dsn)
    try:
        await migrate(conn)
        for name, value in ROLE_SETTINGS.items():
            await conn.execute(f"ALTER ROLE {SUPERUSER} SET {name} = {value}")
    finally:
        await conn.close()
    yield pg.dsn


async def _hammer(pool: asyncpg.Pool) -> list[BaseException]:
    async def one(i: int) -> None:
        for n in range(ROUNDS):
            assert await pool.fetchval(STATEMENT, n, f"x{i}") >= n

    results = await asyncio.gather(*(one(i) for i in range(CLIENTS)), return_exceptions=True)
    return [r for r in results if isinstance(r, BaseException)]


async def test_statements_survive_the_server_connection_changing_hands(
    servers: tuple[LocalPostgres, LocalPgBouncer],
) -> None:
    _, bouncer = servers
    pooled = await create_pool(bouncer.dsn, min_size=CLIENTS, max_size=CLIENTS, pooled=True)
    try:
        assert await _hammer(pooled) == []
    finally:
        await pooled.close()
    # What `pooled` avoids: named statements, prepared on one server connection and used
    # on another.
    cached = await asyncpg.create_pool(bouncer.dsn, min_size=CLIENTS, max_size=CLIENTS)
    try:
        errors = await _hammer(cached)
    finally:
        await cached.close()
    assert errors, "a statement cache behind a transaction pooler should lose statements"
    assert all(isinstance(e, asyncpg.PostgresError) for e in errors), errors[:3]


async def test_check_names_each_missing_role_setting(
    servers: tuple[LocalPostgres, LocalPgBouncer],
) -> None:
    _, bouncer = servers
    conn = await connect(bouncer.dsn, pooled=True)
    try:
        problems = await role_settings_problems(conn)
    finally:
        await conn.close()
    assert [p.split(" ")[0] for p in problems] == list(ROLE_SETTINGS)
    assert f"ALTER ROLE {SUPERUSER} SET jit = off" in problems[0]
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--database-url", bouncer.dsn,
         "--database-pooler", "transaction"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "database_pooler = transaction: enable_seqscan is 'on', wants 'off'" in out.stdout


async def test_a_supervisor_and_the_api_work_through_the_pooler(
    servers: tuple[LocalPostgres, LocalPgBouncer], migrated: str, tmp_path: Path
) -> None:
    _, bouncer = servers
    cluster = Cluster(tmp_path, bouncer.dsn)
    pooled = ["--database-pooler", "transaction"]
    try:
        metrics_port = free_port()
        sup = cluster.start("w1", ["append"], extra_args=pooled, metrics_port=metrics_port)
        started = await sup.wait_event("supervisor_started", timeout=30)
        assert (started["pooler"], started["wake_ups"]) == ("transaction", "poll")
        await sup.wait_event("polling", timeout=5)
        port = free_port()
        api = cluster._spawn(
            "api",
            [sys.executable, "-m", "supervisor", "api", "--database-url", bouncer.dsn,
             "--listen", f"127.0.0.1:{port}", "--api-token", TOKENS[0], *pooled],
            tmp_path / "api.log",
        )  # fmt: skip
        await api.wait_event("api_listening", timeout=30)
        pool = await create_pool(bouncer.dsn, min_size=1, max_size=2, pooled=True)
        try:
            store = Store(pool)
            ids = await create_runs(store, "append", 20, {"out": str(tmp_path / "out")})

            async def done() -> bool:
                return await statuses(store, ids) == {"succeeded": 20}

            await wait_for(done, 60, "every run to succeed through the pooler")
            status, _, body = await asyncio.to_thread(
                http, f"http://127.0.0.1:{port}/v1/runs/{ids[0]}", token=ADMIN
            )
            assert status == 200 and json.loads(body)["status"] == "succeeded"
        finally:
            await pool.close()

        # Alone, it holds every duty (taken one per beat), and ignored no wake-up.
        def held() -> float:
            got = scrape(metrics_port)
            return sum(v for k, v in got.items() if k.startswith("punchclock_duties_held{"))

        await wait_for(lambda: held() == len(DUTIES), 30, "every duty held by the one host")
        lines = (tmp_path / "out").read_text().splitlines()
        assert sorted(int(line.split(",")[0]) for line in lines) == sorted(ids), "exactly once"
        assert "Traceback" not in sup.log_text()
    finally:
        cluster.stop_all()
