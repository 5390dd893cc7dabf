"""The deliveries repository's recovery part: replaying a destination's deliveries over a time window, the
destination's run of failed attempts (for automatic disabling) and its endpoint statistics.

Rows in, rows out, timestamps from the caller's clock (see store/deliveries.py); the rules (when a streak disables,
what a window may be) live in `settlekit.delivery.recovery`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from settlekit.store.db import Tx
from settlekit.store.deliveries import db_time
from settlekit.store.sql import from_timestamp

_REPLAY_WHERE: Final = " WHERE tenant_id = ? AND destination_id = ? AND created_at >= ? AND created_at < ?"


def replay(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, until: datetime,
           now: datetime) -> tuple[int, int]:
    """Send again every delivered or failed delivery of the destination created in [since, until): pending,
    due now, attempts counted afresh (the attempt log numbers on), the same message id (webhook-id).
    Returns (replayed, already pending in the window)."""
    window = (tenant_id, destination_id, db_time(tx, since), db_time(tx, until))
    ts = db_time(tx, now)
    pending = int(tx.scalar(f"SELECT count(*) FROM deliveries{_REPLAY_WHERE} AND state = 'pending'", window))
    replayed = tx.execute(
        "UPDATE deliveries SET state = 'pending', attempt_base = attempt_base + attempts, attempts = 0,"
        " claims = 0, next_attempt_at = ?, acked_at = NULL, lease_owner = NULL, lease_expires_at = NULL,"
        f" expires_at = NULL, updated_at = ?{_REPLAY_WHERE} AND state <> 'pending'",
        (ts, ts, *window),
    )
    return replayed, pending


# --- failure streaks -------------------------------------------------------------------------------------------


def update_streak(tx: Tx, tenant_id: str, destination_id: str, *, reset: bool, failures: int,
                  first_failure: datetime | None) -> None:
    """After a batch of attempts to the destination: `reset` (a success came) restarts the streak at the
    `failures` after the last success; else they add to it. `failing_since` is when the streak began."""
    first = db_time(tx, first_failure) if first_failure is not None else None
    if reset and not failures:
        # the common case, all well: no write (and no row lock) unless a streak is to be ended
        tx.execute("UPDATE destinations SET failure_streak = 0, failing_since = NULL"
                   " WHERE tenant_id = ? AND destination_id = ? AND failure_streak <> 0", (tenant_id, destination_id))
    elif reset:
        tx.execute("UPDATE destinations SET failure_streak = ?, failing_since = ?"
                   " WHERE tenant_id = ? AND destination_id = ?", (failures, first, tenant_id, destination_id))
    elif failures:
        tx.execute("UPDATE destinations SET failure_streak = failure_streak + ?,"
                   " failing_since = COALESCE(failing_since, ?) WHERE tenant_id = ? AND destination_id = ?",
                   (failures, first, tenant_id, destination_id))


def disable_if_failing(tx: Tx, tenant_id: str, destination_id: str, *, min_failures: int, failing_before: datetime,
                       reason: str, now: datetime) -> bool:
    """Disable the destination with `reason` when it is active, its streak has at least `min_failures` attempts
    and began at or before `failing_before`; True when this call disabled it."""
    ts = db_time(tx, now)
    return tx.execute(
        "UPDATE destinations SET status = 'disabled', disabled_reason = ?, disabled_at = ?, updated_at = ?"
        " WHERE tenant_id = ? AND destination_id = ? AND status = 'active' AND failure_streak >= ?"
        " AND failing_since IS NOT NULL AND failing_since <= ?",
        (reason, ts, ts, tenant_id, destination_id, min_failures, db_time(tx, failing_before)),
    ) == 1


def streak(tx: Tx, tenant_id: str, destination_id: str) -> tuple[int, datetime | None]:
    """(failed attempts in a row, when the run began) of the destination; (0, None) when unknown."""
    row = tx.fetchone("SELECT failure_streak, failing_since FROM destinations WHERE tenant_id = ?"
                      " AND destination_id = ?", (tenant_id, destination_id))
    return (0, None) if row is None else (int(row[0]), from_timestamp(row[1]))


# --- endpoint statistics ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptRow:
    started_at: datetime
    duration_ms: float
    http_status: int | None
    error: str | None
    delivery_id: int


_ATTEMPTS: Final = (
    "SELECT a.started_at, a.duration_ms, a.http_status, a.error, a.delivery_id FROM delivery_attempts a"
    " JOIN deliveries d ON d.id = a.delivery_id WHERE d.tenant_id = ? AND d.destination_id = ?"
    " AND a.started_at >= ? AND a.started_at < ? ORDER BY a.started_at DESC LIMIT ?"
)


def attempts_in_window(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, until: datetime,
                       limit: int) -> list[AttemptRow]:
    """The destination's attempts started in [since, until), newest first, at most `limit`."""
    rows = tx.fetchall(_ATTEMPTS, (tenant_id, destination_id, db_time(tx, since), db_time(tx, until), limit))
    return [AttemptRow(_time(r[0]), float(r[1]), r[2], r[3], int(r[4])) for r in rows]


def delivery_states(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime,
                    until: datetime) -> dict[str, int]:
    """The destination's deliveries created in [since, until) per state."""
    rows = tx.fetchall(f"SELECT state, count(*) FROM deliveries{_REPLAY_WHERE} GROUP BY state",
                       (tenant_id, destination_id, db_time(tx, since), db_time(tx, until)))
    return {str(r[0]): int(r[1]) for r in rows}


def _time(value: Any) -> datetime:
    parsed = from_timestamp(value)
    assert parsed is not None
    return parsed
