"""ISO 8601 instants as people and URLs write them, read one way for the API's query
parameters and the dashboard's forms (part of the request layer, request.py). A leaf with
no I/O, so the CLI's `schedule preview` (ui/preview.py) can use it cheaply.

A request body's instants (run_at, a backfill's from and to) are jobspec's: whole seconds,
an offset required (schedule.parse_instant); both keep to jobspec's supported range.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from supervisor.core.errors import InvalidSpec
from supervisor.core.jobspec import checked_instant


def parse_iso(text: str) -> datetime:
    """datetime.fromisoformat (Z for UTC included), with the '+' of an offset that an
    unencoded query string turned into a space put back ("...T00:00:00 01:00"). Naive when
    the text has no offset; ValueError when it is no ISO 8601 date-time."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        head, sep, tail = text.rpartition(" ")
        if sep and ":" in tail and "T" in head:
            return datetime.fromisoformat(f"{head}+{tail}")
        raise


def instant(
    text: str, name: str, *, naive: tzinfo | None = None, example: str | None = None
) -> datetime:
    """The instant `text` names, in UTC with its microseconds, or InvalidSpec(name): not a
    date-time, without an offset when `naive` is None (else read in that zone), or outside
    jobspec's supported range. `example`: a form's wording of the first ("must be a date
    and time, e.g. ..."); without it the message quotes the text, as the API's do."""
    try:
        at = parse_iso(text)
    except ValueError:
        rule = f"must be a date and time, e.g. {example}" if example else None
        raise InvalidSpec(name, rule or f"'{text}' is not an ISO-8601 date-time") from None
    if at.tzinfo is None or at.utcoffset() is None:
        if naive is None:
            raise InvalidSpec(name, f"'{text}' must include a UTC offset")
        at = at.replace(tzinfo=naive)
    return checked_instant(at, name, text)
