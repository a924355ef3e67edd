"""punchclock benchmarks: `python -m bench [--smoke] [--only SCENARIO] [--json PATH]`.

Each scenario runs real `python -m supervisor supervise` / `python -m supervisor api`
processes against a fresh migrated database on a real PostgreSQL, measures, and reports
metrics with their targets and, where one exists, a baseline measured in the same run.
Benchmarks measure; they do not assert (CI only runs `--smoke` so the code cannot rot).
"""
