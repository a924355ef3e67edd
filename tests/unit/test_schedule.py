"""supervisor.core.schedule: cron syntax, error messages, one-offs and the DST rules."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from supervisor.core.errors import InvalidSpec
from supervisor.core.schedule import (
    CronSchedule,
    OneOffSchedule,
    load_zone,
    parse_cron,
    parse_instant,
    parse_schedule,
    preview,
)


def utc(text: str) -> datetime:
    """A UTC instant from 'YYYY-MM-DDTHH:MM[:SS]'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def iso(ts: list[datetime]) -> list[str]:
    return [t.strftime("%m-%dT%H:%M:%S") for t in ts]


def fires(expr: str, zone: str, after: str, until: str) -> list[str]:
    return iso(parse_cron(expr, zone).between(utc(after), utc(until), 1000))


# ---------------------------------------------------------------------------------------
# The transitions used below (checked by test_transitions_are_where_the_tables_assume):
#   Europe/Berlin       spring 2026-03-29 01:00Z: 02:00 +01 -> 03:00 +02 (02:00-03:00 skipped)
#                       autumn 2026-10-25 01:00Z: 03:00 +02 -> 02:00 +01 (02:00-03:00 twice)
#   America/New_York    spring 2026-03-08 07:00Z: 02:00 -05 -> 03:00 -04
#                       autumn 2026-11-01 06:00Z: 02:00 -04 -> 01:00 -05 (01:00-02:00 twice)
#   Australia/Lord_Howe spring 2026-10-03 15:30Z: 02:00 +10:30 -> 02:30 +11 (30 minutes)
#                       autumn 2026-04-04 15:00Z: 02:00 +11 -> 01:30 +10:30 (01:30-02:00 twice)
#   America/Santiago    spring 2026-09-06 04:00Z: Sun 00:00 -04 -> 01:00 -03 (at midnight)
#                       autumn 2026-04-05 03:00Z: Sat 24:00 -03 -> Sat 23:00 -04 (at midnight)
# ---------------------------------------------------------------------------------------
TRANSITIONS = [
    ("Europe/Berlin", "2026-03-29T01:00", "2026-03-29T01:59:59+01:00", "2026-03-29T03:00:00+02:00"),
    ("Europe/Berlin", "2026-10-25T01:00", "2026-10-25T02:59:59+02:00", "2026-10-25T02:00:00+01:00"),
    (
        "America/New_York",
        "2026-03-08T07:00",
        "2026-03-08T01:59:59-05:00",
        "2026-03-08T03:00:00-04:00",
    ),
    (
        "America/New_York",
        "2026-11-01T06:00",
        "2026-11-01T01:59:59-04:00",
        "2026-11-01T01:00:00-05:00",
    ),
    (
        "Australia/Lord_Howe",
        "2026-10-03T15:30",
        "2026-10-04T01:59:59+10:30",
        "2026-10-04T02:30:00+11:00",
    ),
    (
        "Australia/Lord_Howe",
        "2026-04-04T15:00",
        "2026-04-05T01:59:59+11:00",
        "2026-04-05T01:30:00+10:30",
    ),
    (
        "America/Santiago",
        "2026-09-06T04:00",
        "2026-09-05T23:59:59-04:00",
        "2026-09-06T01:00:00-03:00",
    ),
    (
        "America/Santiago",
        "2026-04-05T03:00",
        "2026-04-04T23:59:59-03:00",
        "2026-04-04T23:00:00-04:00",
    ),
]


@pytest.mark.parametrize(("zone", "at", "before", "after"), TRANSITIONS)
def test_transitions_are_where_the_tables_assume(
    zone: str, at: str, before: str, after: str
) -> None:
    z = ZoneInfo(zone)
    assert (utc(at) - timedelta(seconds=1)).astimezone(z).isoformat() == before
    assert utc(at).astimezone(z).isoformat() == after


def test_santiago_transitions_happen_at_midnight() -> None:
    z = ZoneInfo("America/Santiago")
    for at in ("2026-09-06T04:00", "2026-04-05T03:00"):
        just_before = (utc(at) - timedelta(seconds=1)).astimezone(z)
        assert just_before.time().isoformat() == "23:59:59"  # the next wall second is 24:00
        # ... which never shows: the clock reads 01:00 (spring) or 23:00 (autumn) instead.
        assert utc(at).astimezone(z).time().isoformat() in ("01:00:00", "23:00:00")


# Each row: zone, expression, window (after, until], the exact UTC instants in it.
DST_CASES = [
    # --- Europe/Berlin, spring (gap 02:00-03:00 local on 03-29) ---
    # Rule 1: 02:30 +01 on 03-28 = 01:30Z; 03-29 02:30 does not exist -> the jump at 01:00Z
    # (03:00 +02); 03-30 02:30 +02 = 00:30Z.
    ("Europe/Berlin", "30 2 * * *", "2026-03-27T12:00", "2026-03-30T12:00",
     ["03-28T01:30:00", "03-29T01:00:00", "03-30T00:30:00"]),
    # Rule 1 dedupe: 02:00, 02:30 (skipped) and 03:00 +02 are all the instant 01:00Z;
    # 03:30 +02 = 01:30Z.
    ("Europe/Berlin", "0,30 2,3 * * *", "2026-03-28T12:00", "2026-03-29T12:00",
     ["03-29T01:00:00", "03-29T01:30:00"]),
    # Rule 3 on the spring night: 01:45 +01 = 00:45Z; 02:00..02:45 collapse with 03:00 +02
    # into 01:00Z; 03:15 +02 = 01:15Z; 03:30 +02 = 01:30Z.
    ("Europe/Berlin", "*/15 * * * *", "2026-03-29T00:30", "2026-03-29T01:30",
     ["03-29T00:45:00", "03-29T01:00:00", "03-29T01:15:00", "03-29T01:30:00"]),
    # --- Europe/Berlin, autumn (02:00-03:00 local twice on 10-25) ---
    # Rule 2: 10-24 02:30 +02 = 00:30Z; 10-25 02:30 first occurrence (+02) = 00:30Z, not
    # again at 01:30Z; 10-26 02:30 +01 = 01:30Z.
    ("Europe/Berlin", "30 2 * * *", "2026-10-23T12:00", "2026-10-26T12:00",
     ["10-24T00:30:00", "10-25T00:30:00", "10-26T01:30:00"]),
    # Rule 3: 02:00..02:45 +02 = 00:00Z..00:45Z, then 02:00..02:45 +01 = 01:00Z..01:45Z:
    # eight instants 15 minutes apart, then 03:00 +01 = 02:00Z.
    ("Europe/Berlin", "*/15 * * * *", "2026-10-24T23:50", "2026-10-25T02:00",
     ["10-25T00:00:00", "10-25T00:15:00", "10-25T00:30:00", "10-25T00:45:00",
      "10-25T01:00:00", "10-25T01:15:00", "10-25T01:30:00", "10-25T01:45:00",
      "10-25T02:00:00"]),
    # Rule 3, minute fixed but hour '*': 00:30 +02 = 22:30Z, 01:30 +02 = 23:30Z, 02:30 +02 =
    # 00:30Z, 02:30 +01 = 01:30Z, 03:30 +01 = 02:30Z.
    ("Europe/Berlin", "30 * * * *", "2026-10-24T22:00", "2026-10-25T02:45",
     ["10-24T22:30:00", "10-24T23:30:00", "10-25T00:30:00", "10-25T01:30:00",
      "10-25T02:30:00"]),
    # --- America/New_York, spring (gap 02:00-03:00 on 03-08) ---
    # Rule 1: 03-07 02:30 -05 = 07:30Z; 03-08 -> the jump at 07:00Z; 03-09 02:30 -04 = 06:30Z.
    ("America/New_York", "30 2 * * *", "2026-03-07T00:00", "2026-03-10T00:00",
     ["03-07T07:30:00", "03-08T07:00:00", "03-09T06:30:00"]),
    # Rule 3 with an hour range: 01:00 -05 = 06:00Z; 02:00 (skipped) and 03:00 -04 are both
    # 07:00Z, once.
    ("America/New_York", "0 1-3 * * *", "2026-03-08T05:00", "2026-03-08T08:30",
     ["03-08T06:00:00", "03-08T07:00:00"]),
    # --- America/New_York, autumn (01:00-02:00 twice on 11-01) ---
    # Rule 2: 10-31 01:30 -04 = 05:30Z; 11-01 first occurrence 01:30 -04 = 05:30Z only;
    # 11-02 01:30 -05 = 06:30Z.
    ("America/New_York", "30 1 * * *", "2026-10-31T00:00", "2026-11-03T00:00",
     ["10-31T05:30:00", "11-01T05:30:00", "11-02T06:30:00"]),
    # Rule 3: 01:00 -04 = 05:00Z, 01:00 -05 = 06:00Z, 02:00 -05 = 07:00Z.
    ("America/New_York", "0 1-2 * * *", "2026-11-01T04:00", "2026-11-01T08:00",
     ["11-01T05:00:00", "11-01T06:00:00", "11-01T07:00:00"]),
    # --- Australia/Lord_Howe, spring (gap 02:00-02:30 on 10-04, +10:30 -> +11) ---
    # Rule 1: 10-03 02:15 +10:30 = 10-02 15:45Z; 10-04 02:15 skipped -> the jump at
    # 10-03 15:30Z; 10-05 02:15 +11 = 10-04 15:15Z.
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-02T00:00", "2026-10-05T00:00",
     ["10-02T15:45:00", "10-03T15:30:00", "10-04T15:15:00"]),
    # Rule 3: 01:45 +10:30 = 15:15Z; 02:00 and 02:15 (skipped) and 02:30 +11 are all 15:30Z;
    # 02:45 +11 = 15:45Z.
    ("Australia/Lord_Howe", "*/15 * * * *", "2026-10-03T15:00", "2026-10-03T15:50",
     ["10-03T15:15:00", "10-03T15:30:00", "10-03T15:45:00"]),
    # --- Australia/Lord_Howe, autumn (01:30-02:00 twice on 04-05, +11 -> +10:30) ---
    # Rule 2: 04-04 01:45 +11 = 04-03 14:45Z; 04-05 first occurrence 01:45 +11 = 04-04
    # 14:45Z only; 04-06 01:45 +10:30 = 04-05 15:15Z.
    ("Australia/Lord_Howe", "45 1 * * *", "2026-04-03T00:00", "2026-04-06T00:00",
     ["04-03T14:45:00", "04-04T14:45:00", "04-05T15:15:00"]),
    # Rule 3: 01:15 +11 = 14:15Z, 01:30/01:45 +11 = 14:30Z/14:45Z, 01:30/01:45 +10:30 =
    # 15:00Z/15:15Z, 02:00 +10:30 = 15:30Z: still every 15 minutes.
    ("Australia/Lord_Howe", "*/15 * * * *", "2026-04-04T14:10", "2026-04-04T15:30",
     ["04-04T14:15:00", "04-04T14:30:00", "04-04T14:45:00", "04-04T15:00:00",
      "04-04T15:15:00", "04-04T15:30:00"]),
    # --- America/Santiago, spring (gap Sun 00:00-01:00 on 09-06, -04 -> -03) ---
    # Rule 1 at midnight: 09-05 00:00 -04 = 04:00Z; 09-06 00:00 skipped -> the jump at
    # 09-06 04:00Z (01:00 -03); 09-07 00:00 -03 = 03:00Z.
    ("America/Santiago", "0 0 * * *", "2026-09-04T12:00", "2026-09-07T12:00",
     ["09-05T04:00:00", "09-06T04:00:00", "09-07T03:00:00"]),
    # The skipped midnight still belongs to Sunday: 09-06 -> 04:00Z; 09-13 00:00 -03 = 03:00Z.
    ("America/Santiago", "0 0 * * SUN", "2026-09-01T00:00", "2026-09-14T00:00",
     ["09-06T04:00:00", "09-13T03:00:00"]),
    # Rule 3: 09-05 23:00 -04 = 09-06 03:00Z; 00:00 (skipped) and 01:00 -03 are 04:00Z;
    # 02:00 -03 = 05:00Z.
    ("America/Santiago", "@hourly", "2026-09-06T02:30", "2026-09-06T05:30",
     ["09-06T03:00:00", "09-06T04:00:00", "09-06T05:00:00"]),
    # --- America/Santiago, autumn (Sat 23:00-24:00 twice on 04-04, -03 -> -04) ---
    # Rule 2: 04-03 23:30 -03 = 04-04 02:30Z; 04-04 first occurrence 23:30 -03 = 04-05
    # 02:30Z only; 04-05 23:30 -04 = 04-06 03:30Z.
    ("America/Santiago", "30 23 * * *", "2026-04-03T12:00", "2026-04-07T00:00",
     ["04-04T02:30:00", "04-05T02:30:00", "04-06T03:30:00"]),
    # Rule 3: 22:00 -03 = 01:00Z, 23:00 -03 = 02:00Z, 23:00 -04 = 03:00Z, Sun 00:00 -04 = 04:00Z.
    ("America/Santiago", "@hourly", "2026-04-05T00:30", "2026-04-05T04:30",
     ["04-05T01:00:00", "04-05T02:00:00", "04-05T03:00:00", "04-05T04:00:00"]),
]  # fmt: skip


@pytest.mark.parametrize(("zone", "expr", "after", "until", "expected"), DST_CASES)
def test_dst_rules(zone: str, expr: str, after: str, until: str, expected: list[str]) -> None:
    assert fires(expr, zone, after, until) == expected
    # Rule 4: the same instants one next_after at a time.
    sched = parse_cron(expr, zone)
    chain, t = [], utc(after)
    while (t := sched.next_after(t)) <= utc(until):
        chain.append(t)
    assert iso(chain) == expected


@pytest.mark.parametrize(
    ("zone", "expr", "after", "expected"),
    [
        # Inside the first pass of Berlin's repeated hour (02:50 +02): the next is 02:00 +01.
        ("Europe/Berlin", "*/15 * * * *", "2026-10-25T00:50", "2026-10-25T01:00:00"),
        # Inside the second pass (02:05 +01).
        ("Europe/Berlin", "*/15 * * * *", "2026-10-25T01:05", "2026-10-25T01:15:00"),
        # Fixed 02:30 already fired at 00:30Z; its second occurrence (01:30Z) is not a fire
        # time, so from 00:45Z the next is the following day, 02:30 +01 = 01:30Z.
        ("Europe/Berlin", "30 2 * * *", "2026-10-25T00:45", "2026-10-26T01:30:00"),
        ("Europe/Berlin", "30 2 * * *", "2026-10-25T01:10", "2026-10-26T01:30:00"),
        # Exactly at the spring jump: the skipped 02:30 is this instant, so next is tomorrow.
        ("Europe/Berlin", "30 2 * * *", "2026-03-29T01:00", "2026-03-30T00:30:00"),
        ("Europe/Berlin", "30 2 * * *", "2026-03-29T00:59:59", "2026-03-29T01:00:00"),
        # Lord Howe second pass 01:40 +10:30 = 15:10Z: next 01:45 +10:30 = 15:15Z.
        ("Australia/Lord_Howe", "*/15 * * * *", "2026-04-04T15:10", "2026-04-04T15:15:00"),
        # Santiago first pass 23:40 -03 = 02:40Z: next is 23:00 -04 = 03:00Z.
        ("America/Santiago", "@hourly", "2026-04-05T02:40", "2026-04-05T03:00:00"),
    ],
)
def test_next_after_from_inside_a_transition(
    zone: str, expr: str, after: str, expected: str
) -> None:
    assert parse_cron(expr, zone).next_after(utc(after)) == utc(expected)


RULE4_EXPRS = {
    "Europe/Berlin": ["30 2 * * *", "*/15 * * * *", "30 * * * *", "0 1-3 * * *", "*/10 0-5 * * * *"],
    "America/New_York": ["30 1 * * *", "0 1-2 * * *", "*/20 * * * *", "0 */2 * * *"],
    "Australia/Lord_Howe": ["15 2 * * *", "45 1 * * *", "*/15 * * * *", "40 1-2 * * *"],
    "America/Santiago": ["0 0 * * *", "30 23 * * *", "@hourly", "*/30 23,0 * * *"],
}  # fmt: skip


@pytest.mark.parametrize(("zone", "at", "before", "after"), TRANSITIONS)
def test_rule4_next_after_agrees_with_iterating_from_a_day_earlier(
    zone: str, at: str, before: str, after: str
) -> None:
    rng = random.Random(f"{zone}{at}")
    for expr in RULE4_EXPRS[zone]:
        sched = parse_cron(expr, zone)
        for _ in range(30):
            x = utc(at) + timedelta(seconds=rng.randint(-36 * 3600, 36 * 3600))
            x += timedelta(microseconds=rng.choice([0, rng.randint(1, 999_999)]))
            earlier = sched.between(x - timedelta(days=1), x + timedelta(days=2), 100_000)
            later = [t for t in earlier if t > x]
            assert earlier == sorted(set(earlier)), (expr, x)
            assert sched.next_after(x) == later[0], (expr, x)
            assert sched.between(x, x + timedelta(days=2), 100_000) == later, (expr, x)


# --- syntax ----------------------------------------------------------------------------


def nexts(expr: str, after: str, n: int, zone: str = "UTC") -> list[str]:
    sched, t, out = parse_cron(expr, zone), utc(after), []
    for _ in range(n):
        t = sched.next_after(t)
        out.append(t.strftime("%Y-%m-%dT%H:%M:%S"))
    return out


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # Six fields put the seconds first.
        ("15 30 9 * * *", "2026-01-01T00:00", ["2026-01-01T09:30:15", "2026-01-02T09:30:15"]),
        ("*/20 * * * * *", "2026-01-01T10:00:05", ["2026-01-01T10:00:20", "2026-01-01T10:00:40"]),
        ("@yearly", "2026-06-01T00:00", ["2027-01-01T00:00:00", "2028-01-01T00:00:00"]),
        ("@annually", "2026-06-01T00:00", ["2027-01-01T00:00:00", "2028-01-01T00:00:00"]),
        ("@monthly", "2026-06-15T00:00", ["2026-07-01T00:00:00", "2026-08-01T00:00:00"]),
        # 2026-06-07 and 06-14 are Sundays.
        ("@weekly", "2026-06-01T00:00", ["2026-06-07T00:00:00", "2026-06-14T00:00:00"]),
        ("@daily", "2026-06-01T12:00", ["2026-06-02T00:00:00", "2026-06-03T00:00:00"]),
        ("@MIDNIGHT", "2026-06-01T12:00", ["2026-06-02T00:00:00", "2026-06-03T00:00:00"]),
        ("@hourly", "2026-06-01T12:00", ["2026-06-01T13:00:00", "2026-06-01T14:00:00"]),
        # Names, any case: 2026-07-01 is a Wednesday, 07-03 a Friday, 07-06 a Monday.
        ("0 9 * jul,Aug MON-FRI", "2026-06-30T12:00",
         ["2026-07-01T09:00:00", "2026-07-02T09:00:00", "2026-07-03T09:00:00",
          "2026-07-06T09:00:00"]),
        # Wrapping ranges: FRI-SUN, and hours 22,0,2.
        ("0 0 * * FRI-SUN", "2026-01-05T00:00",
         ["2026-01-09T00:00:00", "2026-01-10T00:00:00", "2026-01-11T00:00:00",
          "2026-01-16T00:00:00"]),
        ("0 22-2/2 * * *", "2026-01-01T03:00",
         ["2026-01-01T22:00:00", "2026-01-02T00:00:00", "2026-01-02T02:00:00"]),
        # 7 is Sunday as well as 0.
        ("0 0 * * 7", "2026-01-01T00:00", ["2026-01-04T00:00:00"]),
        # An equal range is that one value (croniter 7 alone would read 3-3 as every month).
        ("0 0 1 3-3 *", "2026-04-01T00:00", ["2027-03-01T00:00:00", "2028-03-01T00:00:00"]),
        # L: the last day of the month, February of a leap year included.
        ("0 0 L * *", "2026-01-01T00:00", ["2026-01-31T00:00:00", "2026-02-28T00:00:00"]),
        ("0 0 L 2 *", "2027-06-01T00:00", ["2028-02-29T00:00:00"]),
        # W: the nearest weekday. 2026-02-15 is a Sunday -> Monday 16th; 2026-02-01 is a
        # Sunday -> Monday 2nd (never into January).
        ("0 0 15W * *", "2026-02-01T00:00", ["2026-02-16T00:00:00", "2026-03-16T00:00:00"]),
        ("0 0 1W * *", "2026-01-15T00:00", ["2026-02-02T00:00:00"]),
        # #: the second Monday; L in day-of-week: the last Friday (both spellings).
        ("0 0 * * MON#2", "2026-01-01T00:00", ["2026-01-12T00:00:00", "2026-02-09T00:00:00"]),
        ("0 0 * * 5L", "2026-01-01T00:00", ["2026-01-30T00:00:00", "2026-02-27T00:00:00"]),
        ("0 0 * * LFRI", "2026-01-01T00:00", ["2026-01-30T00:00:00"]),
        # OR rule: the 1st of the month OR any Monday (2026-02-01 is a Sunday).
        ("0 0 1 * MON", "2026-01-27T00:00",
         ["2026-02-01T00:00:00", "2026-02-02T00:00:00", "2026-02-09T00:00:00"]),
        # '?' means '*' in the day fields.
        ("0 12 ? * ?", "2026-01-01T00:00", ["2026-01-01T12:00:00"]),
        # Whole-year gaps: the fifth Monday of February only exists when Feb 29 is a Monday.
        ("0 0 * 2 MON#5", "2026-01-01T00:00", ["2044-02-29T00:00:00"]),
    ],
)  # fmt: skip
def test_syntax(expr: str, after: str, expected: list[str]) -> None:
    assert nexts(expr, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expr", "interval"),
    [
        ("*/15 * * * *", True),
        ("30 * * * *", True),
        ("0 1-2 * * *", True),
        ("@hourly", True),
        ("*/5 0 2 * * *", True),
        ("0 2 * * *", False),
        ("0,30 1,2 * * *", False),
        ("0 2 * * 1-5", False),  # only the time fields count
        ("@daily", False),
        ("0 0 2 * * *", False),
    ],
)
def test_is_interval(expr: str, interval: bool) -> None:
    assert parse_cron(expr).is_interval is interval


def test_schedule_is_a_stripped_reusable_value() -> None:
    sched = parse_cron("  0 * * * *\n", "Europe/Berlin")
    assert isinstance(sched, CronSchedule)
    assert sched.expression == "0 * * * *"
    assert sched.zone == ZoneInfo("Europe/Berlin")
    assert sched == parse_cron("0 * * * *", "Europe/Berlin")
    with pytest.raises(AttributeError):
        sched.expression = "x"  # type: ignore[misc]


def test_between_bounds_and_limit() -> None:
    sched = parse_cron("0 * * * *")
    got = sched.between(utc("2026-01-01T00:00"), utc("2026-01-01T03:00"), 10)
    assert iso(got) == ["01-01T01:00:00", "01-01T02:00:00", "01-01T03:00:00"]  # (after, until]
    assert len(sched.between(utc("2026-01-01T00:00"), utc("2026-01-02T00:00"), 5)) == 5
    assert sched.between(utc("2026-01-01T00:00"), utc("2026-01-02T00:00"), 0) == []
    assert sched.between(utc("2026-01-02T00:00"), utc("2026-01-01T00:00"), 10) == []
    with pytest.raises(ValueError):
        sched.between(utc("2026-01-01T00:00"), utc("2026-01-02T00:00"), -1)


def test_outputs_are_utc_whole_seconds() -> None:
    sched = parse_cron("* * * * * *", "Asia/Tokyo")
    t = sched.next_after(datetime(2026, 1, 1, 19, 0, 0, 500_000, tzinfo=ZoneInfo("Asia/Tokyo")))
    assert t == utc("2026-01-01T10:00:01")
    assert t.tzinfo is UTC
    assert t.microsecond == 0


def test_naive_datetimes_are_programming_errors() -> None:
    sched = parse_cron("0 * * * *")
    with pytest.raises(ValueError, match="timezone-aware"):
        sched.next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        sched.between(utc("2026-01-01T00:00"), datetime(2026, 1, 2), 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        OneOffSchedule(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule(None, datetime(2026, 1, 1), "UTC")


def test_preview_gives_utc_and_local_strings() -> None:
    sched = parse_cron("30 2 * * *", "Europe/Berlin")
    assert preview(sched, utc("2026-03-28T12:00"), 2) == [
        {"utc": "2026-03-29T01:00:00Z", "local": "2026-03-29T03:00:00+02:00"},
        {"utc": "2026-03-30T00:30:00Z", "local": "2026-03-30T02:30:00+02:00"},
    ]
    one = parse_schedule(None, "2026-10-25T00:30:00Z", "Europe/Berlin")
    assert preview(one, utc("2026-01-01T00:00"), 3) == [
        {"utc": "2026-10-25T00:30:00Z", "local": "2026-10-25T02:30:00+02:00"}
    ]
    assert preview(one, utc("2026-10-25T00:30"), 3) == []


# --- one-offs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-29T01:00:00Z", "2026-03-29T01:00:00"),
        ("2026-03-29T03:00:00+02:00", "2026-03-29T01:00:00"),
        ("2026-03-28T20:00:00-05:00", "2026-03-29T01:00:00"),
        (" 2026-03-29T01:00:00.750Z ", "2026-03-29T01:00:00"),  # whole seconds
    ],
)
def test_parse_instant(text: str, expected: str) -> None:
    got = parse_instant(text)
    assert got == utc(expected)
    assert got.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("2026-03-29T01:00:00", "must include a UTC offset"),
        ("2026-03-29", "must include a UTC offset"),
        ("tomorrow", "is not an ISO-8601 date-time"),
        ("", "is not an ISO-8601 date-time"),
        ("2026-02-30T00:00:00Z", "is not an ISO-8601 date-time"),
        ("0001-01-01T00:00:00+01:00", "out of the supported range"),
    ],
)
def test_parse_instant_errors(text: str, problem: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_instant(text, field="spec.run_at")
    assert err.value.field == "spec.run_at"
    assert problem in err.value.message
    assert f"'{text}'" in err.value.message


def test_one_off_schedule() -> None:
    sched = parse_schedule(None, "2026-06-01T12:00:00+02:00", "Europe/Berlin")
    assert isinstance(sched, OneOffSchedule)
    assert sched.at == utc("2026-06-01T10:00")
    assert sched.next_after(utc("2026-06-01T09:59:59")) == utc("2026-06-01T10:00")
    assert sched.next_after(utc("2026-06-01T10:00")) is None
    assert sched.between(utc("2026-06-01T00:00"), utc("2026-06-01T10:00"), 5) == [sched.at]
    assert sched.between(utc("2026-06-01T10:00"), utc("2026-06-02T00:00"), 5) == []
    assert sched.between(utc("2026-06-01T00:00"), utc("2026-06-02T00:00"), 0) == []
    # Positional construction from an aware datetime (the planner does this).
    assert OneOffSchedule(datetime(2026, 6, 1, 12, tzinfo=ZoneInfo("Europe/Berlin"))).at == sched.at
    aware = datetime(2026, 6, 1, 10, 0, 0, 999, tzinfo=UTC)
    assert parse_schedule(None, aware, "UTC") == OneOffSchedule(utc("2026-06-01T10:00"))


def test_parse_schedule_needs_exactly_one_kind() -> None:
    for cron, run_at in [("0 * * * *", "2026-06-01T10:00:00Z"), (None, None)]:
        with pytest.raises(InvalidSpec) as err:
            parse_schedule(cron, run_at, "UTC")
        assert (err.value.field, err.value.message) == (
            "cron",
            "give exactly one of cron or run_at",
        )
    assert isinstance(parse_schedule("0 * * * *", None, "Europe/Berlin"), CronSchedule)
    with pytest.raises(InvalidSpec) as err:
        parse_schedule(None, "2026-06-01T10:00:00", "UTC")
    assert err.value.field == "run_at"
    with pytest.raises(InvalidSpec) as err:
        parse_schedule("0 * * * *", None, "Mars/Olympus")
    assert err.value.field == "timezone"


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", "America/Argentina/Buenos_Aires"])
def test_load_zone(name: str) -> None:
    assert load_zone(name) == ZoneInfo(name)


@pytest.mark.parametrize(
    "name", ["", "Mars/Olympus", "europe/berlin", "../../etc/passwd", "Europe/../UTC",
             "/usr/share/zoneinfo/UTC", "localtime", "Europe", " UTC"]
)  # fmt: skip
def test_load_zone_errors(name: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        load_zone(name, field="spec.timezone")
    assert (err.value.field, err.value.message) == ("spec.timezone", f"unknown time zone '{name}'")


FIELD_COUNT = (
    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, got "
)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "cron expression is empty"),
        ("  ", "cron expression is empty"),
        ("* * * *", FIELD_COUNT + "4"),
        ("0 0 0 1 1 * 2027", FIELD_COUNT + "7"),
        ("61 * * * *", "minute field '61' is out of range 0-59"),
        ("60 * * * * *", "second field '60' is out of range 0-59"),
        ("0 24 * * *", "hour field '24' is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("0 0 32 * *", "day-of-month field '32' is out of range 1-31"),
        ("0 0 * 13 *", "month field '13' is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8' is out of range 0-7"),
        ("1-70 * * * *", "minute field '1-70' is out of range 0-59"),
        ("0 0 * * MOX", "day-of-week field 'MOX' is not a valid value"),
        ("0 0 * FOO *", "month field 'FOO' is not a valid value"),
        ("0 MON * * *", "hour field 'MON' is not a valid value"),
        ("? * * * *", "minute field '?' is not a valid value"),
        ("0 0 * ? *", "month field '?' is not a valid value"),
        ("1,,2 * * * *", "minute field '' is not a valid value"),
        ("5- * * * *", "minute field '5-' is not a valid value"),
        ("0 0 LW * *", "day-of-month field 'LW' is not a valid value"),
        ("*/0 * * * *", "minute field '*/0' has a step outside 1-59"),
        ("0 */24 * * *", "hour field '*/24' has a step outside 1-23"),
        ("R * * * *", "minute field 'R' uses random or hashed values (R, H)"),
        ("0 H * * *", "hour field 'H' uses random or hashed values (R, H)"),
        ("0 0 * * MON#6", "day-of-week field 'MON#6' has an nth weekday outside 1-5"),
        ("0 0 32W * *", "day-of-month field '32W' is out of range 1-31"),
        ("0 0 15W,20 * *", "day-of-month field '15W,20' cannot combine W with other values"),
        ("0 0 * * MON#2,TUE", "day-of-week field 'MON#2,TUE' cannot mix # or L with plain days"),
        ("@reboot", "'@reboot' is not supported; use one of @yearly"),
        ("@every 5m", "'@every 5m' is not supported"),
        ("0 0 1 * MON#2", "day-of-month field '1' and day-of-week field 'MON#2' cannot both"),
        ("0 0 30 2 *", "never fires: no date matches day-of-month field '30' in month field '2'"),
        ("0 0 31 4,6,9,11 *", "never fires: no date matches day-of-month field '31'"),
    ],
)
def test_cron_errors_name_the_field_and_the_problem(expr: str, message: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_cron(expr, "UTC", field="spec.cron")
    assert err.value.field == "spec.cron"
    assert err.value.message.startswith(message), err.value.message
