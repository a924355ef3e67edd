"""Domain errors shared by the supervisor, the API and the CLI."""

from __future__ import annotations


class PunchclockError(Exception):
    """Base of every domain error."""


class NotFound(PunchclockError):
    """The named job, run or worker does not exist."""


class Conflict(PunchclockError):
    """The request contradicts the current state (duplicate name, wrong run status)."""


class UniqueConflict(Conflict):
    """A write hit a unique constraint (`constraint` names it): the store's translation of
    the database's unique violation."""

    def __init__(self, constraint: str, message: str) -> None:
        super().__init__(message)
        self.constraint = constraint


class RefusedValue(PunchclockError):
    """The database refused a value it was sent (SQLSTATE class 22, or an argument the
    driver cannot encode): the store's translation of a data error. A gap in validation
    when it comes from a request; a result to store without that value when from a child."""

    def __init__(self, sqlstate: str | None, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class InvalidSpec(PunchclockError):
    """A user-supplied value is invalid. `field` names it (dotted for nested values)."""

    def __init__(self, field: str, message: str) -> None:
        field = field or '""'  # a body key "" is named visibly, never as an empty field
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidSpecs(PunchclockError):
    """Several invalid fields at once, so a user can fix them in one go."""

    def __init__(self, errors: list[InvalidSpec]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


class SchemaMismatch(PunchclockError):
    """The database has migrations this build does not know, or a checksum changed."""
