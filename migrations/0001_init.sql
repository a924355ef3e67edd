-- punchclock schema v1: jobs, planned runs, attempt history, workers.
-- Every time comparison uses the database clock (now()); see DESIGN.md "One clock".

CREATE TYPE run_status AS ENUM (
    'scheduled', 'running', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped'
);
CREATE TYPE attempt_outcome AS ENUM (
    'running', 'succeeded', 'failed', 'timed_out', 'lease_lost', 'interrupted', 'cancelled'
);
CREATE TYPE catchup_policy AS ENUM ('latest', 'all', 'none');
CREATE TYPE overlap_policy AS ENUM ('allow', 'skip', 'wait');
CREATE TYPE run_trigger AS ENUM ('schedule', 'manual');

CREATE TABLE jobs (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                    text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.:-]{1,200}$'),
    type                    text NOT NULL CHECK (type ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    payload                 jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    cron                    text,
    run_at                  timestamptz,
    timezone                text NOT NULL DEFAULT 'UTC',
    max_attempts            integer NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    -- NULL: the handler's default timeout on the host that runs it, else one hour.
    timeout_seconds         double precision CHECK (timeout_seconds BETWEEN 1 AND 604800),
    retry_base_seconds      double precision NOT NULL DEFAULT 10 CHECK (retry_base_seconds >= 0),
    retry_cap_seconds       double precision NOT NULL DEFAULT 3600
                            CHECK (retry_cap_seconds >= retry_base_seconds),
    catchup                 catchup_policy NOT NULL DEFAULT 'latest',
    catchup_window_seconds  double precision NOT NULL DEFAULT 3600
                            CHECK (catchup_window_seconds >= 0),
    overlap                 overlap_policy NOT NULL DEFAULT 'allow',
    paused                  boolean NOT NULL DEFAULT false,
    -- Planner bookkeeping: every fire time <= planned_until has a run row; the planner looks
    -- at the job again once now() >= plan_after (the high-water mark minus half the horizon).
    planned_until           timestamptz,
    plan_after              timestamptz NOT NULL DEFAULT '-infinity',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    deleted_at              timestamptz,
    CONSTRAINT jobs_one_schedule CHECK ((cron IS NULL) <> (run_at IS NULL))
);
-- Names are unique among live jobs; a deleted job keeps its name in history.
CREATE UNIQUE INDEX jobs_name_live ON jobs (name) WHERE deleted_at IS NULL;
-- The planner's pick: jobs whose planned horizon has grown short.
CREATE INDEX jobs_plan_due ON jobs (plan_after) WHERE NOT paused AND deleted_at IS NULL;

CREATE TABLE runs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            bigint NOT NULL REFERENCES jobs (id),
    scheduled_at      timestamptz NOT NULL,
    status            run_status NOT NULL DEFAULT 'scheduled',
    trigger           run_trigger NOT NULL DEFAULT 'schedule',
    -- Copied from the job when planned, so claiming filters and orders without a join
    -- on the hot path; kept in sync by job updates (same transaction).
    type              text NOT NULL,
    exclusive         boolean NOT NULL DEFAULT false,  -- job.overlap <> 'allow'
    payload           jsonb CHECK (payload IS NULL OR jsonb_typeof(payload) = 'object'),
    attempts          integer NOT NULL DEFAULT 0,      -- attempts started so far (never reset)
    max_attempts      integer NOT NULL,                -- attempt number limit; requeue raises it
    run_after         timestamptz NOT NULL,
    lease_owner       text,
    lease_token       bigint NOT NULL DEFAULT 0,       -- bumped at every claim; fences writes
    lease_expires_at  timestamptz,
    started_at        timestamptz,                     -- first start of the latest attempt
    finished_at       timestamptz,
    last_error        text,
    skip_reason       text,
    idempotency_key   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT runs_job_scheduled_at UNIQUE (job_id, scheduled_at),
    CONSTRAINT runs_lease_when_running CHECK (
        (status = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    )
);
-- Claim: due runs in run_after order; only claimable rows are indexed so the index stays
-- as small as the backlog, not the history.
CREATE INDEX runs_claimable ON runs (run_after) WHERE status IN ('scheduled', 'failed');
-- Overlap checks look at due runs of exclusive jobs only.
CREATE INDEX runs_claimable_exclusive ON runs (run_after)
    WHERE status IN ('scheduled', 'failed') AND exclusive;
-- Reaper: running runs by lease expiry.
CREATE INDEX runs_running_lease ON runs (lease_expires_at) WHERE status = 'running';
-- History: a job's runs newest first (API list by job, keyset on (scheduled_at, id)).
CREATE INDEX runs_job_history ON runs (job_id, scheduled_at DESC, id DESC);
-- History across jobs: newest first, and by status.
CREATE INDEX runs_history ON runs (scheduled_at DESC, id DESC);
CREATE INDEX runs_status_history ON runs (status, scheduled_at DESC, id DESC);
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
-- At most one running run of a job whose overlap policy is not 'allow': the database
-- enforces it, so two claimers racing for the same job cannot both win.
CREATE UNIQUE INDEX runs_one_running_exclusive ON runs (job_id)
    WHERE status = 'running' AND exclusive;
CREATE UNIQUE INDEX runs_idempotency ON runs (job_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE run_attempts (
    run_id          bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt         integer NOT NULL,
    worker_id       text NOT NULL,
    lease_token     bigint NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    outcome         attempt_outcome NOT NULL DEFAULT 'running',
    exit_code       integer,
    signal          integer,
    error           text,
    stdout_tail     text,
    stderr_tail     text,
    cpu_seconds     double precision,
    peak_rss_bytes  bigint,
    PRIMARY KEY (run_id, attempt)
);

CREATE TABLE workers (
    id            text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    types         text[] NOT NULL,
    concurrency   integer NOT NULL,
    lease_ttl     double precision NOT NULL,  -- it heartbeats every lease_ttl/3
    version       text NOT NULL,
    running       integer NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz
);
-- A worker is live while it heartbeats: stopped_at IS NULL AND last_seen_at > now() - 2 * lease_ttl.
CREATE INDEX workers_last_seen ON workers (last_seen_at);
