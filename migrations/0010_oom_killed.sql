-- An attempt whose handler the kernel killed for its cgroup memory limit (issue 15).
-- PostgreSQL 12+ allows ADD VALUE in a transaction; the value is first used by later ones.
ALTER TYPE attempt_outcome ADD VALUE IF NOT EXISTS 'oom_killed' AFTER 'timed_out';
