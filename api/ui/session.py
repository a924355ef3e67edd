"""Dashboard sessions: a signed cookie, the CSRF token bound to it, an idle timeout and
revocation on logout.

The cookie is `base64url(json[sid, role, token name, token fingerprint, expires, seen])`
and its HMAC-SHA256 under a key derived from `session_secret`; without one, from a random
secret drawn when the process starts (sessions then end on restart, and other API processes
refuse them: set `session_secret` to share sessions between processes). A session ends:
- at `expires` (SESSION_SECONDS after login), whatever its use;
- when unused for `session_idle_timeout` (`seen` moves forward on use, at most once a
  minute, by a fresh cookie);
- at logout: its id is kept in this process's revoked set until it would have expired
  (not shared between processes and lost on restart, when an unset secret ends every
  session anyway);
- when its token is no longer configured with the same role and name (fingerprint keyed
  by the signing key, recomputed from the configured digests).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, replace

from api.auth import Tokens

COOKIE = "punchclock_session"
SECURE_COOKIE = "__Secure-" + COOKIE  # over TLS: the browser keeps it off plain http
SESSION_SECONDS = 12 * 3600
REFRESH_EVERY = 60  # seconds between cookies refreshing `seen`
_LABEL = b"punchclock-ui-session-v2"


def _now() -> float:
    return time.time()  # tests move the clock here


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    """`role` None: a visitor who has not logged in yet (the cookie only carries the CSRF
    binding of the login form). `name` is the token's name: the session's actor."""

    sid: str
    role: str | None
    name: str | None
    token: str | None  # keyed fingerprint of the token it was opened with
    expires: int
    seen: int


class Sessions:
    """Signs and checks session cookies and CSRF tokens for one API process."""

    def __init__(self, tokens: Tokens, secret: str = "", idle: float = 3600.0) -> None:
        self.tokens = tokens
        material = secret.encode("utf-8", "surrogateescape") if secret else secrets.token_bytes(32)
        self._key = hmac.new(_LABEL, material, hashlib.sha256).digest()
        self.idle = idle
        self._revoked: dict[str, int] = {}  # sid -> its expiry (then it is refused anyway)

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        return hmac.new(self._key, purpose + b"\0" + data, hashlib.sha256).digest()

    def _fingerprint(self, digest: bytes) -> str:
        return _b64(self._mac(b"token", digest)[:12])

    def fingerprint(self, token: str) -> str:
        return self._fingerprint(hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest())

    def new(self, role: str | None, name: str | None = None, token: str | None = None) -> Session:
        fp = None if token is None else self.fingerprint(token)
        now = int(_now())
        return Session(secrets.token_urlsafe(18), role, name, fp, now + SESSION_SECONDS, now)

    def login(self, token: str) -> Session | None:
        """A fresh session (new id: no fixation) for a valid token, else None."""
        caller = self.tokens.identify(token)
        return None if caller is None else self.new(caller.role, caller.name, token)

    def encode(self, s: Session) -> str:
        fields = [s.sid, s.role, s.name, s.token, s.expires, s.seen]
        data = json.dumps(fields, separators=(",", ":")).encode()
        return f"{_b64(data)}.{_b64(self._mac(b'session', data))}"

    def decode(self, cookie: str | None) -> Session | None:
        """The session in a cookie, or None: bad signature, expired, idle too long, revoked,
        or its token no longer configured with its role and name."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, _, mac = cookie.partition(".")
        try:
            data, given = _unb64(body), _unb64(mac)
            if not hmac.compare_digest(given, self._mac(b"session", data)):
                return None
            sid, role, name, token, expires, seen = json.loads(data)
        except (ValueError, TypeError):
            return None
        now = _now()
        if not isinstance(expires, int) or not isinstance(seen, int) or expires < now:
            return None
        if role is not None and (seen + self.idle < now or str(sid) in self._revoked):
            return None
        if role is not None and not self._still_valid(role, name, token):
            return None
        return Session(str(sid), role, name, token, expires, seen)

    def _still_valid(self, role: str, name: object, token_id: object) -> bool:
        found = False
        for r, n, digest in self.tokens.entries:  # every entry: no early exit
            same = hmac.compare_digest(self._fingerprint(digest), str(token_id))
            found |= same and r == role and n == name
        return found

    def touch(self, s: Session) -> Session | None:
        """The session with `seen` now, when a refresh is due (else None)."""
        now = int(_now())
        return replace(s, seen=now) if now - s.seen >= REFRESH_EVERY else None

    def revoke(self, s: Session) -> None:
        """Refuse this session from now on (in this process): logout."""
        now = _now()
        for sid in [k for k, until in self._revoked.items() if until < now]:
            del self._revoked[sid]
        self._revoked[s.sid] = s.expires

    def csrf(self, s: Session) -> str:
        return _b64(self._mac(b"csrf", s.sid.encode())[:18])

    def csrf_ok(self, s: Session, given: str) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf(s), given)
