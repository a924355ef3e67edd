"""What the CLI prints for a person (issue 63): colour on a terminal only, payloads as JSON,
durations with a unit, the skip reason, a 401 that says how to give a token, no traceback on
a closed pipe, help on every flag, and the dashboard's DST marks in `schedule preview`."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from api import client_format as fmt
from api.client import _out
from api.client_colour import paint
from api.client_http import _problem
from api.ui.preview import preview
from supervisor.cli import build_parser, main

ESC = "\x1b"


def _run(**kw: Any) -> dict[str, Any]:
    run = {
        "id": 7, "job_id": 2, "job_name": "nightly", "scheduled_at": "2027-01-01T03:00:00Z",
        "scheduled_at_local": "2027-01-01T04:00:00+01:00", "status": "succeeded",
        "trigger": "schedule", "attempts": 1, "max_attempts": 3, "worker_id": "h:1",
        "started_at": "2027-01-01T03:00:00Z", "finished_at": "2027-01-01T03:00:01.5Z",
        "duration_seconds": 1.5, "error": None, "skip_reason": None,
    }  # fmt: skip
    return {**run, **kw}


def _job(**kw: Any) -> dict[str, Any]:
    job = {
        "id": 4, "name": "morning-report", "type": "echo", "cron": "0 6 * * MON-FRI",
        "timezone": "Europe/Berlin", "paused": False, "max_attempts": 3,
        "retry": {"base_seconds": 10.0, "cap_seconds": 3600.0}, "timeout_seconds": 3600.0,
        "catchup": "latest", "catchup_window_seconds": 300.0, "overlap": "skip",
        "payload": {"to": "ops", "days": [1, 2]}, "payload_withheld": False,
    }  # fmt: skip
    return {**job, **kw}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _printed(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, data: Any, render: Any) -> str:
    monkeypatch.setattr(sys, "stdout", stream)
    assert _out(argparse.Namespace(json=False), data, render) == 0
    return stream.getvalue()


def test_statuses_are_coloured_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    page = {"runs": [_run(), _run(id=8, status="dead", error="exit 3")], "next_cursor": None}
    on = _printed(monkeypatch, Tty(), page, fmt.runs_table)
    assert f"{ESC}[32msucceeded{ESC}[0m" in on and f"{ESC}[31mdead{ESC}[0m" in on
    plain = _printed(monkeypatch, io.StringIO(), page, fmt.runs_table)  # a pipe, a file
    assert ESC not in plain and "\x1a" not in plain
    # Colour takes no room: the columns line up as without it.
    assert [len(x) for x in plain.splitlines()] == [
        len(x.replace(f"{ESC}[32m", "").replace(f"{ESC}[31m", "").replace(f"{ESC}[1m", "")
            .replace(f"{ESC}[0m", ""))
        for x in on.splitlines()
    ]  # fmt: skip
    monkeypatch.setenv("NO_COLOR", "1")
    assert ESC not in _printed(monkeypatch, Tty(), page, fmt.runs_table)


def test_text_from_the_api_cannot_forge_a_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler's error may hold what paint() writes: without its nonce, it stays text."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    forged = "\x1a0123456789abcdefred:x\x1a0123456789abcdef:"  # paint()'s form, a guessed nonce
    assert len(paint("x", "red")) == len(forged)
    out = _printed(monkeypatch, Tty(), _run(status="failed", error=forged), fmt.run_card)
    assert f"{ESC}[31merror{ESC}[0m" in out  # ours
    assert "\\x1a0123456789abcdefred:x" in out and out.count(ESC) == 4  # status, label: 2 each


def test_payloads_are_json_and_durations_have_a_unit() -> None:
    card = fmt.job_card(_job())
    assert 'payload       {"to": "ops", "days": [1, 2]}' in card and "{'to'" not in card
    assert "retry 10 s up to 1 h" in card and "timeout       1 h" in card
    assert "within 5 min" in card
    assert "withheld" in fmt.job_card(_job(payload=None, payload_withheld=True))
    run = fmt.run_card(_run(payload={"x": "é"}, history=[]))
    assert "duration      1.5 s" in run and 'payload       {"x": "é"}' in run
    assert [fmt.duration(s) for s in (0.0123, 1.5, 59.0, 125, 3600, 5400, None)] == [
        "12 ms", "1.5 s", "59 s", "2 min 5 s", "1 h", "1 h 30 min", None,
    ]  # fmt: skip


def test_runs_list_says_why_a_run_was_skipped() -> None:
    page = {"runs": [_run(status="skipped", skip_reason="overlap", duration_seconds=None,
                          started_at=None, finished_at=None)], "next_cursor": None}  # fmt: skip
    table = fmt.runs_table(page)
    assert "DETAIL" in table and "overlap: the job's previous run was still running" in table
    assert "skipped       missed: not run within its catch-up window" in fmt.run_card(
        _run(status="skipped", skip_reason="missed")
    )


def test_a_401_says_how_to_give_a_token() -> None:
    body = json.dumps({"title": "Unauthorized", "detail": "a bearer token is required"})
    message = str(_problem(401, body.encode()))
    assert "--api-token" in message and "PUNCHCLOCK_API_TOKEN" in message
    assert "--api-token" not in str(_problem(404, b"{}"))


def test_a_closed_pipe_ends_quietly() -> None:
    """`punchclock runs list | head -1` printed a traceback or "Broken pipe" once head left."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        out = subprocess.run(
            [sys.executable, "-m", "supervisor", "schedule", "preview", "* * * * *", "--count",
             "1000"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert out.stderr == "" and out.returncode == 1


def test_every_flag_and_argument_has_help() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help:
                missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(build_parser(), ["punchclock"])
    assert not missing, missing


def test_schedule_preview_marks_dst_as_the_dashboard_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from datetime import UTC, datetime

    # Berlin: 02:30 is skipped in spring (shifted to 03:00) and occurs twice in autumn.
    for after, rule in (("2027-03-27T12:00:00Z", "shifted"), ("2027-10-30T12:00:00Z",
                                                               "not repeated")):  # fmt: skip
        argv = ["schedule", "preview", "30 2 * * *", "--tz", "Europe/Berlin", "--after", after]
        assert main([*argv, "--count", "2"]) == 0
        first, second = capsys.readouterr().out.splitlines()
        start = datetime.fromisoformat(after.replace("Z", "+00:00")).astimezone(UTC)
        dashboard = preview("30 2 * * *", "Europe/Berlin", start, 2)
        assert dashboard[0].rule == rule
        assert first.split()[:2] == [dashboard[0].utc, dashboard[0].local]
        assert first.endswith(f"{rule}: {dashboard[0].note}") and "DST rule" in first
        assert second.split() == [dashboard[1].utc, dashboard[1].local], "unmarked: as before"
