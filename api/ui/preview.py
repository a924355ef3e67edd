"""The schedule preview of the job form: schedule.preview's instants (as `schedule preview`
prints them) with the DST rule (DESIGN.md, Schedules and DST) marked where one applies.

A mark compares an instant with the cron's wall times: read in a zone without DST (UTC), the
same expression says which wall times match, so a skipped (spring forward) or repeated (fall
back) wall time can be told from an ordinary one without touching the scheduler's insides.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from api.instants import instant, parse_iso
from supervisor.core import schedule
from supervisor.core.errors import InvalidSpec
from supervisor.core.model import utc_iso
from supervisor.core.schedule import CronSchedule

SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Instant:
    utc: str
    local: str
    rule: str | None = None  # "shifted", "skipped", "not repeated", "repeated"
    note: str = ""


def preview(expression: str, zone: str, after: datetime, count: int) -> list[Instant]:
    """The next `count` instants; raises InvalidSpec naming cron or timezone."""
    sched = schedule.parse_cron(expression, zone or "UTC", "cron")
    try:
        items = schedule.preview(sched, after, count)
    except (OverflowError, ValueError):
        raise InvalidSpec("cron", "no instant within supported time") from None
    walls = schedule.parse_cron(expression, "UTC", "cron")
    return [_mark(sched, walls, i["utc"], i["local"]) for i in items]


def _wall(t: datetime) -> datetime:
    """A naive wall time as an instant of the DST-free reading of the cron."""
    return t.replace(tzinfo=UTC)


def _matches(walls: CronSchedule, wall: datetime) -> bool:
    return walls.next_after(_wall(wall) - SECOND) == _wall(wall)


def _mark(sched: CronSchedule, walls: CronSchedule, utc_text: str, local_text: str) -> Instant:
    t = parse_iso(utc_text)
    zone = sched.zone
    here = t.astimezone(zone)
    before = (t - SECOND).astimezone(zone)
    wall = here.replace(tzinfo=None)
    hhmm = "%H:%M:%S" if wall.second else "%H:%M"
    now_off, before_off = here.utcoffset(), before.utcoffset()
    assert now_off is not None and before_off is not None
    if now_off > before_off:
        # The clock jumped forward at t: the cron's wall times inside the gap fire here.
        start = before.replace(tzinfo=None)
        gap = [
            w.replace(tzinfo=None)
            for w in walls.between(_wall(start), _wall(wall) - SECOND / 10**6, 100)
        ]
        if gap:
            names = ", ".join(w.strftime(hhmm) for w in gap[:4]) + (" …" if len(gap) > 4 else "")
            jump = wall.strftime(hhmm)
            if len(gap) == 1 and not _matches(walls, wall):
                note = f"{names} does not exist this night (spring forward): runs when the clock"
                note += f" jumps to {jump} (DST rule 1)"
                return Instant(utc_text, local_text, "shifted", note)
            what = f"{len(gap)} wall times ({names}) do" if len(gap) > 1 else f"{names} does"
            note = f"{what} not exist this night (spring forward): one run, here at {jump},"
            note += " stands for them (DST rule 1)"
            return Instant(utc_text, local_text, "skipped", note)
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    if first != second and first is not None and second is not None and first > second:
        at = wall.strftime(hhmm)
        if not sched.is_interval:
            note = f"{at} occurs twice this night (fall back): runs once, at the first"
            note += " (DST rule 2)"
            return Instant(utc_text, local_text, "not repeated", note)
        which = "second" if here.fold else "first"
        note = f"{at} occurs twice this night (fall back): an interval expression runs in"
        note += f" both; this is the {which} (DST rule 3)"
        return Instant(utc_text, local_text, "repeated", note)
    return Instant(utc_text, local_text)


UTC_NAMES = frozenset({"", "UTC", "Etc/UTC", "Etc/Universal", "Etc/Zulu", "Universal", "Zulu"})


def utc_only(zone: str) -> bool:
    """A zone whose times are UTC's: its instants need one column, not "UTC | UTC"."""
    return zone.strip() in UTC_NAMES


def once(text: str, zone: str, now: datetime) -> list[Instant]:
    """A one-off's instant: run_at (without an offset, in `zone`) as the form reads it; []
    while it is empty. Raises InvalidSpec naming run_at or timezone."""
    tz = schedule.load_zone(zone or "UTC")
    if not text.strip():
        return []
    at = instant(text.strip(), "run_at", naive=tz, example="2026-12-24T18:00")
    note = ""
    if at <= now:
        note = "already past: it runs at once within the catch-up window, else is skipped"
    return [Instant(utc_iso(at), at.astimezone(tz).isoformat(), "past" if note else None, note)]
