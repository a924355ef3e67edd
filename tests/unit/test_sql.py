"""The named-SQL loader: a `-- each status:` branch becomes one branch per run status."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from supervisor.core import sql
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


def test_statements_share_their_parts_and_a_pasted_part_can_be_renumbered() -> None:
    """One text for what several statements do alike (the completions' recording, the
    claim), and claim_and_complete_runs holds both with the completion's parameters after
    the claim's nine."""
    head = "UPDATE run_attempts a SET finished_at = now(), outcome = t.outcome::attempt_outcome"
    for name in ("complete_runs", "complete_runs_with_events", "claim_and_complete_runs"):
        assert QUERIES[name].count(head) == 1, name
    both = QUERIES["claim_and_complete_runs"]
    claim, complete = QUERIES["claim_runs"], QUERIES["complete_runs"]
    assert "$16::text" in complete and "$25::text" in both and "$26" not in both
    recording = complete[complete.index("WITH t AS (") + 5 : complete.index("SELECT d.id")]
    assert re.sub(r"\$(\d+)", lambda m: f"${int(m.group(1)) + 9}", recording) in both
    assert claim[claim.index("\nWITH ") + 6 : claim.index("\nSELECT c.id")] in both


def test_a_fragment_that_pastes_itself_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "x.sql").write_text("-- fragment: a\n{{a+1}}\n-- name: q\nSELECT {{a}};\n")
    monkeypatch.setattr(sql.resources, "files", lambda _: tmp_path)
    with pytest.raises(ValueError, match="pastes itself"):
        sql.load_queries()
