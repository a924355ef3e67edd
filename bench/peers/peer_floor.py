"""floor: the least a Python worker can do per job and still run each job once, as a
"peer" of the shared harness (copy it beside ``common.py``; it is not a job system).

It answers one question for issue 16: how fast can *any* asyncpg-and-asyncio design go on
this machine, measured in the same run as the peers? Whatever punchclock does per run is
a superset of what this does, so its rate is an upper bound for punchclock's.

Per job: one row claimed with ``FOR UPDATE SKIP LOCKED`` (an autocommit ``UPDATE …
RETURNING`` of a batch, durable under the server's ``synchronous_commit``), ``/bin/true``
started with ``os.posix_spawn`` (no pipes, no new session, no payload: the peers' own
form), reaped through a pidfd on the event loop, and marked done by one ``UPDATE … = ANY``
per batch of ended children, on a second connection so completions never wait for a claim.

Three variants, chosen by the script's name (``peer_floor0.py`` and ``peer_floorkept.py``
are symlinks to this file):
- ``floor``: claims are pipelined. Up to ``conc`` children run and up to ``conc`` more
  runs wait claimed, so the next claim is in flight while the last one's children start.
  punchclock's DESIGN rejects that for a scheduler (a run leased to a busy host waits while
  idle hosts could take it), so this is the bound with it;
- ``floor0``: a claim takes only free slots, as punchclock's does;
- ``floorkept``: ``floor0`` plus the least of what issue 16 says punchclock must keep per
  run: a lease token (the completion is fenced by it), an attempt row inserted by the
  claim and completed with the exit code, CPU time, peak memory and output tails, the
  payload on stdin (a memfd), stdout and stderr through pipes drained while the child
  runs, its own session, the run's environment variables, and ``wait4`` for the usage.

None of them renews a lease, plans, logs or records metrics. ``conc`` 0 means 16
(punchclock's default on two cores).

Done = rows with status 2. After each run, ``exactly_once`` checks that every row was
claimed once (``claims = 1``) and is done, and for floorkept that each has one attempt row
completed with exit code 0.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import resource
import signal
import sys

import asyncpg

import common

NAME = os.path.basename(__file__).removeprefix("peer_").removesuffix(".py")
PIPELINED = NAME == "floor"
KEPT = NAME == "floorkept"
DEFAULT_CONC = 16
TRUE = common.TRUE_BIN
TAIL = 65536  # output kept per stream, as punchclock's default output_limit

SCHEMA = """
CREATE TABLE floor_jobs (
    id bigint PRIMARY KEY,
    status smallint NOT NULL DEFAULT 0,  -- 0 due, 1 claimed, 2 done, 3 failed
    owner text,
    token int NOT NULL DEFAULT 0,
    claims int NOT NULL DEFAULT 0,
    payload text NOT NULL DEFAULT '{}'
);
CREATE INDEX floor_jobs_due ON floor_jobs (id) WHERE status = 0;
CREATE TABLE floor_attempts (
    job_id bigint NOT NULL,
    attempt int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    exit_code int,
    cpu_seconds float8,
    max_rss_kb bigint,
    stdout text,
    stderr text,
    PRIMARY KEY (job_id, attempt)
);
"""
CLAIM = """
UPDATE floor_jobs SET status = 1, owner = $1, claims = claims + 1
 WHERE id IN (SELECT id FROM floor_jobs WHERE status = 0 ORDER BY id LIMIT $2
              FOR UPDATE SKIP LOCKED)
RETURNING id
"""
DONE = "UPDATE floor_jobs SET status = $3 WHERE id = ANY($1::bigint[]) AND owner = $2"
CLAIM_KEPT = """
WITH claimed AS (
    UPDATE floor_jobs SET status = 1, owner = $1, claims = claims + 1, token = token + 1
     WHERE id IN (SELECT id FROM floor_jobs WHERE status = 0 ORDER BY id LIMIT $2
                  FOR UPDATE SKIP LOCKED)
    RETURNING id, token, claims, payload
), attempts AS (
    INSERT INTO floor_attempts (job_id, attempt) SELECT id, claims FROM claimed
)
SELECT id, token, claims, payload FROM claimed
"""
DONE_KEPT = """
WITH ended AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::int[], $4::int[], $5::float8[],
                         $6::bigint[], $7::text[], $8::text[])
        AS e(id, token, attempt, exit_code, cpu, rss, stdout, stderr)
), jobs AS (
    UPDATE floor_jobs j SET status = CASE WHEN e.exit_code = 0 THEN 2 ELSE 3 END
      FROM ended e WHERE j.id = e.id AND j.owner = $9 AND j.token = e.token
    RETURNING j.id
)
UPDATE floor_attempts a SET finished_at = now(), exit_code = e.exit_code,
       cpu_seconds = e.cpu, max_rss_kb = e.rss, stdout = e.stdout, stderr = e.stderr
  FROM ended e JOIN jobs USING (id)
 WHERE a.job_id = e.id AND a.attempt = e.attempt
"""


async def install(db: str) -> None:
    conn = await asyncpg.connect(common.dsn(db))
    try:
        await conn.execute(SCHEMA)
    finally:
        await conn.close()


async def enqueue(db: str, n: int, workload: str) -> None:
    if workload != "subproc":
        raise RuntimeError("floor: only the subproc workload applies")
    conn = await asyncpg.connect(common.dsn(db))
    try:
        await conn.execute("INSERT INTO floor_jobs (id) SELECT generate_series(1, $1)", n)
    finally:
        await conn.close()


async def exactly_once(db: str, n: int) -> dict[str, object]:
    conn = await asyncpg.connect(common.dsn(db))
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS rows, count(*) FILTER (WHERE status = 2 AND claims = 1) AS ok,"
            " (SELECT count(*) FROM floor_attempts WHERE exit_code = 0) AS attempts"
            " FROM floor_jobs"
        )
    finally:
        await conn.close()
    ok = row["rows"] == n and row["ok"] == n and (not KEPT or row["attempts"] == n)
    return {
        "exactly_once": {
            "ok": ok,
            "rows": row["rows"],
            "done_once": row["ok"],
            "attempts_ok": row["attempts"],
        }
    }


def settings(procs: int, conc: int) -> str:
    c = conc or DEFAULT_CONC
    ahead = f"up to {c} more claimed ahead" if PIPELINED else "claims only free slots"
    kept = "; payload, pipes, session, env, attempt rows, usage, fenced" if KEPT else ""
    return (
        f"{procs} proc(s) x {c} children, {ahead}; posix_spawn + pidfd; "
        f"batched completion on a second connection{kept}"
    )


class Run:
    """One claimed job while its child runs (floorkept's bookkeeping)."""

    __slots__ = ("attempt", "code", "cpu", "id", "open", "out", "pid", "pidfd", "rss", "token")

    def __init__(self, row: asyncpg.Record) -> None:
        self.id, self.token, self.attempt = row["id"], row["token"], row["claims"]
        self.out: dict[int, bytearray] = {}
        self.open = 3  # the pidfd and both pipes: the run ends when all three have
        self.code, self.cpu, self.rss = -1, 0.0, 0


async def worker(argv: list[str]) -> None:
    args = common.worker_argparser(NAME).parse_args(argv)
    conc = args.conc or DEFAULT_CONC
    ahead = conc if PIPELINED else 0
    least = max(1, conc // 2)  # the smallest claim while children run
    owner = f"{NAME}-{os.getpid()}"
    claims = await asyncpg.connect(common.dsn(args.db))
    dones = await asyncpg.connect(common.dsn(args.db))
    claim = await claims.prepare(CLAIM_KEPT if KEPT else CLAIM)
    done = await dones.prepare(DONE_KEPT if KEPT else DONE)
    loop = asyncio.get_running_loop()
    env = dict(os.environ)
    waiting: collections.deque[asyncpg.Record] = collections.deque()  # claimed, not started
    ended: dict[int, list[int]] = {2: [], 3: []}
    results: list[tuple[int, int, int, int, float, int, str, str]] = []
    running = 0
    started = 0
    can_claim = asyncio.Event()
    can_record = asyncio.Event()

    def freed() -> None:
        nonlocal running
        running -= 1
        can_record.set()
        start()
        can_claim.set()

    def reap(fd: int, job: int) -> None:
        loop.remove_reader(fd)
        status = os.waitid(os.P_PIDFD, fd, os.WEXITED)
        os.close(fd)
        ended[2 if status is not None and status.si_status == 0 else 3].append(job)
        freed()

    def start() -> None:
        nonlocal running, started
        while running < conc and waiting:
            row = waiting.popleft()
            if KEPT:
                start_kept(row)
            else:
                pid = os.posix_spawn(TRUE, [TRUE], env)
                fd = os.pidfd_open(pid)
                loop.add_reader(fd, reap, fd, row[0])
            running += 1
            started += 1

    def start_kept(row: asyncpg.Record) -> None:
        run = Run(row)
        payload = os.memfd_create("payload", os.MFD_CLOEXEC)
        os.pwrite(payload, row["payload"].encode(), 0)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        child_env = env | {
            "RUN_ID": str(run.id), "TOKEN": str(run.token), "ATTEMPT": str(run.attempt),
            "JOB_NAME": "j", "JOB_TYPE": "true", "SCHEDULED_AT": "2026-12-06T00:00:00Z",
            "DEADLINE": "2026-12-06T01:00:00Z",
        }  # fmt: skip
        try:
            run.pid = os.posix_spawn(
                TRUE, [TRUE], child_env,
                file_actions=[(os.POSIX_SPAWN_DUP2, payload, 0),
                              (os.POSIX_SPAWN_DUP2, out_w, 1),
                              (os.POSIX_SPAWN_DUP2, err_w, 2)],
                setsid=True,
            )  # fmt: skip
        finally:
            for fd in (payload, out_w, err_w):
                os.close(fd)
        run.pidfd = os.pidfd_open(run.pid)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            run.out[fd] = bytearray()
            loop.add_reader(fd, drain, run, fd)
        loop.add_reader(run.pidfd, exited, run)

    def drain(run: Run, fd: int) -> None:
        data = os.read(fd, 65536)
        if data:
            buf = run.out[fd]
            buf += data
            del buf[:-TAIL]
            return
        loop.remove_reader(fd)
        os.close(fd)
        finish(run)

    def exited(run: Run) -> None:
        loop.remove_reader(run.pidfd)
        os.close(run.pidfd)
        _, status, usage = os.wait4(run.pid, 0)
        run.code = os.waitstatus_to_exitcode(status)
        run.cpu, run.rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
        finish(run)

    def finish(run: Run) -> None:
        run.open -= 1
        if run.open:
            return
        outs = [bytes(b).decode(errors="replace") for b in run.out.values()]
        results.append(
            (run.id, run.token, run.attempt, run.code, run.cpu, run.rss, outs[0], outs[1])
        )
        freed()

    async def claimer() -> None:
        while True:
            room = conc + ahead - running - len(waiting)
            if room < (least if running else 1):
                can_claim.clear()
                await can_claim.wait()
                continue
            got = await claim.fetch(owner, room)
            if not got:
                await asyncio.sleep(0.01)  # drained: the harness stops us
                continue
            waiting.extend(got)
            start()

    async def recorder() -> None:
        while True:
            await can_record.wait()
            can_record.clear()
            if KEPT and results:
                batch = results[:]
                results.clear()
                await done.fetch(*(list(col) for col in zip(*batch, strict=True)), owner)
            for status, jobs in ended.items():
                if jobs:
                    ids = jobs[:]
                    jobs.clear()
                    await done.fetch(ids, owner, status)

    def report() -> None:
        """On SIGTERM (the harness's stop): this worker's own CPU and its children's, per
        run it started, on stderr (the harness keeps it in the worker's log)."""
        me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        ms = {"self": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime}
        per = {k: round(1000 * v / max(1, started), 3) for k, v in ms.items()}
        print(json.dumps({"runs_started": started, "cpu_ms_per_run": per}), file=sys.stderr)
        os._exit(0)

    loop.add_signal_handler(signal.SIGTERM, report)
    await common.wait_for_go()
    await asyncio.gather(claimer(), recorder())


SPEC = common.PeerSpec(
    name=NAME,
    version="bound",
    script=__file__,
    install=install,
    enqueue=enqueue,
    done_sql="SELECT count(*) FROM floor_jobs WHERE status = 2",
    failed_sql="SELECT count(*) FROM floor_jobs WHERE status = 3",
    settings=settings,
    default_label=f"{DEFAULT_CONC} children per process",
    default_conc=DEFAULT_CONC,
    post_run=exactly_once,
)

if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(worker(sys.argv[2:]))
    elif sys.argv[1:2] == ["bench"]:
        common.bench_main(SPEC, sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} bench|worker ...")
