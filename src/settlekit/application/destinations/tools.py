"""Endpoint tools for a destination (as Svix offers them): replay its deliveries over a time window, send it a
test message, its statistics. (Automatic disabling after a long run of failed attempts is the delivery worker's:
`delivery.auto_disable`.)

- Replay (`replays`, a recorded job): every delivered or failed delivery of the destination created in
  [since, until) goes back to pending, due now, at a bounded rate, with its attempts counted afresh (the attempt
  log numbers on) and the same message id, so receivers see the same `webhook-id` (and can dedupe).
- Test: one signed POST of a `settlekit.test` message, sent now from the caller's process through the SSRF guard,
  within its deadline; the answer says how it went. Nothing is queued or stored.
- Statistics over a window: attempts, success rate, latency percentiles, the last error, deliveries per state and
  the current failure streak.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from settlekit.application.destinations.operations import DestinationPolicy, circuit_json, get_destination
from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.delivery.signing import delivery_headers
from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_bytes, iso_millis, sha256_hex
from settlekit.store import delivery_recovery as store
from settlekit.store.db import Database

audit = logging.getLogger("settlekit.delivery.audit")

TEST_TYPE: Final = "settlekit.test"
MAX_WINDOW: Final = timedelta(days=90)
STATS_ATTEMPTS: Final = 50_000  # attempts one statistics window reads at most (the newest)
STATS_DELIVERIES: Final = 10_000  # deliveries one statistics window counts per state at most (the newest)


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else iso_millis(dt)


def _utc(dt: datetime | None) -> datetime | None:
    """A window bound in UTC (DELIVERY_WINDOW_INVALID when it has none: out of the representable range)."""
    try:
        return None if dt is None else dt.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValidationError("a window bound is out of range", code="DELIVERY_WINDOW_INVALID") from None


def check_window(since: datetime, until: datetime) -> None:
    """A replay or statistics window: `since` before `until`, at most MAX_WINDOW long."""
    if since >= until:
        raise ValidationError("`since` must be before `until`", code="DELIVERY_WINDOW_INVALID",
                              since=_iso(since), until=_iso(until))
    if until - since > MAX_WINDOW:
        raise ValidationError(f"a window spans at most {MAX_WINDOW.days} days", code="DELIVERY_WINDOW_INVALID",
                              since=_iso(since), until=_iso(until))


# --- replay windows ----------------------------------------------------------------------------------------------


def window(since: datetime, until: datetime | None, now: datetime) -> tuple[datetime, datetime]:
    """A replay window [since, until) in UTC (until: default now); DELIVERY_WINDOW_INVALID when empty or reversed.
    (How long it may be is the replay policy's: `delivery.replays.ReplayPolicy`.)"""
    start = _utc(since) or now
    end = _utc(until) or now
    if start >= end:
        raise ValidationError("`since` must be before `until`", code="DELIVERY_WINDOW_INVALID",
                              since=_iso(start), until=_iso(end))
    return start, end


# --- test message ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SentTest:
    destination_id: str
    message_id: str
    outcome: Outcome

    def to_json(self) -> dict[str, Any]:
        out = self.outcome
        return {"destinationId": self.destination_id, "webhookId": self.message_id, "ok": out.ok,
                "httpStatus": out.status, "error": out.error, "errorMessage": out.error_message,
                "durationMs": round(out.duration_ms, 3), "responseSnippet": out.response_snippet}


def sample_body(destination_id: str, message_id: str, now: datetime) -> dict[str, Any]:
    """The body of a test send."""
    return {"type": TEST_TYPE, "destinationId": destination_id, "testId": message_id, "sentAt": _iso(now)}


def config_for_test_send(timeout: float) -> SenderConfig:
    """The sender of a test message: answered within `timeout` seconds, connected within five at most."""
    return SenderConfig(timeout=timeout, connect_timeout=min(5.0, timeout))


async def send_test(db: Database, tenant_id: str, destination_id: str, *, policy: DestinationPolicy,
                    sender: SenderConfig | None = None, now: datetime | None = None) -> SentTest:
    """POST one signed test message to the destination now (its signing mode and secrets, the SSRF guard of
    `policy`), whether it is active or disabled; NOT_FOUND for an unknown destination."""
    at = _now(now)
    message_id = f"msg_test_{uuid.uuid4().hex}"
    request = await asyncio.to_thread(_test_request, db, tenant_id, destination_id, message_id, policy, at)
    async with WebhookSender(sender) as client:
        outcome = await client.send(request)
    audit.info("test message sent", extra={"tenant_id": tenant_id, "destination_id": destination_id,
                                           "ok": outcome.ok, "http_status": outcome.status})
    return SentTest(destination_id, message_id, outcome)


def _test_request(db: Database, tenant_id: str, destination_id: str, message_id: str, policy: DestinationPolicy,
                  at: datetime) -> PreparedRequest:
    """The signed test POST (reads the destination and its secrets)."""
    dest = get_destination(db, tenant_id, destination_id)
    body = canonical_bytes(sample_body(destination_id, message_id, at))
    with db.read() as tx:
        secrets = policy.secrets().for_destination(tx, dest, at)
    headers = delivery_headers(
        mode=dest.signing,  # type: ignore[arg-type]  # checked when stored
        secrets=secrets, body=body, message_id=message_id, dedupe_key=message_id, delivery_id="test",
        artifact_type=TEST_TYPE, artifact_id=message_id, artifact_hash=sha256_hex(body), order_key=message_id,
        attempt=1, now=at)
    return PreparedRequest(url=dest.url, headers=headers, body=body,
                           policy=policy.ssrf(allow_private_network=dest.allow_private_network))


# --- statistics --------------------------------------------------------------------------------------------------


def percentile(ascending: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ascending values (None for none)."""
    if not ascending:
        return None
    rank = max(1, -int(-len(ascending) * fraction // 1))
    return ascending[min(len(ascending), rank) - 1]


def _last_error(rows: Sequence[store.AttemptRow]) -> dict[str, Any] | None:
    for row in rows:  # newest first
        if not (row.http_status is not None and 200 <= row.http_status < 300):
            return {"at": _iso(row.started_at), "httpStatus": row.http_status, "error": row.error,
                    "deliveryId": row.delivery_id}
    return None


def destination_stats(db: Database, tenant_id: str, destination_id: str, *, since: datetime | None = None,
                      until: datetime | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The destination's endpoint statistics over [since, until) (default: the last 24 hours)."""
    dest = get_destination(db, tenant_id, destination_id)
    end = _utc(until) or _now(now)
    try:
        start = _utc(since) or end - timedelta(hours=24)
    except OverflowError:
        start = end
    check_window(start, end)
    with db.read() as tx:
        rows = store.attempts_in_window(tx, tenant_id, destination_id, since=start, until=end, limit=STATS_ATTEMPTS)
        states, counted, oldest = store.delivery_states(tx, tenant_id, destination_id, since=start, until=end,
                                                        limit=STATS_DELIVERIES)
        failures, failing_since = store.streak(tx, tenant_id, destination_id)
    ok = sum(1 for r in rows if r.http_status is not None and 200 <= r.http_status < 300)
    latencies = sorted(r.duration_ms for r in rows)
    return {
        "destinationId": destination_id, "since": _iso(start), "until": _iso(end),
        "status": dest.status, "disabledReason": dest.disabled_reason,
        "attempts": {"total": len(rows), "succeeded": ok, "failed": len(rows) - ok,
                     "truncated": len(rows) >= STATS_ATTEMPTS},
        "successRate": round(ok / len(rows), 6) if rows else None,
        "latencyMs": {name: percentile(latencies, q) for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "lastError": _last_error(rows),
        "deliveries": {**{state: states.get(state, 0) for state in ("pending", "delivered", "failed")},
                       "truncated": counted >= STATS_DELIVERIES,
                       "countedSince": _iso(oldest) if counted >= STATS_DELIVERIES else _iso(start)},
        "consecutiveFailures": failures, "failingSince": _iso(failing_since),
        "circuit": circuit_json(dest, _now(now)),
    }
