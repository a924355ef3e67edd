"""The test factory: jobs and runs made, aged and read directly in the database.

What tests need below the Store's runtime queries (a run due now, a lease aged instead of
waited out, a row read back to assert on) goes through these functions, so no test reaches
into the Store's executor. `raw` is the one place that does. The `sql*` functions are for
the statements that are themselves the point of one test; say so in a comment where used.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from supervisor.core import jobs
from supervisor.core.db import Conn, Record
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

from .helpers import job

LIMITS = PlanLimits()


def raw(store: Store) -> asyncpg.Pool | Conn:
    """The pool or connection under `store` (inside `store.transaction()`, its connection)."""
    return store._ex


# Making jobs and runs.


async def due_run(store: Store, name: str, **job_fields: Any) -> int:
    """A one-off job `name` (type echo unless given) due a second ago; its one run's id."""
    now = await store.now()
    spec = job(name, cron=None, run_at=now - timedelta(seconds=1), **job_fields)
    row = await jobs.create_job(store, spec, LIMITS)
    [run_id] = await run_ids(store, row.id)
    return run_id


async def create_runs(
    store: Store, type_: str, n: int, payload: dict[str, Any], prefix: str | None = None, **kw: Any
) -> list[int]:
    """`n` one-off jobs of `type_` due now, committed (and announced) in one transaction.

    Supervisors see all of them at once, so none gets a head start on part of the batch.
    """
    prefix = prefix or type_
    async with store.transaction() as tx:
        now = await tx.now()
        job_ids = []
        for i in range(n):
            fields = job(f"{prefix}-{i}", type_, cron=None, run_at=now, payload=payload, **kw)
            job_ids.append((await jobs.create_job(tx, fields, LIMITS)).id)
        rows = await raw(tx).fetch(
            "SELECT id FROM runs WHERE job_id = ANY($1::bigint[]) ORDER BY id", job_ids
        )
    assert len(rows) == n
    return [r["id"] for r in rows]


async def insert_runs(
    store: Store, job_id: int, count: int, *, status: str = "succeeded", start_s: int = 0
) -> list[int]:
    """`count` runs of a job, one second apart going back from now - start_s seconds."""
    rows = await raw(store).fetch(
        """insert into runs (job_id, scheduled_at, run_after, type, max_attempts, status,
                             attempts, started_at, finished_at)
           select $1, now() - make_interval(secs => $3 + g), now() - make_interval(secs => $3 + g),
                  'echo', 3, $4::run_status, 1,
                  now() - make_interval(secs => $3 + g) + interval '1 second',
                  case when $4 in ('succeeded', 'dead', 'cancelled', 'skipped')
                       then now() - make_interval(secs => $3 + g) + interval '3 seconds' end
           from generate_series(1, $2) g returning id""",
        job_id,
        count,
        float(start_s),
        status,
    )
    return [r["id"] for r in rows]


# Changing rows: time moves through data.


async def age_lease(store: Store, run_id: int, seconds: float) -> None:
    """Make `run_id`'s lease expire `seconds` from now (negative: expired that long ago)."""
    await raw(store).execute(
        "UPDATE runs SET lease_expires_at = now() + make_interval(secs => $2) WHERE id = $1",
        run_id,
        float(seconds),
    )


async def set_run(store: Store, run_id: int, **columns: Any) -> None:
    """Set columns of one run to the given values (parameters, not SQL)."""
    await _update(store, "runs", run_id, columns)


async def set_job(store: Store, job_id: int, **columns: Any) -> None:
    """Set columns of one job to the given values (parameters, not SQL)."""
    await _update(store, "jobs", job_id, columns)


async def finish_run(store: Store, run_id: int, status: str = "succeeded") -> None:
    """Mark a run ended with `status`, finished now."""
    await raw(store).execute(
        "UPDATE runs SET status = $2::run_status, finished_at = now() WHERE id = $1",
        run_id,
        status,
    )


async def delete_runs(store: Store, job_id: int) -> None:
    """Delete every run of a job, as if no host had planned it yet."""
    await raw(store).execute("DELETE FROM runs WHERE job_id = $1", job_id)


async def make_jobs_due(store: Store) -> None:
    """Every job due for planning now, as if its plan mark had passed."""
    await raw(store).execute("UPDATE jobs SET plan_after = '-infinity'")


async def age_worker(store: Store, worker_id: str, seconds: float) -> None:
    """A worker last seen `seconds` ago."""
    await raw(store).execute(
        "UPDATE workers SET last_seen_at = now() - make_interval(secs => $2) WHERE id = $1",
        worker_id,
        float(seconds),
    )


async def _update(store: Store, table: str, id_: int, columns: dict[str, Any]) -> None:
    assert columns, "no columns to set"
    sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(columns, start=2))
    status = await raw(store).execute(
        f"UPDATE {table} SET {sets} WHERE id = $1", id_, *columns.values()
    )
    assert status == "UPDATE 1", f"{table} {id_}: {status}"


# Reading rows back.


async def count(store: Store, table: str, where: str = "true", *args: Any) -> int:
    """Rows of `table` (runs, jobs, run_attempts, workers) matching the SQL `where`."""
    return int(await raw(store).fetchval(f"SELECT count(*) FROM {table} WHERE {where}", *args))


async def seconds_until(store: Store, table: str, column: str, id_: int) -> float:
    """How far in the future (negative: past) a timestamp column of one row is."""
    value = await raw(store).fetchval(
        f"SELECT extract(epoch FROM {column} - now()) FROM {table} WHERE id = $1", id_
    )
    assert value is not None, f"{table} {id_}: no {column}"
    return float(value)


async def run_ids(store: Store, job_id: int | None = None) -> list[int]:
    """The ids of all runs (or a job's), in id order."""
    rows = await raw(store).fetch(
        "SELECT id FROM runs WHERE $1::bigint IS NULL OR job_id = $1 ORDER BY id", job_id
    )
    return [r["id"] for r in rows]


async def run_row(store: Store, run_id: int) -> Record | None:
    """One run's row (enums decode as text), None if there is no such run."""
    return await raw(store).fetchrow("SELECT * FROM runs WHERE id = $1", run_id)


async def job_row(store: Store, job_id: int) -> Record | None:
    """One job's row as stored."""
    return await raw(store).fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)


async def job_rows(store: Store) -> list[Record]:
    """Every job row as stored, in id order."""
    return await raw(store).fetch("SELECT * FROM jobs ORDER BY id")


async def job_runs(store: Store, job_id: int, until: datetime | None = None) -> list[Record]:
    """A job's runs (only those scheduled at or before `until` if given), in schedule order."""
    return await raw(store).fetch(
        "SELECT * FROM runs WHERE job_id = $1"
        " AND ($2::timestamptz IS NULL OR scheduled_at <= $2) ORDER BY scheduled_at, id",
        job_id,
        until,
    )


async def worker_rows(store: Store) -> list[Record]:
    """Every worker row as stored, in id order."""
    return await raw(store).fetch("SELECT * FROM workers ORDER BY id")


async def runs(store: Store, ids: list[int]) -> dict[int, Record]:
    """The rows of runs `ids`, by id."""
    rows = await raw(store).fetch("SELECT * FROM runs WHERE id = ANY($1::bigint[])", ids)
    return {r["id"]: r for r in rows}


async def status(store: Store, run_id: int) -> str | None:
    """A run's status, None if there is no such run."""
    value = await raw(store).fetchval("SELECT status::text FROM runs WHERE id = $1", run_id)
    return None if value is None else str(value)


async def status_is(store: Store, run_id: int, wanted: str) -> bool:
    return await status(store, run_id) == wanted


async def statuses(store: Store, ids: list[int]) -> dict[str, int]:
    """How many of runs `ids` are in each status."""
    rows = await raw(store).fetch(
        "SELECT status::text, count(*) FROM runs WHERE id = ANY($1::bigint[]) GROUP BY 1", ids
    )
    return {r["status"]: r["count"] for r in rows}


async def all_in(store: Store, ids: list[int], *wanted: str) -> bool:
    got = await statuses(store, ids)
    return sum(got.get(s, 0) for s in wanted) == len(ids)


async def attempts(store: Store, run_id: int) -> list[Record]:
    """A run's attempt rows in order, outcomes as text."""
    return await raw(store).fetch(
        "SELECT *, outcome::text AS outcome FROM run_attempts WHERE run_id = $1 ORDER BY attempt",
        run_id,
    )


async def all_attempts(store: Store, ids: list[int] | None = None) -> list[Record]:
    """The attempt rows of runs `ids` (of every run if None), by run and attempt."""
    return await raw(store).fetch(
        "SELECT *, outcome::text AS outcome FROM run_attempts"
        " WHERE $1::bigint[] IS NULL OR run_id = ANY($1::bigint[]) ORDER BY run_id, attempt",
        ids,
    )


async def outcome(store: Store, run_id: int, attempt: int = 1) -> str | None:
    """How attempt `attempt` of a run ended (None while it runs, or if there is none)."""
    value = await raw(store).fetchval(
        "SELECT outcome::text FROM run_attempts WHERE run_id = $1 AND attempt = $2",
        run_id,
        attempt,
    )
    return None if value is None else str(value)


# One-off statements that are the point of a test (say so where used).


async def sql(store: Store, query: str, *args: Any) -> str:
    return await raw(store).execute(query, *args)


async def sql_rows(store: Store, query: str, *args: Any) -> list[Record]:
    return await raw(store).fetch(query, *args)


async def sql_row(store: Store, query: str, *args: Any) -> Record | None:
    return await raw(store).fetchrow(query, *args)


async def sql_value(store: Store, query: str, *args: Any) -> Any:
    return await raw(store).fetchval(query, *args)


async def manual_runs(store: Store, type_: str, ages: list[float]) -> int:
    """A new job of `type_` (never due itself) with manual runs due `ages` seconds ago
    (negative: ahead); the job's id."""
    row = await store.insert_job(job(f"job-{type_}", type_, cron="0 0 1 1 *"))
    await raw(store).execute(
        "INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, max_attempts)"
        " SELECT $1, now() - make_interval(secs => a), now() - make_interval(secs => a),"
        " 'manual', $2, 3 FROM unnest($3::float8[]) a",
        row.id,
        type_,
        ages,
    )
    return int(row.id)
