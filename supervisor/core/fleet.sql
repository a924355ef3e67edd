-- The fleet's shared upkeep (DESIGN.md, Fleet): duty leases taken by the heartbeat, the
-- census that seats the hosts per type, and typed wake-ups. Blocks run by core/fleet.py.

-- name: add_duties
-- The duties this build knows, free until a heartbeat takes them.
INSERT INTO duties (name) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING;

-- name: beat
-- A host's heartbeat, one statement: its worker row (a HOT update: no index covers what
-- changes), the duties it holds renewed (only while still its own on the database clock),
-- and at most one free duty taken (SKIP LOCKED: hosts beating together take different
-- ones). A host that holds a duty already ($5) takes one only after it has been free for
-- one beat ($6 seconds), so the hosts that hold none take the free ones first; $7: how
-- often this host beats while it holds nothing (worker_is_live). $8: a duty it gives up
-- ('' none), free at once for a host that holds none. Returns the
-- host's seats, the duties it holds now, and how many are still free.
WITH me AS (
    UPDATE workers SET last_seen_at = now(), running = $2::int, beat_every = $7::float8
    WHERE id = $1::text
    RETURNING seats
), kept AS (
    UPDATE duties SET expires_at = now() + make_interval(secs => $3::float8)
    WHERE name = ANY($4::text[]) AND holder = $1::text AND expires_at > now()
    RETURNING name
), given AS (
    UPDATE duties SET expires_at = now(), holder = NULL
    WHERE name = $8::text AND holder = $1::text
), free AS (
    SELECT name FROM duties
    WHERE expires_at <= now() - make_interval(secs => CASE WHEN $5::bool THEN $6::float8 ELSE 0 END)
    ORDER BY expires_at, name
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE duties d SET holder = $1::text, expires_at = now() + make_interval(secs => $3::float8)
    FROM free WHERE d.name = free.name
    RETURNING d.name
)
SELECT (SELECT seats FROM me) AS seats,
       ARRAY(SELECT name FROM kept UNION ALL SELECT name FROM taken) AS duties,
       (SELECT count(*) FROM duties WHERE expires_at <= now())::int
           - (SELECT count(*) FROM taken)::int AS free;

-- name: offer_types
-- A reload changed what this host offers (app.py): its worker row, as the fleet, the API and
-- the dashboard read it; the next census seats it for the new types.
UPDATE workers SET types = $2::text[] WHERE id = $1::text;

-- name: take_census
-- Seats every live worker per offered type, in a stable order (md5 of worker and type, so
-- seats do not cluster on one host across types), and writes only the rows that changed.
WITH live AS (
    SELECT w.id, t.type FROM workers w, unnest(w.types) AS t(type) WHERE worker_is_live(w)
), seated AS (
    SELECT id, jsonb_object_agg(type, jsonb_build_array(seat, size)) AS seats
    FROM (SELECT id, type,
                 row_number() OVER (PARTITION BY type ORDER BY md5(id || ' ' || type)) - 1
                     AS seat,
                 count(*) OVER (PARTITION BY type) AS size
          FROM live) s
    GROUP BY id
)
UPDATE workers w SET seats = s.seats FROM seated s
WHERE w.id = s.id AND w.seats IS DISTINCT FROM s.seats;
