"""Jinja filters: instants in UTC and in a job's zone, ages, durations, byte sizes."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from cron_descriptor import ExpressionDescriptor, Options

_WORDS = Options()
_WORDS.use_24hour_time_format = True
_WORDS.verbose = False
_ALIASES = {
    "@yearly": "Once a year, at 00:00 on January 1",
    "@annually": "Once a year, at 00:00 on January 1",
    "@monthly": "At 00:00 on day 1 of the month",
    "@weekly": "At 00:00, only on Sunday",
    "@daily": "At 00:00",
    "@midnight": "At 00:00",
    "@hourly": "Every hour",
}


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
        return f"{v:.0f} s" if v == int(v) else f"{v:.1f} s"
    whole = int(v)
    for unit, size, sub, subsize in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            rest = whole % size // subsize
            return f"{whole // size} {unit}" + (f" {rest} {sub}" if rest else "")
    return f"{whole} s"


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


@functools.lru_cache(maxsize=4096)
def cron_words(cron: str | None) -> str:
    """A cron expression in plain words ("At 02:00, Monday through Friday"); seconds come
    first in a 6-field expression, as in punchclock's. Cached: cron_descriptor reads its
    locale file on every call (0.7 ms), and a jobs page shows 50 expressions."""
    if not cron:
        return ""
    if cron.startswith("@"):
        return _ALIASES.get(cron.lower(), "")
    try:
        return str(ExpressionDescriptor(cron, _WORDS).get_description())
    except Exception:  # a library's refusal: show the expression alone
        return ""


def percent(part: float | None) -> str:
    return "—" if part is None else f"{part * 100:.0f}%"


SKIPPED_BECAUSE = {
    "missed": "it had not started by its instant and the job's catch-up policy and window"
    " do not run it late",
    "overlap": "the job's previous run was still running (overlap: skip)",
}


def ended(line: Any) -> tuple[str, str]:
    """What happened to a one-off whose run is over (a dashboard.JobLine that is `ended`):
    a badge and a sentence."""
    status, reason, when = str(line.last_status), line.last_skip_reason, utc(line.last_at)
    if status == "succeeded":
        return "done", f"done: succeeded at {when}"
    if status == "skipped":
        why = SKIPPED_BECAUSE.get(reason or "", reason or "a policy said so")
        return "missed", f"missed: skipped at {when} because {why}; nothing ran"
    if status == "dead":
        return "dead", f"done: dead at {when}, its attempts failed"
    return str(status), f"{status} at {when}"


SHOWN = 4096  # characters of a payload a page shows; the whole is a download


@dataclass(frozen=True, slots=True)
class Payload:
    """A payload as a page shows it: its JSON, cut after SHOWN characters."""

    text: str
    cut: bool
    size: int  # bytes of the whole JSON


def payload(value: Any) -> Payload:
    text = json.dumps(value, indent=2, sort_keys=True)
    return Payload(text[:SHOWN], len(text) > SHOWN, len(text.encode()))


FILTERS: dict[str, Any] = {
    "utc": utc,
    "local": local,
    "seconds": seconds,
    "ago": ago,
    "size": size,
    "cron_words": cron_words,
    "percent": percent,
    "ended": ended,
}
