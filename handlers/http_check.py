#!/usr/bin/env python3
"""Example Python handler: checks that a URL answers, with the exit codes of the contract.

Payload: {"url": "http://127.0.0.1:8080/healthz", "timeout": 5, "expect_status": 200}
Exit 0 on the expected status; 75 (EX_TEMPFAIL, retried) when the server cannot be reached;
65 (EX_DATAERR, not retried: the run goes dead at once) when the payload is invalid.
"""

import json
import os
import sys
import urllib.error
import urllib.request

EX_DATAERR, EX_TEMPFAIL = 65, 75


def main() -> int:
    try:
        payload = json.load(sys.stdin)
        url = payload["url"]
        timeout = float(payload.get("timeout", 5))
        expect = int(payload.get("expect_status", 200))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"invalid payload: {exc!r}", file=sys.stderr)
        return EX_DATAERR
    # The run id is a natural idempotency key: a run may execute again after a crash.
    request = urllib.request.Request(
        url, headers={"X-Punchclock-Run": os.environ.get("PUNCHCLOCK_RUN_ID", "")}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        print(f"cannot reach {url}: {exc}", file=sys.stderr)
        return EX_TEMPFAIL
    print(f"{url} answered {status}")
    if status != expect:
        print(f"expected {expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
