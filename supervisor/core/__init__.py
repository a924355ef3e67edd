"""What the API and the daemon share: the domain, the data layer, planning, observability.
Imports nothing else from supervisor/ (tests/unit/test_layers.py)."""
