"""The `punchclock` command's offline parts: schedule preview and exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli import main


def test_preview_json_shows_utc_and_local_across_dst(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "schedule", "preview", "30 2 * * *", "--tz", "Europe/Berlin",
            "--after", "2027-03-27T12:00:00Z", "--count", "2", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    items = json.loads(capsys.readouterr().out)
    # 02:30 does not exist on 2027-03-28 in Berlin: it runs at the jump, 03:00 CEST = 01:00Z,
    # marked as the dashboard's preview marks it.
    shifted = "02:30 does not exist this night (spring forward): runs when the clock jumps to"
    assert items == [
        {"utc": "2027-03-28T01:00:00Z", "local": "2027-03-28T03:00:00+02:00",
         "rule": "shifted", "note": f"{shifted} 03:00 (DST rule 1)"},
        {"utc": "2027-03-29T00:30:00Z", "local": "2027-03-29T02:30:00+02:00"},
    ]  # fmt: skip


def test_preview_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["schedule", "preview", "@hourly", "--after", "2026-01-01T00:00:00Z", "--count", "1"])
        == 0
    )
    assert capsys.readouterr().out.split() == ["2026-01-01T01:00:00Z", "2026-01-01T01:00:00+00:00"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["61 * * * *"], "minute"),
        (["* * * *"], "expected 5 fields"),
        (["* * * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
        (["* * * * *", "--after", "2026-01-01T00:00:00"], "offset"),
        (["* * * * *", "--count", "0"], "--count"),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "schedule", "preview", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_usage_errors_exit_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "migrate"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2 and "no database" in out.stderr


def test_check_warns_about_an_insecure_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator's risky choices reach `punchclock check` as warnings, not as problems:
    inline secrets, tokens without names, every token admin, a wildcard listen without
    api_allowed_hosts, an unset session_secret."""
    for name in list(os.environ):
        if name.startswith("PUNCHCLOCK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PUNCHCLOCK_API_TOKENS", "admin:0123456789abcdef0123")
    monkeypatch.setenv("PUNCHCLOCK_API_LISTEN", "0.0.0.0:8443")
    (tmp_path / "h.toml").write_text('[handlers.a]\ncommand = ["/bin/true"]\n')
    config = tmp_path / "none.toml"
    config.write_text("")
    assert main(["check", "--config", str(config), "--handlers", str(tmp_path / "h.toml")]) == 0
    warnings = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning: ")]
    said = "\n".join(warnings)
    for needle in ("api_tokens_file", "ROLE:NAME:TOKEN", "every token is admin",
                   "api_allowed_hosts", "session_secret"):  # fmt: skip
        assert needle in said, f"no warning mentions {needle}:\n{said}"
    assert "0123456789abcdef0123" not in said, "a warning never shows a secret"
