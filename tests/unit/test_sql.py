"""The named-SQL loader: a `-- each status:` branch becomes one branch per run status."""

from __future__ import annotations

from supervisor.core.model import RunStatus
from supervisor.core.sql import QUERIES


def test_each_status_branches_cover_every_status_once() -> None:
    expanded = [q for q in QUERIES.values() if "UNION ALL" in q and "'{status}'" not in q]
    merged = [q for q in expanded if "x.status = 'scheduled'" in q]
    assert {"list_runs_by_status", "list_runs_upcoming_by_status", "ui_lateness"} <= {
        name for name, q in QUERIES.items() if q in merged
    }
    for q in merged:
        for s in RunStatus:
            assert q.count(f"x.status = '{s.value}'") == 1, (s, q)
        assert q.count("UNION ALL") == len(RunStatus) - 1
    assert not [n for n, q in QUERIES.items() if "{status}" in q or "-- each status" in q]
