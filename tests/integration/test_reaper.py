"""The reaper through run_once against a real database, leases aged in the rows."""

from __future__ import annotations

from supervisor.core.metrics import Metrics
from supervisor.core.store import Store
from supervisor.instruments import record_reaped
from supervisor.reaper import Reaper, ReapPass

from .test_lost_replies import TTL, _due_run


async def test_reaped_attempts_are_labelled_like_executed_ones(store: Store) -> None:
    run_id = await _due_run(store, "nightly-backup")
    await store._ex.execute("UPDATE runs SET max_attempts = 1 WHERE id = $1", run_id)
    await store.claim_runs(["echo"], 10, "w1", TTL)
    await store._ex.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", run_id
    )
    metrics = Metrics("test")
    try:
        reaper = Reaper(store, interval=60, on_reaped=lambda rows: record_reaped(metrics, rows))
        assert await reaper.run_once() == ReapPass(reaped=1, dead=1)
        text = metrics.render().decode()
    finally:
        metrics.shutdown()
    # One job is one series: named and typed as the executor labels its own results.
    assert (
        'punchclock_attempts_total{job="nightly-backup",outcome="lease_lost",type="echo"} 1.0'
        in text
    )
    assert 'punchclock_runs_dead_total{job="nightly-backup",type="echo"} 1.0' in text
    assert 'type=""' not in text
