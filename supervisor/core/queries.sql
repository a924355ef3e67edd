-- Every SQL statement punchclock runs, one named block per Store method (same name).
-- Parameters are positional with explicit casts; all times come from the database clock.

-- name: now
SELECT now();

-- name: notify_wake
-- One NOTIFY per type ($1; '' for any type): the payload says which seats are woken first
-- ($2, the rotation: DESIGN.md, Fleet) and what became claimable. PostgreSQL drops
-- duplicates within a transaction and sends them at COMMIT.
SELECT count(pg_notify('punchclock_wake', $2::int || CASE WHEN t = '' THEN '' ELSE ' ' || t END))
FROM (SELECT DISTINCT unnest($1::text[])) AS x(t);

-- ---------------------------------------------------------------- jobs

-- name: insert_job
INSERT INTO jobs (name, type, payload, cron, run_at, timezone, max_attempts, timeout_seconds,
                  retry_base_seconds, retry_cap_seconds, catchup, catchup_window_seconds,
                  overlap, paused, success_exit_codes, dead_on, retry_on,
                  pause_after_failures, job_failing_after, expect_success_within_seconds,
                  late_after_seconds, ping_url)
VALUES ($1::text, $2::text, $3::jsonb, $4::text, $5::timestamptz, $6::text, $7::int,
        $8::float8, $9::float8, $10::float8, $11::catchup_policy, $12::float8,
        $13::overlap_policy, $14::bool, $15::int[], $16::text[], $17::text[], $18::int,
        $19::int, $20::float8, $21::float8, $22::text)
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
    success_exit_codes = $16::int[], dead_on = $17::text[], retry_on = $18::text[],
    pause_after_failures = $19::int, job_failing_after = $20::int,
    expect_success_within_seconds = $21::float8, late_after_seconds = $22::float8,
    ping_url = $23::text, updated_at = now()
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
-- A deleted job leaves its concurrency group (which can then be deleted).
UPDATE jobs SET deleted_at = now(), updated_at = now(), paused = true,
    concurrency_group = NULL
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

-- fragment: planned_jobs
-- A plan's jobs ($1-$4: id, type, exclusive, max_attempts) that still exist. Runs of an id
-- that is not a job are not inserted: runs have no foreign key to jobs (migration 0013),
-- the job's row is the check, once per job (MATERIALIZED: inlined, the generic plan probes
-- jobs once per run).
j AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::int[])
        AS j(job_id, type, excl, max_att)
    WHERE EXISTS (SELECT FROM jobs x WHERE x.id = j.job_id)
)

-- fragment: planned_runs
-- A plan's runs: $5/$6 per run its job and the position of its instant in $7, the plan's
-- distinct instants (store.PlannedRuns); $8 per run whether it is missed (NULL: none is).
unnest($5::bigint[], $6::int[], $8::bool[]) AS u(job_id, i, missed)
CROSS JOIN LATERAL (SELECT u.job_id, ($7::timestamptz[])[u.i] AS at, u.missed) AS r

-- name: count_missing_jobs
-- How many of a plan's job ids ($1) are no job: runs have no foreign key to jobs (migration
-- 0013), so the copy of a plan's runs (store.insert_planned_runs) checks its jobs first.
SELECT count(*) FROM unnest($1::bigint[]) AS x(id)
WHERE NOT EXISTS (SELECT FROM jobs j WHERE j.id = x.id);

-- name: insert_planned_runs_idempotent
-- A plan's runs, skipping fire times that exist already, and recording those that $8 marks
-- missed as skipped. Returns how many were inserted. A fire time recorded skipped (missed)
-- raises run_missed for its subscribers (as in complete_runs). A plan of fresh fire times
-- only is copied in instead (store.insert_planned_runs); this is its fallback.
WITH {{planned_jobs}}, ins AS (
    INSERT INTO runs (job_id, scheduled_at, run_after, type, exclusive, max_attempts, status,
                      skip_reason, finished_at)
    SELECT r.job_id, r.at, r.at, j.type, j.excl, j.max_att,
           CASE WHEN r.missed THEN 'skipped' ELSE 'scheduled' END::run_status,
           CASE WHEN r.missed THEN 'missed' END, CASE WHEN r.missed THEN now() END
    FROM {{planned_runs}}
    JOIN j ON j.job_id = r.job_id
    -- In time order, not job by job: consecutive rows land on the same leaf pages of the
    -- time-ordered indexes, and runs due together share heap pages.
    ORDER BY r.at
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
    RETURNING id, job_id, scheduled_at, status, skip_reason
), events AS (
    INSERT INTO outbox (channel_id, event, job_id, run_id, data)
    SELECT c.channel_id, 'run_missed', s.job_id, s.id, jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name),
        'run', jsonb_build_object('id', s.id, 'scheduled_at', s.scheduled_at,
                                  'status', 'skipped', 'skip_reason', s.skip_reason))
    FROM ins s CROSS JOIN LATERAL notify_targets(s.job_id, 'run_missed') c
    JOIN jobs j ON j.id = s.job_id
    WHERE s.status = 'skipped'
)
SELECT count(*) FROM ins;

-- name: set_plan_marks
UPDATE jobs j SET planned_until = t.until, plan_after = t.after
FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[]) AS t(id, until, after)
WHERE j.id = t.id;

-- name: count_jobs_behind
SELECT count(*) FROM jobs
WHERE NOT paused AND deleted_at IS NULL AND plan_after <= now();

-- fragment: claimable_types
-- The types that have claimable runs, found with one probe of runs_claimable_by_type (type,
-- run_after, id) each: a loose index scan, as PostgreSQL 15 has no skip scan. What reads
-- due runs across types reads one (type, run_after) range per type from it, so no second
-- index of claimable runs in run_after order is needed (migration 0016). Needs WITH
-- RECURSIVE.
-- The walk ends on a NULL (no type after the last); claimable_types leaves it out.
claimable_type_walk(type) AS (
    SELECT min(type) FROM runs WHERE status IN ('scheduled', 'failed')
    UNION ALL
    SELECT (SELECT min(r.type) FROM runs r
            WHERE r.status IN ('scheduled', 'failed') AND r.type > t.type)
    FROM claimable_type_walk t WHERE t.type IS NOT NULL
), claimable_types(type) AS (
    SELECT type FROM claimable_type_walk WHERE type IS NOT NULL
)

-- fragment: blocked_exclusive
-- Due runs of exclusive jobs while another run of the job runs (runs_claimable_exclusive):
-- what overlap 'skip' skips and 'wait' holds back. The running exclusive jobs are read once
-- (an array), not once per due run: one generic plan of the per-run EXISTS read every
-- running run of every host for each due run.
blocked_exclusive AS (
    SELECT e.id, e.run_after FROM runs e
    WHERE e.status IN ('scheduled', 'failed') AND e.exclusive AND e.run_after <= now()
      AND e.job_id = ANY(ARRAY(SELECT x.job_id FROM runs x
                               WHERE x.status = 'running' AND x.exclusive))
)

-- name: skip_missed_runs
-- Catch-up policy, applied beside claiming (claimer.py says when). A run is missed when it
-- never started and is older than the misfire grace. 'none' skips every missed run;
-- 'latest' all but the newest of a job; every policy skips missed runs older than the job's
-- catch-up window. Overlap 'skip' jobs skip due runs while another run of the job is
-- running. Manual runs are explicit requests: never skipped (under overlap 'skip' they
-- wait, like 'wait').
-- Two index range scans keep it cheap: old unstarted runs, and due runs of
-- exclusive jobs that run now. They are judged unlocked; only the runs to skip are locked
-- (a backlog that the policy keeps, catch-up 'all' within its window, used to be locked
-- whole on every claim pass: up to 1,000 row locks, each a heap write, 2 ms a pass).
-- The old runs are read in (run_after, id) order from after ($3, $4), the last pass's
-- position (NULL: from the start), at most $2 of them (0: none this pass; the claimer reads
-- them once a second); the exclusive jobs' due runs at most $5. What the policy keeps, and
-- a paused job's runs (judged at its resume), no longer fill the window for good. The last
-- row gives the position for the next pass (NULL once the scan reached the end). claim_runs
-- never starts a run this judgement skips, so a run no pass has reached yet waits.
WITH RECURSIVE {{claimable_types}}, {{blocked_exclusive}}, old AS (
    -- The first $2 of each type's range, merged.
    SELECT o.id, o.run_after FROM claimable_types t CROSS JOIN LATERAL (
        SELECT id, run_after FROM runs
        WHERE type = t.type AND status IN ('scheduled', 'failed')
          AND run_after < now() - make_interval(secs => $1::float8)
          AND (run_after, id) > (COALESCE($3::timestamptz, '-infinity'), COALESCE($4::bigint, 0))
        ORDER BY run_after, id LIMIT $2::int) o
    ORDER BY o.run_after, o.id LIMIT $2::int
), due AS (
    -- By primary key only (`status::text`, as in complete_runs): a generic plan made while
    -- nothing was due read the whole claimable index to find these few by id.
    SELECT r.id, r.job_id, r.scheduled_at, r.exclusive FROM runs r
    WHERE r.id = ANY(ARRAY(
        (SELECT id FROM old)
        UNION
        (SELECT id FROM blocked_exclusive ORDER BY run_after LIMIT $5::int)))
      AND r.status::text = 'scheduled' AND r.attempts = 0 AND r.trigger = 'schedule'
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
), locked AS (
    -- Still unstarted when locked (a claim elsewhere may have taken it since the snapshot;
    -- one in progress is skipped, as before).
    SELECT r.id FROM runs r
    WHERE r.id = ANY(ARRAY(SELECT id FROM judged WHERE reason IS NOT NULL))
      AND r.status::text = 'scheduled' AND r.attempts = 0
    FOR UPDATE OF r SKIP LOCKED
), skipped AS (
    UPDATE runs r SET status = 'skipped', skip_reason = judged.reason, finished_at = now()
    FROM judged
    WHERE r.id = ANY(ARRAY(SELECT id FROM locked)) AND r.id = judged.id
    RETURNING r.id, r.job_id, r.scheduled_at, judged.reason
), events AS (
    -- Notifications (as in complete_runs).
    INSERT INTO outbox (channel_id, event, job_id, run_id, data)
    SELECT c.channel_id, e.event, s.job_id, s.id, jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name),
        'run', jsonb_build_object('id', s.id, 'scheduled_at', s.scheduled_at,
                                  'status', 'skipped', 'skip_reason', s.reason))
    FROM skipped s
    CROSS JOIN LATERAL (SELECT CASE s.reason WHEN 'missed' THEN 'run_missed'
                                ELSE 'run_overlap_skipped' END AS event) e
    CROSS JOIN LATERAL notify_targets(s.job_id, e.event) c
    JOIN jobs j ON j.id = s.job_id
)
SELECT id, job_id, reason, NULL::timestamptz AS next_after, NULL::bigint AS next_id
FROM skipped
UNION ALL
SELECT NULL, NULL, NULL, last.run_after, last.id
FROM (SELECT count(*) AS n FROM old) c
LEFT JOIN LATERAL (SELECT run_after, id FROM old ORDER BY run_after DESC, id DESC LIMIT 1) last
    ON c.n = $2::int AND $2::int > 0;

-- ---------------------------------------------------------------- claiming

-- fragment: claim_with
-- claim_runs up to its final SELECT (claim_and_complete_runs pastes it too).
{{blocked_exclusive}}, orphans AS (
    -- run_after: a run claimed ahead goes back due at its instant, not now (never early).
    UPDATE runs r SET status = 'scheduled', run_after = greatest(now(), r.run_after),
        lease_owner = NULL, lease_expires_at = NULL, max_attempts = r.max_attempts + 1,
        last_error = 'interrupted: claim reply lost, given back unstarted'
    WHERE $5::bigint[] IS NOT NULL AND r.status = 'running' AND r.lease_owner = $3::text
      AND r.id <> ALL($5::bigint[]) AND r.lease_expires_at > now()
    RETURNING r.id, r.attempts
), orphan_attempts AS (
    -- By key through = ANY(ARRAY(...)), as `claimed` joins: a generic plan made while
    -- run_attempts looked small read the whole index on every claim to join it with no
    -- orphans (4.3 ms per claim after 16,000 attempts, growing; 0.02 ms this way).
    UPDATE run_attempts a SET finished_at = greatest(now(), a.started_at),
        outcome = 'interrupted', error = 'interrupted: claim reply lost, given back unstarted'
    FROM orphans o
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM orphans)) AND a.run_id = o.id
      AND a.attempt = o.attempts
), candidates AS (
    -- Each offered type's due runs in run_after order (runs_claimable_by_type), merged: a
    -- backlog of a type nobody here offers is never read (50,000 older due runs of one made
    -- a claim of 8 runs 7.27 ms instead of 0.86). Each type locks at most $2 runs; those past
    -- the merged limit are let go at commit.
    -- $8/$9 (per type, beside $1; NULL: from the start): read on after this (run_after, id),
    -- the last run of the type this host claimed while its claims come back full
    -- (claimer.py). Behind an old snapshot the entries of runs claimed since cannot be
    -- cleaned up, and a scan from the start stepped over all of them: 50,000 runs drained
    -- under a 60 s snapshot, each claim slower than the one before (DESIGN.md, Lease and
    -- fencing protocol).
    SELECT c.* FROM (SELECT DISTINCT ON (u.type) u.*
                     FROM unnest($1::text[], $8::timestamptz[], $9::bigint[])
                         AS u(type, after_at, after_id)) AS t
    CROSS JOIN LATERAL (
        SELECT r.id, r.job_id, r.exclusive, r.run_after, j.payload AS job_payload,
               j.name AS job_name, j.type, j.timeout_seconds, j.retry_base_seconds,
               j.retry_cap_seconds, j.success_exit_codes, j.dead_on, j.retry_on, j.ping_url,
               j.max_concurrent, j.concurrency_group AS grp
        FROM runs r
        -- One job lookup per candidate, in run_after order, stopping at the limit: OFFSET 0
        -- keeps it a nested loop whatever the statistics say. A bulk insert into tables not
        -- analyzed since they were small made the generic plan hash-join every due run with
        -- every job and sort them: 8.5 ms per claim with 5,000 due, against 0.3 (docs/
        -- performance.md: the burst).
        CROSS JOIN LATERAL (SELECT * FROM jobs j WHERE j.id = r.job_id OFFSET 0) j
        WHERE r.status IN ('scheduled', 'failed')
          AND r.run_after <= now() + make_interval(secs => $6::float8)
          AND r.type = t.type AND (NOT j.paused OR r.trigger = 'manual')
          AND (r.run_after, r.id) > (COALESCE(t.after_at, '-infinity'), COALESCE(t.after_id, 0))
          AND j.deleted_at IS NULL
          AND NOT (r.exclusive AND EXISTS (
              SELECT 1 FROM runs x WHERE x.job_id = r.job_id AND x.status = 'running'
                AND x.exclusive))
          -- Catch-up, judged as skip_missed_runs judges it ($7: the misfire grace): a missed
          -- run its policy skips is never started, even when no pass has reached it yet (the
          -- pass reads a bounded window; the run waits there to be recorded skipped).
          AND NOT (r.status = 'scheduled' AND r.attempts = 0 AND r.trigger = 'schedule'
              AND r.scheduled_at < now() - make_interval(secs => $7::float8)
              AND (r.scheduled_at < now() - make_interval(secs => j.catchup_window_seconds)
                   OR j.catchup = 'none'
                   OR (j.catchup = 'latest' AND EXISTS (
                       SELECT 1 FROM runs n WHERE n.job_id = r.job_id AND n.trigger = 'schedule'
                         AND n.scheduled_at > r.scheduled_at AND n.scheduled_at <= now()))))
          -- A limit already reached keeps the job's runs out of the window, as overlap does.
          AND (j.max_concurrent IS NULL OR j.max_concurrent > (
              SELECT count(*) FROM runs x WHERE x.job_id = r.job_id AND x.status = 'running'
                AND x.job_slot IS NOT NULL))
          AND (j.concurrency_group IS NULL OR (
              SELECT g.max_running FROM concurrency_groups g WHERE g.name = j.concurrency_group)
              > (SELECT count(*) FROM runs x WHERE x.run_group = j.concurrency_group
                   AND x.status = 'running' AND x.group_slot IS NOT NULL))
        -- run_after alone: on an index without id (before migration 0017) an id tie-break
        -- made every claim read and sort all runs due at the same instant (a burst of 5,000
        -- cron runs at 00:00 made each claim O(burst)). Ties come in index order.
        ORDER BY r.run_after
        LIMIT $2::int
        FOR UPDATE OF r SKIP LOCKED
    ) c
    ORDER BY c.run_after
    LIMIT $2::int
), allowed AS (
    SELECT id, job_id, run_after, max_concurrent, grp FROM candidates WHERE NOT exclusive
    UNION ALL
    (SELECT DISTINCT ON (job_id) id, job_id, run_after, max_concurrent, grp
     FROM candidates WHERE exclusive ORDER BY job_id, run_after, id)
), job_slots AS (
    -- Concurrency limits (migration 0011): each limited run gets the k-th free slot of its
    -- job, then of its group, in run_after order; a run without one waits. Two hosts taking
    -- the same slot meet in runs_job_slot / runs_group_slot (a unique violation: retried).
    SELECT a.id, a.job_id, a.run_after, a.grp, f.slot AS job_slot
    FROM (SELECT *, row_number() OVER (PARTITION BY job_id ORDER BY run_after, id) AS k
          FROM allowed WHERE max_concurrent IS NOT NULL) a
    JOIN LATERAL (
        SELECT s.slot, row_number() OVER (ORDER BY s.slot) AS k
        FROM generate_series(0, a.max_concurrent - 1) s(slot)
        WHERE NOT EXISTS (SELECT 1 FROM runs x WHERE x.job_id = a.job_id
                            AND x.status = 'running' AND x.job_slot = s.slot)) f ON f.k = a.k
    UNION ALL
    SELECT id, job_id, run_after, grp, NULL FROM allowed WHERE max_concurrent IS NULL
), chosen AS (
    SELECT id, job_slot, NULL::text AS run_group, NULL::int AS group_slot
    FROM job_slots WHERE grp IS NULL
    UNION ALL
    SELECT a.id, a.job_slot, a.grp, f.slot
    FROM (SELECT *, row_number() OVER (PARTITION BY grp ORDER BY run_after, id) AS k
          FROM job_slots WHERE grp IS NOT NULL) a
    JOIN concurrency_groups g ON g.name = a.grp
    JOIN LATERAL (
        SELECT s.slot, row_number() OVER (ORDER BY s.slot) AS k
        FROM generate_series(0, g.max_running - 1) s(slot)
        WHERE NOT EXISTS (SELECT 1 FROM runs x WHERE x.run_group = a.grp
                            AND x.status = 'running' AND x.group_slot = s.slot)) f ON f.k = a.k
), claimed AS (
    UPDATE runs r SET status = 'running', attempts = r.attempts + 1,
        lease_owner = $3::text, lease_token = r.lease_token + 1,
        lease_expires_at = now() + make_interval(secs => $4::float8),
        started_at = greatest(now(), r.run_after), finished_at = NULL,
        job_slot = c.job_slot, run_group = c.run_group, group_slot = c.group_slot
    FROM chosen c
    WHERE r.id = ANY(ARRAY(SELECT id FROM chosen)) AND r.id = c.id
    RETURNING r.*
), attempt AS (
    INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, started_at)
    SELECT id, attempts, $3::text, lease_token, started_at FROM claimed
), pinged AS (
    -- The start ping of jobs with a ping_url (DESIGN.md, Notifications: outbound pings).
    INSERT INTO outbox (url, event, job_id, run_id, data)
    SELECT rtrim(k.ping_url, '/') || '/start', 'ping_start', c.job_id, c.id, '{}'::jsonb
    FROM claimed c JOIN candidates k ON k.id = c.id
    WHERE k.ping_url IS NOT NULL
)

-- fragment: claim_select
SELECT c.id, c.job_id, c.scheduled_at, c.run_after, c.attempts, c.max_attempts, c.lease_token,
       c.started_at, c.trigger, c.exclusive OR c.job_slot IS NOT NULL OR c.group_slot IS NOT NULL
           AS wakes_others,
       -- As text: it goes to the child's stdin as it is (no decoding and encoding again).
       COALESCE(c.payload, k.job_payload)::text AS payload,
       k.job_name, k.type, k.timeout_seconds, k.retry_base_seconds, k.retry_cap_seconds,
       k.success_exit_codes, k.dead_on, k.retry_on, k.ping_url, now() AS db_now,
       -- clock_timestamp(), not now() (the statement's start): a claim that took 90 ms on a
       -- busy database would otherwise start its runs 90 ms late.
       greatest(0, EXTRACT(EPOCH FROM (c.run_after - clock_timestamp())))::float8 AS start_in,
       (SELECT count(*) FROM candidates) - (SELECT count(*) FROM chosen) AS held_back,
       -- Whether overlap may have runs to skip: the claimer runs the catch-up pass for them
       -- only then (and once a second for old runs), not before every claim.
       EXISTS (SELECT 1 FROM blocked_exclusive) AS overlap_due
FROM claimed c JOIN candidates k ON k.id = c.id
ORDER BY c.run_after, c.id

-- name: claim_runs
-- One short transaction: lock due runs of the types offered here, start them under a new
-- lease token and record the attempt. $6 (claim_ahead): runs due within that many seconds
-- are claimed too; the executor starts each at its instant (start_in), and started_at is
-- that instant, never the earlier claim. Exclusive jobs (overlap skip/wait) start at most one
-- run; runs_one_running_exclusive turns a cross-host race into a unique violation.
-- $5: NULL normally. After a claim whose outcome is unknown (the connection died around
-- COMMIT) it lists the runs this host holds: any other run still leased to this host was
-- claimed by the lost transaction and never started, so it goes back at once without
-- using an attempt (as at shutdown), instead of waiting for the reaper to charge one.
-- Only while its lease is current: an expired one may be a run that really executed and
-- whose late result was rejected (an outage longer than the lease); the reaper records
-- that as lease_lost.
WITH {{claim_with}}
{{claim_select}};

-- name: claim_and_complete_runs
-- claim_runs ($1-$9) with complete_runs for successes ($10-$25) in one statement: a busy
-- host's finished runs ride on its next claim (one round trip and one commit for both;
-- claimer.py, Riders). The claim reads the snapshot from before the completions, so a
-- finishing run still holds its concurrency slot for this claim (the completer sends the
-- results that free one, with their NOTIFY, on their own). One row at least: `recorded`
-- (the completion's recorded ids) on every row, the claim's columns NULL when it got none.
WITH {{claim_with}}, {{completion_head+9}}, {{success_events+9}}
SELECT k.*, ARRAY(SELECT id FROM done UNION ALL SELECT id FROM already) AS recorded
FROM (SELECT 1) AS one LEFT JOIN ({{claim_select}}) AS k ON true
ORDER BY k.run_after, k.id;

-- name: next_due_in
-- Seconds until the next claimable run of these types comes within $2 (claim_ahead) of
-- its instant. Runs nearer than that which the claim left behind are locked by another
-- host or blocked by overlap; a NOTIFY wakes us. $3: seconds since the claim was sent, so
-- a run that entered the window after the claim's snapshot (and before this statement's)
-- counts as due now rather than passed over until the poll interval.
-- Per type, the first in run_after order (runs_claimable_by_type), its job looked up by key
-- (OFFSET 0, as in claim_runs): the generic plan of a min() over a join, made while the
-- tables were small, scanned every job of the type for each due run (2.1 s with 5,000 runs
-- due 2 s ahead); and a single scan across types stepped over every other type's runs.
SELECT min(d.due_in) FROM (SELECT DISTINCT unnest($1::text[])) AS t(type)
CROSS JOIN LATERAL (
    SELECT EXTRACT(EPOCH FROM (r.run_after - now()))::float8 - $2::float8 AS due_in
    FROM runs r
    CROSS JOIN LATERAL (SELECT paused, deleted_at FROM jobs j WHERE j.id = r.job_id OFFSET 0) j
    WHERE r.type = t.type AND r.status IN ('scheduled', 'failed')
      AND r.run_after > now() + make_interval(secs => $2::float8 - $3::float8)
      AND (NOT j.paused OR r.trigger = 'manual') AND j.deleted_at IS NULL
    ORDER BY r.run_after
    LIMIT 1
) d;

-- name: write_live_tails
-- The output so far of running children (livetail.py): fenced by the attempt's lease token,
-- and never over an attempt that has ended (its completion's tails are final).
UPDATE run_attempts a SET stdout_tail = t.out, stderr_tail = t.err
FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $5::text[])
    AS t(run_id, attempt, token, out, err)
-- By key (= ANY, as complete_runs): a generic plan made while few attempts existed walked
-- every attempt to join the few written here.
WHERE a.run_id = ANY($1::bigint[]) AND a.run_id = t.run_id AND a.attempt = t.attempt
  AND a.lease_token = t.token AND a.outcome = 'running';

-- name: renew_leases
-- Heartbeat. A run missing from the result is no longer ours: its child must die now.
UPDATE runs r SET lease_expires_at = now() + make_interval(secs => $3::float8)
FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
-- By primary key only (`status::text`, as in complete_runs): not a scan of every running run.
WHERE r.id = ANY($1::bigint[]) AND r.id = t.id AND r.lease_token = t.token
  AND r.lease_owner = $4::text AND r.status::text = 'running' AND r.lease_expires_at > now()
RETURNING r.id;

-- fragment: completion_head
-- complete_runs up to `already`: what every completion statement records alike.
t AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::text[],
                         $6::text[], $7::int[], $8::int[], $9::text[], $10::text[],
                         $11::float8[], $12::int8[], $13::bool[], $14::bool[], $15::text[])
        AS t(id, token, status, retry_in, outcome, error, exit_code, signal, stdout_tail,
             stderr_tail, cpu_seconds, peak_rss_bytes, stdout_replaced, stderr_replaced,
             ping_url)
), done AS (
    UPDATE runs r SET status = t.status::run_status,
        finished_at = CASE WHEN t.status = 'failed' THEN NULL ELSE now() END,
        run_after = CASE WHEN t.status = 'failed'
                         THEN now() + make_interval(secs => t.retry_in) ELSE r.run_after END,
        lease_owner = NULL, lease_expires_at = NULL, last_error = t.error
    FROM t
    -- By primary key only: `status::text` leaves runs_running_lease and the status index
    -- out of the plan's reach. A generic plan made while few runs were running scanned
    -- every running run of every host per batch (3-8 ms with 20,000 running, not 0.2).
    WHERE r.id = ANY($1::bigint[]) AND r.id = t.id AND r.lease_token = t.token
      AND r.lease_owner = $16::text
      AND r.status::text = 'running' AND r.lease_expires_at > now()
    RETURNING r.id, r.attempts, r.run_after, r.job_id, r.status, r.scheduled_at
), att AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = t.outcome::attempt_outcome,
        error = t.error, exit_code = t.exit_code, signal = t.signal,
        stdout_tail = t.stdout_tail, stderr_tail = t.stderr_tail,
        cpu_seconds = t.cpu_seconds, peak_rss_bytes = t.peak_rss_bytes,
        stdout_replaced = t.stdout_replaced, stderr_replaced = t.stderr_replaced
    FROM done d JOIN t ON t.id = d.id
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM done)) AND a.run_id = d.id  -- by key (claim_runs)
      AND a.attempt = d.attempts
), already AS (
    -- Reads the snapshot from before `done` and `att`: nothing this statement ends is here.
    -- By key ($1), whichever side a generic plan starts from: one made while run_attempts
    -- looked empty read every attempt this host ever finished, on every completion.
    SELECT a.run_id AS id, r.run_after FROM t
    JOIN run_attempts a ON a.run_id = t.id AND a.lease_token = t.token
    JOIN runs r ON r.id = a.run_id
    WHERE a.run_id = ANY($1::bigint[]) AND a.worker_id = $16::text AND a.finished_at IS NOT NULL
      AND a.outcome = t.outcome::attempt_outcome AND a.error IS NOT DISTINCT FROM t.error
)

-- fragment: recovered
-- FROM-list text of both completion statements' job_recovered: the jobs whose dead streak
-- this batch ends (streak_reset r), each job (jr) and its last run in the batch (o).
streak_reset r
JOIN jobs jr ON jr.id = r.job_id
CROSS JOIN LATERAL (SELECT max(d.id) AS run_id FROM done d WHERE d.job_id = r.job_id) o

-- fragment: success_events
streak_reset AS (
    -- A batch of successes only (Store.complete_runs picks the statement): the one event it
    -- can raise is job_recovered, when a job's dead streak had reached N (job_streaks has a
    -- row only while a streak lasts, so an unwatched job costs one probe of an empty index).
    DELETE FROM job_streaks s
    WHERE s.job_id = ANY (ARRAY(SELECT job_id FROM done))
    RETURNING s.job_id, s.dead_streak
), events AS (
    INSERT INTO outbox (channel_id, url, event, job_id, run_id, data)
    SELECT c.channel_id, NULL, 'job_recovered', r.job_id, o.run_id,
           jsonb_build_object('job', jsonb_build_object('id', jr.id, 'name', jr.name),
                              'streak', r.dead_streak, 'run', jsonb_build_object('id', o.run_id))
    FROM {{recovered}}
    CROSS JOIN LATERAL notify_targets(r.job_id, 'job_recovered') c
    WHERE r.dead_streak >= jr.job_failing_after
    UNION ALL
    -- The success ping of jobs with a ping_url (the claim's, carried by the completion): in
    -- the same INSERT (no CTE of its own) and without reading jobs (measured: a probe of
    -- jobs per run cost 6-13 % of a claim and completion of 8 runs).
    SELECT NULL, t.ping_url, 'ping_success', d.job_id, d.id, '{}'::jsonb
    FROM done d JOIN t ON t.id = d.id
    WHERE t.ping_url IS NOT NULL
)

-- fragment: completion_recorded
SELECT d.id, d.run_after, now() AS db_now FROM done d
UNION ALL
SELECT y.id, y.run_after, now() AS db_now FROM already y

-- name: complete_runs
-- Fenced completion: a row only matches while our lease is current on the database
-- clock. A run missing from the result is a late result: it is not recorded.
-- Idempotent: when a batch committed but the reply was lost (connection killed), the retry
-- finds its attempts already ended exactly as it would end them (same lease token, worker,
-- outcome, error) and reports them recorded again instead of late.
WITH {{completion_head}}, {{success_events}}
{{completion_recorded}};

-- name: complete_runs_with_events
-- complete_runs for a batch with a failed or dead result: the same recording
-- (completion_head), plus the notification events in this
-- transaction (DESIGN.md, Notifications), written only where a channel subscribes.
WITH {{completion_head}}, ended AS (
    SELECT d.id, d.job_id, d.attempts, d.scheduled_at, d.status::text AS status, t.error,
           t.exit_code, CASE d.status WHEN 'dead' THEN 'run_dead' ELSE 'run_failed' END AS event,
           -- The handler's own doing (exit status, signal, timeout): what auto-pause counts.
           -- A lost lease, a shutdown or a cancel is ours: neither counted nor a reset.
           t.outcome IN ('failed', 'timed_out') AS by_handler,
           CASE WHEN t.outcome = 'timed_out' THEN 'timeout'
                WHEN t.exit_code IS NOT NULL THEN 'exit ' || t.exit_code
                WHEN t.signal IS NOT NULL THEN 'signal ' || t.signal
                ELSE 'did not start' END AS ending
    FROM done d JOIN t ON t.id = d.id
    WHERE d.status IN ('dead', 'failed')
), streak_reset AS (
    -- A success ends a dead streak (job_recovered). A job with a success in this batch
    -- does not grow its streak from the same batch.
    DELETE FROM job_streaks s
    WHERE s.job_id = ANY (ARRAY(SELECT job_id FROM done WHERE status = 'succeeded'))
    RETURNING s.job_id, s.dead_streak
), streak_in AS (
    -- Per job: dead runs (job_failing), those by the handler (auto-pause), the last of each.
    SELECT e.job_id, j.job_failing_after, count(*)::int AS n, max(e.id) AS run_id,
           count(*) FILTER (WHERE e.by_handler)::int AS p,
           (array_agg(e.id ORDER BY e.id DESC) FILTER (WHERE e.by_handler))[1] AS p_run,
           (array_agg(e.ending ORDER BY e.id DESC) FILTER (WHERE e.by_handler))[1] AS p_ending
    FROM ended e JOIN jobs j ON j.id = e.job_id
    WHERE e.status = 'dead'
      AND NOT EXISTS (SELECT 1 FROM done o WHERE o.job_id = e.job_id AND o.status = 'succeeded')
      AND (j.pause_after_failures IS NOT NULL
           OR EXISTS (SELECT 1 FROM notify_targets(e.job_id, 'job_failing')
                      UNION ALL SELECT 1 FROM notify_targets(e.job_id, 'job_recovered')))
    GROUP BY e.job_id, j.job_failing_after
), streak_grow AS (
    INSERT INTO job_streaks AS s (job_id, dead_streak, pause_streak)
    SELECT job_id, n, p FROM streak_in
    ON CONFLICT (job_id) DO UPDATE SET dead_streak = s.dead_streak + EXCLUDED.dead_streak,
        pause_streak = s.pause_streak + EXCLUDED.pause_streak
    RETURNING s.job_id, s.dead_streak, s.pause_streak
), auto_paused AS (
    -- The circuit breaker, in the completion's own statement: only the job whose streak
    -- reaches its pause_after_failures is updated (and locked).
    UPDATE jobs j SET paused = true, updated_at = now(),
        pause_reason = format('auto-paused after %s consecutive failures (last: run %s, %s)',
                              g.pause_streak, i.p_run, i.p_ending)
    FROM streak_grow g JOIN streak_in i ON i.job_id = g.job_id
    WHERE j.id = g.job_id AND i.p > 0 AND g.pause_streak >= j.pause_after_failures
      AND NOT j.paused AND j.deleted_at IS NULL
    RETURNING j.id AS job_id, j.pause_after_failures, j.pause_reason, g.pause_streak, i.p_run
), events AS (
    -- One INSERT for every event of the batch (each data-modifying CTE costs its setup on
    -- every call): the runs' own, job_failing when a streak reaches the job's N (once per
    -- streak), job_recovered when a streak that had reached N ends, job_auto_paused, and
    -- the success and final-failure pings of jobs with a ping_url.
    INSERT INTO outbox (channel_id, url, event, job_id, run_id, data)
    SELECT c.channel_id, NULL, x.event, x.job_id, x.run_id,
           jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name)) || x.data
    FROM (SELECT e.job_id, e.event, e.id AS run_id,
                 jsonb_build_object('run', jsonb_build_object('id', e.id,
                     'scheduled_at', e.scheduled_at, 'status', e.status, 'attempt', e.attempts,
                     'exit_code', e.exit_code, 'error', e.error)) AS data
          FROM ended e
          UNION ALL
          SELECT g.job_id, 'job_failing', i.run_id,
                 jsonb_build_object('streak', g.dead_streak, 'run', jsonb_build_object('id', i.run_id))
          FROM streak_grow g JOIN streak_in i ON i.job_id = g.job_id
          WHERE g.dead_streak >= i.job_failing_after
            AND g.dead_streak - i.n < i.job_failing_after
          UNION ALL
          SELECT r.job_id, 'job_recovered', o.run_id,
                 jsonb_build_object('streak', r.dead_streak, 'run', jsonb_build_object('id', o.run_id))
          FROM {{recovered}}
          WHERE r.dead_streak >= jr.job_failing_after
          UNION ALL
          SELECT a.job_id, 'job_auto_paused', a.p_run,
                 jsonb_build_object('streak', a.pause_streak,
                     'pause_after_failures', a.pause_after_failures, 'reason', a.pause_reason,
                     'run', jsonb_build_object('id', a.p_run))
          FROM auto_paused a) x
    CROSS JOIN LATERAL notify_targets(x.job_id, x.event) c
    JOIN jobs j ON j.id = x.job_id
    UNION ALL
    SELECT NULL, CASE d.status WHEN 'dead' THEN rtrim(t.ping_url, '/') || '/fail'
                               ELSE t.ping_url END,
           CASE d.status WHEN 'dead' THEN 'ping_fail' ELSE 'ping_success' END,
           d.job_id, d.id, '{}'::jsonb
    FROM done d JOIN t ON t.id = d.id
    WHERE t.ping_url IS NOT NULL AND d.status IN ('succeeded', 'dead')
)
{{completion_recorded}};

-- name: release_runs
-- Graceful shutdown: give unfinished runs back without consuming an attempt (the budget
-- grows by one; attempt numbers keep increasing so history stays unique).
WITH rel AS (
    -- run_after: a run claimed ahead goes back due at its instant, not now (never early).
    UPDATE runs r SET status = 'scheduled', run_after = greatest(now(), r.run_after),
        lease_owner = NULL, lease_expires_at = NULL, max_attempts = r.max_attempts + 1,
        last_error = 'interrupted: supervisor shut down'
    FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
    WHERE r.id = ANY($1::bigint[]) AND r.id = t.id AND r.lease_token = t.token
      AND r.lease_owner = $3::text AND r.status::text = 'running'  -- by key (complete_runs)
    RETURNING r.id, r.attempts
), att AS (
    UPDATE run_attempts a SET finished_at = greatest(now(), a.started_at),
        outcome = 'interrupted', error = 'interrupted: supervisor shut down'
    FROM rel
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM rel)) AND a.run_id = rel.id  -- by key (claim_runs)
      AND a.attempt = rel.attempts
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
    RETURNING r.id, r.job_id, r.type, r.attempts, r.status, e.lease_owner, r.last_error,
              r.scheduled_at
), att AS (
    UPDATE run_attempts a SET finished_at = now(), outcome = 'lease_lost', error = p.last_error
    FROM reaped p
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM reaped)) AND a.run_id = p.id  -- by key (claim_runs)
      AND a.attempt = p.attempts
), run_events AS (
    -- Notifications (as in complete_runs): the reaped attempt failed (a retry is scheduled)
    -- or the run is dead; worker_lost once per channel and worker episode (dedupe_key).
    -- A run reaped dead sends its job's fail ping too.
    INSERT INTO outbox (channel_id, url, event, job_id, run_id, data)
    SELECT c.channel_id, NULL, e.event, p.job_id, p.id, jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name),
        'run', jsonb_build_object('id', p.id, 'scheduled_at', p.scheduled_at,
            'status', p.status, 'attempt', p.attempts, 'error', p.last_error))
    FROM reaped p
    CROSS JOIN LATERAL (SELECT CASE p.status WHEN 'dead' THEN 'run_dead' ELSE 'run_failed' END
                        AS event) e
    CROSS JOIN LATERAL notify_targets(p.job_id, e.event) c
    JOIN jobs j ON j.id = p.job_id
    UNION ALL
    SELECT NULL, rtrim(pj.ping_url, '/') || '/fail', 'ping_fail', p.job_id, p.id, '{}'::jsonb
    FROM reaped p JOIN jobs pj ON pj.id = p.job_id
    WHERE p.status = 'dead' AND pj.ping_url IS NOT NULL
), lost AS (
    INSERT INTO outbox (channel_id, event, dedupe_key, data)
    SELECT DISTINCT ON (c.channel_id, p.lease_owner) c.channel_id, 'worker_lost',
           'worker_lost:' || p.lease_owner || ':' || coalesce(w.started_at::text, ''),
           jsonb_build_object('worker_id', p.lease_owner, 'host', w.host,
                              'last_seen_at', w.last_seen_at)
    FROM reaped p CROSS JOIN LATERAL notify_targets(p.job_id, 'worker_lost') c
    LEFT JOIN workers w ON w.id = p.lease_owner
    ON CONFLICT (channel_id, dedupe_key) DO NOTHING
), streak_in AS (
    -- Reaped runs count for job_failing only: a lost lease is not the handler's doing, so
    -- it neither grows nor resets the auto-pause streak.
    SELECT p.job_id, count(*)::int AS n, max(p.id) AS run_id FROM reaped p
    WHERE p.status = 'dead'
      AND EXISTS (SELECT 1 FROM notify_targets(p.job_id, 'job_failing')
                  UNION ALL SELECT 1 FROM notify_targets(p.job_id, 'job_recovered'))
    GROUP BY p.job_id
), streak_grow AS (
    INSERT INTO job_streaks AS s (job_id, dead_streak)
    SELECT job_id, n FROM streak_in
    ON CONFLICT (job_id) DO UPDATE SET dead_streak = s.dead_streak + EXCLUDED.dead_streak
    RETURNING s.job_id, s.dead_streak
), job_events AS (
    INSERT INTO outbox (channel_id, event, job_id, run_id, data)
    SELECT c.channel_id, 'job_failing', g.job_id, i.run_id,
           jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name), 'streak', g.dead_streak, 'run',
                              jsonb_build_object('id', i.run_id))
    FROM streak_grow g JOIN streak_in i ON i.job_id = g.job_id
    CROSS JOIN LATERAL notify_targets(g.job_id, 'job_failing') c
    JOIN jobs j ON j.id = g.job_id
    WHERE g.dead_streak >= j.job_failing_after AND g.dead_streak - i.n < j.job_failing_after
)
-- The job's name and type label the metrics exactly as the executor's results do.
SELECT p.id, p.job_id, j.name AS job_name, p.type, p.attempts, p.status::text AS status,
       p.lease_owner
FROM reaped p JOIN jobs j ON j.id = p.job_id;

-- name: heartbeat_ping
-- The deployment's heartbeat ping: one outbox row per minute on the database clock,
-- cluster-wide (outbox_ping_once), whichever planner writes it first. Returns 1 or 0.
INSERT INTO outbox (url, event, dedupe_key, data)
VALUES ($1::text, 'heartbeat',
        'heartbeat:' || to_char(date_trunc('minute', now() AT TIME ZONE 'UTC'),
                                'YYYY-MM-DD"T"HH24:MI"Z"'),
        '{}'::jsonb)
ON CONFLICT (dedupe_key) WHERE channel_id IS NULL DO NOTHING;

-- ---------------------------------------------------------------- retention

-- name: prune_runs
-- Finished runs (and, by cascade, their attempts) past retention, oldest first, in small
-- batches so no lock is held long. Scheduled, failed (retry pending) and running runs have
-- no finished_at and are never touched. $4: where the previous batch of this sweep ended
-- (NULL to start one): each batch starts its walk of runs_finished there instead of
-- stepping again over the index entries of every run deleted before it. Returns how many
-- were deleted and the newest finished_at among them.
WITH doomed AS (
    SELECT id, finished_at FROM runs
    WHERE finished_at >= COALESCE($4::timestamptz, '-infinity')
      AND finished_at < now() - make_interval(secs => least($1::float8, $2::float8))
      AND ((status IN ('succeeded', 'skipped')
            AND finished_at < now() - make_interval(secs => $1::float8))
        OR (status IN ('dead', 'cancelled')
            AND finished_at < now() - make_interval(secs => $2::float8)))
    ORDER BY finished_at
    LIMIT $3::int
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM runs r USING doomed WHERE r.id = doomed.id RETURNING doomed.finished_at
)
SELECT count(*) AS deleted, max(finished_at) AS reached FROM gone;

-- name: prune_deliveries
-- Delivered and failed deliveries (and, by cascade, their attempts) whose event is older
-- than $1 seconds, oldest first in small batches: a walk of outbox_history from the oldest
-- id, which stops after $2 rows (no index on the time; ids grow with created_at). Pending
-- ones are never touched.
WITH doomed AS (
    SELECT id FROM outbox
    WHERE status IN ('delivered', 'failed')
      AND created_at < now() - make_interval(secs => $1::float8)
    ORDER BY id
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox o USING doomed WHERE o.id = doomed.id;

-- ---------------------------------------------------------------- observability

-- name: late_runs
-- Due runs that waited longer than $1 seconds, oldest first (the first $2 of each type's
-- range, merged), and whether any live worker offers their type.
WITH RECURSIVE {{claimable_types}}
SELECT l.id, l.job_id, l.job_name, l.type, l.run_after, l.scheduled_at,
       EXTRACT(EPOCH FROM (now() - l.run_after))::float8 AS late_seconds,
       EXISTS (SELECT 1 FROM workers w
               WHERE worker_is_live(w) AND l.type = ANY(w.types)) AS offered
FROM claimable_types t CROSS JOIN LATERAL (
    SELECT r.id, r.job_id, j.name AS job_name, r.type, r.run_after, r.scheduled_at
    FROM runs r JOIN jobs j ON j.id = r.job_id
    WHERE r.type = t.type AND r.status IN ('scheduled', 'failed')
      AND r.run_after < now() - make_interval(secs => $1::float8)
      AND NOT j.paused AND j.deleted_at IS NULL
    ORDER BY r.run_after LIMIT $2::int) l
ORDER BY l.run_after
LIMIT $2::int;

-- name: database_gauges
-- One round trip for the API's database-wide gauges. Due runs are counted per type
-- (claimable_types). Runs per status: counted where the statistics put a status below $1
-- rows, else estimated as the planner does (a status's frequency in pg_stats times the
-- table's rows scaled to its current size), as counting ten million finished runs would cost
-- seconds a scrape. No statistics yet (never analyzed): counted.
WITH RECURSIVE {{claimable_types}}, due AS (
    SELECT d.n, d.oldest FROM claimable_types t CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(r.run_after) AS oldest
        FROM runs r JOIN jobs j ON j.id = r.job_id
        WHERE r.type = t.type AND r.status IN ('scheduled', 'failed') AND r.run_after <= now()
          AND NOT j.paused AND j.deleted_at IS NULL) d
), status_stats AS (
    SELECT c.reltuples / c.relpages
               * (pg_relation_size(c.oid) / current_setting('block_size')::float8) AS total,
           s.most_common_vals::text::text[] AS vals, s.most_common_freqs AS freqs,
           s.null_frac, s.n_distinct
    FROM pg_class c
    JOIN pg_namespace ns ON ns.oid = c.relnamespace
    JOIN pg_stats s ON s.schemaname = ns.nspname AND s.tablename = c.relname
                   AND s.attname = 'status'
    WHERE c.oid = 'runs'::regclass AND c.reltuples > 0 AND c.relpages > 0
), status_guess AS (
    -- A status in the most-common list: its frequency; else an equal share of the rest.
    SELECT e.status, (
        SELECT st.total * coalesce(
            st.freqs[array_position(st.vals, e.status::text)],
            greatest(1 - st.null_frac - coalesce((SELECT sum(f) FROM unnest(st.freqs) f), 0), 0)
                / greatest(CASE WHEN st.n_distinct < 0 THEN -st.n_distinct * st.total
                                ELSE st.n_distinct END - coalesce(cardinality(st.vals), 0), 1))
        FROM status_stats st) AS guess
    FROM unnest(enum_range(NULL::run_status)) AS e(status)
), status_counts AS (
    SELECT g.status, g.estimated,
           CASE WHEN g.estimated THEN round(g.guess)::bigint
                ELSE (SELECT count(*) FROM runs r WHERE r.status = g.status) END AS n
    FROM (SELECT *, coalesce(guess >= $1::float8, false) AS estimated FROM status_guess) g
)
SELECT
    (SELECT jsonb_object_agg(c.status::text, c.n) FROM status_counts c) AS runs_by_status,
    (SELECT coalesce(jsonb_agg(c.status::text ORDER BY c.status), '[]'::jsonb)
       FROM status_counts c WHERE c.estimated) AS runs_estimated,
    (SELECT coalesce(sum(n), 0)::bigint FROM due) AS due_waiting,
    (SELECT coalesce(EXTRACT(EPOCH FROM (now() - min(oldest))), 0)::float8 FROM due)
        AS oldest_due_age,
    (SELECT count(*) FROM workers w WHERE worker_is_live(w)) AS live_workers,
    (SELECT count(*) FROM jobs j WHERE NOT j.paused AND j.deleted_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM workers w WHERE worker_is_live(w)
            AND j.type = ANY(w.types))) AS unserved_jobs,
    (SELECT count(*) FROM jobs WHERE NOT paused AND deleted_at IS NULL
        AND plan_after <= now() - interval '1 minute') AS jobs_behind;

-- name: last_success_ages
-- Seconds since each active job's last success (NULL: never succeeded yet).
-- Walks runs_job_scheduled_at newest first: past the planned runs to the latest success.
SELECT j.name,
       EXTRACT(EPOCH FROM (now() - (SELECT r.finished_at FROM runs r
                                    WHERE r.job_id = j.id AND r.status = 'succeeded'
                                    ORDER BY r.scheduled_at DESC LIMIT 1)))::float8
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
-- A clean stop; the duties it held are free at once (DESIGN.md, Fleet).
WITH freed AS (
    UPDATE duties SET expires_at = '-infinity', holder = NULL WHERE holder = $1::text
)
UPDATE workers SET stopped_at = now(), running = 0, last_seen_at = now()
WHERE id = $1::text;

-- ---------------- api
-- The management API's queries. History lists are keyset-paginated newest first on
-- (scheduled_at, id); each list query is driven by one index (runs_status_history or
-- runs_job_scheduled_at) and absent bounds are passed as +-infinity so
-- the generic plan keeps them as index conditions.

-- name: last_attempt_workers
-- The worker of the last attempt of each of the runs $1 (a page): one backward probe of
-- run_attempts' primary key per run.
SELECT r.id AS run_id, a.worker_id
FROM unnest($1::bigint[]) AS r (id)
CROSS JOIN LATERAL (
    SELECT x.worker_id FROM run_attempts x WHERE x.run_id = r.id
    ORDER BY x.attempt DESC LIMIT 1) a;

-- name: job_ids_matching
-- The dashboard's job filter: names holding $1 in any case (strpos: no LIKE wildcards),
-- deleted jobs included as above; the first $2 by name (a scan of jobs, never of runs).
SELECT id FROM jobs WHERE strpos(lower(name), lower($1::text)) > 0 ORDER BY name, id
LIMIT $2::int;

-- name: job_ids_by_name
-- Deleted jobs keep their name in history, so a name may map to several ids.
SELECT id FROM jobs WHERE name = $1::text ORDER BY id;

-- name: type_has_live_worker
SELECT EXISTS (
    SELECT 1 FROM workers w WHERE worker_is_live(w) AND $1::text = ANY (w.types));

-- name: replan_one_off
-- A one-off job whose time changed: its unstarted run belongs to the old time, and the
-- planner plans a one-off only while planned_until is NULL.
WITH gone AS (
    DELETE FROM runs
    WHERE job_id = $1::bigint AND status = 'scheduled' AND attempts = 0
      AND trigger = 'schedule'
)
UPDATE jobs SET planned_until = NULL, plan_after = '-infinity' WHERE id = $1::bigint;

-- name: trigger_run
-- A manual run due now. ON CONFLICT covers both a repeated Idempotency-Key (the caller then
-- reads the existing run) and the rare clash with a run planned at the same microsecond
-- ($4 shifts scheduled_at by that many microseconds on a retry). The wake-up names the
-- run's type (DESIGN.md, Fleet) and is sent at COMMIT.
WITH ins AS (
INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, exclusive, max_attempts,
                  payload, idempotency_key)
SELECT j.id, now() + make_interval(secs => $4::int / 1e6), now() + make_interval(secs => $4::int / 1e6),
       'manual', j.type, j.overlap <> 'allow', j.max_attempts, $2::jsonb, $3::text
FROM jobs j WHERE j.id = $1::bigint AND j.deleted_at IS NULL
ON CONFLICT DO NOTHING
RETURNING id, type
)
SELECT id FROM ins,
    LATERAL (SELECT pg_notify('punchclock_wake', (random() * 1e9)::int || ' ' || ins.type)) n;

-- name: run_by_idempotency_key
SELECT id, payload FROM runs WHERE job_id = $1::bigint AND idempotency_key = $2::text;

-- name: get_run_detail
SELECT r.*, j.name AS job_name, j.timezone FROM runs r JOIN jobs j ON j.id = r.job_id
WHERE r.id = $1::bigint;

-- name: list_run_attempts
SELECT * FROM run_attempts WHERE run_id = $1::bigint ORDER BY attempt;

-- name: list_runs_by_status
-- History in any of $1 statuses (the API passes every status when none is asked for): runs
-- due by now (database clock), newest first. One runs_status_history range per status
-- (the branch is repeated for each, the ones not in $1 cut by a one-time filter), merged
-- in order, so a page reads about a page of rows. $2/$3 the cursor (exclusive), clamped to
-- (now(), max id) in the index condition itself: a plain `scheduled_at <= now()` beside
-- the cursor lets the scan start at the first page's (infinity, max) key and step over
-- every planned run. $4/$5 the scheduled range [after, before), $6/$7 the finished range
-- (NULL: no filter). The other lists share the clamp (the upcoming ones clamp up to now).
SELECT r.id, r.job_id, j.name AS job_name, j.timezone, r.scheduled_at, r.status, r.trigger,
       r.attempts, r.max_attempts, r.run_after, r.lease_owner, r.lease_expires_at,
       r.started_at, r.finished_at, r.last_error, r.skip_reason, r.idempotency_key,
       r.created_at
FROM (
    SELECT * FROM (
        -- each status:
        (SELECT * FROM runs x
         WHERE x.status = '{status}' AND '{status}' = ANY ($1::run_status[])
           AND (x.scheduled_at, x.id) < (LEAST($2::timestamptz, now()),
                                         CASE WHEN $2::timestamptz <= now() THEN $3::bigint
                                              ELSE 9223372036854775807 END)
           AND x.scheduled_at >= $4::timestamptz AND x.scheduled_at < $5::timestamptz
           AND ($6::timestamptz IS NULL OR x.finished_at >= $6::timestamptz)
           AND ($7::timestamptz IS NULL OR x.finished_at < $7::timestamptz)
         ORDER BY x.scheduled_at DESC, x.id DESC
         LIMIT $8::int)
        -- end each
    ) u
    ORDER BY scheduled_at DESC, id DESC
    LIMIT $8::int
) r
JOIN jobs j ON j.id = r.job_id
ORDER BY r.scheduled_at DESC, r.id DESC;

-- name: list_runs_by_job
-- History of the jobs $1 (a name may map to several ids), optionally in statuses $2:
-- one runs_job_scheduled_at range per job, read backwards, merged. scheduled_at is unique
-- within a job, so the scan starts at scheduled_at <= the cursor's time (an index
-- condition) and the (scheduled_at, id) keyset, a filter, drops at most the cursor's row.
-- The (job_id, scheduled_at) row bound repeats that start for the generic plan's estimate:
-- with the range alone it guesses 4 rows and sorts a bitmap scan of the job's whole
-- history; with it, the ordered index scan that stops after a page costs less.
SELECT r.id, r.job_id, j.name AS job_name, j.timezone, r.scheduled_at, r.status, r.trigger,
       r.attempts, r.max_attempts, r.run_after, r.lease_owner, r.lease_expires_at,
       r.started_at, r.finished_at, r.last_error, r.skip_reason, r.idempotency_key,
       r.created_at
FROM unnest($1::bigint[]) AS s (job_id)
CROSS JOIN LATERAL (
    SELECT * FROM runs x
    WHERE x.job_id = s.job_id AND ($2::run_status[] IS NULL OR x.status = ANY ($2::run_status[]))
      AND (x.job_id, x.scheduled_at) <= (s.job_id, LEAST($3::timestamptz, now()))
      AND (x.scheduled_at, x.id) < (LEAST($3::timestamptz, now()),
                                    CASE WHEN $3::timestamptz <= now() THEN $4::bigint
                                         ELSE 9223372036854775807 END)
      AND x.scheduled_at >= $5::timestamptz AND x.scheduled_at < $6::timestamptz
      AND ($7::timestamptz IS NULL OR x.finished_at >= $7::timestamptz)
      AND ($8::timestamptz IS NULL OR x.finished_at < $8::timestamptz)
    ORDER BY x.scheduled_at DESC
    LIMIT $9::int
) r
JOIN jobs j ON j.id = r.job_id
ORDER BY r.scheduled_at DESC, r.id DESC
LIMIT $9::int;

-- name: list_runs_upcoming_by_status
-- The plan ahead in any of $1 statuses: runs scheduled after now(), soonest first, the
-- same per-status ranges read forwards and merged. $2/$3 the cursor (exclusive), clamped
-- up to (now(), max id); the rest as list_runs_by_status. The plain scheduled_at bound
-- repeats the row comparison's: PostgreSQL 18 does not start a backward scan of the DESC
-- index at a row comparison, and read every succeeded run's entry to find none ahead
-- (26.9 ms p50 at 1,000,000 runs, growing with the history; DESIGN.md, Indexes).
SELECT r.id, r.job_id, j.name AS job_name, j.timezone, r.scheduled_at, r.status, r.trigger,
       r.attempts, r.max_attempts, r.run_after, r.lease_owner, r.lease_expires_at,
       r.started_at, r.finished_at, r.last_error, r.skip_reason, r.idempotency_key,
       r.created_at
FROM (
    SELECT * FROM (
        -- each status:
        (SELECT * FROM runs x
         WHERE x.status = '{status}' AND '{status}' = ANY ($1::run_status[])
           AND x.scheduled_at >= GREATEST($2::timestamptz, now())
           AND (x.scheduled_at, x.id) > (GREATEST($2::timestamptz, now()),
                                         CASE WHEN $2::timestamptz > now() THEN $3::bigint
                                              ELSE 9223372036854775807 END)
           AND x.scheduled_at >= $4::timestamptz AND x.scheduled_at < $5::timestamptz
           AND ($6::timestamptz IS NULL OR x.finished_at >= $6::timestamptz)
           AND ($7::timestamptz IS NULL OR x.finished_at < $7::timestamptz)
         ORDER BY x.scheduled_at, x.id
         LIMIT $8::int)
        -- end each
    ) u
    ORDER BY scheduled_at, id
    LIMIT $8::int
) r
JOIN jobs j ON j.id = r.job_id
ORDER BY r.scheduled_at, r.id;

-- name: list_runs_upcoming_by_job
-- The plan ahead of the jobs $1, optionally in statuses $2: one runs_job_scheduled_at
-- range per job, read forwards, merged (bounded as list_runs_by_job is).
SELECT r.id, r.job_id, j.name AS job_name, j.timezone, r.scheduled_at, r.status, r.trigger,
       r.attempts, r.max_attempts, r.run_after, r.lease_owner, r.lease_expires_at,
       r.started_at, r.finished_at, r.last_error, r.skip_reason, r.idempotency_key,
       r.created_at
FROM unnest($1::bigint[]) AS s (job_id)
CROSS JOIN LATERAL (
    SELECT * FROM runs x
    WHERE x.job_id = s.job_id AND ($2::run_status[] IS NULL OR x.status = ANY ($2::run_status[]))
      AND (x.job_id, x.scheduled_at) >= (s.job_id, GREATEST($3::timestamptz, now()))
      AND (x.scheduled_at, x.id) > (GREATEST($3::timestamptz, now()),
                                    CASE WHEN $3::timestamptz > now() THEN $4::bigint
                                         ELSE 9223372036854775807 END)
      AND x.scheduled_at >= $5::timestamptz AND x.scheduled_at < $6::timestamptz
      AND ($7::timestamptz IS NULL OR x.finished_at >= $7::timestamptz)
      AND ($8::timestamptz IS NULL OR x.finished_at < $8::timestamptz)
    ORDER BY x.scheduled_at
    LIMIT $9::int
) r
JOIN jobs j ON j.id = r.job_id
ORDER BY r.scheduled_at, r.id
LIMIT $9::int;

-- name: requeue_run
-- A dead or failed run is due again now with a fresh attempt budget; attempt numbers keep
-- increasing so the history stays unique. The job's current type and overlap apply.
UPDATE runs r SET status = 'scheduled', run_after = now(), finished_at = NULL,
    skip_reason = NULL, max_attempts = r.attempts + j.max_attempts, type = j.type,
    exclusive = j.overlap <> 'allow'
FROM jobs j
WHERE r.id = $1::bigint AND j.id = r.job_id AND j.deleted_at IS NULL
  AND r.status IN ('dead', 'failed')
RETURNING r.id;

-- name: requeue_runs
-- Bulk requeue with the list's filters ($1 statuses, a subset of dead and failed).
UPDATE runs r SET status = 'scheduled', run_after = now(), finished_at = NULL,
    skip_reason = NULL, max_attempts = r.attempts + j.max_attempts, type = j.type,
    exclusive = j.overlap <> 'allow'
FROM jobs j
WHERE j.id = r.job_id AND j.deleted_at IS NULL
  AND r.status = ANY ($1::run_status[]) AND r.status IN ('dead', 'failed')
  AND ($2::bigint[] IS NULL OR r.job_id = ANY ($2::bigint[]))
  AND r.scheduled_at >= $3::timestamptz AND r.scheduled_at < $4::timestamptz
  AND ($5::timestamptz IS NULL OR r.finished_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR r.finished_at < $6::timestamptz);

-- name: lock_run
-- Cancel locks the run first: a claim that committed meanwhile is then visible to the next
-- statement (its attempt row included), which a single statement's snapshot would miss.
SELECT id, status FROM runs WHERE id = $1::bigint FOR UPDATE;

-- name: cancel_waiting_run
UPDATE runs SET status = 'cancelled', finished_at = now(), last_error = $2::text
WHERE id = $1::bigint AND status IN ('scheduled', 'failed')
RETURNING id;

-- name: revoke_running_run
-- Revoke the lease: the holder's next renewal finds nothing and kills the child, and its
-- fenced completion matches no row (runs_lease_when_running needs the lease cleared).
WITH revoked AS (
    -- greatest(): a run claimed ahead (claim_ahead) has started_at at its instant.
    UPDATE runs SET status = 'cancelled', finished_at = greatest(now(), started_at),
        lease_owner = NULL, lease_expires_at = NULL, last_error = $2::text
    WHERE id = $1::bigint AND status = 'running'
    RETURNING id, attempts
), att AS (
    UPDATE run_attempts a SET finished_at = greatest(now(), a.started_at),
        outcome = 'cancelled', error = $2::text
    FROM revoked v
    WHERE a.run_id = v.id AND a.attempt = v.attempts AND a.outcome = 'running'
)
SELECT id FROM revoked;

-- name: list_workers
-- Live workers and those seen within the last $1 seconds, live first.
SELECT w.*, worker_is_live(w) AS live
FROM workers w
WHERE w.last_seen_at > now() - make_interval(secs => $1::float8) OR worker_is_live(w)
ORDER BY live DESC, w.last_seen_at DESC, w.id
LIMIT $2::int;

-- name: set_pause_reason
-- Why a paused job is paused ($2, NULL: not said); resuming clears it (migration 0004).
UPDATE jobs SET pause_reason = $2::text
WHERE id = $1::bigint AND deleted_at IS NULL AND paused
RETURNING *;

-- name: backfill_holes
-- Of the instants $2, those job $1 has no run at (runs_job_scheduled_at), in order.
SELECT t.at FROM unnest($2::timestamptz[]) AS t(at)
WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = $1::bigint AND r.scheduled_at = t.at)
ORDER BY t.at;

-- name: insert_backfill_runs
-- Runs of job $1 at the instants $2, due now, trigger 'backfill'; an instant that has a run
-- by now is left alone.
INSERT INTO runs (job_id, scheduled_at, run_after, trigger, type, exclusive, max_attempts)
SELECT j.id, t.at, now(), 'backfill', j.type, j.overlap <> 'allow', j.max_attempts
FROM jobs j, unnest($2::timestamptz[]) AS t(at)
WHERE j.id = $1::bigint AND j.deleted_at IS NULL
ON CONFLICT DO NOTHING
RETURNING id;
