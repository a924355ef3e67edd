"""`python -m bench [--smoke] [--only SCENARIO ...] [--json PATH]`: run, print, write JSON.

Exit status 0 when every scenario ran and every correctness check passed (targets missed
are reported, not failed: benchmarks measure), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from bench import (
    api,
    backlog,
    fleet,
    history,
    lateness,
    livetail,
    memory,
    planner,
    snapshot,
    throughput,
    ui,
)
from bench.common import (
    ROOT,
    Context,
    Databases,
    Processes,
    ScenarioResult,
    admin_dsn,
    machine,
    table,
)

SCENARIOS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (
        throughput,
        livetail,
        lateness,
        planner,
        api,
        ui,
        memory,
        snapshot,
        history,
        backlog,
        fleet,
    )
}
DEFAULT_JSON = ROOT / "bench" / "results" / "latest.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="a tiny size of every scenario")
    p.add_argument(
        "--only",
        action="append",
        choices=sorted(SCENARIOS),
        metavar="SCENARIO",
        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}",
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    return p.parse_args(argv)


async def run_scenario(
    name: str, fn: Callable[[Context], Awaitable[ScenarioResult]], ctx: Context
) -> ScenarioResult:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    print(f"== {name}", file=sys.stderr, flush=True)
    try:
        result = await fn(ctx)
    except Exception as exc:
        result = ScenarioResult(name, error=f"{type(exc).__name__}: {exc}")
        result.details["traceback"] = traceback.format_exc()
        print(result.details["traceback"], file=sys.stderr, flush=True)
    finally:
        ctx.procs.stop_all()  # whatever a scenario left running, by pid
    result.seconds = time.perf_counter() - started
    # The machine may be shared: the 1-minute load around a scenario says how noisy it was.
    result.details["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(f"   {name}: {result.seconds:.1f}s", file=sys.stderr, flush=True)
    return result


async def main_async(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)  # finally blocks stop every process
    names = args.only or list(SCENARIOS)
    started_at = datetime.now(UTC)
    info = machine()
    results: list[ScenarioResult] = []
    with admin_dsn() as admin, tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        dbs = Databases(admin)
        await dbs.create()
        procs = Processes(Path(tmp))
        try:
            info["postgresql"] = await dbs.server_info()
            for name in names:
                ctx = Context(dbs=dbs, procs=procs, workdir=Path(tmp), smoke=args.smoke)
                results.append(await run_scenario(name, SCENARIOS[name].run, ctx))
        finally:
            procs.stop_all()
            with contextlib.suppress(Exception):
                await dbs.drop()
    print(table(results))
    doc = {
        "started_at": started_at.isoformat(),
        "smoke": args.smoke,
        "machine": info,
        "scenarios": {r.name: r.to_json() for r in results},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nwrote {args.json}", file=sys.stderr)
    failed = [r.name for r in results if r.error or not all(r.checks.values())]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
