"""A cgroup per run against this host's real cgroups and real processes: the escapee that
setsid()s, clears its environment and ignores SIGTERM is gone after a timeout, a kill
(cancel, lost lease), its handler's exit, and the supervisor's death (the keeper); without a
cgroup it survives (the documented gap). An observer polls pids with psutil.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from supervisor.proc import cgroups
from supervisor.proc.cgchild import ChildCgroup
from supervisor.proc.cglimits import Limits, parse_limits
from supervisor.proc.cgroups import Host
from supervisor.proc.child import ChildSpec
from supervisor.registry import describe_isolation

from ..helpers import wait_for
from .test_runner import fake_process, spawn, watcher  # noqa: F401 - watcher: autouse

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
HOST = cgroups.probe()
needs_cgroups = pytest.mark.skipif(not HOST.usable, reason=f"no cgroup per run: {HOST.problem}")

# A handler whose grandchild escapes every mechanism but a cgroup: it calls setsid, ignores
# SIGTERM and execs with an empty environment (no marker), and its parent does not wait for
# it. argv: <dir> <linger|exit>. Writes <dir>/gc (the grandchild's pid) when it is in place.
ESCAPER = textwrap.dedent("""
    import os, signal, sys, time
    d, mode = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            with open(d + "/gc.tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(d + "/gc.tmp", d + "/gc")
            os.execve("/bin/sleep", ["sleep", "1000"], {})  # SIG_IGN survives exec
        os._exit(0)
    while not os.path.exists(d + "/gc"):
        time.sleep(0.005)
    if mode == "linger":
        while True:
            signal.pause()
""")


_PF_EXITING = 0x4  # include/linux/sched.h: set as do_exit() begins; it never returns


def is_dead(pid: int) -> bool:
    """Gone, a zombie, or inside do_exit(). The last counts: the kernel takes an exiting task
    out of its cgroup (cgroup_exit) just before it becomes a zombie, so a cgroup reported
    empty may still hold a member for those microseconds, past any return to user space."""
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
        return True
    flags = int(stat[stat.rindex(b")") + 2 :].split()[6])  # field 9 of proc(5)
    return bool(flags & _PF_EXITING)


@pytest.fixture
def escapees() -> AsyncIterator[list[int]]:  # type: ignore[misc]
    """pids a test saw; whatever is alive at the end is killed (and fails no test here)."""
    seen: list[int] = []
    yield seen  # type: ignore[misc]
    for pid in seen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_cgroups() -> set[str]:
    bases = {*(() if HOST.v2 is None else (HOST.v2,)), *HOST.v1.values()}
    found = set()
    for base in bases:
        with contextlib.suppress(OSError):
            found |= {e.path for e in os.scandir(base) if e.name.startswith(cgroups.PREFIX)}
    return found


@pytest.fixture(autouse=True)
async def no_leftover_cgroups() -> AsyncIterator[None]:
    before = run_cgroups()
    yield
    await wait_for(lambda: not run_cgroups() - before, 5, "the runs' cgroups to be removed")


def escaper(tmp_path: Path, mode: str, host: Host | None = HOST, **kw: object) -> ChildSpec:
    return ChildSpec(
        [PY, "-c", ESCAPER, str(tmp_path), mode],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cgroup=host,
        **kw,  # type: ignore[arg-type]
    )


async def grandchild(tmp_path: Path, seen: list[int]) -> int:
    await wait_for((tmp_path / "gc").exists, 10, "the grandchild to be in place")
    pid = int((tmp_path / "gc").read_text())
    seen.append(pid)
    # The pid file is written before the exec: wait for the exec to have replaced python.
    await wait_for(lambda: _cmdline(pid)[:1] == ["sleep"], 10, "the grandchild's exec")
    assert psutil.Process(pid).environ() == {}  # nothing to find it by but its cgroup
    return pid


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        raise AssertionError(f"the grandchild {pid} died") from None


def gone(dirs: tuple[str, ...]) -> bool:
    return not any(os.path.exists(d) for d in dirs)


@needs_cgroups
async def test_timeout_kills_the_escaped_grandchild(tmp_path: Path, escapees: list[int]) -> None:
    child = await spawn(escaper(tmp_path, "linger", timeout=1.5, kill_grace=0.2))
    assert child.cgroup is not None
    dirs = child.cgroup.dirs
    gc = await grandchild(tmp_path, escapees)
    result = await child.wait()
    assert result.outcome == "timed_out"
    assert is_dead(gc)  # before the result
    assert gone(dirs), "the run's cgroup directories are removed"


@needs_cgroups
async def test_kill_on_cancel_or_lost_lease_kills_the_escaped_grandchild(
    tmp_path: Path, escapees: list[int]
) -> None:
    # The executor's cancel and lost-lease paths both end in Child.kill.
    child = await spawn(escaper(tmp_path, "linger", kill_grace=5))
    gc = await grandchild(tmp_path, escapees)
    async with asyncio.timeout(3):  # SIGTERM is ignored: kill(grace=0.2) must KILL at once
        await child.kill("lease lost", 0.2)
    result = await child.wait()
    assert result.outcome == "killed" and result.error == "killed: lease lost"
    assert is_dead(gc)


@needs_cgroups
async def test_what_a_handler_leaves_behind_dies_at_its_exit(
    tmp_path: Path, escapees: list[int]
) -> None:
    child = await spawn(escaper(tmp_path, "exit", kill_grace=0.2))
    gc = await grandchild(tmp_path, escapees)
    result = await child.wait()
    assert result.outcome == "succeeded"
    assert is_dead(gc)  # before the result


async def test_without_a_cgroup_the_escapee_survives_a_kill(
    tmp_path: Path, escapees: list[int]
) -> None:
    # The documented gap (DESIGN.md, Handler isolation): outside a cgroup, a descendant that
    # leaves the session, clears its environment and is not our child (no subreaper here:
    # the daemon's Orphans sweep would catch it, the keeper would not) escapes the kill.
    child = await spawn(escaper(tmp_path, "linger", host=None, kill_grace=0.2))
    assert child.cgroup is None
    gc = await grandchild(tmp_path, escapees)
    await child.kill("cancelled", 0.2)
    assert not is_dead(gc)


@needs_cgroups
async def test_v1_freezer_kill_when_there_is_no_v2_tree(
    tmp_path: Path, escapees: list[int]
) -> None:
    if "freezer" not in HOST.v1:
        pytest.skip("no writable v1 freezer hierarchy")
    v1_only = replace(HOST, v2=None, v2_kill=False, v2_controllers=frozenset())
    assert v1_only.kill_method == "v1 freezer"
    child = await spawn(escaper(tmp_path, "linger", host=v1_only, kill_grace=5))
    assert child.cgroup is not None and child.cgroup.v2 is None
    assert "freezer" in child.cgroup.v1
    gc = await grandchild(tmp_path, escapees)
    await child.kill("cancelled", 0)
    result = await child.wait()
    assert is_dead(gc)
    assert result.outcome == "killed"
    assert result.cpu_seconds is not None  # v1 cpuacct


# A supervisor (asyncio + Keeper + Child with a cgroup) that prints "<child> <keeper>
# <dir>..." and then either waits, or (argv[5] == "freeze") stops itself past the deadline.
FAKE_SUPERVISOR = textwrap.dedent("""
    import asyncio, os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from supervisor.proc import cgroups
    from supervisor.proc.keeper import Keeper
    from supervisor.proc.runner import Child, ChildSpec
    from supervisor.proc.watcher import Watcher

    async def main():
        keeper = await Keeper.start(sys.argv[2])
        freeze = sys.argv[5] == "freeze"
        spec = ChildSpec(
            [sys.executable, "-c", sys.argv[4], sys.argv[3], "linger"],
            env={"PATH": "/usr/bin:/bin"},
            cgroup=cgroups.probe(),
            kill_by=time.monotonic() + 1.0 if freeze else None,
        )
        child = await Child.spawn(spec, Watcher(), keeper)
        await keeper.sync()
        print(child.pid, keeper.pid, *child.cgroup.dirs, flush=True)
        if freeze:
            os.kill(os.getpid(), signal.SIGSTOP)
        await child.wait()

    asyncio.run(main())
""")


def fake_supervisor(
    tmp_path: Path, mode: str
) -> contextlib.AbstractAsyncContextManager[tuple[subprocess.Popen[str], list[str]]]:
    return fake_process(FAKE_SUPERVISOR, str(tmp_path), ESCAPER, mode)


@needs_cgroups
async def test_keeper_kills_the_cgroup_when_the_supervisor_is_killed(
    tmp_path: Path, escapees: list[int]
) -> None:
    async with fake_supervisor(tmp_path, "wait") as (fake, words):
        child_pid, keeper_pid, dirs = int(words[0]), int(words[1]), tuple(words[2:])
        gc = await grandchild(tmp_path, escapees)
        escapees.append(child_pid)
        fake.kill()
        fake.wait()
        await wait_for(lambda: is_dead(gc) and is_dead(child_pid), 5, "the run's tree to die")
        await wait_for(lambda: is_dead(keeper_pid), 5, "the keeper to exit")
        assert gone(dirs), "the keeper removes the cgroups it killed"


@needs_cgroups
async def test_keeper_kills_the_cgroup_of_a_frozen_supervisor_at_the_deadline(
    tmp_path: Path, escapees: list[int]
) -> None:
    # A lost lease while the supervisor's loop stands still: the keeper's kill-by deadline.
    async with fake_supervisor(tmp_path, "freeze") as (fake, words):
        gc = await grandchild(tmp_path, escapees)
        await wait_for(lambda: psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED)
        await wait_for(lambda: is_dead(gc), 5, "the escaped grandchild to die at the deadline")
        assert psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED
    # The supervisor is SIGKILLed while frozen: the keeper removes the cgroup it killed.
    await wait_for(lambda: gone(tuple(words[2:])), 5, "the keeper to remove the cgroup")


# ---------------------------------------------------------------- accounting

# The work happens in a grandchild that its parent never waits for (so no rusage of the
# direct child can contain it): ~0.6 s of CPU and 96 MiB touched.
WORKER = textwrap.dedent("""
    import os, time
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        block = bytearray(96 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        end = time.process_time() + 0.6
        while time.process_time() < end:
            pass
        os._exit(0)  # closes w: the parent's read returns
    os.close(w)
    os.read(r, 1)
""")


@needs_cgroups
async def test_cpu_and_peak_memory_of_a_grandchild_are_accounted() -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    child = await spawn(ChildSpec([PY, "-c", WORKER], env=env, cgroup=HOST))
    result = await child.wait()
    assert result.outcome == "succeeded", result.stderr_tail
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0.5
    assert result.peak_rss_bytes is not None and result.peak_rss_bytes >= 96 << 20

    plain = await (await spawn(ChildSpec([PY, "-c", WORKER], env=env))).wait()
    assert plain.cpu_seconds is not None and plain.cpu_seconds < 0.4  # the gap this closes


# ---------------------------------------------------------------- limits

FORKS = textwrap.dedent("""
    import os, signal, time
    pids = []
    for _ in range(10):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
    print(len(pids))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
""")
BUSY = "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass\n"
HOG = "blocks = []\nwhile True:\n    blocks.append(b'x' * (1 << 20))\n"


def _limited(argv: list[str], limits: Limits) -> ChildSpec:
    problem = HOST.limit_problem(limits)
    if problem is not None:
        pytest.skip(problem)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return ChildSpec(argv, env=env, cgroup=HOST, cgroup_limits=limits)


@needs_cgroups
async def test_tasks_max_caps_the_processes_of_the_run() -> None:
    result = await (await spawn(_limited([PY, "-c", FORKS], Limits(tasks_max=4)))).wait()
    assert result.outcome == "succeeded", result.stderr_tail
    assert result.stdout_tail.strip() == "3"  # the handler itself is the 4th


@needs_cgroups
async def test_cpu_max_throttles_the_run() -> None:
    result = await (await spawn(_limited([PY, "-c", BUSY], Limits(cpu_max=0.2)))).wait()
    assert result.outcome == "succeeded", result.stderr_tail
    assert result.cpu_seconds is not None and result.cpu_seconds < 0.4  # 1 s of wall time


@needs_cgroups
async def test_memory_max_ends_the_run_oom_killed_with_the_limit_and_peak() -> None:
    spec = _limited([PY, "-c", HOG], Limits(memory_max=64 << 20))
    result = await (await spawn(spec)).wait()
    assert result.outcome == "oom_killed"
    assert result.signal == signal.SIGKILL
    assert result.error == "killed by the kernel: memory limit 64 MiB reached (peak 64 MiB)"


# ---------------------------------------------------------------- spawn paths


@needs_cgroups
async def test_cgroup_runs_with_cwd_umask_rlimits_and_another_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching identity needs root")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    script = "cat /proc/self/cgroup; id -u; id -g; pwd; umask; ulimit -n"
    spec = ChildSpec(
        ["sh", "-c", script],
        env=env,
        cwd="/tmp",
        user=65534,
        group=65534,
        extra_groups=(),
        umask=0o027,
        limits=(("nofile", 77),),
        cgroup=HOST,
    )
    child = await spawn(spec)
    assert child.cgroup is not None
    name = child.cgroup.name
    result = await child.wait()
    assert result.outcome == "succeeded", result.stderr_tail
    lines = result.stdout_tail.splitlines()
    assert lines[-5:] == ["65534", "65534", "/tmp", "0027", "77"]
    assert all(line.endswith("/" + name) for line in lines if line.startswith("0::"))


@needs_cgroups
async def test_a_missing_command_is_a_spawn_error_and_leaves_no_cgroup(tmp_path: Path) -> None:
    spec = ChildSpec(["/nonexistent/cmd"], env={"PATH": "/usr/bin:/bin"}, cgroup=HOST)
    result = await (await spawn(spec)).wait()
    assert result.outcome == "spawn_failed"
    assert "cannot execute '/nonexistent/cmd'" in (result.error or "")
    assert not [d for d in os.listdir(HOST.v2 or next(iter(HOST.v1.values())))
                if d.startswith(f"pc-{os.getpid()}-")]  # fmt: skip


# ---------------------------------------------------------------- probe


def _pure_v2(tmp_path: Path, own: str = "/") -> tuple[str, str]:
    root = tmp_path / "cg"
    (root / own.strip("/")).mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    leaf = root / own.strip("/")
    (leaf / "cgroup.controllers").write_text("cpu io memory pids\n")
    (leaf / "cgroup.kill").write_text("")
    (leaf / "cgroup.procs").write_text("")
    mountinfo = f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    return mountinfo, f"0::{own}\n"


def test_probe_of_a_pure_v2_host_with_delegated_controllers(tmp_path: Path) -> None:
    host = cgroups.probe(*_pure_v2(tmp_path, "/system.slice/punchclock.service"))
    assert host.v2 == str(tmp_path / "cg/system.slice/punchclock.service")
    assert host.kill_method == "cgroup.kill" and host.v1 == {}
    assert host.v2_controllers == {"cpu", "memory", "pids"}
    assert host.v2_needs_leaf  # the supervisor moves to .../supervisor before enabling them
    assert host.limit_problem(Limits(memory_max=1 << 28, cpu_max=0.5, tasks_max=10)) is None
    assert host.plan(Limits(memory_max=1)) == (True, ())  # the v2 directory alone
    assert "cgroup per run (kill: cgroup.kill; limits: cpu, memory, pids" in describe_isolation(
        host
    )


def test_probe_restarted_inside_its_own_leaf_uses_the_parent(tmp_path: Path) -> None:
    mountinfo, _ = _pure_v2(tmp_path, "/svc/supervisor")
    host = cgroups.probe(mountinfo, "0::/svc/supervisor\n")
    assert host.v2 == str(tmp_path / "cg/svc")


def test_probe_of_a_host_without_cgroups_says_why(tmp_path: Path) -> None:
    host = cgroups.probe("", "")
    assert not host.usable and host.kill_method is None
    assert describe_isolation(host).startswith(
        "process group + environment marker (no cgroup per run"
    )
    assert host.limit_problem(Limits(memory_max=1)) is not None


def test_a_limit_without_its_controller_is_refused_with_the_field() -> None:
    v2_only = Host(v2="/sys/fs/cgroup/unified", v2_kill=True)  # like this host, minus v1
    problem = v2_only.limit_problem(Limits(memory_max=1 << 20))
    assert problem is not None and problem.startswith("memory_max: this host cannot enforce it")
    assert "tasks_max:" in str(v2_only.limit_problem(Limits(tasks_max=3)))
    assert "cpu_max:" in str(v2_only.limit_problem(Limits(cpu_max=1.0)))
    assert v2_only.limit_problem(Limits()) is None


def test_parse_limits() -> None:
    limits = parse_limits(
        {"memory_max": "256M", "memory_swap_max": 0, "cpu_max": 1.5, "tasks_max": 64}
    )
    assert limits == Limits(256 << 20, 0, 1.5, 64)
    assert parse_limits({"memory_max": 4096}).memory_max == 4096
    assert parse_limits({"memory_max": "2G"}).memory_max == 2 << 30
    for spec, field in (
        ({"memory_max": "lots"}, "memory_max"),
        ({"memory_max": 0}, "memory_max"),
        ({"memory_swap_max": -1}, "memory_swap_max"),
        ({"cpu_max": "2"}, "cpu_max"),
        ({"cpu_max": 0}, "cpu_max"),
        ({"tasks_max": 0}, "tasks_max"),
        ({"tasks_max": True}, "tasks_max"),
    ):
        with pytest.raises(ValueError, match=f"^{field} must be"):
            parse_limits(spec)


# ---------------------------------------------------------------- registry


def _registry(tmp_path: Path, body: str, host: Host, mode: str = "handler"):  # type: ignore[no-untyped-def]
    from supervisor.registry import load_registry

    (tmp_path / "h.toml").write_text(body)
    return load_registry([str(tmp_path / "h.toml")], cgroup_host=lambda: host, cgroups_mode=mode)


def test_registry_cgroup_settings_fail_closed_naming_handler_and_field(tmp_path: Path) -> None:
    body = textwrap.dedent("""
        [handlers.plain]
        command = ["/bin/true"]
        [handlers.asks]
        command = ["/bin/true"]
        cgroup = true
        [handlers.limited]
        command = ["/bin/true"]
        memory_max = "256M"
        tasks_max = 32
        [handlers.bad]
        command = ["/bin/true"]
        cpu_max = "two"
        [handlers.contradicts]
        command = ["/bin/true"]
        cgroup = false
        tasks_max = 3
    """)
    kill_only = Host(v2="/sys/fs/cgroup/unified", v2_kill=True)  # no controllers at all
    reg = _registry(tmp_path, body, kill_only)
    assert reg.types == ["asks", "plain"]
    assert reg.handlers["asks"].cgroup and not reg.handlers["plain"].cgroup
    assert reg.cgroup_host == kill_only
    reasons = {r.type: (r.source, r.reason) for r in reg.rejected}
    assert reasons["limited"][0].endswith("h.toml[handlers.limited]")
    assert reasons["limited"][1].startswith("memory_max: this host cannot enforce it: no memory")
    assert reasons["bad"][1].startswith("cpu_max must be a number of cores")
    assert reasons["contradicts"][1] == "cgroup: false, but tasks_max needs a cgroup per run"

    nothing = cgroups.probe("", "")
    reg = _registry(tmp_path, body, nothing)
    assert reg.types == ["plain"]
    asks = next(r.reason for r in reg.rejected if r.type == "asks")
    assert asks.startswith("cgroup: this host cannot give a run its own cgroup: process group")

    reg = _registry(tmp_path, body, kill_only, mode="off")
    assert "cgroup: this supervisor runs with cgroups = off" in {r.reason for r in reg.rejected}

    reg = _registry(tmp_path, body, kill_only, mode="all")
    assert reg.handlers["plain"].cgroup  # every run gets one under `all`
    reg = _registry(tmp_path, body, nothing, mode="all")
    assert not reg.handlers["plain"].cgroup  # where the host can; not asked, so not rejected
    assert reg.cgroup_host is None


def test_user_with_a_cgroup_needs_a_root_supervisor(tmp_path: Path) -> None:
    from supervisor.registry import load_registry

    body = '[handlers.a]\ncommand = ["/bin/true"]\nuser = "nobody"\ncgroup = true\n'
    (tmp_path / "h.toml").write_text(body)
    kill_only = Host(v2="/sys/fs/cgroup/unified", v2_kill=True)
    common = {"switch_problem": lambda: None, "cgroup_host": lambda: kill_only}
    reg = load_registry([str(tmp_path / "h.toml")], euid=lambda: 998, **common)  # type: ignore[arg-type]
    assert reg.types == []
    assert reg.rejected[0].reason.startswith("user: with a cgroup per run, the supervisor must")
    reg = load_registry([str(tmp_path / "h.toml")], euid=lambda: 0, **common)  # type: ignore[arg-type]
    assert reg.types == ["a"] and reg.handlers["a"].cgroup


@needs_cgroups
def test_memory_swap_max_writes_the_v1_memsw_limit() -> None:
    if "memory" in HOST.v2_controllers or "memory" not in HOST.v1:
        pytest.skip("no v1 memory hierarchy")
    limits = Limits(memory_max=64 << 20, memory_swap_max=16 << 20)
    if HOST.limit_problem(limits) is not None:
        pytest.skip(str(HOST.limit_problem(limits)))
    group = ChildCgroup.create(HOST, "swaptest", limits)
    try:
        mem = group.v1["memory"]
        assert Path(mem, "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert Path(mem, "memory.memsw.limit_in_bytes").read_text().strip() == str(80 << 20)
    finally:
        assert group.remove() == []


def test_handlers_list_and_check_say_which_isolation_the_host_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from supervisor.cli import main

    (tmp_path / "h.toml").write_text('[handlers.a]\ncommand = ["/bin/true"]\ntasks_max = 9\n')
    main(["handlers", "list", "--handlers", str(tmp_path / "h.toml")])
    out = capsys.readouterr().out
    assert f"isolation {describe_isolation(HOST)}" in out
    if HOST.usable and "pids" in {*HOST.v1, *HOST.v2_controllers}:
        assert "cgroup=True  tasks_max=9" in out
    main(["check", "--handlers", str(tmp_path / "h.toml")])
    assert capsys.readouterr().out.startswith(f"isolation: {describe_isolation(HOST)}\n")


def test_prepare_moves_the_supervisor_to_a_leaf_and_enables_controllers(tmp_path: Path) -> None:
    # A pure-v2 delegated subtree, laid out in a directory (sysfs semantics are the kernel's:
    # here only which files prepare() writes, and in what order, are checked).
    mountinfo, membership = _pure_v2(tmp_path, "/svc")
    base = tmp_path / "cg/svc"
    (base / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (base / "cgroup.subtree_control").write_text("")
    host, warning = cgroups.prepare(cgroups.probe(mountinfo, membership))
    assert warning is None
    assert (base / "supervisor/cgroup.procs").read_text() == "0"  # "0": this process
    assert (base / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert host.v2 == str(base) and host.v2_controllers == {"cpu", "memory", "pids"}


@needs_cgroups
def test_prepare_removes_empty_run_cgroups_of_dead_supervisors_only() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    bases = [b for b in (HOST.v2, *HOST.v1.values()) if b is not None]
    stale = [os.path.join(b, f"{cgroups.PREFIX}{dead.pid}-0123456789abcdef") for b in bases]
    mine = os.path.join(bases[0], f"{cgroups.PREFIX}{os.getpid()}-0123456789abcdef")
    for d in [*stale, mine]:
        os.mkdir(d)
    try:
        cgroups.prepare(HOST)
        assert not any(os.path.exists(d) for d in stale)
        assert os.path.exists(mine)  # a live supervisor's run (possibly being created)
    finally:
        cgroups.sweep(HOST)
        with contextlib.suppress(OSError):
            os.rmdir(mine)
