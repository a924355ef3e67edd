"""How a child ended, as a ChildResult: its wait status and rusage, the first kill request
that stopped it, its cgroup's accounting and OOM kills, and its output tails."""

from __future__ import annotations

import os
import resource

from supervisor.proc import tree
from supervisor.proc.cgchild import JOIN_FAILED, JOIN_FAILED_TEXT
from supervisor.proc.cglimits import mib
from supervisor.proc.child import ChildEnd, ChildResult
from supervisor.proc.output import Capture

_own_peak = 0  # this process's peak RSS in bytes, as last read


def _inherited_peak(rss: int) -> bool:
    """Whether a child's peak RSS is no more than ours: a vfork child reports its parent's
    peak, not its own. Ours only grows, so it is read again only when `rss` is above the
    last reading (not once per child)."""
    global _own_peak
    if rss > _own_peak:
        _own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss <= _own_peak


def child_result(
    status: int | None,
    rusage: resource.struct_rusage | None,
    stop: tuple[ChildEnd, str] | None,
    output: Capture,
    duration: float,
    cgroup: tuple[tuple[float | None, int | None], int, int | None] | None = None,
) -> ChildResult:
    """`status` and `rusage` from wait4 (None: reaped elsewhere); `stop`: the (outcome, error)
    of the first kill request; `cgroup`, for a child in one: ((CPU seconds, peak bytes),
    OOM kills, its memory limit)."""
    code = sig = None
    if status is not None:
        rc = os.waitstatus_to_exitcode(status)
        code, sig = (None, -rc) if rc < 0 else (rc, None)
    usage, oom_kills, memory_max = cgroup if cgroup is not None else ((None, None), 0, None)
    error: str | None
    if stop is not None:
        outcome, error = stop
    elif status is None:
        outcome, error = ChildEnd.FAILED, "exit status lost: the child was reaped elsewhere"
    elif (sig is not None or code) and oom_kills:
        # It (or a descendant it depended on) was killed for its cgroup's memory limit.
        outcome, error = ChildEnd.OOM_KILLED, _oom_error(memory_max, usage[1])
    elif sig is not None:
        outcome, error = ChildEnd.FAILED, f"killed by signal {sig} ({tree.signal_name(sig)})"
    elif (
        code == JOIN_FAILED
        and cgroup is not None
        and output.err.text()[0].startswith(JOIN_FAILED_TEXT)
    ):
        outcome, error = ChildEnd.SPAWN_FAILED, JOIN_FAILED_TEXT
    elif code:
        outcome, error = ChildEnd.FAILED, f"exited with status {code}"
    else:
        outcome, error = ChildEnd.SUCCEEDED, None
    (out, out_replaced), (err, err_replaced) = output.out.text(), output.err.text()
    cpu = rss = None
    if rusage is not None:
        cpu, rss = rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss * 1024
        if _inherited_peak(rss):
            rss = None
    if cgroup is not None:  # the whole tree's, not only the direct child's
        cg_cpu, cg_peak = usage
        cpu = cg_cpu if cg_cpu is not None else cpu
        rss = cg_peak if cg_peak is not None else rss
    return ChildResult(
        outcome, code, sig, error, out, err, cpu, rss, duration, out_replaced, err_replaced
    )


def _oom_error(limit: int | None, peak: int | None) -> str:
    text = "killed by the kernel: memory limit"
    text += f" {mib(limit)} reached" if limit is not None else " reached"
    return text + (f" (peak {mib(peak)})" if peak is not None else "")
