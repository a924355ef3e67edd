"""SIGHUP reloads a running supervisor's handlers (supervisor/reload.py): real processes.

Each supervisor serves a handler TOML and a handler directory; a test changes them and
sends SIGHUP, and the process must stay the same one throughout.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from supervisor.core.store import Store

from ..factory import worker_rows
from ..helpers import wait_for
from .procs import Cluster, Supervisor, handler_argv, write_handlers_toml
from .scenario import all_in, attempts, create_runs, read_lines, runs


def add_executable(directory: Path, type_name: str, handler: str = "append") -> Path:
    """A handler file as an operator adds one: an executable named after its type."""
    path = directory / type_name
    tmp = directory / f".{type_name}.tmp"  # hidden until complete: ignored by the loader
    tmp.write_text(f"#!/bin/sh\nexec {' '.join(handler_argv(handler))}\n")
    tmp.chmod(0o755)
    tmp.replace(path)
    return path


async def start(cluster: Cluster, tmp_path: Path, name: str, types: dict[str, str]) -> Supervisor:
    handlers = tmp_path / "handlers.d"
    handlers.mkdir(exist_ok=True)
    return await cluster.start_ready(
        name, types, poll_interval=0.5, extra_args=["--handlers", str(handlers)]
    )


async def offers(store: Store, worker: str, types: list[str]) -> bool:
    """Whether the worker row advertises exactly `types` (what the fleet and API see)."""
    rows = {w["id"]: w for w in await worker_rows(store)}
    return list(rows[worker]["types"]) == types


def sd_states(sock: socket.socket, n: int) -> list[str]:
    """The first `n` READY/RELOADING/STOPPING messages a supervisor sent systemd."""
    states: list[str] = []
    while len(states) < n:
        lines = sock.recv(4096).decode().split("\n")
        states += [s for s in lines if s in ("READY=1", "RELOADING=1", "STOPPING=1")]
    return states[:n]


async def test_a_handler_file_added_runs_after_sighup_in_the_same_process(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    notify = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(notify))
        systemd.settimeout(20)
        handlers = tmp_path / "handlers.d"
        handlers.mkdir()
        sup = await cluster.start_ready(
            "s1",
            ["append"],
            extra_args=["--handlers", str(handlers)],
            env={"NOTIFY_SOCKET": str(notify)},
        )
        pid = sup.pid
        add_executable(handlers, "fresh")
        sup.send(signal.SIGHUP)
        reloaded = await sup.wait_event("reloaded", timeout=20)
        assert (reloaded["added"], reloaded["removed"]) == (["fresh"], [])
        assert reloaded["types"] == ["append", "fresh"]
        # systemd heard of the start, the reload and its end, in that order.
        assert sd_states(systemd, 3) == ["READY=1", "RELOADING=1", "READY=1"]
    await wait_for(lambda: offers(store, "s1", ["append", "fresh"]), 20, "the row to list fresh")
    out = tmp_path / "out.csv"
    [run] = await create_runs(store, "fresh", 1, {"out": str(out)})
    await wait_for(lambda: all_in(store, [run], "succeeded"), 20, "the new type's run")
    assert [a["worker_id"] for a in await attempts(store, run)] == ["s1"]
    assert [line["run_id"] for line in read_lines(out)] == [run]
    assert sup.running and sup.pid == pid
    assert sup.stop() == 0, sup.tail()


async def test_a_broken_handler_file_is_named_and_the_handlers_in_force_stay(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await start(cluster, tmp_path, "s1", {"append": "append"})
    toml = tmp_path / "handlers-s1.toml"
    good = toml.read_text()
    # A new handler that would load, and the TOML broken beside it: all or nothing.
    add_executable(tmp_path / "handlers.d", "fresh")
    toml.write_text(good + "\n[handlers.oops\n")
    sup.send(signal.SIGHUP)
    failed = await sup.wait_event("reload_failed", timeout=20)
    assert failed["source"] == str(toml) and "cannot read" in failed["reason"], failed
    assert not sup.events("reloaded")
    # The old handlers run; the new one was not taken up, here or in the worker row.
    out = tmp_path / "out.csv"
    old = await create_runs(store, "append", 1, {"out": str(out)})
    new = await create_runs(store, "fresh", 1, {"out": str(out)})
    await wait_for(lambda: all_in(store, old, "succeeded"), 20, "the old type's run")
    assert await offers(store, "s1", ["append"])
    assert [r["attempts"] for r in (await runs(store, new)).values()] == [0]
    # A handler entry the loader rejects is refused the same way, naming its entry.
    toml.write_text(good + '\n[handlers.bad]\ncommand = ["/nonexistent/handler"]\n')
    sup.send(signal.SIGHUP)
    await wait_for(lambda: len(sup.events("reload_failed")) == 2, 20, "the second refusal")
    failed = sup.events("reload_failed")[1]
    assert failed["source"] == f"{toml}[handlers.bad]" and "does not exist" in failed["reason"]
    # Fixed: the next SIGHUP applies everything, and the waiting run of the new type runs.
    toml.write_text(good)
    sup.send(signal.SIGHUP)
    reloaded = await sup.wait_event("reloaded", timeout=20)
    assert reloaded["added"] == ["fresh"]
    await wait_for(lambda: all_in(store, new, "succeeded"), 20, "the new type's run")
    assert sup.stop() == 0, sup.tail()


async def test_a_child_running_during_sighup_is_left_alone(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await start(cluster, tmp_path, "s1", {"slow": "sleeper", "append": "append"})
    work = tmp_path / "work"
    work.mkdir()
    [run] = await create_runs(store, "slow", 1, {"dir": str(work), "seconds": 3})
    pids = work / f"{run}-1.pids"
    await wait_for(pids.exists, 20, "the child to run")
    [child] = [int(p) for p in pids.read_text().split()]
    # Its own handler changes under it (a timeout shorter than its run), others are added.
    write_handlers_toml(
        tmp_path / "handlers-s1.toml",
        {"slow": "sleeper", "append": "append"},
        {"slow": "timeout_seconds = 1"},
    )
    add_executable(tmp_path / "handlers.d", "fresh")
    for _ in range(3):  # more signals while the reload runs: coalesced, none fatal
        sup.send(signal.SIGHUP)
    reloaded = await sup.wait_event("reloaded", timeout=20)
    assert (reloaded["added"], reloaded["changed"]) == (["fresh"], ["slow"])
    os.kill(child, 0)  # still there, mid-run
    await wait_for(lambda: all_in(store, [run], "succeeded"), 20, "the running child's run")
    [attempt] = await attempts(store, run)
    assert attempt["outcome"] == "succeeded" and attempt["exit_code"] == 0
    assert [line["pid"] for line in read_lines(work / "done.csv")] == [child]
    assert sup.stop() == 0, sup.tail()


async def test_a_removed_type_is_no_longer_claimed_and_its_runs_in_flight_finish(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    types = {"append": "append", "gone": "append", "slow": "sleeper"}
    sup = await start(cluster, tmp_path, "s1", types)
    work = tmp_path / "work"
    work.mkdir()
    [slow] = await create_runs(store, "slow", 1, {"dir": str(work), "seconds": 3})
    await wait_for((work / f"{slow}-1.pids").exists, 20, "the slow child to run")
    write_handlers_toml(tmp_path / "handlers-s1.toml", {"append": "append"})
    sup.send(signal.SIGHUP)
    reloaded = await sup.wait_event("reloaded", timeout=20)
    assert (reloaded["removed"], reloaded["types"]) == (["gone", "slow"], ["append"])
    await wait_for(lambda: offers(store, "s1", ["append"]), 20, "the row to drop gone and slow")
    # The run of a removed type in flight finishes as it began.
    await wait_for(lambda: all_in(store, [slow], "succeeded"), 20, "the slow run in flight")
    # New runs of a removed type wait; the types still offered run (claimed together).
    out = tmp_path / "out.csv"
    async with store.transaction() as tx:
        gone = await create_runs(tx, "gone", 3, {"out": str(out)})
        kept = await create_runs(tx, "append", 3, {"out": str(out)})
    await wait_for(lambda: all_in(store, kept, "succeeded"), 20, "the kept type's runs")
    rows = await runs(store, gone)
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("scheduled", 0)}
    assert sorted(line["run_id"] for line in read_lines(out)) == sorted(kept)
    assert sup.stop() == 0, sup.tail()


async def test_signals_during_a_reload_are_never_lost(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    sup = await start(cluster, tmp_path, "s1", {"append": "append"})
    pid = sup.pid
    handlers = tmp_path / "handlers.d"
    for name in ("one", "two", "three"):  # each change followed by a signal, back to back
        add_executable(handlers, name)
        sup.send(signal.SIGHUP)
    want = ["append", "one", "three", "two"]
    await wait_for(lambda: offers(store, "s1", want), 20, "every change applied")
    last = sup.events("reloaded")[-1]
    assert last["types"] == want and 1 <= len(sup.events("reloaded")) <= 3
    assert sup.running and sup.pid == pid
    assert sup.stop() == 0, sup.tail()


async def test_the_config_file_is_read_again_live_settings_apply_others_wait(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    """`punchclock supervise --config F`: SIGHUP reads F again; a live setting changes in the
    running process, one that needs a restart is named and keeps its value."""
    config = tmp_path / "punchclock.toml"
    config.write_text("output_limit = 4096\nclaim_ahead = 0\n")
    sup = await start_with_config(cluster, tmp_path, config)
    pid = sup.pid
    config.write_text("output_limit = 8192\nclaim_ahead = 0.5\n")
    sup.send(signal.SIGHUP)
    reloaded = await sup.wait_event("reloaded", timeout=20)
    assert reloaded["settings"] == ["output_limit"], reloaded
    [restart] = sup.events("reload_needs_restart")
    assert restart["settings"] == ["claim_ahead"], restart
    # The new limit is in force: a handler printing 6,000 bytes keeps them all.
    release = tmp_path / "release"
    release.touch()
    payload = {"lines": ["x" * 6000], "release": str(release)}
    [run] = await create_runs(store, "talk", 1, payload)
    await wait_for(lambda: all_in(store, [run], "succeeded"), 20, "the run")
    [attempt] = await attempts(store, run)
    assert len(attempt["stdout_tail"]) > 4096, len(attempt["stdout_tail"])
    assert sup.running and sup.pid == pid
    assert sup.stop() == 0, sup.tail()


async def start_with_config(cluster: Cluster, tmp_path: Path, config: Path) -> Supervisor:
    handlers = tmp_path / "handlers.d"
    handlers.mkdir(exist_ok=True)
    return await cluster.start_ready(
        "s1", ["talk"], extra_args=["--handlers", str(handlers), "--config", str(config)]
    )
