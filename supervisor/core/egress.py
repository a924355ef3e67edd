"""Where notifications may go (SSRF policy): the address classes refused as destinations,
the check of a channel's, a ping's or the heartbeat's URL at write time (parsed by yarl, the
parser aiohttp sends with), and what a read-only caller may see of a delivery's failure.
No I/O; the notifier's resolver and socket guard (supervisor/outbound.py) apply the same
`refusal` to every address it resolves and connects to.

Refused by default: loopback, link-local, private, unique-local, unspecified, multicast,
reserved and other non-global addresses, IPv4-mapped IPv6, and v6 forms that embed a refused
v4 (6to4, NAT64). `notify_allow_private` allows them all except the cloud metadata
addresses, which are always refused. A name is accepted at write time (DNS may change) and
checked at connect time; `localhost` names are refused at once.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from yarl import URL

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_HINT = "set notify_allow_private = true to allow private destinations"
# Instance metadata services (AWS/GCP/Azure/OpenStack, ECS task, Alibaba, AWS IPv6): never.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")


class Destinations(tuple[str, ...]):
    """notify_allowed_hosts with the notify_allow_private switch riding along, so the
    validators that take the allow-list (events.check_url and its callers) get both. A plain
    tuple means private destinations are refused."""

    allow_private: bool

    def __new__(cls, hosts: tuple[str, ...] = (), allow_private: bool = False) -> Destinations:
        self = super().__new__(cls, hosts)
        self.allow_private = allow_private
        return self


def destinations(cfg: Any) -> Destinations:
    """The write-time policy of a Config (notify_allowed_hosts, notify_allow_private)."""
    return Destinations(cfg.notify_allowed_hosts, bool(getattr(cfg, "notify_allow_private", False)))


def allows_private(allowed: tuple[str, ...]) -> bool:
    return isinstance(allowed, Destinations) and allowed.allow_private


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_class(ip: IP) -> str | None:
    """The refused class of an address ('loopback', 'link-local', ...); None: global."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "IPv4-mapped"
        inner = _embedded_v4(ip)
        if inner is not None and address_class(inner) is not None:
            return address_class(inner)  # 6to4 or NAT64 of a refused v4: its class
        if ip in _UNIQUE_LOCAL:
            return "unique-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "shared (carrier-grade NAT)"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def is_metadata(ip: IP) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return inner in METADATA
    return ip in METADATA


def refusal(ip: IP, allow_private: bool) -> str | None:
    """Why a connection to `ip` is refused ("169.254.169.254 is a link-local address; set
    ..."); None when it is allowed."""
    if is_metadata(ip):
        return f"{ip} is a cloud metadata address (always refused)"
    found = address_class(ip)
    if found is None or allow_private:
        return None
    article = "an" if found[0] in "aeiouI" and not found.startswith("uni") else "a"
    inner = _embedded_v4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    shown = f"{ip} ({inner})" if inner is not None else str(ip)
    return f"{shown} is {article} {found} address; {ALLOW_HINT}"


def parse_ip(text: str) -> IP | None:
    """An address literal, canonical or not: `::1`, `127.0.0.1`, and the legacy IPv4
    spellings inet_aton accepts (`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`); else None."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefxABCDEFX." for c in text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _authority(value: str) -> str:
    rest = value.split("://", 1)[1] if "://" in value else ""
    for stop in "/?#":
        rest = rest.split(stop, 1)[0]
    return rest


def url_problem(value: str, allowed: tuple[str, ...]) -> tuple[URL | None, str | None]:
    """(the parsed URL, None) or (None, what is wrong) for a notification URL: http(s), a
    plain ASCII authority without user info, and a host that is not a refused address literal
    (nor a localhost name) unless the policy allows private ones. The allow-list of names
    is the caller's (events.check_url)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        return None, "must not contain spaces or control characters"
    authority = _authority(value)
    if "\\" in authority or not authority.isascii():
        return None, (
            "the host part must be plain ASCII without backslashes (write an international "
            "name in its xn-- form)"
        )
    try:
        url = URL(value)
        url.port  # noqa: B018 - raises on a malformed port
    except (ValueError, TypeError):
        return None, "is not a valid URL"
    if url.scheme not in ("http", "https") or not url.raw_host or not url.is_absolute():
        return None, "must be an http or https URL with a host"
    if url.raw_user is not None or url.raw_password is not None or "@" in authority:
        return None, "must not carry a user name or password (user:pass@); use headers"
    host = url.raw_host
    ip = parse_ip(host)
    if ip is None:
        if "%" in host or not set(host.lower()) <= _NAME_CHARS:
            return None, f"host {host!r} is not a valid host name"
        name = host.lower().rstrip(".")
        if name == "localhost" or name.endswith(".localhost"):
            problem = refusal(ipaddress.ip_address("127.0.0.1"), allows_private(allowed))
            if problem is not None:
                return None, f"{host} is a loopback name; {ALLOW_HINT}"
        return url, None
    if "%" in host:
        return None, f"host {host!r}: a zone (%) is not allowed"
    problem = refusal(ip, allows_private(allowed))
    if problem is not None:
        return None, problem
    if isinstance(ip, ipaddress.IPv4Address) and host != str(ip):
        return None, f"host {host!r} is not a canonical IPv4 address (write it as {ip})"
    return url, None


def destination(url: str) -> str:
    """Scheme, host and port only: a URL's path and query may hold a token (Slack's do)."""
    try:
        u = URL(url)
        host = u.raw_host or ""
    except ValueError:
        return "(invalid URL)"
    host = f"[{host}]" if ":" in host else host
    port = f":{u.explicit_port}" if u.explicit_port else ""
    return f"{u.scheme}://{host}{port}"


# What a read-only caller sees of a failed attempt: a coarse outcome, never the exception
# text, addresses or exact status that would make deliveries a port scanner (admin sees all).
def coarse_error(status: int | None, error: str | None) -> str | None:
    if error is None:
        return None
    if status is not None:
        return f"HTTP {status // 100}xx"
    if error.startswith("timed out"):
        return "timed out"
    if error.startswith(("refused", "not sent")):
        return "not sent: destination refused or channel disabled"
    return "connection error"


def config_warnings(cfg: Any) -> list[str]:
    """`punchclock check`: insecure notification settings."""
    out = []
    if getattr(cfg, "notify_allow_private", False):
        out.append(
            "notify_allow_private = true: channels and ping URLs may reach loopback and "
            "private addresses (the supervisor hosts' internal network); only the cloud "
            "metadata addresses stay refused"
        )
    return out
