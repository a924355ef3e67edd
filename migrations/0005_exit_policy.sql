-- A job's exit-code policy (supervisor/core/exitpolicy.py, handlers/README.md): exit statuses
-- that count as success; endings that end the run at once; endings retried (NULL: every
-- failure not in dead_on). Endings are exit statuses as text or signal/timeout/oom_killed.
ALTER TABLE jobs
    ADD COLUMN success_exit_codes integer[] NOT NULL DEFAULT '{0}',
    ADD COLUMN dead_on text[] NOT NULL DEFAULT '{65}',
    ADD COLUMN retry_on text[];
