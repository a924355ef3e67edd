"""Starting one handler process: own session, the payload on 0 (a memfd: written before the
spawn, so no pipe to feed), pipes on 1-2, the child's own PATH.

`os.posix_spawn` (vfork + exec and the environment conversion in C, half of Popen's parent
CPU per child) whenever it can; `subprocess.Popen` when the handler needs a cwd, another
identity or a umask, with prlimit(1) in front when it has rlimits (isolation.py). A child
with its own cgroup starts through the /bin/sh trampoline that joins it (cgchild.py), and then
switches identity with setpriv(1) after it, not Popen (which would switch before the
trampoline and leave it unable to join). Watching, output and killing belong to runner.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import signal
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, NamedTuple

from supervisor.proc import isolation

if TYPE_CHECKING:
    from supervisor.proc.cgchild import ChildCgroup

_SPAWN_SIGDEF = (signal.SIGPIPE, signal.SIGXFSZ)  # Python ignores these; handlers must not
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


class Started(NamedTuple):
    pid: int
    stdout: int  # the read ends of its output pipes: non-blocking, close-on-exec, ours
    stderr: int
    popen: subprocess.Popen[bytes] | None  # only when Popen started it


def start_process(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    *,
    user: int | None = None,
    group: int | None = None,
    extra_groups: tuple[int, ...] | None = None,
    umask: int | None = None,
    limits: tuple[tuple[str, int], ...] = (),
    cgroup: ChildCgroup | None = None,
    stdin: bytes = b"",
) -> Started:
    """Start `argv` in a new session reading `stdin` from fd 0, with pipes on 1-2 (inside
    `cgroup` before it can fork). Raises OSError or ValueError."""
    if not argv:
        raise ValueError("empty command")
    payload = _payload_fd(stdin)
    try:
        return _start(argv, env, cwd, payload, user, group, extra_groups, umask, limits, cgroup)
    finally:
        os.close(payload)  # the child has its own copy on 0


def _payload_fd(data: bytes) -> int:
    """A file holding `data`, read from offset 0: a memfd (one syscall to fill, no pipe that
    must be fed while the child runs); an unlinked temporary file where memfds are missing."""
    try:
        fd = os.memfd_create("punchclock-payload", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        fd = os.dup(tempfile.TemporaryFile().fileno())  # noqa: SIM115 - the dup outlives it
        os.set_inheritable(fd, False)
    try:
        sent = 0
        while sent < len(data):  # pwrite: the shared offset stays at 0 for the child
            sent += os.pwrite(fd, memoryview(data)[sent:], sent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _start(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    payload: int,
    user: int | None,
    group: int | None,
    extra_groups: tuple[int, ...] | None,
    umask: int | None,
    limits: tuple[tuple[str, int], ...],
    cgroup: ChildCgroup | None,
) -> Started:
    identity = user is not None or group is not None
    confined = identity or umask is not None or limits
    _drop_ambient_caps()
    if cgroup is not None:
        # Resolved here, so a missing command is a spawn error, not the trampoline's exit 127.
        argv = [_checked(_executable(argv[0], env.get("PATH"))), *argv[1:]]
        if identity:
            argv = [*isolation.setpriv_argv(user, group, extra_groups), *argv]
            user = group = extra_groups = None
        if limits:
            argv = [*isolation.limit_argv(limits), *argv]
            limits = ()
        argv = [*cgroup.join_argv(), *argv]
        if cwd is None and umask is None and _posix_spawn_ready():
            return _posix_spawn(argv, env, payload)
    elif cwd is None and not confined and _posix_spawn_ready():
        return _posix_spawn(argv, env, payload)
    if limits:
        # Resolved here, so a missing command is a spawn error, not prlimit's exit 127.
        argv = [*isolation.limit_argv(limits), _executable(argv[0], env.get("PATH")), *argv[1:]]
    # No preexec_fn: the identity switch and umask are Popen's own (in C, after the fork);
    # CPython uses vfork unless an identity is set. An own session gives an own group.
    popen = subprocess.Popen(
        argv,
        stdin=payload,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        bufsize=0,
        user=user,
        group=group,
        extra_groups=None if extra_groups is None else list(extra_groups),
        umask=-1 if umask is None else umask,
    )
    fds = []
    for file in (popen.stdout, popen.stderr):  # bare descriptors, as _posix_spawn's
        assert file is not None
        fds.append(os.dup(file.fileno()))
        file.close()
        os.set_blocking(fds[-1], False)
    popen.stdout = popen.stderr = None
    return Started(popen.pid, fds[0], fds[1], popen)


def spawn_error_text(argv: list[str], cwd: str | None, exc: Exception) -> str:
    """One line for the caller's error: what could not be executed, and why."""
    if not argv:
        return "cannot execute: empty command"
    if isinstance(exc, OSError):
        detail = f"[Errno {exc.errno}] {exc.strerror}"
        if cwd is not None and exc.filename == cwd:
            return f"cannot change to directory {cwd!r}: {detail}"
        return f"cannot execute {argv[0]!r}: {detail}"
    return f"cannot execute {argv[0]!r}: {exc}"


@functools.cache
def _drop_ambient_caps() -> None:
    """Once, before the first handler: clear this process's ambient capabilities. A
    supervisor granted AmbientCapabilities= (deploy/README.md) keeps them in its effective set
    for the identity switch, but its children would inherit them across exec, and a handler
    holding CAP_SETUID is root. The keeper, started before any handler, keeps CAP_KILL."""
    if (isolation.ambient_caps() or 0) == 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot clear ambient capabilities: {os.strerror(err)}")


@functools.cache
def _posix_spawn_ready() -> bool:
    """posix_spawn (vfork+exec in C) costs half of Popen's parent CPU per child, but closes
    no descriptors. So, once: make every descriptor this process inherited close-on-exec
    (what Python opens already is), and use it only while 0-2 are open (so pipes land above
    them and dup2 onto 0-2 cannot misfire). Children then get only their payload and pipes."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return False
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):
                os.set_inheritable(int(name), False)
    return True


def _posix_spawn(argv: list[str], env: dict[str, str], payload: int) -> Started:
    path = _executable(argv[0], env.get("PATH"))
    fds: list[int] = []
    try:
        for _ in range(2):
            # Close-on-exec (dup2 below clears it on 0, 1 and 2 only) and non-blocking, which
            # only our read end keeps: one fcntl instead of two, and none on the read end.
            fds.extend(os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK))
            fcntl.fcntl(fds[-1], fcntl.F_SETFL, 0)
        out_r, out_w, err_r, err_w = fds
        pid = os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, payload, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsid=True,
            setsigdef=_SPAWN_SIGDEF,
            setsigmask=(),
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    for fd in (out_w, err_w):
        os.close(fd)
    return Started(pid, out_r, err_r, None)


def _executable(name: str, path: str | None) -> str:
    """Resolve `name` on the child's PATH, as subprocess does (posix_spawnp would use ours)."""
    if os.sep in name:
        return name
    for directory in (path if path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def _checked(path: str) -> str:
    """The error exec would give, raised here (the trampoline's exec would only exit 126/127)."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    return path


def install_fast_child_watcher() -> None:
    """On Python < 3.12, watch other code's asyncio subprocesses with pidfds, not threads."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # kernel older than 5.3, or seccomp forbids it
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
