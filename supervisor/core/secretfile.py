"""Secret state files (the generated admin token, the embedded database's password) that no
other user can plant, swap or read.

State lives in one directory per user (`state_dir()`), created 0700 (0711 for root: the
embedded PostgreSQL runs as another user and must traverse it to its data directory). Files
are created 0600 with O_CREAT|O_EXCL and opened with O_NOFOLLOW. As OpenSSH does for keys, an
existing directory or file that is a symbolic link, belongs to another user, or that group or
others may read or write, is refused with the path and the problem: its content is never used.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from supervisor.core.errors import PunchclockError

STATE_DIR_ENV = "PUNCHCLOCK_STATE_DIR"
ADMIN_TOKEN_FILE = "admin-token"


class InsecureFile(PunchclockError):
    """A state directory or secret file that another user could have planted or can read."""


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This user's punchclock state directory: $PUNCHCLOCK_STATE_DIR, else /var/lib/punchclock
    for root, else $XDG_DATA_HOME/punchclock (~/.local/share/punchclock): the parent of
    `punchclock up`'s default data directory, so its token and database share one directory."""
    env = os.environ if environ is None else environ
    if given := env.get(STATE_DIR_ENV, ""):
        return Path(given).absolute()
    if os.geteuid() == 0:
        return Path("/var/lib/punchclock")
    xdg = env.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local/share"
    return base / "punchclock"


def admin_token_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where `punchclock up` and a tokenless `punchclock api` keep the generated admin token,
    and where the CLI looks for one when it is given none."""
    return state_dir(environ) / ADMIN_TOKEN_FILE


def ensure_dir(path: Path) -> Path:
    """Create `path` (private: 0700, 0711 for root) if missing, then check it as check_dir."""
    mode = 0o711 if os.geteuid() == 0 else 0o700
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, mode)
        os.chmod(path, mode)  # the umask may have taken bits away; never adds any for others
    except FileExistsError:
        pass
    except OSError as exc:
        raise InsecureFile(f"{path}: cannot create the state directory: {exc.strerror}") from None
    check_dir(path)
    return path


def check_dir(path: Path, *, private: bool = True) -> None:
    """Refuse a directory that is a symlink, not ours, or open to others: `private` refuses
    group/others read or write (traverse is allowed); otherwise only write is refused (the
    rule OpenSSH applies to the directories above a key)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InsecureFile(f"{path}: the directory does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise InsecureFile(f"{path}: is a symbolic link; refusing to keep secrets through it")
    if not stat.S_ISDIR(st.st_mode):
        raise InsecureFile(f"{path}: is not a directory")
    _check_owner(path, st)
    bad = 0o066 if private else 0o022
    if st.st_mode & bad:
        mode = stat.S_IMODE(st.st_mode)
        want = "read or write" if private else "write"
        raise InsecureFile(
            f"{path}: group or others can {want} it (mode {mode:04o}); "
            f"run `chmod go-rw {path}` if you trust its contents, or remove it"
        )


def read_secret(path: Path) -> str | None:
    """The stripped content of a secret file, None if there is none; InsecureFile if it is
    a symlink, not a regular file, not ours, or readable or writable by group or others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):  # ELOOP (Linux) or EMLINK (BSD): a symlink was planted
            raise InsecureFile(f"{path}: is a symbolic link; refusing to use it") from None
        raise InsecureFile(f"{path}: cannot open: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())  # the file opened, not the name: no check-then-use race
        if not stat.S_ISREG(st.st_mode):
            raise InsecureFile(f"{path}: is not a regular file")
        _check_owner(path, st)
        if st.st_mode & 0o077:
            raise InsecureFile(
                f"{path}: group or others can access it (mode {stat.S_IMODE(st.st_mode):04o}); "
                "it may have been read or replaced: remove it and a new secret is generated"
            )
        return f.read(64 * 1024).decode("utf-8", "replace").strip()


def create_secret(path: Path, value: str) -> None:
    """Write a new 0600 secret file; FileExistsError if anything (even a symlink) is there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")


def load_or_create(path: Path, make: Callable[[], str], *, private_dir: bool = True) -> str:
    """The secret in `path`, created with `make()` the first time. The directory is checked
    first (check_dir), then the file (read_secret): a planted or exposed one is refused."""
    check_dir(path.parent, private=private_dir)
    for _ in range(2):
        existing = read_secret(path)
        if existing:
            return existing
        if existing is not None:
            raise InsecureFile(f"{path}: is empty; remove it and a new secret is generated")
        value = make()
        try:
            create_secret(path, value)
            return value
        except FileExistsError:  # another process created it meanwhile: read theirs
            continue
    raise InsecureFile(f"{path}: appeared and vanished while being created; retry")


def _check_owner(path: Path, st: os.stat_result) -> None:
    uid = os.geteuid()
    if st.st_uid != uid:
        raise InsecureFile(
            f"{path}: is owned by uid {st.st_uid}, not by this user (uid {uid}); refusing to use it"
        )


def generated_admin_token(environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """This user's generated admin token (`punchclock up`, a tokenless `punchclock api`):
    created in the state directory the first time, reused after; (its file, the token)."""
    path = admin_token_file(environ)
    ensure_dir(path.parent)
    return path, load_or_create(path, lambda: secrets.token_urlsafe(32))
