-- Notifications: channels, job subscriptions and the outbox (DESIGN.md, Notifications).
-- The statements that raise events are in queries.sql beside the state changes they follow
-- (complete_runs, reap_expired, skip_missed_runs, insert_planned_runs_idempotent).

-- ---------------------------------------------------------------- channels

-- name: insert_channel
INSERT INTO channels (name, url, format, secret, headers, all_jobs, include_payload)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::text[], $7::bool)
RETURNING *;

-- name: update_channel
-- Any update enables a channel disabled by a 410 Gone (the admin has looked at it).
UPDATE channels SET name = $2::text, url = $3::text, format = $4::text, secret = $5::text,
    headers = $6::jsonb, all_jobs = $7::text[], include_payload = $8::bool, updated_at = now(),
    disabled_at = NULL, disabled_reason = NULL
WHERE id = $1::bigint
RETURNING *;

-- name: get_channel
SELECT * FROM channels WHERE id = $1::bigint;

-- name: lock_channel
SELECT * FROM channels WHERE id = $1::bigint FOR UPDATE;

-- name: list_channels
SELECT * FROM channels ORDER BY name;

-- name: delete_channel
-- Its subscriptions and deliveries go with it (ON DELETE CASCADE); returns the jobs that
-- subscribed, so the caller can say so.
WITH subs AS (SELECT count(*) AS n FROM job_subscriptions WHERE channel_id = $1::bigint),
gone AS (DELETE FROM channels WHERE id = $1::bigint RETURNING id)
SELECT (SELECT n FROM subs) AS jobs FROM gone;

-- name: insert_test_event
INSERT INTO outbox (channel_id, event, data)
SELECT id, 'test', jsonb_build_object('channel', name, 'message', 'a test from punchclock')
FROM channels WHERE id = $1::bigint
RETURNING id;

-- ---------------------------------------------------------------- job subscriptions

-- name: channel_ids
SELECT id, name FROM channels WHERE name = ANY ($1::text[]);

-- name: replace_job_subscriptions
-- A job's notify list, replaced whole: $2 channel ids in list order, $3 their events
-- (comma-separated). Upserts what stays, deletes what left the list.
WITH rules AS (
    SELECT channel_id, pos::int AS position, string_to_array(events, ',') AS events
    FROM unnest($2::bigint[], $3::text[]) WITH ORDINALITY AS t (channel_id, events, pos)
), dropped AS (
    DELETE FROM job_subscriptions s
    WHERE s.job_id = $1::bigint AND s.channel_id <> ALL (ARRAY(SELECT channel_id FROM rules))
)
INSERT INTO job_subscriptions (job_id, channel_id, position, events)
SELECT $1::bigint, channel_id, position, events FROM rules
ON CONFLICT (job_id, channel_id)
    DO UPDATE SET position = EXCLUDED.position, events = EXCLUDED.events;

-- name: job_notify
SELECT c.name AS channel, s.events FROM job_subscriptions s
JOIN channels c ON c.id = s.channel_id
WHERE s.job_id = $1::bigint ORDER BY s.position;

-- ---------------------------------------------------------------- delivery

-- name: claim_deliveries
-- Due deliveries, SKIP LOCKED so notifiers on several hosts split them. The claim moves
-- next_attempt_at one lease ahead: a notifier that dies mid-delivery leaves the row due
-- again then (attempts + 1 is the fence of the result).
WITH picked AS (
    SELECT id FROM outbox
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT $1::int
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE outbox o SET attempts = o.attempts + 1, lease_owner = $2::text,
        next_attempt_at = now() + make_interval(secs => $3::float8)
    FROM picked p WHERE o.id = p.id
    RETURNING o.*
)
-- A ping (no channel: outbound pings, the heartbeat) is a GET of its own URL, unsigned. A
-- channel with include_payload gets the run's payload (its own, else its job's) in `data`.
SELECT d.id, d.channel_id, d.event,
       CASE WHEN c.include_payload AND d.run_id IS NOT NULL
            THEN d.data || jsonb_build_object('payload',
                (SELECT coalesce(r.payload, j.payload) FROM runs r JOIN jobs j ON j.id = r.job_id
                 WHERE r.id = d.run_id))
            ELSE d.data END AS data,
       d.created_at, d.attempts,
       EXTRACT(EPOCH FROM (now() - d.created_at))::float8 AS age_seconds,
       coalesce(c.name, 'ping') AS channel_name, coalesce(d.url, c.url) AS url,
       coalesce(c.format, 'ping') AS format, c.secret, coalesce(c.headers, '{}') AS headers,
       c.disabled_reason AS disabled
FROM claimed d LEFT JOIN channels c ON c.id = d.channel_id
WHERE d.channel_id IS NULL OR c.id IS NOT NULL
ORDER BY d.id;

-- name: record_delivery
-- One attempt's outcome, fenced by (id, attempts, owner): a notifier whose lease ran out
-- (another host claimed the row since) records its attempt but does not move the row.
-- $6: 'delivered', 'pending' (retry in $7 s) or 'failed'.
WITH moved AS (
    UPDATE outbox SET status = $6::text, last_status = $4::int, last_error = $5::text,
        next_attempt_at = CASE WHEN $6::text = 'pending'
                               THEN now() + make_interval(secs => $7::float8)
                               ELSE next_attempt_at END,
        finished_at = CASE WHEN $6::text = 'pending' THEN NULL ELSE now() END,
        lease_owner = NULL
    WHERE id = $1::bigint AND attempts = $2::int AND lease_owner = $3::text
      AND status = 'pending'
    RETURNING id
), attempt AS (
    -- (Not for a delivery deleted meanwhile with its channel.)
    INSERT INTO delivery_attempts (outbox_id, attempt, worker_id, started_at,
                                   duration_seconds, status_code, error)
    SELECT id, $2::int, $3::text, now() - make_interval(secs => $8::float8), $8::float8,
           $4::int, $5::text
    FROM outbox WHERE id = $1::bigint
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM moved;

-- name: disable_channel
-- Its receiver answered 410 Gone (Standard Webhooks: stop sending); update_channel enables it.
UPDATE channels SET disabled_at = now(), disabled_reason = $2::text WHERE id = $1::bigint;

-- name: raise_late_runs
-- run_late: due runs that waited longer than their job's late_after_seconds (NULL: $1, the
-- configured ready_max_lag), for the channels that subscribe. Time-based, so any notifier
-- may raise it; the unique dedupe_key (one per run) makes it once per run whoever does.
-- Only the oldest $2 runs past the smallest threshold in use are looked at (the first $2 of
-- each type's range, merged; the smallest is a scan of jobs, which is small).
WITH RECURSIVE {{claimable_types}}
INSERT INTO outbox (channel_id, event, job_id, run_id, dedupe_key, data)
SELECT c.channel_id, 'run_late', r.job_id, r.id, 'run_late:' || r.id,
       jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name),
           'run', jsonb_build_object('id', r.id, 'scheduled_at', r.scheduled_at,
               'status', r.status, 'attempt', r.attempts,
               'late_seconds', round(EXTRACT(EPOCH FROM (now() - r.run_after))::numeric, 3),
               'late_after_seconds', coalesce(j.late_after_seconds, $1::float8)))
FROM (SELECT o.* FROM claimable_types t CROSS JOIN LATERAL (
          SELECT id, job_id, scheduled_at, status, attempts, run_after FROM runs
          WHERE type = t.type AND status IN ('scheduled', 'failed')
            AND run_after < now() - make_interval(secs => least($1::float8,
                (SELECT min(late_after_seconds) FROM jobs
                 WHERE late_after_seconds IS NOT NULL AND deleted_at IS NULL)))
          ORDER BY run_after LIMIT $2::int) o
      ORDER BY o.run_after LIMIT $2::int) r
JOIN jobs j ON j.id = r.job_id AND NOT j.paused AND j.deleted_at IS NULL
    AND r.run_after < now() - make_interval(secs => coalesce(j.late_after_seconds, $1::float8))
CROSS JOIN LATERAL notify_targets(r.job_id, 'run_late') c
ON CONFLICT (channel_id, dedupe_key) DO NOTHING;

-- name: raise_silent_jobs
-- job_silent, the dead-man's switch: a live job that set expect_success_within_seconds and
-- has had no success for that long (counted from its latest success, or from its last
-- change or resume when later), on the database clock. Once per episode: the dedupe_key
-- names the job and its latest success, so the next success starts a new episode. The
-- latest success is the newest started-by-now succeeded run on runs_job_scheduled_at.
INSERT INTO outbox (channel_id, event, job_id, run_id, dedupe_key, data)
SELECT c.channel_id, 'job_silent', j.id, s.id,
       'job_silent:' || j.id || ':' || coalesce(s.id::text, 'never'),
       jsonb_build_object('job', jsonb_build_object('id', j.id, 'name', j.name),
           'expect_success_within_seconds', j.expect_success_within_seconds,
           'last_success', CASE WHEN s.id IS NOT NULL THEN
               jsonb_build_object('run_id', s.id, 'finished_at', s.finished_at) END,
           'silent_seconds',
               round(EXTRACT(EPOCH FROM (now() - greatest(s.finished_at, j.updated_at)))::numeric, 3))
FROM jobs j
LEFT JOIN LATERAL (
    SELECT r.id, r.finished_at FROM runs r
    WHERE r.job_id = j.id AND r.scheduled_at <= now() AND r.status = 'succeeded'
    ORDER BY r.scheduled_at DESC LIMIT 1) s ON true
CROSS JOIN LATERAL notify_targets(j.id, 'job_silent') c
WHERE j.expect_success_within_seconds IS NOT NULL AND j.deleted_at IS NULL AND NOT j.paused
  AND greatest(s.finished_at, j.updated_at)
      < now() - make_interval(secs => j.expect_success_within_seconds)
ON CONFLICT (channel_id, dedupe_key) DO NOTHING;

-- name: outbox_depth
-- Pending deliveries and the age of the oldest (outbox_due).
SELECT count(*) AS pending,
       coalesce(EXTRACT(EPOCH FROM (now() - min(created_at))), 0)::float8 AS oldest_seconds
FROM outbox WHERE status = 'pending';

-- name: list_deliveries
-- Newest first, keyset on id ($1: exclusive upper bound). Filters: channel, statuses,
-- events, job (NULL: any).
SELECT o.id, o.channel_id, c.name AS channel_name, o.event, o.job_id, o.run_id, o.status,
       o.attempts, o.next_attempt_at, o.last_status, o.last_error, o.created_at, o.finished_at
FROM outbox o JOIN channels c ON c.id = o.channel_id
WHERE o.id < $1::bigint
  AND ($2::bigint IS NULL OR o.channel_id = $2::bigint)
  AND ($3::text[] IS NULL OR o.status = ANY ($3::text[]))
  AND ($4::text[] IS NULL OR o.event = ANY ($4::text[]))
  AND ($5::bigint IS NULL OR o.job_id = $5::bigint)
ORDER BY o.id DESC
LIMIT $6::int;

-- name: list_delivery_attempts
SELECT * FROM delivery_attempts WHERE outbox_id = ANY ($1::bigint[]) ORDER BY outbox_id, attempt;

-- name: failing_channels
-- For /readyz (a warning, not unreadiness): channels with an event undelivered after its
-- tries for more than $1 seconds and no delivery in that time. Starts from pending rows
-- (outbox_due), then looks at a candidate channel's recent deliveries only.
SELECT c.id, c.name, min(o.created_at) AS since, count(*)::int AS pending
FROM outbox o JOIN channels c ON c.id = o.channel_id
WHERE o.status = 'pending' AND o.attempts > 0
  AND o.created_at < now() - make_interval(secs => $1::float8)
  AND NOT EXISTS (SELECT 1 FROM outbox s WHERE s.channel_id = c.id AND s.status = 'delivered'
                  AND s.finished_at > now() - make_interval(secs => $1::float8))
GROUP BY c.id, c.name
ORDER BY c.name
LIMIT 20;
