"""Pure time arithmetic: validate cron and one-off specs, compute fire instants in an IANA zone.

Owns the DST rules (see DESIGN.md) and is the only importer of croniter. No I/O, no clock.
"""

from __future__ import annotations

import copy
import heapq
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from supervisor.core.errors import InvalidSpec
from supervisor.core.model import utc_iso

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, start=1)}
_DAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
# name -> (lowest, highest accepted value, highest value of the cycle, names)
_FIELDS: dict[str, tuple[int, int, int, dict[str, int]]] = {
    "second": (0, 59, 59, {}),
    "minute": (0, 59, 59, {}),
    "hour": (0, 23, 23, {}),
    "day-of-month": (1, 31, 31, {}),
    "month": (1, 12, 12, _MONTHS),
    "day-of-week": (0, 7, 6, _DAYS),  # 7 is Sunday again
}
_ITEM = re.compile(r"(?:(?P<star>\*)|(?P<lo>\w+?)(?:-(?P<hi>\w+))?)(?:/(?P<step>\w+))?", re.ASCII)
_NTH = re.compile(r"(?P<day>\w+)#(?P<nth>\w+)", re.ASCII)
_LAST_DOW = re.compile(r"L(?P<a>\w+)|(?P<b>\w+?)L", re.ASCII)
_WEEKDAY = re.compile(r"(?P<day>\w+?)W", re.ASCII)
_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
_MINUTE = timedelta(minutes=1)


def load_zone(name: str, field: str = "timezone") -> ZoneInfo:
    # Membership in the known list (not just ZoneInfo(name) succeeding) also rejects paths
    # such as "Europe/../UTC" and host files such as "localtime".
    if not isinstance(name, str) or name not in _zone_names():
        raise InvalidSpec(field, f"unknown time zone '{name}'")
    return ZoneInfo(name)


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones() - {"localtime", "posixrules"})


def parse_instant(text: str, field: str = "run_at") -> datetime:
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidSpec(field, f"'{text}' is not an ISO-8601 date-time") from None
    if value.tzinfo is None:
        raise InvalidSpec(field, f"'{text}' must include a UTC offset (Z or +hh:mm)")
    try:
        return _utc(value, field)
    except OverflowError:
        raise InvalidSpec(field, f"'{text}' is out of the supported range") from None


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC).replace(microsecond=0)


@dataclass(frozen=True, slots=True)
class _Compiled:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    day_expr: str | None  # "0 0 dom month dow" for croniter; None when every day matches
    is_interval: bool


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    zone: ZoneInfo
    is_interval: bool
    _c: _Compiled = field(repr=False, compare=False)

    def next_after(self, after: datetime) -> datetime:
        return next(self._iter(after))

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        end = _utc(until, "until")
        out: list[datetime] = []
        if limit == 0:
            return out
        for t in self._iter(after):
            if t > end:
                break
            out.append(t)
            if len(out) == limit:
                break
        return out

    def _iter(self, after: datetime) -> Iterator[datetime]:
        """Fire instants > after, ascending, deduplicated.

        Walks matching wall-clock times in order. The earliest instant of a wall time never
        decreases as the wall time grows, so it can be yielded at once; only the second
        occurrences of a repeated hour (interval expressions) wait in a heap until no
        earlier instant can still come.
        """
        last = _utc(after, "after")
        local = last.astimezone(self.zone)
        # Start at the wall time `after` reads with the post-transition offset: inside the
        # first pass of a repeated hour this is earlier by the size of the shift, as the second
        # occurrences of those earlier wall times still lie ahead of `after`.
        offset = local.replace(fold=1).utcoffset()
        assert offset is not None
        start = (last + offset).replace(tzinfo=None)
        pending: list[datetime] = []
        for wall in self._walls(start):
            instants = self._instants(wall)
            low = instants[0]
            while pending and pending[0] <= low:
                t = heapq.heappop(pending)
                if t > last:
                    yield t
                    last = t
            if low > last:
                yield low
                last = low
            for t in instants[1:]:
                if t > last:
                    heapq.heappush(pending, t)

    def _walls(self, start: datetime) -> Iterator[datetime]:
        """Matching naive wall-clock times >= start, ascending."""
        hs, ms, ss = self._c.hours, self._c.minutes, self._c.seconds
        day, h0, m0, s0 = start.date(), start.hour, start.minute, start.second
        while True:
            if self._c.day_expr is not None:
                found = _next_day(self._c.day_expr, day)
                if found != day:
                    day, h0, m0, s0 = found, 0, 0, 0
            y, mo, d = day.year, day.month, day.day
            for h in hs[bisect_left(hs, h0) :]:
                first_h = h == h0
                for m in ms[bisect_left(ms, m0) if first_h else 0 :]:
                    first_m = first_h and m == m0
                    for s in ss[bisect_left(ss, s0) if first_m else 0 :]:
                        yield datetime(y, mo, d, h, m, s)
            day, h0, m0, s0 = day + timedelta(days=1), 0, 0, 0

    def _instants(self, wall: datetime) -> tuple[datetime, ...]:
        """The instants a matching wall time fires at, ascending (DST rules 1-3)."""
        off0 = wall.replace(tzinfo=self.zone).utcoffset()
        off1 = wall.replace(tzinfo=self.zone, fold=1).utcoffset()
        assert off0 is not None and off1 is not None
        first = (wall - off0).replace(tzinfo=UTC)
        if off0 == off1:
            return (first,)
        if off0 > off1:  # repeated (fall back): fold=0 is the first occurrence
            return (first, (wall - off1).replace(tzinfo=UTC)) if self.is_interval else (first,)
        # Nonexistent (spring forward): fire when the clock jumps, between the two readings.
        return (_transition(self.zone, (wall - off1).replace(tzinfo=UTC), first),)


@lru_cache(maxsize=1024)
def _transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """First instant in (before, after] with the offset in force at `after`."""
    old = before.astimezone(zone).utcoffset()
    lo, hi = int(before.timestamp()), int(after.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == old:
            lo = mid
        else:
            hi = mid
    return datetime.fromtimestamp(hi, UTC)


@lru_cache(maxsize=256)
def _day_iterator(day_expr: str) -> Any:
    return croniter(day_expr, datetime(2000, 1, 1), ret_type=datetime, day_or=True)


@lru_cache(maxsize=16384)
def _next_day(day_expr: str, day: date) -> date:
    """First date >= day matching the day fields (croniter handles L, W, # and the OR rule)."""
    # A shallow copy per call keeps the cached, parsed prototype free of iteration state.
    it = copy.copy(_day_iterator(day_expr))
    found: datetime = it.get_next(datetime, start_time=datetime.combine(day, time()) - _MINUTE)
    return found.date()


def parse_cron(expression: str, timezone: str = "UTC", field: str = "cron") -> CronSchedule:
    text = expression.strip() if isinstance(expression, str) else ""
    compiled = _compile(text, field)
    return CronSchedule(text, load_zone(timezone), compiled.is_interval, compiled)


@lru_cache(maxsize=4096)
def _compile(text: str, field: str) -> _Compiled:
    if not text:
        raise InvalidSpec(field, "cron expression is empty")
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            known = ", ".join(_ALIASES)
            raise InvalidSpec(field, f"'{text}' is not supported; use one of {known}")
        text = _ALIASES[text.lower()]
    parts = text.split()
    if len(parts) not in (5, 6):
        raise InvalidSpec(
            field,
            "expected 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 with seconds first, got {len(parts)}",
        )
    if len(parts) == 5:
        parts.insert(0, "0")
    names = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
    raw = dict(zip(names, parts, strict=True))
    vals = {name: _field(field, name, raw[name]) for name in names}
    dom, dow = vals["day-of-month"], vals["day-of-week"]
    special_dom = any(isinstance(v, str) and v.endswith("w") for v in dom)
    special_dow = dow != ("*",) and any(isinstance(v, str) for v in dow)
    # croniter intersects (rather than ORs) a W day or an nth weekday with the other day
    # field, which nobody expects: allow them only when the other field is '*'.
    if (special_dom and dow != ("*",)) or (special_dow and dom != ("*",)):
        raise InvalidSpec(
            field,
            f"day-of-month field '{raw['day-of-month']}' and day-of-week field "
            f"'{raw['day-of-week']}' cannot both be restricted when one uses W, # "
            "or a last weekday (5L)",
        )
    day_fields = [",".join(map(str, vals[n])) for n in ("day-of-month", "month", "day-of-week")]
    day_expr = None if day_fields == ["*", "*", "*"] else "0 0 " + " ".join(day_fields)
    if day_expr is not None:
        try:
            croniter.expand(day_expr)
            _next_day(day_expr, date(2000, 1, 1))  # croniter searches 50 years ahead
        except CroniterBadDateError:
            which = f"day-of-month field '{raw['day-of-month']}' in month field '{raw['month']}'"
            if dow != ("*",):
                which += f" or day-of-week field '{raw['day-of-week']}'"
            raise InvalidSpec(field, f"never fires: no date matches {which}") from None
        except CroniterError as exc:
            raise InvalidSpec(field, f"'{text}' is not a valid cron expression: {exc}") from None
    times = [tuple(v for v in vals[n] if isinstance(v, int)) for n in names[:3]]
    return _Compiled(
        seconds=times[0],
        minutes=times[1],
        hours=times[2],
        day_expr=day_expr,
        # Cronos' rule: '*', a range or a step in a time field makes an interval expression.
        is_interval=any(c in raw[n] for n in names[:3] for c in "*-/"),
    )


def _field(spec_field: str, name: str, text: str) -> tuple[int | str, ...]:
    """Validate one field. Time fields come back as all their values; day fields as values
    plus croniter tokens ('l', '15w', '1#2', 'l5'), or ('*',) when unrestricted."""
    lo, hi, top, names = _FIELDS[name]

    def fail(item: str, problem: str) -> InvalidSpec:
        return InvalidSpec(spec_field, f"{name} field '{item}' {problem}")

    def value(token: str, item: str) -> int:
        if token.isdigit() and token.isascii():
            number = int(token)
        elif token.upper() in names:
            number = names[token.upper()]
        else:
            raise fail(item, "is not a valid value")
        if not lo <= number <= hi:
            raise fail(item, f"is out of range {lo}-{hi}")
        return number

    if name in ("day-of-month", "month", "day-of-week") and text in ("*", "?"):
        if text == "?" and name == "month":
            raise fail(text, "is not a valid value")
        return ("*",)
    items = text.split(",")
    out: set[int | str] = set()
    for item in items:
        upper = item.upper()
        if upper in ("R", "H") or upper.startswith(("R(", "H(", "R/", "H/")):
            raise fail(item, "uses random or hashed values (R, H), which are not supported")
        if name == "day-of-month" and upper == "L":
            out.add("l")
            continue
        if name == "day-of-month" and (m := _WEEKDAY.fullmatch(upper)):
            if len(items) > 1:
                raise fail(text, "cannot combine W with other values")
            out.add(f"{value(m['day'], item)}w")
            continue
        if name == "day-of-week" and (m := _NTH.fullmatch(upper)):
            nth = m["nth"]
            if not (nth.isdigit() and nth.isascii() and 1 <= int(nth) <= 5):
                raise fail(item, "has an nth weekday outside 1-5")
            out.add(f"{value(m['day'], item) % 7}#{int(nth)}")
            continue
        if name == "day-of-week" and (m := _LAST_DOW.fullmatch(upper)):
            out.add(f"l{value(m['a'] or m['b'], item) % 7}")
            continue
        m = _ITEM.fullmatch(upper)
        if m is None:
            raise fail(item, "is not a valid value")
        step = 1
        if m["step"] is not None:
            step = int(m["step"]) if m["step"].isdigit() and m["step"].isascii() else -1
            if not 1 <= step <= top - lo:
                raise fail(item, f"has a step outside 1-{top - lo}")
        if m["star"]:
            first, last = lo, top
        else:
            first = value(m["lo"], item)
            last = value(m["hi"], item) if m["hi"] else (top if m["step"] else first)
        if name == "day-of-week" and first > last:
            first, last = first % 7, last % 7
        if first <= last:
            out.update(range(first, last + 1, step))
        else:  # wraps around, e.g. 22-2 or NOV-FEB
            cycle = top - lo + 1
            out.update(
                lo + (first - lo + k) % cycle for k in range(0, (last - first) % cycle + 1, step)
            )
    if name == "day-of-week":
        out = {v % 7 if isinstance(v, int) else v for v in out}
        if any(isinstance(v, str) for v in out) and any(isinstance(v, int) for v in out):
            raise fail(text, "cannot mix # or L with plain days")
    return tuple(sorted(out, key=lambda v: (isinstance(v, str), str(v).zfill(4))))


@dataclass(frozen=True)
class OneOffSchedule:
    at: datetime
    zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", _utc(self.at, "at"))

    def next_after(self, after: datetime) -> datetime | None:
        return self.at if self.at > _utc(after, "after") else None

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        inside = _utc(after, "after") < self.at <= _utc(until, "until")
        return [self.at] if inside and limit > 0 else []


def parse_schedule(
    cron: str | None, run_at: str | datetime | None, timezone: str
) -> CronSchedule | OneOffSchedule:
    if (cron is None) == (run_at is None):
        raise InvalidSpec("cron", "give exactly one of cron or run_at")
    if cron is not None:
        return parse_cron(cron, timezone)
    zone = load_zone(timezone)
    if isinstance(run_at, datetime):
        return OneOffSchedule(run_at, zone)
    return OneOffSchedule(parse_instant(run_at or ""), zone)


def preview(
    schedule: CronSchedule | OneOffSchedule, after: datetime, count: int
) -> list[dict[str, str]]:
    return [
        {
            "utc": utc_iso(t),
            "local": t.astimezone(schedule.zone).isoformat(),
        }
        for t in schedule.between(after, _FAR_FUTURE, count)
    ]
