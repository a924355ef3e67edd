"""The reaper through run_once against a real database, leases aged in the rows."""

from __future__ import annotations

from supervisor.core.metrics import Metrics
from supervisor.core.store import Store
from supervisor.instruments import record_reaped
from supervisor.reaper import Reaper, ReapPass

from ..factory import age_lease, due_run, set_run
from .test_lost_replies import TTL


async def test_reaped_attempts_are_labelled_like_executed_ones(store: Store) -> None:
    run_id = await due_run(store, "nightly-backup")
    await set_run(store, run_id, max_attempts=1)
    await store.claim_runs(["echo"], 10, "w1", TTL)
    await age_lease(store, run_id, -1)
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
