-- Why a job is paused (optional; the dashboard's pause form sets it). A trigger clears it
-- whenever a job is resumed, so every path that resumes (API, CLI, dashboard) forgets it.
ALTER TABLE jobs ADD COLUMN pause_reason text
    CONSTRAINT jobs_pause_reason_length CHECK (char_length(pause_reason) <= 500);

CREATE FUNCTION jobs_clear_pause_reason() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT NEW.paused THEN
        NEW.pause_reason := NULL;
    END IF;
    RETURN NEW;
END
$$;

-- Only statements that set `paused` fire it: the planner's updates of jobs never do.
CREATE TRIGGER jobs_clear_pause_reason BEFORE UPDATE OF paused ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_clear_pause_reason();
