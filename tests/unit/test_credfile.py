"""Secrets read from files (`database_url_file`, `api_tokens_file`, ...): the value is read and
stripped, a file open to group or others or owned by another user is refused like OpenSSH
refuses such a key, a missing file or an unset $CREDENTIALS_DIRECTORY is an error naming the
setting, and no message ever shows the secret."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from supervisor.core.config import ConfigError, load
from supervisor.core.credfile import config_warnings

DSN = "postgresql://punchclock:s3cret-password@db.internal:5432/punchclock"


def _secret(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_database_url_file_is_read_and_stripped(tmp_path: Path) -> None:
    f = _secret(tmp_path / "database-url", f"  {DSN}\n\n")
    cfg = load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL_FILE": str(f)})
    assert cfg.database_url == DSN
    assert cfg.database_url_file == str(f)


def test_file_settings_from_toml_and_tokens_one_per_line(tmp_path: Path) -> None:
    db = _secret(tmp_path / "db", DSN)
    tokens = _secret(
        tmp_path / "tokens",
        "# the API's tokens\nadmin:ops:aaaaaaaaaaaaaaaaaaaa\n\nread:grafana:bbbbbbbbbbbbbbbbbbbb,"
        "read:cccccccccccccccccccc\n",
    )
    toml = tmp_path / "punchclock.toml"
    toml.write_text(f'database_url_file = "{db}"\napi_tokens_file = "{tokens}"\n')
    cfg = load(config_file=toml, environ={})
    assert cfg.database_url == DSN
    assert cfg.api_tokens == (
        "admin:ops:aaaaaaaaaaaaaaaaaaaa",
        "read:grafana:bbbbbbbbbbbbbbbbbbbb",
        "read:cccccccccccccccccccc",
    )


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    f = _secret(tmp_path / "database-url", DSN, mode)
    with pytest.raises(ConfigError) as err:
        load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL_FILE": str(f)})
    message = str(err.value)
    assert message == (
        f"invalid configuration: database_url_file: {f} is open to group or others (mode "
        f"{mode:04o}): it may have been read; run `chmod 600 {f}` (or use systemd's "
        "LoadCredential=)"
    )
    assert "s3cret" not in message


def test_an_api_tokens_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    f = _secret(tmp_path / "tokens", "admin:ops:aaaaaaaaaaaaaaaaaaaa", 0o644)
    with pytest.raises(ConfigError, match=r"api_tokens_file: .* open to group or others"):
        load(config_file=None, environ={"PUNCHCLOCK_API_TOKENS_FILE": str(f)})


def test_a_missing_file_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as err:
        load(config_file=None, environ={"PUNCHCLOCK_API_TOKENS_FILE": str(missing)})
    assert str(err.value) == (
        f"invalid configuration: api_tokens_file: cannot read {missing}: No such file or directory"
    )


def test_empty_relative_and_doubly_set_are_refused(tmp_path: Path) -> None:
    empty = _secret(tmp_path / "empty", "\n  \n")
    with pytest.raises(ConfigError, match=f"database_url_file: {empty} is empty"):
        load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL_FILE": str(empty)})
    with pytest.raises(ConfigError, match="database_url_file: 'creds/db' is not an absolute"):
        load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL_FILE": "creds/db"})
    f = _secret(tmp_path / "db", DSN)
    env = {"PUNCHCLOCK_DATABASE_URL_FILE": str(f), "PUNCHCLOCK_DATABASE_URL": DSN}
    with pytest.raises(ConfigError) as err:
        load(config_file=None, environ=env)
    assert str(err.value) == (
        "invalid configuration: database_url and database_url_file are both set: keep one"
    )
    tokens = _secret(tmp_path / "tokens", "# nothing yet\n")
    with pytest.raises(ConfigError, match="api_tokens_file: the file holds no token"):
        load(config_file=None, environ={"PUNCHCLOCK_API_TOKENS_FILE": str(tokens)})


def test_credentials_directory_is_expanded_and_trusted(tmp_path: Path) -> None:
    """systemd's LoadCredential= files: mode 0400 (0440 shown with an ACL for the unit's user),
    owned by root or the unit's user, in a directory private to the unit."""
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o500)
    _secret(creds / "database-url", DSN + "\n", 0o440)
    env = {
        "CREDENTIALS_DIRECTORY": str(creds),
        "PUNCHCLOCK_DATABASE_URL_FILE": "$CREDENTIALS_DIRECTORY/database-url",
    }
    assert load(config_file=None, environ=env).database_url == DSN
    env["PUNCHCLOCK_DATABASE_URL_FILE"] = "${CREDENTIALS_DIRECTORY}/database-url"
    assert load(config_file=None, environ=env).database_url == DSN
    del env["CREDENTIALS_DIRECTORY"]
    with pytest.raises(ConfigError) as err:
        load(config_file=None, environ=env)
    assert str(err.value) == (
        "invalid configuration: database_url_file: '${CREDENTIALS_DIRECTORY}/database-url' "
        "needs CREDENTIALS_DIRECTORY, which is unset"
    )


def test_a_path_out_of_the_credentials_directory_is_checked(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.mkdir()
    outside = _secret(tmp_path / "database-url", DSN, 0o644)
    env = {
        "CREDENTIALS_DIRECTORY": str(creds),
        "PUNCHCLOCK_DATABASE_URL_FILE": "$CREDENTIALS_DIRECTORY/../database-url",
    }
    with pytest.raises(ConfigError, match="open to group or others"):
        load(config_file=None, environ=env)
    assert outside.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    f = _secret(tmp_path / "database-url", DSN)
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(f, nobody, -1)
    with pytest.raises(ConfigError) as err:
        load(config_file=None, environ={"PUNCHCLOCK_DATABASE_URL_FILE": str(f)})
    assert str(err.value) == (
        f"invalid configuration: database_url_file: {f} belongs to uid {nobody}, neither this "
        "user (uid 0) nor root: refusing a secret another user can replace"
    )


def test_check_warns_about_inline_secrets(tmp_path: Path) -> None:
    inline = load(
        config_file=None,
        environ={
            "PUNCHCLOCK_DATABASE_URL": DSN,
            "PUNCHCLOCK_LISTEN_DATABASE_URL": "postgresql://punchclock@db.internal/punchclock",
            "PUNCHCLOCK_API_TOKENS": "admin:ops:aaaaaaaaaaaaaaaaaaaa",
        },
    )
    assert config_warnings(inline) == [
        "database_url holds a password inline: put the URL in database_url_file (a 0600 "
        "file, or systemd's LoadCredential=)",
        "api_tokens are given inline (a flag, the environment or the TOML file): put them in "
        "api_tokens_file (a 0600 file, or systemd's LoadCredential=)",
    ]
    db = _secret(tmp_path / "db", DSN)
    tokens = _secret(tmp_path / "tokens", "admin:ops:aaaaaaaaaaaaaaaaaaaa")
    env = {"PUNCHCLOCK_DATABASE_URL_FILE": str(db), "PUNCHCLOCK_API_TOKENS_FILE": str(tokens)}
    assert config_warnings(load(config_file=None, environ=env)) == []
