-- "A worker is live": not stopped, and seen within two lease TTLs (it heartbeats every
-- TTL/3, so two missed heartbeats plus slack). One definition for every query; a one-line
-- SQL function is inlined by the planner.
CREATE FUNCTION worker_is_live(w workers) RETURNS boolean
LANGUAGE sql STABLE
AS $$ SELECT w.stopped_at IS NULL AND w.last_seen_at > now() - make_interval(secs => 2 * w.lease_ttl) $$;
