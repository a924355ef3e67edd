"""Was a CPU idle while work waited on another one? Reads `perf script` output of the
scheduler's tracepoints, rebuilds each CPU's run queue (tasks runnable but not running), and
reports, between the first and last time a task named --comm ran (the jobs' children:
`true` by default), how long each CPU was idle and how much of that another CPU had a task
waiting, with the commands that waited and how long they had; then each process that was
busy through the window (the workers) by state: running, waiting for a CPU, blocked (`D`:
for a spawning worker, mostly the vfork wait for its child's exec) and sleeping.

    perf record -a -e sched:sched_switch -e sched:sched_wakeup -e sched:sched_wakeup_new \\
        -e sched:sched_migrate_task -o sched.data -- CMD ...
    perf script -i sched.data > sched.txt
    python -m bench.schedidle sched.txt [--comm true]

`[--comm NAME] --record [--] CMD ...` does both steps around CMD. Diagnostic only: tracing
every switch costs a few per cent of throughput, so rates measured under it do not compare.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

EVENTS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task")
_LINE = re.compile(r"^\s*.+?\s+-?\d+\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$")
_PREV = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+)")
_NEXT = re.compile(r"next_comm=(.*?) next_pid=(\d+) ")
_WAKE = re.compile(r"comm=(.*?) pid=(\d+) .*target_cpu=(\d+)")
_MIGRATE = re.compile(r"pid=(\d+) .*orig_cpu=(\d+) dest_cpu=(\d+)")
_STATES = {"R": "waiting", "S": "sleeping", "D": "blocked"}  # by sched_switch's prev_state
_AGE_BUCKETS = ((1e-4, "<0.1 ms"), (5e-4, "0.1-0.5 ms"), (2e-3, "0.5-2 ms"), (1e-2, "2-10 ms"))


@dataclass(frozen=True)
class Event:
    time: float
    cpu: int
    name: str
    fields: str


@dataclass
class Report:
    window: float = 0.0
    idle: dict[int, float] = field(default_factory=dict)  # CPU -> seconds idle
    idle_with_waiting: dict[int, float] = field(default_factory=dict)  # ... while work waited
    # task-seconds, summed per command; "python>true" is a child before its exec
    waiting_comms: dict[str, float] = field(default_factory=dict)
    waiting_ages: dict[str, float] = field(default_factory=dict)  # by how long it had waited
    # pid -> its commands and seconds per state, for tasks in the whole window: running,
    # waiting (runnable), sleeping (S) or blocked (D: a vfork parent waits so for the exec)
    states: dict[int, tuple[str, dict[str, float]]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"window {self.window:.3f} s"]
        for cpu in sorted(self.idle):
            idle, waited = self.idle[cpu], self.idle_with_waiting.get(cpu, 0.0)
            share = waited / idle if idle else 0.0
            out.append(
                f"cpu{cpu}: idle {idle / self.window:.1%} of the window; another CPU had a"
                f" task waiting for {share:.0%} of that"
            )
        most = sorted(self.waiting_comms.items(), key=lambda kv: -kv[1])[:6]
        top = ", ".join(f"{c} {s * 1e3:.1f} ms" for c, s in most)
        out.append(f"waiting while a CPU idled (task-seconds): {top}")
        ages = ", ".join(f"{a} {s * 1e3:.1f} ms" for a, s in sorted(self.waiting_ages.items()))
        out.append(f"how long they had waited: {ages}")
        for pid, (name, spent) in sorted(self.states.items()):
            shares = sorted(spent.items(), key=lambda kv: -kv[1])
            text = ", ".join(f"{state} {t / self.window:.0%}" for state, t in shares)
            out.append(f"{name} {pid}: {text}")
        return out


def parse(lines: Iterable[str]) -> list[Event]:
    events = []
    for line in lines:
        m = _LINE.match(line)
        if m and m.group(3) in EVENTS:
            events.append(Event(float(m.group(2)), int(m.group(1)), m.group(3), m.group(4)))
    events.sort(key=lambda e: e.time)
    return events


def analyse(events: list[Event], window_comm: str = "true") -> Report:
    """Replay the events; 0 is the idle task. A task is waiting on a CPU from its wake-up
    there (or its preemption, prev_state R) until it runs; migrations move it."""
    marks = [e.time for e in events if e.name == "sched_switch" and _switched_in(e, window_comm)]
    if not marks:
        raise ValueError(f"no task named {window_comm!r} ran in the trace")
    start, end = marks[0], marks[-1]
    cpus = sorted({e.cpu for e in events})
    running: dict[int, int | None] = dict.fromkeys(cpus)
    waiting: dict[int, dict[int, float]] = {c: {} for c in cpus}  # CPU -> pid -> since
    names: dict[int, list[str]] = {}  # pid -> the commands it ran as, in order
    waited: dict[int, float] = {}  # pid -> seconds it waited while a CPU idled
    state: dict[int, tuple[str, float]] = {}  # pid -> (state, since)
    spent: dict[int, dict[str, float]] = {}  # pid -> state -> seconds in the window
    changes: dict[int, int] = {}  # pid -> state changes in the window
    report = Report(
        window=end - start,
        idle=dict.fromkeys(cpus, 0.0),
        idle_with_waiting=dict.fromkeys(cpus, 0.0),
    )
    last = start

    def account(now: float) -> None:
        nonlocal last
        t = min(now, end)
        dt = t - last
        if dt <= 0:
            return
        for cpu in cpus:
            if running[cpu] != 0:
                continue
            report.idle[cpu] += dt
            others = [(p, s) for c in cpus if c != cpu for p, s in waiting[c].items()]
            if others:
                report.idle_with_waiting[cpu] += dt
                for pid, since in others:
                    waited[pid] = waited.get(pid, 0.0) + dt
                    age = _age(t - since)
                    report.waiting_ages[age] = report.waiting_ages.get(age, 0.0) + dt
        last = t

    def become(pid: int, new: str, now: float) -> None:
        old = state.get(pid)
        if old is not None:
            seconds = min(now, end) - max(old[1], start)
            if seconds > 0:
                per = spent.setdefault(pid, {})
                per[old[0]] = per.get(old[0], 0.0) + seconds
                changes[pid] = changes.get(pid, 0) + 1
        state[pid] = (new, now)

    def unqueue(pid: int) -> None:
        for queue in waiting.values():
            queue.pop(pid, None)

    for e in events:
        if e.time > end:
            break
        if e.time > start:
            account(e.time)
        if e.name == "sched_switch":
            prev, nxt = _PREV.search(e.fields), _NEXT.search(e.fields)
            if prev is None or nxt is None:
                continue
            prev_pid, next_pid = int(prev.group(2)), int(nxt.group(2))
            unqueue(prev_pid)
            unqueue(next_pid)
            if prev_pid != 0 and prev.group(3).startswith("R"):  # preempted: still runnable
                waiting[e.cpu][prev_pid] = e.time
            _name(names, prev_pid, prev.group(1))
            _name(names, next_pid, nxt.group(1))
            become(prev_pid, _STATES.get(prev.group(3)[:1], "sleeping"), e.time)
            become(next_pid, "running", e.time)
            running[e.cpu] = next_pid
        elif e.name in ("sched_wakeup", "sched_wakeup_new"):
            m = _WAKE.search(e.fields)
            if m is None:
                continue
            pid, target = int(m.group(2)), int(m.group(3))
            if pid not in running.values():
                unqueue(pid)
                waiting.setdefault(target, {})[pid] = e.time
                _name(names, pid, m.group(1))
                become(pid, "waiting", e.time)
        else:
            m = _MIGRATE.search(e.fields)
            if m is None:
                continue
            pid, orig, dest = (int(g) for g in m.groups())
            since = waiting.get(orig, {}).pop(pid, None)
            if since is not None:
                waiting.setdefault(dest, {})[pid] = since
    account(end)
    for pid, seconds in waited.items():
        name = ">".join(names.get(pid, ["?"]))
        report.waiting_comms[name] = report.waiting_comms.get(name, 0.0) + seconds
    for pid, (current, _) in list(state.items()):
        become(pid, current, end)
    window = report.window
    for pid, per in spent.items():
        # The busy processes of the whole window (the workers): not the idle task, not a
        # child, mostly awake, and often switched (a task whose switches the trace lacks,
        # such as another namespace's, would look always running)
        if (
            pid != 0
            and window_comm not in names[pid]
            and sum(per.values()) >= 0.99 * window
            and per.get("sleeping", 0.0) < 0.5 * window
            and changes.get(pid, 0) >= 100
        ):
            report.states[pid] = (">".join(names[pid]), per)
    return report


def _name(names: dict[int, list[str]], pid: int, comm: str) -> None:
    seen = names.setdefault(pid, [])
    if not seen or seen[-1] != comm:
        seen.append(comm)


def _switched_in(e: Event, name: str) -> bool:
    m = _NEXT.search(e.fields)
    return m is not None and m.group(1) == name


def _age(seconds: float) -> str:
    for limit, label in _AGE_BUCKETS:
        if seconds < limit:
            return label
    return ">=10 ms"


def record(argv: list[str], out: Path) -> None:
    events = [arg for name in EVENTS for arg in ("-e", f"sched:{name}")]
    data = out.with_suffix(".data")
    subprocess.run(["perf", "record", "-q", "-a", *events, "-o", str(data), "--", *argv],
                   check=True)  # fmt: skip
    with out.open("w") as f:
        subprocess.run(["perf", "script", "-i", str(data)], check=True, stdout=f,
                       stderr=subprocess.DEVNULL)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    recording = "--record" in args_in
    cmd: list[str] = []
    if recording:  # everything after it (and an optional "--") is the command
        at = args_in.index("--record")
        args_in, cmd = args_in[:at], args_in[at + 1 :]
        cmd = cmd[1:] if cmd[:1] == ["--"] else cmd
    p = argparse.ArgumentParser(prog="python -m bench.schedidle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("trace", nargs="?", help="`perf script` output (default: stdin)")
    p.add_argument("--comm", default="true", help="the window's task name (default: true)")
    args = p.parse_args(args_in)
    if recording and not cmd:
        p.error("--record needs a command")
    try:
        with contextlib.ExitStack() as stack:
            source: Iterable[str] = sys.stdin
            if cmd:
                trace = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "sched.txt"
                record(cmd, trace)
                source = stack.enter_context(trace.open())
            elif args.trace:
                source = stack.enter_context(open(args.trace))
            report = analyse(parse(source), args.comm)
    except ValueError as exc:
        print(f"schedidle: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
