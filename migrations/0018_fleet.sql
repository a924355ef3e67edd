-- A fleet on one PostgreSQL (DESIGN.md, Fleet). Duties that one host per tick does for all
-- (planning, reaping, catch-up, pruning, notifications, the census) are held under short
-- leases that the hosts' heartbeats take and renew; a duty whose holder died is free again
-- when its lease ends. Rows are added by the supervisors (ON CONFLICT DO NOTHING), so a
-- new duty needs no migration.
CREATE TABLE duties (
    name        text PRIMARY KEY,
    holder      text,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity'
);
-- Per offered type, this worker's seat among the live workers offering it and how many
-- they are ({"type": [seat, size]}), written by the census duty: whom a NOTIFY wakes and
-- how often each host polls.
ALTER TABLE workers ADD COLUMN seats jsonb NOT NULL DEFAULT '{}';
-- A host that holds no lease and no duty beats less often the larger the fleet (so the
-- fleet's beats stay about 20 a second): it says how often, and it is live for two of its
-- beats or two lease TTLs, whichever is longer.
ALTER TABLE workers ADD COLUMN beat_every double precision NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION worker_is_live(w workers) RETURNS boolean
LANGUAGE sql STABLE
AS $$ SELECT w.stopped_at IS NULL
         AND w.last_seen_at > now() - make_interval(secs => 2 * greatest(w.lease_ttl, w.beat_every)) $$;
-- The heartbeat updates last_seen_at: without an index on it the update is HOT (no index
-- entry per beat). The few reads by last_seen_at scan a table of one row per host.
DROP INDEX workers_last_seen;
