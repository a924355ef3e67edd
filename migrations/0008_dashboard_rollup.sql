-- The dashboard's week: per hour of scheduled_at, how many runs ended how and how late
-- their first attempts started. Written by API processes (ui_fill_hours) for closed hours,
-- rewritten while an hour is younger than a day (its runs may still end), then kept: a
-- week of charts reads 168 rows instead of a week of runs. Rows older than 8 days go.
CREATE TABLE run_hours (
    hour        timestamptz PRIMARY KEY,
    succeeded   integer NOT NULL,
    failed      integer NOT NULL,
    dead        integer NOT NULL,
    late_n      integer NOT NULL,   -- first attempts measured for lateness
    late_p50    float8,             -- seconds from scheduled_at to the first start
    late_p99    float8,
    computed_at timestamptz NOT NULL DEFAULT now()
);

-- The jobs list's type filter reads the distinct types by a skip scan of this index.
CREATE INDEX jobs_type_live ON jobs (type) WHERE deleted_at IS NULL;
