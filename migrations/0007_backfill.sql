-- Runs created by a backfill ("run the instants between A and B that have no run"): ordinary
-- rows with their own trigger, so the catch-up policy (which skips only 'schedule' runs)
-- leaves them alone. ADD VALUE may run inside the migrator's transaction (PostgreSQL 12+);
-- the value cannot be used in that same transaction, and nothing here uses it.
ALTER TYPE run_trigger ADD VALUE IF NOT EXISTS 'backfill';
