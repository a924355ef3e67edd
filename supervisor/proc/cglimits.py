"""The cgroup limits a handler may ask for (memory, swap, CPU, tasks), as parsed from its
table: values only; cgchild.py writes them, cgroups.py says whether this host can enforce
them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Limits:
    """A handler's cgroup limits; None: not limited."""

    memory_max: int | None = None  # bytes
    memory_swap_max: int | None = None  # bytes of swap (v2 semantics)
    cpu_max: float | None = None  # cores
    tasks_max: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in self.items().values())

    def items(self) -> dict[str, int | float | None]:
        return {
            "memory_max": self.memory_max,
            "memory_swap_max": self.memory_swap_max,
            "cpu_max": self.cpu_max,
            "tasks_max": self.tasks_max,
        }


LIMIT_KEYS = tuple(Limits().items())


def parse_size(key: str, value: object, least: int = 1) -> int:
    """Bytes: an integer, or a string with K, M, G or T (powers of 1024)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        m = re.fullmatch(r"(\d+)\s*([KMGT]?)i?B?", value.strip(), re.IGNORECASE)
        if m:
            number = int(m[1]) * _UNITS.get(m[2].upper(), 1)
    if number is None or number < least:
        kind = "a positive" if least else "a"
        raise ValueError(f'{key} must be {kind} number of bytes, or with K, M, G or T ("256M")')
    return number


def parse_limits(spec: Mapping[str, object]) -> Limits:
    """The cgroup limits of a handler's TOML table; ValueError names the field."""
    values: dict[str, int | float] = {}
    if "memory_max" in spec:
        values["memory_max"] = parse_size("memory_max", spec["memory_max"])
    if "memory_swap_max" in spec:  # 0: no swap at all
        values["memory_swap_max"] = parse_size("memory_swap_max", spec["memory_swap_max"], 0)
    if "cpu_max" in spec:
        cores = spec["cpu_max"]
        if isinstance(cores, bool) or not isinstance(cores, int | float) or cores < 0.01:
            raise ValueError(
                "cpu_max must be a number of cores, at least 0.01 (1.5: one and a half)"
            )
        values["cpu_max"] = float(cores)
    if "tasks_max" in spec:
        tasks = spec["tasks_max"]
        if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
            raise ValueError("tasks_max must be a positive integer (processes and threads)")
        values["tasks_max"] = tasks
    return Limits(**values)  # type: ignore[arg-type]


def mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"
