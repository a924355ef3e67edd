"""Per-handler isolation settings: validated at start-up, rejected with the field and the
reason when this host cannot apply them (fail closed), secrets shown by name only."""

from __future__ import annotations

import json
import os
import pwd
import resource
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.proc import isolation
from supervisor.proc.isolation import EnvFileError, identity_switch_problem, read_env_files
from supervisor.registry import load_registry

ALL_CAPS = "000001ffffffffff"
NOBODY = pwd.getpwnam("nobody")


def _status(tmp_path: Path, cap_eff: str) -> str:
    path = tmp_path / "status"
    path.write_text(f"Name:\tpython\nCapInh:\t0\nCapPrm:\t{cap_eff}\nCapEff:\t{cap_eff}\n")
    return str(path)


def _load(tmp_path: Path, body: str, status: str | None = None, **environ: str):  # type: ignore[no-untyped-def]
    (tmp_path / "h.toml").write_text(body)
    check = (lambda: identity_switch_problem(status)) if status else identity_switch_problem
    return load_registry([str(tmp_path / "h.toml")], switch_problem=check, environ=environ)


def test_capability_probe_reads_cap_eff(tmp_path: Path) -> None:
    assert identity_switch_problem(_status(tmp_path, ALL_CAPS)) is None
    # CAP_SETUID (bit 7) and CAP_KILL (bit 5) missing, CAP_SETGID (bit 6) present.
    problem = identity_switch_problem(_status(tmp_path, f"{1 << 6:016x}"))
    assert problem is not None
    assert "cannot switch identity: it lacks CAP_KILL, CAP_SETUID" in problem
    assert "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL" in problem
    assert "cannot read" in str(identity_switch_problem(str(tmp_path / "missing")))


def test_user_is_rejected_when_the_supervisor_cannot_switch(tmp_path: Path) -> None:
    body = '[handlers.a]\nshell = "id"\nuser = "nobody"\n[handlers.b]\nshell = "id"\n'
    reg = _load(tmp_path, body, _status(tmp_path, "0000000000000000"))
    assert reg.types == ["b"]  # fail closed: never run `a` as the supervisor's user instead
    [rejected] = reg.rejected
    assert rejected.type == "a" and rejected.source.endswith("h.toml[handlers.a]")
    assert rejected.reason.startswith("user: cannot run as 'nobody': the supervisor (uid ")
    assert "lacks CAP_KILL, CAP_SETGID, CAP_SETUID" in rejected.reason

    reg = _load(tmp_path, body, _status(tmp_path, ALL_CAPS))
    assert reg.types == ["a", "b"] and not reg.rejected
    ident = reg.handlers["a"].identity
    assert ident is not None
    assert (ident.uid, ident.gid, ident.user, ident.home) == (
        NOBODY.pw_uid,
        NOBODY.pw_gid,
        "nobody",
        NOBODY.pw_dir,
    )
    assert ident.groups == tuple(os.getgrouplist("nobody", NOBODY.pw_gid))
    assert reg.handlers["b"].identity is None


def test_identity_rejections_name_the_field(tmp_path: Path) -> None:
    reg = _load(
        tmp_path,
        """
[handlers.ghost]
shell = "id"
user = "punchclock-no-such-user"
[handlers.badgroup]
shell = "id"
user = "nobody"
group = "punchclock-no-such-group"
[handlers.badextra]
shell = "id"
user = "nobody"
supplementary_groups = ["root", "punchclock-no-such-group"]
[handlers.groupalone]
shell = "id"
group = "root"
[handlers.explicit]
shell = "id"
user = "nobody"
group = "root"
supplementary_groups = []
""",
        _status(tmp_path, ALL_CAPS),
    )
    reasons = {r.type: r.reason for r in reg.rejected}
    assert reasons == {
        "ghost": "user: no such user 'punchclock-no-such-user' on this host",
        "badgroup": "group: no such group 'punchclock-no-such-group' on this host",
        "badextra": "supplementary_groups: no such group 'punchclock-no-such-group' on this host",
        "groupalone": "group: set user too (a handler runs as a whole identity)",
    }
    ident = reg.handlers["explicit"].identity
    assert ident is not None and (ident.gid, ident.groups) == (0, ())


def test_environment_limits_and_concurrency_rejections(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    reg = _load(
        tmp_path,
        f"""
[handlers.reserved]
shell = "x"
env = {{ PUNCHCLOCK_DATABASE_URL = "x" }}
[handlers.passreserved]
shell = "x"
pass_env = ["PUNCHCLOCK_API_TOKENS"]
[handlers.badname]
shell = "x"
pass_env = ["A-B"]
[handlers.umask]
shell = "x"
umask = "0999"
[handlers.nofile]
shell = "x"
nofile = {hard + 1}
[handlers.neg]
shell = "x"
nproc = -1
[handlers.size]
shell = "x"
file_size = "12X"
[handlers.conc]
shell = "x"
concurrency = 0
[handlers.creds]
shell = "x"
env_files = ["$CREDENTIALS_DIRECTORY/db"]
""",
    )
    reasons = {r.type: r.reason for r in reg.rejected}
    assert reasons == {
        "reserved": "env: PUNCHCLOCK_DATABASE_URL is reserved: PUNCHCLOCK_* are punchclock's own",
        "passreserved": "pass_env: PUNCHCLOCK_API_TOKENS is reserved: PUNCHCLOCK_* are punchclock's own",
        "badname": "pass_env: 'A-B' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
        "umask": 'umask must be octal, 0o000 to 0o777 (0o027, or "0027")',
        "nofile": f"nofile: {hard + 1} is above the supervisor's own hard limit {hard}",
        "neg": 'nproc must be a non-negative integer or "unlimited"',
        "size": 'file_size must be a non-negative integer (bytes, or with K, M, G or T) or "unlimited"',
        "conc": "concurrency must be a positive integer",
        "creds": "env_files: '$CREDENTIALS_DIRECTORY/db' needs CREDENTIALS_DIRECTORY, which is unset",
    }


def test_accepted_settings(tmp_path: Path) -> None:
    reg = _load(
        tmp_path,
        """
[handlers.a]
shell = "x"
umask = 0o027
nofile = 64
core = 0
file_size = "2M"
cpu_seconds = 30
concurrency = 2
pass_env = ["LANG"]
env_files = ["rel.env", "/abs.env", "${CREDENTIALS_DIRECTORY}/db"]
[handlers.b]
shell = "x"
umask = "0022"
""",
        CREDENTIALS_DIRECTORY="/run/credentials/punchclock.service",
    )
    assert not reg.rejected
    a = reg.handlers["a"]
    assert a.umask == 0o027 and reg.handlers["b"].umask == 0o022
    assert a.limits == (("nofile", 64), ("core", 0), ("cpu_seconds", 30), ("file_size", 2 << 20))
    assert a.concurrency == 2 and reg.handlers["b"].concurrency is None
    assert a.env_files == (
        str(tmp_path / "rel.env"),
        "/abs.env",
        "/run/credentials/punchclock.service/db",
    )
    argv = isolation.limit_argv(a.limits)
    assert argv[1:] == [
        "--nofile=64:64",
        "--core=0:0",
        "--cpu=30:30",
        f"--fsize={2 << 20}:{2 << 20}",
        "--",
    ]


def test_clean_environment_has_only_what_is_named(tmp_path: Path) -> None:
    environ = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "PYTHONPATH": "/somewhere",
        "FAKE_SECRET": "hunter2",
        "PASSED": "yes",
        "PUNCHCLOCK_DATABASE_URL": "postgresql://secret",
    }
    body = (
        '[handlers.a]\nshell = "x"\npass_env = ["PASSED", "UNSET"]\nenv = { LIT = "1" }\n'
        '[handlers.b]\nshell = "x"\nuser = "nobody"\n'
    )
    reg = _load(tmp_path, body, _status(tmp_path, ALL_CAPS), **environ)
    assert reg.handlers["a"].environment(environ) == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "PASSED": "yes",
        "LIT": "1",
    }
    env_b = reg.handlers["b"].environment({**environ, "TZ": "Europe/Berlin"})
    assert env_b == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "Europe/Berlin",
        "HOME": NOBODY.pw_dir,
        "USER": "nobody",
        "LOGNAME": "nobody",
    }


def test_env_files(tmp_path: Path) -> None:
    good = tmp_path / "good.env"
    good.write_text(
        "# comment\n\nDB_PASSWORD=hunter2\nexport TOKEN='a b'\nQUOTED=\"x=y\"\nEMPTY=\n"
    )
    assert read_env_files([str(good)]) == {
        "DB_PASSWORD": "hunter2",
        "TOKEN": "a b",
        "QUOTED": "x=y",
        "EMPTY": "",
    }
    with pytest.raises(EnvFileError) as missing:
        read_env_files([str(good), str(tmp_path / "gone.env")])
    assert str(missing.value) == (
        f"env file {tmp_path / 'gone.env'}: cannot read: No such file or directory"
    )
    bad = tmp_path / "bad.env"
    bad.write_text("OK=1\nhunter2\n")
    with pytest.raises(EnvFileError) as err:
        read_env_files([str(bad)])
    assert str(err.value) == f"env file {bad} line 2: expected KEY=VALUE"
    bad.write_text("OK=1\n\nsecret-name=hunter2\n")
    with pytest.raises(EnvFileError) as err:
        read_env_files([str(bad)])
    assert "line 3: the name before '=' is not a variable name" in str(err.value)
    assert "hunter2" not in str(err.value) and "secret" not in str(err.value)
    bad.write_text("PUNCHCLOCK_RUN_ID=7\n")
    with pytest.raises(EnvFileError, match="line 1: PUNCHCLOCK_RUN_ID is reserved"):
        read_env_files([str(bad)])


def test_handlers_list_shows_settings_and_names_never_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "h.toml").write_text(
        '[handlers.a]\nshell = "x"\nenv = { API_KEY = "hunter2" }\npass_env = ["LANG"]\n'
        'env_files = ["/etc/a.env"]\numask = 0o027\nnofile = 64\nconcurrency = 3\n'
    )
    assert main(["handlers", "list", "--handlers", str(tmp_path / "h.toml")]) == 0
    text = capsys.readouterr().out
    assert "hunter2" not in text
    assert "umask=0027" in text and "nofile=64" in text and "concurrency=3" in text
    assert "env=API_KEY" in text and "pass_env=LANG" in text and "env_files=/etc/a.env" in text
    assert main(["handlers", "list", "--json", "--handlers", str(tmp_path / "h.toml")]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    [h] = json.loads(out)["handlers"]
    assert (h["env"], h["limits"], h["umask"], h["user"]) == (
        ["API_KEY"],
        {"nofile": 64},
        "0027",
        None,
    )
