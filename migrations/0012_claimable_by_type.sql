-- Claims and the next-due query read each offered type's due runs in run_after order
-- (claim_runs, next_due_in): a backlog of a type that no live host offers (its hosts are
-- down, a large backfill) no longer sits in front of every claim of the other types.
-- runs_claimable stays for what reads across types (the catch-up pass, late runs). The
-- queries work without this index (REQUIRED_MIGRATION stays 0011), only slower.
CREATE INDEX runs_claimable_by_type ON runs (type, run_after)
    WHERE status IN ('scheduled', 'failed');
