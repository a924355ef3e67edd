-- Runs refer to their job without a foreign key. The key's check was a per-row trigger (an
-- SPI query and a KEY SHARE lock of the job for every inserted run): about a fifth of what
-- PostgreSQL spends inserting a planned run (README, Performance). What it proved now holds
-- by rule: jobs are never deleted (a deleted job keeps its row, deleted_at set, and its
-- history), which these triggers enforce, and every insert into runs takes its job_id from
-- a jobs row in the same statement (insert_planned_runs, trigger_run, insert_backfill_runs).
ALTER TABLE runs DROP CONSTRAINT runs_job_id_fkey;

CREATE FUNCTION jobs_never_deleted() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'jobs are never deleted: set deleted_at instead (runs refer to their job)'
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER jobs_never_deleted BEFORE DELETE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_never_deleted();
CREATE TRIGGER jobs_never_truncated BEFORE TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_never_deleted();
