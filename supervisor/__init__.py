"""punchclock supervisor: the per-host daemon and the data layer the API shares."""

__version__ = "0.1.0"
