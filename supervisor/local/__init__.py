"""A PostgreSQL on this machine for `punchclock up`, the tests and the benchmarks."""
