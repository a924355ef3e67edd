"""`punchclock jobs|runs ...` against the API (in-process, the CLI in a thread): tables on
a terminal, JSON with --json, exit status 0 ok / 1 failed / 2 invalid input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from supervisor.cli import main
from supervisor.core.store import Store

from ..api_support import ADMIN, READER, TOKENS, api_client
from ..factory import insert_runs, sql
from ..helpers import job


class Cli:
    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = url
        self.capsys = capsys

    async def __call__(self, *argv: str, url: bool = True) -> tuple[int, str, str]:
        # The API always wants a token: the admin one unless the test gives its own.
        args = list(argv) + (["--api-url", self.url] if url else [])
        if url and "--api-token" not in argv:
            args += ["--api-token", ADMIN]
        self.capsys.readouterr()
        code = await asyncio.to_thread(main, args)
        out, err = self.capsys.readouterr()
        return code, out, err

    async def json(self, *argv: str) -> Any:
        code, out, err = await self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


async def test_jobs_commands(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    async with api_client(store) as api:
        cli = Cli(str(api.make_url("")), capsys)
        code, out, err = await cli(
            "jobs",
            "create",
            "--name",
            "backup",
            "--type",
            "echo",
            "--cron",
            "0 3 * * *",
            "--timezone",
            "Europe/Berlin",
            "--payload",
            '{"bucket": "b"}',
            "--max-attempts",
            "5",
            "--retry-base",
            "0",
            "--retry-cap",
            "30",
        )
        assert code == 0, err
        assert "job 1  backup" in out and "Europe/Berlin" in out and "next runs" in out
        assert "warning       type: no live worker" in out
        created = await cli.json("jobs", "show", "backup")
        assert created["payload"] == {"bucket": "b"} and created["max_attempts"] == 5
        assert created["retry"] == {"base_seconds": 0.0, "cap_seconds": 30.0}
        for i in range(3):
            assert (
                await cli(
                    "jobs",
                    "create",
                    "--name",
                    f"etl-{i}",
                    "--type",
                    "sql",
                    "--run-at",
                    "2031-01-01T00:00:00Z",
                )
            )[0] == 0
        code, out, _ = await cli("jobs", "list", "--limit", "2")
        assert code == 0 and out.splitlines()[0].split() == [
            "ID",
            "NAME",
            "TYPE",
            "SCHEDULE",
            "ZONE",
            "PAUSED",
        ]
        assert "more: --cursor" in out
        everything = await cli.json("jobs", "list", "--limit", "2", "--all")
        assert [j["name"] for j in everything["jobs"]] == ["backup", "etl-0", "etl-1", "etl-2"]
        assert [j["name"] for j in (await cli.json("jobs", "list", "--type", "sql"))["jobs"]] == [
            "etl-0",
            "etl-1",
            "etl-2",
        ]
        updated = await cli.json("jobs", "update", "backup", "--cron", "30 4 * * *", "--paused")
        assert updated["cron"] == "30 4 * * *" and updated["paused"] is True
        assert (await cli.json("jobs", "resume", "1"))["paused"] is False
        assert (await cli.json("jobs", "pause", "backup"))["paused"] is True
        paused = await cli.json("jobs", "pause", "backup", "--reason", "disk full")
        assert paused["pause_reason"] == "disk full"
        code, out, _ = await cli("jobs", "show", "backup")
        assert code == 0 and "paused        yes: disk full" in out
        code, _, err = await cli("jobs", "update", "backup")
        assert code == 2 and "nothing to change" in err
        code, _, err = await cli(
            "jobs", "create", "--name", "bad", "--type", "echo", "--cron", "61 * * * *"
        )
        assert code == 2 and "cron: minute field '61'" in err
        code, _, err = await cli(
            "jobs",
            "create",
            "--name",
            "bad",
            "--type",
            "echo",
            "--cron",
            "* * * * *",
            "--payload",
            "{nope",
        )
        assert code == 2 and "--payload: not valid JSON" in err
        code, _, err = await cli(
            "jobs", "create", "--name", "backup", "--type", "echo", "--cron", "* * * * *"
        )
        assert code == 1 and "409" in err and "already exists" in err
        code, _, err = await cli("jobs", "show", "nope")
        assert code == 1 and "no job named 'nope'" in err
        code, _, err = await cli("jobs", "show", "424242")
        assert code == 1 and "404" in err
        run = await cli.json(
            "jobs", "trigger", "backup", "--payload", '{"x": 1}', "--idempotency-key", "k1"
        )
        again = await cli.json(
            "jobs", "trigger", "backup", "--payload", '{"x": 1}', "--idempotency-key", "k1"
        )
        assert (
            run["id"] == again["id"] and run["payload"] == {"x": 1} and run["trigger"] == "manual"
        )
        code, out, _ = await cli("jobs", "delete", "etl-2")
        assert code == 0 and out.startswith("deleted job 4; cancelled 1 unstarted run(s)")


async def test_runs_commands(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    row = await store.insert_job(job("nightly"))
    dead = await insert_runs(store, row.id, 3, status="dead")
    [waiting] = await insert_runs(store, row.id, 1, status="scheduled", start_s=100)
    async with api_client(store) as api:
        cli = Cli(str(api.make_url("")), capsys)
        code, out, err = await cli("runs", "list", "--job", "nightly")
        assert code == 0, err
        assert out.splitlines()[0].split()[:4] == ["ID", "JOB", "SCHEDULED", "(UTC)"]
        assert len(out.splitlines()) == 5
        # History by default; --upcoming is the plan ahead, soonest first (issue 12).
        planned = await insert_runs(store, row.id, 2, status="scheduled", start_s=-3600)
        page = await cli.json("runs", "list", "--job", "nightly")
        assert [r["id"] for r in page["runs"]] == [*dead, waiting]
        page = await cli.json("runs", "list", "--upcoming", "--limit", "1", "--all")
        assert [r["id"] for r in page["runs"]] == planned[::-1]
        page = await cli.json(
            "runs", "list", "--job", str(row.id), "--status", "dead", "--limit", "2", "--all"
        )
        assert [r["id"] for r in page["runs"]] == dead
        code, out, _ = await cli("runs", "show", str(dead[0]))
        assert code == 0 and f"run {dead[0]}  job nightly" in out and "dead" in out
        code, out, _ = await cli("runs", "requeue", str(dead[0]))
        assert code == 0 and out.strip() == "requeued 1 run(s)"
        code, _, err = await cli("runs", "requeue", str(dead[0]))
        assert code == 1 and "409" in err
        code, _, err = await cli("runs", "requeue")
        assert code == 2 and "--bulk" in err
        code, out, _ = await cli("runs", "requeue", "--bulk", "--job", "nightly")
        assert code == 0 and out.strip() == "requeued 2 run(s)"
        cancelled = await cli.json("runs", "cancel", str(waiting))
        assert cancelled["status"] == "cancelled"
        code, _, err = await cli("runs", "cancel", str(waiting))
        assert code == 1 and "409 Conflict" in err
        code, _, err = await cli("runs", "list", "--scheduled-after", "yesterday")
        assert code == 2 and "scheduled_after" in err


async def test_token_and_url_from_the_environment(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PUNCHCLOCK_STATE_DIR", str(tmp_path))  # no generated token file here
    async with api_client(store, api_tokens=TOKENS) as api:
        cli = Cli(str(api.make_url("")), capsys)
        monkeypatch.setenv("PUNCHCLOCK_API_URL", str(api.make_url("")))
        code, _, err = await cli("jobs", "list", url=False)
        assert code == 1 and "401" in err
        assert "--api-token" in err and "PUNCHCLOCK_API_TOKEN" in err, "how to give one"
        monkeypatch.setenv("PUNCHCLOCK_API_TOKEN", READER)
        assert (await cli("jobs", "list", url=False))[0] == 0
        code, _, err = await cli("jobs", "pause", "1", url=False)
        assert code == 1 and "403" in err
        code, _, err = await cli("jobs", "list", "--api-token", ADMIN, url=False)
        assert code == 0, err
    code, _, err = await cli("jobs", "list", "--api-url", "http://127.0.0.1:9", url=False)
    assert code == 1 and "cannot reach the API" in err


async def test_groups_commands(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    async with api_client(store) as api:
        cli = Cli(str(api.make_url("")), capsys)
        code, out, _ = await cli("groups", "create", "db-heavy", "--max-running", "2")
        assert code == 0 and "db-heavy" in out
        made = await cli.json(
            "jobs", "create", "--name", "etl", "--type", "echo", "--cron", "0 3 * * *",
            "--concurrency-group", "db-heavy", "--max-concurrent", "1",
        )  # fmt: skip
        assert (made["concurrency_group"], made["max_concurrent"]) == ("db-heavy", 1)
        code, out, _ = await cli("jobs", "show", "etl")
        assert "concurrency   at most 1 at once, in group db-heavy" in out
        assert (await cli.json("groups", "update", "db-heavy", "--max-running", "4"))[
            "max_running"
        ] == 4
        code, _, err = await cli("groups", "delete", "db-heavy")
        assert code == 1 and "has 1 job(s)" in err
        left = await cli.json("jobs", "update", "etl", "--concurrency-group", "")
        assert left["concurrency_group"] is None
        code, out, _ = await cli("groups", "delete", "db-heavy")
        assert code == 0 and "deleted concurrency group db-heavy" in out
        assert (await cli.json("groups", "list"))["groups"] == []
        code, _, err = await cli("groups", "create", "bad", "--max-running", "0")
        assert code == 2 and "max_running: must be between 1 and 10000" in err


async def test_a_handlers_escapes_reach_the_terminal_as_text(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handler's stderr with OSC 52 (write the operator's clipboard) and a screen clear:
    `runs show` prints them as \\x1b, not as escapes the terminal acts on."""
    row = await store.insert_job(job("hostile"))
    [dead] = await insert_runs(store, row.id, 1, status="dead")
    hostile = "boom\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m"
    await sql(
        store,
        "INSERT INTO run_attempts (run_id, attempt, worker_id, lease_token, finished_at,"
        " outcome, error, stderr_tail) VALUES ($1, 1, 'w', 1, now(), 'failed', $2, $2)",
        dead,
        hostile,
    )
    async with api_client(store) as api:
        code, out, err = await Cli(str(api.make_url("")), capsys)("runs", "show", str(dead))
    assert code == 0, err
    assert "boom\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x9b31m" in out
    assert not any(c in out for c in "\x1b\x07\x9b"), "no raw control character is printed"
