"""`punchclock up` with a database URL: supervisor + API come up, demo jobs run, Ctrl-C stops all;
a killed `up` leaves nothing running. Its terminal keeps the banner (the access log goes to a
file), its CLI line works from a clone, SIGHUP reaches the supervisor, a child killed by a
signal is named so, and a second `up` on a data directory says at once who holds it."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import termios
import time
from datetime import datetime
from pathlib import Path

import psutil

from supervisor.core.store import Store
from supervisor.local.up import _hold_data_dir

from ..api_support import http
from ..factory import count
from ..helpers import wait_for
from .procs import ROOT, free_port


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    try:
        status, _, raw = http(url, token=token)
    except OSError:  # not listening yet
        return 0, {}
    return status, json.loads(raw) if status < 400 else {}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    env["PUNCHCLOCK_STATE_DIR"] = str(tmp_path / "state")  # where the admin token lands
    # As from a fresh clone: the venv's bin is not on PATH.
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def _start_up(dsn: str, tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    env = _env(tmp_path)
    with (tmp_path / "up.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "supervisor", "up", "--database-url", dsn,
             "--api-listen", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip


async def test_up_runs_everything_and_ctrl_c_stops_it(
    dsn: str, store: Store, tmp_path: Path
) -> None:
    port = free_port()
    proc = _start_up(dsn, tmp_path, port)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_for(lambda: _get(f"{base}/healthz")[0] == 200, 30, "the API to answer")
        token_file = tmp_path / "state" / "admin-token"
        token = token_file.read_text().strip()
        status, body = _get(f"{base}/v1/jobs", token)
        assert status == 200
        names = {j["name"] for j in body["jobs"]}  # type: ignore[attr-defined]
        assert {"demo-every-10-seconds", "demo-berlin-nightly", "demo-api-health"} <= names
        assert _get(f"{base}/v1/jobs")[0] == 401, "tokens are required"

        async def a_demo_run_succeeded() -> bool:
            return await count(store, "runs", "status = 'succeeded'") > 0

        await wait_for(a_demo_run_succeeded, 30, "a demo run to succeed")
        # The supervisor starts once the API listens: the demo's health check, due at the
        # next minute, found no API once (exit 75, a failed first attempt in the demo).
        listening = next(
            json.loads(line)["ts"]
            for line in (tmp_path / "up.log").read_text().splitlines()
            if '"api_listening"' in line
        )
        sup = next(c for c in psutil.Process(proc.pid).children() if "supervise" in c.cmdline())
        sup_env = sup.environ()
        assert _started_at(sup.pid) >= datetime.fromisoformat(listening).timestamp() - 0.2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, (tmp_path / "up.log").read_text()[-3000:]
        text = (tmp_path / "up.log").read_text()
        assert "punchclock is up" in text and "supervisor_drained" in text
        # The banner names the file; neither it nor a log line holds the token, and the
        # supervisor was not given it (its environment reaches handlers' parents).
        assert str(token_file) in text and token not in text
        assert "PUNCHCLOCK_API_TOKENS" not in sup_env
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _started_at(pid: int) -> float:
    """When a process started, on the wall clock to a clock tick (psutil's create_time is
    only as precise as /proc/stat's boot time, a whole second)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_killed_up_leaves_nothing_running(dsn: str, tmp_path: Path) -> None:
    port = free_port()
    proc = _start_up(dsn, tmp_path, port)
    try:
        await wait_for(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 30, "the API")
        log = tmp_path / "up.log"
        await wait_for(lambda: "supervisor_started" in log.read_text(), 30, "the supervisor")
        children = psutil.Process(proc.pid).children()
        commands = [" ".join(c.cmdline()) for c in children]
        assert any(c.endswith(" api") for c in commands), commands
        assert any(" supervise " in c for c in commands), commands
        proc.kill()  # no drain by `up` itself: its watchdog must stop the children
        proc.wait()
        await wait_for(lambda: all(_gone(c) for c in children), 30, "up's children to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "supervisor_drained" in log.read_text(), "the supervisor drained (SIGTERM), not killed"


def test_up_on_a_database_it_cannot_reach_says_so(dsn: str) -> None:
    missing = dsn.rsplit("/", 1)[0] + "/punchclock_no_such_database"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "up", "--database-url", missing],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "cannot connect to the database" in line and "punchclock_no_such_database" in line


def _banner_line(log: Path, start: str) -> str:
    return next(
        line.strip() for line in log.read_text().splitlines() if line.strip().startswith(start)
    )


async def test_up_keeps_its_terminal_readable_and_prints_a_cli_line_that_works(
    dsn: str, tmp_path: Path
) -> None:
    """The access log goes to a file the banner names (the terminal had a line per request,
    and the banner scrolled away); the banner's `runs list` line runs as printed with the
    venv's bin off PATH; /readyz's body ends in a newline (`curl` left the prompt after it)."""
    port = free_port()
    proc = _start_up(dsn, tmp_path, port)
    log = tmp_path / "up.log"
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_for(lambda: "punchclock is up" in log.read_text(), 30, "the banner")
        _, _, raw = http(f"{base}/readyz")
        assert raw.endswith(b"}\n"), raw
        access = Path(_banner_line(log, "access log").split(None, 2)[2])
        assert access == tmp_path / "state" / "api-access.log"
        assert "stored in " + str(tmp_path / "state" / "admin-token") in log.read_text()

        def logged_readyz() -> bool:
            return access.exists() and '"path": "/readyz"' in access.read_text()

        await wait_for(logged_readyz, 10, "the access log line")
        command = shlex.split(_banner_line(log, str(ROOT / ".venv")))
        assert command[1:] == ["runs", "list", "--api-url", base], command
        out = subprocess.run(
            command, env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False
        )
        assert out.returncode == 0 and out.stdout.startswith(("ID", "no runs")), out
        await wait_for(lambda: access.read_text().count('"path": "/v1/runs"') >= 1, 10, "/v1/runs")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text()[-3000:]
        assert "http_request" not in log.read_text(), "no access line on the terminal"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_up_passes_sighup_to_the_supervisor_and_names_a_killing_signal(
    dsn: str, tmp_path: Path
) -> None:
    """SIGHUP killed `up` (and its message said "status -1" for a signalled child): now the
    supervisor gets it and reloads, `up` stays; a supervisor killed by SIGKILL is named so."""
    port = free_port()
    proc = _start_up(dsn, tmp_path, port)
    log = tmp_path / "up.log"
    try:
        await wait_for(lambda: "supervisor_started" in log.read_text(), 30, "the supervisor")
        proc.send_signal(signal.SIGHUP)
        await wait_for(lambda: '"event": "reloaded"' in log.read_text(), 30, "the reload")
        assert proc.poll() is None, log.read_text()[-3000:]
        sup = next(c for c in psutil.Process(proc.pid).children() if "supervise" in c.cmdline())
        sup.kill()
        assert proc.wait(30) == 1
        assert "punchclock up: supervisor was killed by SIGKILL" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_second_up_on_a_data_directory_says_at_once_who_holds_it(tmp_path: Path) -> None:
    """It waited silently for up to 60 s on the server's lock: now it names the pid."""
    data_dir = tmp_path / "pg"
    held = _hold_data_dir(data_dir)  # as the first `up` holds it, from this process
    try:
        out = subprocess.run(
            [sys.executable, "-m", "supervisor", "up", "--data-dir", str(data_dir)],
            cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=20,
            check=False,
        )  # fmt: skip
    finally:
        os.close(held)
    assert out.returncode == 1, out
    assert f"another punchclock up (pid {os.getpid()}) is running on {data_dir}" in out.stderr
    assert "Traceback" not in out.stderr and not data_dir.exists(), "no server was started"


async def test_up_stops_when_its_terminal_hangs_up(dsn: str, tmp_path: Path) -> None:
    """SIGHUP from a closed terminal still stops `up` (drained, exit 0); SIGHUP is only passed
    on to the supervisor while the terminal is there."""
    port = free_port()
    master, slave = os.openpty()

    def own_terminal() -> None:  # in the child: a session whose controlling terminal is slave
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "up", "--database-url", dsn,
             "--api-listen", f"127.0.0.1:{port}"],
            cwd=ROOT, env=_env(tmp_path), stdin=slave, stdout=out, stderr=out,
            pass_fds=(slave,), preexec_fn=own_terminal,  # noqa: PLW1509 (single-threaded here)
        )  # fmt: skip
    os.close(slave)
    try:
        await wait_for(lambda: "supervisor_started" in log.read_text(), 30, "the supervisor")
        os.close(master)  # the terminal hangs up: the kernel sends SIGHUP to `up`
        master = -1
        assert proc.wait(30) == 0, log.read_text()[-3000:]
        assert "supervisor_drained" in log.read_text()
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
