"""A run's life on this host, from its claim to its recorded result, in the order it happens:

    supersede -> prepare -> spawn -> end -> verdict -> completion -> recorded -> retire

The executor puts a claimed run in the table (inflight.py) and hands it here: at once to
`spawn` with the rest of its claim (the usual run), or to `prepare` first (a run that must
wait: a superseded execution, its environment files, its instant). Its child's end comes
back through Child.when_done; the verdict makes the fenced completion, the completer records
it in a batch and tells `recorded`, and the run retires.

A chain of callbacks: no task, future or extra loop iteration per run in the usual case
(DESIGN.md, Lease and fencing protocol). Each link catches what it raises and retires the
run, so a bug costs that run's result, never the slot.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from supervisor import lease
from supervisor.core.model import Outcome, RunStatus, utc_iso
from supervisor.core.records import Claim
from supervisor.core.runpath import Completion
from supervisor.faces import AttemptEnded, AttemptOutcome
from supervisor.inflight import Extra, InFlight, Phase, RunTable
from supervisor.proc.child import ChildResult, ChildSpec
from supervisor.proc.isolation import EnvFileError, read_env_files
from supervisor.proc.runner import Child
from supervisor.proc.watcher import Watcher
from supervisor.verdict import ERROR_STDERR_CHARS, not_run, verdict

if TYPE_CHECKING:
    from supervisor.proc.keeper import Keeper
    from supervisor.proc.orphans import Orphans
    from supervisor.registry import Registry

DEFAULT_TIMEOUT = 3600.0

log = logging.getLogger("punchclock.executor")

# How a run's children are started: Child.start_many with the run life's watcher, keeper and
# orphan sweep (a unit test's fake starts none).
StartChildren = Callable[[list[ChildSpec]], Sequence[Child]]


class Completes(Protocol):
    """The completer as a run's life sees it (completer.Completer)."""

    def enqueue(
        self, completion: Completion, wakes_others: bool, told: Callable[[bool | None], None]
    ) -> None:
        """Record `completion`; `told` gets True (recorded), False (late) or None (given up
        at shutdown), called from the event loop."""


class RunLife:
    """The phases of a run's life, each a method, in the order they happen."""

    def __init__(
        self,
        table: RunTable,
        completer: Completes,
        registry: Registry,
        *,
        output_limit: int,
        keeper: Keeper | None = None,
        orphans: Orphans | None = None,
        on_started: Callable[[str, float], None] | None = None,
        on_ended: Callable[[AttemptEnded], None] | None = None,
        start_children: StartChildren | None = None,
    ) -> None:
        self.table = table
        self.completer = completer
        self.registry = registry
        self.output_limit = output_limit
        self.on_started = on_started  # (type, queue delay in seconds)
        self.on_ended = on_ended
        self.watcher = Watcher()  # watches every child started here
        self._start_children: StartChildren = start_children or functools.partial(
            Child.start_many, watcher=self.watcher, keeper=keeper, orphans=orphans
        )
        self._envs: dict[str, dict[str, str]] = {}  # type -> clean environment (isolation.py)

    def use_handlers(self, registry: Registry, output_limit: int) -> None:
        """A reload's handlers and settings, for children started from now on (each type's
        environment is derived from its handler again)."""
        self.registry = registry
        self._envs.clear()
        self.output_limit = output_limit

    # ------------------------------------------------------------ 1. supersede

    async def supersede(self, old: InFlight) -> None:
        """End an execution whose claim the database lost before the new one starts: two
        executions of one run never overlap on this host."""
        if old.phase is Phase.COMPLETING:
            return  # its child has ended; its result is fenced by its own token
        old.move(Phase.SUPERSEDED)
        self.table.event("superseded", old, reason="the run was claimed again: its claim was lost")
        if old.child is not None:
            await old.child.kill("superseded: the run was claimed again", 0)

    # ------------------------------------------------------------ 2. prepare

    async def prepare(self, entry: InFlight, row: Claim, old: InFlight | None) -> None:
        """What a run may have to wait for before its child starts: the end of a superseded
        execution, its handler's environment files, its instant (claimed ahead)."""
        try:
            if old is not None:
                await self.supersede(old)
            extra = await self._env_files(row)
            if (wait := entry.start_at - time.monotonic()) > 0:
                await asyncio.sleep(wait)
        except asyncio.CancelledError:  # given back while it waited (Executor._give_back)
            self.table.spawned(entry)
            self.retire(entry)
            raise
        except Exception:
            self.table.spawned(entry)
            self.crashed(entry)
            return
        self.spawn([(entry, row, extra)])

    async def _env_files(self, row: Claim) -> dict[str, str] | ChildResult:
        """The handler's environment files, read at each spawn (a bad file fails this
        attempt alone), or the result of an attempt that cannot start because of them."""
        handler = self.registry.handlers.get(row.type)
        if handler is None or not handler.env_files:
            return {}
        try:
            return await asyncio.to_thread(read_env_files, handler.env_files)
        except EnvFileError as exc:
            return not_run(str(exc))

    # ------------------------------------------------------------ 3. spawn

    def spawn(self, runs: list[tuple[InFlight, Claim, Extra]]) -> None:
        """What to start for each run (`extra`: its environment files' variables, or the
        result of an attempt they keep from starting), then their children together
        (Child.start_many: the spawns back to back, the bookkeeping after them, warm), then
        each one's start event; an attempt that cannot start ends at once."""
        ready: list[tuple[InFlight, Claim, ChildSpec]] = []
        # A claim that came back with too little lease left (a slow server, a starved host)
        # is fenced now, before its child costs a spawn only to be killed at once.
        self.table.fence()
        for entry, row, extra in runs:
            try:
                if isinstance(extra, ChildResult):
                    spec: ChildSpec | ChildResult = extra
                elif entry.phase is not Phase.RUNNING:
                    # Lost, fenced or given back before the child even started: starting it
                    # now could overlap another host's execution of the same run.
                    spec = not_run("not started: the lease was lost or given back first")
                else:
                    spec = self._child_spec(entry, row, extra)
            except Exception:
                self.table.spawned(entry)
                self.crashed(entry)
                continue
            if isinstance(spec, ChildResult):
                self.table.spawned(entry)
                self.end(entry, row, spec)
            else:
                ready.append((entry, row, spec))
        try:
            children = self._start_children([s for _, _, s in ready])
        except Exception:  # Child.start_many catches each child's own failure
            for entry, _, _ in ready:
                self.table.spawned(entry)
                self.crashed(entry)
            return
        for (entry, row, _), child in zip(ready, children, strict=True):
            entry.child = child
            self.table.spawned(entry)
            self._started(entry, row, child)
            child.when_done(functools.partial(self.end, entry, row))

    def _child_spec(
        self, entry: InFlight, row: Claim, extra: dict[str, str]
    ) -> ChildSpec | ChildResult:
        """What to start for this run (`extra`: from its environment files), or the result
        of an attempt that cannot start."""
        handler = self.registry.handlers.get(row.type)
        if handler is None:  # unregistered since the claim: fail the attempt, keep going
            return not_run(f"no handler registered for type {row.type!r} on this host")
        timeout = row.timeout_seconds or handler.timeout_seconds or DEFAULT_TIMEOUT
        deadline = row.db_now + timedelta(seconds=row.start_in + timeout)
        env = self._envs.get(row.type)
        if env is None:
            env = self._envs[row.type] = handler.environment(os.environ)
        env = {
            **env,
            **extra,
            "PUNCHCLOCK_RUN_ID": str(row.id),
            "PUNCHCLOCK_JOB_NAME": row.job_name,
            "PUNCHCLOCK_JOB_TYPE": row.type,
            "PUNCHCLOCK_ATTEMPT": str(row.attempts),
            "PUNCHCLOCK_SCHEDULED_AT": utc_iso(row.scheduled_at),
            "PUNCHCLOCK_LEASE_TOKEN": str(row.lease_token),
            "PUNCHCLOCK_DEADLINE": utc_iso(deadline),
        }
        return ChildSpec(
            argv=list(handler.argv),
            env=env,
            stdin=row.payload.encode(),
            cwd=handler.cwd,
            user=None if handler.identity is None else handler.identity.uid,
            group=None if handler.identity is None else handler.identity.gid,
            extra_groups=None if handler.identity is None else handler.identity.groups,
            umask=handler.umask,
            limits=handler.limits,
            cgroup=self.registry.cgroup_host if handler.cgroup else None,
            cgroup_limits=handler.cgroup_limits,
            timeout=timeout,
            kill_grace=self.table.kill_grace,
            output_limit=self.output_limit,
            kill_by=lease.keeper_kill_by(entry.valid_until, self.table.lease_ttl),
            announced=entry.batch,
        )

    def _started(self, entry: InFlight, row: Claim, child: Child) -> None:
        """Its start event and metric. Never raises: the child runs on whatever happens here,
        and its end must still reach `end`."""
        try:
            queue_delay = (row.started_at - row.due_at).total_seconds()
            if log.isEnabledFor(self.table.routine_level):  # its fields cost more than this
                cg = {} if child.cgroup is None else {"cgroup": child.cgroup.dirs[0]}
                self.table.event(
                    "started",
                    entry,
                    pid=child.pid,
                    scheduled_at=utc_iso(row.scheduled_at),
                    queue_delay=round(queue_delay, 4),
                    **cg,
                )
            if self.on_started:
                self.on_started(entry.type, max(0.0, queue_delay))
        except Exception:
            log.exception("executor_crash", extra={"punchclock_fields": {"run_id": entry.run_id}})

    # ------------------------------------------------------------ 4. end

    def end(self, entry: InFlight, row: Claim, result: ChildResult) -> None:
        """Its child ended (or never started): its slot is free at once, and its result,
        judged, goes to the completer; no completion for a run given back or superseded."""
        try:
            if entry.phase in (Phase.RELEASED, Phase.SUPERSEDED):
                self.retire(entry)  # no completion: the run went back, or is running anew
                return
            self.table.free_slot(entry)  # refill now; the completer records the result meanwhile
            completion = self.verdict(entry, row, result)  # reads the phase
            entry.move(Phase.COMPLETING)
            self.complete(entry, result, completion)
        except Exception:
            self.crashed(entry)

    # ------------------------------------------------------------ 5. verdict

    def verdict(self, entry: InFlight, row: Claim, result: ChildResult) -> Completion:
        """The fenced completion: what the child's end means for the run (verdict.py)."""
        kill_by = lease.keeper_kill_by(entry.valid_until, self.table.lease_ttl)
        c = verdict(
            entry.run_id,
            entry.lease_token,
            result,
            lease_gone=entry.lease_gone,
            keeper_killed=result.signal == signal.SIGKILL and time.monotonic() >= kill_by,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            retry_base=row.retry_base_seconds,
            retry_cap=row.retry_cap_seconds,
            policy=row.exit_policy,
        )
        return c if row.ping_url is None else replace(c, ping_url=row.ping_url)

    # ------------------------------------------------------------ 6. completion

    def complete(self, entry: InFlight, result: ChildResult, completion: Completion) -> None:
        """Queued with the completer, which records it in a batch (or on a claim it rides)
        and tells `recorded` whether the database took it."""
        told = functools.partial(self.recorded, entry, result, completion)
        self.completer.enqueue(completion, entry.wakes_others, told)

    # ------------------------------------------------------------ 7. recorded

    def recorded(
        self, entry: InFlight, result: ChildResult, completion: Completion, recorded: bool | None
    ) -> None:
        """The database's answer (None: given up at shutdown): its events and metric, then
        it retires."""
        try:
            self._report(entry, result, completion, recorded)
        except Exception:
            self.crashed(entry)
        else:
            self.retire(entry)

    def _report(
        self, entry: InFlight, result: ChildResult, completion: Completion, recorded: bool | None
    ) -> None:
        status, outcome = completion.status, completion.outcome
        duration = round(result.duration, 3)
        if recorded is None:  # shutdown gave up on an unreachable database; the reaper decides
            self.table.event(
                "result_unrecorded", entry, child_end=result.outcome, duration=duration
            )
            return
        if self.on_ended:
            ended = AttemptOutcome(outcome) if recorded else AttemptOutcome.REJECTED_LATE
            dead = bool(recorded) and status == RunStatus.DEAD
            self.on_ended(AttemptEnded(entry.job_name, entry.type, ended, duration, dead))
        if not recorded:
            self.table.event("late_result_rejected", entry, outcome=outcome, duration=duration)
            return
        if status == RunStatus.SUCCEEDED:
            self.table.event("succeeded", entry, duration=duration)
            return
        fields = {
            "error": result.error,
            "exit_code": result.exit_code,
            "duration": duration,
            "outcome": outcome,
        }
        named = {Outcome.TIMED_OUT: "timed_out", Outcome.OOM_KILLED: "oom_killed"}
        self.table.event(named.get(outcome, "failed"), entry, **fields)
        if status == RunStatus.DEAD:
            tail = result.stderr_tail[-ERROR_STDERR_CHARS:]
            self.table.event("dead", entry, stderr_tail=tail)
        else:
            self.table.event("retry_scheduled", entry, retry_in=completion.retry_in)

    # ------------------------------------------------------------ 8. retire

    def retire(self, entry: InFlight) -> None:
        """Its execution here is over: out of the table (unless a new claim of the run
        replaced it there), its slot free, and whoever waits for that told."""
        if entry.retired:
            return
        entry.retired = True
        self.table.remove(entry)

    def crashed(self, entry: InFlight) -> None:
        """A link of the chain raised (a bug): the run retires without its result (the
        reaper takes it over once its lease lapses)."""
        log.exception("executor_crash", extra={"punchclock_fields": {"run_id": entry.run_id}})
        self.retire(entry)
