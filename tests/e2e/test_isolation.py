"""Handlers as isolated processes (issue 15), against a real supervisor run as root: a
run-as user, a clean environment (pass_env, env, env_files), umask and rlimits in force in
the child, rejections at start-up, and a handler's `concurrency` cap under load."""

from __future__ import annotations

import pwd
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from supervisor.core.store import Store

from ..helpers import wait_for
from .procs import Cluster
from .scenario import all_in, attempts, create_runs, status_is

# Prints what the child is and sees; the payload is {"pid": <the supervisor's pid>}.
PROBE = r"""
sup=$(cat | tr -dc 0-9)
echo "id=$(id -u):$(id -g):$(id -G | tr ' ' ,)"
echo "nofile=$(ulimit -n) umask=$(umask)"
if cat /proc/$sup/environ > /dev/null 2>&1; then echo environ=readable; else echo environ=unreadable; fi
echo "env:$(cat /proc/self/environ | tr '\0' '\n' | cut -d= -f1 | sort | tr '\n' ' ')"
cat /proc/self/environ | tr '\0' '\n' | grep -E '^PC_ISO_|^FROM_FILE=|^LITERAL=' | sort
"""
# What a shell adds by itself to the environment it passes on.
SHELL_ADDS = {"PWD", "OLDPWD", "SHLVL", "_"}


@pytest.fixture
def test_user() -> Iterator[pwd.struct_passwd]:
    name = f"punchclock-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True)


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _lines(out: str) -> dict[str, str]:
    pairs = (x.split() if x.startswith("nofile=") else [x] for x in out.splitlines())
    return dict(
        p.split("=", 1) for ps in pairs for p in ps if "=" in p and not p.startswith("env:")
    )


async def test_a_handler_runs_as_its_user_with_a_clean_environment_and_limits(
    cluster: Cluster,
    store: Store,
    tmp_path: Path,
    test_user: pwd.struct_passwd,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("PC_ISO_FAKE_SECRET", secret)  # in the supervisor's environment
    monkeypatch.setenv("PC_ISO_PASSED", "passed-value")
    env_file = _write(tmp_path / "secrets.env", "# from a credential\nFROM_FILE='file value'\n")
    Path(env_file).chmod(0o600)  # readable by the supervisor only: the value is handed over
    ghost = f"punchclock-nouser-{uuid.uuid4().hex[:6]}"
    toml = _write(
        tmp_path / "iso.toml",
        f"""
[handlers.probe]
shell = '''{PROBE}'''
user = "{test_user.pw_name}"
umask = 0o027
nofile = 123
pass_env = ["PC_ISO_PASSED"]
env = {{ LITERAL = "lit" }}
env_files = ["{env_file}"]
[handlers.same]
shell = '''{PROBE}'''
[handlers.ghost]
shell = "true"
user = "{ghost}"
[handlers.badenv]
shell = "true"
env_files = ["{tmp_path / "missing.env"}"]
""",
    )
    sup = await cluster.start_ready("iso", (), extra_args=["--handlers", toml])
    started = sup.events("supervisor_started")[0]
    assert started["types"] == ["badenv", "probe", "same"]
    [rejected] = sup.events("handler_rejected")
    assert rejected["type"] == "ghost"
    assert rejected["reason"] == f"user: no such user {ghost!r} on this host"

    [probe] = await create_runs(store, "probe", 1, {"pid": sup.pid}, max_attempts=1)
    [same] = await create_runs(store, "same", 1, {"pid": sup.pid}, max_attempts=1)
    [bad] = await create_runs(store, "badenv", 1, {}, max_attempts=1)
    await wait_for(lambda: all_in(store, [probe, same], "succeeded"), 20, "the probes")
    await wait_for(lambda: status_is(store, bad, "dead"), 20, "the bad env file to fail")

    [a] = await attempts(store, probe)
    out = a["stdout_tail"]
    assert secret not in out, out
    seen = _lines(out)
    assert seen["id"] == f"{test_user.pw_uid}:{test_user.pw_gid}:{test_user.pw_gid}", out
    assert (seen["nofile"], seen["umask"]) == ("123", "0027"), out
    assert seen["environ"] == "unreadable", out  # the supervisor's secrets stay out of reach
    assert seen["PC_ISO_PASSED"] == "passed-value" and seen["LITERAL"] == "lit", out
    assert seen["FROM_FILE"] == "file value", out
    names = set(next(x for x in out.splitlines() if x.startswith("env:"))[4:].split())
    allowed = {"PATH", "LANG", "TZ", "HOME", "USER", "LOGNAME", "PC_ISO_PASSED", "LITERAL"}
    allowed |= {"FROM_FILE", "PUNCHCLOCK_CHILD_ID", "PUNCHCLOCK_SUPERVISOR_INSTANCE"}
    run_vars = {"RUN_ID", "JOB_NAME", "JOB_TYPE", "ATTEMPT", "SCHEDULED_AT", "LEASE_TOKEN"}
    allowed |= {f"PUNCHCLOCK_{v}" for v in (*run_vars, "DEADLINE")}
    assert {"PATH", "HOME", "USER", "PUNCHCLOCK_RUN_ID", "PUNCHCLOCK_CHILD_ID"} <= names
    assert names - SHELL_ADDS <= allowed, names - SHELL_ADDS - allowed
    assert "PC_ISO_FAKE_SECRET" not in names

    # Without `user` the child runs as the supervisor: its environment is clean too, but a
    # root supervisor's child is root (CAP_SYS_PTRACE): it reads /proc/<supervisor>/environ
    # although the supervisor is non-dumpable (test_confine.py: an unprivileged one's cannot).
    [s] = await attempts(store, same)
    assert secret not in s["stdout_tail"] and "PC_ISO_PASSED" not in s["stdout_tail"]
    assert _lines(s["stdout_tail"])["environ"] == "readable"

    [b] = await attempts(store, bad)
    assert b["error"].startswith(f"env file {tmp_path / 'missing.env'}: cannot read: No such")
    assert sup.running and sup.stop() == 0, sup.tail()


class PidObserver(threading.Thread):
    """Polls the supervisor's children every 2 ms and keeps the most seen at once per marker."""

    def __init__(self, pid: int, markers: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.parent = psutil.Process(pid)
        self.markers = markers
        self.most = dict.fromkeys(markers, 0)
        self.most_total = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.002):
            counts = dict.fromkeys(self.markers, 0)
            for child in self.parent.children():
                try:
                    line = " ".join(child.cmdline())
                except psutil.Error:
                    continue
                for m in self.markers:
                    counts[m] += m in line
            for m, n in counts.items():
                self.most[m] = max(self.most[m], n)
            self.most_total = max(self.most_total, sum(counts.values()))


async def test_a_handler_concurrency_caps_its_children_under_load(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    toml = _write(
        tmp_path / "capped.toml",
        '[handlers.capped]\nshell = "sleep 0.3; : capped-marker"\nconcurrency = 2\n'
        '[handlers.free]\nshell = "sleep 0.3; : free-marker"\n',
    )
    sup = await cluster.start_ready("cap", (), concurrency=6, extra_args=["--handlers", toml])
    observer = PidObserver(sup.pid, ("capped-marker", "free-marker"))
    observer.start()
    try:
        ids = await create_runs(store, "capped", 8, {}) + await create_runs(store, "free", 6, {})
        await wait_for(lambda: all_in(store, ids, "succeeded"), 30, "every run to succeed")
    finally:
        observer.done.set()
        observer.join()
    assert observer.most["capped-marker"] == 2, observer.most  # never more, and reached
    assert observer.most_total > 2, observer.most  # the cap is the type's, not the host's
    assert sup.stop() == 0, sup.tail()
