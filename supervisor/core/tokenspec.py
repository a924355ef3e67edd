"""API token entries (`api_tokens`): `ROLE:NAME:TOKEN`, or the older `ROLE:TOKEN`, which is
named `ROLE-<first 6 hex digits of the token's SHA-256>`. Shared by the configuration's
validation and the API's authentication, so both read an entry the same way. Messages name
an entry by its position and name, never by its secret.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

READ, OPERATOR, ADMIN = "read", "operator", "admin"
ROLES = (READ, OPERATOR, ADMIN)  # each may do what the ones before it may
NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
NAME_RULE = "1 to 40 letters, digits, '_', '.' or '-'"
MIN_SECRET = 16


@dataclass(frozen=True)
class TokenSpec:
    role: str
    name: str
    secret: str


def legacy_name(role: str, secret: str) -> str:
    """The name of a `ROLE:TOKEN` entry: stable, and telling nothing useful about the token."""
    return f"{role}-{hashlib.sha256(secret.encode('utf-8', 'surrogateescape')).hexdigest()[:6]}"


def parse_one(entry: str, position: int) -> TokenSpec:
    """One entry; ValueError naming `api_tokens`, the entry's position and the problem. Any
    second ':' makes it `ROLE:NAME:TOKEN` (an old `ROLE:TOKEN` whose token contains ':' must
    be rewritten in the named form)."""
    where = f"api_tokens: entry {position}"
    role, sep, rest = entry.partition(":")
    if not sep:
        raise ValueError(f"{where}: expected ROLE:NAME:TOKEN (or ROLE:TOKEN)")
    if role not in ROLES:
        raise ValueError(f"{where}: the role must be read, operator or admin, not {role[:20]!r}")
    name, sep, secret = rest.partition(":")
    if not sep:
        name, secret = legacy_name(role, rest), rest
    elif NAME.fullmatch(name):
        where += f" ({name})"
    else:
        raise ValueError(f"{where}: the name must be {NAME_RULE}, not {name[:40]!r}")
    if len(secret) < MIN_SECRET:
        raise ValueError(f"{where}: the token must be at least {MIN_SECRET} characters")
    return TokenSpec(role, name, secret)


def parse_tokens(entries: tuple[str, ...] | list[str]) -> list[TokenSpec]:
    """Every entry, or ValueError listing each problem: bad entries, a name used twice, or
    one token configured twice (it could only have one name and one role)."""
    problems: list[str] = []
    specs: list[TokenSpec] = []
    names: dict[str, int] = {}
    secrets: dict[str, int] = {}
    for position, entry in enumerate(entries, 1):
        try:
            spec = parse_one(entry, position)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if spec.name in names:
            problems.append(
                f"api_tokens: entry {position}: the name {spec.name!r} is already entry "
                f"{names[spec.name]}'s; names must be unique"
            )
        elif spec.secret in secrets:
            problems.append(
                f"api_tokens: entry {position} ({spec.name}): the same token as entry "
                f"{secrets[spec.secret]}; each token needs one role and one name"
            )
        names.setdefault(spec.name, position)
        secrets.setdefault(spec.secret, position)
        specs.append(spec)
    if problems:
        raise ValueError("; ".join(problems))
    return specs
