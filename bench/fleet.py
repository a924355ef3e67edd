"""Fleet: a hundred to a thousand hosts on one stock PostgreSQL 15 (max_connections = 100)
behind PgBouncer in transaction mode (DESIGN.md, Fleet).

The scenario starts its own server (fsync off: a throwaway cluster; pg_stat_statements
loaded) and a PgBouncer (bench.fleet_support), migrates on the direct DSN and sets the
role's settings (ALTER ROLE ... SET jit, enable_bitmapscan, enable_seqscan = off). Fleets:
- 100 real supervisors through the bouncer (`--database-pooler transaction`, concurrency
  4, one type running /bin/true), started in waves: all poll, no LISTEN;
- 300 and 1,000 hosts simulated in bench.fleet_sim processes (the real database-facing
  services per host, a pool of one pooled connection each, a stub executor whose runs
  succeed at their instant through the real Completer);
- 40 real supervisors on the direct DSN, LISTENing (2 connections each), beside an API;
- 10 real (and 10 simulated) hosts, for the drain's baseline.
Each fleet gets a fresh database and, once every host is seated by the census and has
beaten since: an idle window (server backends, bouncer clients, transactions per host per
second from pg_stat_database, the server's CPU from its processes, statements by calls/s
from pg_stat_statements), 20 manual runs triggered one by one (trigger_job: claim
statements from the trigger until the run started, and started_at - scheduled_at), a drain
of 10,000 due runs checked exactly-once, and the planning of 10,000 `* * * * *` jobs of a
type nobody offers (planned, never run).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench import fleet_support as fs
from bench.common import Context, Databases, ScenarioResult, api_url, summary
from bench.fleet_support import Spec, specs
from bench.throughput import exactly_once, insert_due_runs
from supervisor.core.db import connect
from supervisor.core.jobs import trigger_job
from supervisor.core.store import Store
from supervisor.local.pgbouncer import LocalPgBouncer
from supervisor.local.plumbing import wait_until

NAME = "fleet"
TYPE = "noop"
UNOFFERED = "cron-unoffered"  # planned for, offered by no host
IDLE_TARGET = 0.5  # transactions per host per second, at 100 hosts
CPU_RATIO_TARGET = 2.0  # idle server CPU at 1,000 hosts against 100
CLAIMS_TARGET = 5.0  # claim statements after one trigger, at 1,000 hosts
LATE_TARGET_MS = 50.0  # p99 start lateness after a trigger
DRAIN_RATIO_TARGET = 0.9  # 100 hosts' runs/s against 10 hosts'
FIRST_RUNS = "SELECT min(started_at) FROM run_attempts GROUP BY worker_id"  # per host


@dataclass
class Env:
    ctx: Context
    pg: fs.Postgres15
    bouncer: LocalPgBouncer
    dbs: Databases
    admin: asyncpg.Connection  # the admin database: pg_stat_* of every database
    ttl: float
    window: float  # the idle window, at least (1,000 hosts get two idle beat gaps)
    triggers: int
    drain_n: int
    plan_jobs: int


async def idle(env: Env, fleet: fs.Fleet, dbname: str) -> dict[str, Any]:
    """A fixed window on the settled fleet: transactions, CPU and statements."""
    window = max(env.window, 2 * 0.05 * fleet.hosts)  # whole idle-beat gaps of a big fleet
    x0, s0 = await fs.xacts(env.admin, dbname), await fs.statements(env.admin, dbname)
    cpu0, bcpu0 = fs.postgres_cpu(env.pg), fs.process_cpu([env.bouncer.pid or 0])
    fcpu0 = fs.process_cpu(fleet.pids)
    started = time.monotonic()
    await asyncio.sleep(window)  # the measurement window
    seconds = time.monotonic() - started
    x1, s1 = await fs.xacts(env.admin, dbname), await fs.statements(env.admin, dbname)
    rates = {k: (v - s0.get(k, 0)) / seconds for k, v in s1.items() if v > s0.get(k, 0)}
    return {
        "seconds": seconds,
        "xacts_per_s": (x1 - x0) / seconds,
        "xacts_per_host_s": (x1 - x0) / seconds / fleet.hosts,
        "server_cpu_pct": 100 * (fs.postgres_cpu(env.pg) - cpu0) / seconds,
        "bouncer_cpu_pct": 100 * (fs.process_cpu([env.bouncer.pid or 0]) - bcpu0) / seconds,
        "fleet_cpu_pct": 100 * (fs.process_cpu(fleet.pids) - fcpu0) / seconds,
        "statements_per_host_s": sum(rates.values()) / fleet.hosts,
        "statements_per_s": fs.busiest(rates, 12),
        "claims_per_s": rates.get("claim_runs", 0.0),
    }


async def triggers(
    env: Env, conn: asyncpg.Connection, direct: str, dbname: str, idle_claims: float
) -> dict[str, Any]:
    """Manual runs triggered one at a time (trigger_job, the API's path): the claim
    statements from the trigger until its run started, and the run's lateness."""
    job_id = await conn.fetchval(
        """INSERT INTO jobs (name, type, run_at, planned_until, plan_after)
           VALUES ('trigger', $1, now() + interval '1 year', now() + interval '1 year',
                   'infinity') RETURNING id""",
        TYPE,
    )
    store_conn = await connect(direct)
    rng = random.Random(5)
    claims: list[float] = []
    excess: list[float] = []
    late_ms: list[float] = []
    try:
        for _ in range(env.triggers):
            before, t0 = await fs.claim_calls(env.admin, dbname), time.monotonic()
            run_id, _ = await trigger_job(Store(store_conn), job_id, None, None)

            async def started(run_id: int = run_id) -> Any:
                return await conn.fetchrow(
                    """SELECT a.started_at, r.scheduled_at FROM run_attempts a
                       JOIN runs r ON r.id = a.run_id WHERE a.run_id = $1""",
                    run_id,
                )

            row = await wait_until(started, 60, f"run {run_id} started", every=0.005)
            elapsed = time.monotonic() - t0
            n = await fs.claim_calls(env.admin, dbname) - before
            claims.append(n)
            excess.append(n - idle_claims * elapsed)
            late_ms.append((row["started_at"] - row["scheduled_at"]).total_seconds() * 1000)

            async def succeeded(run_id: int = run_id) -> bool:
                s = await conn.fetchval("SELECT status::text FROM runs WHERE id = $1", run_id)
                return bool(s == "succeeded")

            await wait_until(succeeded, 60, f"run {run_id} succeeded", every=0.01)
            await asyncio.sleep(rng.uniform(0.2, 0.5))  # pacing: triggers spaced apart
    finally:
        await store_conn.close()
    return {
        "claims": summary(claims),
        "claims_beyond_idle_polls": summary(excess),
        "late_ms": summary(late_ms),
    }


async def drain(env: Env, fleet: fs.Fleet, conn: asyncpg.Connection, db: str) -> dict[str, Any]:
    """`drain_n` due runs at once (bench.throughput.insert_due_runs), checked exactly-once;
    when each host took its first run, and the statements per run."""
    await conn.execute("DELETE FROM runs")  # the triggers': exactly_once counts every run
    cpu0, fcpu0 = fs.postgres_cpu(env.pg), fs.process_cpu(fleet.pids)
    s0 = await fs.statements(env.admin, db)
    await insert_due_runs(conn, env.drain_n, TYPE)

    async def done() -> bool:
        return not await conn.fetchval("SELECT count(*) FROM runs WHERE status <> 'succeeded'")

    await wait_until(done, max(180.0, env.drain_n / 20), f"{env.drain_n} runs", every=0.25)
    cpu1, fcpu1 = fs.postgres_cpu(env.pg), fs.process_cpu(fleet.pids)
    s1 = await fs.statements(env.admin, db)
    per_run = {k: (v - s0.get(k, 0)) / env.drain_n for k, v in s1.items() if v > s0.get(k, 0)}
    firsts = [r[0] for r in await conn.fetch(FIRST_RUNS)]
    joined = [(t - min(firsts)).total_seconds() for t in firsts]
    row = await conn.fetchrow(
        """SELECT EXTRACT(EPOCH FROM (max(r.finished_at) - min(a.started_at)))::float8 AS s,
                  count(DISTINCT a.worker_id) AS hosts
           FROM runs r JOIN run_attempts a ON a.run_id = r.id"""
    )
    assert row is not None
    seconds = float(row["s"])
    return {
        "n": env.drain_n,
        "seconds": seconds,
        "runs_per_s": env.drain_n / seconds,
        "hosts_that_ran": row["hosts"],
        "hosts_first_run_after_s": summary(joined),  # from the drain's first start
        "statements_per_run": fs.busiest(per_run, 10),
        "exactly_once": await exactly_once(conn, env.drain_n),
        "server_cpu_ms_per_run": round(1000 * (cpu1 - cpu0) / env.drain_n, 3),
        "fleet_cpu_ms_per_run": round(1000 * (fcpu1 - fcpu0) / env.drain_n, 3),
    }


async def planning(env: Env, conn: asyncpg.Connection) -> dict[str, Any]:
    """`plan_jobs` `* * * * *` jobs inserted at once: until every one has its runs planned."""
    await conn.execute(
        """INSERT INTO jobs (name, type, cron, timezone)
           SELECT 'cron-' || g, $2::text, '* * * * *', 'UTC' FROM generate_series(1, $1::int) g""",
        env.plan_jobs,
        UNOFFERED,
    )
    inserted = await conn.fetchval("SELECT clock_timestamp()")
    await conn.execute("ANALYZE jobs")

    async def planned() -> Any:
        return await conn.fetchval(
            """SELECT clock_timestamp() WHERE NOT EXISTS (
                   SELECT 1 FROM jobs WHERE type = $1
                     AND (planned_until IS NULL OR plan_after <= now()))""",
            UNOFFERED,
        )

    done = await wait_until(planned, 900, f"{env.plan_jobs} jobs planned", every=0.25)
    runs = await conn.fetchval("SELECT count(*) FROM runs WHERE type = $1", UNOFFERED)
    return {"jobs": env.plan_jobs, "seconds": (done - inserted).total_seconds(), "runs": runs}


async def measure(env: Env, spec: Spec) -> dict[str, Any]:
    """One fleet in a fresh database, through the phases of its spec; always stopped."""
    out: dict[str, Any] = {"kind": spec.kind, "hosts": spec.hosts}
    async with env.dbs.fresh(f"fleet{spec.kind}{spec.hosts}") as direct:
        dbname = urlsplit(direct).path.lstrip("/")
        pooled = env.bouncer.dsn_for(dbname)
        conn, sampler = await fs.observe(direct), fs.BackendSampler(await fs.observe(env.pg.dsn))
        fleet = fs.Fleet(spec.kind, spec.hosts)
        api = env.ctx.procs.api(direct) if spec.kind == "direct" else None
        sampler.start()
        try:
            if api is not None:
                out["api"] = await api_url(api)
            c0, t0 = await fs.claim_calls(env.admin, dbname), time.monotonic()
            if spec.kind == "sim":
                await fs.start_sims(env.ctx, fleet, pooled, TYPE, per_proc=spec.per_proc,
                                 ttl=env.ttl, tag=f"sim{spec.hosts}")  # fmt: skip
            else:
                dsn = direct if spec.kind == "direct" else pooled
                await fs.start_supervisors(env.ctx, fleet, dsn, TYPE, pooled=spec.kind == "real",
                                        ttl=env.ttl, wave=10)  # fmt: skip
            out["start_seconds"] = fleet.started_s
            out["settle_seconds"] = await fs.settled(conn, fleet, TYPE, env.ttl)
            out["startup_claims_per_s"] = (
                await fs.claim_calls(env.admin, dbname) - c0) / (time.monotonic() - t0)  # fmt: skip
            idle_claims = 0.0
            if "idle" in spec.phases:
                out["idle"] = await idle(env, fleet, dbname)
                idle_claims = out["idle"]["claims_per_s"]
                out["backends"] = await fs.backends(conn)
                out["bouncer"] = await fs.bouncer_clients(env.bouncer, dbname)
            if "triggers" in spec.phases:
                out["triggers"] = await triggers(env, conn, direct, dbname, idle_claims)
            if "drain" in spec.phases:
                out["drain"] = await drain(env, fleet, conn, dbname)
            if "plan" in spec.phases:
                out["planning"] = await planning(env, conn)
        finally:
            await sampler.stop()
            out["backends_peak"] = sampler.peak
            await fs.stop_fleet(env.ctx, fleet)
            if api is not None:
                env.ctx.procs.stop(api)
            await sampler.conn.close()
            await conn.close()
    if fleet.stopped:
        out["sim"] = fleet.stopped
    if fleet.starts_ms:
        out["stub_start_late_ms"] = summary(fleet.starts_ms)
    return out


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    smoke = ctx.smoke
    with fs.fleet_server() as (pg, bouncer):
        dbs = Databases(pg.dsn)  # a template migrated on the direct DSN, a copy per fleet
        await dbs.create()
        admin = await fs.observe(pg.dsn)
        try:
            res.details["server"] = {
                "version": await admin.fetchval("SHOW server_version"),
                "max_connections": fs.MAX_CONNECTIONS,
                "fsync": await admin.fetchval("SHOW fsync"),
                "synchronous_commit": await admin.fetchval("SHOW synchronous_commit"),
                "role_settings": await fs.prepare_role(admin),
                "pgbouncer": {
                    "pool_mode": "transaction",
                    "default_pool_size": fs.BOUNCER_POOL,
                    "max_client_conn": fs.MAX_CLIENTS,
                },
                "simulated_hosts": "a pool of its own per host: 1 pooled connection each, "
                "so one PgBouncer client per host, as a real fleet",
                "method": "transactions: pg_stat_database of the fleet's database, read from "
                "another database (none is the observer's), its counters flushed by each backend "
                "about once a second while busy (a window's ends are that exact); statements: "
                "pg_stat_statements by queries.sql block; CPU: every process under the "
                "postmaster (psutil), the bouncer and the fleet apart",
            }
            env = Env(ctx, pg, bouncer, dbs, admin, ttl=6.0 if smoke else 30.0,
                      window=3.0 if smoke else 30.0, triggers=2 if smoke else 20,
                      drain_n=300 if smoke else 10_000,
                      plan_jobs=300 if smoke else 10_000)  # fmt: skip
            fleets: dict[str, dict[str, Any]] = {}
            for spec in specs(smoke):
                print(f"   fleet: {spec.label}", flush=True)
                fleets[f"{spec.kind}{spec.hosts}"] = out = await measure(env, spec)
                out["label"] = spec.label
                res.details[spec.label] = out
            report(res, fleets, env)
        finally:
            await admin.close()
            await dbs.drop()
    return res


def report(res: ScenarioResult, fleets: dict[str, dict[str, Any]], env: Env) -> None:
    """The table's rows: each fleet's figures, with the issue's targets where they apply."""
    real = sorted((f for f in fleets.values() if f["kind"] == "real"), key=lambda f: f["hosts"])
    small, big = (real[0], real[-1]) if real else (None, None)  # the baseline; 100 hosts
    sims = sorted((f for f in fleets.values() if f["kind"] == "sim"), key=lambda f: f["hosts"])
    largest = max(fleets.values(), key=lambda f: f["hosts"])
    for f in fleets.values():
        label, top, at100 = f["label"], f is largest, f is big
        peak = f["backends_peak"]
        res.add(
            f"{label}: server backends, peak", peak, "", target=f"< {fs.MAX_CONNECTIONS}",
            ok=peak < fs.MAX_CONNECTIONS, note=f"when idle: {f.get('backends', '-')}",
        )  # fmt: skip
        if "idle" in f:
            idle_, pool = f["idle"], f["bouncer"]
            if f["kind"] != "direct":
                servers = pool["sv_active"] + pool["sv_idle"] + pool["sv_used"]
                res.add(
                    f"{label}: PgBouncer client connections", pool["clients"], "",
                    note=f"server connections {servers}",
                )  # fmt: skip
            per_host = idle_["xacts_per_host_s"]
            res.add(
                f"{label}: idle transactions per host per s", per_host, "/s",
                target=f"<= {IDLE_TARGET:g}" if at100 else "",
                ok=per_host <= IDLE_TARGET if at100 else None,
                note=f"{idle_['xacts_per_s']:.1f}/s in all over {idle_['seconds']:.0f} s; "
                f"statements {idle_['statements_per_host_s']:.2f}/host/s",
            )  # fmt: skip
            busiest, calls = next(iter(idle_["statements_per_s"].items()), ("-", 0.0))
            res.add(f"{label}: busiest idle statement", calls, "/s", note=busiest[:48])
            base = big["idle"]["server_cpu_pct"] if big and "idle" in big and not at100 else None
            cpu = idle_["server_cpu_pct"]
            res.add(
                f"{label}: server idle CPU", cpu, "% core",
                target=f"<= {CPU_RATIO_TARGET:g}x {big['hosts']} hosts'" if top and big else "",
                ok=cpu <= CPU_RATIO_TARGET * base if top and base else None,
                baseline=base or None, note=f"baseline: {big['label']}" if big and base else "",
            )  # fmt: skip
        if "triggers" in f:
            claims, late = f["triggers"]["claims"], f["triggers"]["late_ms"]
            beyond = f["triggers"]["claims_beyond_idle_polls"]["mean"]
            res.add(
                f"{label}: claim statements per trigger", claims["mean"], "",
                target=f"<= {CLAIMS_TARGET:g}" if top else "",
                ok=claims["mean"] <= CLAIMS_TARGET if top else None,
                note=f"max {claims['max']:g}; beyond the idle polls: {beyond:.2f}",
            )  # fmt: skip
            res.add(
                f"{label}: start lateness p99 after a trigger", late["p99"], "ms",
                target=f"<= {LATE_TARGET_MS:g} ms", ok=late["p99"] <= LATE_TARGET_MS,
                note=f"p50 {late['p50']:.1f} ms, {late['n']} triggers",
            )  # fmt: skip
        if "planning" in f:
            p = f["planning"]
            res.add(
                f"{label}: planning lag, {p['jobs']:,} cron jobs", p["seconds"], "s",
                note=f"{p['runs']:,} runs planned",
            )  # fmt: skip
        if "drain" in f:
            d = f["drain"]
            res.checks[f"exactly once, {label}, {d['n']} runs"] = bool(d["exactly_once"]["ok"])
            base_f = small if f["kind"] == "real" else (sims[0] if sims else None)
            rate = base_f["drain"]["runs_per_s"] if base_f and base_f is not f else None
            judged = at100 and rate is not None
            why = f"; baseline: {base_f['label']}" if rate and base_f else ""
            n_base = base_f["hosts"] if base_f else 0
            res.add(
                f"{label}: drain of {d['n']:,} runs", d["runs_per_s"], "runs/s",
                target=f">= {DRAIN_RATIO_TARGET:g}x {n_base} hosts'" if judged else "",
                ok=d["runs_per_s"] >= DRAIN_RATIO_TARGET * rate if judged and rate else None,
                baseline=rate, note=f"{d['hosts_that_ran']} hosts ran runs{why}",
            )  # fmt: skip
