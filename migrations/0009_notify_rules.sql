-- Per-job notification rules (DESIGN.md, Notifications): auto-pause after N consecutive
-- failures of the handler's own doing, the N of job_failing, job_silent's window, a job's
-- own run_late threshold, outbound pings (a job's ping_url, the deployment's heartbeat) and
-- a channel's opt-in to payloads.

ALTER TABLE jobs
    -- NULL: never auto-paused.
    ADD COLUMN pause_after_failures integer
        CONSTRAINT jobs_pause_after_failures_range CHECK (pause_after_failures BETWEEN 1 AND 1000),
    -- job_failing when the dead streak reaches this (job_recovered only after it did).
    ADD COLUMN job_failing_after integer NOT NULL DEFAULT 1
        CONSTRAINT jobs_job_failing_after_range CHECK (job_failing_after BETWEEN 1 AND 1000);

-- The auto-pause streak: consecutive dead runs whose last attempt ended by the handler's own
-- doing (outcome failed or timed_out). dead_streak (job_failing) counts every dead run. A
-- success deletes the row (both streaks end); a resume zeroes pause_streak (trigger below).
ALTER TABLE job_streaks ADD COLUMN pause_streak integer NOT NULL DEFAULT 0;

-- Every path that resumes a job (API, CLI, dashboard, a PATCH of paused) sets `paused`: the
-- trigger makes each of them start the auto-pause count again.
CREATE FUNCTION jobs_reset_pause_streak() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE job_streaks SET pause_streak = 0 WHERE job_id = NEW.id AND pause_streak <> 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_reset_pause_streak AFTER UPDATE OF paused ON jobs
    FOR EACH ROW WHEN (OLD.paused AND NOT NEW.paused)
    EXECUTE FUNCTION jobs_reset_pause_streak();

-- job_silent (the dead-man's switch) and a job's own run_late threshold.
ALTER TABLE jobs
    -- job_silent when the job has had no success for this long (NULL: never told).
    ADD COLUMN expect_success_within_seconds double precision
        CONSTRAINT jobs_expect_success_range
        CHECK (expect_success_within_seconds BETWEEN 1 AND 31622400),
    -- run_late after a due run waited this long (NULL: the configured ready_max_lag).
    ADD COLUMN late_after_seconds double precision
        CONSTRAINT jobs_late_after_range CHECK (late_after_seconds BETWEEN 1 AND 604800);
-- No index for them: the periodic checks (every 15 s) scan jobs, while every index on jobs
-- is one more lock and plan input for claim_runs and complete_runs, which join it.

-- Outbound pings (healthchecks.io / Cronitor convention): GET {ping_url}/start on start,
-- {ping_url} on success, {ping_url}/fail on a final failure; and the deployment's heartbeat.
-- Their outbox rows have a URL instead of a channel (write-only like a channel's secret:
-- such URLs hold a token).
ALTER TABLE jobs ADD COLUMN ping_url text
    CONSTRAINT jobs_ping_url_form CHECK (ping_url ~ '^https?://' AND char_length(ping_url) <= 2000);
ALTER TABLE outbox ALTER COLUMN channel_id DROP NOT NULL;
ALTER TABLE outbox ADD COLUMN url text,
    ADD CONSTRAINT outbox_one_destination CHECK ((channel_id IS NULL) <> (url IS NULL));
-- One heartbeat per minute cluster-wide, whichever planner writes it.
CREATE UNIQUE INDEX outbox_ping_once ON outbox (dedupe_key) WHERE channel_id IS NULL;

-- A channel that opts in gets the run's payload in its events (added when the delivery is
-- sent, from the run: its own payload, else its job's). Default: never.
ALTER TABLE channels ADD COLUMN include_payload boolean NOT NULL DEFAULT false;
