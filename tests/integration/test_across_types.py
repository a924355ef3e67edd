"""What reads claimable runs across types (the catch-up pass, late runs, the due gauges, the
overview's counts) merges one runs_claimable_by_type range per type (migration 0016). Against
a real PostgreSQL, every answer equals what a plain query over `runs` says, with runs of
several types interleaved in time and a type whose runs are all retries."""

from __future__ import annotations

from supervisor.core import channels, jobs
from supervisor.core.dashboard import Dashboard
from supervisor.core.events import ChannelSpec, NotifyRule
from supervisor.core.metrics import EXACT_BELOW
from supervisor.core.store import Store

from ..factory import LIMITS, raw, sql_rows, sql_value
from ..helpers import job
from ..notify_support import SECRET

TYPES = ["alpha", "beta", "gamma", "delta"]
LATE = "status IN ('scheduled', 'failed') AND run_after < now() - interval '30 seconds'"


async def _interleaved(store: Store, **spec: object) -> list[int]:
    """Per type a job (catch-up none) with 25 old runs, the types' runs interleaved in
    run_after order with ties across types, and 5 planned ahead; delta's old runs are
    retries (failed, attempted once). Returns the job ids."""
    ids = []
    for n, type_ in enumerate(TYPES):
        spec_ = job(f"j-{type_}", type_, cron="0 0 1 1 *", catchup="none", **spec)
        row = await jobs.create_job(store, spec_, LIMITS)  # its notify rules too
        ids.append(int(row.id))
        retry = type_ == "delta"
        await raw(store).execute(
            """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status,
                                 attempts)
               SELECT $1, now() - make_interval(secs => a), now() - make_interval(secs => a),
                      $2, 3, $3::run_status, $4
               FROM unnest($5::float8[]) a""",
            row.id,
            type_,
            "failed" if retry else "scheduled",
            1 if retry else 0,
            # Every 4th second per type, offset by the type: ties at multiples of 12 s.
            [1000.0 + 4 * k + (0 if k % 3 == 0 else n) for k in range(25)],
        )
        await raw(store).execute(
            """INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts)
               SELECT $1, now() + make_interval(secs => a), now() + make_interval(secs => a),
                      $2, 3 FROM unnest($3::float8[]) a""",
            row.id,
            type_,
            [100.0 * k + n for k in range(1, 6)],
        )
    await raw(store).execute("ANALYZE runs")
    return ids


async def test_late_runs_are_the_oldest_across_types(store: Store) -> None:
    await _interleaved(store)
    for limit in (1, 7, 60, 500):
        got = [r["id"] for r in await store.late_runs(30.0, limit)]
        want = await sql_rows(
            store,
            f"SELECT id, run_after FROM runs WHERE {LATE} ORDER BY run_after, id LIMIT $1",
            limit,
        )
        assert len(got) == min(limit, 100)
        # Oldest first; ties at one instant may come in any order.
        got_after = await sql_rows(
            store, "SELECT id, run_after FROM runs WHERE id = ANY($1::bigint[])", got
        )
        after = {r["id"]: r["run_after"] for r in got_after}
        assert [after[i] for i in got] == [r["run_after"] for r in want]


async def test_run_late_is_raised_for_the_oldest_across_types(store: Store) -> None:
    await channels.create_channel(
        store, ChannelSpec(name="ops", url="http://127.0.0.1:9/hook", secret=SECRET)
    )
    await _interleaved(store, notify=(NotifyRule("ops", ("run_late",)),))
    n = channels.notifications(store)
    assert await n.raise_late_runs(30.0, 9) == 9
    raised = await sql_rows(
        store, "SELECT r.run_after FROM outbox o JOIN runs r ON r.id = o.run_id ORDER BY 1"
    )
    want = await sql_rows(store, f"SELECT run_after FROM runs WHERE {LATE} ORDER BY 1 LIMIT 9")
    assert [r["run_after"] for r in raised] == [r["run_after"] for r in want]
    assert await n.raise_late_runs(30.0, 1000) == 91  # the rest, each run once
    assert await n.raise_late_runs(30.0, 1000) == 0


async def test_catch_up_pages_reach_every_missed_run_of_every_type_once(store: Store) -> None:
    await _interleaved(store)
    missed = {
        r["id"]
        for r in await sql_rows(
            store, f"SELECT id FROM runs WHERE {LATE} AND status = 'scheduled' AND attempts = 0"
        )
    }
    assert len(missed) == 75
    skipped: list[int] = []
    positions = []
    resume = None
    for _ in range(60):
        async with store.transaction() as tx:
            page = await tx.skip_missed_runs(60.0, 7, resume)
        skipped += [s.id for s in page.skipped]
        assert len(page.skipped) <= 7
        resume = page.resume_after
        if resume is None:
            break
        positions.append(resume)
    assert resume is None, "the pages never reached the end"
    assert sorted(skipped) == sorted(missed)  # each once, retries of delta never
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    left = await sql_value(store, f"SELECT count(*) FROM runs WHERE {LATE}")
    assert left == 25  # delta's retries wait to be claimed


async def test_due_gauges_and_overview_counts_add_up_across_types(store: Store) -> None:
    ids = await _interleaved(store)
    await raw(store).execute("UPDATE jobs SET paused = true WHERE id = $1", ids[1])
    gauges = await store.database_gauges(EXACT_BELOW)
    assert gauges["due_waiting"] == 75  # the paused job's 25 are not waiting
    oldest = await sql_value(
        store,
        """SELECT EXTRACT(EPOCH FROM now() - min(run_after))::float8 FROM runs
           WHERE status IN ('scheduled', 'failed') AND run_after <= now() AND job_id <> $1""",
        ids[1],
    )
    assert abs(gauges["oldest_due_age"] - oldest) < 5.0
    counts = await Dashboard.over(store).ui_open_counts()
    planned = await sql_value(
        store, "SELECT count(*) FROM runs WHERE status = 'scheduled' AND run_after > now()"
    )
    assert planned >= 20  # 5 per type, and what creating the jobs planned
    assert (counts.due, counts.planned) == (100, planned)


async def test_nothing_claimable_reads_as_zero(store: Store) -> None:
    assert await store.late_runs(0.0, 10) == []
    gauges = await store.database_gauges(EXACT_BELOW)
    assert (gauges["due_waiting"], gauges["oldest_due_age"]) == (0, 0.0)
    counts = await Dashboard.over(store).ui_open_counts()
    assert (counts.due, counts.planned) == (0, 0)
    async with store.transaction() as tx:
        page = await tx.skip_missed_runs(60.0, 7)
    assert page.skipped == [] and page.resume_after is None
