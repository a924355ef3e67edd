"""The benchmarks' smoke size runs end to end and writes sane JSON, so bench/ cannot rot.

Nothing here looks at a timing: CI machines are too noisy to assert performance, and
benchmarks measure rather than assert. Only completion, shape and correctness checks count.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {
    "throughput",
    "livetail",
    "lateness",
    "planner",
    "api",
    "ui",
    "memory",
    "snapshot",
    "history",
    "backlog",
    "fleet",
}


def _bench(admin_dsn: str, args: list[str], timeout: float) -> str:
    """`python -m ARGS` from the checkout on `admin_dsn`; its stdout, once it exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    env["PUNCHCLOCK_BENCH_DATABASE_URL"] = admin_dsn
    proc = subprocess.run(
        [sys.executable, "-m", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.timeout(400)
def test_bench_smoke_runs_every_scenario(admin_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    stdout = _bench(admin_dsn, ["bench", "--smoke", "--json", str(out)], timeout=360)
    assert "| scenario" in stdout  # the table

    doc = json.loads(out.read_text())
    assert doc["smoke"] is True
    assert doc["machine"]["cpus"] >= 1
    assert set(doc["scenarios"]) == SCENARIOS
    for name, scenario in doc["scenarios"].items():
        assert scenario["error"] is None, (name, scenario["error"])
        assert scenario["metrics"], name
        for m in scenario["metrics"]:
            assert m["scenario"] == name
            assert isinstance(m["value"], int | float), m
            assert math.isfinite(m["value"]) and m["value"] >= 0, m
            assert m["ok"] in (True, False, None), m
            if m["baseline"] is not None:
                assert math.isfinite(m["baseline"]) and m["baseline"] > 0, m
        # correctness (exactly-once, plans served by an index, ...) is checked, not timed
        assert scenario["checks"] and all(scenario["checks"].values()), (name, scenario["checks"])
    throughput = doc["scenarios"]["throughput"]["details"]["runs"]
    assert all(r["exactly_once"]["ok"] for r in throughput)


@pytest.mark.timeout(200)
def test_statement_variants_each_drain_every_run_exactly_once(admin_dsn: str) -> None:
    """bench.statements builds its merged and lean statements from queries.sql (and drops
    history indexes and the attempts' foreign key by name): after a change there they must
    still claim and record every run once, or the tool says so."""
    stdout = _bench(admin_dsn, ["bench.statements", "--runs", "50", "--rounds", "1"], timeout=180)
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith('{"variant"')]
    assert sorted(x["variant"] for x in lines) == [
        "as-is",
        "lean-claim",
        "merged",
        "no-attempt-fk",
        "no-history-indexes",
    ]
    assert all(x["exactly_once"] and x["cpu_us_per_run"] >= 0 for x in lines), lines
