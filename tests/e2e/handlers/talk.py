#!/usr/bin/env python3
"""E2E handler: print payload["lines"] to stdout one by one, then wait (up to 60 s) for the
file payload["release"] to exist, print "released" and exit 0. The test decides when the
run ends, so it can watch the output of a child that is still running."""

import json
import os
import sys
import time

payload = json.load(sys.stdin)
for line in payload["lines"]:
    print(line, flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(payload["release"]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("released", flush=True)
