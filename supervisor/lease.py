"""The lease protocol's fractions of the TTL, named once (DESIGN.md, Lease and fencing).

A lease lasts `ttl` seconds on the database clock. A host renews every RENEW of it; when
less than SELF_FENCE of its provable lease is left it kills its own child (TERM, then KILL);
its keeper process kills the child's group outright KEEPER_MARGIN before the provable end,
whether or not the supervisor's event loop still runs (frozen, blocked, stopped).
"""

from __future__ import annotations

RENEW = 1 / 3
SELF_FENCE = 1 / 4
KEEPER_MARGIN = 1 / 8
FENCE_POLL = 1 / 20


def keeper_kill_by(valid_until: float, ttl: float) -> float:
    """The monotonic instant at which the keeper kills a child whose lease holds until
    `valid_until` (monotonic) unless a renewal moves it."""
    return valid_until - ttl * KEEPER_MARGIN
