"""Jinja filters: instants in UTC and in a job's zone, ages, durations, byte sizes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo


def utc(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def local(value: datetime | None, zone: str) -> str:
    if value is None:
        return "—"
    try:
        return value.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (ValueError, KeyError, OverflowError):
        return utc(value)


def seconds(value: float | None) -> str:
    """A duration for people: 850 ms, 12.3 s, 4 min 5 s, 3 h 20 min, 2 d 4 h."""
    if value is None:
        return "—"
    v = abs(value)
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 60:
        return f"{v:.1f} s"
    whole = int(v)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if whole >= size:
            return f"{whole // size} {unit} {whole % size // subsize} {sub}"
    return f"{whole // 60} min {whole % 60} s"


def ago(value: datetime | None, now: datetime) -> str:
    """ "5 min ago" or "in 5 min", against the database's clock."""
    if value is None:
        return "—"
    delta = (now - value).total_seconds()
    return f"{seconds(delta)} ago" if delta >= 0 else f"in {seconds(delta)}"


def size(value: int | None) -> str:
    if value is None:
        return "—"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"


FILTERS: dict[str, Any] = {"utc": utc, "local": local, "seconds": seconds, "ago": ago, "size": size}
