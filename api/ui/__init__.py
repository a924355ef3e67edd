"""The web dashboard, served by `punchclock api` under /ui/ (site.create_ui)."""
