"""A chaos soak: three supervisors under cron (`*/2 * * * * *`) and one-off load while a
seeded chaos loop SIGKILLs (and replaces) or SIGSTOPs (past the lease, then SIGCONTs) one
of them at a time.

An independent monitor (procs.PidMonitor) reads the handlers' own stamps and polls their
pids; afterwards: every planned cron instant in the window has exactly one run and one
recorded success, no two executions of a run overlap, no handler outlives the soak (nor a
SIGKILLed supervisor by more than a few seconds), nothing is left `running`.

CI runs ~25 s of chaos. Before a release: PUNCHCLOCK_SOAK_SECONDS=300. A failure names its
seed; PUNCHCLOCK_SOAK_SEED=<seed> replays the same chaos and load choices (timing differs).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from supervisor.core import jobs
from supervisor.core.domain import JobSpec
from supervisor.core.store import Store

from ..factory import count, raw, run_ids, runs
from ..helpers import job, wait_for
from .procs import LEASE_TTL, Cluster, PidMonitor, Supervisor
from .scenario import LIMITS, all_attempts, create_runs, execution_problems

SOAK_SECONDS = float(os.environ.get("PUNCHCLOCK_SOAK_SECONDS") or 25)
SEED = int(os.environ.get("PUNCHCLOCK_SOAK_SEED") or random.randrange(2**32))
FREEZE = LEASE_TTL * 1.5 + 0.5  # a SIGSTOP lasts well past the lease
KILL_SWEEP = 5.0  # seconds within which a SIGKILLed supervisor's children must be gone
CRON = "*/2 * * * * *"
# Retries are part of the soak (a lost lease costs an attempt): never let a run go dead.
RUN_FIELDS: dict[str, Any] = {
    "max_attempts": 100,
    "retry_base_seconds": 0.2,
    "retry_cap_seconds": 0.5,
}

pytestmark = pytest.mark.slow


@pytest.mark.timeout(SOAK_SECONDS + 120)
async def test_soak_sigkill_sigstop_exactly_once_no_overlap_no_orphans(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    print(f"soak: {SOAK_SECONDS:g} s of chaos, seed {SEED} (PUNCHCLOCK_SOAK_SEED={SEED})")
    chaos: list[str] = []
    try:
        await _soak(cluster, store, tmp_path, chaos)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n\nsoak seed {SEED} (replay: PUNCHCLOCK_SOAK_SEED={SEED}); chaos:\n"
            + "\n".join(chaos)
        ) from exc


async def _soak(cluster: Cluster, store: Store, tmp_path: Path, chaos: list[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monitor = PidMonitor(work / "stamps.csv")
    chaos_rng, load_rng = random.Random(SEED), random.Random(SEED + 1)
    start = _starter(cluster)
    sups = [start(f"s{i}") for i in (1, 2, 3)]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=30)
    monitor.start()
    try:
        cron_ids = [
            (await jobs.create_job(store, _cron_job(name, work, sleep), LIMITS)).id
            for name, sleep in (("tick-short", 0.2), ("tick-long", 1.5))
        ]
        window_from = await store.now()
        feeder = asyncio.create_task(_feed(store, work, load_rng))
        try:
            kills = await _chaos(cluster, sups, monitor, chaos_rng, chaos, start)
        finally:
            feeder.cancel()
            one_offs = await asyncio.gather(feeder, return_exceptions=True)
        window_to = await store.now()
        [once_ids] = one_offs
        assert isinstance(once_ids, list), once_ids
        await _settle(store, monitor, cron_ids, once_ids, window_to)
    finally:
        await monitor.stop()

    problems = []
    # Exactly once: one run per planned instant, each with one recorded success.
    expected = _instants(window_from, window_to)
    rows = await raw(store).fetch(
        "SELECT r.id, r.job_id, r.scheduled_at, r.status::text AS status FROM runs r"
        " WHERE r.job_id = ANY($1::bigint[]) AND r.scheduled_at BETWEEN $2 AND $3",
        cron_ids,
        window_from,
        window_to,
    )
    for job_id in cron_ids:
        got = Counter(r["scheduled_at"] for r in rows if r["job_id"] == job_id)
        problems += [f"job {job_id}: no run for {t}" for t in expected if t not in got]
        problems += [f"job {job_id}: {n} runs for {t}" for t, n in got.items() if n != 1]
    ids = [r["id"] for r in rows] + once_ids
    history = await all_attempts(store, ids)
    successes = Counter(a["run_id"] for a in history if a["outcome"] == "succeeded")
    problems += [f"run {i}: {successes[i]} recorded successes" for i in ids if successes[i] != 1]
    statuses = {r["id"]: r["status"] for r in rows}
    problems += [f"run {i}: {st}" for i, st in statuses.items() if st != "succeeded"]
    # The monitor's view against the database's, over every run that executed.
    all_runs = await run_ids(store)
    every = await all_attempts(store, all_runs)
    executions = list(monitor.executions.values())
    problems += execution_problems(executions, every, monitor.alive_until)
    # A SIGKILLed supervisor's children die with it (its keeper), not at lease expiry.
    for pid, killed_ns in kills:
        for e in executions:
            gone = monitor.gone_at.get(e.key, 0)
            if (
                e.ppid == pid
                and (e.end_ns or 0) < killed_ns
                and gone - killed_ns > KILL_SWEEP * 1e9
            ):
                problems.append(f"pid {e.pid} (run {e.run_id}) outlived its SIGKILLed supervisor")
    live = [s for s in cluster.supervisors if s.running]
    assert len(live) == 3, f"three supervisors survive the soak: {cluster.supervisors}"

    lost = Counter(a["outcome"] for a in every)
    print(f"soak: {len(executions)} executions, attempts {dict(lost)}, {len(chaos)} faults")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"
    # Not vacuous: the chaos happened, it hit running children, and the window had instants.
    assert kills and any("SIGSTOP" in c for c in chaos), "both faults were injected"
    assert lost["lease_lost"] > 0, "some fault cost a lease"
    assert len(expected) >= SOAK_SECONDS / 2 - 2, expected
    for s in live:
        assert s.stop() == 0, s.tail()


def _starter(cluster: Cluster) -> Callable[[str], Supervisor]:
    def start(worker_id: str) -> Supervisor:
        return cluster.start(
            worker_id,
            ["stamp"],
            concurrency=4,
            # The soak asserts exactly once, not the catch-up policy: nothing is ever missed.
            extra_args=["--misfire-grace", "600"],
        )

    return start


def _cron_job(name: str, work: Path, sleep: float) -> JobSpec:
    payload = {"dir": str(work), "sleep": sleep}
    return job(name, "stamp", cron=CRON, payload=payload, **RUN_FIELDS)


async def _feed(store: Store, work: Path, rng: random.Random) -> list[int]:
    """One-off runs (due now, 0.5-4 s of work) every 0.3-1 s until cancelled; their ids."""
    ids: list[int] = []
    try:
        for i in range(1_000_000):
            payload = {"dir": str(work), "sleep": round(rng.uniform(0.5, 4.0), 2)}
            ids += await create_runs(store, "stamp", 1, payload, prefix=f"once-{i}", **RUN_FIELDS)
            await asyncio.sleep(rng.uniform(0.3, 1.0))  # the load's cadence
    except asyncio.CancelledError:
        pass
    return ids


async def _chaos(
    cluster: Cluster,
    sups: list[Supervisor],
    monitor: PidMonitor,
    rng: random.Random,
    chaos: list[str],
    start: Callable[[str], Supervisor],
) -> list[tuple[int, int]]:
    """Faults one at a time for SOAK_SECONDS; returns (pid, time_ns) of each SIGKILL."""
    kills: list[tuple[int, int]] = []
    generation = Counter[str]()
    first = ["kill", "stop"]  # both faults surely happen, then the dice decide
    rng.shuffle(first)
    t0 = time.monotonic()
    while time.monotonic() - t0 < SOAK_SECONDS:
        await asyncio.sleep(rng.uniform(0.5, 1.5))  # the chaos cadence, not synchronisation
        # Prefer a supervisor with children running: that is where the promises are tested.
        busy = {e.ppid for e in monitor.alive()}
        victim = rng.choice([s for s in sups if s.pid in busy] or sups)
        at = f"{time.monotonic() - t0:6.2f}s"
        children = [e.run_id for e in monitor.alive() if e.ppid == victim.pid]
        if (first.pop() if first else rng.choice(["kill", "stop"])) == "kill":
            victim.send(signal.SIGKILL)
            kills.append((victim.pid, time.time_ns()))
            assert victim.wait(10) == -signal.SIGKILL
            base = victim.worker_id.split(".")[0]
            generation[base] += 1
            # A new worker id, as a restarted host gets by default (host:pid).
            replacement = start(f"{base}.{generation[base]}")
            sups[sups.index(victim)] = replacement
            chaos.append(f"{at} SIGKILL {victim.worker_id} (runs {children}), start {replacement}")
            await replacement.wait_event("supervisor_started", timeout=30)
        else:
            victim.send(signal.SIGSTOP)
            chaos.append(f"{at} SIGSTOP {victim.worker_id} for {FREEZE:g}s (runs {children})")
            await asyncio.sleep(FREEZE)  # the length of the freeze (the fault itself)
            victim.send(signal.SIGCONT)
            assert victim.running, victim.tail()
    return kills


async def _settle(
    store: Store,
    monitor: PidMonitor,
    cron_ids: list[int],
    once_ids: list[int],
    window_to: datetime,
) -> None:
    """Every run of the window succeeds, then the cron jobs pause and the rest finish.

    Pausing comes second: a paused job's runs are not claimed, so a window run still
    waiting for its retry when the pause lands would never finish (CI, seed 2787628743).
    """
    window = (
        "status <> 'succeeded' AND (id = ANY($1::bigint[])"
        " OR (job_id = ANY($2::bigint[]) AND scheduled_at <= $3))"
    )
    open_runs: list[int] = []

    async def window_done() -> bool:
        rows = await raw(store).fetch(
            f"SELECT id FROM runs WHERE {window} ORDER BY id", once_ids, cron_ids, window_to
        )
        open_runs[:] = [r["id"] for r in rows]
        return not rows

    try:
        await wait_for(window_done, 60, "every run of the window to succeed")
    except AssertionError as exc:
        detail = await runs(store, open_runs[:10])
        raise AssertionError(
            f"{exc}; open: "
            + ", ".join(
                f"{i} {r['status']} attempt {r['attempts']} owner {r['lease_owner']}"
                for i, r in detail.items()
            )
        ) from exc
    for job_id in cron_ids:  # no new instants; what is running finishes
        await jobs.set_paused(store, job_id, True, LIMITS)
    await wait_for(lambda: _none_running(store), 60, "no run left running")
    await wait_for(lambda: not monitor.alive(), 10, f"no handler left alive: {monitor.alive()}")


async def _none_running(store: Store) -> bool:
    return await count(store, "runs", "status = 'running'") == 0


def _instants(since: datetime, until: datetime) -> list[datetime]:
    """The even seconds (UTC) in [since, until]: CRON's instants."""
    first = math.ceil(since.timestamp() / 2) * 2
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    out = []
    t = first
    while t <= until.timestamp():
        out.append(epoch + timedelta(seconds=t))
        t += 2
    return out
