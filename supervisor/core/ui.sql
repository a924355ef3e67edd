-- The dashboard's queries (api/ui through supervisor/core/dashboard.py), one method each.
-- Lists are keyset pages; per-job facts come from a few probes of runs_job_scheduled_at
-- (job_id, scheduled_at) per listed job, never from a scan of runs. scheduled_at is unique
-- within a job, so a job's runs are ordered by it alone.

-- name: ui_jobs_by_name
-- The jobs list by name: name substring $1 (case-insensitive, NULL: any), type $2, paused
-- $3, last run status $4 (NULL: any), among the jobs $7 (NULL: any); names after $5
-- (keyset; '' for the first page), at most $6. Scans jobs in name order (jobs_name_live); the three laterals probe
-- runs_job_scheduled_at for the listed jobs only, the last run first so that a last-status
-- filter drops a job before its other two probes.
SELECT j.id, j.name, j.type, j.cron, j.run_at, j.timezone, j.paused, j.pause_reason,
       nx.scheduled_at AS next_at, lr.status::text AS last_status,
       coalesce(lr.finished_at, lr.started_at, lr.scheduled_at) AS last_at,
       lr.id AS last_run_id, lr.skip_reason::text AS last_skip_reason,
       sr.total AS recent_total, sr.succeeded AS recent_succeeded
FROM jobs j
LEFT JOIN LATERAL (
    SELECT r.id, r.status, r.scheduled_at, r.started_at, r.finished_at, r.skip_reason FROM runs r
    WHERE r.job_id = j.id AND r.scheduled_at <= now() AND r.status <> 'scheduled'
    ORDER BY r.scheduled_at DESC LIMIT 1) lr ON true
LEFT JOIN LATERAL (
    SELECT r.scheduled_at FROM runs r
    WHERE r.job_id = j.id AND r.scheduled_at > now() AND r.status = 'scheduled'
    ORDER BY r.scheduled_at LIMIT 1) nx ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE x.status = 'succeeded') AS succeeded
    FROM (SELECT r.status FROM runs r
          WHERE r.job_id = j.id AND r.scheduled_at <= now()
            AND r.status IN ('succeeded', 'dead', 'failed')
          ORDER BY r.scheduled_at DESC LIMIT 20) x) sr ON true
WHERE j.deleted_at IS NULL
  AND ($1::text IS NULL OR strpos(lower(j.name), lower($1::text)) > 0)
  AND ($2::text IS NULL OR j.type = $2::text)
  AND ($3::bool IS NULL OR j.paused = $3::bool)
  AND ($4::text IS NULL OR lr.status::text = $4::text)
  AND ($7::bigint[] IS NULL OR j.id = ANY ($7::bigint[]))
  AND j.name > $5::text
ORDER BY j.name
LIMIT $6::int;

-- name: ui_job_last_statuses
-- Every live job's last run status (the probe above, once per job: about 6 us each), in
-- name order: the last-status filter's candidates (pages_jobs keeps them as a snapshot).
SELECT j.id, j.name, j.type, j.paused, lr.status::text AS status
FROM jobs j
CROSS JOIN LATERAL (
    SELECT r.status FROM runs r
    WHERE r.job_id = j.id AND r.scheduled_at <= now() AND r.status <> 'scheduled'
    ORDER BY r.scheduled_at DESC LIMIT 1) lr
WHERE j.deleted_at IS NULL
ORDER BY j.name;

-- name: ui_jobs_by_next
-- The same list soonest next run first, for jobs that have one: walks the planned runs in
-- time order (runs_status_history), keeps each job's first (a runs_job_scheduled_at probe), then
-- joins and filters its job. Keyset ($5, $6) on (that run's scheduled_at, its id); at most
-- $7. The rows walked grow with the time span the page covers, not with the history.
SELECT j.id, j.name, j.type, j.cron, j.run_at, j.timezone, j.paused, j.pause_reason,
       n.scheduled_at AS next_at, n.id AS next_run_id,
       lr.status::text AS last_status,
       coalesce(lr.finished_at, lr.started_at, lr.scheduled_at) AS last_at,
       lr.id AS last_run_id, lr.skip_reason::text AS last_skip_reason,
       sr.total AS recent_total, sr.succeeded AS recent_succeeded
FROM runs n
JOIN jobs j ON j.id = n.job_id
LEFT JOIN LATERAL (
    SELECT r.id, r.status, r.scheduled_at, r.started_at, r.finished_at, r.skip_reason FROM runs r
    WHERE r.job_id = j.id AND r.scheduled_at <= now() AND r.status <> 'scheduled'
    ORDER BY r.scheduled_at DESC LIMIT 1) lr ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE x.status = 'succeeded') AS succeeded
    FROM (SELECT r.status FROM runs r
          WHERE r.job_id = j.id AND r.scheduled_at <= now()
            AND r.status IN ('succeeded', 'dead', 'failed')
          ORDER BY r.scheduled_at DESC LIMIT 20) x) sr ON true
WHERE n.status = 'scheduled'
  AND (n.scheduled_at, n.id) > (greatest($5::timestamptz, now()), $6::bigint)
  AND NOT EXISTS (
      SELECT 1 FROM runs e
      WHERE e.job_id = n.job_id AND e.status = 'scheduled'
        AND e.scheduled_at > now() AND e.scheduled_at < n.scheduled_at)
  AND j.deleted_at IS NULL
  AND ($1::text IS NULL OR strpos(lower(j.name), lower($1::text)) > 0)
  AND ($2::text IS NULL OR j.type = $2::text)
  AND ($3::bool IS NULL OR j.paused = $3::bool)
  AND ($4::text IS NULL OR lr.status::text = $4::text)
ORDER BY n.scheduled_at, n.id
LIMIT $7::int;

-- name: ui_job_types
-- The handler types of live jobs, for the type filter: a skip scan of jobs_type_live, one
-- probe per distinct type (DISTINCT would read every job).
WITH RECURSIVE t AS (
    (SELECT type FROM jobs WHERE deleted_at IS NULL ORDER BY type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM jobs j WHERE j.deleted_at IS NULL AND j.type > t.type
            ORDER BY j.type LIMIT 1)
    FROM t WHERE t.type IS NOT NULL
)
SELECT type FROM t WHERE type IS NOT NULL;

-- ---------------------------------------------------------------- overview
-- Each count reads one index range, never the whole of runs: open runs from the partial
-- indexes (runs_claimable_by_type one type at a time, runs_running_lease), a window of
-- history from runs_status_history (status, scheduled_at) one status at a time.

-- name: ui_open_counts
WITH RECURSIVE {{claimable_types}}, open AS (
    SELECT o.due, o.planned FROM claimable_types t CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE run_after <= now()) AS due,
               count(*) FILTER (WHERE run_after > now()) AS planned
        FROM runs WHERE type = t.type AND status IN ('scheduled', 'failed')) o
)
SELECT (SELECT coalesce(sum(due), 0)::bigint FROM open) AS due,
    (SELECT coalesce(sum(planned), 0)::bigint FROM open) AS planned,
    (SELECT count(*) FROM runs WHERE status = 'running') AS running;

-- name: ui_status_counts
-- Runs scheduled within the last $1 seconds (and due by now), per status.
SELECT s.status::text AS status,
       (SELECT count(*) FROM runs r
        WHERE r.status = s.status AND r.scheduled_at > now() - make_interval(secs => $1::float8)
          AND r.scheduled_at <= now()) AS n
FROM unnest(enum_range(NULL::run_status)) AS s(status);

-- name: ui_outcome_buckets
-- Runs that ended within the last $1 seconds, per $2-second bucket of finished_at (aligned
-- on the epoch: when they ran, so a backfill of last week's instants shows now) and per
-- status (succeeded, failed, dead). A range of runs_finished.
SELECT date_bin(make_interval(secs => $2::float8), r.finished_at, 'epoch') AS bucket,
       r.status::text AS status, count(*) AS n
FROM runs r
WHERE r.status IN ('succeeded', 'failed', 'dead')
  AND r.finished_at > now() - make_interval(secs => $1::float8) AND r.finished_at <= now()
GROUP BY 1, 2;

-- name: ui_lateness
-- Start lateness (first attempt's start - scheduled_at) of the latest $2 runs scheduled
-- within the last $1 seconds (runs_status_history backwards, each status's range, merged):
-- p50, p99, and how many were measured. Only runs due at their instant: a backfilled run's
-- instant passed before it was created, and a requeued one starts again (attempts > 1).
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY late) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY late) AS p99,
       count(*) AS n
FROM (SELECT EXTRACT(EPOCH FROM (r.started_at - r.scheduled_at))::float8 AS late
      FROM (
          -- each status:
          (SELECT * FROM runs x
           WHERE x.status = '{status}'
             AND x.scheduled_at > now() - make_interval(secs => $1::float8)
             AND x.scheduled_at <= now() AND x.started_at IS NOT NULL AND x.attempts = 1
             AND x.trigger <> 'backfill'
           ORDER BY x.scheduled_at DESC, x.id DESC
           LIMIT $2::int)
          -- end each
      ) r
      ORDER BY r.scheduled_at DESC, r.id DESC
      LIMIT $2::int) x;

-- name: ui_fill_hours
-- Writes up to $1 rows of run_hours, newest first: closed hours of the last week that have
-- no row, or whose row was computed while the hour was younger than a day (a requeue may
-- take a run out of it; late first attempts may start) and more than 10 minutes ago. Per
-- hour: the runs that ended in it by status (one range of runs_finished: when they ran),
-- and the start lateness of the first attempts scheduled in it from runs_status_history
-- (every status's range: the status list is an index condition), backfilled runs left out
-- as in ui_lateness.
-- Hours are epoch-aligned (date_bin), as ui_outcome_buckets' are.
-- Rows older than 8 days are deleted. Returns the hours written.
WITH want AS (
    SELECT h.hour FROM generate_series(date_bin('1 hour', now(), 'epoch') - interval '167 hours',
                                       date_bin('1 hour', now(), 'epoch') - interval '1 hour',
                                       interval '1 hour') AS h(hour)
    LEFT JOIN run_hours x ON x.hour = h.hour
    WHERE x.hour IS NULL
       OR (x.computed_at < x.hour + interval '25 hours'
           AND x.computed_at < now() - interval '10 minutes')
    ORDER BY h.hour DESC
    LIMIT $1::int
), pruned AS (
    DELETE FROM run_hours WHERE hour < now() - interval '8 days'
)
INSERT INTO run_hours AS o (hour, succeeded, failed, dead, late_n, late_p50, late_p99,
                            computed_at)
SELECT w.hour, c.succeeded, c.failed, c.dead, l.n, l.p50, l.p99, now()
FROM want w
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE r.status = 'failed') AS failed,
           count(*) FILTER (WHERE r.status = 'dead') AS dead
    FROM runs r
    WHERE r.finished_at >= w.hour AND r.finished_at < w.hour + interval '1 hour'
      AND r.status IN ('succeeded', 'failed', 'dead')) c
CROSS JOIN LATERAL (
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x.late) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY x.late) AS p99, count(*) AS n
    FROM (SELECT EXTRACT(EPOCH FROM (r.started_at - r.scheduled_at))::float8 AS late
          FROM runs r
          WHERE r.status = ANY (enum_range(NULL::run_status))
            AND r.scheduled_at >= w.hour AND r.scheduled_at < w.hour + interval '1 hour'
            AND r.started_at IS NOT NULL AND r.attempts = 1
            AND r.trigger <> 'backfill') x) l
ON CONFLICT (hour) DO UPDATE SET succeeded = EXCLUDED.succeeded, failed = EXCLUDED.failed,
    dead = EXCLUDED.dead, late_n = EXCLUDED.late_n, late_p50 = EXCLUDED.late_p50,
    late_p99 = EXCLUDED.late_p99, computed_at = EXCLUDED.computed_at
RETURNING o.hour;

-- name: ui_week_hours
-- The run_hours rows of the last week (primary key range), oldest first.
SELECT hour, succeeded, failed, dead, late_n, late_p50, late_p99 FROM run_hours
WHERE hour >= date_bin('1 hour', now(), 'epoch') - interval '167 hours'
ORDER BY hour;

-- name: ui_unserved_jobs
-- Active jobs whose type no live worker offers (a scan of jobs, never of runs).
SELECT j.id, j.name, j.type FROM jobs j
WHERE NOT j.paused AND j.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM workers w WHERE worker_is_live(w) AND j.type = ANY (w.types))
ORDER BY j.name
LIMIT $1::int;

-- ---------------------------------------------------------------- job detail
-- Both read one job's range of runs_job_scheduled_at (job_id, scheduled_at), backwards.

-- name: ui_job_timeline
-- Job $1's runs scheduled in [$2, $3], latest first, at most $4 (the timeline's marks).
SELECT r.id, r.scheduled_at, r.status::text AS status, r.skip_reason, r.trigger::text AS trigger,
       r.last_error
FROM runs r
WHERE r.job_id = $1::bigint AND r.scheduled_at >= $2::timestamptz
  AND r.scheduled_at <= $3::timestamptz
ORDER BY r.scheduled_at DESC
LIMIT $4::int;

-- name: ui_job_durations
-- Job $1's latest $2 ended runs (due by now) with how long their last attempt ran.
SELECT r.id, r.scheduled_at, r.status::text AS status,
       EXTRACT(EPOCH FROM (r.finished_at - r.started_at))::float8 AS seconds
FROM runs r
WHERE r.job_id = $1::bigint AND r.scheduled_at <= now()
  AND r.status IN ('succeeded', 'failed', 'dead')
  AND r.started_at IS NOT NULL AND r.finished_at IS NOT NULL
ORDER BY r.scheduled_at DESC
LIMIT $2::int;

-- ---------------------------------------------------------------- runs

-- name: ui_count_requeueable
-- How many runs a bulk requeue with these filters would move (requeue_runs's WHERE),
-- counted up to $7 (the page then says "at least"): statuses $1 (dead, failed) of live
-- jobs, of the jobs $2 (NULL: any), scheduled in [$3, $4), finished in [$5, $6) (NULL:
-- open). The outer WHERE is pushed into both branches: with jobs, each one's range of
-- runs_job_scheduled_at; without (a one-time filter on $2), runs_status_history per status.
SELECT count(*) AS n FROM (
    SELECT 1 FROM (
        SELECT r.* FROM unnest($2::bigint[]) AS g(id) JOIN runs r ON r.job_id = g.id
        UNION ALL
        SELECT r.* FROM runs r WHERE $2::bigint[] IS NULL
    ) r
    JOIN jobs j ON j.id = r.job_id
    WHERE j.deleted_at IS NULL
      AND r.status = ANY ($1::run_status[]) AND r.status IN ('dead', 'failed')
      AND r.scheduled_at >= $3::timestamptz AND r.scheduled_at < $4::timestamptz
      AND ($5::timestamptz IS NULL OR r.finished_at >= $5::timestamptz)
      AND ($6::timestamptz IS NULL OR r.finished_at < $6::timestamptz)
    LIMIT $7::int
) x;
