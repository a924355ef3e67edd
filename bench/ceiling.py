"""The machine's process-spawn ceiling: asyncio spawning and reaping a command at a fixed
concurrency with no database. Runs in its own process (`python -m bench.ceiling`) so it
competes for the CPU like a supervisor does, and prints one JSON line.

Modes: `pidfd` is asyncio.create_subprocess_exec with the PidfdChildWatcher, asyncio's
fastest spawning on Linux (the ceiling the throughput target refers to); `threaded` is
Python 3.11's default ThreadedChildWatcher, for comparison; `child` is
supervisor.proc.runner.Child (posix_spawn + pidfd + wait4), the supervisor's own runner alone;
`child-cgroup` adds a cgroup per run (create, the /bin/sh join trampoline, account, remove:
cgroups.py), `child-user` runs it as `nobody` (Popen, not posix_spawn), `child-cgroup-user`
both (the trampoline, then setpriv). bench/spawncost.py compares them in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from supervisor.proc import cgroups
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher
from supervisor.registry import describe_isolation

CHILD_MODES = ("child", "child-cgroup", "child-user", "child-cgroup-user")
NOBODY = 65534


async def _child_worker(
    argv: list[str], left: list[int], env: dict[str, str], watcher: Watcher, mode: str = "child"
) -> None:
    host = cgroups.probe() if "cgroup" in mode else None
    if host is not None and not host.usable:
        raise RuntimeError(f"no cgroup per run here: {describe_isolation(host)}")
    user = NOBODY if "user" in mode else None
    spec = ChildSpec(
        argv=argv,
        env=env,
        stdin=b"{}",
        timeout=3600.0,
        kill_grace=1.0,
        cgroup=host,
        user=user,
        group=user,
        extra_groups=() if user is not None else None,
    )
    while left[0] > 0:
        left[0] -= 1
        child = await Child.spawn(spec, watcher)
        result = await child.wait()
        if result.outcome != "succeeded":
            raise RuntimeError(f"{argv} failed: {result}")


async def _asyncio_worker(argv: list[str], left: list[int], env: dict[str, str]) -> None:
    while left[0] > 0:
        left[0] -= 1
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        await proc.communicate(b"{}")
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} exited {proc.returncode}")


async def measure(mode: str, n: int, concurrency: int, argv: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    left = [n]
    started = time.perf_counter()
    if mode in CHILD_MODES:
        watcher = Watcher()  # one for every child, as the executor's
        await asyncio.gather(
            *(_child_worker(argv, left, env, watcher, mode) for _ in range(concurrency))
        )
        watcher.close()
    else:
        await asyncio.gather(*(_asyncio_worker(argv, left, env) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "mode": mode,
        "n": n,
        "concurrency": concurrency,
        "seconds": elapsed,
        "runs_per_s": n / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ceiling")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--mode", choices=(*CHILD_MODES, "pidfd", "threaded"), default="pidfd")
    p.add_argument("command", nargs="*", default=["/bin/true"])
    args = p.parse_args(argv)
    if args.mode == "pidfd":
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    elif args.mode == "threaded":
        asyncio.set_child_watcher(asyncio.ThreadedChildWatcher())
    result = asyncio.run(measure(args.mode, args.n, args.concurrency, args.command))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
