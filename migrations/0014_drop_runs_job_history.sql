-- A job's runs are read through the unique runs_job_scheduled_at (job_id, scheduled_at):
-- scheduled_at is unique within a job, so (scheduled_at) orders a job's runs as
-- (scheduled_at, id) did and runs_job_history (job_id, scheduled_at DESC, id DESC) only
-- repeated it. Every run wrote it three times (planned, claimed, ended; none of those
-- updates is HOT): about an eighth of what PostgreSQL spends inserting a planned run
-- (README, Performance). The job-scoped queries order by scheduled_at alone and bound it
-- as an index condition (queries.sql, ui.sql, notify.sql).
DROP INDEX runs_job_history;
