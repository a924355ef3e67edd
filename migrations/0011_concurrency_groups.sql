-- Concurrency limits across all hosts: named groups that jobs join (at most max_running of
-- their runs running at once), and a job's own max_concurrent. Enforced in claim_runs:
-- a running run holds a numbered slot below its limit, and the partial unique indexes
-- below make two hosts taking the same slot a unique violation (the claim is retried), so
-- no race exceeds a limit. A run leaving `running` frees its slots with no other write.
CREATE TABLE concurrency_groups (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    max_running integer NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE jobs
    ADD COLUMN concurrency_group text REFERENCES concurrency_groups (name) ON DELETE RESTRICT,
    ADD COLUMN max_concurrent integer CHECK (max_concurrent BETWEEN 1 AND 1000);

-- The slots a running run holds (set by each claim; meaningless once it stops running).
ALTER TABLE runs
    ADD COLUMN job_slot integer,
    ADD COLUMN run_group text,
    ADD COLUMN group_slot integer;

CREATE UNIQUE INDEX runs_job_slot ON runs (job_id, job_slot)
    WHERE status = 'running' AND job_slot IS NOT NULL;
CREATE UNIQUE INDEX runs_group_slot ON runs (run_group, group_slot)
    WHERE status = 'running' AND group_slot IS NOT NULL;
