"""What a handler process is asked to do (ChildSpec) and how it ended (ChildResult): the
runner's values, with no process code, so their readers and tests need no runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from supervisor.proc.cglimits import Limits
from supervisor.proc.cgroups import Host


class ChildEnd(StrEnum):
    """How the process ended, in the runner's terms (what it means to its caller is the
    caller's to say)."""

    SUCCEEDED = "succeeded"  # exit status 0
    FAILED = "failed"  # non-zero status or a signal it did not get from us
    TIMED_OUT = "timed_out"  # we killed it at its timeout
    OOM_KILLED = "oom_killed"  # the kernel killed it (or a descendant) at its memory limit
    KILLED = "killed"  # we killed it on request (Child.kill)
    SPAWN_FAILED = "spawn_failed"  # never started (or, via not_started, never tried)


@dataclass(frozen=True)
class ChildSpec:
    argv: list[str]
    env: dict[str, str] = field(repr=False)  # complete environment for the child (secrets)
    stdin: bytes = field(default=b"", repr=False)
    cwd: str | None = None
    # As this identity (Popen does setgroups/setgid/setuid after the fork); None: ours.
    user: int | None = None
    group: int | None = None
    extra_groups: tuple[int, ...] | None = None
    umask: int | None = None
    limits: tuple[tuple[str, int], ...] = ()  # isolation.RLIMITS keys, through prlimit(1)
    # In a cgroup of its own on this host (cgchild.py), with these limits; None: in a
    # process group only (killed through it and the environment marker).
    cgroup: Host | None = None
    cgroup_limits: Limits = field(default_factory=Limits)
    timeout: float | None = None  # seconds, monotonic; None = no timeout
    kill_grace: float = 10.0  # SIGTERM -> wait this long -> SIGKILL
    output_limit: int = 65536  # bytes of tail kept per stream
    # Monotonic instant at which the keeper kills the tree unless set_kill_by() moves it:
    # a backstop that works while our event loop does not (keeper.py).
    kill_by: float | None = None
    # A child-id prefix the keeper already watches until `kill_by` (Keeper.announce_batch,
    # one message for a batch of children): the child's id starts with it and it is not
    # announced on its own. Ignored with a cgroup (its announcement names the directories).
    announced: str = ""


@dataclass(frozen=True)
class ChildResult:
    outcome: ChildEnd
    exit_code: int | None
    signal: int | None
    error: str | None
    stdout_tail: str
    stderr_tail: str
    cpu_seconds: float | None
    # ru_maxrss*1024. Linux carries the spawner's RSS high-water mark across exec, so a value
    # not above the supervisor's own peak says nothing about the child: None then.
    peak_rss_bytes: int | None
    duration: float
    # A tail had invalid UTF-8 or NUL bytes, replaced by U+FFFD (storable_text).
    stdout_replaced: bool = False
    stderr_replaced: bool = False

    @classmethod
    def not_started(cls, error: str) -> ChildResult:
        """A child that never ran: no exit status, no output, no cost."""
        return cls(ChildEnd.SPAWN_FAILED, None, None, error, "", "", None, None, 0.0)
