-- Notifications (DESIGN.md, Notifications): channels, who subscribes to what, and an outbox
-- written in the same transaction as the state change that causes an event.

-- A webhook destination. `secret` (whsec_ + base64) and `headers` are write-only: the API
-- never returns them; they leave the database only to sign and send a delivery.
CREATE TABLE channels (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,199}$'),
    url         text NOT NULL CHECK (url ~ '^https?://' AND char_length(url) <= 2000),
    format      text NOT NULL DEFAULT 'punchclock' CHECK (format IN ('punchclock', 'slack')),
    secret      text CHECK (secret ~ '^whsec_'),
    headers     jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    -- Channel-wide subscription: these events of every job (and worker_lost).
    all_jobs    text[] NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A job's `notify` list: one row per (job, channel) with the events it sends there.
CREATE TABLE job_subscriptions (
    job_id      bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    channel_id  bigint NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    position    integer NOT NULL,  -- order in the job's notify list
    events      text[] NOT NULL CHECK (cardinality(events) > 0),
    PRIMARY KEY (job_id, channel_id)
);
CREATE INDEX job_subscriptions_channel ON job_subscriptions (channel_id);

-- The channels that receive event `ev` of job `job`: its own subscriptions and every
-- channel-wide one. Inlined by the planner (one SELECT, STABLE).
CREATE FUNCTION notify_targets(job bigint, ev text) RETURNS TABLE (channel_id bigint)
LANGUAGE sql STABLE
AS $$
    SELECT s.channel_id FROM job_subscriptions s WHERE s.job_id = job AND ev = ANY (s.events)
    UNION
    SELECT c.id FROM channels c WHERE ev = ANY (c.all_jobs)
$$;

-- Consecutive dead runs of a job that some channel watches for job_failing/job_recovered.
-- A row exists only while a streak lasts: a success deletes it (job_recovered).
CREATE TABLE job_streaks (
    job_id       bigint PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    dead_streak  integer NOT NULL
);

-- One row per (event, channel): the delivery. Claimed by notifiers with SKIP LOCKED; a claim
-- moves next_attempt_at one lease ahead, so a notifier that dies leaves it due again.
CREATE TABLE outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id       bigint NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    event            text NOT NULL,
    job_id           bigint,  -- no foreign keys: deliveries outlive pruned runs
    run_id           bigint,
    -- Exactly-once per episode for events several statements can raise (worker_lost).
    dedupe_key       text,
    data             jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    last_status      integer,
    last_error       text,
    finished_at      timestamptz,
    CONSTRAINT outbox_once UNIQUE (channel_id, dedupe_key)
);
-- The notifiers' claim: only pending deliveries are indexed.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
-- GET /v1/deliveries, newest first.
CREATE INDEX outbox_history ON outbox (id DESC);

CREATE TABLE delivery_attempts (
    outbox_id         bigint NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
    attempt           integer NOT NULL,
    worker_id         text NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    duration_seconds  double precision NOT NULL,
    status_code       integer,
    error             text,
    PRIMARY KEY (outbox_id, attempt)
);
