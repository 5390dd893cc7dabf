"""How fast the event log grows, deployment-wide, read from the database (every API process appends to it): from
the primary key alone, with the time each event was recorded. `recorded_at` follows the position (commit order)
up to the few events committed out of order, so the position recorded at an instant is found by a search over
the key (log64(n) queries of 64 lookups each), and the events of a window are the positions between two such
bounds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from settlekit.store.database import Database, Tx
from settlekit.store.sql import from_timestamp, statements

EXACT_ROWS: Final = 5_000  # a last hour of at most this many events is read whole: exact per-minute counts
SAMPLES: Final = 240  # otherwise this many evenly spaced positions place the minutes
TENANT_CAP: Final = 10_000  # a tenant's events of a window are counted up to this many
SEARCH_FANOUT: Final = 64  # positions one query of the search reads


@dataclass(frozen=True)
class AppendRate:
    """Events appended in the last minute and the last hour (positions assigned: an append rolled back leaves a
    gap counted too), and per minute over the last hour (oldest first)."""

    last_minute: int
    last_hour: int
    per_minute: list[int]


def _position_before(tx: Tx, at: datetime, low: int, high: int) -> int:
    """The last position recorded before `at` in [low - 1, high] (low - 1: none): a search that narrows the range
    SEARCH_FANOUT-fold per query (evenly spaced positions read at once; the missing rows of a gap are skipped)."""
    lo, hi = low - 1, high + 1  # lo: recorded before `at` (or none); hi: recorded at or after it (or beyond)
    while hi - lo > 1:
        whole = hi - lo - 1 <= SEARCH_FANOUT
        if whole:  # the rows left, every one
            rows = tx.fetchall(statements("append_rate", tx.dialect)["recorded_between"], (lo, hi))
        else:
            step = (hi - lo) / (SEARCH_FANOUT + 1)
            marks = sorted({lo + max(1, int(step * i)) for i in range(1, SEARCH_FANOUT + 1)} - {hi})
            rows = tx.fetchall(f"SELECT position, recorded_at FROM events WHERE position IN"
                               f" ({', '.join('?' * len(marks))}) ORDER BY position", marks)
            if not rows:  # every mark fell in a gap: the first row after lo decides
                rows = [r for r in tx.fetchall(statements("append_rate", tx.dialect)["recorded_after"], (lo, 1))
                        if int(r[0]) < hi]
                whole = not rows
        for position, recorded_at in rows:
            recorded = from_timestamp(recorded_at)
            if recorded is None or recorded >= at:
                hi = int(position)
                break
            lo = int(position)
        if whole:
            break
    return lo


@dataclass(frozen=True)
class Bounds:
    """The log's last position, and the last positions recorded before an hour and a minute ago."""

    head: int
    hour: int
    minute: int


def bounds(tx: Tx, now: datetime) -> Bounds:
    named = statements("append_rate", tx.dialect)
    head, low = (int(v) for v in tx.fetchone(named["head"]) or (0, 1))
    if head == 0:
        return Bounds(0, 0, 0)
    hour = _position_before(tx, now - timedelta(hours=1), low, head)
    return Bounds(head, hour, _position_before(tx, now - timedelta(minutes=1), max(low, hour + 1), head))


def deployment_rate(db: Database, now: datetime) -> AppendRate:
    """The whole log's rate."""
    with db.read() as tx:
        return deployment_rate_in(tx, bounds(tx, now), now)


def deployment_rate_in(tx: Tx, found: Bounds, now: datetime) -> AppendRate:
    named = statements("append_rate", tx.dialect)
    head, hour, minute = found.head, found.hour, found.minute
    if head == 0:
        return AppendRate(0, 0, [0] * 60)
    if head - hour <= EXACT_ROWS:
        points = [(int(r[0]), from_timestamp(r[1])) for r in tx.fetchall(named["recorded_after"], (hour, EXACT_ROWS))]
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
        return tenant_recent_in(tx, tenant_id, bounds(tx, now))


def tenant_recent_in(tx: Tx, tenant_id: str, found: Bounds) -> tuple[int, int]:
    if found.head == 0:
        return 0, 0
    named = statements("append_rate", tx.dialect)
    return (int(tx.scalar(named["tenant_after"], (tenant_id, found.minute, TENANT_CAP))),
            int(tx.scalar(named["tenant_after"], (tenant_id, found.hour, TENANT_CAP))))
