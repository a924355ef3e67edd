"""What this host offers for a cgroup per child (probe), the supervisor's own preparation (a
leaf for itself when v2 controllers are delegated, controllers enabled, stale cgroups of dead
supervisors removed). One child's cgroup is cgchild.py; killing one, cgkill.py.

Layout (DESIGN.md, Handler isolation): children's cgroups are `pc-<supervisor pid>-<id>`
directories beside the supervisor, under the cgroup it was started in (its "base"): in the v2
tree, and in each v1 hierarchy whose controller a child needs (memory, pids, cpu, cpuacct,
freezer).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from supervisor.proc import cgkill
from supervisor.proc.cglimits import Limits

MOUNTINFO = "/proc/self/mountinfo"
MEMBERSHIP = "/proc/self/cgroup"
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
V2_CONTROLLERS = ("memory", "pids", "cpu")  # the ones a child's limits and accounting use
LEAF = "supervisor"
PREFIX = "pc-"


@dataclass(frozen=True)
class Host:
    """What this host offers for a cgroup per child. Directories are absolute sysfs paths."""

    v2: str | None = None  # the base directory in the v2 tree (children's are created in it)
    v2_kill: bool = False  # cgroup.kill exists (kernel 5.14+)
    # usable by children (enabled in base after prepare)
    v2_controllers: frozenset[str] = frozenset()
    v2_needs_leaf: bool = False  # base is no root: the supervisor moves to base/supervisor
    v1: Mapping[str, str] = field(default_factory=dict)  # controller -> writable base directory
    problem: str | None = None  # why children get no cgroup here, else None

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

    def has(self, controller: str) -> bool:
        """Whether children's cgroups can use `controller` (v2 enabled, or a v1 hierarchy)."""
        return controller in self.v2_controllers or controller in self.v1

    def limit_problem(self, limits: Limits) -> str | None:
        """Why this host cannot enforce `limits` (naming the field), or None."""
        if not self.usable:
            return f"no cgroup per child on this host: {self.problem or 'no way to kill one'}"
        needs = {"memory_max": "memory", "memory_swap_max": "memory", "cpu_max": "cpu",
                 "tasks_max": "pids"}  # fmt: skip
        for key, value in limits.items().items():
            if value is None:
                continue
            controller = needs[key]
            if not self.has(controller):
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
        """(use the v2 tree, v1 controllers) a child with `limits` needs on this host."""
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


def read_file(path: str) -> str:
    """A sysfs or /proc file's text; "" when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def probe(mountinfo: str | None = None, membership: str | None = None) -> Host:
    """What this host offers (reads sysfs and /proc; changes nothing)."""
    mountinfo = read_file(MOUNTINFO) if mountinfo is None else mountinfo
    membership = read_file(MEMBERSHIP) if membership is None else membership
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
            controllers = frozenset(
                read_file(os.path.join(base, "cgroup.controllers")).split()
            ) & set(V2_CONTROLLERS)
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
    """Once, in the supervisor, before the keeper and any handler start: remove the children's
    cgroups left by dead supervisors, and when v2 controllers are delegated, move this process into
    base/supervisor (no internal processes) and enable them for the children. Returns the host as
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
            write_file(os.path.join(leaf, "cgroup.procs"), "0")
        wanted = " ".join(f"+{c}" for c in sorted(host.v2_controllers))
        write_file(os.path.join(host.v2, "cgroup.subtree_control"), wanted)
    except OSError as exc:
        enabled = frozenset(read_file(os.path.join(host.v2, "cgroup.subtree_control")).split())
        warning = (
            f"cannot enable the cgroup v2 controllers {sorted(host.v2_controllers)} in "
            f"{host.v2} ({exc.strerror}): only {sorted(enabled) or 'none'} can limit children"
        )
        return replace(host, v2_controllers=host.v2_controllers & enabled), warning
    return host, None


def _v2_members(directory: str) -> list[int]:
    return cgkill.members(directory)


def sweep(host: Host) -> list[str]:
    """rmdir children's cgroups of supervisors that are gone (pc-<pid>-*, pid not alive): empty
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


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
