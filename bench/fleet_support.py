"""bench.fleet's environment and observers: a throwaway PostgreSQL 15 with the stock
max_connections and pg_stat_statements, a PgBouncer in transaction mode in front of it, the
role settings a pooled supervisor needs, the fleets (real supervisors, direct ones, or
bench.fleet_sim processes), and what is read from outside them: backends, transactions,
statements, the server's CPU and the bouncer's pools."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench.common import Context, Proc
from supervisor.core.db import ROLE_SETTINGS
from supervisor.core.fleet import DUTIES
from supervisor.core.sql import QUERIES
from supervisor.heartbeater import IDLE_BEAT_GAP
from supervisor.local.pgbin import servers
from supervisor.local.pgbouncer import LocalPgBouncer
from supervisor.local.pgserver import SUPERUSER, LocalPostgres
from supervisor.local.plumbing import wait_until

MAJOR = "15"
MAX_CONNECTIONS = 100  # PostgreSQL's stock value
BOUNCER_POOL = 20  # server connections per database behind the bouncer
MAX_CLIENTS = 2500  # the bouncer's max_client_conn: 1,000 simulated hosts and more fit
SERVER_SETTINGS = {
    "max_connections": str(MAX_CONNECTIONS),
    "shared_buffers": "128MB",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.max": "10000",
}
APP = "fleet-bench"  # application_name of the bench's own sessions: left out of the counts
BACKENDS = """SELECT count(*) FROM pg_stat_activity
              WHERE backend_type = 'client backend' AND application_name <> $1"""


class Postgres15(LocalPostgres):
    """LocalPostgres on PostgreSQL 15's binaries when this machine has them (the stock
    server the issue names), else the preferred ones."""

    def _find_bindir(self) -> Path:
        for major, bindir in servers():
            if major == MAJOR and not (self.data_dir / "PG_VERSION").exists():
                return bindir
        return super()._find_bindir()


@contextlib.contextmanager
def fleet_server() -> Iterator[tuple[Postgres15, LocalPgBouncer]]:
    """The server (fsync off: a throwaway cluster) and its bouncer, both stopped after."""
    base = Path(tempfile.mkdtemp(prefix="pc-fleet-", dir="/var/tmp"))
    base.chmod(0o755)  # both run as the postgres user when we are root
    pg = Postgres15(base / "pg", persistent=False, settings=SERVER_SETTINGS)
    bouncer: LocalPgBouncer | None = None
    try:
        pg.start()
        bouncer = LocalPgBouncer(
            base / "bouncer", pg.dsn, pool_size=BOUNCER_POOL, max_client_conn=MAX_CLIENTS
        )
        bouncer.start()
        yield pg, bouncer
    finally:
        if bouncer is not None:
            bouncer.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


async def observe(dsn: str) -> asyncpg.Connection:
    """A direct session of the bench's own, with the planner settings a report query
    wants (the role's enable_seqscan = off is for the supervisors)."""
    conn: asyncpg.Connection = await asyncpg.connect(dsn, server_settings={"application_name": APP})
    await conn.execute("SET enable_seqscan = on; SET enable_bitmapscan = on")
    return conn


async def prepare_role(admin: asyncpg.Connection) -> dict[str, str]:
    """ALTER ROLE ... SET what a supervisor behind a transaction pooler needs (ROLE_SETTINGS),
    and pg_stat_statements in the admin database (it sees every database's statements)."""
    for name, value in ROLE_SETTINGS.items():
        await admin.execute(f"ALTER ROLE {SUPERUSER} SET {name} = {value}")
    await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return dict(ROLE_SETTINGS)


def postgres_cpu(pg: LocalPostgres) -> float:
    """CPU seconds so far of the server's postmaster and every process under it."""
    pid = int((pg.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def process_cpu(pids: list[int]) -> float:
    """CPU seconds so far of these processes and their live children."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    total += t.user + t.system
    return total


# ---------------------------------------------------------------- statements


_LITERAL = re.compile(r"\$\d+|'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


def _skeleton(text: str) -> str:
    """`text` with its literals and parameters as `?`: pg_stat_statements shows a block's
    text, comments and all, with each constant made a parameter ($n)."""
    return _LITERAL.sub("?", text)


def _signatures() -> dict[str, str]:
    """Per queries.sql block, a line of its body (skeleton) that no other block has: how a
    pg_stat_statements entry is told apart."""
    lines = {
        name: {
            _skeleton(ln.strip()) for ln in text.splitlines() if ln.strip()[:2] not in ("", "--")
        }
        for name, text in QUERIES.items()
    }
    out = {}
    for name, own in lines.items():
        others = set().union(*(ls for n, ls in lines.items() if n != name))
        unique = [ln for ln in own if len(ln) > 12 and ln not in others]
        if unique:
            out[name] = max(unique, key=len)
    return out


SIGNATURES = _signatures()


def label(query: str) -> str:
    """The queries.sql block a statement's text is, else its first words."""
    lines = {_skeleton(ln.strip()) for ln in query.splitlines()}
    for name, line in SIGNATURES.items():
        if line in lines:
            return name
    return re.sub(r"\s+", " ", query).strip()[:48]


async def statements(admin: asyncpg.Connection, dbname: str) -> dict[str, int]:
    """Calls so far per statement (by label) in database `dbname`."""
    rows = await admin.fetch(
        """SELECT s.query, s.calls FROM pg_stat_statements s
           JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1""",
        dbname,
    )
    out: dict[str, int] = {}
    for r in rows:
        key = label(r["query"])
        out[key] = out.get(key, 0) + int(r["calls"])
    return out


def busiest(rates: dict[str, float], n: int) -> dict[str, float]:
    """The `n` highest of `rates`, highest first, rounded."""
    return {k: round(v, 3) for k, v in sorted(rates.items(), key=lambda kv: -kv[1])[:n]}


async def claim_calls(admin: asyncpg.Connection, dbname: str) -> int:
    return (await statements(admin, dbname)).get("claim_runs", 0)


async def xacts(admin: asyncpg.Connection, dbname: str) -> int:
    """Transactions committed and rolled back in `dbname` so far (the bench's own session
    sits in another database: none of them is the observer's)."""
    n = await admin.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", dbname
    )
    return int(n or 0)


class BackendSampler:
    """The server's client backends (not the bench's own) every `every` seconds, on a
    session of its own; `peak` is the most seen."""

    def __init__(self, conn: asyncpg.Connection, every: float = 0.25) -> None:
        self.conn, self.every = conn, every
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        async def loop() -> None:
            while True:
                self.peak = max(self.peak, await backends(self.conn))
                await asyncio.sleep(self.every)  # the sampling cadence

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def backends(conn: asyncpg.Connection) -> int:
    """The server's client backends now, the bench's own sessions left out."""
    return int(await conn.fetchval(BACKENDS, APP))


async def bouncer_clients(bouncer: LocalPgBouncer, dbname: str) -> dict[str, int]:
    """SHOW POOLS of `dbname`'s pool, and SHOW CLIENTS counted for it."""
    pools = [r for r in await bouncer.show("POOLS") if r["database"] == dbname]
    clients = [r for r in await bouncer.show("CLIENTS") if r["database"] == dbname]
    keys = ("cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used", "maxwait")
    out = {k: sum(int(p.get(k) or 0) for p in pools) for k in keys}
    out["clients"] = len(clients)
    return out


# ---------------------------------------------------------------- fleets


@dataclass
class Fleet:
    """Hosts under test: `procs` are real supervisors or bench.fleet_sim processes."""

    kind: str  # "real" (pooled), "direct" (LISTEN), "sim"
    hosts: int
    procs: list[Proc] = field(default_factory=list)
    started_s: float = 0.0
    stopped: list[dict[str, Any]] = field(default_factory=list)  # fleet_sim's counters
    starts_ms: list[float] = field(default_factory=list)  # fleet_sim's trigger run starts

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


async def start_supervisors(
    ctx: Context, fleet: Fleet, dsn: str, type_: str, *, pooled: bool, ttl: float, wave: int
) -> None:
    """`fleet.hosts` real supervisors (concurrency 4, /bin/true), `wave` at a time."""
    extra = ["--database-pooler", "transaction"] if pooled else []
    started = time.monotonic()
    for first in range(0, fleet.hosts, wave):
        batch = [
            ctx.procs.supervisor(
                dsn,
                f"{fleet.kind}-{i}",
                {type_: ["/bin/true"]},
                concurrency=4,
                lease_ttl=ttl,
                misfire_grace=3600.0,
                extra_args=extra,
            )
            for i in range(first, min(first + wave, fleet.hosts))
        ]
        fleet.procs += batch
        for p in batch:
            await p.wait_event("supervisor_started", timeout=180)
    fleet.started_s = time.monotonic() - started


async def start_sims(
    ctx: Context, fleet: Fleet, dsn: str, type_: str, *, per_proc: int, ttl: float, tag: str
) -> None:
    """`fleet.hosts` simulated hosts in bench.fleet_sim processes of `per_proc` each."""
    started = time.monotonic()
    for j, first in enumerate(range(0, fleet.hosts, per_proc)):
        k = min(per_proc, fleet.hosts - first)
        args = ["-m", "bench.fleet_sim", "--hosts", str(k), "--dsn", dsn, "--type", type_,
                "--prefix", f"{tag}-{j}", "--lease-ttl", str(ttl), "--misfire-grace", "3600",
                "--log-starts", "trigger"]  # fmt: skip
        proc = ctx.procs.python(f"{tag}-{j}", args)
        fleet.procs.append(proc)
        await proc.wait_event("sim_ready", timeout=600)
    fleet.started_s = time.monotonic() - started


async def stop_fleet(ctx: Context, fleet: Fleet) -> None:
    """SIGTERM to all at once (they stop in parallel), then each waited for (by pid)."""
    for p in fleet.procs:
        p.send(signal.SIGTERM)
    for p in fleet.procs:
        await asyncio.to_thread(ctx.procs.stop, p, 60.0)
        if fleet.kind == "sim":
            fleet.stopped += p.events("sim_stopped")
            fleet.starts_ms += [float(e["late_ms"]) for e in p.events("run_started")]
    fleet.procs = []


async def settled(conn: asyncpg.Connection, fleet: Fleet, type_: str, ttl: float) -> float:
    """Wait until every host is live and seated by the census, every duty is held, and
    every host has beaten since (so it knows its seat and paces its polls by it); the
    seconds that took."""
    started = time.monotonic()
    deadline = max(120.0, fleet.hosts * 0.3)

    async def seated() -> Any:
        return await conn.fetchval(
            """SELECT now() FROM workers w
               WHERE worker_is_live(w) AND (w.seats -> $1::text ->> 1)::int = $2::int
               HAVING count(*) = $2::int
                  AND (SELECT count(*) FROM duties WHERE expires_at > now()) = $3::int""",
            type_, fleet.hosts, len(DUTIES),
        )  # fmt: skip

    at = await wait_until(seated, deadline, f"{fleet.hosts} hosts seated", every=0.5)

    async def beaten() -> bool:
        n = await conn.fetchval(
            "SELECT count(*) FROM workers w WHERE worker_is_live(w) AND last_seen_at > $1", at
        )
        return bool(n >= fleet.hosts)

    # An idle host beats every max(ttl/3, IDLE_BEAT_GAP x fleet size): 50 s at 1,000.
    every = max(ttl / 3, IDLE_BEAT_GAP * fleet.hosts)
    await wait_until(beaten, 2 * every + 30.0, "every host beaten since it was seated", every=0.5)
    return time.monotonic() - started


# ---------------------------------------------------------------- the fleets measured


@dataclass(frozen=True)
class Spec:
    kind: str  # real | sim | direct
    hosts: int
    phases: tuple[str, ...] = ("idle", "triggers", "drain", "plan")
    per_proc: int = 250  # simulated hosts per process

    @property
    def label(self) -> str:
        how = {"real": "real, PgBouncer, polling", "sim": "simulated, PgBouncer, polling",
               "direct": "real, direct + LISTEN, + API"}[self.kind]  # fmt: skip
        return f"{self.hosts:,} hosts ({how})"


def specs(smoke: bool) -> list[Spec]:
    """The fleets to measure. PUNCHCLOCK_FLEET_ONLY="real10,real100:drain" (fleets by kind and
    size, then optionally the phases) narrows a full run while working on one figure."""
    only = os.environ.get("PUNCHCLOCK_FLEET_ONLY", "")
    picked, _, phases = only.partition(":")
    chosen = [s for s in _specs(smoke) if not picked or f"{s.kind}{s.hosts}" in picked.split(",")]
    if phases:
        keep = tuple(phases.split(","))
        chosen = [replace(s, phases=tuple(p for p in s.phases if p in keep)) for s in chosen]
    return chosen


def _specs(smoke: bool) -> list[Spec]:
    if smoke:  # short: CI runs every scenario's smoke size
        return [Spec("real", 2, ("drain",)), Spec("real", 3), Spec("sim", 10, per_proc=10),
                Spec("direct", 2, ("idle", "triggers"))]  # fmt: skip
    return [
        Spec("real", 10, ("drain",)),
        Spec("real", 100),
        Spec("sim", 10, ("drain",)),
        Spec("sim", 300, per_proc=75),
        Spec("sim", 1000, per_proc=250),
        Spec("direct", 40, ("idle", "triggers")),
    ]
