"""The tests' and bench's plumbing: waits that name what they waited for, a child's JSON log,
and template copies that go away."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from supervisor.local.plumbing import (
    LoggedProcess,
    TemplateDatabase,
    WaitTimeout,
    wait_until,
    wait_until_blocking,
)

LINES = [
    json.dumps({"event": "run_started", "run_id": 1, "worker_id": "a"}),
    "Traceback (most recent call last): not JSON",
    json.dumps({"event": "run_started", "run_id": 2, "worker_id": "b"}),
    json.dumps({"event": "run_succeeded", "run_id": 1}),
    '{"event": "run_started", "run_id": 3, "wor',  # half written
]


def child(tmp_path: Path, code: str) -> LoggedProcess:
    argv = [sys.executable, "-I", "-S", "-c", code]
    return LoggedProcess.spawn("child", argv, tmp_path / "child.log", cwd=tmp_path)


async def test_a_wait_that_times_out_names_what_it_waited_for() -> None:
    calls = 0

    async def never() -> bool:
        nonlocal calls
        calls += 1
        return False

    with pytest.raises(AssertionError, match=r"timed out after 0.1s waiting for the moon"):
        await wait_until(never, 0.1, "the moon")
    assert calls > 1, "polled, not asked once"
    with pytest.raises(WaitTimeout, match=r"timed out after 0.05s waiting for the sun"):
        wait_until_blocking(lambda: 0, 0.05, "the sun")


async def test_a_wait_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "", "here"])
    assert await wait_until(lambda: next(values), 5, "a value") == "here"
    blocking = iter([[], [7]])
    assert wait_until_blocking(lambda: next(blocking), 5, "a value") == [7]


async def test_events_filter_by_name_and_fields(tmp_path: Path) -> None:
    proc = child(tmp_path, f"print({chr(10).join(LINES)!r})")
    assert proc.wait(10) == 0
    assert [e["run_id"] for e in proc.events("run_started")] == [1, 2]
    assert proc.events("run_started", worker_id="b") == [json.loads(LINES[2])]
    assert proc.events(run_id=1) == [json.loads(LINES[0]), json.loads(LINES[3])]
    assert proc.events("run_started", worker_id="c") == []
    assert len(proc.events()) == 3
    assert (await proc.wait_event("run_started", worker_id="b"))["run_id"] == 2


async def test_a_process_that_exits_while_waited_on_raises_with_its_log_tail(
    tmp_path: Path,
) -> None:
    proc = child(tmp_path, "print('the last words'); raise SystemExit(3)")
    with pytest.raises(AssertionError, match=r"exited waiting for ready") as caught:
        await proc.wait_event("ready", timeout=10)
    assert "the last words" in str(caught.value)
    assert proc.wait(1) == 3


async def test_a_wait_event_timeout_shows_the_tail_and_stop_ends_it(tmp_path: Path) -> None:
    code = "import time; print('still busy', flush=True); time.sleep(60)"
    proc = child(tmp_path, code)
    try:
        await wait_until(proc.log_text, 10, "the child's first line")
        with pytest.raises(WaitTimeout, match=r"waiting for child: ready \{'n': 1\}") as caught:
            await proc.wait_event("ready", timeout=0.1, n=1)
        assert "still busy" in str(caught.value)
        assert proc.running
    finally:
        assert proc.stop(10) == -signal.SIGTERM
    assert not proc.running


async def test_a_copy_is_migrated_and_dropped_afterwards(admin_dsn: str) -> None:
    template = TemplateDatabase(admin_dsn, prefix="pc_plumbing_")
    await template.create()
    try:
        async with template.copy("c") as dsn:
            name = urlsplit(dsn).path.lstrip("/")
            assert name.startswith("pc_plumbing_c_")
            conn = await asyncpg.connect(dsn)
            try:
                assert await conn.fetchval("SELECT to_regclass('jobs') IS NOT NULL")
            finally:
                await conn.close()
    finally:
        await template.drop()
    admin = await asyncpg.connect(admin_dsn)
    try:
        names = [template.name, name]
        left = await admin.fetch("SELECT datname FROM pg_database WHERE datname = ANY($1)", names)
    finally:
        await admin.close()
    assert left == []
