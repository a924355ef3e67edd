"""The dashboard's reads and writes (api/ui): the named blocks of ui.sql, one method each,
on top of Store so one transaction can mix them with the job and run operations. Rows leave
as the frozen values below."""

from __future__ import annotations

from supervisor.core.store import Store


class Dashboard(Store):
    """Store plus the `ui_*` queries."""

    @classmethod
    def over(cls, store: Store) -> Dashboard:
        """The dashboard's queries over the same pool (or connection) as `store`."""
        return cls(store._ex, store._pool)
