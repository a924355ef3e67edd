"""Composes the supervisor's services in one TaskGroup and orders the shutdown.

Shutdown (first SIGTERM/SIGINT) runs the phases in SHUTDOWN, each logged as
`shutdown_phase`: stop intake (planner, claimer, reaper, listener, pruner) -> drain (children
finish within the drain timeout while leases are still renewed) -> release (kill what is
left, give it back without consuming an attempt) -> flush completions -> stop upkeep
(heartbeater, fence watch); then the worker is marked stopped and the pool closed. A second
signal cuts the drain short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from supervisor import __version__, lease
from supervisor.claimer import Claimer
from supervisor.core.channels import notifications
from supervisor.core.config import Config, parse_listen
from supervisor.core.db import DB_ERRORS, create_pool
from supervisor.core.httpd import health_routes, start_side_door
from supervisor.core.log import log_event
from supervisor.core.metrics import Metrics
from supervisor.core.migrator import check_schema, migrate, pending_migrations
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store
from supervisor.executor import Executor
from supervisor.fence import FenceWatch
from supervisor.heartbeater import Heartbeater
from supervisor.instruments import instrument, record_attempt, record_reaped, record_skipped
from supervisor.keeper import Keeper
from supervisor.listener import Listener
from supervisor.livetail import LiveTail
from supervisor.loop import Loop
from supervisor.notifier import WebhookNotifier
from supervisor.orphans import Orphans
from supervisor.planner import PLAN_LANES, Planner
from supervisor.pruner import Pruner
from supervisor.reaper import Reaper
from supervisor.registry import Registry
from supervisor.sdnotify import Notifier

log = logging.getLogger("punchclock.supervisor")
# While a backlog is due, a freed slot waits until every slot is free or this many seconds
# passed, so one claim refills them all (see claimer.py): short against any schedule's
# precision, long against the life of a trivial child. Measured with /bin/true (bench/):
# claims of 8 instead of 1-2 runs cut the database's CPU per run by half.
REFILL_WAIT = 0.005


class Supervisor:
    def __init__(self, cfg: Config, registry: Registry, *, auto_migrate: bool = False) -> None:
        self.cfg = cfg
        self.registry = registry
        self.auto_migrate = auto_migrate
        self.owner = cfg.effective_worker_id
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()
        self.orphans = Orphans()

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
        backoff = 0.2
        while True:
            try:
                return await create_pool(
                    self.cfg.database_url,
                    min_size=6,
                    max_size=6,
                    generic_plans=True,
                    warm=lambda conn: Store(conn).warm_hot_statements(),
                )
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

    def _build(self, store: Store, keeper: Keeper, metrics: Metrics) -> Services:
        cfg = self.cfg
        m = metrics
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
            orphans=self.orphans,
            on_slot_free=lambda: claimer.slot_freed(),  # noqa: PLW0108 - built below
            on_started=lambda type_, delay: m.queue_delay.record(delay, type_),
            on_ended=lambda ended: record_attempt(m, ended),
            log_runs=cfg.log_runs == "all",
        )
        claimer = Claimer(
            store,
            owner=self.owner,
            types=self.registry.types,
            slots=executor,
            lease_ttl=cfg.lease_ttl,
            misfire_grace=cfg.misfire_grace,
            poll_interval=cfg.poll_interval,
            on_skipped=lambda rows: record_skipped(m, rows),
            on_claim_latency=m.claim_latency.record,
            refill_batch=cfg.effective_concurrency,
            refill_wait=REFILL_WAIT,
            ahead=cfg.claim_ahead,
        )

        def planned(inserted: int, seconds: float) -> None:
            m.planned.add(inserted)
            m.plan_tick.record(seconds)

        planner = Planner(
            store,
            PlanLimits(horizon=timedelta(seconds=cfg.plan_horizon), max_runs=cfg.plan_max_runs),
            on_planned=planned,
            heartbeat_url=cfg.heartbeat_ping_url,
            hold_off=executor.hold_off,
            lanes=PLAN_LANES,
            idle=lambda: executor.in_flight() == 0,
        )
        reaper = Reaper(
            store,
            interval=max(0.2, cfg.lease_ttl / 4),
            on_reaped=lambda rows: record_reaped(m, rows),
        )

        heartbeater = Heartbeater(
            store,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl,
            holder=executor,
            on_renewed=m.lease_renewals.add,
        )

        def fence_tick() -> None:
            executor.fence_check()
            self.orphans.sweep_soon()  # also catches daemons orphaned while handlers run

        fence = FenceWatch(fence_tick, min(0.5, cfg.lease_ttl * lease.FENCE_POLL))
        every = cfg.live_output_interval
        tails = LiveTail(store, executor, every) if every > 0 else None
        listener = Listener(cfg.database_url, claimer.notified)
        pruner = Pruner(
            store,
            keep_succeeded_days=cfg.retention_succeeded_days,
            keep_failed_days=cfg.retention_failed_days,
            keep_deliveries_days=cfg.retention_deliveries_days,
        )
        notifier = WebhookNotifier(
            notifications(store),
            owner=self.owner,
            timeout=cfg.notify_timeout,
            retry_window=cfg.notify_retry_window,
            allowed_hosts=cfg.notify_allowed_hosts,
            late_after=cfg.ready_max_lag,
        )
        loops: list[Loop] = [
            planner,
            claimer,
            reaper,
            listener,
            heartbeater,
            fence,
            pruner,
            notifier,
        ]
        if tails is not None:
            loops.append(tails)
        instrument(
            m, executor, heartbeater, planner, claimer, self.orphans, [*loops, executor.completer]
        )
        notifier.instrument(m)
        return Services(
            executor,
            claimer,
            planner,
            reaper,
            heartbeater,
            fence,
            listener,
            pruner,
            notifier,
            tails=tails,
        )

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
        log_event(
            log,
            "supervisor_started",
            worker_id=self.owner,
            types=types,
            concurrency=cfg.effective_concurrency,
            lease_ttl=cfg.lease_ttl,
        )
        for r in self.registry.rejected:
            log_event(
                log,
                "handler_rejected",
                level=logging.WARNING,
                source=r.source,
                type=r.type,
                reason=r.reason,
            )
        if not types:
            log_event(log, "no_handlers", level=logging.WARNING, detail="this host claims nothing")
        metrics = Metrics("supervisor")
        sv = self._build(store, keeper, metrics)
        self.executor = sv.executor
        side_door = None
        if cfg.metrics_listen:
            host, port = parse_listen(cfg.metrics_listen)
            routes = health_routes(
                pool, cfg.ready_max_lag, metrics, local_details=sv.planner.details
            )
            side_door = await start_side_door(host, port, routes)
        notifier = Notifier()
        notifier.ready(f"supervising {', '.join(types) or 'nothing'}")
        try:
            async with asyncio.TaskGroup() as tg:
                running = _Running(
                    intake=[tg.create_task(s.run()) for s in sv.intake],
                    upkeep=[tg.create_task(s.run()) for s in sv.upkeep],
                    completer=tg.create_task(sv.executor.completer.run(sv.completer_stop)),
                )
                watchdog = tg.create_task(self._watchdog(notifier, sv.executor))
                await self.stopping.wait()
                notifier.stopping()
                started = time.monotonic()
                report: dict[str, Any] = {}
                for phase in SHUTDOWN:
                    log_event(log, "shutdown_phase", phase=phase.__name__.strip("_"))
                    await phase(self, sv, running, report)
                watchdog.cancel()
                log_event(
                    log,
                    "supervisor_drained",
                    clean=report["clean"],
                    released=report["released"],
                    released_unstarted=report["ahead_released"],
                    seconds=round(time.monotonic() - started, 3),
                )
        finally:
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

    async def _watchdog(self, notifier: Notifier, executor: Executor) -> None:
        """WATCHDOG=1 from the event loop itself: a stuck loop stops the pings."""
        interval = notifier.watchdog_interval or 5.0
        while True:
            notifier.watchdog()
            notifier.status(f"running {executor.running}/{executor.concurrency}")
            await asyncio.sleep(interval)


@dataclass
class Services:
    executor: Executor
    claimer: Claimer
    planner: Planner
    reaper: Reaper
    heartbeater: Heartbeater
    fence: FenceWatch
    listener: Listener
    pruner: Pruner
    notifier: WebhookNotifier
    tails: LiveTail | None  # None: live_output_interval = 0
    completer_stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def intake(self) -> list[Loop]:
        """What takes new work: stopped first (the notifier ends its deliveries in flight)."""
        return [self.planner, self.claimer, self.reaper, self.listener, self.pruner, self.notifier]

    @property
    def upkeep(self) -> list[Loop]:
        """What keeps leases and fences while children finish: stopped last."""
        return [self.heartbeater, self.fence, *([self.tails] if self.tails else [])]


@dataclass
class _Running:
    intake: list[asyncio.Task[None]]
    upkeep: list[asyncio.Task[None]]
    completer: asyncio.Task[None]


# The shutdown order (ARCHITECTURE.md, River's producer/completer order), one phase each.
async def _stop_intake(sup: Supervisor, sv: Services, run: _Running, out: dict[str, Any]) -> None:
    """Planner, claimer, reaper, listener, pruner and notifier stop between passes."""
    for s in sv.intake:
        s.stop()
    await asyncio.gather(*run.intake)


async def _drain(sup: Supervisor, sv: Services, run: _Running, out: dict[str, Any]) -> None:
    """Children get the drain timeout (a second signal cuts it short); leases are renewed.
    Runs claimed ahead of an instant still to come are given back first, unstarted."""
    out["ahead_released"] = await sv.executor.release_waiting()
    out["clean"] = await sv.executor.drain(sup.cfg.drain_timeout, sup.hurry)


async def _release(sup: Supervisor, sv: Services, run: _Running, out: dict[str, Any]) -> None:
    """What is still running is killed and given back without consuming an attempt."""
    out["released"] = 0 if out["clean"] else await sv.executor.interrupt_all()


async def _flush_completions(
    sup: Supervisor, sv: Services, run: _Running, out: dict[str, Any]
) -> None:
    """Queued results are recorded (an unreachable database: given up after one TTL)."""
    sv.completer_stop.set()
    await run.completer


async def _stop_upkeep(sup: Supervisor, sv: Services, run: _Running, out: dict[str, Any]) -> None:
    """Only now do heartbeats and the fence watch stop: no lease is left to keep."""
    for s in sv.upkeep:
        s.stop()
    await asyncio.gather(*run.upkeep)


SHUTDOWN = (_stop_intake, _drain, _release, _flush_completions, _stop_upkeep)
