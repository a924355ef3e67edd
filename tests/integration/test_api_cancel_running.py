"""Cancel of a running run with a real supervisor process: the API revokes the lease, the
supervisor's next renewal fails, it kills the child, and the run stays cancelled."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from aiohttp.test_utils import TestClient

from supervisor.core.store import Store

from ..factory import status
from ..helpers import wait_for

Client = TestClient[Any, Any]
HANDLER = """#!/bin/sh
echo $$ > "{pidfile}"
exec sleep 60
"""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_cancel_running_run_kills_the_child(
    api: Client, store: Store, dsn: str, tmp_path: Path
) -> None:
    handlers = tmp_path / "handlers"
    handlers.mkdir()
    pidfile = tmp_path / "child.pid"
    script = handlers / "sleeper.sh"
    script.write_text(HANDLER.format(pidfile=pidfile))
    script.chmod(0o755)
    job = await (
        await api.post(
            "/v1/jobs", json={"name": "long", "type": "sleeper", "run_at": "2030-01-01T00:00:00Z"}
        )
    ).json()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor",
            "supervise",
            "--database-url",
            dsn,
            "--handlers",
            str(handlers),
            "--lease-ttl",
            "2",
            "--concurrency",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run = await (await api.post(f"/v1/jobs/{job['id']}/trigger")).json()

        async def started() -> bool:
            return bool(
                await status(store, run["id"]) == "running"
                and pidfile.exists()
                and pidfile.read_text().strip()
            )

        await wait_for(started, what="the supervisor to start the handler")
        child = int(pidfile.read_text())
        assert _alive(child)
        resp = await api.post(f"/v1/runs/{run['id']}/cancel")
        assert resp.status == 200, await resp.text()
        cancelled = await resp.json()
        assert cancelled["status"] == "cancelled"
        # The lease is gone; worker_id names the attempt's worker (issue 63).
        assert cancelled["worker_id"] == cancelled["history"][-1]["worker_id"] is not None
        assert [a["outcome"] for a in cancelled["history"]] == ["cancelled"]

        async def child_gone() -> bool:
            return not _alive(child)

        t0 = time.monotonic()
        await wait_for(child_gone, timeout=15, what="the supervisor to kill the cancelled child")
        assert time.monotonic() - t0 < 10, "killed at the next renewal (every lease_ttl/3)"

        # The supervisor's own result for the killed child is a late result: not recorded.
        async def settled() -> bool:
            workers = await (await api.get("/v1/workers")).json()
            return bool(workers["workers"]) and workers["workers"][0]["running"] == 0

        await wait_for(settled, what="the supervisor to report no running child")
        final = await (await api.get(f"/v1/runs/{run['id']}")).json()
        assert final["status"] == "cancelled"
        assert [a["outcome"] for a in final["history"]] == ["cancelled"]
        assert final["history"][0]["error"] == "cancelled by the API"
    finally:
        _stop(proc)
    assert proc.returncode == 0
