"""What a handler can reach of the supervisor (issue 62, item 5), against real supervisors.

A handler running as the supervisor's own (unprivileged) uid tries to read the supervisor's
and the keeper's environment through /proc: both are non-dumpable, so it is refused, while
the database password really is in the supervisor's environment (root sees it) and the
keeper, started with a minimal environment, has none of it. A handler with `user = "nobody"`
tries to raise its run cgroup's limits, move itself out and make a sub-cgroup: all refused,
under a supervisor whose umask is 000, and the limit in force is unchanged.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest

from supervisor.core.store import Store
from supervisor.proc import cgroups
from supervisor.proc.cglimits import Limits
from supervisor.proc.keeper import KEEPER_ENV
from supervisor.registry import describe_isolation

from ..helpers import wait_for
from .procs import ROOT, Cluster, Supervisor
from .scenario import attempts, create_runs, status_is

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv(1) to start a supervisor as another user",
)

# Run by a supervisor of the same uid: read the supervisor's ($PPID) and its keeper's
# environment; then have a child of the handler read the handler's own (it is dumpable).
SNOOP = r"""
sup=$PPID
snoop() { echo "$1 environ: $(cat /proc/$2/environ 2>&1 | tr '\0' ' ')"; }
echo "uid=$(id -u)"
snoop supervisor $sup
k=keeperd  # not spelled out: this script's own command line must not match
for d in /proc/[0-9]*; do
  case "$(tr '\0' ' ' 2>/dev/null < $d/cmdline)" in *"-m supervisor.proc.$k "*) ;; *) continue ;; esac
  [ "$(cut -d' ' -f4 $d/stat 2>/dev/null)" = "$sup" ] && snoop keeper ${d#/proc/}
done
if tr '\0' '\n' < /proc/$$/environ | grep -q '^PUNCHCLOCK_RUN_ID='; then echo handler=dumpable; fi
"""


@pytest.fixture
def service_user() -> Iterator[pwd.struct_passwd]:
    """A fresh system user, as deploy's `User=punchclock`."""
    name = f"punchclock-svc-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the service user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="punchclock-confine-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _python_for(user: pwd.struct_passwd, env: dict[str, str]) -> str:
    """An interpreter `user` can run with punchclock's dependencies importable: ours may live
    in root's home (pyenv); the system's of the same version reads the venv's packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (sys.executable, shutil.which(version, path="/usr/bin:/usr/local/bin")):
        if exe is None:
            continue
        # ... and run itself again (the keeper is sys.executable).
        code = "import asyncpg, psutil, supervisor.app, subprocess as s, sys; "
        code += "s.run([sys.executable, '-c', ''], check=True)"
        probe = [*_as(user), exe, "-c", code]
        ok = subprocess.run(probe, cwd=ROOT, env=env, capture_output=True, check=False)
        if ok.returncode == 0:
            return exe
    pytest.skip(f"no Python that {user.pw_name} can run with punchclock's dependencies")


def _as(user: pwd.struct_passwd) -> list[str]:
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]


def _with_password(dsn: str, password: str) -> str:
    parts = urlsplit(dsn)
    userinfo, _, host = parts.netloc.rpartition("@")
    name = userinfo.partition(":")[0] or "postgres"
    return urlunsplit(parts._replace(netloc=f"{name}:{password}@{host}"))


def _keeper_of(sup: Supervisor) -> psutil.Process:
    [keeper] = [
        p for p in psutil.Process(sup.pid).children() if "supervisor.proc.keeperd" in p.cmdline()
    ]
    return keeper


async def test_a_handler_of_the_supervisors_uid_cannot_read_its_or_the_keepers_environment(
    service_user: pwd.struct_passwd,  # first: removed after the cluster's processes end
    shared_dir: Path,
    cluster: Cluster,
    store: Store,
    tmp_path: Path,
) -> None:
    password = f"hunter2-{uuid.uuid4().hex}"
    marker = f"marker-{uuid.uuid4().hex}"
    toml = shared_dir / "snoop.toml"
    toml.write_text(f"[handlers.snoop]\nshell = '''{SNOOP}'''\n")
    purelib = sysconfig.get_paths()["purelib"]
    # The secrets are in the environment, as an EnvironmentFile= puts them; never on argv.
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), purelib]),
        "HOME": service_user.pw_dir,  # not root's: libpq's files are looked up there
        "PUNCHCLOCK_DATABASE_URL": _with_password(cluster.dsn, password),
        "PC_CONFINE_SECRET": marker,
    }
    python = _python_for(service_user, env)
    argv = [*_as(service_user), python, "-m", "supervisor", "supervise", "--handlers", str(toml)]
    argv += ["--worker-id", "confine", "--lease-ttl", "2", "--log-runs", "all"]
    sup = cluster._spawn("confine", argv, tmp_path / "confine.log", env)
    await sup.wait_event("supervisor_started", timeout=30)
    assert password not in " ".join(psutil.Process(sup.pid).cmdline())

    # The secrets are there: root (CAP_SYS_PTRACE) reads them in the supervisor's environ.
    environ = psutil.Process(sup.pid).environ()
    assert password in environ["PUNCHCLOCK_DATABASE_URL"] and environ["PC_CONFINE_SECRET"]
    # The keeper got none of it: only what it needs.
    keeper = _keeper_of(sup)
    assert set(keeper.environ()) <= KEEPER_ENV, keeper.environ()
    assert password not in str(keeper.environ()) and marker not in str(keeper.environ())

    [run_id] = await create_runs(store, "snoop", 1, {}, max_attempts=1)
    await wait_for(lambda: status_is(store, run_id, "succeeded"), 20, "the snoop to run")
    [a] = await attempts(store, run_id)
    out = a["stdout_tail"] + a["stderr_tail"]
    assert password not in out and marker not in out, out
    lines = a["stdout_tail"].splitlines()
    assert f"uid={service_user.pw_uid}" in lines, out  # the supervisor's own uid
    denied = "environ: cat: /proc/{}/environ: Permission denied"
    assert "supervisor " + denied.format(sup.pid) in lines, out
    assert "keeper " + denied.format(keeper.pid) in lines, out
    assert len([line for line in lines if " environ: " in line]) == 2, out
    # Non-dumpability does not pass to children: the handler's own environ is readable.
    assert "handler=dumpable" in lines, out
    assert sup.stop() == 0, sup.tail()


HOST = cgroups.probe()
NO_CGROUP = not HOST.usable or HOST.limit_problem(Limits(memory_max=1 << 26)) is not None

# Run as nobody in its own cgroup (pc-<supervisor pid>-<child id[:16]> in each base given
# as arguments): try to lift its limits, move itself out, and make a sub-cgroup. Each try
# prints what the kernel said.
LIFT = r"""
name="pc-$PPID-$(printf %s "$PUNCHCLOCK_CHILD_ID" | cut -c1-16)"
for base in "$@"; do
  d="$base/$name"
  [ -d "$d" ] || continue
  echo "in $d"
  for f in memory.max memory.swap.max pids.max memory.limit_in_bytes memory.memsw.limit_in_bytes; do
    [ -e "$d/$f" ] || continue
    case $f in *.max) v=max ;; *) v=-1 ;; esac
    echo "write $f: $( (echo $v > "$d/$f") 2>&1 || true)"
  done
  echo "move out: $( (echo $$ > "$base/cgroup.procs") 2>&1 || true)"
  echo "mkdir: $(mkdir "$d/escape" 2>&1 || true)"
  for f in memory.max memory.limit_in_bytes; do
    [ -e "$d/$f" ] && echo "limit $f $(cat "$d/$f")"
  done
done
"""


@pytest.mark.skipif(
    NO_CGROUP, reason=f"no cgroup per run with a memory limit: {describe_isolation(HOST)}"
)
async def test_a_handler_cannot_lift_its_cgroup_limits_or_leave_its_cgroup(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    bases = " ".join(b for b in (HOST.v2, *HOST.v1.values()) if b)
    toml = tmp_path / "lift.toml"
    # The script gets the bases as "$@" ($0 is the word after it).
    toml.write_text(
        "[handlers.lift]\n"
        f"command = ['/bin/sh', '-c', '''{LIFT}''', 'lift', {_toml_list(bases)}]\n"
        'user = "nobody"\nmemory_max = "64M"\n'
    )
    old = os.umask(0)  # a supervisor started with UMask=0000: its mkdir must not share
    try:
        sup = cluster.start("lift", (), extra_args=["--handlers", str(toml)])
    finally:
        os.umask(old)
    await sup.wait_event("supervisor_started", timeout=20)
    [run_id] = await create_runs(store, "lift", 1, {}, max_attempts=1)
    await wait_for(lambda: status_is(store, run_id, "succeeded"), 20, "the handler to try")
    [a] = await attempts(store, run_id)
    out = a["stdout_tail"]
    lines = out.splitlines()
    assert any(line.startswith("in ") for line in lines), out + a["stderr_tail"]
    tries = [line for line in lines if line.startswith(("write ", "move out:", "mkdir:"))]
    assert any(line.startswith("write memory.") for line in tries), out
    for line in tries:
        assert line.endswith("Permission denied"), out
    limits = [line.split()[-1] for line in lines if line.startswith("limit ")]
    assert limits and set(limits) == {str(64 << 20)}, out  # nothing was written
    assert sup.stop() == 0, sup.tail()


def _toml_list(words: str) -> str:
    return ", ".join(f"'{w}'" for w in words.split())
