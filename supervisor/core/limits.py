"""A job's concurrency limits and a concurrency group's fields as users give them: the
input rules only (groups.py stores them; claim_runs enforces them)."""

from __future__ import annotations

from typing import Any

from supervisor.core.domain import JobLimits
from supervisor.core.errors import InvalidSpec, InvalidSpecs
from supervisor.core.jobfields import FIELD
from supervisor.core.model import TYPE, TYPE_RULE, Overlap

LIMIT_FIELDS = ("concurrency_group", "max_concurrent")
MAX_RUNNING = 10000  # a group's limit (the concurrency_groups check)
MAX_CONCURRENT = int(FIELD["max_concurrent"].most or 0)  # a job's own (the jobs check)
GROUP_RULE = TYPE_RULE  # the same shape as a handler type: 1-100 of A-Za-z0-9_.:-


def _whole(errors: list[InvalidSpec], field: str, value: Any, hi: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(InvalidSpec(field, f"must be a whole number, got {value!r}"))
        return None
    if not 1 <= value <= hi:
        errors.append(InvalidSpec(field, f"must be between 1 and {hi}, got {value}"))
        return None
    return value


def parse_limits(
    errors: list[InvalidSpec], body: dict[str, Any], base: JobLimits, overlap: Overlap | None
) -> JobLimits:
    """The job fields concurrency_group (a group's name or null) and max_concurrent (1 to
    1000 or null) over `base`; max_concurrent above 1 needs overlap `allow` (skip and wait
    run one at a time already)."""
    group, most = base.group, base.max_concurrent
    if "concurrency_group" in body:
        group = body["concurrency_group"]
        if group is not None and (not isinstance(group, str) or not TYPE.fullmatch(group)):
            errors.append(InvalidSpec("concurrency_group", f"{GROUP_RULE}, or null"))
            group = None
    if "max_concurrent" in body:
        most = body["max_concurrent"]
        if most is not None:
            most = _whole(errors, "max_concurrent", most, MAX_CONCURRENT)
    if most is not None and most > 1 and overlap not in (None, Overlap.ALLOW):
        errors.append(
            InvalidSpec(
                "max_concurrent",
                f"must be 1 or null with overlap {overlap}: skip and wait already run one at "
                "a time; set overlap allow to run several",
            )
        )
    return JobLimits(group, most)


def validate_group(body: Any, *, create: bool) -> tuple[str | None, int | None]:
    """(name, max_running) of a group's create (both required) or update (max_running)."""
    if not isinstance(body, dict):
        raise InvalidSpecs([InvalidSpec("body", "must be a JSON object")])
    allowed = {"name", "max_running"} if create else {"max_running"}
    errors = [InvalidSpec(k, "unknown field") for k in sorted(set(body) - allowed)]
    name = body.get("name")
    if create:
        if name is None:
            errors.append(InvalidSpec("name", "is required"))
        elif not isinstance(name, str) or not TYPE.fullmatch(name):
            errors.append(InvalidSpec("name", GROUP_RULE))
    most = None
    if "max_running" not in body:
        errors.append(InvalidSpec("max_running", "is required"))
    else:
        most = _whole(errors, "max_running", body["max_running"], MAX_RUNNING)
    if errors:
        raise InvalidSpecs(errors)
    return name, most
