"""What isolation costs per run: supervisor.proc.runner.Child spawning and reaping /bin/true with
no isolation (posix_spawn), with a cgroup per run, as another user, and both, in rounds that
alternate the modes within one process run (so machine noise hits all of them alike).
Each round runs bench.ceiling in its own process; reported: runs/s, wall and CPU
milliseconds per run (that process and its children), medians over the rounds.

    python -m bench.spawncost [--n 1000] [--rounds 5] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from typing import Any

from bench.ceiling import CHILD_MODES

PYTHON = sys.executable


def one(mode: str, n: int, concurrency: int) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [PYTHON, "-m", "bench.ceiling", "--mode", mode, "--n", str(n)]
    out = subprocess.run(
        [*argv, "--concurrency", str(concurrency), "/bin/true"],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["cpu_ms_per_run"] = 1000 * cpu / n
    result["wall_ms_per_run"] = 1000 * result["seconds"] / n * concurrency
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spawncost")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=1)
    args = p.parse_args(argv)
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in CHILD_MODES}
    for i in range(args.rounds):
        modes = CHILD_MODES if i % 2 == 0 else tuple(reversed(CHILD_MODES))
        for mode in modes:
            samples[mode].append(one(mode, args.n, args.concurrency))
    base: dict[str, float] = {}
    print(f"{'mode':<20} {'runs/s':>8} {'wall ms/run':>12} {'cpu ms/run':>11} {'+wall':>7}")
    for mode, rows in samples.items():
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("runs_per_s", "wall_ms_per_run", "cpu_ms_per_run")}  # fmt: skip
        base = base or med
        extra = med["wall_ms_per_run"] - base["wall_ms_per_run"]
        print(f"{mode:<20} {med['runs_per_s']:>8.0f} {med['wall_ms_per_run']:>12.2f} "
              f"{med['cpu_ms_per_run']:>11.2f} {extra:>+7.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
