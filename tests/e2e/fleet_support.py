"""A fleet for tests/e2e/test_fleet_faults.py: many real supervisors through one throwaway
PgBouncer (transaction mode) in front of a throwaway PostgreSQL with the stock
max_connections, and observers that do not trust the code under test (pg_stat_activity
sampled on a direct connection, process liveness, the handlers' stamps)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from supervisor.core.db import DB_ERRORS, POOLED, ROLE_SETTINGS, role_settings_problems
from supervisor.core.store import Store
from supervisor.local.pgbouncer import LocalPgBouncer
from supervisor.local.pgserver import SUPERUSER

from .procs import Cluster, PidMonitor, Supervisor, ThrowawayPostgres

MAX_CONNECTIONS = 100  # PostgreSQL's stock value: the server a fleet must fit
# Every client backend, the sampler's own and the test pool's among them (TEST_CONNECTIONS).
BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
TEST_CONNECTIONS = 1 + 4  # the sampler and the test's store pool (create_pool max_size=4)
_SAMPLE_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, asyncpg.PostgresError)


def fleet_postgres() -> ThrowawayPostgres:
    """A throwaway server with the stock max_connections = 100 (and durable commits)."""
    return ThrowawayPostgres(settings={"max_connections": str(MAX_CONNECTIONS)})


class BackendSampler:
    """Counts the server's client backends every `every` seconds on a direct connection of
    its own (reconnecting across restarts); `peak` is the most seen since `reset()`."""

    def __init__(self, dsn: str, every: float = 0.05) -> None:
        self.dsn, self.every = dsn, every
        self.peak = 0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    def reset(self) -> None:
        self.peak, self.samples = 0, 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        conn: asyncpg.Connection | None = None
        while True:
            try:
                if conn is None or conn.is_closed():
                    conn = await asyncpg.connect(self.dsn, timeout=2)
                n = int(await conn.fetchval(BACKENDS, timeout=2))
                self.peak, self.samples = max(self.peak, n), self.samples + 1
            except _SAMPLE_ERRORS:
                if conn is not None:
                    conn.terminate()
                conn = None
            await asyncio.sleep(self.every)  # the sampling cadence

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


@dataclass
class Fleet:
    """The server, the bouncer, the supervisors and the observers of one module."""

    pg: ThrowawayPostgres
    bouncer: LocalPgBouncer
    cluster: Cluster
    store: Store  # direct to the server, for the test's own reads and writes
    sampler: BackendSampler
    pool_size: int
    listening: set[str] = field(default_factory=set)  # worker ids with --listen-database-url
    pids: dict[str, int] = field(default_factory=dict)  # worker id -> the pid that started

    @property
    def sups(self) -> list[Supervisor]:
        return self.cluster.supervisors

    def alive(self) -> list[Supervisor]:
        return [s for s in self.sups if s.running]

    def by_id(self, worker_id: str) -> Supervisor:
        [sup] = [s for s in self.sups if s.worker_id == worker_id]
        return sup

    def bound(self) -> int:
        """The most client backends the fleet may cause: the bouncer's pool, one LISTEN
        connection per listening host, the test's own, and a few (a listener's old
        backend still exiting when its new one connects)."""
        return self.pool_size + len(self.listening) + TEST_CONNECTIONS + 5

    def problems(self, expected: list[Supervisor]) -> list[str]:
        """What operators would call a crashed fleet: a supervisor that exited, was
        replaced, started twice, or found the server full."""
        out = []
        for s in expected:
            if not s.running:
                out.append(f"{s.worker_id} exited:\n{s.tail(20)}")
            elif s.pid != self.pids[s.worker_id]:
                out.append(f"{s.worker_id} is another process")
            elif len(s.events("supervisor_started")) != 1:
                out.append(f"{s.worker_id} started more than once")
            if full := s.events("db_full"):
                out.append(f"{s.worker_id}: db_full {full[0]}")
        return out


async def prepare(pg: ThrowawayPostgres) -> None:
    """Migrations on the direct DSN (`punchclock migrate`, a real process) and the role
    settings a transaction pooler needs (`ALTER ROLE ... SET`)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "supervisor",
        "migrate",
        "--database-url",
        pg.dsn,
        cwd=Path(__file__).resolve().parents[2],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    conn = await asyncpg.connect(pg.dsn)
    try:
        for name, value in ROLE_SETTINGS.items():
            await conn.execute(f"ALTER ROLE {SUPERUSER} SET {name} = {value}")
    finally:
        await conn.close()


async def role_problems(bouncer_dsn: str) -> list[str]:
    """What `punchclock check` would say of the role, asked through the bouncer."""
    conn = await asyncpg.connect(bouncer_dsn, timeout=10, **POOLED)
    try:
        return await role_settings_problems(conn)
    finally:
        await conn.close()


async def start_fleet(fleet: Fleet, hosts: int, *, lease_ttl: float, concurrency: int) -> None:
    """Start `hosts` supervisors through the bouncer, even ones listening on the direct
    DSN, odd ones polling; wait until each says supervisor_started."""
    for i in range(hosts):
        wid = f"h{i:03d}"
        args = ["--database-pooler", "transaction"]
        if i % 2 == 0:
            args += ["--listen-database-url", fleet.pg.dsn]
            fleet.listening.add(wid)
        sup = fleet.cluster.start(
            wid,
            ["stamp"],
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            dsn=fleet.bouncer.dsn,
            extra_args=args,
        )
        fleet.pids[wid] = sup.pid
    for sup in fleet.sups:
        await sup.wait_event("supervisor_started", timeout=120)


def executions_of(monitor: PidMonitor, sup: Supervisor) -> int:
    """How many of `sup`'s children are running now (the stamps' parent pid)."""
    return sum(e.ppid == sup.pid for e in monitor.alive())
