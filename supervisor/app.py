"""Composes the supervisor's services in one TaskGroup and orders the shutdown.

Shutdown (first SIGTERM/SIGINT) runs the phases in SHUTDOWN, each logged as
`shutdown_phase`: stop intake (planner, claimer, reaper, listener, pruner) -> drain (children
finish within the drain timeout while leases are still renewed) -> release (kill what is
left, give it back without consuming an attempt) -> flush completions -> stop upkeep
(heartbeater, fence watch); then the worker is marked stopped and the pool closed. A second
signal cuts the drain short. SIGHUP reloads the handlers and the live settings (reload.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import asyncpg

from supervisor import __version__, lease
from supervisor.compose import Services, build_services
from supervisor.core.config import Config, parse_listen
from supervisor.core.db import DB_ERRORS, SERVER_FULL, connect, create_pool
from supervisor.core.fleet import DUTIES, fleet
from supervisor.core.health import Readiness, beat_readiness
from supervisor.core.httpd import bearer_check, health_routes, start_side_door
from supervisor.core.log import log_event
from supervisor.core.metrics import Metrics
from supervisor.core.migrator import check_schema, migrate, pending_migrations
from supervisor.core.procsafe import undumpable
from supervisor.core.store import Store
from supervisor.executor import Executor, ShutdownReport
from supervisor.proc.keeper import Keeper
from supervisor.proc.orphans import Orphans
from supervisor.registry import Registry
from supervisor.reload import Reloader, describe, log_rejected
from supervisor.sdnotify import Notifier

log = logging.getLogger("punchclock.supervisor")
# A statement of the supervisor's is given up (and retried: every write is fenced and
# idempotent) after a renewal's turn (lease_ttl/3), and never sooner than this many seconds:
# its one connection serves every service, so a commit stuck on the server (waiting for a
# synchronous standby that is gone) must not hold the lease renewals behind it for long.
STATEMENT_FLOOR = 5.0


class Supervisor:
    def __init__(
        self,
        cfg: Config,
        registry: Registry,
        *,
        auto_migrate: bool = False,
        read_config: Callable[[], Config] | None = None,
    ) -> None:
        """`read_config`: the configuration read again, as at start-up, on SIGHUP (None: the
        settings stay, the handler paths are read again)."""
        self.cfg = cfg
        self.registry = registry
        self.auto_migrate = auto_migrate
        self.read_config = read_config or (lambda: self.cfg)
        self.owner = cfg.effective_worker_id
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()
        self.reload_asked = asyncio.Event()  # SIGHUP: one reload however many signals
        self.orphans = Orphans()

    def request_stop(self) -> None:
        if self.stopping.is_set():
            log_event(log, "shutdown_hurried")
            self.hurry.set()
        else:
            log_event(log, "shutdown_requested", drain_timeout=self.cfg.drain_timeout)
            self.stopping.set()

    async def _prepare_schema(self, pool: asyncpg.Pool) -> None:
        if self.auto_migrate:  # under a session advisory lock: never through a pooler
            direct = self.cfg.direct_database_url
            if not direct:
                raise SystemExit("--migrate behind a transaction pooler needs listen_database_url")
            direct_conn = await connect(direct)
            try:
                await migrate(direct_conn)
            finally:
                await direct_conn.close()
            return
        async with pool.acquire() as conn:
            pending = await pending_migrations(conn)
        check_schema(pending)
        if pending:
            log_event(
                log,
                "schema_behind",
                level=logging.WARNING,
                pending=pending,
                detail="compatible with this build; run `punchclock migrate` to finish the upgrade",
            )

    async def _connect(self) -> asyncpg.Pool:
        """The pool, retried with backoff and jitter until the database takes us: a fleet
        that comes back after an outage must not knock all at once."""
        backoff = 0.2
        while True:
            try:
                return await create_pool(
                    self.cfg.database_url,
                    min_size=self.cfg.pool_size,
                    max_size=self.cfg.pool_size,
                    generic_plans=True,
                    warm=lambda conn: Store(conn).warm_hot_statements(),
                    pooled=self.cfg.pooled,
                    command_timeout=max(STATEMENT_FLOOR, self.cfg.lease_ttl * lease.RENEW),
                )
            except SERVER_FULL as exc:
                log_event(
                    log,
                    "db_full",
                    level=logging.ERROR,
                    error=str(exc),
                    detail="the server has no connection left (max_connections): put "
                    "PgBouncer in front (deploy/README.md, A fleet); retrying",
                )
            except DB_ERRORS as exc:
                log_event(log, "db_unreachable", level=logging.WARNING, error=repr(exc))
            if self.stopping.is_set():
                raise SystemExit(0)
            try:
                async with asyncio.timeout(backoff * random.uniform(0.5, 1.0)):
                    await self.stopping.wait()
            except TimeoutError:
                pass
            backoff = min(backoff * 2, 10.0)

    async def run(self) -> int:
        # First: a handler running as our uid must not read our environment (the database
        # URL) or memory through /proc, nor ptrace us (DESIGN.md, Threat model).
        if not undumpable():
            log_event(
                log,
                "still_dumpable",
                level=logging.WARNING,
                detail="prctl(PR_SET_DUMPABLE) failed: handlers of this uid can read /proc",
            )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        # Before anything else: SIGHUP's default action ends the process. One that comes
        # before the services run is served once they do.
        loop.add_signal_handler(signal.SIGHUP, self.reload_asked.set)
        pool = await self._connect()
        store = Store(pool)
        try:
            await self._prepare_schema(pool)
            self.orphans.enable()
            keeper = await Keeper.start(uuid.uuid4().hex)
            self.orphans.exempt(keeper.pid)
            try:
                return await self._serve(store, keeper, pool)
            finally:
                await keeper.close()
                self.orphans.sweep()  # what handlers left behind must not outlive us
        finally:
            try:
                await asyncio.wait_for(pool.close(), 5)
            except TimeoutError:  # a connection stuck on a dead database
                pool.terminate()

    async def _serve(self, store: Store, keeper: Keeper, pool: asyncpg.Pool) -> int:
        cfg = self.cfg
        types = self.registry.types
        await store.upsert_worker(
            self.owner,
            socket.gethostname(),
            os.getpid(),
            types,
            cfg.effective_concurrency,
            __version__,
            cfg.lease_ttl,
        )
        await fleet(store).add_duties(DUTIES)
        log_event(
            log,
            "supervisor_started",
            worker_id=self.owner,
            types=types,
            concurrency=cfg.effective_concurrency,
            lease_ttl=cfg.lease_ttl,
            pooler=cfg.database_pooler,
            wake_ups="listen" if cfg.direct_database_url else "poll",
        )
        if not cfg.direct_database_url:
            log_event(
                log,
                "polling",
                level=logging.WARNING,
                detail="database_url is a transaction pooler and no listen_database_url is "
                f"set: no LISTEN; the fleet polls each type every {cfg.poll_gap:g} s",
            )
        log_rejected(self.registry.rejected)
        if not types:
            log_event(log, "no_handlers", level=logging.WARNING, detail="this host claims nothing")
        metrics = Metrics("supervisor")
        sv = build_services(
            self.cfg, self.registry, self.owner, self.orphans, store, keeper, metrics
        )
        self.executor = sv.executor
        side_door = None
        if cfg.metrics_listen:
            host, port = parse_listen(cfg.metrics_listen)
            beats = sv.heartbeater

            async def ready() -> Readiness:  # no query: the one connection renews leases
                return beat_readiness(beats.beat_age(), beats.stale_after())

            routes = health_routes(
                ready,
                metrics,
                details=bearer_check(cfg.api_tokens),
                local_details=sv.planner.details,
            )
            side_door = await start_side_door(host, port, routes)
        notifier = Notifier()
        notifier.ready(describe(types))
        reloader = Reloader(
            cfg,
            self.registry,
            sv,
            store,
            owner=self.owner,
            asked=self.reload_asked,
            read_config=self.read_config,
            notifier=notifier,
            on_applied=self._applied,
        )
        try:
            async with asyncio.TaskGroup() as tg:
                running = _Running(
                    intake=[tg.create_task(s.run()) for s in sv.intake],
                    upkeep=[tg.create_task(s.run()) for s in sv.upkeep],
                    completer=tg.create_task(sv.executor.completer.run()),
                )
                watchdog = tg.create_task(self._watchdog(notifier, sv.executor))
                reloads = tg.create_task(reloader.run())
                await self.stopping.wait()
                reloads.cancel()  # a reload half done changed nothing yet, or is applied
                notifier.stopping()
                started = time.monotonic()
                for phase in SHUTDOWN:
                    log_event(log, "shutdown_phase", phase=phase.__name__.strip("_"))
                    await phase(self, sv, running)
                watchdog.cancel()
                report = running.report
                log_event(
                    log,
                    "supervisor_drained",
                    clean=report.clean,
                    released=report.released,
                    released_unstarted=report.released_unstarted,
                    seconds=round(time.monotonic() - started, 3),
                )
        finally:
            if sv.listener is not None:
                await sv.listener.close()
            for entry in list(sv.executor.inflight.values()):  # crash path: no orphans
                if entry.child is not None:
                    await entry.child.kill("supervisor crashed", 0)
            if side_door is not None:
                await side_door.cleanup()
            notifier.close()
            metrics.shutdown()
        with contextlib.suppress(*DB_ERRORS):
            await store.stop_worker(self.owner)
        return 0

    def _applied(self, cfg: Config, registry: Registry) -> None:
        self.cfg, self.registry = cfg, registry

    async def _watchdog(self, notifier: Notifier, executor: Executor) -> None:
        """WATCHDOG=1 from the event loop itself: a stuck loop stops the pings."""
        interval = notifier.watchdog_interval or 5.0
        while True:
            notifier.watchdog()
            notifier.status(f"running {executor.running}/{executor.concurrency}")
            await asyncio.sleep(interval)


@dataclass
class _Running:
    intake: list[asyncio.Task[None]]
    upkeep: list[asyncio.Task[None]]
    completer: asyncio.Task[None]
    report: ShutdownReport = field(default_factory=ShutdownReport)  # as the phases go


# The shutdown order (ARCHITECTURE.md, River's producer/completer order), one phase each.
async def _stop_intake(sup: Supervisor, sv: Services, run: _Running) -> None:
    """Planner, claimer, reaper, listener, pruner and notifier stop between passes."""
    for s in sv.intake:
        s.stop()
    await asyncio.gather(*run.intake)


async def _drain(sup: Supervisor, sv: Services, run: _Running) -> None:
    """Children get the drain timeout (a second signal cuts it short); leases are renewed.
    Runs claimed ahead of an instant still to come are given back first, unstarted."""
    ahead = await sv.executor.release_waiting()
    clean = await sv.executor.drain(sup.cfg.drain_timeout, sup.hurry)
    run.report = replace(run.report, released_unstarted=ahead, clean=clean)


async def _release(sup: Supervisor, sv: Services, run: _Running) -> None:
    """What is still running is killed and given back without consuming an attempt."""
    if not run.report.clean:
        run.report = replace(run.report, released=await sv.executor.interrupt_all())


async def _flush_completions(sup: Supervisor, sv: Services, run: _Running) -> None:
    """Queued results are recorded (an unreachable database: given up after one TTL)."""
    sv.executor.completer.stop()
    await run.completer


async def _stop_upkeep(sup: Supervisor, sv: Services, run: _Running) -> None:
    """Only now do heartbeats and the fence watch stop: no lease is left to keep."""
    for s in sv.upkeep:
        s.stop()
    await asyncio.gather(*run.upkeep)


SHUTDOWN = (_stop_intake, _drain, _release, _flush_completions, _stop_upkeep)
