"""Settings read from a file: `database_url_file`, `listen_database_url_file` and
`api_tokens_file` hold what `database_url`, `listen_database_url` and `api_tokens` would,
so that no secret has to be on argv (every local user reads /proc/<pid>/cmdline) or in a
shared environment file.

`$CREDENTIALS_DIRECTORY` (or `${CREDENTIALS_DIRECTORY}`) in a path is expanded: systemd's
`LoadCredential=` puts the unit's credentials there (a unit can also write `%d/name` in
`Environment=`, which systemd expands itself). Such files are trusted as systemd made them
(private to the unit's user and root). Any other file must, as OpenSSH requires of a private
key, belong to this user or root and be neither readable nor writable by group or others.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

# file setting -> the setting it fills
FILE_SETTINGS = {
    "database_url_file": "database_url",
    "listen_database_url_file": "listen_database_url",
    "api_tokens_file": "api_tokens",
}
MAX_BYTES = 64 * 1024
_CREDENTIALS = re.compile(r"\$(\{CREDENTIALS_DIRECTORY\}|CREDENTIALS_DIRECTORY\b)")


def apply_files(values: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """`values` (settings by name) with each `*_file` setting's content in the setting it
    fills; ValueError names the setting and the problem, never the content."""
    out = dict(values)
    for file_setting, target in FILE_SETTINGS.items():
        raw = out.get(file_setting)
        if not raw:
            continue
        if out.get(target):
            raise ValueError(f"{target} and {file_setting} are both set: keep one")
        text = read_secret_file(file_setting, raw, environ)
        out[target] = _tokens(file_setting, text) if target == "api_tokens" else text
    return out


def read_secret_file(setting: str, raw: str, environ: Mapping[str, str]) -> str:
    """The stripped content of the file `raw` names (after $CREDENTIALS_DIRECTORY)."""
    creds = environ.get("CREDENTIALS_DIRECTORY", "")
    if _CREDENTIALS.search(raw) and not creds:
        raise ValueError(f"{setting}: {raw!r} needs CREDENTIALS_DIRECTORY, which is unset")
    path = _CREDENTIALS.sub(lambda _: creds, raw)
    if not os.path.isabs(path):
        raise ValueError(f"{setting}: {path!r} is not an absolute path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())  # the file opened, not its name: no check-then-use race
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{setting}: {path} is not a regular file")
        if not (creds and _inside(path, creds)):
            _check_private(setting, path, st)
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{setting}: {path} is larger than {MAX_BYTES} bytes")
    try:
        text = data.decode().strip()
    except UnicodeDecodeError:
        raise ValueError(f"{setting}: {path} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{setting}: {path} is empty")
    return text


def _inside(path: str, directory: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([real, base]) == base


def _check_private(setting: str, path: str, st: os.stat_result) -> None:
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        raise ValueError(
            f"{setting}: {path} belongs to uid {st.st_uid}, neither this user (uid {uid}) "
            "nor root: refusing a secret another user can replace"
        )
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise ValueError(
            f"{setting}: {path} is open to group or others (mode {mode:04o}): it may have "
            f"been read; run `chmod 600 {path}` (or use systemd's LoadCredential=)"
        )


def _tokens(setting: str, text: str) -> tuple[str, ...]:
    """api_tokens entries, one per line or comma separated; blank lines and `#` comments
    skipped."""
    entries: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            entries += [e.strip() for e in line.split(",") if e.strip()]
    if not entries:
        raise ValueError(f"{setting}: the file holds no token")
    return tuple(entries)


def config_warnings(cfg: Any) -> list[str]:  # a Config (config imports this module)
    """For `punchclock check`: secrets given inline (a flag, which every local user sees in
    ps, an environment variable or the TOML file) rather than in their `*_file` setting."""
    out = []
    for file_setting, target in FILE_SETTINGS.items():
        value = getattr(cfg, target)
        if getattr(cfg, file_setting) or not value:
            continue
        if target == "api_tokens":
            out.append(
                "api_tokens are given inline (a flag, the environment or the TOML file): put "
                "them in api_tokens_file (a 0600 file, or systemd's LoadCredential=)"
            )
        elif _has_password(value):
            out.append(
                f"{target} holds a password inline: put the URL in {file_setting} (a 0600 "
                "file, or systemd's LoadCredential=)"
            )
    return out


def _has_password(dsn: str) -> bool:
    try:
        return bool(urlsplit(dsn).password)
    except ValueError:
        return False
