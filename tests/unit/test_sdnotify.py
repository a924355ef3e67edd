"""sd_notify messages over a real datagram socket, and the systemd units."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from supervisor.sdnotify import Notifier

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_ready_status_watchdog_stopping(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(5)
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "30000000"})
        assert n.enabled and n.watchdog_interval == 15.0
        assert n.ready("supervising echo")
        msg = server.recv(4096).decode().split("\n")
        assert msg[0] == "READY=1" and "STATUS=supervising echo" in msg
        assert n.watchdog()
        assert server.recv(4096) == b"WATCHDOG=1"
        assert n.status("running 1/8")
        assert server.recv(4096) == b"STATUS=running 1/8"
        assert n.stopping()
        assert server.recv(4096).startswith(b"STOPPING=1")
        n.close()


def test_disabled_without_socket() -> None:
    n = Notifier({})
    assert not n.enabled and not n.ready("x") and n.watchdog_interval is None


def test_watchdog_for_another_pid_is_ignored() -> None:
    n = Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert n.watchdog_interval is None


def test_units_have_the_required_settings() -> None:
    unit = (DEPLOY / "punchclock-supervisor.service").read_text()
    for line in (
        "Type=notify",
        "WatchdogSec=",
        "KillMode=mixed",
        "Restart=on-failure",
        "NoNewPrivileges=yes",
    ):
        assert line in unit
    stop = int(unit.split("TimeoutStopSec=")[1].split()[0])
    assert stop > 30 + 10, "TimeoutStopSec must exceed drain timeout + kill grace"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_units_verify(tmp_path: Path) -> None:
    for name in ("punchclock-supervisor", "punchclock-api", "punchclock-migrate"):
        text = (DEPLOY / f"{name}.service").read_text()
        # Point ExecStart at binaries that exist here; verify checks the rest of the unit.
        text = text.replace("/opt/punchclock/bin/punchclock", shutil.which("true") or "/bin/true")
        text = text.replace("EnvironmentFile=/etc/punchclock/punchclock.env", "")
        unit = tmp_path / f"{name}.service"
        unit.write_text(text)
    out = subprocess.run(
        ["systemd-analyze", "verify", *map(str, tmp_path.glob("*.service"))],
        capture_output=True,
        text=True,
        check=False,
    )
    problems = [ln for ln in out.stderr.splitlines() if "punchclock" in ln and "User" not in ln]
    assert not problems, out.stderr
