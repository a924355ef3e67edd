"""Five supervisor processes hammer one concurrency group of limit 2: at no moment do more
than 2 of its handlers run, by the database's count sampled every few milliseconds and by
the handlers' own start/end stamps (an observer that does not trust the claim); a freed
slot is taken at once (the poll interval is 30 s, so a drain relying on it would take
minutes); jobs in no group run beside the group's backlog; a raised limit applies at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from supervisor.core.domain import JobLimits
from supervisor.core.groups import groups
from supervisor.core.store import Store

from ..factory import count
from ..helpers import wait_for
from .procs import Cluster
from .scenario import all_in, create_runs, read_lines

WORKERS = [f"s{i}" for i in range(1, 6)]


def most_at_once(lines: list[dict[str, int]]) -> int:
    """The largest number of [start_ns, end_ns] intervals that overlap."""
    edges = sorted([(x["start_ns"], 1) for x in lines] + [(x["end_ns"], -1) for x in lines])
    now = peak = 0
    for _, step in edges:  # at a tie an end (-1) comes before a start (+1)
        now += step
        peak = max(peak, now)
    return peak


async def test_a_group_limit_holds_across_five_supervisors(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    await groups(store).insert_group("pair", 2)
    sups = [cluster.start(w, ["append"], concurrency=4, poll_interval=30.0) for w in WORKERS]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=20)
    grouped, free = tmp_path / "grouped.csv", tmp_path / "free.csv"
    sampled: list[int] = []
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            sampled.append(await count(store, "runs", "status = 'running' AND run_group = 'pair'"))
            await asyncio.sleep(0.005)  # the sampling period, not a synchronisation

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    ids = await create_runs(
        store, "append", 30, {"out": str(grouped), "sleep": 0.3}, prefix="g",
        limits=JobLimits(group="pair"),
    )  # fmt: skip
    others = await create_runs(store, "append", 20, {"out": str(free)}, prefix="free")
    await wait_for(lambda: all_in(store, others, "succeeded"), 30, "the jobs in no group")
    assert len(read_lines(grouped)) < 30  # they ran beside the group's backlog
    await wait_for(lambda: all_in(store, ids, "succeeded"), 60, "30 runs of the group")
    took = time.monotonic() - started
    stop.set()
    await sampler
    lines = read_lines(grouped)
    assert sorted(x["run_id"] for x in lines) == sorted(ids)  # each ran, once
    assert most_at_once(lines) == 2  # the handlers' own stamps: never 3, and 2 were used
    assert max(sampled) <= 2 and len(sampled) > 100, (max(sampled), len(sampled))
    assert took < 25, f"{took:.1f} s for 30 x 0.3 s two at a time: freed slots waited"
    # A raised limit applies to the next claim: 4 at once now.
    await groups(store).update_group("pair", 4)
    more = await create_runs(
        store, "append", 12, {"out": str(tmp_path / "more.csv"), "sleep": 0.5}, prefix="m",
        limits=JobLimits(group="pair"),
    )  # fmt: skip
    await wait_for(lambda: all_in(store, more, "succeeded"), 60, "12 more runs")
    assert most_at_once(read_lines(tmp_path / "more.csv")) == 4
    for s in sups:
        for bad in ("run_lease_lost", "run_late_result_rejected"):
            assert s.events(bad) == [], f"{s.worker_id}: {bad}\n{s.tail()}"
        assert s.stop() == 0, s.tail()
