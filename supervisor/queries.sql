-- Every SQL statement punchclock runs, one named block per Store method (same name).
-- Parameters are positional with explicit casts; all times come from the database clock.

-- name: now
SELECT now();

-- name: notify_wake
SELECT pg_notify('punchclock_wake', '');

-- ---------------------------------------------------------------- jobs

-- name: insert_job
INSERT INTO jobs (name, type, payload, cron, run_at, timezone, max_attempts, timeout_seconds,
                  retry_base_seconds, retry_cap_seconds, catchup, catchup_window_seconds,
                  overlap, paused)
VALUES ($1::text, $2::text, $3::jsonb, $4::text, $5::timestamptz, $6::text, $7::int,
        $8::float8, $9::float8, $10::float8, $11::catchup_policy, $12::float8,
        $13::overlap_policy, $14::bool)
RETURNING *;

-- name: get_job
SELECT * FROM jobs WHERE id = $1::bigint AND deleted_at IS NULL;

-- name: get_job_by_name
SELECT * FROM jobs WHERE name = $1::text AND deleted_at IS NULL;

-- name: lock_job
SELECT * FROM jobs WHERE id = $1::bigint AND deleted_at IS NULL FOR UPDATE;

-- name: list_jobs
SELECT * FROM jobs
WHERE deleted_at IS NULL
  AND ($1::text IS NULL OR type = $1::text)
  AND ($2::bool IS NULL OR paused = $2::bool)
  AND ($3::text IS NULL OR starts_with(name, $3::text))
  AND id > $4::bigint
ORDER BY id
LIMIT $5::int;

-- name: update_job
UPDATE jobs SET
    name = $2::text, type = $3::text, payload = $4::jsonb, cron = $5::text,
    run_at = $6::timestamptz, timezone = $7::text, max_attempts = $8::int,
    timeout_seconds = $9::float8, retry_base_seconds = $10::float8,
    retry_cap_seconds = $11::float8, catchup = $12::catchup_policy,
    catchup_window_seconds = $13::float8, overlap = $14::overlap_policy, paused = $15::bool,
    updated_at = now()
WHERE id = $1::bigint AND deleted_at IS NULL
RETURNING *;

-- name: reset_job_plan
-- After a schedule change: plan again from now (missed times before the change are not
-- the new schedule's), and at once.
UPDATE jobs SET planned_until = now(), plan_after = '-infinity'
WHERE id = $1::bigint;

-- name: delete_unstarted_future_runs
-- Runs that never started and lie in the future no longer match a changed schedule.
DELETE FROM runs
WHERE job_id = $1::bigint AND status = 'scheduled' AND attempts = 0
  AND trigger = 'schedule' AND scheduled_at > now();

-- name: sync_unstarted_runs
-- Keep the copies of job fields on unstarted runs in step with the job.
UPDATE runs SET type = $2::text, exclusive = $3::bool,
    max_attempts = attempts + $4::int
WHERE job_id = $1::bigint AND status IN ('scheduled', 'failed');

-- name: soft_delete_job
UPDATE jobs SET deleted_at = now(), updated_at = now(), paused = true
WHERE id = $1::bigint AND deleted_at IS NULL
RETURNING *;

-- name: cancel_unstarted_runs
UPDATE runs SET status = 'cancelled', finished_at = now(), last_error = $2::text
WHERE job_id = $1::bigint AND status IN ('scheduled', 'failed');

-- name: set_job_paused
UPDATE jobs SET paused = $2::bool, updated_at = now(),
    plan_after = CASE WHEN $2::bool THEN plan_after ELSE '-infinity' END
WHERE id = $1::bigint AND deleted_at IS NULL
RETURNING *;

-- ---------------------------------------------------------------- planning

-- name: pick_jobs_to_plan
-- Jobs whose planned horizon has grown short. SKIP LOCKED lets several planners split the
-- work; the row lock is held until the runs are inserted and the mark moved.
SELECT j.*, now() AS db_now FROM jobs j
WHERE NOT j.paused AND j.deleted_at IS NULL AND j.plan_after <= now()
ORDER BY j.plan_after
LIMIT $1::int
FOR UPDATE SKIP LOCKED;

-- name: insert_planned_runs
INSERT INTO runs (job_id, scheduled_at, run_after, type, exclusive, max_attempts, status,
                  skip_reason, finished_at)
SELECT job_id, at, at, type, excl, max_att, st::run_status, reason,
       CASE WHEN st = 'skipped' THEN now() END
FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::bool[], $5::int[], $6::text[],
            $7::text[]) AS t(job_id, at, type, excl, max_att, st, reason)
ON CONFLICT (job_id, scheduled_at) DO NOTHING;

-- name: set_plan_marks
UPDATE jobs j SET planned_until = t.until, plan_after = t.after
FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[]) AS t(id, until, after)
WHERE j.id = t.id;

-- name: count_jobs_behind
SELECT count(*) FROM jobs
WHERE NOT paused AND deleted_at IS NULL AND plan_after <= now();

-- name: skip_missed_runs
-- Catch-up policy, applied before claiming. A run is missed when it never started and is
-- older than the misfire grace. 'none' skips every missed run; 'latest' all but the newest
-- of a job; every policy skips missed runs older than the job's catch-up window. Overlap
-- 'skip' jobs skip due runs while another run of the job is running.
-- Two index range scans keep it cheap on every claim: old unstarted runs, and due runs of
-- exclusive jobs.
WITH due AS (
    SELECT r.id, r.job_id, r.scheduled_at, r.exclusive FROM runs r
    WHERE r.id IN (
        (SELECT id FROM runs WHERE status IN ('scheduled', 'failed')
           AND run_after < now() - make_interval(secs => $1::float8)
         ORDER BY run_after LIMIT $2::int)
        UNION
        (SELECT id FROM runs WHERE status IN ('scheduled', 'failed') AND exclusive
           AND run_after <= now()
         ORDER BY run_after LIMIT $2::int))
      AND r.status = 'scheduled' AND r.attempts = 0
    FOR UPDATE OF r SKIP LOCKED
), judged AS (
    SELECT d.id,
        CASE
            WHEN j.overlap = 'skip' AND EXISTS (
                SELECT 1 FROM runs x WHERE x.job_id = d.job_id AND x.status = 'running'
                  AND x.exclusive) THEN 'overlap'
            WHEN d.scheduled_at >= now() - make_interval(secs => $1::float8) THEN NULL
            WHEN d.scheduled_at < now() - make_interval(secs => j.catchup_window_seconds)
                THEN 'missed'
            WHEN j.catchup = 'none' THEN 'missed'
            WHEN j.catchup = 'latest' AND EXISTS (
                SELECT 1 FROM runs n WHERE n.job_id = d.job_id AND n.trigger = 'schedule'
                  AND n.scheduled_at > d.scheduled_at AND n.scheduled_at <= now())
                THEN 'missed'
        END AS reason
    FROM due d JOIN jobs j ON j.id = d.job_id
    WHERE NOT j.paused
)
UPDATE runs r SET status = 'skipped', skip_reason = judged.reason, finished_at = now()
FROM judged
WHERE r.id = judged.id AND judged.reason IS NOT NULL
RETURNING r.id, r.job_id, judged.reason;

-- ---------------------------------------------------------------- claiming

-- name: claim_runs
-- One short transaction: lock due runs of the types offered here, start them under a new
-- lease token and record the attempt. Exclusive jobs (overlap skip/wait) start at most one
-- run; runs_one_running_exclusive turns a cross-host race into a unique violation.
WITH candidates AS (
    SELECT r.id, r.job_id, r.exclusive, r.run_after FROM runs r
    JOIN jobs j ON j.id = r.job_id
    WHERE r.status IN ('scheduled', 'failed') AND r.run_after <= now()
      AND r.type = ANY($1::text[]) AND NOT j.paused AND j.deleted_at IS NULL
      AND NOT (r.exclusive AND EXISTS (
          SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.status = 'running'
            AND x.exclusive))
    ORDER BY r.run_after, r.id
    LIMIT $2::int
    FOR UPDATE OF r SKIP LOCKED
), chosen AS (
    SELECT id, job_id FROM candidates WHERE NOT exclusive
    UNION ALL
    (SELECT DISTINCT ON (job_id) id, job_id FROM candidates WHERE exclusive
     ORDER BY job_id, run_after, id)
), claimed AS (
    UPDATE runs r SET status = 'running', attempts = r.attempts + 1,
        lease_owner = $3::text, lease_token = r.lease_token + 1,
        lease_expires_at = now() + make_interval(secs => $4::float8),
        started_at = now(), finished_at = NULL
    FROM chosen c
    WHERE r.id = c.id
    RETURNING r.*
), attempt AS (
    INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, started_at)
    SELECT id, attempts, $3::text, lease_token, started_at FROM claimed
)
SELECT c.id, c.job_id, c.scheduled_at, c.attempts, c.max_attempts, c.lease_token,
       c.started_at, c.trigger, c.exclusive, COALESCE(c.payload, j.payload) AS payload,
       j.name AS job_name, j.type, j.timeout_seconds, j.retry_base_seconds,
       j.retry_cap_seconds, now() AS db_now
FROM claimed c JOIN jobs j ON j.id = c.job_id
ORDER BY c.run_after, c.id;

-- name: next_due_in
-- Seconds until the next claimable run of these types comes due. Runs due now that the
-- claim left behind are locked by another host or blocked by overlap; a NOTIFY wakes us.
SELECT EXTRACT(EPOCH FROM (min(r.run_after) - now()))::float8 FROM runs r
JOIN jobs j ON j.id = r.job_id
WHERE r.status IN ('scheduled', 'failed') AND r.run_after > now()
  AND r.type = ANY($1::text[]) AND NOT j.paused AND j.deleted_at IS NULL;

-- name: renew_leases
-- Heartbeat. A run missing from the result is no longer ours: its child must die now.
UPDATE runs r SET lease_expires_at = now() + make_interval(secs => $3::float8)
FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
WHERE r.id = t.id AND r.lease_token = t.token AND r.lease_owner = $4::text
  AND r.status = 'running' AND r.lease_expires_at > now()
RETURNING r.id;

-- name: complete_runs
-- Fenced completion: a row only matches while our lease is current on the database
-- clock. A run missing from the result is a late result: it is not recorded.
WITH t AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::text[],
                         $6::text[], $7::int[], $8::int[], $9::text[], $10::text[],
                         $11::float8[], $12::int8[])
        AS t(id, token, status, retry_in, outcome, error, exit_code, signal, stdout_tail,
             stderr_tail, cpu_seconds, peak_rss_bytes)
), done AS (
    UPDATE runs r SET status = t.status::run_status,
        finished_at = CASE WHEN t.status = 'failed' THEN NULL ELSE now() END,
        run_after = CASE WHEN t.status = 'failed'
                         THEN now() + make_interval(secs => t.retry_in) ELSE r.run_after END,
        lease_owner = NULL, lease_expires_at = NULL, last_error = t.error
    FROM t
    WHERE r.id = t.id AND r.lease_token = t.token AND r.lease_owner = $13::text
      AND r.status = 'running' AND r.lease_expires_at > now()
    RETURNING r.id, r.attempts, r.run_after
), att AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = t.outcome::attempt_outcome,
        error = t.error, exit_code = t.exit_code, signal = t.signal,
        stdout_tail = t.stdout_tail, stderr_tail = t.stderr_tail,
        cpu_seconds = t.cpu_seconds, peak_rss_bytes = t.peak_rss_bytes
    FROM done d JOIN t ON t.id = d.id
    WHERE a.run_id = d.id AND a.attempt = d.attempts
)
SELECT d.id, d.run_after, now() AS db_now FROM done d;

-- name: release_runs
-- Graceful shutdown: give unfinished runs back without consuming an attempt (the budget
-- grows by one; attempt numbers keep increasing so history stays unique).
WITH rel AS (
    UPDATE runs r SET status = 'scheduled', run_after = now(), lease_owner = NULL,
        lease_expires_at = NULL, max_attempts = r.max_attempts + 1,
        last_error = 'interrupted: supervisor shut down'
    FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
    WHERE r.id = t.id AND r.lease_token = t.token AND r.lease_owner = $3::text
      AND r.status = 'running'
    RETURNING r.id, r.attempts
), att AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = 'interrupted',
        error = 'interrupted: supervisor shut down'
    FROM rel WHERE a.run_id = rel.id AND a.attempt = rel.attempts
)
SELECT id FROM rel;

-- name: reap_expired
-- Runs whose lease expired (host died or froze) go back to scheduled, or dead when out of
-- attempts. SKIP LOCKED keeps reapers on several hosts from fighting.
WITH expired AS (
    SELECT id, lease_owner FROM runs
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1::int
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE runs r SET
        status = CASE WHEN r.attempts >= r.max_attempts THEN 'dead'::run_status
                      ELSE 'scheduled'::run_status END,
        finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
        run_after = now(), lease_owner = NULL, lease_expires_at = NULL,
        last_error = 'lease lost: ' || e.lease_owner || ' stopped renewing its lease'
    FROM expired e
    WHERE r.id = e.id
    RETURNING r.id, r.job_id, r.attempts, r.status, e.lease_owner, r.last_error
), att AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = 'lease_lost', error = p.last_error
    FROM reaped p WHERE a.run_id = p.id AND a.attempt = p.attempts
)
SELECT id, job_id, attempts, status::text AS status, lease_owner FROM reaped;

-- ---------------------------------------------------------------- retention

-- name: prune_runs
-- Finished runs (and, by cascade, their attempts) past retention, oldest first, in small
-- batches so no lock is held long. Scheduled, failed (retry pending) and running runs have
-- no finished_at and are never touched.
WITH doomed AS (
    SELECT id FROM runs
    WHERE finished_at < now() - make_interval(secs => least($1::float8, $2::float8))
      AND ((status IN ('succeeded', 'skipped')
            AND finished_at < now() - make_interval(secs => $1::float8))
        OR (status IN ('dead', 'cancelled')
            AND finished_at < now() - make_interval(secs => $2::float8)))
    ORDER BY finished_at
    LIMIT $3::int
    FOR UPDATE SKIP LOCKED
)
DELETE FROM runs r USING doomed WHERE r.id = doomed.id;

-- ---------------------------------------------------------------- observability

-- name: late_runs
-- Due runs that waited longer than $1 seconds, oldest first, and whether any live worker
-- offers their type (runs_claimable index).
SELECT r.id, r.job_id, j.name AS job_name, r.type, r.run_after, r.scheduled_at,
       EXTRACT(EPOCH FROM (now() - r.run_after))::float8 AS late_seconds,
       EXISTS (SELECT 1 FROM workers w
               WHERE w.stopped_at IS NULL
                 AND w.last_seen_at > now() - make_interval(secs => 2 * w.lease_ttl)
                 AND r.type = ANY(w.types)) AS offered
FROM runs r JOIN jobs j ON j.id = r.job_id
WHERE r.status IN ('scheduled', 'failed')
  AND r.run_after < now() - make_interval(secs => $1::float8)
  AND NOT j.paused AND j.deleted_at IS NULL
ORDER BY r.run_after
LIMIT $2::int;

-- name: database_gauges
-- One round trip for the API's database-wide gauges.
SELECT
    (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
       FROM (SELECT status::text, count(*) AS n FROM runs GROUP BY status) s) AS runs_by_status,
    (SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id
      WHERE r.status IN ('scheduled', 'failed') AND r.run_after <= now()
        AND NOT j.paused AND j.deleted_at IS NULL) AS due_waiting,
    (SELECT coalesce(EXTRACT(EPOCH FROM (now() - min(r.run_after))), 0)::float8
       FROM runs r JOIN jobs j ON j.id = r.job_id
      WHERE r.status IN ('scheduled', 'failed') AND r.run_after <= now()
        AND NOT j.paused AND j.deleted_at IS NULL) AS oldest_due_age,
    (SELECT count(*) FROM workers w WHERE w.stopped_at IS NULL
        AND w.last_seen_at > now() - make_interval(secs => 2 * w.lease_ttl)) AS live_workers,
    (SELECT count(*) FROM jobs j WHERE NOT j.paused AND j.deleted_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.stopped_at IS NULL
            AND w.last_seen_at > now() - make_interval(secs => 2 * w.lease_ttl)
            AND j.type = ANY(w.types))) AS unserved_jobs,
    (SELECT count(*) FROM jobs WHERE NOT paused AND deleted_at IS NULL
        AND plan_after <= now() - interval '1 minute') AS jobs_behind;

-- name: last_success_ages
-- Seconds since each active job's last success (NULL: never succeeded yet).
-- Walks runs_job_history newest first: past the planned runs to the latest success.
SELECT j.name,
       EXTRACT(EPOCH FROM (now() - (SELECT r.finished_at FROM runs r
                                    WHERE r.job_id = j.id AND r.status = 'succeeded'
                                    ORDER BY r.scheduled_at DESC, r.id DESC LIMIT 1)))::float8
           AS age
FROM jobs j WHERE NOT j.paused AND j.deleted_at IS NULL
ORDER BY j.id LIMIT $1::int;

-- ---------------------------------------------------------------- workers

-- name: upsert_worker
INSERT INTO workers (id, host, pid, types, concurrency, version, lease_ttl)
VALUES ($1::text, $2::text, $3::int, $4::text[], $5::int, $6::text, $7::float8)
ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
    types = EXCLUDED.types, concurrency = EXCLUDED.concurrency, version = EXCLUDED.version,
    lease_ttl = EXCLUDED.lease_ttl,
    started_at = now(), last_seen_at = now(), stopped_at = NULL, running = 0;

-- name: touch_worker
UPDATE workers SET last_seen_at = now(), running = $2::int WHERE id = $1::text;

-- name: stop_worker
UPDATE workers SET stopped_at = now(), running = 0, last_seen_at = now()
WHERE id = $1::text;
