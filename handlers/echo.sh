#!/bin/sh
# Example shell handler: prints its run's identity and payload, then exits 0.
# Contract (handlers/README.md): payload JSON on stdin; PUNCHCLOCK_* variables in the environment.
set -eu
payload=$(cat)
echo "run ${PUNCHCLOCK_RUN_ID} attempt ${PUNCHCLOCK_ATTEMPT} of job ${PUNCHCLOCK_JOB_NAME}" \
     "scheduled ${PUNCHCLOCK_SCHEDULED_AT}"
echo "payload: ${payload}"
