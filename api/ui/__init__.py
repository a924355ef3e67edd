"""The web dashboard, served by `punchclock api` under /ui/ (site.create_ui)."""

from api.ui.site import create_ui

__all__ = ["create_ui"]
