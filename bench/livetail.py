"""The live tail's cost: the same drains with the supervisors' live tail on (the default,
once a second) and off (live_output_interval = 0), interleaved in one run.

- short runs: /bin/true, as the throughput scenario; a child shorter than a second never
  costs a write, so the two should be within noise.
- talkative runs: a child that prints a line every 50 ms for 1.5 s, so every run gets about
  one live write; CPU per run shows what those writes cost.
Both report runs/s and CPU milliseconds per run (supervisors + postgres) with "off" as the
baseline, and check exactly-once.
"""

from __future__ import annotations

from typing import Any

from bench.common import PYTHON, Context, ScenarioResult
from bench.throughput import drain

NAME = "livetail"
SUPERVISORS = 2
SHORT = ["/bin/true"]
TALK = [PYTHON, "-c", "import time\nfor i in range(30): print(i, flush=True); time.sleep(0.05)"]
MODES = {"on": {}, "off": {"PUNCHCLOCK_LIVE_OUTPUT_INTERVAL": "0"}}


def _cpu(r: dict[str, Any]) -> float:
    c = r["cpu_ms_per_run"]
    return float(c["supervisors"] + c["postgres"])


async def run(ctx: Context) -> ScenarioResult:
    res = ScenarioResult(NAME)
    rounds = 1 if ctx.smoke else 3
    cases = {"short runs": (SHORT, 200 if ctx.smoke else 3000)}
    cases["talkative runs"] = (TALK, 16 if ctx.smoke else 160)
    for case, (command, n) in cases.items():
        got: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for i in range(rounds):  # on, off, off, on, ...: neither always goes first
            order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
            for mode in order:
                r = await drain(ctx, SUPERVISORS, n, env=MODES[mode], command=command)
                got[mode].append(r)
                key = f"{case}: exactly once, live tail {mode}"
                res.checks[key] = res.checks.get(key, True) and r["exactly_once"]["ok"]
        on, off = got["on"], got["off"]
        res.add(
            f"{case}: runs/s, live tail on",
            _mean(r["runs_per_s"] for r in on),
            "runs/s",
            baseline=_mean(r["runs_per_s"] for r in off),
            note=f"baseline: live tail off; {n} runs, {SUPERVISORS} supervisors, mean of {rounds}",
        )
        res.add(
            f"{case}: CPU per run (supervisors + postgres), live tail on",
            _mean(_cpu(r) for r in on),
            "ms",
            baseline=_mean(_cpu(r) for r in off),
            note="baseline: live tail off",
        )
        res.details[case] = {"on": on, "off": off}
    return res


def _mean(values: Any) -> float:
    seq = list(values)
    return sum(seq) / len(seq)
