"""The supervisor's metrics: what its services and the executor report, recorded from typed
values and read from counters they keep (never derived from log event names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from supervisor.claimer import Claimer
from supervisor.core.metrics import Metrics
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Reaped, Skipped
from supervisor.executor import Executor
from supervisor.faces import AttemptEnded
from supervisor.heartbeater import Heartbeater
from supervisor.planner import Planner
from supervisor.proc.orphans import Orphans


class RidesOutDbErrors(Protocol):
    """A service that counts the database errors it retries (the loops, the completer)."""

    @property
    def name(self) -> str: ...

    @property
    def errors(self) -> int: ...


def instrument(
    m: Metrics,
    executor: Executor,
    heartbeater: Heartbeater,
    planner: Planner,
    claimer: Claimer,
    orphans: Orphans,
    services: Sequence[RidesOutDbErrors],
) -> None:
    """Gauges and counters read at scrape time from what the services count anyway."""
    m.gauge(
        "punchclock_running_children",
        "Children running now",
        lambda: [(executor.running, {})],
    )
    m.gauge("punchclock_free_slots", "Free run slots", lambda: [(executor.free_slots, {})])
    m.counter(
        "punchclock_db_errors",
        "Database errors seen by each service",
        lambda: [(s.errors, {"service": s.name}) for s in services],
    )
    duties = heartbeater.duties
    m.gauge(
        "punchclock_duties_held",
        "Fleet duties this host holds now (1 per duty: plan:1, reap, census, ...)",
        lambda: [(1, {"duty": d}) for d in duties.held()],
    )
    m.gauge(
        "punchclock_fleet_hosts",
        "Live hosts offering this host's most widely offered type (the census's count)",
        lambda: [(duties.fleet_size(), {})],
    )
    m.counter(
        "punchclock_wakeups_ignored",
        "NOTIFY wake-ups for another type or for other seats, not acted on",
        lambda: [(claimer.ignored, {})],
    )
    m.counter(
        "punchclock_lease_renewal_failures",
        "Lease renewal rounds that failed",
        lambda: [(heartbeater.failures, {})],
    )
    m.counter(
        "punchclock_self_fenced_kills",
        "Children killed by self-fencing",
        lambda: [(executor.self_fenced, {})],
    )
    m.counter(
        "punchclock_completions_refused",
        "Results the database refused as they were (recorded without output tails)",
        lambda: [(executor.completer.refused, {})],
    )
    m.counter(
        "punchclock_orphans_killed",
        "Daemons left behind by handlers, adopted by this supervisor and killed",
        lambda: [(orphans.killed, {})],
    )
    m.counter(
        "punchclock_plan_failures",
        "Planning passes that skipped a job this host cannot plan (see /readyz)",
        lambda: [(planner.plan_failures, {})],
    )
    m.counter(
        "punchclock_runs_unstarted",
        "Claimed runs this host could not start (their leases lapse; the reaper retries them)",
        lambda: [(claimer.unstarted, {})],
    )


def record_attempt(m: Metrics, ended: AttemptEnded) -> None:
    m.count_attempt(ended.job_name, ended.type, ended.outcome)
    if ended.duration is not None:
        m.run_duration.record(ended.duration, ended.type)
    if ended.dead:
        m.runs_dead.add(1, {"job": ended.job_name, "type": ended.type})


def record_skipped(m: Metrics, rows: list[Skipped]) -> None:
    for r in rows:
        m.runs_skipped.add(1, {"reason": str(r.reason)})


def record_reaped(m: Metrics, rows: list[Reaped]) -> None:
    for r in rows:
        m.reaped.add(1)
        attrs = {"job": r.job_name, "type": r.type}
        m.count_attempt(r.job_name, r.type, Outcome.LEASE_LOST)
        if r.status is RunStatus.DEAD:
            m.runs_dead.add(1, attrs)
