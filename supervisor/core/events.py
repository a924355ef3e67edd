"""Notification events and subscriptions as values: the Event kinds, a job's `notify` rules
and a channel's settings, with their validation (every bad field named). No I/O: the
operations are in channels.py, the statements in notify.sql, the signing in webhooks.py.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from supervisor.core import egress
from supervisor.core.egress import url_problem
from supervisor.core.errors import InvalidSpec, InvalidSpecs
from supervisor.core.jobfields import FIELD
from supervisor.core.model import MAX_URL, NAME, NAME_RULE


class Event(StrEnum):
    """What a channel can be told (DESIGN.md, Notifications: who raises each, and when)."""

    RUN_FAILED = "run_failed"  # an attempt failed, a retry is scheduled (opt-in, noisy)
    RUN_DEAD = "run_dead"  # out of attempts, or exit 65
    RUN_MISSED = "run_missed"  # an instant recorded skipped because it was missed
    RUN_OVERLAP_SKIPPED = "run_overlap_skipped"
    RUN_LATE = "run_late"  # a due run waited longer than late_after_seconds (once per run)
    JOB_FAILING = "job_failing"  # a dead streak reached the job's job_failing_after (once)
    JOB_RECOVERED = "job_recovered"  # the first success after job_failing
    JOB_AUTO_PAUSED = "job_auto_paused"  # pause_after_failures reached: the job was paused
    JOB_SILENT = "job_silent"  # no success for expect_success_within_seconds (once per episode)
    WORKER_LOST = "worker_lost"  # a supervisor stopped renewing; its runs were reaped
    TEST = "test"  # POST /v1/channels/{id}/test; not subscribable


SUBSCRIBABLE = [e.value for e in Event if e is not Event.TEST]
FORMATS = ("punchclock", "slack")
MAX_RULES = int(FIELD["notify"].most or 0)  # a job's notify list
MAX_HEADERS = 20
# Headers a channel may not set: the request's framing and the signature's own.
RESERVED_HEADERS = {"content-type", "content-length", "host", "transfer-encoding", "connection"}
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
SECRET_RULE = "must be whsec_ followed by base64 of 24 to 64 random bytes"


@dataclass(frozen=True, slots=True)
class NotifyRule:
    """One entry of a job's `notify` list: these events of the job go to this channel."""

    channel: str
    events: tuple[str, ...]

    def view(self) -> dict[str, Any]:
        return {"channel": self.channel, "events": list(self.events)}


def _events(errors: list[InvalidSpec], field: str, value: Any, empty_ok: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(InvalidSpec(field, "must be a list of event names"))
        return ()
    if not value and not empty_ok:
        errors.append(InvalidSpec(field, "must name at least one event"))
    for i, name in enumerate(value):
        if name not in SUBSCRIBABLE:
            errors.append(
                InvalidSpec(
                    f"{field}.{i}", f"unknown event {name!r}; one of {', '.join(SUBSCRIBABLE)}"
                )
            )
    if len(set(value)) != len(value):
        errors.append(InvalidSpec(field, "lists an event twice"))
    return tuple(value)


def parse_notify(errors: list[InvalidSpec], value: Any) -> tuple[NotifyRule, ...]:
    """A job's `notify` field -> rules. Whether each channel exists is checked where the
    rules are stored (channels.set_job_notify), in the job's transaction."""
    if not isinstance(value, list):
        errors.append(InvalidSpec("notify", "must be a list of {channel, events}"))
        return ()
    if len(value) > MAX_RULES:
        errors.append(InvalidSpec("notify", f"at most {MAX_RULES} channels"))
        return ()
    rules: list[NotifyRule] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        at = f"notify.{i}"
        if not isinstance(item, dict):
            errors.append(InvalidSpec(at, "must be an object with channel and events"))
            continue
        for key in sorted(set(item) - {"channel", "events"}):
            errors.append(InvalidSpec(f"{at}.{key}", "unknown field"))
        channel = item.get("channel")
        if not isinstance(channel, str) or not NAME.fullmatch(channel):
            errors.append(InvalidSpec(f"{at}.channel", "must be a channel name"))
            continue
        if channel in seen:
            errors.append(InvalidSpec(f"{at}.channel", f"channel {channel!r} is listed twice"))
        seen.add(channel)
        if "events" not in item:
            errors.append(InvalidSpec(f"{at}.events", "is required"))
            continue
        rules.append(NotifyRule(channel, _events(errors, f"{at}.events", item["events"], False)))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """A channel as stored. `secret` and `headers` never leave through a view."""

    name: str
    url: str
    format: str = "punchclock"
    secret: str | None = None
    headers: dict[str, str] | None = None
    all_jobs: tuple[str, ...] = ()
    include_payload: bool = False  # events carry the run's payload (opt-in)


CHANNEL_FIELDS = {"name", "url", "format", "secret", "headers", "all_jobs", "include_payload"}


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Empty allow-list: any host. An entry `example.com` matches that host; `.example.com`
    its subdomains too."""
    if not allowed:
        return True
    host = host.lower().rstrip(".")
    for entry in (a.lower().rstrip(".") for a in allowed):
        if host == entry.lstrip(".") or (entry.startswith(".") and host.endswith(entry)):
            return True
    return False


def check_url(
    errors: list[InvalidSpec], value: Any, allowed: tuple[str, ...], field: str = "url"
) -> str | None:
    """An http(s) URL (a channel's, a ping's, the heartbeat's), parsed with yarl as aiohttp
    sends it: no refused address literal unless `allowed` (egress.Destinations) allows
    private ones, and a host the allow-list admits (egress.url_problem for the rules)."""
    if not isinstance(value, str) or len(value) > MAX_URL:
        errors.append(
            InvalidSpec(field, f"must be an http or https URL of at most {MAX_URL} characters")
        )
        return None
    url, problem = url_problem(value, allowed)
    if url is None:
        errors.append(InvalidSpec(field, problem or "is not a valid URL"))
        return None
    host = url.host or ""
    if not host_allowed(host, allowed):
        errors.append(InvalidSpec(field, f"host {host!r} is not in notify_allowed_hosts"))
        return None
    return value


def check_ping_url(errors: list[InvalidSpec], value: Any, allowed: tuple[str, ...]) -> str | None:
    """A job's ping_url: /start and /fail are appended to its path, so no query or fragment."""
    url = check_url(errors, value, allowed, "ping_url")
    if url is not None and ("?" in url or "#" in url):
        errors.append(
            InvalidSpec(
                "ping_url", "must not have a query or fragment (/start and /fail are appended)"
            )
        )
        return None
    return url


def destination(url: str) -> str:
    """Scheme, host and port only: a URL's path and query may hold a token (Slack's do)."""
    return egress.destination(url)


def check_secret(errors: list[InvalidSpec], value: Any) -> str | None:
    if not isinstance(value, str) or not value.startswith("whsec_"):
        errors.append(InvalidSpec("secret", SECRET_RULE))
        return None
    try:
        key = base64.b64decode(value[6:], validate=True)
    except (binascii.Error, ValueError):
        errors.append(InvalidSpec("secret", SECRET_RULE))
        return None
    if not 24 <= len(key) <= 64:
        errors.append(InvalidSpec("secret", SECRET_RULE))
        return None
    return value


def _headers(errors: list[InvalidSpec], value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict) or len(value) > MAX_HEADERS:
        errors.append(InvalidSpec("headers", f"must be an object of at most {MAX_HEADERS} strings"))
        return None
    for name, text in value.items():
        lower = name.lower()
        if (
            not HEADER_NAME.fullmatch(name)
            or lower in RESERVED_HEADERS
            or lower.startswith("webhook-")
        ):
            errors.append(InvalidSpec(f"headers.{name}", "is not a header name a channel may set"))
        elif not isinstance(text, str) or len(text) > 4000 or any(ord(c) < 32 for c in text):
            errors.append(
                InvalidSpec(f"headers.{name}", "must be a string without control characters")
            )
    return value


def validate_channel(
    body: Any, allowed: tuple[str, ...], base: ChannelSpec | None = None
) -> ChannelSpec:
    """Request body -> ChannelSpec; with `base` (the stored channel) it is a PATCH."""
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    errors: list[InvalidSpec] = []
    for key in sorted(set(body) - CHANNEL_FIELDS):
        errors.append(InvalidSpec(key, "unknown field"))
    out: dict[str, Any] = {} if base is None else {
        "name": base.name, "url": base.url, "format": base.format, "secret": base.secret,
        "headers": base.headers, "all_jobs": base.all_jobs,
        "include_payload": base.include_payload,
    }  # fmt: skip
    if base is None:
        errors += [InvalidSpec(k, "is required") for k in ("name", "url") if k not in body]
    for key in sorted(CHANNEL_FIELDS - {"secret"}):
        if key in body and body[key] is None:
            errors.append(InvalidSpec(key, "cannot be null"))
    body = {k: v for k, v in body.items() if v is not None or k == "secret"}
    if "name" in body:
        if not isinstance(body["name"], str) or not NAME.fullmatch(body["name"]):
            errors.append(InvalidSpec("name", NAME_RULE))
        out["name"] = body["name"]
    if "url" in body:
        out["url"] = check_url(errors, body["url"], allowed)
    if "format" in body:
        if body["format"] not in FORMATS:
            errors.append(InvalidSpec("format", f"must be one of {', '.join(FORMATS)}"))
        out["format"] = body["format"]
    if "secret" in body:
        out["secret"] = None if body["secret"] is None else check_secret(errors, body["secret"])
    if "headers" in body:
        out["headers"] = _headers(errors, body["headers"])
    if "all_jobs" in body:
        out["all_jobs"] = _events(errors, "all_jobs", body["all_jobs"], True)
    if "include_payload" in body:
        if not isinstance(body["include_payload"], bool):
            errors.append(InvalidSpec("include_payload", "must be true or false"))
        out["include_payload"] = body["include_payload"]
    if not errors and out.get("format", "punchclock") == "punchclock" and not out.get("secret"):
        errors.append(InvalidSpec("secret", "is required for the punchclock format (it signs)"))
    if errors:
        raise InvalidSpecs(errors)
    return ChannelSpec(**out)
