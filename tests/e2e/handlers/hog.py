#!/usr/bin/env python3
"""E2E handler that wants memory: allocates and touches payload["mb"] MiB (1 MiB at a time),
then exits 0. Under a lower memory_max the kernel kills it first."""

import json
import sys

payload = json.load(sys.stdin)
blocks = []
for _ in range(int(payload["mb"])):
    blocks.append(b"x" * (1 << 20))
print(f"allocated {len(blocks)} MiB")
