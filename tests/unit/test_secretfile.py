"""supervisor/core/secretfile.py (issue 62 item 8): a secret file or state directory that
another user planted (owner 65534 here; the tests run as root), that others can read, or
that is a symlink is refused, naming the path and the problem, and its content never used."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.core.secretfile import (
    InsecureFile,
    check_dir,
    ensure_dir,
    generated_admin_token,
    load_or_create,
    read_secret,
)
from supervisor.local.pgserver import LocalPostgres

NOBODY = 65534
PLANTED = "planted-secret-0123456789"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "state"
    monkeypatch.setenv("PUNCHCLOCK_STATE_DIR", str(path))
    yield path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_first_use_creates_a_private_dir_and_a_0600_file_then_reuses_it(state: Path) -> None:
    path, token = generated_admin_token()
    assert path == state / "admin-token" and len(token) >= 32
    assert _mode(state) == (0o711 if os.geteuid() == 0 else 0o700)
    assert _mode(path) == 0o600 and os.stat(path).st_uid == os.geteuid()
    assert generated_admin_token() == (path, token)


def _plant(state: Path, mode: int = 0o600, owner: int | None = None) -> Path:
    ensure_dir(state)
    path = state / "admin-token"
    path.write_text(PLANTED + "\n")
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


@pytest.mark.parametrize(
    ("mode", "owner", "problem"),
    [
        (0o600, NOBODY, "is owned by uid 65534"),
        (0o644, None, "group or others can access it (mode 0644)"),
        (0o640, None, "(mode 0640)"),
        (0o602, None, "(mode 0602)"),
    ],
)
def test_a_planted_or_exposed_token_file_is_refused(
    state: Path, mode: int, owner: int | None, problem: str
) -> None:
    path = _plant(state, mode, owner)
    with pytest.raises(InsecureFile, match=re.escape(problem)) as refused:
        generated_admin_token()
    assert str(path) in str(refused.value) and PLANTED not in str(refused.value)
    assert path.read_text().strip() == PLANTED  # left for the operator to inspect


def test_a_symlinked_token_file_is_refused_and_not_followed(state: Path, tmp_path: Path) -> None:
    ensure_dir(state)
    target = tmp_path / "elsewhere"
    target.write_text(PLANTED)
    target.chmod(0o600)
    (state / "admin-token").symlink_to(target)
    with pytest.raises(InsecureFile, match="is a symbolic link"):
        generated_admin_token()
    dangling = tmp_path / "other"
    (state / "admin-token").unlink()
    (state / "admin-token").symlink_to(dangling)  # O_EXCL|O_NOFOLLOW: never created through it
    with pytest.raises(InsecureFile, match="is a symbolic link"):
        generated_admin_token()
    assert not dangling.exists()


@pytest.mark.parametrize(
    ("mode", "owner", "problem"),
    [
        (0o700, NOBODY, "is owned by uid 65534"),
        (0o755, None, "group or others can read or write it"),
        (0o730, None, "group or others can read or write it"),
    ],
)
def test_a_planted_or_open_state_directory_is_refused(
    state: Path, mode: int, owner: int | None, problem: str
) -> None:
    state.mkdir()
    (state / "admin-token").write_text(PLANTED)
    (state / "admin-token").chmod(0o600)
    state.chmod(mode)
    if owner is not None:
        os.chown(state, owner, owner)
    with pytest.raises(InsecureFile, match=problem):
        generated_admin_token()


def test_a_symlinked_state_directory_is_refused(state: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    state.symlink_to(real)
    with pytest.raises(InsecureFile, match="is a symbolic link"):
        generated_admin_token()
    assert list(real.iterdir()) == []


def test_other_file_kinds_and_empty_files(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(InsecureFile, match="not a regular file"):
        read_secret(fifo)
    empty = tmp_path / "empty"
    empty.touch(0o600)
    with pytest.raises(InsecureFile, match="is empty"):
        load_or_create(empty, lambda: "x")
    assert read_secret(tmp_path / "missing") is None
    with pytest.raises(InsecureFile, match="does not exist"):
        check_dir(tmp_path / "missing")


def test_a_traversable_parent_is_enough_where_asked(tmp_path: Path) -> None:
    """The embedded server's data-dir parent (private_dir=False): others may traverse and
    read it (root's server user must), but not write it."""
    parent = tmp_path / "p"
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)
    assert load_or_create(parent / "s", lambda: "fresh-secret", private_dir=False) == "fresh-secret"
    parent.chmod(0o775)
    with pytest.raises(InsecureFile, match="group or others can write it"):
        load_or_create(parent / "s", lambda: "x", private_dir=False)


def test_the_embedded_servers_password_file_is_checked(tmp_path: Path) -> None:
    """`punchclock up`'s `<data>.password`: a planted one is refused, never used as the DSN's
    password (the private method: starting a server is test_pgserver's business)."""
    tmp_path.chmod(0o755)
    pg = LocalPostgres(tmp_path / "pg", persistent=False)
    password = tmp_path / "pg.password"
    password.write_text(PLANTED)
    password.chmod(0o600)
    os.chown(password, NOBODY, NOBODY)
    with pytest.raises(InsecureFile, match="owned by uid 65534"):
        pg._load_password()
    password.unlink()
    password.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InsecureFile, match="symbolic link"):
        pg._load_password()
    password.unlink()
    created = pg._load_password()
    assert _mode(password) == 0o600 and created != PLANTED
    assert pg._load_password() == created
