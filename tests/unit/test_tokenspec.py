"""api_tokens entries: named (ROLE:NAME:TOKEN) and legacy (ROLE:TOKEN, named by a digest
prefix), and every problem named with the field and the entry, never the secret."""

from __future__ import annotations

import hashlib

import pytest

from api.auth import Caller, Tokens
from supervisor.core.config import ConfigError, load
from supervisor.core.tokenspec import parse_tokens

SECRET = "s3cret-0123456789abcdef"


def test_named_and_legacy_entries() -> None:
    specs = parse_tokens([f"operator:ops-1:{SECRET}", f"admin:{SECRET}x"])
    assert (specs[0].role, specs[0].name, specs[0].secret) == ("operator", "ops-1", SECRET)
    digest = hashlib.sha256((SECRET + "x").encode()).hexdigest()[:6]
    assert (specs[1].role, specs[1].name) == ("admin", f"admin-{digest}")
    tokens = Tokens.parse([f"operator:ops-1:{SECRET}", f"read:{SECRET}x"])
    assert tokens.identify(SECRET) == Caller("operator", "ops-1")
    assert tokens.identify(SECRET + "x") == Caller("read", f"read-{digest}")
    assert tokens.identify("ops-1:" + SECRET) is None


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        (["admin"], "entry 1: expected ROLE:NAME:TOKEN"),
        ([f"root:{SECRET}"], "entry 1: the role must be read, operator or admin, not 'root'"),
        ([f"admin:bad name:{SECRET}"], "entry 1: the name must be 1 to 40 letters"),
        ([f"admin::{SECRET}"], "entry 1: the name must be"),
        ([f"admin:{'n' * 41}:{SECRET}"], "entry 1: the name must be"),
        (["admin:short"], "entry 1: the token must be at least 16 characters"),
        (["admin:ci:short"], "entry 1 (ci): the token must be at least 16 characters"),
        (
            [f"admin:ci:{SECRET}", f"read:ci:{SECRET}x"],
            "entry 2: the name 'ci' is already entry 1's; names must be unique",
        ),
        (
            [f"admin:a:{SECRET}", f"read:b:{SECRET}"],
            "entry 2 (b): the same token as entry 1",
        ),
    ],
)
def test_bad_entries_name_the_field_and_the_problem(entries: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=r"^api_tokens: ") as info:
        parse_tokens(entries)
    assert problem in str(info.value)
    assert SECRET not in str(info.value)  # a message never shows a token
    with pytest.raises(ConfigError) as again:
        load(config_file=None, environ={}, overrides={"api_tokens": tuple(entries)})
    assert problem in str(again.value) and SECRET not in str(again.value)


def test_session_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="session_secret: must be at least 32 characters"):
        load(config_file=None, environ={}, overrides={"session_secret": "short"})
    with pytest.raises(ConfigError, match="session_idle_timeout: must be greater than 0"):
        load(config_file=None, environ={"PUNCHCLOCK_SESSION_IDLE_TIMEOUT": "0"})
