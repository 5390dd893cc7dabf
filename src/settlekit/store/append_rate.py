"""How fast the event log grows, deployment-wide, read from the database (every API process appends to it): from
the primary key alone, with the time each event was recorded. `recorded_at` follows the position (commit order)
up to the few events committed out of order, so the position recorded at an instant is found by a binary search
over the key (about log2(n) lookups), and the events of a window are the positions between two such bounds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from settlekit.store.database import Database, Tx
from settlekit.store.sql import from_timestamp, statements

EXACT_ROWS: Final = 5_000  # a last hour of at most this many events is read whole: exact per-minute counts
SAMPLES: Final = 240  # otherwise this many evenly spaced positions place the minutes
TENANT_CAP: Final = 10_000  # a tenant's events of a window are counted up to this many


@dataclass(frozen=True)
class AppendRate:
    """Events appended in the last minute and the last hour (positions assigned: an append rolled back leaves a
    gap counted too), and per minute over the last hour (oldest first)."""

    last_minute: int
    last_hour: int
    per_minute: list[int]


def _position_before(tx: Tx, at: datetime, low: int, high: int) -> int:
    """The last position recorded before `at` in [low - 1, high] (low - 1: none)."""
    named = statements("append_rate", tx.dialect)
    lo, hi = low - 1, high  # recorded_at(lo) < at, or lo = low - 1; hi: a position beyond the answer, or high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        row = tx.fetchone(named["first_at_or_after"], (mid,))
        if row is None:
            hi = mid - 1
            continue
        recorded = from_timestamp(row[1])
        if recorded is not None and recorded < at:
            lo = int(row[0])
        else:
            hi = mid - 1
    return lo


def deployment_rate(db: Database, now: datetime) -> AppendRate:
    """The whole log's rate."""
    with db.read() as tx:
        named = statements("append_rate", tx.dialect)
        head, low = (int(v) for v in tx.fetchone(named["head"]) or (0, 1))
        if head == 0:
            return AppendRate(0, 0, [0] * 60)
        hour = _position_before(tx, now - timedelta(hours=1), low, head)
        minute = _position_before(tx, now - timedelta(minutes=1), max(low, hour + 1), head)
        if head - hour <= EXACT_ROWS:
            points = [(int(r[0]), from_timestamp(r[1])) for r in tx.fetchall(named["recorded_after"],
                                                                             (hour, EXACT_ROWS))]
            counts = [0] * 60
            for _, recorded in points:
                if recorded is not None and recorded < now:
                    counts[min(59, max(0, int((recorded - (now - timedelta(hours=1))).total_seconds() // 60)))] += 1
            return AppendRate(sum(1 for _, r in points if r is not None and r >= now - timedelta(minutes=1)),
                              len(points), counts)
        step = (head - hour) / SAMPLES
        marks = sorted({hour + 1 + int(i * step) for i in range(SAMPLES)} | {head})
        rows = tx.fetchall(f"SELECT position, recorded_at FROM events WHERE position IN ({', '.join('?' * len(marks))})"
                           " ORDER BY position", marks)
    per_minute = _per_minute([(int(r[0]), from_timestamp(r[1])) for r in rows], now, hour)
    return AppendRate(head - minute, head - hour, per_minute)


def _per_minute(points: list[tuple[int, datetime | None]], now: datetime, start_position: int) -> list[int]:
    """Positions per minute of the last hour, from sampled (position, recorded_at) points in position order: the
    position at each minute's end is read off the samples (the last sampled before it)."""
    start = now - timedelta(hours=1)
    counts = []
    previous = start_position
    for minute in range(1, 61):
        end = start + timedelta(minutes=minute)
        at_end = max((p for p, r in points if r is not None and r < end), default=previous)
        counts.append(max(0, at_end - previous))
        previous = max(previous, at_end)
    return counts


def tenant_recent(db: Database, tenant_id: str, now: datetime) -> tuple[int, int]:
    """The tenant's events appended in the last minute and hour, each counted up to TENANT_CAP (its index only)."""
    with db.read() as tx:
        named = statements("append_rate", tx.dialect)
        head, low = (int(v) for v in tx.fetchone(named["head"]) or (0, 1))
        if head == 0:
            return 0, 0
        hour = _position_before(tx, now - timedelta(hours=1), low, head)
        minute = _position_before(tx, now - timedelta(minutes=1), max(low, hour + 1), head)
        return (int(tx.scalar(named["tenant_after"], (tenant_id, minute, TENANT_CAP))),
                int(tx.scalar(named["tenant_after"], (tenant_id, hour, TENANT_CAP))))
