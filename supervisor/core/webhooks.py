"""What a delivery sends: the body (punchclock or slack format) and the Standard Webhooks
headers (webhook-id, webhook-timestamp, webhook-signature "v1,<base64 HMAC-SHA256 of
id.timestamp.body>" with the channel's whsec_ secret), and the receiver's check. No I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

from supervisor.core.model import utc_iso

TOLERANCE = 300  # seconds a receiver accepts between webhook-timestamp and its clock


def message_id(delivery_id: int) -> str:
    """The stable webhook-id of a delivery: the same on every retry, so receivers dedupe."""
    return f"msg_{delivery_id}"


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(secret: str, headers: dict[str, str], body: bytes, now: float) -> bool:
    """The receiver's check (docs/notifications.md's example does the same): a v1 signature
    of id.timestamp.body matches, and the timestamp is within TOLERANCE of `now` (replays
    are refused)."""
    try:
        msg_id = headers["webhook-id"]
        timestamp = int(headers["webhook-timestamp"])
        signatures = headers["webhook-signature"].split()
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > TOLERANCE:
        return False
    expected = sign(secret, msg_id, timestamp, body)
    return any(hmac.compare_digest(expected, s) for s in signatures)


def headers(secret: str | None, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    out = {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
    }
    if secret:
        out["webhook-signature"] = sign(secret, msg_id, timestamp, body)
    return out


def body(fmt: str, msg_id: str, event: str, created_at: datetime, data: dict[str, Any]) -> bytes:
    """The request body: the whole event (punchclock), or a Slack incoming-webhook message."""
    if fmt == "slack":
        return json.dumps({"text": slack_text(event, data)}).encode()
    doc = {"id": msg_id, "type": event, "timestamp": utc_iso(created_at), "data": data}
    return json.dumps(doc, separators=(",", ":")).encode()


def slack_escape(text: Any) -> str:
    """Slack mrkdwn control characters as entities: `<!channel>` or `<http://x|click>` from a
    handler renders as text, never as a mention or a link (Slack's own escaping rule)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(event: str, data: dict[str, Any]) -> str:
    """The message: every value from the event (job name, error, reason) escaped, and a
    run's error (the handler's stderr tail) in a code block, where `*`/`_` do nothing."""
    job = data.get("job") or {}
    run = data.get("run") or {}
    what = {
        "run_failed": "attempt {attempt} failed, retry scheduled",
        "run_dead": "run is dead after attempt {attempt}",
        "run_missed": "run was missed (skipped)",
        "run_overlap_skipped": "run skipped: the previous one was still running",
        "job_failing": "job is failing ({streak} dead in a row)",
        "job_recovered": "job recovered",
        "job_auto_paused": "{reason}",
        "job_silent": "job is silent: no success for {silent_seconds} s",
        "run_late": "run is late by {late_seconds} s",
        "worker_lost": "worker {worker_id} stopped renewing its leases",
        "test": "test notification",
    }.get(event, event)
    fields = {**run, **data, "attempt": run.get("attempt"), "streak": data.get("streak")}
    text = what.format_map(_Missing({k: slack_escape(v) for k, v in fields.items()}))
    subject = f"*{slack_escape(job['name'])}*: " if job.get("name") else ""
    detail = ""
    if run.get("id"):
        detail = (
            f" (run {slack_escape(run['id'])}, scheduled {slack_escape(run.get('scheduled_at'))})"
        )
    error = ""
    if run.get("error"):
        # ``` inside would end the block early: backticks become U+02CB, a look-alike.
        quoted = slack_escape(str(run["error"])[:500]).replace("`", "\u02cb")
        error = f"\n```{quoted}```"
    return f":rotating_light: punchclock {subject}{text}{detail}{error}"


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"
