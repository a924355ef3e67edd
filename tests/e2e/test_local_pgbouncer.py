"""A real PgBouncer (supervisor.local.pgbouncer) in front of a throwaway cluster: many clients
share a few server connections, every database is reachable, restarts and crashes keep the
address, and the bouncer dies with its launcher."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from supervisor.local.pgbouncer import LocalPgBouncer, find_pgbouncer
from supervisor.local.pgserver import DATABASE, LocalPostgres

from ..helpers import wait_for

pytestmark = pytest.mark.skipif(
    find_pgbouncer() is None, reason="no pgbouncer binary: apt-get install pgbouncer (CI does)"
)

ROOT = Path(__file__).resolve().parents[2]
POOL_SIZE = 5
CLIENTS = 50
# The client backends of the server's other sessions: on this cluster of the test's own,
# every one but the observer's comes through the bouncer.
BACKENDS = """
    SELECT count(*) FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


@pytest.fixture
def base() -> Iterator[Path]:
    # Not pytest's tmp_path: as root both servers run as another user, who cannot enter it.
    path = Path(tempfile.mkdtemp(prefix="pc-pgbouncer-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(base: Path) -> Iterator[LocalPostgres]:
    with LocalPostgres(base / "pg", persistent=False, settings={"max_connections": "100"}) as pg:
        yield pg


@pytest.fixture
def bouncer(base: Path, server: LocalPostgres) -> Iterator[LocalPgBouncer]:
    with LocalPgBouncer(base / "bouncer", server.dsn, pool_size=POOL_SIZE) as b:
        yield b


@pytest.fixture
async def observer(server: LocalPostgres) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection to the server, past the bouncer."""
    conn = await asyncpg.connect(server.dsn, timeout=10)
    yield conn
    await conn.close()


async def connect(dsn: str) -> asyncpg.Connection:
    # Transaction pooling: no prepared statement outlives its transaction.
    return await asyncpg.connect(dsn, timeout=10, statement_cache_size=0)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_many_clients_share_a_few_server_connections(
    bouncer: LocalPgBouncer, observer: asyncpg.Connection
) -> None:
    clients = await asyncio.gather(*(connect(bouncer.dsn) for _ in range(CLIENTS)))
    peak = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, await observer.fetchval(BACKENDS))
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    try:
        # A bind parameter each (the extended protocol), all at once: the pool queues them.
        sql = "SELECT $1::int * 2 FROM pg_sleep(0.05)"
        results = await asyncio.gather(*(c.fetchval(sql, i) for i, c in enumerate(clients)))
        assert results == [i * 2 for i in range(CLIENTS)]
        rows = await bouncer.show("CLIENTS")
        assert sum(row["database"] == DATABASE for row in rows) == CLIENTS
        done.set()
        await sampler
        peak = max(peak, await observer.fetchval(BACKENDS))
        assert 1 <= peak <= POOL_SIZE
        pools = {row["database"]: row for row in await bouncer.show("POOLS")}
        assert int(pools[DATABASE]["cl_active"]) == CLIENTS
    finally:
        done.set()
        await sampler
        await asyncio.gather(*(c.close() for c in clients))


async def test_a_database_created_later_is_reachable(
    bouncer: LocalPgBouncer, observer: asyncpg.Connection
) -> None:
    await observer.execute("CREATE DATABASE later")  # after the bouncer started
    conn = await connect(bouncer.dsn_for("later"))
    try:
        assert await conn.fetchval("SELECT current_database()") == "later"
    finally:
        await conn.close()


async def test_restart_keeps_the_address(bouncer: LocalPgBouncer) -> None:
    port, dsn = bouncer.port, bouncer.dsn
    before = await connect(dsn)
    try:
        await asyncio.to_thread(bouncer.restart)
        assert (bouncer.port, bouncer.dsn) == (port, dsn)
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await before.fetchval("SELECT 1")  # the old session went with the old process
    finally:
        await before.close()
    after = await connect(dsn)
    try:
        assert await after.fetchval("SELECT $1::int", 7) == 7
    finally:
        await after.close()


async def test_start_after_a_crash(bouncer: LocalPgBouncer) -> None:
    pid, dsn = bouncer.pid, bouncer.dsn
    assert pid is not None
    bouncer.kill()
    assert gone(pid) and bouncer.pid is None
    with pytest.raises(OSError):
        await connect(dsn)
    assert await asyncio.to_thread(bouncer.start) == dsn
    conn = await connect(dsn)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


LAUNCHER = """
import sys
from pathlib import Path
from supervisor.local.pgbouncer import LocalPgBouncer
bouncer = LocalPgBouncer(Path(sys.argv[1]), sys.argv[2])
bouncer.start()
print(bouncer.pid, flush=True)
sys.stdin.read()
"""


async def test_the_bouncer_dies_with_its_launcher(base: Path, server: LocalPostgres) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(base / "orphan"), server.dsn],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert launcher.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(launcher.stdout.readline), 30)
        pid = int(line)
        assert not gone(pid)
    finally:
        launcher.kill()  # no stop(): only the watchdog is left to end the bouncer
        launcher.communicate()
    await wait_for(lambda: gone(pid), timeout=20, what="pgbouncer to exit after its launcher")
