"""Child processes, not runs: starting one, watching it and its output, killing its tree or its
cgroup, what it runs as, and the keeper process that kills children if their parent cannot.

Imports nothing of supervisor/ outside this package but core/log.py; the keeper process
imports this package's __init__ too, so it stays empty of code.
"""
