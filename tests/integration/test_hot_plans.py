"""The hot path's generic plans (supervisor sessions force them) stay key lookups whatever
else the tables hold: the claim reads only its own types (runs_claimable_by_type), and a
completion or renewal finds its runs by primary key, not by scanning every running run of
every host (statistics from a quiet moment once made that plan look cheapest)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from supervisor.core.db import Conn, create_pool
from supervisor.core.sql import QUERIES
from supervisor.core.store import Store

from ..factory import manual_runs, sql, sql_rows


async def _explain(dsn: str, steps: list[tuple[str, tuple[Any, ...]]]) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE each (query, args) in one transaction (rolled back), on a pool set
    up as a supervisor's; every plan node of every statement."""
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    nodes: list[dict[str, Any]] = []
    try:
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                for name, args in steps:
                    text = QUERIES[name].rstrip().rstrip(";")
                    plan = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + text, *args)
                    nodes += _nodes(json.loads(plan)[0]["Plan"])
            finally:
                await tx.rollback()
    finally:
        await pool.close()
    return nodes


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node.get("Plans", []):
        out += _nodes(child)
    return out


def _rows(nodes: list[dict[str, Any]], index: str) -> int:
    return sum(n["Actual Rows"] * n["Actual Loops"] for n in nodes if n.get("Index Name") == index)


async def _my_completion(store: Store, job_id: int) -> tuple[list[int], tuple[Any, ...]]:
    """The ids of a job's runs (running, lease token 1, owner "me") and complete_runs'
    arguments that end them all as succeeded."""
    rows = await sql_rows(store, "SELECT id FROM runs WHERE job_id = $1 ORDER BY id", job_id)
    ids = [r["id"] for r in rows]
    return ids, _completion_args(ids)


def _completion_args(ids: list[int]) -> tuple[Any, ...]:
    """complete_runs' arguments that end the runs `ids` (owner "me", token 1) as succeeded."""
    n = len(ids)
    return (
        ids, [1] * n, ["succeeded"] * n, [0.0] * n, ["succeeded"] * n, [None] * n, [0] * n,
        [None] * n, [""] * n, [""] * n, [0.0] * n, [0] * n, [False] * n, [False] * n,
        [None] * n, "me",
    )  # fmt: skip


async def _run_as(store: Store, job_id: int, owner: str, expires_in: str) -> None:
    """Every run of the job running under `owner`'s lease (token 1), with its attempt."""
    await sql(
        store,
        "WITH r AS (UPDATE runs SET status = 'running', attempts = 1, lease_token = 1,"
        " lease_owner = $2, lease_expires_at = now() + $3::text::interval WHERE job_id = $1"
        " RETURNING id) INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token,"
        " started_at) SELECT id, 1, $2, 1, now() FROM r",
        job_id,
        owner,
        expires_in,
    )


async def test_the_claim_reads_only_its_own_types(dsn: str, store: Store) -> None:
    await manual_runs(store, "a", [5.0])
    await manual_runs(store, "c", [float(s) for s in range(100, 1100)])  # older, not offered
    await sql(store, "ANALYZE jobs, runs")
    nodes = await _explain(dsn, [("claim_runs", _CLAIM)])
    # One due run of type a: the scan reads it and nothing of c's 1,000.
    assert _rows(nodes, "runs_claimable_by_type") == 1


async def test_completions_and_renewals_find_their_runs_by_key(dsn: str, store: Store) -> None:
    mine = await manual_runs(store, "a", [1.0, 2.0, 3.0])
    await sql(store, "ANALYZE jobs, runs")  # statistics of a quiet moment: nothing running
    # Then 2,000 runs start on other hosts.
    others = await manual_runs(store, "b", [float(s) for s in range(10, 2010)])
    await sql(
        store,
        "UPDATE runs SET status = 'running', attempts = 1, lease_token = 1,"
        " lease_owner = 'w' || (id % 7), lease_expires_at = now() + interval '1 hour'"
        " WHERE job_id = $1",
        others,
    )
    await sql(
        store,
        "UPDATE runs SET status = 'running', attempts = 1, lease_token = 1, lease_owner = 'me',"
        " lease_expires_at = now() + interval '1 hour' WHERE job_id = $1",
        mine,
    )
    ids, completion = await _my_completion(store, mine)
    nodes = await _explain(
        dsn,
        [
            ("renew_leases", (ids, [1] * len(ids), 30.0, "me")),
            ("complete_runs", completion),
        ],
    )
    running_scans = [
        n
        for n in nodes
        if n.get("Relation Name") == "runs"
        and n.get("Index Name") in ("runs_running_lease", "runs_status_history")
    ]
    assert running_scans == [], "a scan of every running run"
    assert _rows(nodes, "runs_pkey") >= 2 * len(ids)  # the renewal's and the completion's own


async def test_a_completion_reads_no_table_whole_when_statistics_say_it_is_empty(
    dsn: str, store: Store
) -> None:
    mine = await manual_runs(store, "a", [1.0, 2.0, 3.0])
    # Statistics of a fresh deployment: no attempt yet (a drain's first minute, before
    # autovacuum's ANALYZE). Then 2,000 runs of other hosts start and end.
    await sql(store, "ANALYZE jobs, runs, run_attempts")
    others = await manual_runs(store, "b", [float(s) for s in range(10, 2010)])
    await sql(
        store,
        "WITH r AS (UPDATE runs SET status = 'succeeded', attempts = 1,"
        " finished_at = now() WHERE job_id = $1 RETURNING id)"
        " INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, started_at,"
        " finished_at, outcome) SELECT id, 1, 'w', 1, now(), now(), 'succeeded' FROM r",
        others,
    )
    await _run_as(store, mine, "me", "1 hour")
    _, completion = await _my_completion(store, mine)
    nodes = await _explain(dsn, [("complete_runs", completion)])
    whole = [
        (n["Relation Name"], n["Actual Rows"] * n["Actual Loops"])
        for n in nodes
        if n["Node Type"] == "Seq Scan" and n["Relation Name"] in ("runs", "run_attempts", "jobs")
    ]
    assert whole == [], "a table read whole for a completion of 3 runs"


@pytest.mark.parametrize("missed", [False, True], ids=["plain", "with-missed"])
async def test_a_planned_batch_checks_each_job_once_not_each_run(
    dsn: str, store: Store, missed: bool
) -> None:
    """Runs have no foreign key to jobs (migration 0013): the planning insert checks that
    its jobs exist, one jobs_pkey probe per job, with missed runs or without (the copy's
    fallback). Inlined, the generic plan probed once per run."""
    await sql(store, "INSERT INTO jobs (name, type, cron) VALUES ('a', 't', '* * * * *'), "
                     "('b', 't', '* * * * *')")  # fmt: skip
    ids = [r["id"] for r in await sql_rows(store, "SELECT id FROM jobs ORDER BY id")]
    start = await store.now() + timedelta(days=3)
    times = [start + timedelta(minutes=m) for m in range(50)]
    positions = list(range(1, 51))
    args = (
        ids, ["t", "t"], [False, False], [3, 3], [ids[0]] * 50 + [ids[1]] * 50,
        positions + positions, times, [True] + [False] * 99 if missed else None,
    )  # fmt: skip
    nodes = await _explain(dsn, [("insert_planned_runs_idempotent", args)])
    probes = [n for n in nodes if n.get("Relation Name") == "jobs" and n.get("Index Name")]
    [insert] = [n for n in nodes if n.get("Operation") == "Insert" and n["Relation Name"] == "runs"]
    [source] = [n for n in insert["Plans"] if n["Parent Relationship"] == "Outer"]
    assert source["Actual Rows"] == 100  # every run reached the insert
    # One probe per job; a missed run's event reads its job's name (one more probe).
    expected = 2 + (1 if missed else 0)
    assert sum(n["Actual Loops"] for n in probes if n["Index Name"] == "jobs_pkey") == expected


def _literal(value: Any) -> str:
    """`value` as an SQL literal for EXECUTE (which takes no bind parameters)."""
    if value is None:
        return "NULL"
    if isinstance(value, list):
        items = ",".join("NULL" if v is None else _element(v) for v in value)
        return _literal("{" + items + "}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def _element(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _literal(value)


async def _prepare_planned(conn: Conn, label: str, name: str, args: tuple[Any, ...]) -> None:
    """PREPARE query `name` as `label` and run it once with `args` (rolled back): on a
    supervisor's session its generic plan is made now, from this moment's statistics, and
    kept until they change."""
    text = QUERIES[name].rstrip().rstrip(";")
    types = ", ".join(p.name for p in (await conn.prepare(text)).get_parameters())
    await conn.execute(f"PREPARE {label}({types}) AS {text}")
    await _execute_rolled_back(conn, f"EXECUTE {label}({', '.join(map(_literal, args))})")


async def _explain_prepared(conn: Conn, label: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Every plan node of the prepared `label`'s kept plan, run with `args` (rolled back)."""
    literals = ", ".join(map(_literal, args))
    plan = await _execute_rolled_back(
        conn, f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {label}({literals})"
    )
    return _nodes(json.loads(plan)[0]["Plan"])


async def _execute_rolled_back(conn: Conn, statement: str) -> Any:
    tx = conn.transaction()
    await tx.start()
    try:
        return await conn.fetchval(statement)
    finally:
        await tx.rollback()


_CLAIM = (["a"], 8, "w1", 30.0, None, 0.0, 60.0, [None], [None])


@pytest.mark.parametrize("name", ["claim_runs", "complete_runs", "reap_expired"])
async def test_statements_that_end_attempts_read_only_their_own(
    dsn: str, store: Store, name: str
) -> None:
    """The claim (its recovery of runs a lost reply left leased), a completion and the
    reaper end attempts joined by key: each reads its own runs' attempts, however many
    others exist. Joined by a plain join, the generic plan a supervisor's session made
    while run_attempts was empty (a new deployment) read every attempt on each later call:
    4.3 ms per claim after 16,000 attempts, and growing."""
    # Statistics that say run_attempts is empty beside a runs table that is not: a VACUUM
    # after installing, or after retention removed every finished run.
    await manual_runs(store, "c", [-3600.0 - s for s in range(5000)])  # due in an hour or more
    await sql(store, "ANALYZE jobs, runs, run_attempts")
    nothing = {"claim_runs": _CLAIM, "complete_runs": ([],) * 15 + ("me",), "reap_expired": (100,)}
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        async with pool.acquire() as conn:
            await _prepare_planned(conn, "s", name, nothing[name])
            # Then 2,000 runs start and end (on this host: a completion's check for results
            # recorded already reads its own host's), and this statement gets runs of its own.
            others = await manual_runs(store, "b", [float(s) for s in range(10, 2010)])
            await _run_as(store, others, "me", "1 hour")
            await sql(store, "UPDATE runs SET status = 'succeeded', finished_at = now(),"
                             " lease_owner = NULL, lease_expires_at = NULL WHERE job_id = $1",
                      others)  # fmt: skip
            mine = await manual_runs(store, "a", [5.0, 6.0])
            args = _CLAIM
            if name == "complete_runs":
                await _run_as(store, mine, "me", "1 hour")
                _, args = await _my_completion(store, mine)
            elif name == "reap_expired":
                await _run_as(store, mine, "gone", "-1 minute")
                args = (100,)
            nodes = await _explain_prepared(conn, "s", args)
    finally:
        await pool.close()
    updates = [n for n in nodes if n.get("Operation") == "Update" and n["Relation Name"] == "runs"]
    assert sum(n["Actual Rows"] for n in updates) == 2  # the statement did its work
    # The claim reads no attempt; a completion or a reap its two (and a completion's check
    # for ones recorded already, two more).
    read = sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in nodes
        if n.get("Index Name") == "run_attempts_pkey"
    )
    assert read <= {"claim_runs": 0}.get(name, 4), "every attempt read"


async def test_the_claims_overlap_probe_reads_running_runs_once(dsn: str, store: Store) -> None:
    """The claim's probe for overlap's waiting runs (overlap_due) reads the running runs once,
    whatever plan the statistics pick, not once for every due run of an exclusive job: one
    plan of the per-run form read every running run through the status index for each."""
    await manual_runs(store, "c", [-3600.0 - s for s in range(5000)])  # due in an hour or more
    await sql(store, "ANALYZE jobs, runs")
    others = await manual_runs(store, "b", [float(s) for s in range(10, 2010)])
    await sql(
        store,
        "UPDATE runs SET status = 'running', attempts = 1, lease_token = 1, lease_owner = 'w',"
        " lease_expires_at = now() + interval '1 hour' WHERE job_id = $1",
        others,
    )
    for i in range(20):  # exclusive jobs with a due run each, none of them running
        job_id = await manual_runs(store, f"x{i}", [5.0])
        await sql(store, "UPDATE runs SET exclusive = true, type = 'a' WHERE job_id = $1", job_id)
    nodes = await _explain(dsn, [("claim_runs", _CLAIM)])
    running = ("runs_one_running_exclusive", "runs_status_history", "runs_running_lease")
    scans = [n["Actual Loops"] for n in nodes if n.get("Index Name") in running]
    # The candidates' check of their own jobs (hashed: once) and the probe (once).
    assert sum(scans) <= 2, f"running runs read {sum(scans)} times for one claim"


# ---------------------------------------------------------------- every hot statement, every shape
# What the planner may have believed when a supervisor's session made its generic plans:
# each shape is built and ANALYZEd, then the statements are prepared. A cached plan lives
# until its tables' statistics change, and a big table is analyzed again only after 10 % of
# it changed, so these shapes last. Statistics of empty tables (a new deployment) do not:
# autovacuum analyzes a table after its first 50 changes, which replans every statement.
_SHAPES = {
    "planned": [("p", [-3600.0 - s for s in range(2000)])],  # after the first planning
    "history": [("f", [3600.0 + s for s in range(2000)])],  # finished runs, nothing due
    "busy": [("s", [float(s) for s in range(10, 1010)]), ("q", [1.0 + s for s in range(1000)])],
}
_HOT = [
    "claim_runs",
    "claim_and_complete_runs",
    "next_due_in",
    "skip_missed_runs",
    "renew_leases",
    "write_live_tails",
    "complete_runs",
    "complete_runs_with_events",
    "release_runs",
    "reap_expired",
]
_READ_ONLY = ("next_due_in", "skip_missed_runs")  # nothing to skip in the world below
_READ_AT_MOST = 100  # rows, index entries included, for a statement about three runs
# One periodic pass whose plan, made while nothing ran, reads more; it is bounded by the
# live queue, never by the history (DESIGN.md, Database sessions):
_ALSO_READS = {
    "reap_expired": 1000,  # every running run (the status index), each reaper pass
}


def _hot_args(name: str, ids: list[int]) -> tuple[Any, ...]:
    """Arguments of each hot statement for the runs `ids` (running under "me", token 1)."""
    n = len(ids)
    ones = [1] * n
    completion = _completion_args(ids)
    return {
        "claim_runs": _CLAIM,
        "claim_and_complete_runs": (*_CLAIM, *completion),
        "next_due_in": (["a"], 0.0, 0.0),
        "skip_missed_runs": (60.0, 10, None, None, 10),
        "renew_leases": (ids, ones, 30.0, "me"),
        "write_live_tails": (ids, ones, ones, ["out"] * n, ["err"] * n),
        "complete_runs": completion,
        "complete_runs_with_events": completion,
        "release_runs": (ids, ones, "me"),
        "reap_expired": (10,),
    }[name]


async def _finished(store: Store, job_id: int, owner: str) -> None:
    await _run_as(store, job_id, owner, "1 hour")
    await sql(store, "UPDATE runs SET status = 'succeeded', finished_at = now(), lease_owner = NULL,"
                     " lease_expires_at = NULL WHERE job_id = $1", job_id)  # fmt: skip
    await sql(store, "UPDATE run_attempts a SET finished_at = now(), outcome = 'succeeded'"
                     " FROM runs r WHERE r.id = a.run_id AND r.job_id = $1", job_id)  # fmt: skip


@pytest.mark.parametrize("shape", list(_SHAPES))
async def test_every_hot_statement_reads_only_its_own_runs_whatever_its_plan_was_made_from(
    dsn: str, store: Store, shape: str
) -> None:
    """The systematic guard behind the cases above: every statement a supervisor runs per
    claim, completion or pass has its generic plan made under one statistics shape, then
    runs in a busy database (2,000 finished runs with attempts, 1,000 running elsewhere,
    1,000 due of a type nobody here offers, 1,000 planned ahead) and may read at most
    _READ_AT_MOST rows for the three runs it is about. A plan that walks the history or the
    plan ahead reads thousands. It found the live tails' and the catch-up pass's joins."""
    for type_, ages in _SHAPES[shape]:
        job_id = await manual_runs(store, type_, ages)
        if type_ == "f":
            await _finished(store, job_id, "w7")
        if type_ == "s":
            await _run_as(store, job_id, "w6", "1 hour")
    await sql(store, "ANALYZE jobs, runs, run_attempts")
    pool = await create_pool(dsn, min_size=1, max_size=1, generic_plans=True)
    try:
        async with pool.acquire() as conn:
            for i, name in enumerate(_HOT):  # each plan is made now, from this shape
                await _prepare_planned(conn, f"s{i}", name, _hot_args(name, []))
            # The busy database, around three runs of each kind.
            await _finished(
                store, await manual_runs(store, "h", [3600.0 + s for s in range(2000)]), "w9"
            )
            await _run_as(
                store,
                await manual_runs(store, "r", [float(s) for s in range(10, 1010)]),
                "w8",
                "1 hour",
            )
            await manual_runs(store, "b", [1.0 + s for s in range(1000)])
            await manual_runs(store, "a", [5.0, 6.0, 7.0] + [-3600.0 - s for s in range(1000)])
            held = await manual_runs(store, "m", [1.0, 2.0, 3.0])
            await _run_as(store, held, "me", "1 hour")
            expired = await manual_runs(store, "x", [1.0, 2.0, 3.0])
            await _run_as(store, expired, "gone", "-1 minute")
            ids = [
                r["id"]
                for r in await sql_rows(
                    store, "SELECT id FROM runs WHERE job_id = $1 ORDER BY id", held
                )
            ]
            problems: list[str] = []
            for i, name in enumerate(_HOT):
                nodes = await _explain_prepared(conn, f"s{i}", _hot_args(name, ids))
                reads = sorted(
                    (
                        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)
                         + n.get("Rows Removed by Index Recheck", 0)) * n["Actual Loops"],
                        n["Node Type"], n.get("Index Name") or n.get("Relation Name"),
                    )
                    for n in nodes
                    if "Relation Name" in n or "Index Name" in n
                )  # fmt: skip
                total = sum(r[0] for r in reads)
                if total > _READ_AT_MOST + _ALSO_READS.get(name, 0):
                    problems.append(f"{name} read {total} rows: {reads[-3:]}")
                # ... and did its work: three runs claimed, renewed, ended or reaped.
                writes = sum(  # rows fed to each update (its own count is 0 without RETURNING)
                    n["Plans"][0]["Actual Rows"] for n in nodes if n.get("Operation") == "Update"
                )
                if writes < (0 if name in _READ_ONLY else 3):
                    problems.append(f"{name} wrote {writes} rows")
    finally:
        await pool.close()
    assert problems == [], "\n".join(problems)
