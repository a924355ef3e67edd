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
