"""The supervisor's services, built and wired together (app.py runs and stops them).

Services never import each other: they meet here, through the callbacks and small
Protocols (faces.py) passed to each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta

from supervisor import lease
from supervisor.census import Census
from supervisor.claimer import Claimer
from supervisor.completer import Completer
from supervisor.core.channels import notifications
from supervisor.core.config import Config
from supervisor.core.metrics import Metrics
from supervisor.core.planning import PlanLimits
from supervisor.core.records import Reaped
from supervisor.core.store import Store
from supervisor.duties import Duties
from supervisor.executor import Executor
from supervisor.faces import AttemptEnded
from supervisor.fence import FenceWatch
from supervisor.heartbeater import Heartbeater
from supervisor.inflight import RunTable
from supervisor.instruments import instrument, record_attempt, record_reaped, record_skipped
from supervisor.listener import Listener
from supervisor.livetail import LiveTail
from supervisor.loop import Loop
from supervisor.notifier import WebhookNotifier
from supervisor.planner import PLAN_LANES, Planner
from supervisor.proc.keeper import Keeper
from supervisor.proc.orphans import Orphans
from supervisor.pruner import Pruner
from supervisor.reaper import Reaper
from supervisor.registry import Registry
from supervisor.runlife import RunLife

# While a backlog is due, a freed slot waits until every slot is free or this many seconds
# passed, so one claim refills them all (see claimer.py): short against any schedule's
# precision, long against the life of a trivial child. Measured with /bin/true (bench/):
# claims of 8 instead of 1-2 runs cut the database's CPU per run by half.
REFILL_WAIT = 0.005
# The settings a reload (SIGHUP) applies (DESIGN.md, Reload): each is read afresh by every
# pass or spawn, or only at shutdown. A change to any other is logged as needing a restart
# and not applied (the pool, the worker id, lease_ttl, concurrency, the side door, ...).
LIVE_SETTINGS = (
    "handlers",
    "log_level",
    "drain_timeout",
    "kill_grace",
    "output_limit",
    "misfire_grace",
    "poll_interval",
    "poll_gap",
)


def reloaded_config(old: Config, new: Config) -> tuple[Config, list[str], list[str]]:
    """`old` with `new`'s live settings; the live settings that changed, and the others that
    changed (needing a restart, left as they were)."""
    differ = [f.name for f in fields(Config) if getattr(old, f.name) != getattr(new, f.name)]
    live = [n for n in differ if n in LIVE_SETTINGS]
    return (
        replace(old, **{n: getattr(new, n) for n in live}),
        live,
        [n for n in differ if n not in LIVE_SETTINGS],
    )


def build_executor(
    store: Store,
    registry: Registry,
    *,
    owner: str,
    concurrency: int,
    lease_ttl: float,
    kill_grace: float,
    output_limit: int,
    keeper: Keeper | None = None,
    orphans: Orphans | None = None,
    on_slot_free: Callable[[], None] | None = None,
    on_started: Callable[[str, float], None] | None = None,
    on_ended: Callable[[AttemptEnded], None] | None = None,
    log_runs: bool = False,
) -> Executor:
    """The executor and what it stands on: the per-run table, a run's life, the completer
    (the executor and the run's life meet through the table and Life, not each other)."""
    table = RunTable(
        owner=owner,
        lease_ttl=lease_ttl,
        kill_grace=kill_grace,
        keeper=keeper,
        on_slot_free=on_slot_free,
        log_runs=log_runs,
    )
    completer = Completer(store, owner=owner, lease_ttl=lease_ttl)
    life = RunLife(
        table,
        completer,
        registry,
        output_limit=output_limit,
        keeper=keeper,
        orphans=orphans,
        on_started=on_started,
        on_ended=on_ended,
    )
    return Executor(
        table,
        life,
        store,
        registry,
        concurrency=concurrency,
        completer=completer,
        on_ended=on_ended,
    )


def build_services(
    cfg: Config,
    registry: Registry,
    owner: str,
    orphans: Orphans,
    store: Store,
    keeper: Keeper,
    metrics: Metrics,
) -> Services:
    """Every service of one supervisor, wired to the others through small callbacks."""
    m = metrics
    duties = Duties(cfg.lease_ttl)
    claimer: Claimer
    listener: Listener | None
    executor = build_executor(
        store,
        registry,
        owner=owner,
        concurrency=cfg.effective_concurrency,
        lease_ttl=cfg.lease_ttl,
        kill_grace=cfg.kill_grace,
        output_limit=cfg.output_limit,
        keeper=keeper,
        orphans=orphans,
        on_slot_free=lambda: claimer.slot_freed(),  # noqa: PLW0108 - built below
        on_started=lambda type_, delay: started(type_, delay),  # noqa: PLW0108 - built below
        on_ended=lambda ended: record_attempt(m, ended),
        log_runs=cfg.log_runs == "all",
    )
    claimer = Claimer(
        store,
        owner=owner,
        types=registry.types,
        slots=executor,
        lease_ttl=cfg.lease_ttl,
        misfire_grace=cfg.misfire_grace,
        poll_interval=cfg.poll_interval,
        on_skipped=lambda rows: record_skipped(m, rows),
        on_claim_latency=m.claim_latency.record,
        refill_batch=cfg.effective_concurrency,
        refill_wait=REFILL_WAIT,
        ahead=cfg.claim_ahead,
        duties=duties,
        poll_gap=cfg.poll_gap,
        listening=lambda: listener is not None and listener.listening(),
        riders=executor.completer,
    )

    def planned(inserted: int, seconds: float) -> None:
        m.planned.add(inserted)
        m.plan_tick.record(seconds)

    upkeep = build_upkeep(
        cfg,
        store,
        owner,
        duties,
        claimer,
        idle=lambda: executor.in_flight() == 0,
        hold_off=executor.hold_off,
        on_planned=planned,
        on_reaped=lambda rows: record_reaped(m, rows),
    )
    planner, reaper, pruner, notifier, census = (
        upkeep.planner, upkeep.reaper, upkeep.pruner, upkeep.notifier, upkeep.census
    )  # fmt: skip
    heartbeater = Heartbeater(
        store,
        owner=owner,
        lease_ttl=cfg.lease_ttl,
        holder=executor,
        on_renewed=m.lease_renewals.add,
        duties=duties,
    )

    def fence_tick() -> None:
        executor.fence_check()
        orphans.sweep_soon()  # also catches daemons orphaned while handlers run

    def busy() -> bool:
        return executor.in_flight() > 0

    fence = FenceWatch(fence_tick, min(0.5, cfg.lease_ttl * lease.FENCE_POLL), busy=busy)
    every = cfg.live_output_interval
    tails = LiveTail(store, executor, every) if every > 0 else None

    def started(type_: str, delay: float) -> None:
        m.queue_delay.record(delay, type_)
        fence.rouse()  # both tick slowly while nothing runs here
        if tails is not None:
            tails.rouse()

    direct = cfg.direct_database_url
    listener = Listener(direct, claimer.notified) if direct else None
    loops: list[Loop] = [planner, claimer, reaper, heartbeater, fence, pruner, notifier, census]
    if listener is not None:
        loops.append(listener)
    if tails is not None:
        loops.append(tails)
    instrument(m, executor, heartbeater, planner, claimer, orphans, [*loops, executor.completer])
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
        census,
        tails=tails,
    )


@dataclass(frozen=True)
class Upkeep:
    """The services only the holders of their duties run (DESIGN.md, Fleet)."""

    planner: Planner
    reaper: Reaper
    pruner: Pruner
    notifier: WebhookNotifier
    census: Census


def build_upkeep(
    cfg: Config,
    store: Store,
    owner: str,
    duties: Duties,
    claimer: Claimer,
    *,
    idle: Callable[[], bool],
    hold_off: Callable[[], float] | None = None,
    on_planned: Callable[[int, float], None] | None = None,
    on_reaped: Callable[[list[Reaped]], None] | None = None,
) -> Upkeep:
    """Planner, reaper, pruner, notifier and census, each gated by its duty, and each (the
    claimer too, for the catch-up pass) woken when this host takes that duty. The bench's
    simulated hosts (bench/fleet_sim.py) are built by this too."""
    upkeep = Upkeep(
        planner=Planner(
            store,
            PlanLimits(horizon=timedelta(seconds=cfg.plan_horizon), max_runs=cfg.plan_max_runs),
            on_planned=on_planned,
            heartbeat_url=cfg.heartbeat_ping_url,
            hold_off=hold_off,
            lanes=PLAN_LANES,
            idle=idle,
            gate=duties.gate("plan"),
        ),
        reaper=Reaper(
            store,
            interval=max(0.2, cfg.lease_ttl / 4),
            on_reaped=on_reaped,
            gate=duties.gate("reap"),
        ),
        pruner=Pruner(
            store,
            keep_succeeded_days=cfg.retention_succeeded_days,
            keep_failed_days=cfg.retention_failed_days,
            keep_deliveries_days=cfg.retention_deliveries_days,
            gate=duties.gate("prune"),
        ),
        notifier=WebhookNotifier(
            notifications(store),
            owner=owner,
            timeout=cfg.notify_timeout,
            retry_window=cfg.notify_retry_window,
            allowed_hosts=cfg.notify_allowed_hosts,
            allow_private=cfg.notify_allow_private,
            late_after=cfg.ready_max_lag,
            gate=duties.gate("notify"),
        ),
        census=Census(store, gate=duties.gate("census")),
    )
    gated: dict[str, Loop] = {"plan": upkeep.planner, "reap": upkeep.reaper,
                              "prune": upkeep.pruner, "notify": upkeep.notifier,
                              "census": upkeep.census, "catchup": claimer}  # fmt: skip
    for kind, loop in gated.items():
        duties.on_gained(kind, loop.wake)
    return upkeep


@dataclass
class Services:
    executor: Executor
    claimer: Claimer
    planner: Planner
    reaper: Reaper
    heartbeater: Heartbeater
    fence: FenceWatch
    listener: Listener | None  # None: no direct connection, the claimer polls
    pruner: Pruner
    notifier: WebhookNotifier
    census: Census
    tails: LiveTail | None  # None: live_output_interval = 0

    def apply(self, cfg: Config, registry: Registry) -> None:
        """A reload's handlers and live settings, all at once (no await: no pass sees half
        of them). Children running keep what they started with; the claimer claims from
        the start, now, for the types it offers from here on."""
        ex, claimer = self.executor, self.claimer
        ex.use_handlers(registry, cfg.kill_grace, cfg.output_limit)
        claimer.types = registry.types
        claimer.misfire_grace = cfg.misfire_grace
        claimer.poll_interval, claimer.poll_gap = cfg.poll_interval, cfg.poll_gap
        claimer.notified()

    @property
    def intake(self) -> list[Loop]:
        """What takes new work: stopped first (the notifier ends its deliveries in flight)."""
        listener = [self.listener] if self.listener else []
        return [self.planner, self.claimer, self.reaper, *listener, self.pruner, self.notifier,
                self.census]  # fmt: skip

    @property
    def upkeep(self) -> list[Loop]:
        """What keeps leases and fences while children finish: stopped last."""
        return [self.heartbeater, self.fence, *([self.tails] if self.tails else [])]
