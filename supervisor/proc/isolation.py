"""What a handler process runs as and sees: its identity, its clean environment, its rlimits.

Checked once at start-up (registry.py rejects what this host cannot apply: fail closed) and
applied at each spawn (spawn.py). No process is started here.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import re
import resource
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Switching identity needs setuid/setgid/setgroups, and killing a child of another user needs
# CAP_KILL: root has all three; an unprivileged supervisor needs them as capabilities.
SWITCH_CAPS = {"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7}
PROC_STATUS = "/proc/self/status"

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The supervisor's own settings (secrets among them) and the variables it sets per child.
RESERVED_PREFIX = "PUNCHCLOCK_"
ENV_FILE_MAX = 1 << 20
CREDENTIALS = re.compile(r"\$(\{CREDENTIALS_DIRECTORY\}|CREDENTIALS_DIRECTORY\b)")

# TOML key -> (prlimit(1) option, resource constant)
RLIMITS: dict[str, tuple[str, int]] = {
    "nofile": ("nofile", resource.RLIMIT_NOFILE),
    "nproc": ("nproc", resource.RLIMIT_NPROC),
    "core": ("core", resource.RLIMIT_CORE),
    "cpu_seconds": ("cpu", resource.RLIMIT_CPU),
    "file_size": ("fsize", resource.RLIMIT_FSIZE),
}
_SIZED = {"core", "file_size"}  # bytes: K, M, G, T suffixes (powers of 1024) allowed
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
UNLIMITED = -1


@dataclass(frozen=True)
class Identity:
    """An identity to start a child as, resolved at start-up."""

    user: str
    uid: int
    group: str
    gid: int
    groups: tuple[int, ...]  # supplementary groups, set exactly (setgroups)
    home: str


def effective_caps(status_path: str = PROC_STATUS) -> int | None:
    """The CapEff bit mask from a /proc/<pid>/status file; None when it cannot be read."""
    return _caps("CapEff", status_path)


def ambient_caps(status_path: str = PROC_STATUS) -> int | None:
    return _caps("CapAmb", status_path)


def _caps(field: str, status_path: str) -> int | None:
    try:
        text = Path(status_path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None


def identity_switch_problem(status_path: str = PROC_STATUS) -> str | None:
    """Why this supervisor cannot run a child as another user, or None when it can."""
    caps = effective_caps(status_path)
    if caps is None:
        return f"cannot read the supervisor's capabilities from {status_path}"
    missing = [name for name, bit in SWITCH_CAPS.items() if not caps >> bit & 1]
    if not missing:
        return None
    return (
        f"the supervisor (uid {os.geteuid()}) cannot switch identity: it lacks "
        f"{', '.join(missing)} (run it as root, or grant AmbientCapabilities=CAP_SETUID "
        "CAP_SETGID CAP_KILL; see deploy/README.md)"
    )


def resolve_identity(user: object, group: object, supplementary: object) -> Identity:
    """The identity for TOML `user`, `group`, `supplementary_groups`; ValueError names the
    field. Without `group`, the user's primary group; without `supplementary_groups`, the
    user's groups from the system's group list (as initgroups does)."""
    try:
        pw = _passwd(user)
    except KeyError:
        raise ValueError(f"user: no such user {user!r} on this host") from None
    gid = pw.pw_gid if group is None else _group_id("group", group)
    if supplementary is None:
        groups = tuple(os.getgrouplist(pw.pw_name, gid))
    else:
        if not isinstance(supplementary, list):
            raise ValueError("supplementary_groups must be a list of group names or ids")
        groups = tuple(dict.fromkeys(_group_id("supplementary_groups", g) for g in supplementary))
    try:
        group_name = grp.getgrgid(gid).gr_name
    except KeyError:
        group_name = str(gid)
    return Identity(pw.pw_name, pw.pw_uid, group_name, gid, groups, pw.pw_dir)


def _passwd(user: object) -> pwd.struct_passwd:
    if isinstance(user, str) and user:
        return pwd.getpwnam(user)
    if isinstance(user, int) and not isinstance(user, bool) and user >= 0:
        return pwd.getpwuid(user)
    raise ValueError("user must be a user name or a uid")


def _group_id(field: str, value: object) -> int:
    try:
        if isinstance(value, str) and value:
            return grp.getgrnam(value).gr_gid
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return grp.getgrgid(value).gr_gid
    except KeyError:
        raise ValueError(f"{field}: no such group {value!r} on this host") from None
    raise ValueError(f"{field}: a group is a name or a gid, not {value!r}")


def parse_umask(value: object) -> int:
    """`umask = 0o027` (a TOML octal integer) or `"0027"` (a string of octal digits)."""
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3}", value):
        return int(value, 8)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777:
        return value
    raise ValueError('umask must be octal, 0o000 to 0o777 (0o027, or "0027")')


def parse_limit(key: str, value: object) -> int:
    """A limit's value (UNLIMITED for "unlimited"); no higher than the supervisor's own hard
    limit, which the child could not raise."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        number = value
    elif value == "unlimited":
        number = UNLIMITED
    elif isinstance(value, str) and key in _SIZED:
        m = re.fullmatch(r"(\d+)([KMGT])", value.strip())
        if m:
            number = int(m[1]) * _UNITS[m[2]]
    if number is None:
        sized = " (bytes, or with K, M, G or T)" if key in _SIZED else ""
        raise ValueError(f'{key} must be a non-negative integer{sized} or "unlimited"')
    hard = resource.getrlimit(RLIMITS[key][1])[1]
    if hard != resource.RLIM_INFINITY and (number == UNLIMITED or number > hard):
        shown = "unlimited" if number == UNLIMITED else str(number)
        raise ValueError(f"{key}: {shown} is above the supervisor's own hard limit {hard}")
    if prlimit_path() is None:
        raise ValueError(f"{key}: needs prlimit(1) from util-linux on PATH to limit the child")
    return number


@functools.cache
def prlimit_path() -> str | None:
    """util-linux's prlimit: sets the limits on itself, then execs the handler (a wrapper:
    Popen cannot set rlimits without a preexec_fn, and prlimit(pid) after the spawn races)."""
    return shutil.which("prlimit") or shutil.which("prlimit", path="/usr/bin:/bin")


def limit_argv(limits: Iterable[tuple[str, int]]) -> list[str]:
    """The wrapper's argv before `--` and the handler's own argv."""
    path = prlimit_path()
    if path is None:  # registry.py rejected such handlers; never run one unlimited
        raise FileNotFoundError("prlimit(1) not found: cannot apply the handler's limits")
    options = []
    for key, value in limits:
        shown = "unlimited" if value == UNLIMITED else str(value)
        options.append(f"--{RLIMITS[key][0]}={shown}:{shown}")
    return [path, *options, "--"]


@functools.cache
def setpriv_path() -> str | None:
    """util-linux's setpriv: the identity switch of a child that first joins its cgroup as us."""
    return shutil.which("setpriv") or shutil.which("setpriv", path="/usr/bin:/bin")


def setpriv_argv(uid: int | None, gid: int | None, groups: tuple[int, ...] | None) -> list[str]:
    """setresuid/setresgid (saved ids too) and setgroups, as Popen's user=/group= would."""
    path = setpriv_path()
    if path is None:  # registry.py rejected such handlers; never run one as ourselves
        raise FileNotFoundError("setpriv(1) not found: cannot switch the handler's identity")
    argv = [path]
    if gid is not None:
        argv.append(f"--regid={gid}")
    if groups is None:
        argv.append("--keep-groups")
    else:
        argv.append(f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups")
    if uid is not None:
        argv.append(f"--reuid={uid}")
    return [*argv, "--"]


def parse_env_names(field: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ValueError(f"{field} must be a list of variable names")
    for name in value:
        _check_name(field, name)
    return tuple(value)


def check_env_table(env: object) -> dict[str, str]:
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("env must be a table of strings")
    for name, value in env.items():
        _check_name("env", name)
        if "\0" in value:
            raise ValueError(f"env: the value of {name} contains a NUL byte")
    return dict(env)


def _check_name(field: str, name: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise ValueError(f"{field}: {name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(f"{field}: {name} is reserved: {RESERVED_PREFIX}* are punchclock's own")


def parse_env_files(value: object, base: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Absolute paths; `$CREDENTIALS_DIRECTORY` (systemd's LoadCredential=) is expanded."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ValueError("env_files must be a list of file paths")
    creds = environ.get("CREDENTIALS_DIRECTORY", "")
    paths = []
    for raw in value:
        if CREDENTIALS.search(raw) and not creds:
            raise ValueError(f"env_files: {raw!r} needs CREDENTIALS_DIRECTORY, which is unset")
        expanded = CREDENTIALS.sub(lambda _: creds, raw)
        paths.append(str(base / expanded))  # an absolute path stays as it is
    return tuple(paths)


class EnvFileError(Exception):
    """A file of `env_files` that cannot be used; the text names the file and line only."""


def read_env_files(paths: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments skipped, an `export ` prefix allowed, one
    pair of quotes around the value removed). Values are secrets: errors never show them."""
    env: dict[str, str] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read(ENV_FILE_MAX + 1)
        except OSError as exc:
            raise EnvFileError(f"env file {path}: cannot read: {exc.strerror}") from None
        if len(data) > ENV_FILE_MAX:
            raise EnvFileError(f"env file {path}: larger than {ENV_FILE_MAX} bytes")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise EnvFileError(f"env file {path}: not UTF-8 text") from None
        for number, line in enumerate(text.splitlines(), 1):
            env.update(_env_line(path, number, line))
    return env


def _env_line(path: str, number: int, line: str) -> dict[str, str]:
    line = line.strip()
    if not line or line.startswith("#"):
        return {}
    line = line.removeprefix("export ").lstrip()
    name, eq, value = line.partition("=")
    name = name.strip()
    where = f"env file {path} line {number}"
    if not eq:
        raise EnvFileError(f"{where}: expected KEY=VALUE")
    if not ENV_NAME.fullmatch(name):
        raise EnvFileError(f"{where}: the name before '=' is not a variable name")
    if name.startswith(RESERVED_PREFIX):
        raise EnvFileError(f"{where}: {name} is reserved: {RESERVED_PREFIX}* are punchclock's own")
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if "\0" in value:
        raise EnvFileError(f"{where}: the value contains a NUL byte")
    return {name: value}


def clean_env(
    identity: Identity | None,
    pass_env: Iterable[str],
    env: Mapping[str, str],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """A child's environment before env_files and its own variables: PATH, LANG, TZ if set,
    HOME/USER/LOGNAME (of the run-as user, else the supervisor's), then `pass_env` names
    copied from `environ` (unset ones are skipped), then `env`."""
    out = {"PATH": environ.get("PATH") or os.defpath}
    for name in ("LANG", "TZ"):
        if name in environ:
            out[name] = environ[name]
    if identity is not None:
        out.update(HOME=identity.home, USER=identity.user, LOGNAME=identity.user)
    else:
        out.update(_own_names(environ))
    for name in pass_env:
        if name in environ:
            out[name] = environ[name]
    out.update(env)
    return out


def _own_names(environ: Mapping[str, str]) -> dict[str, str]:
    found = {n: environ[n] for n in ("HOME", "USER", "LOGNAME") if environ.get(n)}
    if len(found) < 3:
        try:
            pw = pwd.getpwuid(os.geteuid())
        except KeyError:
            return found
        defaults = {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name}
        found = {**defaults, **found}
    return found
