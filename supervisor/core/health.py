"""Liveness and readiness, shared by the API and the supervisor's metrics port.

The API's readiness: the database answers, its schema is what this build expects, and no
due run has waited longer than the threshold (else the answer names the oldest late runs).
Channels whose deliveries have all failed for an hour are listed as a warning, ready or
not. It is computed at most once per CACHE_FOR seconds per process and shared by concurrent
callers (SharedReadiness), so a flood of /readyz costs the database nothing more.

The supervisor's readiness (beat_readiness) asks the database nothing: its one connection
renews leases, so its side door answers from the heartbeater's last answered beat.

Anyone may learn the status and a one-word reason (public_view); the details (job names,
types, channel names) are for token holders. Database error text (host, port, user) goes to
the log only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from supervisor.core.channels import Notifications
from supervisor.core.db import CONNECT_ERRORS, DB_ERRORS
from supervisor.core.errors import SchemaMismatch
from supervisor.core.log import log_event
from supervisor.core.metrics import EXACT_BELOW, DatabaseSnapshot
from supervisor.core.migrator import pending_migrations
from supervisor.core.store import Store

log = logging.getLogger("punchclock.health")
FAILING_FOR = 3600.0  # a channel with no delivery this long while its events wait: a warning
CACHE_FOR = 1.0  # seconds a computed readiness answers every /readyz of this process
Readiness = tuple[bool, dict[str, Any]]
WARNINGS = frozenset({"failing_channels", "unplannable_jobs"})  # kinds anyone may learn of


async def readiness(pool: asyncpg.Pool, max_lag: float) -> tuple[bool, dict[str, Any]]:
    try:
        async with pool.acquire(timeout=5) as conn:
            pending = await pending_migrations(conn)
            late = await Store(conn).late_runs(max_lag, 10)
            failing = [] if pending else await Notifications(conn).failing_channels(FAILING_FOR)
    except SchemaMismatch as exc:
        return False, {"status": "unready", "reason": "schema", "detail": str(exc)}
    except (*DB_ERRORS, *CONNECT_ERRORS) as exc:  # CONNECT_ERRORS: a refused login too
        # The error's text names the server's host, port and user: the log has it, the
        # answer only its kind.
        log_event(log, "ready_database_error", level=logging.WARNING, error=repr(exc))
        detail = f"the database does not answer ({type(exc).__name__}; the log has details)"
        return False, {"status": "unready", "reason": "database", "detail": detail}
    if pending:
        return False, {
            "status": "unready",
            "reason": "migrations",
            "detail": f"pending migrations: {', '.join(pending)}",
        }
    warn: dict[str, Any] = {}
    if failing:
        warn["failing_channels"] = [
            {
                "channel_id": r["id"],
                "channel_name": r["name"],
                "failing_since": r["since"].isoformat(),
                "pending_deliveries": r["pending"],
            }
            for r in failing
        ]
    if late:
        return False, {
            **warn,
            "status": "unready",
            "reason": "late_runs",
            "detail": f"{len(late)}+ due run(s) waited longer than {max_lag:g}s",
            "late_runs": [
                {
                    "run_id": r["id"],
                    "job_id": r["job_id"],
                    "job_name": r["job_name"],
                    "type": r["type"],
                    "due_at": r["run_after"].isoformat(),
                    "late_seconds": round(r["late_seconds"], 3),
                    "type_offered_by_live_worker": r["offered"],
                }
                for r in late
            ],
        }
    return True, {"status": "ready", **warn}


def public_view(ok: bool, body: dict[str, Any]) -> dict[str, Any]:
    """What an anonymous caller may see: the status, a one-word reason, and the kinds of
    warning present (e.g. `failing_channels`), never their content."""
    view: dict[str, Any] = {"status": body.get("status", "ready" if ok else "unready")}
    if not ok:
        view["reason"] = body.get("reason", "unknown")
    warnings = sorted(k for k, v in body.items() if k in WARNINGS and v)
    if warnings:
        view["warnings"] = warnings
    return view


class SharedReadiness:
    """`compute` run at most once per `ttl` seconds, one call at a time: concurrent callers
    await the one in flight and share its answer. `computed` counts the calls made."""

    def __init__(
        self,
        compute: Callable[[], Awaitable[Readiness]],
        ttl: float = CACHE_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute, self.ttl, self._clock = compute, ttl, clock
        self._last: Readiness | None = None
        self._at = 0.0
        self._running: asyncio.Future[Readiness] | None = None
        self.computed = 0

    async def get(self) -> Readiness:
        if self._last is not None and self._clock() - self._at < self.ttl:
            return self._copy(self._last)
        if self._running is None:
            self._running = asyncio.ensure_future(self._refresh())
        # Shielded: a caller that hangs up does not cancel the others' answer.
        return self._copy(await asyncio.shield(self._running))

    async def _refresh(self) -> Readiness:
        try:
            self.computed += 1
            result = await self._compute()
            self._last, self._at = result, self._clock()
            return result
        finally:
            self._running = None

    @staticmethod
    def _copy(result: Readiness) -> Readiness:
        return result[0], dict(result[1])  # callers add to the body


def beat_readiness(beat_age: float | None, stale_after: float) -> Readiness:
    """A supervisor's readiness from state it has: the age (seconds) of its heartbeater's
    last answered beat, None before the first. Stale beyond `stale_after`: the database
    (or the way to it) fails this host."""
    if beat_age is None:
        return False, {"status": "unready", "reason": "starting", "detail": "no beat answered yet"}
    if beat_age > stale_after:
        detail = f"no heartbeat answered for {beat_age:.1f}s (the limit is {stale_after:g}s)"
        return False, {"status": "unready", "reason": "database", "detail": detail}
    return True, {"status": "ready", "last_beat_seconds": round(beat_age, 3)}


async def database_snapshot(
    store: Store, max_jobs: int = 1000, exact_below: int = EXACT_BELOW
) -> DatabaseSnapshot:
    row = await store.database_gauges(exact_below)
    ages = await store.last_success_ages(max_jobs)
    return DatabaseSnapshot(
        runs_by_status=dict(row["runs_by_status"]),
        runs_estimated=frozenset(row["runs_estimated"]),
        due_waiting=row["due_waiting"],
        oldest_due_age=row["oldest_due_age"],
        live_workers=row["live_workers"],
        unserved_jobs=row["unserved_jobs"],
        jobs_behind=row["jobs_behind"],
        last_success_age={r["name"]: r["age"] for r in ages if r["age"] is not None},
    )
