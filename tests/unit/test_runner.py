"""Runner and keeper against real processes: no mocks, no sleeps used as synchronisation."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from supervisor.proc.keeper import Keeper
from supervisor.proc.keeperd import CHILD_ID_ENV
from supervisor.proc.runner import Child, ChildResult, ChildSpec
from supervisor.proc.watcher import Watcher

from ..helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SESSION_ENV = "PUNCHCLOCK_TEST_SESSION"
SESSION = uuid.uuid4().hex
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), SESSION_ENV: SESSION}

# Python children that report through files, so tests can wait on conditions.
TERM_RECORDER = """
import pathlib, signal, sys
signal.signal(signal.SIGTERM, lambda *a: pathlib.Path(sys.argv[1]).write_text("term"))
pathlib.Path(sys.argv[2]).write_text("ready")
while True:
    signal.pause()
"""
TERM_EXITS = """
import pathlib, signal, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
pathlib.Path(sys.argv[1]).write_text("ready")
while True:
    signal.pause()
"""
USR1_PROVES_LIFE = """
import pathlib, signal, sys
signal.signal(signal.SIGUSR1, lambda *a: pathlib.Path(sys.argv[1]).write_text("alive"))
pathlib.Path(sys.argv[2]).write_text("ready")
while True:
    signal.pause()
"""


def spec(argv: list[str], **kwargs: object) -> ChildSpec:
    return ChildSpec(argv=argv, env=dict(BASE_ENV), **kwargs)  # type: ignore[arg-type]


_watcher: Watcher | None = None  # the test's own (the `watcher` fixture), as an executor's


@pytest.fixture(autouse=True)
async def watcher() -> AsyncIterator[Watcher]:
    global _watcher
    _watcher = Watcher()
    yield _watcher
    _watcher.close()
    _watcher = None


async def spawn(child_spec: ChildSpec, keeper: Keeper | None = None) -> Child:
    """Child.spawn with the test's watcher."""
    assert _watcher is not None
    return await Child.spawn(child_spec, _watcher, keeper)


async def run(argv: list[str], **kwargs: object) -> ChildResult:
    child = await spawn(spec(argv, **kwargs))
    return await child.wait()


def pid_in(path: Path) -> int:
    return int(path.read_text().strip())


def is_dead(pid: int) -> bool:
    """Gone, or a zombie (here PID 1 does not reap orphans, so zombies may linger)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def processes_with(name: str, value: str | None = None) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get(SESSION_ENV) == SESSION and name in env and value in (None, env[name]):
            found.append(proc)
    return found


@pytest.fixture(autouse=True)
async def no_leftover_processes() -> AsyncIterator[None]:
    yield
    with contextlib.suppress(AssertionError):
        await wait_for(lambda: not processes_with(CHILD_ID_ENV), 3.0, "the children to exit")
    left = processes_with(CHILD_ID_ENV)
    for proc in left:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
        except (OSError, psutil.Error):
            pass
    assert not left, f"child processes left behind: {left}"


# ---------------------------------------------------------------- success and output


async def test_payload_is_echoed_through_stdin() -> None:
    result = await run(["cat"], stdin=b"hello payload\n")
    assert result.outcome == "succeeded"
    assert result.exit_code == 0 and result.signal is None and result.error is None
    assert result.stdout_tail == "hello payload\n" and result.stderr_tail == ""
    assert result.duration > 0


async def test_large_payload_round_trips_without_deadlock() -> None:
    payload = os.urandom(1 << 19).hex().encode()  # 1 MiB of text
    result = await run(["cat"], stdin=payload, output_limit=2 << 20)
    assert result.outcome == "succeeded"
    assert result.stdout_tail == payload.decode()


async def test_child_that_never_reads_stdin() -> None:
    result = await run(["true"], stdin=b"x" * (1 << 20))
    assert result.outcome == "succeeded"
    result = await run(["sh", "-c", "exec <&-; echo closed"], stdin=b"x" * (1 << 20))
    assert (result.outcome, result.stdout_tail) == ("succeeded", "closed\n")


async def test_tails_keep_only_the_last_bytes() -> None:
    code = (
        "import sys\nsys.stdout.write('a' * 100000 + 'END')\nsys.stderr.write('e' * 5000 + 'TAIL')"
    )
    result = await run([PY, "-c", code], output_limit=1000)
    assert result.outcome == "succeeded"
    assert len(result.stdout_tail) == 1000 and result.stdout_tail.endswith("aEND")
    assert len(result.stderr_tail) == 1000 and result.stderr_tail.endswith("eTAIL")


async def test_huge_output_keeps_memory_bounded() -> None:
    me = psutil.Process()
    before = me.memory_info().rss
    result = await run(["head", "-c", str(300 << 20), "/dev/zero"], output_limit=4096)
    assert result.outcome == "succeeded"
    # NUL cannot be stored in PostgreSQL text: replaced, and flagged.
    assert (result.stdout_tail, result.stdout_replaced) == ("\ufffd" * 4096, True)
    assert me.memory_info().rss - before < 50 << 20


async def test_tails_are_decoded_leniently() -> None:
    result = await run(["printf", r"ok\377ok"])
    assert (result.stdout_tail, result.stdout_replaced) == ("ok\ufffdok", True)
    result = await run(["sh", "-c", r"printf 'a\000b'; printf 'c\377\000' >&2"])
    assert (result.stdout_tail, result.stdout_replaced) == ("a\ufffdb", True)
    assert (result.stderr_tail, result.stderr_replaced) == ("c\ufffd\ufffd", True)
    # A cut through a two-byte character must not show up as a replacement character.
    result = await run([PY, "-c", "print('é' * 100, end='')"], output_limit=51)
    assert (result.stdout_tail, result.stdout_replaced) == ("é" * 25, False)


# ---------------------------------------------------------------- failures


async def test_failure_exit_code() -> None:
    result = await run(["sh", "-c", "echo oops >&2; exit 3"])
    assert result.outcome == "failed"
    assert (result.exit_code, result.signal) == (3, None)
    assert result.error == "exited with status 3"
    assert result.stderr_tail == "oops\n"


async def test_death_by_signal() -> None:
    result = await run(["sh", "-c", "kill -9 $$"])
    assert result.outcome == "failed"
    assert (result.exit_code, result.signal) == (None, 9)
    assert result.error == "killed by signal 9 (SIGKILL)"


async def test_spawn_failed_for_missing_file() -> None:
    child = await spawn(spec(["/nonexistent/punchclock-handler", "arg"]))
    assert child.pid is None
    await child.kill("no-op")  # nothing to kill; must not raise
    result = await child.wait()
    assert result.outcome == "spawn_failed"
    assert result.error == (
        "cannot execute '/nonexistent/punchclock-handler': [Errno 2] No such file or directory"
    )
    assert result.exit_code is None and result.cpu_seconds is None


async def test_start_many_starts_each_child_and_a_failed_spawn_fails_only_its_own() -> None:
    """A claim's children start together (spawns back to back, then the watching): each
    gets its own payload, output and result, and one that cannot start fails alone."""
    script = "import sys; d = sys.stdin.read(); print(d); sys.exit(len(d))"
    specs = [
        spec([PY, "-c", script], stdin=b"ab"),
        spec(["/nonexistent/punchclock-handler"]),
        spec([PY, "-c", script], stdin=b"abc"),
        spec(["true"]),
    ]
    assert _watcher is not None
    children = Child.start_many(specs, _watcher)
    ended: list[ChildResult] = []
    children[0].when_done(ended.append)
    results = await asyncio.gather(*(c.wait() for c in children))
    assert [(r.outcome, r.exit_code) for r in results] == [
        ("failed", 2),
        ("spawn_failed", None),
        ("failed", 3),
        ("succeeded", 0),
    ]
    assert (results[0].stdout_tail, results[2].stdout_tail) == ("ab\n", "abc\n")
    assert children[1].pid is None and all(c.pid for c in children if c is not children[1])
    assert ended == [results[0]]  # when_done: the same result, once
    late: list[ChildResult] = []
    children[3].when_done(late.append)  # already ended: at once
    assert late == [results[3]]


async def test_spawn_failed_for_non_executable_file(tmp_path: Path) -> None:
    script = tmp_path / "handler.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = await run([str(script)])
    assert result.outcome == "spawn_failed"
    assert result.error == f"cannot execute {str(script)!r}: [Errno 13] Permission denied"


async def test_bare_command_is_found_on_the_childs_path(tmp_path: Path) -> None:
    tool = tmp_path / "punchclock-tool"
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)
    env = {**BASE_ENV, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = await (await spawn(ChildSpec(["punchclock-tool"], env=env))).wait()
    assert (result.outcome, result.stdout_tail) == ("succeeded", "found\n")
    missing = await run(["punchclock-no-such-tool"])
    assert missing.outcome == "spawn_failed"
    assert missing.error == (
        "cannot execute 'punchclock-no-such-tool': [Errno 2] No such file or directory"
    )


async def test_child_gets_only_its_pipes_and_default_signals() -> None:
    # Python ignores SIGPIPE and SIGXFSZ; a handler must start with the defaults, no signal
    # blocked, and no descriptor of ours beyond stdin, stdout and stderr.
    script = "grep -E '^Sig(Ign|Blk)' /proc/self/status; ls /proc/self/fd"
    result = await run(["sh", "-c", script])
    assert result.outcome == "succeeded", result
    lines = result.stdout_tail.split()
    masks = dict(zip(lines[0:4:2], (int(v, 16) for v in lines[1:4:2]), strict=True))
    assert masks["SigBlk:"] == 0
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not masks["SigIgn:"] & (1 << (sig - 1)), sig
    fds = sorted(int(fd) for fd in lines[4:])
    assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # 4th: the fd ls reads the dir with


async def test_cwd_is_honoured(tmp_path: Path) -> None:
    result = await run(["pwd"], cwd=str(tmp_path))
    assert (result.outcome, result.stdout_tail) == ("succeeded", f"{tmp_path}\n")
    missing = await run(["pwd"], cwd=str(tmp_path / "gone"))
    assert missing.outcome == "spawn_failed"
    assert missing.error is not None
    assert missing.error.startswith(f"cannot change to directory {str(tmp_path / 'gone')!r}")


# ---------------------------------------------------------------- timeout and kill


async def test_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    script = (
        'trap "" TERM; '
        'sleep 1000 & echo $! > "$D/gc.tmp"; mv "$D/gc.tmp" "$D/gc"; '
        'setsid sleep 1000 & echo $! > "$D/esc.tmp"; mv "$D/esc.tmp" "$D/esc"; '
        '(setsid sleep 1000 & echo $! > "$D/orphan.tmp"; mv "$D/orphan.tmp" "$D/orphan"); '
        'touch "$D/ready"; wait'
    )
    child = await spawn(
        ChildSpec(
            ["sh", "-c", script],
            env={**BASE_ENV, "D": str(tmp_path)},
            timeout=2.0,
            kill_grace=0.3,
        )
    )
    result = await child.wait()
    assert (tmp_path / "ready").exists(), "the tree was not built before the timeout"
    assert result.outcome == "timed_out"
    assert result.error == "timed out after 2s"
    assert result.signal == signal.SIGKILL  # sh ignored TERM
    assert result.duration >= 2.0
    for name in ("gc", "esc", "orphan"):
        pid = pid_in(tmp_path / name)
        await wait_for(lambda pid=pid: is_dead(pid))  # type: ignore[misc]
    assert processes_with(CHILD_ID_ENV, child.child_id) == []


@pytest.mark.parametrize("timeout", [0.01, 0.3])
async def test_a_timeout_holds_whether_it_ends_before_or_after_the_output_watch(
    timeout: float,
) -> None:
    # Young children share one timer; a child's own timeout timer is armed when that one
    # fires (25 ms after the start), or at once when the timeout is shorter. Either way the
    # timeout counts from the start: never early, and not waited out.
    result = await run(["sleep", "30"], timeout=timeout, kill_grace=1.0)
    assert result.outcome == "timed_out"
    assert result.error == f"timed out after {timeout:g}s"
    assert result.signal == signal.SIGTERM
    assert timeout <= result.duration < 10


async def test_kill_without_grace_is_immediate(tmp_path: Path) -> None:
    child = await spawn(
        spec(["sh", "-c", f'trap "" TERM; touch {tmp_path}/ready; sleep 1000'], kill_grace=60)
    )
    await wait_for((tmp_path / "ready").exists)
    started = time.monotonic()
    await child.kill("lease lost", grace=0)
    assert time.monotonic() - started < 2.0
    result = await child.wait()
    assert result.outcome == "killed"
    assert result.error == "killed: lease lost"
    assert (result.signal, result.exit_code) == (signal.SIGKILL, None)


async def test_kill_with_grace_lets_the_child_exit_cleanly(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = await spawn(spec([PY, "-c", TERM_EXITS, str(ready)]))
    await wait_for(ready.exists)
    started = time.monotonic()
    await child.kill("shutting down", grace=30)
    assert time.monotonic() - started < 10
    result = await child.wait()
    assert result.outcome == "killed"
    assert result.error == "killed: shutting down"
    assert (result.exit_code, result.signal) == (0, None)


async def test_kill_escalates_after_the_grace(tmp_path: Path) -> None:
    term, ready = tmp_path / "term", tmp_path / "ready"
    child = await spawn(spec([PY, "-c", TERM_RECORDER, str(term), str(ready)]))
    await wait_for(ready.exists)
    started = time.monotonic()
    await child.kill("lease lost", grace=0.3)
    assert time.monotonic() - started >= 0.3
    assert term.exists()
    result = await child.wait()
    assert (result.outcome, result.signal) == ("killed", signal.SIGKILL)


async def test_kill_shortens_a_running_timeout_grace(tmp_path: Path) -> None:
    term = tmp_path / "term"
    # sh sets its trap within a millisecond or so, well before the timeout fires.
    script = f'trap "touch {term}" TERM; while :; do sleep 0.05; done'
    child = await spawn(spec(["sh", "-c", script], timeout=0.5, kill_grace=60))
    await wait_for(term.exists)  # the timeout fired and sent TERM; 60 s of grace remain
    started = time.monotonic()
    await asyncio.gather(child.kill("hurry", grace=0), child.kill("again", grace=0), child.wait())
    assert time.monotonic() - started < 5
    result = await child.wait()
    assert result.outcome == "timed_out"  # the first reason stands
    assert result.error == "timed out after 0.5s"
    assert result.signal == signal.SIGKILL
    assert await child.wait() is result


async def test_kill_after_exit_keeps_the_outcome() -> None:
    child = await spawn(spec(["true"]))
    result = await child.wait()
    await child.kill("too late", grace=0)
    assert result.outcome == "succeeded"
    assert (await child.wait()).outcome == "succeeded"


async def test_descendants_do_not_outlive_a_normal_exit(tmp_path: Path) -> None:
    script = (
        'sleep 1000 & echo $! > "$D/gc"; '
        '(trap "" TERM; exec sleep 1000) & echo $! > "$D/stubborn"; '
        'setsid sleep 1000 & echo $! > "$D/esc"'
    )
    child = await spawn(
        ChildSpec(["sh", "-c", script], env={**BASE_ENV, "D": str(tmp_path)}, kill_grace=0.2)
    )
    result = await child.wait()
    assert result.outcome == "succeeded"
    for name in ("gc", "stubborn", "esc"):
        pid = pid_in(tmp_path / name)
        await wait_for(lambda pid=pid: is_dead(pid))  # type: ignore[misc]


async def test_a_descendant_writing_on_after_exit_does_not_hold_the_loop(tmp_path: Path) -> None:
    # The pipes of a child that exits are drained at its exit; a descendant that writes on
    # as fast as we read (`yes`) must not keep that drain going: it is killed with the
    # group's leftovers while the loop stays free (this test's timer fires).
    script = 'yes & echo $! > "$D/yes"; sleep 0.05'
    child = await spawn(
        ChildSpec(["sh", "-c", script], env={**BASE_ENV, "D": str(tmp_path)}, kill_grace=0.2)
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    try:
        async with asyncio.timeout(20):
            result = await child.wait()
    finally:
        ticker.cancel()
    assert result.outcome == "succeeded"
    assert set(result.stdout_tail) == {"y", "\n"}
    assert ticks > 0
    await wait_for(lambda: is_dead(pid_in(tmp_path / "yes")))


# ---------------------------------------------------------------- resource usage and scale


async def test_cpu_seconds_of_a_busy_child() -> None:
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass"
    result = await run([PY, "-c", code])
    assert result.outcome == "succeeded"
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0.25


async def test_peak_rss_grows_with_allocation() -> None:
    small = await run(["true"])
    # More than this process's own high-water mark: a long suite's pytest grows past 300 MiB.
    size = max(300 << 20, _own_peak_rss() + (64 << 20))
    big = await run([PY, "-c", f"x = b'x' * {size}"])
    # exec carries this test process's RSS high-water mark into the child's ru_maxrss, so a
    # small child's figure says nothing about it and is reported as unknown.
    assert small.peak_rss_bytes is None
    assert big.peak_rss_bytes is not None and big.peak_rss_bytes >= size


def _own_peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM in /proc/self/status")


def _open_fds() -> int:
    gc.collect()  # earlier tests' closed loops close their epoll sets when collected
    return len(os.listdir("/proc/self/fd"))


async def test_many_concurrent_children_leak_no_fds() -> None:
    await (await spawn(spec(["true"]))).wait()  # the loop's own epoll set of pidfds
    before = _open_fds()
    children = await asyncio.gather(*(spawn(spec(["true"])) for _ in range(200)))
    results = await asyncio.gather(*(c.wait() for c in children))
    assert [r.outcome for r in results] == ["succeeded"] * 200
    assert _open_fds() == before


def test_a_closed_event_loop_leaves_no_fd_behind() -> None:
    async def one() -> str:
        watcher = Watcher()  # not closed: its epoll set goes with the loop
        return (await (await Child.spawn(spec(["true"]), watcher)).wait()).outcome

    before = _open_fds()
    for _ in range(5):
        assert asyncio.run(one()) == "succeeded"
    assert _open_fds() == before


# ---------------------------------------------------------------- keeper

FAKE_SUPERVISOR = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from supervisor.proc.keeper import Keeper
from supervisor.proc.keeperd import CHILD_ID_ENV
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher

async def main():
    keeper = await Keeper.start(sys.argv[2])
    env = {"PATH": "/usr/bin:/bin", "D": sys.argv[3], "PUNCHCLOCK_TEST_SESSION": sys.argv[4]}
    script = (
        'sleep 1000 & echo $! > "$D/gc.tmp"; mv "$D/gc.tmp" "$D/gc"; '
        'setsid sleep 1000 & echo $! > "$D/esc.tmp"; mv "$D/esc.tmp" "$D/esc"; '
        'env -i /bin/sleep 1000 & echo $! > "$D/noenv.tmp"; mv "$D/noenv.tmp" "$D/noenv"; '
        'exec sleep 1000'
    )
    child = await Child.spawn(ChildSpec(["sh", "-c", script], env=env), Watcher(), keeper)
    await keeper.sync()  # registrations are coalesced for 10 ms; `noenv` needs its pgid
    print(child.pid, keeper.pid, flush=True)
    await child.wait()

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def fake_process(
    script: str, *args: str
) -> AsyncIterator[tuple[subprocess.Popen[str], list[str]]]:
    """Run `script` (argv: ROOT, a keeper instance id, *args); yield it and the words of the
    first line it prints. It is SIGKILLed on the way out."""
    fake = subprocess.Popen([PY, "-c", script, str(ROOT), uuid.uuid4().hex, *args],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert fake.stdout is not None
        async with asyncio.timeout(20):
            line = await asyncio.to_thread(fake.stdout.readline)
        yield fake, line.split()
    finally:
        fake.kill()
        fake.wait()
        if fake.stdout is not None:
            fake.stdout.close()


@contextlib.asynccontextmanager
async def fake_supervisor(
    script: str, *args: str
) -> AsyncIterator[tuple[subprocess.Popen[str], int, int]]:
    """Run `script` (it prints "<child pid> <keeper pid>"); yield (process, child, keeper)."""
    async with fake_process(script, *args) as (fake, words):
        child_pid, keeper_pid = map(int, words)
        yield fake, child_pid, keeper_pid


async def test_keeper_kills_children_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    async with fake_supervisor(FAKE_SUPERVISOR, str(tmp_path), SESSION) as (
        fake,
        child_pid,
        keeper_pid,
    ):
        # gc stays in the group; esc left it (found by its environment); noenv cleared its
        # environment but stays in the group (found by the registered pgid).
        names = ("gc", "esc", "noenv")
        await wait_for(lambda: all((tmp_path / name).exists() for name in names))
        tree = [child_pid, *(pid_in(tmp_path / name) for name in names)]
        # Ctrl-C, TERM or HUP must not take the keeper down before the supervisor.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(keeper_pid, sig)
        assert not any(is_dead(pid) for pid in [*tree, keeper_pid])
        fake.kill()
        fake.wait()
        await wait_for(lambda: all(is_dead(pid) for pid in [*tree, keeper_pid]), timeout=5)


UNFLUSHED_SUPERVISOR = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import supervisor.proc.keeper as keeper_module
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher

keeper_module._COALESCE_SECONDS = 3600.0  # the registration below is never written

async def main():
    keeper = await keeper_module.Keeper.start(sys.argv[2])
    env = {"PATH": "/usr/bin:/bin", "PUNCHCLOCK_TEST_SESSION": sys.argv[3]}
    child = await Child.spawn(ChildSpec(["sleep", "1000"], env=env), Watcher(), keeper)
    print(child.pid, keeper.pid, flush=True)
    await child.wait()

asyncio.run(main())
"""


async def test_keeper_kills_a_child_whose_registration_was_still_queued() -> None:
    # The supervisor dies inside the coalescing window: the keeper never heard of the child's
    # group, and still kills it by the instance marker in its environment.
    async with fake_supervisor(UNFLUSHED_SUPERVISOR, SESSION) as (fake, child_pid, keeper_pid):
        assert not is_dead(child_pid)
        fake.kill()
        fake.wait()
        await wait_for(lambda: is_dead(child_pid) and is_dead(keeper_pid), timeout=5)


async def test_keeper_close_leaves_children_alive(tmp_path: Path) -> None:
    alive, ready = tmp_path / "alive", tmp_path / "ready"
    keeper = await Keeper.start(uuid.uuid4().hex)
    keeper_proc = psutil.Process(keeper.pid)
    child = await spawn(spec([PY, "-c", USR1_PROVES_LIFE, str(alive), str(ready)]), keeper)
    try:
        await wait_for(ready.exists)
        await keeper.close()
        await keeper.close()  # idempotent
        assert not keeper_proc.is_running()
        assert child.pid is not None
        os.kill(child.pid, signal.SIGUSR1)
        await wait_for(alive.exists)
    finally:
        await child.kill("test over", grace=0)
    assert (await child.wait()).outcome == "killed"


FROZEN_SUPERVISOR = """
import asyncio, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from supervisor.proc.keeper import Keeper
from supervisor.proc.keeperd import CHILD_ID_ENV
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher

async def main():
    keeper = await Keeper.start(sys.argv[2])
    env = {"PATH": "/usr/bin:/bin", "D": sys.argv[3], "PUNCHCLOCK_TEST_SESSION": sys.argv[4]}
    script = 'setsid sleep 1000 & echo $! > "$D/esc.tmp"; mv "$D/esc.tmp" "$D/esc"; exec sleep 1000'
    now = time.monotonic()
    watcher = Watcher()
    doomed = await Child.spawn(ChildSpec(["sh", "-c", script], env=env, kill_by=now + 1.0), watcher, keeper)
    renewed = await Child.spawn(ChildSpec(["sleep", "1000"], env=env, kill_by=now + 1.0), watcher, keeper)
    renewed.set_kill_by(now + 3600)  # as a lease renewal does
    await keeper.sync()
    print(doomed.pid, renewed.pid, now + 1.0, keeper.pid, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen: no event loop, no self-fencing

asyncio.run(main())
"""


async def test_keeper_kills_a_frozen_supervisors_child_at_its_deadline(tmp_path: Path) -> None:
    async with fake_process(FROZEN_SUPERVISOR, str(tmp_path), SESSION) as (fake, words):
        doomed, renewed, keeper = int(words[0]), int(words[1]), int(words[3])
        kill_by = float(words[2])
        await wait_for((tmp_path / "esc").exists)
        escaped = pid_in(tmp_path / "esc")
        await wait_for(lambda: psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED)
        # The deadline passes with the supervisor frozen: the child's group and its escaped
        # descendant die then, not when the supervisor wakes up.
        await wait_for(lambda: is_dead(doomed) and is_dead(escaped), timeout=5)
        assert time.monotonic() >= kill_by
        # A renewed deadline holds: that child lives on, as does the frozen supervisor.
        assert not is_dead(renewed) and not is_dead(keeper)
        assert psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED
    await wait_for(lambda: is_dead(renewed) and is_dead(keeper), timeout=5)


FROZEN_BEFORE_REGISTERING = """
import asyncio, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import supervisor.proc.keeper as keeper_module
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher

keeper_module._COALESCE_SECONDS = 3600.0  # the group registration is never written

async def main():
    keeper = await keeper_module.Keeper.start(sys.argv[2])
    env = {"PATH": "/usr/bin:/bin", "PUNCHCLOCK_TEST_SESSION": sys.argv[3]}
    kill_by = time.monotonic() + 1.0
    child = await Child.spawn(ChildSpec(["sleep", "1000"], env=env, kill_by=kill_by), Watcher(), keeper)
    print(child.pid, kill_by, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen inside the coalescing window

asyncio.run(main())
"""


async def test_keeper_kills_at_the_deadline_a_child_whose_group_it_never_heard_of() -> None:
    # The soak's finding: a supervisor frozen within 10 ms of a spawn left the keeper with
    # no deadline for that child, which then overlapped the run's next execution.
    async with fake_process(FROZEN_BEFORE_REGISTERING, SESSION) as (fake, words):
        child_pid, kill_by = int(words[0]), float(words[1])
        await wait_for(lambda: psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED)
        await wait_for(lambda: is_dead(child_pid), timeout=5)
        assert time.monotonic() >= kill_by
        assert psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED


FROZEN_AFTER_A_BATCH = """
import asyncio, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import supervisor.proc.keeper as keeper_module
from supervisor.proc.runner import Child, ChildSpec
from supervisor.proc.watcher import Watcher

keeper_module._COALESCE_SECONDS = 3600.0  # only announcements and sync() are written

async def main():
    keeper = await keeper_module.Keeper.start(sys.argv[2])
    env = {"PATH": "/usr/bin:/bin", "PUNCHCLOCK_TEST_SESSION": sys.argv[3]}
    kill_by = time.monotonic() + 1.0
    # One claim whose child was registered and renewed, its batch withdrawn...
    keeper.announce_batch("b0b0b0b0b0b0", kill_by)
    spec = ChildSpec(["sleep", "1000"], env=env, kill_by=kill_by, announced="b0b0b0b0b0b0")
    watcher = Watcher()
    renewed = await Child.spawn(spec, watcher, keeper)
    renewed.set_kill_by(kill_by + 3600)
    keeper.withdraw("b0b0b0b0b0b0")
    await keeper.sync()
    # ...and one whose two children the keeper knows only by the batch's announcement.
    keeper.announce_batch("a1a1a1a1a1a1", kill_by)
    spec = ChildSpec(["sleep", "1000"], env=env, kill_by=kill_by, announced="a1a1a1a1a1a1")
    doomed = [await Child.spawn(spec, watcher, keeper) for _ in range(2)]
    print(renewed.pid, *(c.pid for c in doomed), kill_by, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen before naming their groups

asyncio.run(main())
"""


async def test_keeper_kills_a_claims_children_by_its_batch_announcement() -> None:
    # One announcement covers a claim's children (Executor.start): a supervisor frozen
    # before it names their groups still has them killed at the deadline, and a withdrawn
    # batch leaves a renewed child alone.
    async with fake_process(FROZEN_AFTER_A_BATCH, SESSION) as (fake, words):
        renewed, doomed, kill_by = int(words[0]), [int(w) for w in words[1:3]], float(words[3])
        await wait_for(lambda: psutil.Process(fake.pid).status() == psutil.STATUS_STOPPED)
        await wait_for(lambda: all(is_dead(pid) for pid in doomed), timeout=5)
        assert time.monotonic() >= kill_by
        assert not is_dead(renewed)
    await wait_for(lambda: is_dead(renewed), timeout=5)
