#!/bin/sh
# Example handler that takes a while: sleeps {"seconds": N} (default 5); exit 0.
# Useful to watch leases, timeouts and graceful shutdown at work.
set -eu
seconds=$(python3 -c 'import json,sys; print(float(json.load(sys.stdin).get("seconds", 5)))' 2>/dev/null || echo 5)
echo "sleeping ${seconds}s"
exec sleep "$seconds"
