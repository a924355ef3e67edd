"""Opaque keyset cursors: the last row's sort key plus a hash of the filters that made it.

A cursor is base64url JSON. It is validated before use (shape, types, ranges) and refused
when the request's filters differ from the ones it was issued for, since a key position
only means something within the same filtered order.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime
from typing import Any

from supervisor.core.errors import InvalidSpec
from supervisor.core.jobspec import checked_instant
from supervisor.core.model import MAX_ID

VERSION = 1
MAX_LENGTH = 512


def filters_hash(kind: str, filters: dict[str, Any]) -> str:
    canonical = json.dumps([kind, filters], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode(key: list[Any], fhash: str) -> str:
    raw = json.dumps({"v": VERSION, "k": key, "f": fhash}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str, fhash: str, field: str = "cursor") -> list[Any]:
    bad = InvalidSpec(field, "is not a valid cursor; use next_cursor from a previous page")
    if len(token) > MAX_LENGTH or not token.isascii():
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise bad from None
    if (
        not isinstance(data, dict)
        or set(data) != {"v", "k", "f"}
        or data.get("v") != VERSION
        or not isinstance(data.get("k"), list)
    ):
        raise bad
    if data.get("f") != fhash:
        raise InvalidSpec(field, "was issued for different filters; start again without it")
    return list(data["k"])


def run_key(scheduled_at: datetime, run_id: int) -> list[Any]:
    return [scheduled_at.isoformat(), run_id]


def parse_run_key(key: list[Any], field: str = "cursor") -> tuple[datetime, int]:
    bad = InvalidSpec(field, "is not a valid cursor; use next_cursor from a previous page")
    if len(key) != 2 or not isinstance(key[0], str) or not _is_id(key[1]):
        raise bad
    try:
        at = datetime.fromisoformat(key[0])
        if at.tzinfo is None or at.utcoffset() is None:
            raise bad
        # A forged key may name an instant UTC cannot hold or asyncpg sends as +-infinity.
        at = checked_instant(at, field, key[0])
    except (ValueError, InvalidSpec):
        raise bad from None
    return at, int(key[1])


def parse_id_key(key: list[Any], field: str = "cursor") -> int:
    if len(key) != 1 or not _is_id(key[0]):
        raise InvalidSpec(field, "is not a valid cursor; use next_cursor from a previous page")
    return int(key[0])


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID
