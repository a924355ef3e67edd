-- runs_history (scheduled_at DESC, id DESC) goes: every list across jobs now merges one
-- runs_status_history (status, scheduled_at DESC, id DESC) range per status (queries.sql,
-- list_runs_by_status; ui.sql, ui_lateness and ui_fill_hours). Each run entered this index
-- three times (planned, claimed, ended: none of those updates is HOT), for reads an
-- operator makes by hand.
DROP INDEX runs_history;
