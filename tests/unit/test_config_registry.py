"""Configuration loading and the handler registry: every bad input is named."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from supervisor.core.config import ConfigError, load, parse_listen, settings_table
from supervisor.registry import load_registry


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('lease_ttl = 12.5\nconcurrency = 3\nhandlers = ["/a"]\n')
    cfg = load(config_file=f, environ={"PUNCHCLOCK_CONCURRENCY": "5"}, overrides={"worker_id": "w"})
    assert (cfg.lease_ttl, cfg.concurrency, cfg.handlers, cfg.worker_id) == (12.5, 5, ("/a",), "w")
    assert load(environ={}).lease_ttl == 30.0


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("bogus = 1\n", {}, "unknown keys: bogus"),
        ("lease_ttl = 'x'\n", {}, "lease_ttl"),
        ("lease_ttl = -1\n", {}, "lease_ttl: must be greater than 0"),
        ("", {"PUNCHCLOCK_CONCURRENCY": "many"}, "PUNCHCLOCK_CONCURRENCY: concurrency"),
        ("", {"PUNCHCLOCK_METRICS_LISTEN": "nope"}, "metrics_listen: expected"),
        ("", {"PUNCHCLOCK_API_TOKENS": "root:short"}, "api_tokens"),
        ("log_level = 'loud'\n", {}, "log_level"),
        ("claim_ahead = -0.1\n", {}, "claim_ahead: must not be negative"),
        ("lease_ttl = 2\nclaim_ahead = 1\n", {}, "claim_ahead: must be less than half"),
        ("lease_ttl = \n", {}, "config file"),
        ("heartbeat_ping_url = 'ftp://x'\n", {}, "heartbeat_ping_url: must be an http"),
        (
            "heartbeat_ping_url = 'https://evil.test/p'\nnotify_allowed_hosts = ['hc-ping.com']\n",
            {},
            "heartbeat_ping_url: host 'evil.test' is not in notify_allowed_hosts",
        ),
    ],
)
def test_invalid_settings_are_named(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(config_file=f, environ=env)


def test_settings_table_lists_every_setting() -> None:
    table = settings_table()
    assert "`PUNCHCLOCK_DATABASE_URL`" in table and "`lease_ttl`" in table


def _exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_directory_handlers_and_rejections(tmp_path: Path) -> None:
    _exe(tmp_path / "backup.sh")
    (tmp_path / "notexec.sh").write_text("#!/bin/sh\n")
    (tmp_path / "README.md").write_text("docs")
    reg = load_registry([str(tmp_path)])
    assert reg.types == ["backup"]
    assert [(r.type, "not executable" in r.reason) for r in reg.rejected] == [("notexec", True)]


def test_toml_handlers_and_every_rejection_reason(tmp_path: Path) -> None:
    tool = _exe(tmp_path / "tool")
    (tmp_path / "h.toml").write_text(
        f"""
[handlers.ok]
command = ["{tool}", "--flag"]
timeout_seconds = 5
env = {{ A = "1" }}
[handlers.rel]
command = ["./tool"]
[handlers.sh]
shell = "echo hi"
[handlers.both]
command = ["{tool}"]
shell = "echo"
[handlers.missing]
command = ["/nonexistent/tool"]
[handlers.unknown]
shell = "x"
colour = "red"
[handlers.badtimeout]
shell = "x"
timeout_seconds = -1
"""
    )
    reg = load_registry([str(tmp_path / "h.toml")])
    assert reg.types == ["ok", "rel", "sh"]
    assert reg.handlers["ok"].argv == (str(tool), "--flag")
    assert reg.handlers["rel"].argv == (str(tool),)
    assert reg.handlers["sh"].argv == ("/bin/sh", "-c", "echo hi")
    reasons = {r.type: r.reason for r in reg.rejected}
    assert "exactly one of command" in reasons["both"]
    assert "does not exist" in reasons["missing"]
    assert "unknown keys: colour" in reasons["unknown"]
    assert "timeout_seconds" in reasons["badtimeout"]


def test_duplicate_type_and_missing_path(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    _exe(d / "x.sh")
    (tmp_path / "h.toml").write_text('[handlers.x]\nshell = "true"\n')
    reg = load_registry([str(d), str(tmp_path / "h.toml"), str(tmp_path / "nope")])
    assert reg.types == ["x"]
    reasons = [r.reason for r in reg.rejected]
    assert any("already defined" in r for r in reasons)
    assert any("no such file" in r for r in reasons)
    assert os.access(d / "x.sh", os.X_OK)


def test_handler_types_are_names_not_paths(tmp_path: Path) -> None:
    """Issue 11: a type named '..' was accepted. TOML keys and file names share one rule."""
    (tmp_path / "h.toml").write_text(
        '[handlers."."]\nshell = "true"\n[handlers.".."]\nshell = "true"\n'
        '[handlers.".hidden"]\nshell = "true"\n[handlers."a..b"]\nshell = "true"\n'
        '[handlers."x\\n"]\nshell = "true"\n'
    )
    d = tmp_path / "d"
    d.mkdir()
    _exe(d / "...sh")  # stem "..", but a dot file: skipped like every hidden file
    _exe(d / "ok.v2.sh")
    reg = load_registry([str(tmp_path / "h.toml"), str(d)])
    assert reg.types == ["a..b", "ok.v2"]
    reasons = {r.type: r.reason for r in reg.rejected}
    assert set(reasons) == {".", "..", ".hidden", "x\n"}
    assert all("must not start with a dot" in r for r in reasons.values()), reasons


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (":9464", ("127.0.0.1", 9464)),
        ("9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("localhost:9464", ("localhost", 9464)),
    ],
)
def test_metrics_listen_without_a_host_binds_loopback(
    value: str, expected: tuple[str, int]
) -> None:
    """/metrics is unauthenticated: a bare port means loopback; any other host is explicit."""
    cfg = load(environ={"PUNCHCLOCK_METRICS_LISTEN": value})
    assert parse_listen(cfg.metrics_listen) == expected
