"""Throughput: 1, 2 and 4 supervisors (concurrency 8 each) drain N due runs of /bin/true.

Reported as runs/s from the first claim to the last recorded success (database clock),
against the no-database ceiling measured right before each drain at the same total
concurrency: asyncio spawning and reaping /bin/true (create_subprocess_exec with the
PidfdChildWatcher, as the target defines it), and our own runner alone for reference.
Every drain is checked for exactly-once: one attempt row per run, every run and attempt
succeeded, the counts match.

Both sides also report CPU milliseconds per run by process (supervisors, their children,
their keepers, PostgreSQL when its processes are visible here): on a small machine the
ratio is decided by how much CPU each run costs beyond the spawn itself.

With 2 supervisors the drain is repeated with a cgroup per run (`cgroups = all`: create,
join trampoline, accounting, rmdir per run), paired with the plain drain, when the host
can give runs a cgroup.

Notifications: 2 supervisors drain the same N with a channel subscribed to run_dead of every
job and without one, pairs interleaved in the same run (the issue's "within noise").
"""

from __future__ import annotations

import asyncio
import json
import resource
from typing import Any

import asyncpg
import psutil

from bench.common import PYTHON, ROOT, Context, ScenarioResult, start_supervisors
from supervisor.local.plumbing import wait_until
from supervisor.proc import cgroups

NAME = "throughput"
TYPE = "noop"
DRAIN_TYPE = "drain"  # drain_in's runs, apart from a generated history's (bench/api.py)
COMMAND = ["/bin/true"]
PER_SUPERVISOR = 8
TARGET_RATIO = 0.8  # with 2 supervisors
# The target's ceiling is asyncio's own spawning with its fastest watcher ("pidfd"); "child"
# is our runner alone (posix_spawn + pidfd, no database), shown for what the rest costs.
CEILINGS = ("pidfd", "child")


async def ceiling(
    n: int, concurrency: int, mode: str = "pidfd", command: list[str] = COMMAND
) -> dict[str, Any]:
    """runs/s of bench.ceiling in its own process, and its CPU (children included) per run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "bench.ceiling", "--n", str(n), "--concurrency", str(concurrency),
        "--mode", mode, "--", *command,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.ceiling exited {proc.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result["cpu_ms_per_run"] = 1000 * cpu / n
    return result


def _cpu(p: psutil.Process) -> tuple[float, float]:
    """(own, reaped children) CPU seconds of a process."""
    t = p.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def cpu_snapshot(pids: list[int]) -> dict[str, float]:
    """CPU seconds so far: supervisors, their reaped children, keepers, postgres, the box."""
    snap = {"supervisors": 0.0, "children": 0.0, "keepers": 0.0, "postgres": 0.0}
    for pid in pids:
        with_children = psutil.Process(pid)
        own, reaped = _cpu(with_children)
        snap["supervisors"] += own
        snap["children"] += reaped
        for child in with_children.children():
            try:
                if "supervisor.proc.keeper" in " ".join(child.cmdline()):
                    snap["keepers"] += sum(_cpu(child))
            except psutil.Error:
                continue
    postgres = ("postgres", "postmaster")
    names = {p.pid: p.info["name"] for p in psutil.process_iter(["name"])}
    for proc in psutil.process_iter(["name", "ppid"]):
        if proc.info["name"] in postgres:
            try:
                own, reaped = _cpu(proc)
            except psutil.Error:
                continue
            # A postmaster's reaped backends too: a backend that exits between two snapshots
            # (another session's, on a shared server) moves its CPU there instead of
            # taking it out of the sum.
            postmaster = names.get(proc.info["ppid"]) not in postgres
            snap["postgres"] += own + (reaped if postmaster else 0.0)
    box = psutil.cpu_times()
    snap["box_busy"] = box.user + box.system + box.nice + box.irq + box.softirq
    return snap


async def insert_due_runs(conn: asyncpg.Connection, n: int, type_: str, jobs: int = 50) -> None:
    """`n` manual runs due now over `jobs` one-off jobs, committed and announced at once.

    The jobs keep every run (catch-up `all`, a day's window) so a slow drain is measured,
    never skipped; their one planned instant is marked done so the planner leaves them be.
    """
    async with conn.transaction():
        await conn.execute(
            """INSERT INTO jobs (name, type, run_at, catchup, catchup_window_seconds,
                                 planned_until, plan_after)
               SELECT 'bench-' || g, $1::text, now() + interval '1 year', 'all', 86400,
                      now() + interval '1 year', 'infinity'
               FROM generate_series(1, $2::int) g""",
            type_,
            jobs,
        )
        await conn.execute(
            """INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts)
               SELECT j.id, now() - make_interval(secs => g / 1000.0), now(), 'manual',
                      $1::text, 3
               FROM generate_series(1, $2::int) g
               JOIN jobs j ON j.name = 'bench-' || (1 + g % $3::int)""",
            type_,
            n,
            jobs,
        )
        # Statistics as an established database has them (autovacuum would analyze within a
        # minute): a never-analyzed table makes the planner guess a handful of due rows.
        await conn.execute("ANALYZE jobs, runs")
        await conn.execute("SELECT pg_notify('punchclock_wake', '')")


async def exactly_once(conn: asyncpg.Connection, n: int) -> dict[str, Any]:
    row = await conn.fetchrow(
        """SELECT
             (SELECT count(*) FROM runs) AS runs,
             (SELECT count(*) FROM runs WHERE status = 'succeeded' AND attempts = 1
                AND lease_token = 1 AND lease_owner IS NULL) AS runs_succeeded_once,
             (SELECT count(*) FROM run_attempts) AS attempt_rows,
             (SELECT count(DISTINCT run_id) FROM run_attempts) AS runs_with_attempts,
             (SELECT count(*) FROM run_attempts a JOIN runs r ON r.id = a.run_id
               WHERE a.outcome = 'succeeded' AND a.attempt = 1 AND a.lease_token = 1
                 AND a.finished_at IS NOT NULL AND a.exit_code = 0) AS attempts_succeeded"""
    )
    assert row is not None
    counts = dict(row)
    counts["ok"] = all(v == n for v in counts.values())
    return counts


# A webhook channel told about every job's dead runs (none die here: what a subscription
# costs the success path). Its URL is never called.
BENCH_CHANNEL = """INSERT INTO channels (name, url, secret, all_jobs)
VALUES ('bench', 'http://127.0.0.1:9/hook',
        'whsec_cHVuY2hjbG9jay1iZW5jaC1zZWNyZXQtMzItYnl0ZXM=', '{run_dead}')"""


async def drain(
    ctx: Context,
    supervisors: int,
    n: int,
    cgroup: bool = False,
    notify: bool = False,
    *,
    env: dict[str, str] | None = None,
    command: list[str] = COMMAND,
) -> dict[str, Any]:
    """`n` due runs of `command` drained by `supervisors` (environment `env` added; with
    `cgroup`, a cgroup per run; with `notify`, a channel subscribed to run_dead)."""
    env = {**(env or {}), **({"PUNCHCLOCK_CGROUPS": "all"} if cgroup else {})} or None
    suffix = ("cg" if cgroup else "") + ("n" if notify else "")
    async with ctx.dbs.fresh(f"tp{supervisors}{suffix}") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            if notify:
                await conn.execute(BENCH_CHANNEL)
            sups = await start_supervisors(
                ctx.procs,
                supervisors,
                dsn=dsn,
                handlers={TYPE: command},
                concurrency=PER_SUPERVISOR,
                misfire_grace=3600.0,
                env=env,
            )
            try:
                cpu_before = cpu_snapshot([s.pid for s in sups])
                await insert_due_runs(conn, n, TYPE)

                async def done() -> bool:
                    left = await conn.fetchval(
                        "SELECT count(*) FROM runs WHERE status <> 'succeeded'"
                    )
                    return bool(left == 0)

                await wait_until(done, timeout=max(60.0, n / 10), what=f"{n} runs", every=0.2)
                cpu_after = cpu_snapshot([s.pid for s in sups])
            finally:
                for s in sups:
                    ctx.procs.stop(s)
            span = await conn.fetchrow(
                """SELECT EXTRACT(EPOCH FROM (max(r.finished_at) - min(a.started_at)))::float8
                            AS seconds
                   FROM runs r JOIN run_attempts a ON a.run_id = r.id"""
            )
            assert span is not None
            per_worker = {
                r["worker_id"]: r["n"]
                for r in await conn.fetch(
                    "SELECT worker_id, count(*) AS n FROM run_attempts GROUP BY 1 ORDER BY 1"
                )
            }
            check = await exactly_once(conn, n)
            events = await conn.fetchval("SELECT count(*) FROM outbox")
        finally:
            await conn.close()
    seconds = float(span["seconds"])
    return {
        "supervisors": supervisors,
        "n": n,
        "seconds": seconds,
        "runs_per_s": n / seconds,
        "per_worker": per_worker,
        "exactly_once": check,
        "notify": notify,
        "outbox_rows": events,
        # CPU ms per run over the drain (postgres: 0 when its processes are not visible here)
        "cpu_ms_per_run": {
            k: round(1000 * (cpu_after[k] - cpu_before[k]) / n, 3) for k in cpu_before
        },
    }


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    n = 300 if ctx.smoke else 5000
    counts = (1, 2) if ctx.smoke else (1, 2, 4)
    repeats = 1 if ctx.smoke else 2  # the machine is shared: pair each drain with its ceilings
    runs: list[dict[str, Any]] = []
    for k in counts:
        concurrency = k * PER_SUPERVISOR
        mine = []
        for _ in range(repeats):
            ceilings = {mode: await ceiling(n, concurrency, mode) for mode in CEILINGS}
            measured = await drain(ctx, k, n)
            measured["ceilings"] = ceilings
            runs.append(measured)
            mine.append(measured)
            key = f"exactly once, {k} supervisor(s), {n} runs"
            res.checks[key] = res.checks.get(key, True) and measured["exactly_once"]["ok"]
        rate = _mean(r["runs_per_s"] for r in mine)
        asyncio_rate = _mean(r["ceilings"]["pidfd"]["runs_per_s"] for r in mine)
        res.add(
            f"{k} supervisor{'s' if k > 1 else ''} x {PER_SUPERVISOR}: runs/s",
            rate,
            "runs/s",
            target=f">= {TARGET_RATIO}x ceiling" if k == 2 else "",
            ok=(rate / asyncio_rate >= TARGET_RATIO) if k == 2 else None,
            baseline=asyncio_rate,
            note=f"ceiling: asyncio subprocesses (PidfdChildWatcher), concurrency "
            f"{concurrency}, no database; mean of {repeats}",
        )
        if k == 2:
            res.add(
                f"{k} supervisors: runs/s against our runner alone",
                rate,
                "runs/s",
                baseline=_mean(r["ceilings"]["child"]["runs_per_s"] for r in mine),
                note="baseline: supervisor.proc.runner.Child, same concurrency, no database: "
                "what claiming, fencing and recording cost",
            )
            # What decides the ratio on a small machine: CPU per run, all processes.
            res.add(
                f"{k} supervisors: CPU per run, all processes",
                _mean(
                    sum(v for key, v in r["cpu_ms_per_run"].items() if key != "box_busy")
                    for r in mine
                ),
                "ms",
                baseline=_mean(r["ceilings"]["pidfd"]["cpu_ms_per_run"] for r in mine),
                note="supervisors + children + keepers + postgres; baseline: the ceiling's",
            )
    if cgroups.probe().usable:
        plain, caged = [], []
        for _ in range(repeats):  # paired, alternating, on the same machine state
            plain.append(await drain(ctx, 2, n))
            caged.append(await drain(ctx, 2, n, cgroup=True))
        res.checks[f"exactly once, 2 supervisors, a cgroup per run, {n} runs"] = all(
            r["exactly_once"]["ok"] for r in caged
        )
        res.add(
            "2 supervisors, a cgroup per run: runs/s",
            _mean(r["runs_per_s"] for r in caged),
            "runs/s",
            baseline=_mean(r["runs_per_s"] for r in plain),
            note=f"baseline: the same drain without cgroups (paired); mean of {repeats}",
        )
        res.details["cgroup_runs"] = caged
    await _notify_pairs(ctx, res, n, repeats)
    if not ctx.smoke:  # context: asyncio's default watcher on 3.11, same machine
        res.details["asyncio_threaded_watcher"] = await ceiling(n, 2 * PER_SUPERVISOR, "threaded")
    res.details["runs"] = runs
    return res


async def _notify_pairs(ctx: Context, res: ScenarioResult, n: int, repeats: int) -> None:
    """2 supervisors with and without a run_dead channel, alternating which goes first."""
    pairs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(repeats):
        for notify in (False, True) if i % 2 == 0 else (True, False):
            pairs[notify].append(await drain(ctx, 2, n, notify=notify))
    for notify, drains in pairs.items():
        key = f"exactly once, 2 supervisors, {n} runs, {'a' if notify else 'no'} run_dead channel"
        res.checks[key] = all(d["exactly_once"]["ok"] for d in drains)
    res.checks["no event for successes"] = all(d["outbox_rows"] == 0 for d in pairs[True])
    res.add(
        "2 supervisors: runs/s with a channel on run_dead",
        _mean(d["runs_per_s"] for d in pairs[True]),
        "runs/s",
        baseline=_mean(d["runs_per_s"] for d in pairs[False]),
        note=f"baseline: the same drain without a channel, interleaved; mean of {repeats}",
    )
    res.details["notify_runs"] = pairs[True] + pairs[False]


def _mean(values: Any) -> float:
    seq = list(values)
    return sum(seq) / len(seq)


async def drain_in(
    ctx: Context,
    dsn: str,
    n: int,
    tag: str,
    supervisors: int = 2,
    *,
    jobs: int = 50,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`n` due runs of /bin/true drained by `supervisors` (environment `env` added) in a
    database that holds other runs (history, earlier drains): only the runs of the jobs
    named `tag`-* are inserted, waited for, timed and checked (one attempt each, succeeded
    on the first lease). Their type is DRAIN_TYPE, which no other runs have."""
    conn = await asyncpg.connect(dsn)
    try:
        sups = await start_supervisors(
            ctx.procs, supervisors, dsn=dsn, handlers={DRAIN_TYPE: COMMAND},
            concurrency=PER_SUPERVISOR, misfire_grace=3600.0, env=env,
        )  # fmt: skip
        try:
            cpu_before = cpu_snapshot([s.pid for s in sups])
            async with conn.transaction():
                await conn.execute(
                    """INSERT INTO jobs (name, type, run_at, catchup, catchup_window_seconds,
                                         planned_until, plan_after)
                       SELECT $3::text || '-' || g, $1::text, now() + interval '1 year', 'all',
                              86400, now() + interval '1 year', 'infinity'
                       FROM generate_series(1, $2::int) g""",
                    DRAIN_TYPE, jobs, tag,
                )  # fmt: skip
                ids = await conn.fetchrow(
                    """WITH ins AS (
                           INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type,
                                             max_attempts)
                           SELECT j.id, now() - make_interval(secs => g / 1000.0), now(),
                                  'manual', $1::text, 3
                           FROM generate_series(1, $2::int) g
                           JOIN jobs j ON j.name = $4::text || '-' || (1 + g % $3::int)
                           RETURNING id)
                       SELECT min(id) AS lo, max(id) AS hi, count(*) AS n FROM ins""",
                    DRAIN_TYPE, n, jobs, tag,
                )  # fmt: skip
                assert ids is not None and ids["n"] == n and ids["hi"] - ids["lo"] == n - 1
                # As insert_due_runs: the statistics autovacuum would have within a minute
                # (a never-analyzed table makes the claim's planner expect a handful of rows).
                await conn.execute("ANALYZE jobs, runs")
                await conn.execute("SELECT pg_notify('punchclock_wake', '')")
            # This drain's runs are one id range (nothing else inserts runs meanwhile): the
            # observer reads that range of the primary key. By job name it was a parallel
            # sequential scan of the whole history in its first custom plans (five scans of
            # 10,000,000 runs in the first second of the drain it was timing).
            lo, hi = ids["lo"], ids["hi"]
            mine = "r.id BETWEEN $1::bigint AND $2::bigint"

            async def done() -> bool:
                left = await conn.fetchval(
                    f"SELECT count(*) FROM runs r WHERE {mine} AND r.status <> 'succeeded'",
                    lo, hi,
                )  # fmt: skip
                return bool(left == 0)

            await wait_until(done, timeout=max(120.0, n / 10), what=f"{n} runs", every=0.2)
            cpu_after = cpu_snapshot([s.pid for s in sups])
        finally:
            for s in sups:
                ctx.procs.stop(s)
        row = await conn.fetchrow(
            f"""SELECT EXTRACT(EPOCH FROM (max(r.finished_at) - min(a.started_at)))::float8
                         AS seconds,
                       count(DISTINCT r.id) AS runs,
                       count(*) AS attempts,
                       count(*) FILTER (WHERE r.status = 'succeeded' AND r.attempts = 1
                         AND r.lease_token = 1 AND a.outcome = 'succeeded'
                         AND a.exit_code = 0) AS once
                FROM runs r JOIN run_attempts a ON a.run_id = r.id WHERE {mine}""",
            lo, hi,
        )  # fmt: skip
        assert row is not None
    finally:
        await conn.close()
    seconds = float(row["seconds"])
    return {
        "n": n,
        "seconds": seconds,
        "runs_per_s": n / seconds,
        "exactly_once": row["runs"] == row["attempts"] == row["once"] == n,
        "cpu_ms_per_run": {
            k: round(1000 * (cpu_after[k] - cpu_before[k]) / n, 3) for k in cpu_before
        },
    }
