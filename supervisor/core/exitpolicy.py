"""A job's exit-code policy: which endings of its handler count as success, which end the
run at once (dead), and which are retried (handlers/README.md, Exit-code policy).

An ending is the handler's own doing: an exit status ("0".."255"), `signal` (killed by a
signal we did not send), `timeout`, or `oom_killed`. Endings we caused (a lost lease, a
shutdown, a cancel) are not the handler's and are always retried. Pure values, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from supervisor.core.errors import InvalidSpec

SIGNAL, TIMEOUT, OOM_KILLED = "signal", "timeout", "oom_killed"
NAMED = (SIGNAL, TIMEOUT, OOM_KILLED)
EXIT_PERMANENT = 65  # EX_DATAERR: by default the handler says retrying cannot help
FIELDS = ("success_exit_codes", "dead_on", "retry_on")


@dataclass(frozen=True, slots=True)
class ExitPolicy:
    success_exit_codes: tuple[int, ...] = (0,)
    dead_on: tuple[str, ...] = (str(EXIT_PERMANENT),)
    retry_on: tuple[str, ...] | None = None  # None: every failure not in dead_on

    def retries(self, ending: str) -> bool:
        """Whether a failure that ended so is tried again (attempts allowing)."""
        if ending in self.dead_on:
            return False
        return self.retry_on is None or ending in self.retry_on

    @classmethod
    def from_columns(
        cls, success: Sequence[int], dead_on: Sequence[str], retry_on: Sequence[str] | None
    ) -> ExitPolicy:
        return cls(tuple(success), tuple(dead_on), None if retry_on is None else tuple(retry_on))

    def columns(self) -> tuple[list[int], list[str], list[str] | None]:
        retry = None if self.retry_on is None else list(self.retry_on)
        return list(self.success_exit_codes), list(self.dead_on), retry

    def view(self) -> dict[str, Any]:
        """The API's form: exit statuses as numbers, named endings as strings."""
        return {
            "success_exit_codes": list(self.success_exit_codes),
            "dead_on": [_shown(e) for e in self.dead_on],
            "retry_on": None if self.retry_on is None else [_shown(e) for e in self.retry_on],
        }


DEFAULT_POLICY = ExitPolicy()


def _shown(ending: str) -> int | str:
    return int(ending) if ending.isdigit() else ending


def _exit_code(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return value
    return None


def _endings(errors: list[InvalidSpec], field: str, value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        errors.append(InvalidSpec(field, "must be a list of exit statuses (0-255) or names"))
        return None
    out: list[str] = []
    for i, item in enumerate(value):
        code = _exit_code(item)
        if code is None and item not in NAMED:
            errors.append(
                InvalidSpec(
                    f"{field}[{i}]",
                    f"must be an exit status 0-255 or one of {', '.join(NAMED)}, got {item!r}",
                )
            )
            continue
        ending = str(code) if code is not None else str(item)
        if ending in out:
            errors.append(InvalidSpec(f"{field}[{i}]", f"{item!r} is listed twice"))
            continue
        out.append(ending)
    return tuple(out)


def parse_policy(errors: list[InvalidSpec], body: dict[str, Any], base: ExitPolicy) -> ExitPolicy:
    """The policy from the body's fields merged into `base`; every bad entry named."""
    success, dead_on, retry_on = base.success_exit_codes, base.dead_on, base.retry_on
    bad = len(errors)
    if "success_exit_codes" in body:
        value = body["success_exit_codes"]
        codes = [_exit_code(v) for v in value] if isinstance(value, list) else None
        if not value or codes is None:
            errors.append(
                InvalidSpec("success_exit_codes", "must be a non-empty list of exit statuses")
            )
        else:
            for i, (item, code) in enumerate(zip(value, codes, strict=True)):
                if code is None:
                    errors.append(
                        InvalidSpec(f"success_exit_codes[{i}]", f"must be 0-255, got {item!r}")
                    )
            success = tuple(dict.fromkeys(c for c in codes if c is not None))
    if "dead_on" in body:
        dead_on = _endings(errors, "dead_on", body["dead_on"]) or ()
    if "retry_on" in body:
        retry_on = (
            None if body["retry_on"] is None else _endings(errors, "retry_on", body["retry_on"])
        )
    if len(errors) > bad:
        return base
    for field, endings in (("dead_on", dead_on), ("retry_on", retry_on or ())):
        for i, ending in enumerate(endings):
            if ending.isdigit() and int(ending) in success:
                errors.append(
                    InvalidSpec(f"{field}[{i}]", f"{ending} is a success exit code of this job")
                )
    for i, ending in enumerate(retry_on or ()):
        if ending in dead_on:
            errors.append(InvalidSpec(f"retry_on[{i}]", f"{_shown(ending)!r} is also in dead_on"))
    return ExitPolicy(success, dead_on, retry_on)
