"""`python -m bench.fleet_sim --hosts K --dsn DSN`: K simulated supervisors in one process, for
bench.fleet's fleets of hundreds of hosts on a two-core machine.

Each simulated host runs the database-facing services of a real supervisor, built from the
same classes with the same settings as supervisor.compose.build_services: the heartbeater
(with its Duties), the claimer, and the planner, reaper, census, pruner and notifier gated
by the duties the heartbeats take. Its pool is its own, pooled (PgBouncer in transaction
mode, PinnedConnection), of `--pool-size` connections (the supervisor's default: 1), so
the bouncer sees one client connection per host, as from a real fleet.

Instead of an executor it has a stub (StubExecutor) with the faces the claimer and the
heartbeater need (faces.Slots, faces.Leases): start() waits for the run's instant (a run
claimed ahead starts at it, as the executor's do), records the start and hands a succeeded
result (exit 0) to the host's real Completer, so completions go through the fenced batch
path; a run stays in `leases()` until its result is recorded, as the executor keeps it.
No child, so no fence watch and no live tail (neither sends a statement without children).

Output, JSON lines on stdout: `sim_ready` once every host serves, `run_started` for runs
whose job name starts with `--log-starts` (its lateness by the wall clock), `sim_stopped`
with counters after SIGTERM (every host stopped as a supervisor stops: intake, completions
flushed, upkeep, stop_worker). The services log warnings as JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg

from supervisor import __version__
from supervisor.claimer import Claimer
from supervisor.completer import Completer
from supervisor.compose import REFILL_WAIT, build_upkeep
from supervisor.core.config import Config
from supervisor.core.db import DB_ERRORS, create_pool
from supervisor.core.fleet import DUTIES, fleet
from supervisor.core.log import setup_logging
from supervisor.core.model import Outcome, RunStatus
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.core.store import Store
from supervisor.duties import Duties
from supervisor.heartbeater import Heartbeater
from supervisor.loop import Loop


def emit(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


@dataclass
class Tally:
    """What every host of this process did, for `sim_stopped`."""

    started: int = 0
    recorded: int = 0
    late: int = 0  # results the database refused as late (lease gone)
    given_up: int = 0  # results not recorded at shutdown
    lost: int = 0  # leases of runs still waiting for their instant a renewal did not return
    errors: Counter[str] = field(default_factory=Counter)  # db errors by service


class StubExecutor:
    """faces.Slots and faces.Leases without children: each started run succeeds at its
    instant, its result recorded by the real Completer."""

    def __init__(
        self, completer: Completer, concurrency: int, tally: Tally, log_starts: str
    ) -> None:
        self.completer = completer
        self.concurrency = concurrency
        self.tally = tally
        self.log_starts = log_starts
        self.running = 0
        self.inflight: dict[int, int] = {}  # run id -> lease token, until recorded
        self.waiting: set[int] = set()  # claimed ahead, their instant still to come
        self.on_slot_free: Callable[[], None] = lambda: None

    @property
    def free_slots(self) -> int:
        return max(0, self.concurrency - self.running)

    def room(self) -> Mapping[str, int]:
        return {}  # no handler of its own concurrency

    def held(self) -> Collection[int]:
        return self.inflight.keys()

    def start(self, row: Claim, claimed_at: float) -> None:
        self.inflight[row.id] = row.lease_token
        self.running += 1
        loop = asyncio.get_running_loop()
        if row.start_in > 0:  # claimed ahead: started at its instant, never early
            self.waiting.add(row.id)
            loop.call_later(row.start_in, self._run, row)
        else:
            loop.call_soon(self._run, row)

    def _run(self, row: Claim) -> None:
        self.waiting.discard(row.id)
        self.tally.started += 1
        if self.log_starts and row.job_name.startswith(self.log_starts):
            late_ms = (time.time() - row.scheduled_at.timestamp()) * 1000
            emit(event="run_started", run_id=row.id, late_ms=round(late_ms, 3))
        self.running -= 1
        self.on_slot_free()  # as the executor: the slot is free before the result is recorded
        done = Completion(
            row.id, row.lease_token, RunStatus.SUCCEEDED, 0.0, Outcome.SUCCEEDED,
            exit_code=0, stdout_tail="", stderr_tail="", cpu_seconds=0.0, ping_url=row.ping_url,
        )  # fmt: skip
        self.completer.enqueue(done, row.wakes_others, functools.partial(self._told, row.id))

    def _told(self, run_id: int, recorded: bool | None) -> None:
        self.inflight.pop(run_id, None)
        if recorded is None:
            self.tally.given_up += 1
        elif recorded:
            self.tally.recorded += 1
        else:
            self.tally.late += 1

    def leases(self) -> list[tuple[int, int]]:
        return list(self.inflight.items())

    def renewed(self, leases: list[tuple[int, int]], ok: set[int], sent_at: float) -> None:
        # A run whose result is being recorded may be missing (recorded meanwhile): only
        # one still to start was lost, as the executor counts (it would kill its child).
        self.tally.lost += sum(
            1 for run_id, _ in leases if run_id not in ok and run_id in self.waiting
        )

    def in_flight(self) -> int:
        return len(self.inflight)


@dataclass
class Host:
    owner: str
    store: Store
    pool: asyncpg.Pool
    intake: list[Loop]
    upkeep: list[Loop]
    completer: Completer
    claimer: Claimer
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def start(self) -> None:
        for loop in [*self.intake, *self.upkeep]:
            self.tasks[loop.name] = asyncio.create_task(loop.run())
        self.tasks["completer"] = asyncio.create_task(self.completer.run())

    async def stop(self) -> None:
        """As Supervisor._serve's shutdown: intake, completions, upkeep, then the worker row."""
        for loop in self.intake:
            loop.stop()
        await self._wait([loop.name for loop in self.intake])
        self.completer.stop()
        await self._wait(["completer"])
        for loop in self.upkeep:
            loop.stop()
        await self._wait([loop.name for loop in self.upkeep])
        with contextlib.suppress(*DB_ERRORS):
            await self.store.stop_worker(self.owner)
        try:
            await asyncio.wait_for(self.pool.close(), 5)
        except TimeoutError:
            self.pool.terminate()

    async def _wait(self, names: list[str]) -> None:
        await asyncio.gather(*(self.tasks[n] for n in names if n in self.tasks))


async def build_host(owner: str, args: argparse.Namespace, tally: Tally) -> Host:
    """One host's services, as compose.build_services wires them (stub for the executor)."""
    cfg = replace(Config(), lease_ttl=args.lease_ttl)  # the defaults, and the bench's TTL
    ttl, concurrency = cfg.lease_ttl, args.concurrency
    pool = await _pool(args)
    store = Store(pool)
    await store.upsert_worker(
        owner, socket.gethostname(), os.getpid(), [args.type], concurrency, __version__, ttl
    )
    await fleet(store).add_duties(DUTIES)
    duties = Duties(ttl)
    completer = Completer(store, owner=owner, lease_ttl=ttl)
    stub = StubExecutor(completer, concurrency, tally, args.log_starts)
    claimer = Claimer(
        store, owner=owner, types=[args.type], slots=stub, lease_ttl=ttl,
        misfire_grace=args.misfire_grace, poll_interval=cfg.poll_interval,
        refill_batch=concurrency, refill_wait=REFILL_WAIT, ahead=cfg.claim_ahead,
        duties=duties, poll_gap=cfg.poll_gap, listening=lambda: False, riders=completer,
    )  # fmt: skip
    stub.on_slot_free = claimer.slot_freed
    up = build_upkeep(cfg, store, owner, duties, claimer, idle=lambda: stub.in_flight() == 0)
    heartbeater = Heartbeater(store, owner=owner, lease_ttl=ttl, holder=stub, duties=duties)
    intake: list[Loop] = [up.planner, claimer, up.reaper, up.pruner, up.notifier, up.census]
    return Host(owner, store, pool, intake, [heartbeater], completer, claimer)


async def _pool(args: argparse.Namespace) -> asyncpg.Pool:
    """The host's pool, retried while the server or the bouncer is busy (as _connect)."""
    backoff = 0.2
    for attempt in range(8):
        try:
            return await create_pool(
                args.dsn, min_size=args.pool_size, max_size=args.pool_size,
                generic_plans=True, pooled=True,
            )  # fmt: skip
        except DB_ERRORS:
            if attempt == 7:
                raise
        await asyncio.sleep(backoff)  # retry pacing
        backoff = min(backoff * 2, 5.0)
    raise AssertionError("unreachable")


async def main_async(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tally = Tally()
    hosts: list[Host] = []
    started = time.monotonic()
    owners = [f"{args.prefix}-{i}" for i in range(args.hosts)]
    for i in range(0, len(owners), args.chunk):  # a few at a time: no connection storm
        if stop.is_set():
            break
        chunk = await asyncio.gather(
            *(build_host(o, args, tally) for o in owners[i : i + args.chunk])
        )
        for host in chunk:
            host.start()
        hosts += chunk
    emit(event="sim_ready", hosts=len(hosts), seconds=round(time.monotonic() - started, 3))
    await stop.wait()
    await asyncio.gather(*(h.stop() for h in hosts), return_exceptions=True)
    crashed = []
    for h in hosts:
        for name, task in h.tasks.items():
            if task.done() and not task.cancelled() and task.exception() is not None:
                crashed.append(f"{h.owner} {name}: {task.exception()!r}")
        for loop_ in [*h.intake, *h.upkeep]:
            tally.errors[loop_.name] += loop_.errors
        tally.errors["completer"] += h.completer.errors
    emit(
        event="sim_stopped", hosts=len(hosts), started=tally.started, recorded=tally.recorded,
        late=tally.late, given_up=tally.given_up, lost=tally.lost,
        db_errors={k: v for k, v in tally.errors.items() if v},
        ignored_wakeups=sum(h.claimer.ignored for h in hosts),
        crashed=crashed[:20],
    )  # fmt: skip
    return 1 if crashed else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_sim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--dsn", required=True, help="PgBouncer (transaction mode) DSN")
    p.add_argument("--prefix", default=f"sim-{os.getpid()}", help="worker id prefix")
    p.add_argument("--type", default="noop", help="the one type every host offers")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-ttl", type=float, default=30.0)
    p.add_argument("--misfire-grace", type=float, default=60.0)
    p.add_argument("--pool-size", type=int, default=1, help="connections per host")
    p.add_argument("--chunk", type=int, default=25, help="hosts connected at once")
    p.add_argument("--log-starts", default="", help="log run_started for these job names")
    p.add_argument("--log-level", default="warning")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level, stream=sys.stderr, json_lines=True)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
