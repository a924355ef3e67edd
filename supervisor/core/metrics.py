"""OpenTelemetry metrics with a Prometheus reader; the only importer of opentelemetry.

Each process owns one `Metrics` (its own registry, so tests can hold several). Supervisors
export per-process instruments; database-wide gauges are exported by the API only (one
`DatabaseGauges` snapshot refreshed per scrape), so several supervisors never multiply them.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

# From a millisecond to four hours: lateness of a 02:00 job is seen at both ends.
DELAY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
    300, 900, 1800, 3600, 14400,
)  # fmt: skip
DURATION_BUCKETS = (
    0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400,
)  # fmt: skip
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# Runs of a status are counted per scrape below this many (by the statistics), estimated above.
EXACT_BELOW = 50_000


class TypeHistogram(Collector):
    """A histogram by handler type, aggregated here and rendered into the same Prometheus
    registry as the SDK's instruments, under the name and labels the SDK gave it.

    For the two samples every run makes (queue delay, duration): the SDK's `record` costs
    6-7 us (its attribute handling and locks), 13-19 us right after a spawn; a bisect and
    two additions here cost 0.2 us (docs/performance.md). Event-loop thread only, as the
    scrape is (the side door's aiohttp handler)."""

    def __init__(self, name: str, description: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self.description = description
        self.bounds = bounds
        # type -> [count per bucket (the last one +Inf)..., sum]
        self._by_type: dict[str, list[float]] = {}

    def record(self, value: float, type_: str) -> None:
        if value < 0:  # as the SDK does: a histogram of non-negative amounts
            return
        cells = self._by_type.get(type_)
        if cells is None:
            cells = self._by_type[type_] = [0.0] * (len(self.bounds) + 2)
        cells[bisect.bisect_left(self.bounds, value)] += 1
        cells[-1] += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.description, labels=["type"])
        for type_, cells in list(self._by_type.items()):
            cumulative, buckets = 0.0, []
            for bound, n in zip((*self.bounds, "+Inf"), cells[:-1], strict=True):
                cumulative += n
                buckets.append((f"{bound}", cumulative))
            family.add_metric([type_], buckets, sum_value=cells[-1])
        yield family


@dataclass
class DatabaseSnapshot:
    """Database-wide values, refreshed by the API right before each scrape."""

    runs_by_status: dict[str, int] = field(default_factory=dict)
    runs_estimated: frozenset[str] = frozenset()  # statuses whose count is the planner's estimate
    due_waiting: int = 0
    oldest_due_age: float = 0.0
    live_workers: int = 0
    unserved_jobs: int = 0
    jobs_behind: int = 0
    last_success_age: dict[str, float] = field(default_factory=dict)


class Metrics:
    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        reader = PrometheusMetricReader(registry=self.registry, scope_info_enabled=False)
        views = [
            View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(b))
            for name, b in (
                ("punchclock_claim_latency", FAST_BUCKETS),
                ("punchclock_plan_tick_duration", FAST_BUCKETS),
                ("punchclock_notify_delivery_latency", DELAY_BUCKETS),
            )
        ]
        self.provider = MeterProvider(
            metric_readers=[reader],
            # Exemplars link samples to traces; there are none, and offering each measurement
            # to a reservoir is a good part of what a record costs.
            exemplar_filter=AlwaysOffExemplarFilter(),
            views=views,
            resource=Resource.create({"service.name": f"punchclock-{service}"}),
        )
        m = self.provider.get_meter("punchclock")
        self.runs_dead = m.create_counter(
            "punchclock_runs_dead", unit="1", description="Runs that became dead"
        )
        self.runs_skipped = m.create_counter(
            "punchclock_runs_skipped", unit="1", description="Runs skipped, by reason"
        )
        self.queue_delay = TypeHistogram(
            "punchclock_queue_delay_seconds",
            "Start time minus due time (scheduled; a retry's, requeue's or backfill's run_after)",
            DELAY_BUCKETS,
        )
        self.run_duration = TypeHistogram(
            "punchclock_run_duration_seconds", "Attempt duration by type", DURATION_BUCKETS
        )
        self.registry.register(self.queue_delay)
        self.registry.register(self.run_duration)
        self.lease_renewals = m.create_counter(
            "punchclock_lease_renewals", unit="1", description="Lease renewals that succeeded"
        )
        self.reaped = m.create_counter(
            "punchclock_runs_reaped", unit="1", description="Runs reaped after their lease expired"
        )
        self.planned = m.create_counter(
            "punchclock_runs_planned", unit="1", description="Run rows inserted by the planner"
        )
        self.plan_tick = m.create_histogram(
            "punchclock_plan_tick_duration", unit="s", description="Planner batch duration"
        )
        self.claim_latency = m.create_histogram(
            "punchclock_claim_latency", unit="s", description="Claim transaction round trip"
        )
        self.delivery_latency = m.create_histogram(
            "punchclock_notify_delivery_latency",
            unit="s",
            description="Notification event written to delivered (2xx), by channel",
        )
        self._gauges: dict[str, Any] = {}
        self._meter = m
        self.snapshot = DatabaseSnapshot()
        # Counted here and read at scrape time: one dict update per attempt instead of a trip
        # through the SDK (as the run's two histogram samples are: TypeHistogram).
        self._attempts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.counter(
            "punchclock_attempts",
            "Finished attempts by job, type and outcome",
            lambda: [
                (n, {"job": job, "type": type_, "outcome": outcome})
                for (job, type_, outcome), n in list(self._attempts.items())
            ],
        )

    def count_attempt(self, job: str, type_: str, outcome: str) -> None:
        self._attempts[job, type_, outcome] += 1

    def gauge(self, name: str, description: str, read: Any) -> None:
        """An observable gauge whose callback returns [(value, attributes), ...]."""

        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(v, a) for v, a in read()]

        self._gauges[name] = self._meter.create_observable_gauge(
            name, callbacks=[callback], unit="1", description=description
        )

    def counter(self, name: str, description: str, read: Any) -> None:
        """An observable counter over a running total the code keeps anyway."""

        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(v, a) for v, a in read()]

        self._gauges[name] = self._meter.create_observable_counter(
            name, callbacks=[callback], unit="1", description=description
        )

    def database_gauges(self) -> None:
        """Register the database-wide gauges (API only), read from `self.snapshot`."""
        s = lambda: self.snapshot  # noqa: E731 - the snapshot object is replaced per scrape
        self.gauge(
            "punchclock_runs",
            f"Runs by status (counted below {EXACT_BELOW:,} per status, PostgreSQL's estimate"
            " above)",
            lambda: [(n, {"status": k}) for k, n in s().runs_by_status.items()],
        )
        self.gauge(
            "punchclock_due_runs_waiting", "Due runs not started", lambda: [(s().due_waiting, {})]
        )
        self.gauge(
            "punchclock_oldest_due_run_age_seconds",
            "Age of the oldest due run not started",
            lambda: [(s().oldest_due_age, {})],
        )
        self.gauge("punchclock_live_workers", "Live supervisors", lambda: [(s().live_workers, {})])
        self.gauge(
            "punchclock_unserved_jobs",
            "Active jobs whose type no live supervisor offers",
            lambda: [(s().unserved_jobs, {})],
        )
        self.gauge(
            "punchclock_jobs_behind_horizon",
            "Active jobs waiting to be planned",
            lambda: [(s().jobs_behind, {})],
        )
        self.gauge(
            "punchclock_last_success_age_seconds",
            "Seconds since each active job last succeeded (dead man's switch)",
            lambda: [(age, {"job": job}) for job, age in s().last_success_age.items()],
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        self.provider.shutdown()
