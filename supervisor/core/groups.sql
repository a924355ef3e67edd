-- Concurrency groups (groups.py): the limits jobs join, enforced by claim_runs.

-- name: insert_group
INSERT INTO concurrency_groups (name, max_running) VALUES ($1::text, $2::int)
RETURNING name, max_running, created_at, updated_at, 0::bigint AS running;

-- name: update_group
-- A new limit applies to the next claim; running runs above it finish.
UPDATE concurrency_groups SET max_running = $2::int, updated_at = now()
WHERE name = $1::text
RETURNING name, max_running, created_at, updated_at,
    (SELECT count(*) FROM runs r WHERE r.run_group = $1::text AND r.status = 'running'
       AND r.group_slot IS NOT NULL) AS running;

-- name: list_groups
-- Every group with how many of its runs are running (runs_group_slot), by name.
SELECT g.name, g.max_running, g.created_at, g.updated_at,
    (SELECT count(*) FROM runs r WHERE r.run_group = g.name AND r.status = 'running'
       AND r.group_slot IS NOT NULL) AS running
FROM concurrency_groups g
WHERE $1::text IS NULL OR g.name = $1::text
ORDER BY g.name;

-- name: delete_group
-- Only a group no live job is in; soft-deleted jobs left theirs when deleted.
DELETE FROM concurrency_groups g
WHERE g.name = $1::text
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.concurrency_group = g.name)
RETURNING g.name;

-- name: group_members
SELECT count(*) FROM jobs WHERE concurrency_group = $1::text AND deleted_at IS NULL;

-- name: set_job_limits
-- A job's concurrency limits, written with the job (jobs.create_job/update_job). The group
-- row is share-locked, so it cannot be deleted until this commits; NULL when it is gone.
UPDATE jobs SET concurrency_group = $2::text, max_concurrent = $3::int
WHERE id = $1::bigint AND deleted_at IS NULL
  AND ($2::text IS NULL
       OR EXISTS (SELECT 1 FROM concurrency_groups g WHERE g.name = $2::text FOR SHARE))
RETURNING *;

-- name: run_waiting_for
-- What holds a due, waiting run back, if a concurrency limit does: its job's max_concurrent
-- or its group's limit, each reached (counted from runs_job_slot / runs_group_slot).
SELECT CASE
    WHEN j.max_concurrent IS NOT NULL AND j.max_concurrent <= (
        SELECT count(*) FROM runs x WHERE x.job_id = r.job_id AND x.status = 'running'
          AND x.job_slot IS NOT NULL)
    THEN 'job ' || j.name || ': max_concurrent ' || j.max_concurrent || ' running'
    WHEN g.name IS NOT NULL AND g.max_running <= (
        SELECT count(*) FROM runs x WHERE x.run_group = g.name AND x.status = 'running'
          AND x.group_slot IS NOT NULL)
    THEN 'group ' || g.name || ': ' || g.max_running || ' running'
    END AS waiting_for
FROM runs r JOIN jobs j ON j.id = r.job_id
LEFT JOIN concurrency_groups g ON g.name = j.concurrency_group
WHERE r.id = $1::bigint AND r.status IN ('scheduled', 'failed') AND r.run_after <= now();
