"""A PostgreSQL on this machine for `punchclock up`, the tests and the benchmarks, and the
plumbing those share (plumbing.py: waits with a deadline, a process with its JSON log, a
migrated template database). The daemon never imports this package."""
