"""`punchclock api` without api_tokens (issue 62 items 1, 2, 8): it serves with an admin token
generated into this user's state directory (0600, never logged), reused on restart; a planted
token file stops it; the CLI reads the file for a loopback URL only."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from api import client
from supervisor.cli import main
from supervisor.core.store import Store

from ..api_support import api_client, api_process, http
from ..factory import count

JOB = {"name": "n1", "type": "echo", "cron": "* * * * *"}


def test_api_without_tokens_generates_one_and_requires_it(dsn: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"PUNCHCLOCK_STATE_DIR": str(state), "PUNCHCLOCK_API_TOKENS": ""}
    with api_process(dsn, "--listen", "127.0.0.1:0", env=env) as proc:
        url = proc.url()
        told = proc.wait_for_line(lambda e: e.get("event") == "api_token_generated")
        token_file = state / "admin-token"
        assert told["path"] == str(token_file)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(state.stat().st_mode) & 0o066 == 0
        token = token_file.read_text().strip()
        # Loopback is no trust boundary any more; nor is a forwarding header claiming it.
        assert http(url + "/v1/jobs", "POST", None, JOB)[0] == 401
        assert http(url + "/v1/jobs")[0] == 401
        assert http(url + "/v1/jobs", "POST", token, JOB)[0] == 201
        assert proc.stop() == 0
    assert token not in "".join(proc.lines)
    with api_process(dsn, "--listen", "127.0.0.1:0", env=env) as again:  # reused
        url = again.url()
        status, _, body = http(url + "/v1/jobs", token=token)
        assert status == 200 and [j["name"] for j in json.loads(body)["jobs"]] == ["n1"]
    assert token_file.read_text().strip() == token


@pytest.mark.parametrize("plant", ["other-owner", "mode-0644", "symlink"])
def test_api_refuses_a_planted_token_file(
    dsn: str, tmp_path: Path, store: Store, plant: str
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    planted, file = "planted-token-0123456789abcdef", state / "admin-token"
    if plant == "symlink":
        target = tmp_path / "target"
        target.write_text(planted)
        target.chmod(0o600)
        file.symlink_to(target)
    else:
        file.write_text(planted)
        file.chmod(0o644 if plant == "mode-0644" else 0o600)
        if plant == "other-owner":
            os.chown(file, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "api", "--database-url", dsn, "--listen",
         "127.0.0.1:0"],
        capture_output=True, text=True, timeout=30, check=False,
        env={**env, "PUNCHCLOCK_STATE_DIR": str(state)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert str(file) in result.stderr and planted not in result.stderr
    assert "refusing" in result.stderr or "group or others" in result.stderr
    assert "api_listening" not in result.stderr  # never served with the planted token


async def test_the_cli_falls_back_to_the_token_file_for_loopback_only(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("PUNCHCLOCK_STATE_DIR", str(state))
    monkeypatch.delenv("PUNCHCLOCK_API_TOKEN", raising=False)
    token = "generated-token-0123456789abcdef"
    state.mkdir(mode=0o700)
    (state / "admin-token").write_text(token + "\n")
    (state / "admin-token").chmod(0o600)
    async with api_client(store, api_tokens=(f"admin:local-admin:{token}",)) as api:
        url = str(api.make_url(""))
        argv = ["jobs", "create", "--name", "n1", "--type", "echo", "--cron", "* * * * *"]
        code = await _cli([*argv, "--api-url", url])
        assert code == 0, capsys.readouterr().err
        (state / "admin-token").chmod(0o644)  # exposed: refused, the CLI says why
        code = await _cli(["jobs", "list", "--api-url", url])
        assert code == 1 and "not using the local admin token" in capsys.readouterr().err
    assert await count(store, "jobs") == 1
    (state / "admin-token").chmod(0o600)
    assert client._local_token("http://127.0.0.1:8080") == token
    assert client._local_token("http://localhost:8080") == token
    assert client._local_token("https://punch.example") is None  # never sent elsewhere


async def _cli(argv: list[str]) -> int:
    return await asyncio.to_thread(main, argv)


def test_up_refuses_a_planted_token_file(dsn: str, tmp_path: Path) -> None:
    """`punchclock up` reads its admin token through the same checks: a planted one stops it
    before anything starts (the token would have been handed to the API)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    file = state / "admin-token"
    file.write_text("planted-token-0123456789abcdef")
    file.chmod(0o600)
    os.chown(file, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCHCLOCK_")}
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "up", "--database-url", dsn, "--no-demo"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**env, "PUNCHCLOCK_STATE_DIR": str(state)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"{file}: is owned by uid 65534" in result.stderr
    assert "punchclock is up" not in result.stdout
