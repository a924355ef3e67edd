"""Composes the supervisor's services in one TaskGroup and orders the shutdown.

Shutdown (first SIGTERM/SIGINT): stop intake (planner, claimer, reaper) -> let children
finish within the drain timeout while leases are still renewed -> kill what is left and
release it without consuming an attempt -> flush completions -> stop the heartbeater ->
mark the worker stopped -> close the pool. A second signal cuts the drain short.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import asyncpg

from supervisor import __version__
from supervisor.claimer import Claimer
from supervisor.config import Config
from supervisor.errors import SchemaMismatch
from supervisor.executor import Executor
from supervisor.heartbeater import Heartbeater
from supervisor.keeper import Keeper
from supervisor.log import log_event
from supervisor.loop import DB_ERRORS, Loop
from supervisor.planner import Planner
from supervisor.planning import PlanLimits
from supervisor.reaper import Reaper
from supervisor.registry import Registry
from supervisor.store import WAKE_CHANNEL, Store, create_pool, migrate, pending_migrations

log = logging.getLogger("punchclock.supervisor")


class Listener(Loop):
    """Holds a LISTEN connection (reconnecting) and wakes the claimer on NOTIFY."""

    name = "listener"

    def __init__(self, dsn: str, on_wake: Callable[[], None]) -> None:
        super().__init__(1.0, jitter=0.0)
        self.dsn = dsn
        self.on_wake = on_wake
        self.conn: asyncpg.Connection | None = None

    async def run_once(self) -> float | None:
        if self.conn is None or self.conn.is_closed():
            self.conn = await asyncpg.connect(self.dsn, timeout=5)
            await self.conn.add_listener(WAKE_CHANNEL, lambda *_: self.on_wake())
            self.on_wake()  # notifications may have been missed while disconnected
        return None

    async def close(self) -> None:
        if self.conn is not None and not self.conn.is_closed():
            await self.conn.close(timeout=2)


class FenceWatch(Loop):
    name = "fence"

    def __init__(self, check: Callable[[], None], interval: float) -> None:
        super().__init__(interval, jitter=0.0)
        self.check = check

    async def run_once(self) -> float | None:
        self.check()
        return None


class Supervisor:
    def __init__(self, cfg: Config, registry: Registry, *, auto_migrate: bool = False) -> None:
        self.cfg = cfg
        self.registry = registry
        self.auto_migrate = auto_migrate
        self.owner = cfg.effective_worker_id
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()

    def request_stop(self) -> None:
        if self.stopping.is_set():
            log_event(log, "shutdown_hurried")
            self.hurry.set()
        else:
            log_event(log, "shutdown_requested", drain_timeout=self.cfg.drain_timeout)
            self.stopping.set()

    async def _prepare_schema(self, pool: asyncpg.Pool) -> None:
        async with pool.acquire() as conn:
            if self.auto_migrate:
                await migrate(conn)
                return
            pending = await pending_migrations(conn)
        if pending:
            raise SchemaMismatch(
                f"database schema is behind this punchclock (pending: {', '.join(pending)}); "
                "run `punchclock migrate` first"
            )

    async def _connect(self) -> asyncpg.Pool:
        backoff = 0.2
        while True:
            try:
                return await create_pool(self.cfg.database_url, min_size=2, max_size=6)
            except DB_ERRORS as exc:
                log_event(log, "db_unreachable", level=logging.WARNING, error=repr(exc))
            if self.stopping.is_set():
                raise SystemExit(0)
            try:
                async with asyncio.timeout(backoff):
                    await self.stopping.wait()
            except TimeoutError:
                pass
            backoff = min(backoff * 2, 5.0)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        cfg = self.cfg
        pool = await self._connect()
        store = Store(pool)
        try:
            await self._prepare_schema(pool)
            keeper = await Keeper.start(uuid.uuid4().hex)
            try:
                return await self._serve(store, keeper)
            finally:
                await keeper.close()
        finally:
            await pool.close()

    async def _serve(self, store: Store, keeper: Keeper) -> int:
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
        log_event(
            log,
            "supervisor_started",
            worker_id=self.owner,
            types=types,
            concurrency=cfg.effective_concurrency,
            lease_ttl=cfg.lease_ttl,
        )
        for r in self.registry.rejected:
            log_event(log, "handler_rejected", level=logging.WARNING, source=r.source, type=r.type, reason=r.reason)
        claimer: Claimer
        executor = Executor(
            store,
            self.registry,
            owner=self.owner,
            concurrency=cfg.effective_concurrency,
            lease_ttl=cfg.lease_ttl,
            kill_grace=cfg.kill_grace,
            output_limit=cfg.output_limit,
            keeper=keeper,
            on_slot_free=lambda: claimer.wake(),
        )
        claimer = Claimer(
            store,
            owner=self.owner,
            types=types,
            free_slots=lambda: executor.free_slots,
            start=executor.start,
            lease_ttl=cfg.lease_ttl,
            misfire_grace=cfg.misfire_grace,
            poll_interval=cfg.poll_interval,
        )
        planner = Planner(
            store,
            PlanLimits(horizon=timedelta(seconds=cfg.plan_horizon), max_runs=cfg.plan_max_runs),
        )
        reaper = Reaper(store, interval=max(0.2, cfg.lease_ttl / 4))
        heartbeater = Heartbeater(
            store,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl,
            leases=executor.leases,
            renewed=executor.renewed,
            running=lambda: len(executor.inflight),
        )
        fence = FenceWatch(executor.fence_check, min(0.5, cfg.lease_ttl / 20))
        listener = Listener(cfg.database_url, claimer.wake)
        completer_stop = asyncio.Event()
        self.executor = executor
        try:
            async with asyncio.TaskGroup() as tg:
                intake = [tg.create_task(s.run()) for s in (planner, claimer, reaper, listener)]
                upkeep = [tg.create_task(s.run()) for s in (heartbeater, fence)]
                completer = tg.create_task(executor.run_completer(completer_stop))
                await self.stopping.wait()
                for s in (planner, claimer, reaper, listener):
                    s.stop()
                await asyncio.gather(*intake)
                started = time.monotonic()
                drained = await executor.drain(cfg.drain_timeout, self.hurry)
                released = 0 if drained else await executor.interrupt_all()
                completer_stop.set()
                await completer
                for s in (heartbeater, fence):
                    s.stop()
                await asyncio.gather(*upkeep)
                log_event(
                    log,
                    "supervisor_drained",
                    clean=drained,
                    released=released,
                    seconds=round(time.monotonic() - started, 3),
                )
        finally:
            await listener.close()
            for entry in list(executor.inflight.values()):  # crash path: no orphans
                if entry.child is not None:
                    await entry.child.kill("supervisor crashed", 0)
        try:
            await store.stop_worker(self.owner)
        except DB_ERRORS:
            pass
        return 0
