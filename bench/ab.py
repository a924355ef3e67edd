"""This checkout against another commit, in one run: `python -m bench.ab --base REV`
checks REV out into a temporary worktree and alternates 2-supervisor drains of /bin/true
between the two (A B B A A B ...), so both see the same machine; prints runs/s and CPU per
run for each, and this checkout's ratio to the base. For changes to the hot path that a
scenario cannot compare within one tree (issue 15: claim throughput of jobs in no group
against the claim before concurrency limits)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DRAIN = ROOT / "bench" / "drain_once.py"


def drain(tree: Path, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(DRAIN), str(n)], cwd=tree, check=True, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise RuntimeError(f"{tree}: a drain broke exactly-once")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    p.add_argument("--base", required=True, help="the commit to compare with")
    p.add_argument("--rounds", type=int, default=3, help="drains of each (default 3)")
    p.add_argument("--runs", type=int, default=3000, help="runs per drain (default 3000)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pc-base-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        try:
            got: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
            for i in range(args.rounds):
                order = [("this", ROOT), ("base", base)]
                for name, tree in order if i % 2 == 0 else reversed(order):
                    got[name].append(drain(tree, args.runs))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           check=False, capture_output=True)  # fmt: skip
    summary = {}
    for name, runs in got.items():
        rates = [r["runs_per_s"] for r in runs]
        cpu = [sum(v for k, v in r["cpu_ms_per_run"].items() if k != "box_busy") for r in runs]
        summary[name] = {
            "runs_per_s": rates,
            "median": statistics.median(rates),
            "cpu_ms_per_run_median": statistics.median(cpu),
        }
        print(f"{name:5s} runs/s {statistics.median(rates):7.0f} (min {min(rates):.0f}, max "
              f"{max(rates):.0f}); CPU per run {statistics.median(cpu):.2f} ms")  # fmt: skip
    ratio = summary["this"]["median"] / summary["base"]["median"]
    print(f"this / base ({args.base}): {ratio:.2f}x")
    print(json.dumps({"base": args.base, **summary, "ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
