"""Liveness and readiness, shared by the API and the supervisor's metrics port.

Ready means: the database answers, its schema is what this build expects, and no due run
has waited longer than the threshold (else the answer names the oldest late runs). Channels
whose deliveries have all failed for an hour are listed as a warning, ready or not.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from supervisor.core.channels import Notifications
from supervisor.core.db import DB_ERRORS
from supervisor.core.errors import SchemaMismatch
from supervisor.core.metrics import EXACT_BELOW, DatabaseSnapshot
from supervisor.core.migrator import pending_migrations
from supervisor.core.store import Store

FAILING_FOR = 3600.0  # a channel with no delivery this long while its events wait: a warning


async def readiness(pool: asyncpg.Pool, max_lag: float) -> tuple[bool, dict[str, Any]]:
    try:
        async with pool.acquire(timeout=5) as conn:
            pending = await pending_migrations(conn)
            late = await Store(conn).late_runs(max_lag, 10)
            failing = [] if pending else await Notifications(conn).failing_channels(FAILING_FOR)
    except SchemaMismatch as exc:
        return False, {"status": "unready", "reason": "schema", "detail": str(exc)}
    except DB_ERRORS as exc:
        return False, {"status": "unready", "reason": "database", "detail": repr(exc)}
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
