"""bench.schedidle rebuilds run queues from `perf script` lines: idle time counts as "work
waited" only while another CPU had a runnable task that was not running."""

from __future__ import annotations

import pytest

from bench.schedidle import analyse, parse


def _switch(t: float, cpu: int, prev: tuple[str, int, str], nxt: tuple[str, int]) -> str:
    return (
        f"{prev[0]} {prev[1]} [{cpu:03d}] {t:.6f}: sched:sched_switch: prev_comm={prev[0]}"
        f" prev_pid={prev[1]} prev_prio=120 prev_state={prev[2]} ==> next_comm={nxt[0]}"
        f" next_pid={nxt[1]} next_prio=120"
    )


def _wakeup(t: float, cpu: int, comm: str, pid: int, target: int) -> str:
    return (
        f"swapper 0 [{cpu:03d}] {t:.6f}: sched:sched_wakeup: comm={comm} pid={pid}"
        f" prio=120 target_cpu={target:03d}"
    )


def _migrate(t: float, cpu: int, comm: str, pid: int, orig: int, dest: int) -> str:
    return (
        f"swapper 0 [{cpu:03d}] {t:.6f}: sched:sched_migrate_task: comm={comm} pid={pid}"
        f" prio=120 orig_cpu={orig} dest_cpu={dest}"
    )


def test_idle_cpu_beside_a_queued_task_counts_as_waiting_work() -> None:
    trace = [
        _switch(1.000, 0, ("swapper/0", 0, "R"), ("true", 10)),  # window opens
        _switch(1.000, 1, ("python", 20, "S"), ("swapper/1", 0)),  # cpu1 idle from here
        _wakeup(1.002, 0, "python", 20, 0),  # python queued behind true on cpu0
        _switch(1.003, 0, ("true", 10, "R"), ("python", 20)),  # true preempted, queued
        _switch(1.004, 1, ("swapper/1", 0, "R"), ("true", 10)),  # pulled over: window ends
    ]
    report = analyse(parse(trace))
    assert report.window == pytest.approx(0.004)
    assert report.idle[1] == pytest.approx(0.004)
    # Work waited on cpu0 from 1.002 (python) to 1.004 (true, then pulled): 2 of 4 ms.
    assert report.idle_with_waiting[1] == pytest.approx(0.002)
    assert report.idle[0] == pytest.approx(0.0)
    assert report.waiting_comms["python"] == pytest.approx(0.001)
    assert report.waiting_comms["true"] == pytest.approx(0.001)


def test_a_task_migrated_to_the_idle_cpu_stops_counting_for_it() -> None:
    trace = [
        _switch(2.000, 0, ("swapper/0", 0, "R"), ("true", 10)),
        _switch(2.000, 1, ("postgres", 30, "S"), ("swapper/1", 0)),
        _wakeup(2.001, 0, "postgres", 30, 0),
        _migrate(2.002, 1, "postgres", 30, 0, 1),  # now waits on the idle CPU itself
        _switch(2.003, 1, ("swapper/1", 0, "R"), ("postgres", 30)),
        _switch(2.004, 0, ("true", 10, "S"), ("true", 11)),  # window ends
    ]
    report = analyse(parse(trace))
    assert report.idle[1] == pytest.approx(0.003)
    assert report.idle_with_waiting[1] == pytest.approx(0.001)  # 2.001-2.002 only


def test_a_trace_without_the_window_task_is_refused() -> None:
    with pytest.raises(ValueError, match="no task named 'true'"):
        analyse(parse([_switch(1.0, 0, ("swapper/0", 0, "R"), ("python", 20))]))
