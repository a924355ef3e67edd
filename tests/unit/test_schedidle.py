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


def test_the_switch_away_from_an_exiting_task_is_read() -> None:
    # perf prints an exiting task's last switch as ":-1 -1"; dropping it would leave the
    # task it switched to waiting forever.
    trace = [
        _switch(3.000, 0, ("swapper/0", 0, "R"), ("true", 10)),
        _switch(3.000, 1, ("python", 20, "S"), ("swapper/1", 0)),
        _wakeup(3.001, 0, "true", 11, 0),
        ":-1    -1 [000] 3.002000: sched:sched_switch: prev_comm=true prev_pid=10"
        " prev_prio=120 prev_state=X ==> next_comm=true next_pid=11 next_prio=120",
        _switch(3.010, 0, ("true", 11, "S"), ("true", 12)),
    ]
    report = analyse(parse(trace))
    assert report.idle[1] == pytest.approx(0.010)
    assert report.idle_with_waiting[1] == pytest.approx(0.001)  # 3.001-3.002 only


def test_a_busy_process_is_reported_by_state() -> None:
    trace = [_switch(0.0, 1, ("swapper/1", 0, "R"), ("true", 10))]
    t = 0.0
    for _ in range(50):  # 4 ms cycles: run 1, blocked 2 (vfork wait), wait 0.5, sleep 0.5
        trace.append(_switch(t, 0, ("swapper/0", 0, "R"), ("python", 20)))
        trace.append(_switch(t + 0.001, 0, ("python", 20, "D"), ("swapper/0", 0)))
        trace.append(_wakeup(t + 0.003, 1, "python", 20, 0))
        trace.append(_switch(t + 0.0035, 0, ("swapper/0", 0, "R"), ("python", 20)))
        trace.append(_switch(t + 0.0035, 0, ("python", 20, "S"), ("swapper/0", 0)))
        t += 0.004
    trace.append(_switch(t, 1, ("true", 10, "S"), ("true", 11)))
    report = analyse(parse(trace))
    name, spent = report.states[20]
    assert name == "python"
    shares = {state: seconds / report.window for state, seconds in spent.items()}
    assert shares == pytest.approx(
        {"running": 0.25, "blocked": 0.5, "waiting": 0.125, "sleeping": 0.125}, abs=1e-6
    )
    assert 10 not in report.states and 0 not in report.states  # a child, the idle task
