"""Database-side helpers for e2e tests: the factory's runs and attempts, and what the handlers'
own stamps say about them."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import asyncpg

from supervisor.core.db import DB_ERRORS, connect
from supervisor.core.migrator import migrate

from ..factory import (  # re-exported: the e2e tests import them from here
    LIMITS,
    all_attempts,
    all_in,
    attempts,
    create_runs,
    runs,
    status_is,
    statuses,
)
from .procs import Execution, ThrowawayPostgres

T = TypeVar("T")

__all__ = [
    "LIMITS",
    "all_attempts",
    "all_in",
    "attempts",
    "create_runs",
    "execution_problems",
    "read_lines",
    "runs",
    "status_is",
    "statuses",
]


def read_lines(path: Path) -> list[dict[str, int]]:
    """The handlers' `run_id,lease_token,attempt,start_ns,end_ns,pid` lines."""
    if not path.exists():
        return []
    keys = ("run_id", "lease_token", "attempt", "start_ns", "end_ns", "pid")
    out = []
    for line in path.read_text().splitlines():
        values = [int(v) for v in line.split(",")]
        assert len(values) == len(keys), line
        out.append(dict(zip(keys, values, strict=True)))
    return out


def execution_problems(
    executions: list[Execution],
    history: list[asyncpg.Record],
    alive_until: Callable[[Execution], int],
) -> list[str]:
    """What the handlers' own stamps (and a pid monitor) contradict in the attempt rows.

    - no two executions of one run overlap: each starts after the one before it was last
      known alive (`alive_until`, a lower bound of its death, so no false alarms);
    - an execution is one attempt: a (run, attempt) executes at most once, under the lease
      token its attempt row carries;
    - a completed execution (it stamped its end, then exited 0) is recorded `succeeded` or
      `lease_lost` (its result came too late), nothing else;
    - an attempt given back as never started really never started;
    - every `succeeded` attempt is an execution that completed.
    """
    problems = []
    by_run: dict[int, list[Execution]] = {}
    for e in executions:
        by_run.setdefault(e.run_id, []).append(e)
    for run_id, execs in by_run.items():
        execs.sort(key=lambda e: e.start_ns)
        for i, earlier in enumerate(execs):
            for later in execs[i + 1 :]:
                overlap = alive_until(earlier) - later.start_ns
                if overlap > 0:
                    problems.append(
                        f"run {run_id}: attempt {later.attempt} (pid {later.pid}) started"
                        f" {overlap / 1e6:.1f} ms before attempt {earlier.attempt}"
                        f" (pid {earlier.pid}, supervisor pid {earlier.ppid}) was last seen alive"
                    )
        attempts_seen = Counter(e.attempt for e in execs)
        problems += [
            f"run {run_id}: attempt {a} executed {n} times"
            for a, n in attempts_seen.items()
            if n > 1
        ]
    rows = {(a["run_id"], a["attempt"]): a for a in history}
    done = {(e.run_id, e.attempt): e for e in executions}
    for key, e in done.items():
        row = rows.get(key)
        if row is None:
            problems.append(f"run {key[0]} attempt {key[1]}: executed, but no attempt row")
            continue
        if row["lease_token"] != e.lease_token:
            problems.append(f"{_name(row)}: executed under token {e.lease_token}")
        if e.end_ns is not None and row["outcome"] not in ("succeeded", "lease_lost"):
            problems.append(
                f"{_name(row)}: its handler completed, but it is recorded as {row['outcome']}"
                f" ({row['error']!r}, worker {row['worker_id']})"
            )
    for key, row in rows.items():
        ran = done.get(key)
        unstarted = row["outcome"] == "interrupted" and "unstarted" in (row["error"] or "")
        if unstarted and ran is not None:
            state = "completed" if ran.end_ns is not None else "started"
            problems.append(f"{_name(row)}: recorded {row['error']!r}, but its handler {state}")
        if row["outcome"] == "succeeded" and (ran is None or ran.end_ns is None):
            problems.append(f"{_name(row)}: recorded succeeded without a completed execution")
    return problems


def _name(row: asyncpg.Record) -> str:
    return f"run {row['run_id']} attempt {row['attempt']}"


async def tolerant(read: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    """`read()`, retried while a fault leaves dead connections in the test's pool."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await read()
        except DB_ERRORS:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)  # the next acquire replaces the dead connection


async def start_migrated(server: ThrowawayPostgres) -> str:
    """Start a throwaway server and migrate it; its DSN."""
    dsn = await asyncio.to_thread(server.start)
    conn = await connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return dsn
