"""The named-SQL loader: a `-- each status:` branch becomes one branch per run status."""

from __future__ import annotations

from supervisor.core.model import RunStatus
from supervisor.core.sql import QUERIES


def test_each_status_branches_cover_every_status_once() -> None:
    merged = {
        n: q for n, q in QUERIES.items() if "UNION ALL" in q and "x.status = 'scheduled'" in q
    }
    assert {"list_runs_by_status", "list_runs_upcoming_by_status", "ui_lateness"} <= set(merged)
    for q in merged.values():
        for s in RunStatus:
            assert q.count(f"x.status = '{s.value}'") == 1, (s, q)
        assert q.count("UNION ALL") == len(RunStatus) - 1
    assert not [n for n, q in QUERIES.items() if "{status}" in q or "-- each status" in q]


def test_fragments_are_pasted_whole_and_are_not_queries() -> None:
    across = ["skip_missed_runs", "late_runs", "database_gauges", "raise_late_runs"]
    for name in [*across, "ui_open_counts"]:
        q = QUERIES[name]
        assert q.count("claimable_types(type) AS (") == 1, name
        assert "WITH RECURSIVE claimable_type_walk(type) AS (" in q, name
    assert not [n for n, q in QUERIES.items() if "{{" in q or "-- fragment" in q]
    assert "claimable_types" not in QUERIES
