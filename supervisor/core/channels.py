"""Notification channels, job subscriptions and deliveries over the store: the named blocks of
notify.sql, one method each (class Notifications), and the operations the API calls, each
one transaction. Validation is events.py's; sending is the notifier service's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, cast

from supervisor.core.db import Record
from supervisor.core.errors import Conflict, InvalidSpec, InvalidSpecs, NotFound, UniqueConflict
from supervisor.core.events import ChannelSpec, NotifyRule, destination
from supervisor.core.sql import Queries
from supervisor.core.store import Store


@dataclass(frozen=True, slots=True)
class Channel:
    id: int
    spec: ChannelSpec
    created_at: datetime
    updated_at: datetime
    # Set when a receiver answered 410 Gone: nothing is sent until an admin updates it.
    disabled_at: datetime | None = None
    disabled_reason: str | None = None

    @classmethod
    def from_row(cls, row: Record) -> Channel:
        spec = ChannelSpec(
            name=row["name"],
            url=row["url"],
            format=row["format"],
            secret=row["secret"],
            headers=row["headers"] or None,
            all_jobs=tuple(row["all_jobs"]),
            include_payload=row["include_payload"],
        )
        return cls(
            row["id"], spec, row["created_at"], row["updated_at"],
            row.get("disabled_at"), row.get("disabled_reason"),
        )  # fmt: skip

    @property
    def destination(self) -> str:
        """Scheme, host and port only: a URL's path and query may hold a token (Slack's do)."""
        return destination(self.spec.url)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed outbox row with what sending it needs (the channel's secret included). A
    ping (format `ping`) has no channel: a GET of its own URL, unsigned."""

    id: int
    channel_id: int | None
    channel_name: str
    event: str
    data: dict[str, Any]
    created_at: datetime
    attempts: int  # this attempt's number: the fence of its result
    age_seconds: float
    url: str
    format: str
    secret: str | None
    headers: dict[str, str]
    disabled: str | None  # why the channel was disabled (a 410 Gone): not sent

    @classmethod
    def from_row(cls, row: Record) -> Delivery:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


def _spec_args(spec: ChannelSpec) -> list[Any]:
    return [
        spec.name,
        spec.url,
        spec.format,
        spec.secret,
        spec.headers or {},
        list(spec.all_jobs),
        spec.include_payload,
    ]


class Notifications(Queries):
    """Every notify.sql block, one method each."""

    async def insert_channel(self, spec: ChannelSpec) -> Channel:
        row = await self._fetchrow("insert_channel", *_spec_args(spec))
        assert row is not None
        return Channel.from_row(row)

    async def update_channel(self, channel_id: int, spec: ChannelSpec) -> Channel | None:
        row = await self._fetchrow("update_channel", channel_id, *_spec_args(spec))
        return None if row is None else Channel.from_row(row)

    async def get_channel(self, channel_id: int) -> Channel | None:
        row = await self._fetchrow("get_channel", channel_id)
        return None if row is None else Channel.from_row(row)

    async def lock_channel(self, channel_id: int) -> Channel | None:
        row = await self._fetchrow("lock_channel", channel_id)
        return None if row is None else Channel.from_row(row)

    async def list_channels(self) -> list[Channel]:
        return [Channel.from_row(r) for r in await self._fetch("list_channels")]

    async def delete_channel(self, channel_id: int) -> int | None:
        """The number of jobs that subscribed to it; None when there is no such channel."""
        return cast(int | None, await self._fetchval("delete_channel", channel_id))

    async def insert_test_event(self, channel_id: int) -> int | None:
        return cast(int | None, await self._fetchval("insert_test_event", channel_id))

    async def channel_ids(self, names: Sequence[str]) -> dict[str, int]:
        return {r["name"]: r["id"] for r in await self._fetch("channel_ids", list(names))}

    async def replace_job_subscriptions(
        self, job_id: int, channel_ids: Sequence[int], events: Sequence[str]
    ) -> None:
        await self._execute("replace_job_subscriptions", job_id, list(channel_ids), list(events))

    async def job_notify(self, job_id: int) -> list[NotifyRule]:
        rows = await self._fetch("job_notify", job_id)
        return [NotifyRule(r["channel"], tuple(r["events"])) for r in rows]

    async def claim_deliveries(self, limit: int, owner: str, lease: float) -> list[Delivery]:
        rows = await self._fetch("claim_deliveries", limit, owner, lease)
        return [Delivery.from_row(r) for r in rows]

    async def record_delivery(
        self,
        d: Delivery,
        owner: str,
        status_code: int | None,
        error: str | None,
        outcome: str,
        retry_in: float,
        duration: float,
    ) -> bool:
        """Record one attempt; False when the lease was lost (another notifier has it)."""
        args = (d.id, d.attempts, owner, status_code, error, outcome, retry_in, duration)
        return bool(await self._fetchval("record_delivery", *args))

    async def disable_channel(self, channel_id: int, reason: str) -> None:
        """Stop sending to a channel (its receiver answered 410 Gone); a PATCH enables it."""
        await self._execute("disable_channel", channel_id, reason)

    async def raise_late_runs(self, older_than: float, limit: int) -> int:
        """run_late events written (0 when every late run was told already)."""
        return int((await self._execute("raise_late_runs", older_than, limit)).split()[-1])

    async def raise_silent_jobs(self) -> int:
        """job_silent events written (0 when every silent job was told already)."""
        return int((await self._execute("raise_silent_jobs")).split()[-1])

    async def failing_channels(self, seconds: float) -> list[Record]:
        """Channels whose deliveries have all failed for `seconds` (at most 20)."""
        return await self._fetch("failing_channels", seconds)

    async def outbox_depth(self) -> tuple[int, float]:
        row = await self._fetchrow("outbox_depth")
        assert row is not None
        return int(row["pending"]), float(row["oldest_seconds"])

    async def list_deliveries(
        self,
        before_id: int,
        channel_id: int | None,
        statuses: list[str] | None,
        events: list[str] | None,
        job_id: int | None,
        limit: int,
    ) -> list[Record]:
        args = (before_id, channel_id, statuses, events, job_id, limit)
        return await self._fetch("list_deliveries", *args)

    async def list_delivery_attempts(self, ids: Sequence[int]) -> list[Record]:
        return await self._fetch("list_delivery_attempts", list(ids))


def notifications(store: Store) -> Notifications:
    """Notifications over the store's pool or connection (inside `transaction()`, the same
    transaction: a job's subscriptions commit with the job)."""
    return Notifications(store._ex, store._pool)


# ---------------------------------------------------------------- operations


async def create_channel(store: Store, spec: ChannelSpec) -> Channel:
    try:
        return await notifications(store).insert_channel(spec)
    except UniqueConflict:
        raise Conflict(f"name: a channel named {spec.name!r} already exists") from None


async def update_channel(
    store: Store, channel_id: int, body: Any, allowed: tuple[str, ...]
) -> Channel:
    from supervisor.core.events import validate_channel

    try:
        async with store.transaction() as tx:
            n = notifications(tx)
            current = await n.lock_channel(channel_id)
            if current is None:
                raise NotFound(f"channel {channel_id} not found")
            updated = await n.update_channel(
                channel_id, validate_channel(body, allowed, current.spec)
            )
            assert updated is not None
            return updated
    except UniqueConflict:
        raise Conflict(f"name: a channel named {body.get('name')!r} already exists") from None


async def delete_channel(store: Store, channel_id: int) -> int:
    jobs = await notifications(store).delete_channel(channel_id)
    if jobs is None:
        raise NotFound(f"channel {channel_id} not found")
    return jobs


async def test_channel(store: Store, channel_id: int) -> int:
    """Queue a `test` event for this channel; the id of its delivery."""
    delivery = await notifications(store).insert_test_event(channel_id)
    if delivery is None:
        raise NotFound(f"channel {channel_id} not found")
    return delivery


async def set_job_notify(tx: Store, job_id: int, rules: Sequence[NotifyRule] | None) -> None:
    """Store a job's notify list (None: leave it as it is) in the job's transaction; an
    unknown channel is a field-named InvalidSpecs."""
    if rules is None:
        return
    n = notifications(tx)
    ids = await n.channel_ids([r.channel for r in rules])
    unknown = [
        InvalidSpec(f"notify.{i}.channel", f"no channel named {r.channel!r}")
        for i, r in enumerate(rules)
        if r.channel not in ids
    ]
    if unknown:
        raise InvalidSpecs(unknown)
    await n.replace_job_subscriptions(
        job_id, [ids[r.channel] for r in rules], [",".join(r.events) for r in rules]
    )
