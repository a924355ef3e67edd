"""punchclock (the scheduler under test) under the common harness.

Adapted copy of ../shared/peers-bench/peer_punchclock.py (its README: when the schema or
semantics change, copy the script into bench/ and adapt it there). Run the harness with
this file in place of its own: `cp -r ../shared/peers-bench /tmp/peers-bench && cp
bench/peers/peer_punchclock.py /tmp/peers-bench/` and start `/tmp/peers-bench/run_all.sh` from
the checkout's root. The one change: the enqueued runs are `trigger = 'schedule'`, not
'manual', because since migration 0011's release a paused job's manual runs are claimed (a
manual trigger is an explicit request), which started the runs before GO. Scheduled runs
of a paused job wait, as the "started paused" discipline below needs; with catch-up 'all'
and a day's window they are never skipped as missed. And the listener's readiness: since
the failover work the listener connection runs `SELECT inet_server_port()` after its
LISTEN and then probes `transaction_read_only` now and then, so its last query is rarely
the LISTEN itself; any of the three counts (the CPU-flat wait after it covers the
millisecond between the first probe and the LISTEN).

Workload: only ``subproc``. punchclock's handlers are external commands, so its native
form of workload 2 is a handler whose command is ``/bin/true`` (TOML
``[handlers."true"] command = ["/bin/true"]``); the supervisor spawns it itself
(posix_spawn + pidfd, payload on stdin, stdout/stderr captured, exit code and CPU/RSS
recorded per attempt). ``noop`` does not apply (there is no in-process handler) and is
refused.

Worker = punchclock's real supervisor process,
``python -m supervisor supervise --database-url URL --handlers HANDLERS.toml
[--concurrency C] --worker-id wI --log-level warning``, run from its own venv
(``setup_punchclock.sh``: a clean clone of the checkout installed into
``$PUNCHCLOCK_VENV``, default /tmp/pc-venv, Python 3.11 = the machine's python3, which is
what punchclock targets and what its own bench runs on). The harness-side worker process
(this script's ``worker``, on the peers' venv) is only a wrapper: it starts the
supervisor as its child (same process group, so the driver's SIGTERM/SIGKILL of the
group reaches the supervisor and its keeper), speaks READY/GO, and exits with the
supervisor's exit status (so an early supervisor exit is seen as "worker exited early").
``--conc 0`` (the harness's "default") passes no ``--concurrency``: punchclock's default,
0 = 8 x CPU cores (16 here). Worker ids ``w0``..``w{P-1}`` are handed out with advisory
locks. Everything else is at punchclock's defaults (lease 30 s, poll fallback 5 s,
misfire grace 60 s, OpenTelemetry metrics recorded, no metrics listener).

READY/GO discipline - "started paused" (the default, ``PC_START=paused``):
  the peers import their code and open their pools before READY and start their worker
  loops after GO. A supervisor is a separate program whose start-up is interpreter +
  imports (~0.3-0.5 s of CPU) + pool + schema check + keeper process + worker row +
  LISTEN, so starting it after GO would put all of that in the timed window. Instead:
    * enqueue creates the 50 one-off jobs that hold the runs with ``paused = true``
      (punchclock's own pause: the claim skips runs of paused jobs);
    * each wrapper starts its supervisor before READY and says READY once the supervisor
      has registered (its ``workers`` row), its listener is LISTENing (pg_stat_activity,
      found by the application_name the wrapper puts in the DSN) and its CPU has been
      flat for 150 ms; at that point it has also done its first (empty) claim;
    * at GO the wrappers race to resume: one ``UPDATE jobs SET paused = false WHERE
      paused`` + ``pg_notify('punchclock_wake', '')`` in one transaction (the others
      find nothing to update and send nothing). That is what ``POST /v1/jobs/{id}/resume``
      does minus its re-planning (these one-off jobs are already planned). The NOTIFY wakes
      every supervisor's claimer; the clock started at GO, so the resume (~1-2 ms) and
      the wake-up are inside the window.
  So punchclock gets slightly *more* done before GO than the peers (their LISTEN /
  worker registration happen after GO; 8-70 ms measured); inside the window it pays
  only the resume transaction and the NOTIFY wake-up. ``PC_START=after-go`` instead
  starts the supervisor process only after GO (runs enqueued unpaused): the whole program
  start-up is then timed (~0.26 s to the first job in a smoke run), for comparison only.

Logging: ``--log-level warning`` (``PC_LOG_LEVEL``), as every peer here runs at WARNING
(punchclock's default ``info`` writes two JSON lines per run to stderr).

Enqueue: punchclock has no bulk API for one-off runs (a trigger is one run per API call),
so N due manual runs over 50 one-off jobs are inserted with SQL, as punchclock's own
``bench/throughput.py`` (``insert_due_runs``) does: catch-up 'all', a day's window, the
jobs' single planned instant marked done so the planner leaves them alone, ``trigger =
'manual'`` (never skipped as missed), ``max_attempts = 3``.

Done = runs with ``status = 'succeeded'`` (the completion batch is committed before that
is visible). After each run (workers stopped) punchclock's own per-run exactly-once check
from ``bench/throughput.py`` is recorded as ``exactly_once``: one attempt row per run,
every run succeeded on attempt 1 under lease token 1 with no lease left, every attempt
succeeded with exit code 0, all counts equal N.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import asyncpg

import common

PC_VENV = os.environ.get("PUNCHCLOCK_VENV", "/tmp/pc-venv")
PC_PY = os.path.join(PC_VENV, "bin", "python")
START = os.environ.get("PC_START", "paused")  # paused | after-go
LOG_LEVEL = os.environ.get("PC_LOG_LEVEL", "warning")
TYPE = "true"
COMMAND = [common.TRUE_BIN]
JOBS = 50
DEFAULT_CONC = 8 * (os.cpu_count() or 1)  # punchclock's concurrency 0
LOCK_BASE = 0x7063_0000  # advisory lock ids for handing out worker indexes
if START not in ("paused", "after-go"):
    sys.exit(f"PC_START must be 'paused' or 'after-go', not {START!r}")


def _pc_info() -> tuple[str, str]:
    """(punchclock version + commit, Python version) of the punchclock venv."""
    try:
        out = subprocess.run(
            [PC_PY, "-c", "import importlib.metadata as m, platform; "
             "print(m.version('punchclock'), platform.python_version())"],
            capture_output=True, text=True, timeout=30, check=True).stdout.split()
        version, py = out[0], out[1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "not installed", "?"
    try:
        with open(os.path.join(PC_VENV, "punchclock-commit")) as f:
            version += f" ({f.read().strip()})"
    except OSError:
        pass
    return version, py


# --------------------------------------------------------------------------
# driver side
# --------------------------------------------------------------------------

async def install(db: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        os.path.join(PC_VENV, "bin", "punchclock"), "migrate", "--database-url", common.dsn(db),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"punchclock migrate exited {proc.returncode}: {err.decode()[-300:]}")


async def enqueue(db: str, n: int, workload: str) -> None:
    if workload != "subproc":
        raise RuntimeError("punchclock: only the subproc workload applies (handlers are commands)")
    conn = await asyncpg.connect(common.dsn(db))
    try:
        async with conn.transaction():
            # bench/throughput.py insert_due_runs, with the jobs paused in PC_START=paused
            await conn.execute(
                """INSERT INTO jobs (name, type, run_at, catchup, catchup_window_seconds,
                                     planned_until, plan_after, paused)
                   SELECT 'bench-' || g, $1::text, now() + interval '1 year', 'all', 86400,
                          now() + interval '1 year', 'infinity', $3::bool
                   FROM generate_series(1, $2::int) g""",
                TYPE, JOBS, START == "paused")
            await conn.execute(
                """INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type,
                                     max_attempts)
                   SELECT j.id, now() - make_interval(secs => g / 1000.0), now(), 'schedule',
                          $1::text, 3
                   FROM generate_series(1, $2::int) g
                   JOIN jobs j ON j.name = 'bench-' || (1 + g % $3::int)""",
                TYPE, n, JOBS)
    finally:
        await conn.close()


async def post_run(db: str, n: int) -> dict:
    """punchclock's own exactly-once check (bench/throughput.py), after the workers stopped."""
    conn = await asyncpg.connect(common.dsn(db))
    try:
        row = await conn.fetchrow(
            """SELECT
                 (SELECT count(*) FROM runs) AS runs,
                 (SELECT count(*) FROM runs WHERE status = 'succeeded' AND attempts = 1
                    AND lease_token = 1 AND lease_owner IS NULL) AS runs_succeeded_once,
                 (SELECT count(*) FROM run_attempts) AS attempt_rows,
                 (SELECT count(DISTINCT run_id) FROM run_attempts) AS runs_with_attempts,
                 (SELECT count(*) FROM run_attempts a JOIN runs r ON r.id = a.run_id
                   WHERE a.outcome = 'succeeded' AND a.attempt = 1 AND a.lease_token = 1
                     AND a.finished_at IS NOT NULL AND a.exit_code = 0) AS attempts_succeeded""")
        check = dict(row)
        check["ok"] = all(v == n for v in check.values())
        per_worker = {r["worker_id"]: r["n"] for r in await conn.fetch(
            "SELECT worker_id, count(*) AS n FROM run_attempts GROUP BY 1 ORDER BY 1")}
        claims = await conn.fetchval(  # distinct claim instants = claim transactions
            "SELECT count(DISTINCT (worker_id, started_at)) FROM run_attempts")
    finally:
        await conn.close()
    return {"exactly_once": check, "per_worker": per_worker, "claims": claims}


def settings(procs: int, conc: int) -> str:
    c = f"--concurrency {conc}" if conc else f"default concurrency (0 = 8 x cores = {DEFAULT_CONC})"
    return (f"{procs} supervisor process(es) `python -m supervisor supervise`, {c}; "
            f"handler command ['/bin/true']; --log-level {LOG_LEVEL}; start: {START}; "
            f"supervisor on Python {PC_PYTHON}; other settings default")


# --------------------------------------------------------------------------
# worker side: a wrapper around one real supervisor process
# --------------------------------------------------------------------------

def _kill_everything(sup: subprocess.Popen | None) -> None:
    """Abnormal exit: never leave the supervisor (or its keeper) behind."""
    if os.getpgrp() == os.getpid():  # started by the harness: own group = us + supervisor
        os.killpg(os.getpgrp(), signal.SIGKILL)
    if sup is not None and sup.poll() is None:
        sup.kill()


def _watchdog(sup_box: list) -> None:
    """After GO the driver never writes again: EOF means it is gone; take the group down."""
    sys.stdin.readline()
    _kill_everything(sup_box[0] if sup_box else None)
    os._exit(3)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        raw = f.read()
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


async def _claim_index(conn: asyncpg.Connection, procs: int) -> int:
    for i in range(procs):
        if await conn.fetchval("SELECT pg_try_advisory_lock($1::bigint)", LOCK_BASE + i):
            return i
    raise RuntimeError("no free worker index")


def _start_supervisor(db: str, wid: str, conc: int, workdir: str) -> subprocess.Popen:
    toml = os.path.join(workdir, "handlers.toml")
    with open(toml, "w") as f:
        f.write(f'[handlers."{TYPE}"]\ncommand = {json.dumps(COMMAND)}\n')
    url = f"{common.dsn(db)}?application_name=punchclock-{wid}"
    argv = [PC_PY, "-m", "supervisor", "supervise", "--database-url", url,
            "--handlers", toml, "--worker-id", wid, "--log-level", LOG_LEVEL]
    if conc:
        argv += ["--concurrency", str(conc)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    # stdout (the READY/GO pipe) must not be inherited: both streams go to our log
    return subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                            stdout=sys.stderr, stderr=sys.stderr)


async def _wait_supervisor_ready(conn: asyncpg.Connection, sup: subprocess.Popen,
                                 wid: str) -> float:
    t0 = time.monotonic()
    deadline = t0 + 60
    while True:
        if sup.poll() is not None:
            raise RuntimeError(f"supervisor {wid} exited {sup.returncode} while starting")
        if await conn.fetchval(
                """SELECT EXISTS (SELECT 1 FROM workers WHERE id = $1 AND stopped_at IS NULL)
                      AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $2
                                  AND (query LIKE 'LISTEN%' OR query LIKE '%inet_server_port%'
                                       OR query LIKE '%transaction_read_only%'))""",
                wid, f"punchclock-{wid}"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"supervisor {wid} not ready after 60 s")
        await asyncio.sleep(0.02)
    last, flat = _cpu_ticks(sup.pid), 0
    while flat < 3 and time.monotonic() < deadline:  # start-up CPU done: flat for 150 ms
        await asyncio.sleep(0.05)
        now = _cpu_ticks(sup.pid)
        flat = flat + 1 if now == last else 0
        last = now
    return time.monotonic() - t0


async def _wait_for_go(sup_box: list) -> None:
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "GO":
        raise SystemExit(f"expected GO, got {line!r}")
    threading.Thread(target=_watchdog, args=(sup_box,), daemon=True).start()


async def _resume(conn: asyncpg.Connection) -> int:
    async with conn.transaction():
        n = await conn.fetchval(
            "WITH u AS (UPDATE jobs SET paused = false, updated_at = now() WHERE paused "
            "RETURNING 1) SELECT count(*) FROM u")
        if n:
            await conn.execute("SELECT pg_notify('punchclock_wake', '')")
    return n


async def worker(argv: list[str]) -> int:
    args = common.worker_argparser("punchclock").parse_args(argv)
    if args.workload != "subproc":
        raise SystemExit("punchclock: only the subproc workload applies")
    # the driver signals our whole group: the supervisor gets its own SIGTERM and drains;
    # we just wait for it and exit with its status
    signal.signal(signal.SIGTERM, lambda *_: None)
    sup_box: list = []
    sup = None
    workdir = tempfile.mkdtemp(prefix="pc-peer-")
    try:
        conn = await asyncpg.connect(common.dsn(args.db))
        wid = f"w{await _claim_index(conn, args.procs)}"
        if START == "paused":
            sup = _start_supervisor(args.db, wid, args.conc, workdir)
            sup_box.append(sup)
            secs = await _wait_supervisor_ready(conn, sup, wid)
            print(f"# {wid}: supervisor pid {sup.pid} ready in {secs:.3f} s (before READY)",
                  file=sys.stderr, flush=True)
        await _wait_for_go(sup_box)
        if START == "paused":
            resumed = await _resume(conn)
            if resumed:
                print(f"# {wid}: resumed {resumed} jobs at GO", file=sys.stderr, flush=True)
        else:
            sup = _start_supervisor(args.db, wid, args.conc, workdir)
            sup_box.append(sup)
        await conn.close()
        return await asyncio.to_thread(sup.wait)
    except BaseException:
        _kill_everything(sup)
        raise
    finally:
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    sys.exit(asyncio.run(worker(sys.argv[2:])))

PC_VERSION, PC_PYTHON = _pc_info()

SPEC = common.PeerSpec(
    name="punchclock",
    version=PC_VERSION,
    script=__file__,
    install=install,
    enqueue=enqueue,
    done_sql="SELECT count(*) FROM runs WHERE status = 'succeeded'",
    failed_sql="SELECT count(*) FROM run_attempts WHERE outcome NOT IN ('running', 'succeeded')",
    first_start_sql="SELECT extract(epoch FROM min(started_at)) FROM run_attempts",
    last_done_sql="SELECT extract(epoch FROM max(finished_at)) FROM runs "
                  "WHERE status = 'succeeded'",
    settings=settings,
    default_label=f"concurrency 0 = 8 x cores = {DEFAULT_CONC}",
    default_conc=None,
    post_run=post_run,
)

if __name__ == "__main__":
    if sys.argv[1:2] == ["bench"]:
        common.bench_main(SPEC, sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} bench|worker ...")
