-- What read claimable runs across types in run_after order (the catch-up pass, late runs,
-- the due gauges, the overview's counts) now reads one runs_claimable_by_type range per
-- type (the claimable_types fragment in supervisor/core/queries.sql), so this index only
-- cost every planned or retried run one more insert (about a tenth of what PostgreSQL spends
-- planning a run). The queries work with it still present (REQUIRED_MIGRATION unchanged):
-- upgrade every host, then migrate.
DROP INDEX runs_claimable;
