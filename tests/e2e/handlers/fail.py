#!/usr/bin/env python3
"""E2E handler that always fails (exit 1) after saying why on stderr."""

import os
import sys

sys.stdin.read()
print(f"attempt {os.environ['PUNCHCLOCK_ATTEMPT']} failing on purpose", file=sys.stderr)
sys.exit(1)
