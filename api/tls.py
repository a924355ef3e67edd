"""The API on the wire: HTTPS from tls_cert/tls_key, and no bearer token in clear over a
network.

`punchclock api` serves HTTPS when tls_cert and tls_key are set. Without them it listens
on loopback only, unless behind_proxy says a TLS-terminating proxy in front does the
encryption (the hop from the proxy must then stay on a private network).
"""

from __future__ import annotations

import ssl
from urllib.parse import parse_qs, urlsplit

from api.auth import is_loopback
from supervisor.core.config import Config, ConfigError, parse_listen


def server_context(cfg: Config) -> ssl.SSLContext | None:
    """The HTTPS context (TLS 1.2 at least, the ssl module's modern ciphers), or None."""
    if not cfg.tls_cert and not cfg.tls_key:
        return None
    if not cfg.tls_cert or not cfg.tls_key:  # config validation says so too
        missing = "tls_key" if cfg.tls_cert else "tls_cert"
        raise ConfigError(f"{missing}: required with the other (give both, or neither)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    except FileNotFoundError as exc:
        name = "tls_cert" if exc.filename == cfg.tls_cert else "tls_key"
        raise ConfigError(f"{name}: no such file: {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"tls_cert/tls_key: cannot load the certificate and its key: {exc}"
        ) from None
    return context


def check_wire(cfg: Config) -> None:
    """Refuse to send tokens in clear: a non-loopback api_listen needs TLS or a proxy."""
    host, _ = parse_listen(cfg.api_listen)
    if is_loopback(host) or cfg.tls_cert or cfg.behind_proxy:
        return
    raise ConfigError(
        f"api_listen: refusing to serve plain HTTP on {host}: bearer tokens and session "
        "cookies would cross the network in clear; set tls_cert and tls_key (HTTPS), or "
        "behind_proxy = true when a TLS-terminating proxy fronts the API, or listen on "
        "127.0.0.1"
    )


def config_warnings(cfg: Config) -> list[str]:
    """For `punchclock check`: what on the wire is allowed but worth a second look."""
    warnings = []
    host, _ = parse_listen(cfg.api_listen)
    if cfg.behind_proxy and not cfg.tls_cert and not is_loopback(host):
        warnings.append(
            f"api_listen: plain HTTP on {host} (behind_proxy): make sure only the proxy "
            "can reach it, or set tls_cert and tls_key"
        )
    for name in ("database_url", "listen_database_url"):
        url = getattr(cfg, name)
        if url and _remote_without_verify(url):
            warnings.append(
                f"{name}: a remote database without sslmode=verify-full: its password and "
                "every payload cross the network unverified (add ?sslmode=verify-full)"
            )
    return warnings


def _remote_without_verify(url: str) -> bool:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return False
    if not host or host.startswith("/") or is_loopback(host):
        return False  # a Unix socket or this host
    return parse_qs(parts.query).get("sslmode", [""])[-1] != "verify-full"
