"""The run's two histograms are aggregated by punchclock (TypeHistogram), not by the SDK: a
scrape must read exactly what the SDK's histogram rendered for the same samples, so
dashboards and alerts written against it keep working."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from prometheus_client import CollectorRegistry, generate_latest

from supervisor.core.metrics import DELAY_BUCKETS, DURATION_BUCKETS, Metrics

SAMPLES = [
    (0.003, "echo"),
    (2.0, "echo"),
    (0.001, 'quo"te'),  # exactly on a bound: counted in that bucket (le is inclusive)
    (1e9, "huge"),  # above every bound: +Inf only
    (0.0, "huge"),
    (-0.5, "huge"),
]


def _lines(text: bytes, name: str) -> list[str]:
    return [line for line in text.decode().splitlines() if name in line]


@pytest.mark.parametrize(
    ("attr", "instrument", "description", "bounds"),
    [
        (
            "queue_delay",
            "punchclock_queue_delay",
            "Start time minus due time (scheduled; a retry's, requeue's or backfill's run_after)",
            DELAY_BUCKETS,
        ),
        ("run_duration", "punchclock_run_duration", "Attempt duration by type", DURATION_BUCKETS),
    ],
)
def test_type_histogram_renders_what_the_sdk_rendered(
    attr: str, instrument: str, description: str, bounds: tuple[float, ...]
) -> None:
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    view = View(instrument_name=instrument, aggregation=ExplicitBucketHistogramAggregation(bounds))
    provider = MeterProvider(metric_readers=[reader], views=[view])
    sdk = provider.get_meter("reference").create_histogram(
        instrument, unit="s", description=description
    )
    ours = Metrics("supervisor")
    for value, type_ in SAMPLES:
        sdk.record(value, {"type": type_})
        getattr(ours, attr).record(value, type_)
    expected = _lines(generate_latest(registry), instrument)
    got = _lines(ours.render(), instrument)
    assert len(expected) > 2 * len(bounds)  # the reference rendered buckets at all
    assert got == expected
    provider.shutdown()
    ours.shutdown()


def test_type_histogram_counts_each_sample_once_in_its_bucket() -> None:
    m = Metrics("supervisor")
    m.queue_delay.record(0.004, "a")
    m.queue_delay.record(0.005, "a")
    m.queue_delay.record(0.006, "a")
    text = m.render().decode()
    assert 'punchclock_queue_delay_seconds_bucket{le="0.0025",type="a"} 0.0' in text
    assert 'punchclock_queue_delay_seconds_bucket{le="0.005",type="a"} 2.0' in text
    assert 'punchclock_queue_delay_seconds_bucket{le="0.01",type="a"} 3.0' in text
    assert 'punchclock_queue_delay_seconds_count{type="a"} 3.0' in text
    assert 'punchclock_queue_delay_seconds_sum{type="a"} 0.015' in text
    m.shutdown()
