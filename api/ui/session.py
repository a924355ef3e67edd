"""Dashboard sessions: a signed cookie (no server state) and the CSRF token bound to it.

The signing key is derived from the configuration, so every API process with the same
configuration accepts the same cookies: with API tokens, from the SHA-256 digests of the
configured tokens (changing the tokens ends every session); without tokens (loopback only),
from the database URL. A session names the token it was opened with by a keyed fingerprint,
so removing that token from the configuration ends its sessions at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from api.auth import Tokens

COOKIE = "punchclock_session"
SESSION_SECONDS = 12 * 3600
_LABEL = b"punchclock-ui-session-v1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    """`role` None: a visitor who has not logged in yet (the cookie only carries the CSRF
    binding of the login form)."""

    sid: str
    role: str | None
    token: str | None  # fingerprint of the token it was opened with
    expires: int


class Sessions:
    """Signs and checks session cookies and CSRF tokens for one configuration."""

    def __init__(self, tokens: Tokens, database_url: str) -> None:
        self.tokens = tokens
        if tokens.entries:
            material = b"".join(sorted(d for _, d in tokens.entries))
        else:
            material = hashlib.sha256(database_url.encode("utf-8", "surrogateescape")).digest()
        self._key = hmac.new(_LABEL, material, hashlib.sha256).digest()

    @property
    def open(self) -> bool:
        """No tokens: every (loopback) caller is admin without logging in, as in the API."""
        return not self.tokens.entries

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        return hmac.new(self._key, purpose + b"\0" + data, hashlib.sha256).digest()

    def fingerprint(self, token: str) -> str:
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        return _b64(self._mac(b"token", digest)[:12])

    def new(self, role: str | None, token: str | None = None) -> Session:
        token_id = None if token is None else self.fingerprint(token)
        expires = int(time.time()) + SESSION_SECONDS
        return Session(secrets.token_urlsafe(18), role, token_id, expires)

    def login(self, token: str) -> Session | None:
        """A fresh session (new id: no fixation) for a valid token, else None."""
        role = self.tokens.role_of(token)
        return None if role is None else self.new(role, token)

    def encode(self, s: Session) -> str:
        body = json.dumps([s.sid, s.role, s.token, s.expires], separators=(",", ":"))
        data = body.encode()
        return f"{_b64(data)}.{_b64(self._mac(b'session', data))}"

    def decode(self, cookie: str | None) -> Session | None:
        """The session in a cookie, or None: bad signature, expired, or its token no longer
        configured with its role."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, _, mac = cookie.partition(".")
        try:
            data, given = _unb64(body), _unb64(mac)
            if not hmac.compare_digest(given, self._mac(b"session", data)):
                return None
            sid, role, token, expires = json.loads(data)
        except (ValueError, TypeError):
            return None
        if not isinstance(expires, int) or expires < time.time():
            return None
        if role is not None and not self.open and not self._still_valid(role, token):
            return None
        return Session(str(sid), role, token, expires)

    def _still_valid(self, role: str, token_id: object) -> bool:
        # The fingerprint is keyed, so it is recomputed from the configured digests.
        found = False
        for r, digest in self.tokens.entries:
            fp = _b64(self._mac(b"token", digest)[:12])
            found |= r == role and hmac.compare_digest(fp, str(token_id))
        return found

    def csrf(self, s: Session) -> str:
        return _b64(self._mac(b"csrf", s.sid.encode())[:18])

    def csrf_ok(self, s: Session, given: str) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf(s), given)
