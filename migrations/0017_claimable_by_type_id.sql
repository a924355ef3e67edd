-- runs_claimable_by_type gains id as its last key: the catch-up pass reads each type's old
-- due runs in (run_after, id) order from a cursor, and without id in the index a plan made
-- while nothing was due sorted all of a type's old due runs once a second to take its
-- window, and any plan read every run tied at the window's edge (runs given back together
-- share their run_after). Claims and next-due read the (type, run_after) prefix as before.
-- Built beside the old one, which goes last: reads of runs wait only for that drop.
CREATE INDEX runs_claimable_by_type_id ON runs (type, run_after, id)
    WHERE status IN ('scheduled', 'failed');
DROP INDEX runs_claimable_by_type;
ALTER INDEX runs_claimable_by_type_id RENAME TO runs_claimable_by_type;
