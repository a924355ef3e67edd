"""A small installation for the browser tests that visit every page: jobs in each state
(active, paused, unserved, a finished one-off), runs in each status with their attempts, a
live worker, and a notification delivery."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from supervisor.core import channels, jobs
from supervisor.core.events import ChannelSpec
from supervisor.core.store import Store

from .. import factory
from ..helpers import job
from ..notify_support import SECRET

WORKER = "host-a:4711"
# Ended runs of a job, with an attempt each on WORKER (as a supervisor leaves them: the
# run's lease_owner cleared, the attempt keeping the worker).
ENDED = """
WITH r AS (
    INSERT INTO runs (job_id, scheduled_at, run_after, type, max_attempts, status, attempts,
                      started_at, finished_at, last_error)
    SELECT $1, now() - make_interval(mins => g * 7), now() - make_interval(mins => g * 7),
           'echo', 3, s::run_status, 1,
           now() - make_interval(mins => g * 7) + interval '1 second',
           now() - make_interval(mins => g * 7) + interval '4 seconds',
           CASE WHEN s = 'dead' THEN 'exit code 1' END
    FROM (SELECT g, CASE WHEN g % 3 = 0 THEN 'dead' ELSE 'succeeded' END AS s
          FROM generate_series(1, 12) g) x
    RETURNING id, started_at, finished_at, status)
INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, started_at, finished_at,
                          outcome, exit_code)
SELECT id, 1, $2, 1, started_at, finished_at,
       CASE WHEN status = 'dead' THEN 'failed' ELSE 'succeeded' END::attempt_outcome,
       CASE WHEN status = 'dead' THEN 1 ELSE 0 END
FROM r
"""


@dataclass(frozen=True)
class Seeded:
    job_id: int  # hourly, with ended runs
    one_off_id: int  # a one-off whose run succeeded
    run_id: int  # an ended run of job_id


async def seed(store: Store) -> Seeded:
    hourly = await jobs.create_job(store, job("etl-hourly", cron="0 * * * *"), factory.LIMITS)
    await factory.sql(store, ENDED, hourly.id, WORKER)
    await jobs.create_job(store, job("weekly-report", "pdf", cron="0 6 * * 1"), factory.LIMITS)
    paused = await jobs.create_job(store, job("archive", cron="0 3 * * *"), factory.LIMITS)
    await jobs.set_paused(store, paused.id, True, factory.LIMITS, "migration")
    now = await store.now()
    one_off = await jobs.create_job(
        store, job("one-shot", cron=None, run_at=now + timedelta(hours=1)), factory.LIMITS
    )
    [one_run] = await factory.run_ids(store, one_off.id)
    await factory.set_run(
        store,
        one_run,
        scheduled_at=now - timedelta(minutes=5),
        started_at=now - timedelta(minutes=5),
        finished_at=now - timedelta(minutes=4),
        attempts=1,
        status="succeeded",
    )
    await store.upsert_worker(WORKER, "host-a", 4711, ["echo"], 8, "1.0.0", 30.0)
    hook = ChannelSpec("ops", "https://hooks.example.com/services/ops", secret=SECRET)
    await channels.test_channel(store, (await channels.create_channel(store, hook)).id)
    run_id = await factory.sql_value(store, "SELECT min(run_id) FROM run_attempts")
    return Seeded(hourly.id, one_off.id, run_id)
