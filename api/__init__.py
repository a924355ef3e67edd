"""punchclock management REST API (aiohttp) over the shared data layer."""
