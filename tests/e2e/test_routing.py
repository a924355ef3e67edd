"""Routing: a supervisor claims only runs of the types it offers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from supervisor.core.store import Store

from ..factory import worker_rows
from ..helpers import wait_for
from .procs import Cluster
from .scenario import all_attempts, all_in, create_runs, read_lines, runs


async def test_a_type_offered_by_one_supervisor_runs_only_there(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    # All three run the same handler; only s1 registers it under the type "special".
    sups = [
        cluster.start("s1", {"append": "append", "special": "append"}),
        cluster.start("s2", ["append"]),
        cluster.start("s3", ["append"]),
    ]
    for s in sups:
        await s.wait_event("supervisor_started", timeout=20)
    workers = await worker_rows(store)
    assert [(w["id"], w["types"]) for w in workers] == [
        ("s1", ["append", "special"]),
        ("s2", ["append"]),
        ("s3", ["append"]),
    ]
    out = tmp_path / "out.csv"
    async with store.transaction() as tx:  # all visible at once: nobody gets a head start
        special = await create_runs(tx, "special", 30, {"out": str(out)})
        common = await create_runs(tx, "append", 30, {"out": str(out)})
        [unserved] = await create_runs(tx, "nobody", 1, {"out": str(out)})

    await wait_for(lambda: all_in(store, special + common, "succeeded"), 30, "60 runs to succeed")

    by_worker = {a["run_id"]: a["worker_id"] for a in await all_attempts(store, special + common)}
    assert {by_worker[r] for r in special} == {"s1"}
    # The others were able and willing: they took the common type's runs.
    assert {"s2", "s3"} <= set(Counter(by_worker[r] for r in common))
    # The executions agree: each run ran once, and every special one in a child of s1.
    lines = read_lines(out)
    assert Counter(line["run_id"] for line in lines) == Counter(special + common)
    s1_children = {e["pid"] for e in sups[0].events("run_started")}
    assert {line["pid"] for line in lines if line["run_id"] in special} <= s1_children
    # A type no supervisor offers is never claimed; it waits for a host that offers it.
    row = (await runs(store, [unserved]))[unserved]
    assert (row["status"], row["attempts"]) == ("scheduled", 0)
    for s in sups:
        assert s.stop() == 0, s.tail()
