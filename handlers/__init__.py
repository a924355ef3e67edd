"""Example handlers shipped with punchclock; see handlers/README.md for the contract."""
