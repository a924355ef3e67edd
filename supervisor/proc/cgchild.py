"""One child's cgroup: create it with its limits, the /bin/sh trampoline that joins it before
the handler runs, signal and kill its members (cgkill.py), read its accounting (CPU, peak
memory, OOM kills), remove it. What the host offers is cgroups.py."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal

from supervisor.proc import cgkill
from supervisor.proc.cglimits import Limits
from supervisor.proc.cgroups import PREFIX, Host, read_file, write_file

CPU_PERIOD_US = 100_000
# What the trampoline exits with when it cannot join its cgroup (never runs the handler).
JOIN_FAILED = 125
JOIN_FAILED_TEXT = "punchclock: cannot move the handler into its cgroup"


class ChildCgroup:
    """One child's cgroup: a v2 directory and/or v1 directories, all leaves."""

    def __init__(self, name: str, v2: str | None, v1: dict[str, str], limits: Limits) -> None:
        self.name = name
        self.v2 = v2
        self.v1 = v1
        self.limits = limits
        self.dirs = tuple(dict.fromkeys([*(() if v2 is None else (v2,)), *v1.values()]))

    @classmethod
    def create(cls, host: Host, suffix: str, limits: Limits) -> ChildCgroup:
        """mkdir the child's directories (`pc-<our pid>-<suffix>`) and write its limits.
        OSError: nothing is left."""
        name = f"{PREFIX}{os.getpid()}-{suffix}"
        use_v2, controllers = host.plan(limits)
        v2 = os.path.join(host.v2, name) if use_v2 and host.v2 else None
        v1 = {c: os.path.join(host.v1[c], name) for c in controllers}
        group = cls(name, v2, v1, limits)
        made: list[str] = []
        try:
            for d in group.dirs:
                # 0755 whatever our umask: a handler of another uid must not make sub-cgroups
                # (the child's could not be removed); the files are ours, 0644 (DESIGN.md).
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
                write_file(os.path.join(self.v2, "memory.oom.group"), "1")
                if lim.memory_max is not None:
                    write_file(os.path.join(self.v2, "memory.max"), str(lim.memory_max))
                if lim.memory_swap_max is not None:
                    write_file(os.path.join(self.v2, "memory.swap.max"), str(lim.memory_swap_max))
            if lim.cpu_max is not None and "cpu" in host.v2_controllers:
                quota = max(1000, round(lim.cpu_max * CPU_PERIOD_US))
                write_file(os.path.join(self.v2, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            if lim.tasks_max is not None and "pids" in host.v2_controllers:
                write_file(os.path.join(self.v2, "pids.max"), str(lim.tasks_max))
        if (mem := self.v1.get("memory")) is not None and lim.memory_max is not None:
            write_file(os.path.join(mem, "memory.limit_in_bytes"), str(lim.memory_max))
            if lim.memory_swap_max is not None:
                both = lim.memory_max + lim.memory_swap_max
                write_file(os.path.join(mem, "memory.memsw.limit_in_bytes"), str(both))
        if (pids := self.v1.get("pids")) is not None and lim.tasks_max is not None:
            write_file(os.path.join(pids, "pids.max"), str(lim.tasks_max))
        if (cpu := self.v1.get("cpu")) is not None and lim.cpu_max is not None:
            write_file(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            quota = max(1000, round(lim.cpu_max * CPU_PERIOD_US))
            write_file(os.path.join(cpu, "cpu.cfs_quota_us"), str(quota))

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
        """The pids in the child's cgroup now (every descendant, whatever it did)."""
        return cgkill.members(self.dirs[0]) if self.dirs else []

    def populated(self) -> bool:
        if self.v2 is not None:
            for line in read_file(os.path.join(self.v2, "cgroup.events")).splitlines():
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
            for line in read_file(os.path.join(self.v2, "cpu.stat")).splitlines():
                if line.startswith("usage_usec "):
                    cpu = int(line.split()[1]) / 1e6
            text = read_file(os.path.join(self.v2, "memory.peak")).strip()
            peak = int(text) if text.isdigit() else None
        if cpu is None and (acct := self.v1.get("cpuacct")) is not None:
            text = read_file(os.path.join(acct, "cpuacct.usage")).strip()
            cpu = int(text) / 1e9 if text.isdigit() else None
        if peak is None and (mem := self.v1.get("memory")) is not None:
            text = read_file(os.path.join(mem, "memory.max_usage_in_bytes")).strip()
            peak = int(text) if text.isdigit() else None
        return cpu, peak

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the cgroup's memory limit."""
        sources = []
        if self.v2 is not None:
            sources.append(os.path.join(self.v2, "memory.events"))
        if (mem := self.v1.get("memory")) is not None:
            sources.append(os.path.join(mem, "memory.oom_control"))
        for path in sources:
            for line in read_file(path).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                    return int(value)
        return 0

    def remove(self) -> list[str]:
        return cgkill.remove(list(self.dirs))
