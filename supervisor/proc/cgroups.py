"""A cgroup per run: what this host offers (probe), the supervisor's own preparation (a leaf
for itself when v2 controllers are delegated), and one run's cgroup (create with limits, the
join trampoline, signal, kill, account, remove). Killing lives in cgkill.py (the keeper's too).

Layout (DESIGN.md, Handler isolation): runs are `pc-<supervisor pid>-<id>` directories beside
the supervisor, under the cgroup it was started in (its "base"): in the v2 tree, and in each
v1 hierarchy whose controller a run needs (memory, pids, cpu, cpuacct, freezer).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from supervisor.proc import cgkill

MOUNTINFO = "/proc/self/mountinfo"
MEMBERSHIP = "/proc/self/cgroup"
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
V2_CONTROLLERS = ("memory", "pids", "cpu")  # the ones a run's limits and accounting use
LEAF = "supervisor"
PREFIX = "pc-"
CPU_PERIOD_US = 100_000
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# What the trampoline exits with when it cannot join the run's cgroup (never runs the handler).
JOIN_FAILED = 125
JOIN_FAILED_TEXT = "punchclock: cannot move the run into its cgroup"


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


@dataclass(frozen=True)
class Host:
    """What this host offers for a cgroup per run. Directories are absolute sysfs paths."""

    v2: str | None = None  # the base directory in the v2 tree (runs are created in it)
    v2_kill: bool = False  # cgroup.kill exists (kernel 5.14+)
    v2_controllers: frozenset[str] = frozenset()  # usable by runs (enabled in base after prepare)
    v2_needs_leaf: bool = False  # base is no root: the supervisor moves to base/supervisor
    v1: Mapping[str, str] = field(default_factory=dict)  # controller -> writable base directory
    problem: str | None = None  # why runs get no cgroup here, else None

    @property
    def kill_method(self) -> str | None:
        if self.problem is not None:
            return None
        if self.v2 is not None and self.v2_kill:
            return "cgroup.kill"
        if "freezer" in self.v1:
            return "v1 freezer"
        return None

    @property
    def usable(self) -> bool:
        return self.kill_method is not None

    def _has(self, controller: str) -> bool:
        return controller in self.v2_controllers or controller in self.v1

    def describe(self) -> str:
        """One line for `check` and `handlers list`: which isolation this host gives runs."""
        if not self.usable:
            why = self.problem or "no cgroup.kill in a writable v2 tree and no v1 freezer"
            return f"process group + environment marker (no cgroup per run: {why})"
        where = [f"v2 {self.v2}" if self.v2 else "", *(f"v1 {c}" for c in sorted(self.v1))]
        ctl = sorted({*self.v2_controllers, *(c for c in self.v1 if c in V2_CONTROLLERS)})
        return (
            f"cgroup per run (kill: {self.kill_method}; limits: {', '.join(ctl) or 'none'}; "
            f"{'; '.join(w for w in where if w)})"
        )

    def limit_problem(self, limits: Limits) -> str | None:
        """Why this host cannot enforce `limits` (naming the field), or None."""
        if not self.usable:
            return f"no cgroup per run on this host: {self.describe()}"
        needs = {"memory_max": "memory", "memory_swap_max": "memory", "cpu_max": "cpu",
                 "tasks_max": "pids"}  # fmt: skip
        for key, value in limits.items().items():
            if value is None:
                continue
            controller = needs[key]
            if not self._has(controller):
                return (
                    f"{key}: this host cannot enforce it: no {controller} controller (not "
                    f"enabled in the v2 tree at {self.v2 or '-'}, no writable v1 {controller} "
                    "hierarchy)"
                )
        if limits.memory_swap_max is not None:
            if limits.memory_max is None:
                return "memory_swap_max: set memory_max too"
            if (
                "memory" not in self.v2_controllers
                and not Path(
                    self.v1.get("memory", "/nonexistent"), "memory.memsw.limit_in_bytes"
                ).exists()
            ):
                return "memory_swap_max: this host cannot enforce it: no swap accounting"
        return None

    def plan(self, limits: Limits) -> tuple[bool, tuple[str, ...]]:
        """(use the v2 tree, v1 controllers) a run with `limits` needs on this host."""
        use_v2 = self.v2 is not None
        v1: list[str] = []
        if not (use_v2 and self.v2_kill):
            v1.append("freezer")
        if not use_v2:
            v1.append("cpuacct")  # accounting; v2 has cpu.stat in every cgroup
        if "memory" not in self.v2_controllers:
            v1.append("memory")  # peak memory and memory limits
        if limits.tasks_max is not None and "pids" not in self.v2_controllers:
            v1.append("pids")
        if limits.cpu_max is not None and "cpu" not in self.v2_controllers:
            v1.append("cpu")
        return use_v2, tuple(c for c in v1 if c in self.v1)


def _mounts(mountinfo: str) -> tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]:
    """(v2 (mount root, mount point), {v1 controller: (mount root, mount point)})."""
    v2 = None
    v1: dict[str, tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if rest[0] == "cgroup2" and v2 is None:
            v2 = (root, point)
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                if option in V1_CONTROLLERS and option not in v1:
                    v1[option] = (root, point)
    return v2, v1


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def _membership(text: str) -> tuple[str | None, dict[str, str]]:
    """(v2 path, {v1 controller: path}) from /proc/self/cgroup."""
    v2 = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        else:
            for c in controllers.split(","):
                v1[c] = path
    return v2, v1


def _join(mount: tuple[str, str], path: str) -> str | None:
    root, point = mount
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None  # our cgroup is outside what this mount shows
    rel = path[len(root) :] if root != "/" else path
    return os.path.normpath(point + "/" + rel.lstrip("/"))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def probe(mountinfo: str | None = None, membership: str | None = None) -> Host:
    """What this host offers (reads sysfs and /proc; changes nothing)."""
    mountinfo = _read(MOUNTINFO) if mountinfo is None else mountinfo
    membership = _read(MEMBERSHIP) if membership is None else membership
    mount2, mounts1 = _mounts(mountinfo)
    path2, paths1 = _membership(membership)
    v2 = v2_kill = None
    controllers: frozenset[str] = frozenset()
    needs_leaf = False
    problems = []
    if mount2 is not None and path2 is not None:
        base = _join(mount2, path2)
        if base is None or not os.access(base, os.W_OK):
            problems.append(f"the v2 cgroup {base or path2} is not writable by this supervisor")
        elif "\t" in base or "\n" in base:
            problems.append(f"the v2 cgroup path {base!r} has a tab or newline")
        else:
            v2 = base
            is_root = os.path.normpath(base) == os.path.normpath(mount2[1])
            v2_kill = Path(base, "cgroup.kill").exists() or (is_root and _root_has_kill(base))
            controllers = frozenset(_read(os.path.join(base, "cgroup.controllers")).split()) & set(
                V2_CONTROLLERS
            )
            if base.endswith("/" + LEAF) and not is_root:  # restarted inside our own leaf
                base = os.path.dirname(base)
                v2 = base
            needs_leaf = bool(controllers) and not is_root
    v1 = {}
    for controller, mount in mounts1.items():
        if controller not in paths1:
            continue
        d = _join(mount, paths1[controller])
        if d is not None and os.access(d, os.W_OK) and "\t" not in d and "\n" not in d:
            v1[controller] = d
    host = Host(v2, bool(v2_kill), controllers, needs_leaf, v1)
    if not host.usable:
        problems.append("no cgroup.kill in a writable v2 tree and no writable v1 freezer")
        return replace(host, problem="; ".join(problems))
    return host


def _root_has_kill(root: str) -> bool:
    """The v2 root has no cgroup.kill of its own; its children do on kernels that have it."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.is_dir(follow_symlinks=False):
                return Path(entry.path, "cgroup.kill").exists()
    return os.uname().release.split(".")[:2] >= ["5", "14"]  # empty tree: trust the version


def prepare(host: Host) -> tuple[Host, str | None]:
    """Once, in the supervisor, before the keeper and any handler start: remove run cgroups
    left by dead supervisors, and when v2 controllers are delegated, move this process into
    base/supervisor (no internal processes) and enable them for the runs. Returns the host as
    it now is, and a warning when controllers could not be enabled (their limits are then
    rejected)."""
    if not host.usable:
        return host, None
    sweep(host)
    if host.v2 is None or not host.v2_controllers:
        return host, None
    try:
        if host.v2_needs_leaf and _v2_members(host.v2):
            leaf = os.path.join(host.v2, LEAF)
            os.makedirs(leaf, exist_ok=True)
            _write(os.path.join(leaf, "cgroup.procs"), "0")
        wanted = " ".join(f"+{c}" for c in sorted(host.v2_controllers))
        _write(os.path.join(host.v2, "cgroup.subtree_control"), wanted)
    except OSError as exc:
        enabled = frozenset(_read(os.path.join(host.v2, "cgroup.subtree_control")).split())
        warning = (
            f"cannot enable the cgroup v2 controllers {sorted(host.v2_controllers)} in "
            f"{host.v2} ({exc.strerror}): only {sorted(enabled) or 'none'} can limit runs"
        )
        return replace(host, v2_controllers=host.v2_controllers & enabled), warning
    return host, None


def _v2_members(directory: str) -> list[int]:
    return cgkill.members(directory)


def sweep(host: Host) -> list[str]:
    """rmdir run cgroups of supervisors that are gone (pc-<pid>-*, pid not alive): empty
    ones only (a populated one belongs to a keeper still killing, or is kept for a look)."""
    removed = []
    bases = {*(() if host.v2 is None else (host.v2,)), *host.v1.values()}
    for base in bases:
        with contextlib.suppress(OSError):
            for entry in os.scandir(base):
                m = re.fullmatch(rf"{PREFIX}(\d+)-\w+", entry.name)
                stale = m and entry.is_dir() and not _alive(int(m[1]))
                if stale and not cgkill.remove([entry.path]):
                    removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class RunCgroup:
    """One attempt's cgroup: a v2 directory and/or v1 directories, all leaves."""

    def __init__(self, name: str, v2: str | None, v1: dict[str, str], limits: Limits) -> None:
        self.name = name
        self.v2 = v2
        self.v1 = v1
        self.limits = limits
        self.dirs = tuple(dict.fromkeys([*(() if v2 is None else (v2,)), *v1.values()]))

    @classmethod
    def create(cls, host: Host, run_id: str, limits: Limits) -> RunCgroup:
        """mkdir the run's directories and write its limits. OSError: nothing is left."""
        name = f"{PREFIX}{os.getpid()}-{run_id}"
        use_v2, controllers = host.plan(limits)
        v2 = os.path.join(host.v2, name) if use_v2 and host.v2 else None
        v1 = {c: os.path.join(host.v1[c], name) for c in controllers}
        group = cls(name, v2, v1, limits)
        made: list[str] = []
        try:
            for d in group.dirs:
                # 0755 whatever our umask: a handler of another uid must not make sub-cgroups
                # (the run's could not be removed); the files are ours, 0644 (DESIGN.md).
                os.mkdir(d, 0o755)
                made.append(d)
            group._write_limits(host)
        except OSError:
            cgkill.remove(made)
            raise
        return group

    def _write_limits(self, host: Host) -> None:
        lim = self.limits
        if self.v2 is not None and host.v2_controllers:
            if "memory" in host.v2_controllers:
                _write(os.path.join(self.v2, "memory.oom.group"), "1")
                if lim.memory_max is not None:
                    _write(os.path.join(self.v2, "memory.max"), str(lim.memory_max))
                if lim.memory_swap_max is not None:
                    _write(os.path.join(self.v2, "memory.swap.max"), str(lim.memory_swap_max))
            if lim.cpu_max is not None and "cpu" in host.v2_controllers:
                quota = max(1000, round(lim.cpu_max * CPU_PERIOD_US))
                _write(os.path.join(self.v2, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            if lim.tasks_max is not None and "pids" in host.v2_controllers:
                _write(os.path.join(self.v2, "pids.max"), str(lim.tasks_max))
        if (mem := self.v1.get("memory")) is not None and lim.memory_max is not None:
            _write(os.path.join(mem, "memory.limit_in_bytes"), str(lim.memory_max))
            if lim.memory_swap_max is not None:
                both = lim.memory_max + lim.memory_swap_max
                _write(os.path.join(mem, "memory.memsw.limit_in_bytes"), str(both))
        if (pids := self.v1.get("pids")) is not None and lim.tasks_max is not None:
            _write(os.path.join(pids, "pids.max"), str(lim.tasks_max))
        if (cpu := self.v1.get("cpu")) is not None and lim.cpu_max is not None:
            _write(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            quota = max(1000, round(lim.cpu_max * CPU_PERIOD_US))
            _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(quota))

    def join_argv(self) -> list[str]:
        """An argv prefix: /bin/sh writes itself ("0": the writer) into every directory's
        cgroup.procs, then execs the handler, so the handler and all it forks are born inside
        (posix_spawn has no pre-exec hook; Python code after fork is unsafe in a threaded
        process). If it cannot join, it exits JOIN_FAILED without running the handler."""
        joins = " && ".join(f"echo 0 >{shlex.quote(d + '/cgroup.procs')}" for d in self.dirs)
        script = (
            f"{{ {joins}; }} 2>/dev/null || {{ echo {shlex.quote(JOIN_FAILED_TEXT)} >&2; "
            f'exit {JOIN_FAILED}; }}; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "punchclock-cgroup"]

    def members(self) -> list[int]:
        """The pids in the run's cgroup now (every descendant, whatever it did)."""
        return cgkill.members(self.dirs[0]) if self.dirs else []

    def populated(self) -> bool:
        if self.v2 is not None:
            for line in _read(os.path.join(self.v2, "cgroup.events")).splitlines():
                if line.startswith("populated "):
                    return line.split()[1] != "0"
        return bool(self.members())

    def signal(self, sig: int) -> None:
        """Send `sig` to every member (SIGKILL goes through kill())."""
        if sig == signal.SIGKILL:
            self.kill()
            return
        for pid in self.members():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def kill(self) -> None:
        if not cgkill.kill_all(self.dirs):  # no whole-tree kill: what is listed now
            for pid in self.members():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def usage(self) -> tuple[float | None, int | None]:
        """(CPU seconds, peak memory bytes) of the whole tree, None where not accounted."""
        cpu: float | None = None
        peak: int | None = None
        if self.v2 is not None:
            for line in _read(os.path.join(self.v2, "cpu.stat")).splitlines():
                if line.startswith("usage_usec "):
                    cpu = int(line.split()[1]) / 1e6
            text = _read(os.path.join(self.v2, "memory.peak")).strip()
            peak = int(text) if text.isdigit() else None
        if cpu is None and (acct := self.v1.get("cpuacct")) is not None:
            text = _read(os.path.join(acct, "cpuacct.usage")).strip()
            cpu = int(text) / 1e9 if text.isdigit() else None
        if peak is None and (mem := self.v1.get("memory")) is not None:
            text = _read(os.path.join(mem, "memory.max_usage_in_bytes")).strip()
            peak = int(text) if text.isdigit() else None
        return cpu, peak

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the run's memory limit."""
        sources = []
        if self.v2 is not None:
            sources.append(os.path.join(self.v2, "memory.events"))
        if (mem := self.v1.get("memory")) is not None:
            sources.append(os.path.join(mem, "memory.oom_control"))
        for path in sources:
            for line in _read(path).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                    return int(value)
        return 0

    def remove(self) -> list[str]:
        return cgkill.remove(list(self.dirs))
