"""The notification egress policy without a network: which URLs are refused at write time
(address literals in every spelling, authority tricks), the connect-time guard's checks, the
Retry-After and retry rules, and Slack escaping (issue 62: SSRF, retry rules, mrkdwn)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from supervisor import outbound
from supervisor.core import webhooks
from supervisor.core.egress import Destinations, coarse_error, config_warnings, url_problem
from supervisor.core.errors import InvalidSpec
from supervisor.core.events import check_ping_url, check_url

PRIVATE_OK = Destinations((), allow_private=True)
HINT = "set notify_allow_private = true to allow private destinations"

# The issue's channel URLs (each was accepted), and the odd spellings of the same places.
REFUSED = [
    ("http://127.0.0.1:5432/", "127.0.0.1 is a loopback address"),
    ("http://[::1]:8080/", "::1 is a loopback address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
    ("http://10.0.0.1/", "10.0.0.1 is a private address"),
    ("http://0.0.0.0:22/", "0.0.0.0 is an unspecified address"),
    ("http://2130706433/", "127.0.0.1 is a loopback address"),
    ("http://[::ffff:127.0.0.1]/", "(127.0.0.1) is an IPv4-mapped address"),
    ("http://0x7f.1/", "127.0.0.1 is a loopback address"),
    ("http://127.1/", "127.0.0.1 is a loopback address"),
    ("http://017700000001/", "127.0.0.1 is a loopback address"),
    ("http://169.254.1.1/", "169.254.1.1 is a link-local address"),
    ("http://[fe80::1]/", "fe80::1 is a link-local address"),
    ("http://[fd12:3456::1]/", "fd12:3456::1 is a unique-local address"),
    ("http://192.168.1.10:8080/", "192.168.1.10 is a private address"),
    ("http://172.16.0.1/", "172.16.0.1 is a private address"),
    ("http://100.64.0.1/", "100.64.0.1 is a shared (carrier-grade NAT) address"),
    ("http://[2002:7f00:1::]/", "(127.0.0.1) is a loopback address"),  # 6to4
    ("http://[64:ff9b::a9fe:a9fe]/", "is a cloud metadata address"),  # NAT64
    ("http://localhost:9/", "localhost is a loopback name"),
    ("http://api.localhost/", "api.localhost is a loopback name"),
    ("http://good.example\\@evil.example/", "plain ASCII without backslashes"),
    ("http://exämple.com/", "plain ASCII without backslashes"),
    ("http://user:pw@hooks.example.com/", "must not carry a user name or password"),
    ("http://hooks.example.com@10.0.0.1/", "must not carry a user name or password"),
    ("http://%31%32%37.0.0.1/", "is not a valid host name"),
    ("http://[fe80::1%25eth0]/", "a zone (%) is not allowed"),
    ("http://hooks.example.com/\x00", "control characters"),
    ("ftp://hooks.example.com/", "must be an http or https URL"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_refused_urls_name_the_field_and_the_problem(url: str, why: str) -> None:
    errors: list[InvalidSpec] = []
    assert check_url(errors, url, ()) is None
    [error] = errors
    assert error.field == "url" and why in error.message, error.message


def test_the_issue_message_is_word_for_word() -> None:
    errors: list[InvalidSpec] = []
    check_url(errors, "http://169.254.1.2/", ())
    assert str(errors[0]) == f"url: 169.254.1.2 is a link-local address; {HINT}"


def test_names_and_public_addresses_are_accepted() -> None:
    for url in ("https://hooks.example.com/x?t=1", "https://8.8.8.8/", "http://[2606:4700::1]/"):
        errors: list[InvalidSpec] = []
        assert check_url(errors, url, ()) == url and errors == []


def test_allow_private_admits_private_addresses_but_never_metadata() -> None:
    for url in ("http://127.0.0.1:5432/", "http://[::1]:8080/", "http://10.0.0.1/"):
        assert url_problem(url, PRIVATE_OK)[1] is None
    for url in ("http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://[::ffff:a9fe:a9fe]/"):
        assert "cloud metadata" in (url_problem(url, PRIVATE_OK)[1] or "")
    # A legacy spelling of an allowed address is still refused: aiohttp would not send it.
    assert "canonical" in (url_problem("http://2130706433/", PRIVATE_OK)[1] or "")


def test_ping_urls_and_the_allow_list() -> None:
    errors: list[InvalidSpec] = []
    assert check_ping_url(errors, "http://127.0.0.1:9/", ()) is None
    assert check_ping_url(errors, "http://169.254.169.254/", ()) is None
    assert [e.field for e in errors] == ["ping_url", "ping_url"]
    errors = []
    assert check_url(errors, "https://evil.test/", Destinations(("hc-ping.com",), True)) is None
    assert errors[0].message == "host 'evil.test' is not in notify_allowed_hosts"


@pytest.mark.parametrize(
    ("addr", "refused"),
    [("127.0.0.1", True), ("::1", True), ("169.254.169.254", True), ("10.1.2.3", True),
     ("::ffff:127.0.0.1", True), ("0.0.0.0", True), ("93.184.216.34", False)],
)  # fmt: skip
def test_the_socket_guard_refuses_before_connecting(addr: str, refused: bool) -> None:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    make = outbound.socket_factory(allow_private=False)
    info: Any = (family, socket.SOCK_STREAM, 6, "", (addr, 80))
    if refused:
        with pytest.raises(outbound.RefusedDestination, match="refused: "):
            make(info)
    else:
        make(info).close()


async def test_the_resolver_drops_refused_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that resolves (or rebinds) inward: nothing is left, the request fails."""
    answers = {
        "inward.example": ["127.0.0.1", "10.0.0.5"],
        "mixed.example": ["10.0.0.5", "93.184.216.34"],
    }

    class Fake:
        async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[Any]:
            return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0,
                     "flags": 0} for a in answers[host]]  # fmt: skip

        async def close(self) -> None:
            pass

    monkeypatch.setattr(outbound, "DefaultResolver", Fake)
    r = outbound.GuardedResolver(allow_private=False)
    with pytest.raises(outbound.RefusedDestination, match=r"127\.0\.0\.1 is a loopback"):
        await r.resolve("inward.example", 80)
    assert [a["host"] for a in await r.resolve("mixed.example", 80)] == ["93.184.216.34"]
    allowed = outbound.GuardedResolver(allow_private=True)
    assert len(await allowed.resolve("inward.example", 80)) == 2


def test_retry_after_seconds_dates_and_caps() -> None:
    now = 1_000_000.0
    assert outbound.retry_after("120", now) == 120.0
    assert outbound.retry_after("99999999", now) == outbound.RETRY_AFTER_CAP
    when = datetime.fromtimestamp(now, UTC) + timedelta(seconds=90)
    assert outbound.retry_after(format_datetime(when, usegmt=True), now) == pytest.approx(90)
    assert outbound.retry_after("soon", now) is None and outbound.retry_after(None, now) is None


@pytest.mark.parametrize(
    ("status", "attempt", "action"),
    [(204, 1, "delivered"), (410, 1, "gone"), (429, 1, "retry"), (502, 1, "retry"),
     (503, 1, "retry"), (504, 1, "retry"), (500, 9, "retry"), (None, 9, "retry"),
     (408, 5, "retry"), (404, 1, "retry"), (404, 3, "give_up"), (400, 3, "give_up"),
     (302, 3, "give_up")],
)  # fmt: skip
def test_standard_webhooks_retry_rules(status: int | None, attempt: int, action: str) -> None:
    assert outbound.judge(status, {"Retry-After": "30"}, attempt).action == action
    if status in (429, 503):
        assert outbound.judge(status, {"Retry-After": "30"}, attempt).wait == 30.0


def test_slack_text_escapes_a_handlers_mentions_and_links() -> None:
    stderr = "<!channel> <http://evil|click> & *bold* ```"
    data = {"job": {"name": "nightly"}, "run": {"id": 7, "attempt": 3, "error": stderr}}
    text = webhooks.slack_text("run_dead", data)
    assert "<!channel>" not in text and "<http://evil|click>" not in text
    assert "&lt;!channel&gt; &lt;http://evil|click&gt; &amp; *bold*" in text
    assert text.endswith("```") and text.count("```") == 2  # quoted, not closable from inside
    reason = webhooks.slack_text("job_auto_paused", {"reason": "<!here> paused"})
    assert "<!here>" not in reason and "&lt;!here&gt;" in reason


def test_a_read_token_sees_coarse_outcomes() -> None:
    assert coarse_error(503, "HTTP 503") == "HTTP 5xx"
    assert coarse_error(None, "ClientConnectorError: Cannot connect to 10.0.0.7:22") == (
        "connection error"
    )
    assert coarse_error(None, "timed out after 10 s") == "timed out"
    assert coarse_error(None, "refused: 127.0.0.1 is a loopback address") is not None
    assert coarse_error(204, None) is None


def test_check_warns_when_private_destinations_are_allowed() -> None:
    class Cfg:
        notify_allow_private = True

    assert "notify_allow_private" in config_warnings(Cfg())[0]
    Cfg.notify_allow_private = False
    assert config_warnings(Cfg()) == []


def test_the_heartbeat_url_is_checked_with_the_setting() -> None:
    from supervisor.core.config import ConfigError, load

    env = {"PUNCHCLOCK_HEARTBEAT_PING_URL": "http://127.0.0.1:9/beat"}
    with pytest.raises(ConfigError, match=r"heartbeat_ping_url: 127\.0\.0\.1 is a loopback"):
        load(config_file=None, environ={**env, "PUNCHCLOCK_CONFIG": "/dev/null"})
    allowed = {**env, "PUNCHCLOCK_NOTIFY_ALLOW_PRIVATE": "true", "PUNCHCLOCK_CONFIG": "/dev/null"}
    cfg = load(environ=allowed)
    assert cfg.notify_allow_private is True and cfg.heartbeat_ping_url == env[next(iter(env))]
    with pytest.raises(ConfigError, match="notify_allow_private: expected true or false"):
        load(environ={"PUNCHCLOCK_NOTIFY_ALLOW_PRIVATE": "maybe", "PUNCHCLOCK_CONFIG": "/dev/null"})
    meta = {**allowed, "PUNCHCLOCK_HEARTBEAT_PING_URL": "http://169.254.169.254/"}
    with pytest.raises(ConfigError, match="cloud metadata"):
        load(environ=meta)
