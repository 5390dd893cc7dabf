"""The deliveries repository's recovery part: replaying a destination's deliveries over a time window, the
destination's run of failed attempts (for automatic disabling) and its endpoint statistics.

Rows in, rows out, timestamps from the caller's clock (see store/deliveries.py); the rules (when a streak disables,
what a window may be) live in `settlekit.delivery.auto_disable` and `settlekit.application.destinations`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from settlekit.store.database import Tx
from settlekit.store.deliveries import REQUEUE_SET, db_time
from settlekit.store.sql import fragment, from_timestamp, statements

# --- replay jobs -------------------------------------------------------------------------------------------------

_REPLAY_COLS: Final = ("replay_id, tenant_id, destination_id, since, until, status, total, replayed, skipped,"
                       " cursor_id, actor, created_at, updated_at, finished_at")


@dataclass(frozen=True)
class ReplayRow:
    replay_id: str
    tenant_id: str
    destination_id: str
    since: datetime
    until: datetime
    status: str  # running | done | canceled
    total: int  # delivered or failed deliveries of the window when the replay was created
    replayed: int  # sent again so far
    skipped: int  # pending by the time the replay reached them (left as they are)
    cursor_id: int  # the replay has gone through the window's deliveries up to this id
    actor: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


def _replay(row: Sequence[Any]) -> ReplayRow:
    return ReplayRow(row[0], row[1], row[2], _time(row[3]), _time(row[4]), row[5], int(row[6]), int(row[7]),
                     int(row[8]), int(row[9]), row[10], _time(row[11]), _time(row[12]), from_timestamp(row[13]))


def window_counts(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime,
                  until: datetime) -> tuple[int, int]:
    """(delivered or failed, pending) deliveries of the destination created in [since, until)."""
    window = (tenant_id, destination_id, db_time(tx, since), db_time(tx, until))
    row = tx.fetchone(statements("delivery_recovery", tx.dialect)["window_counts"], window)
    total, pending = (int(row[0]), int(row[1] or 0)) if row else (0, 0)
    return total - pending, pending


def running_replay(tx: Tx, tenant_id: str, destination_id: str) -> ReplayRow | None:
    row = tx.fetchone(f"SELECT {_REPLAY_COLS} FROM delivery_replays WHERE tenant_id = ? AND destination_id = ?"
                      " AND status = 'running'", (tenant_id, destination_id))
    return _replay(row) if row else None


def running_replays_of(tx: Tx, tenant_id: str) -> int:
    return int(tx.scalar(statements("delivery_recovery", tx.dialect)["running_replays_of"],
                         (tenant_id,)))


def insert_replay(tx: Tx, row: ReplayRow) -> None:
    tx.execute(
        f"INSERT INTO delivery_replays ({_REPLAY_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (row.replay_id, row.tenant_id, row.destination_id, db_time(tx, row.since), db_time(tx, row.until),
         row.status, row.total, row.replayed, row.skipped, row.cursor_id, row.actor, db_time(tx, row.created_at),
         db_time(tx, row.updated_at), db_time(tx, row.finished_at) if row.finished_at else None))


def get_replay(tx: Tx, tenant_id: str, destination_id: str, replay_id: str, *, lock: bool = False
               ) -> ReplayRow | None:
    row = tx.fetchone(f"SELECT {_REPLAY_COLS} FROM delivery_replays WHERE tenant_id = ? AND destination_id = ?"
                      " AND replay_id = ?" + (f" {fragment(tx.dialect, 'row_lock')}" if lock else ""),
                      (tenant_id, destination_id, replay_id))
    return _replay(row) if row else None


def list_replays(tx: Tx, tenant_id: str, destination_id: str, *, limit: int) -> list[ReplayRow]:
    """The destination's replays, newest first."""
    rows = tx.fetchall(f"SELECT {_REPLAY_COLS} FROM delivery_replays WHERE tenant_id = ? AND destination_id = ?"
                       " ORDER BY created_at DESC, replay_id DESC LIMIT ?", (tenant_id, destination_id, limit))
    return [_replay(r) for r in rows]


def any_running_replay(tx: Tx) -> bool:
    return tx.fetchone(statements("delivery_recovery", tx.dialect)["any_running_replay"]) is not None


def lock_running_replays(tx: Tx, *, limit: int) -> list[ReplayRow]:
    """Running replays, least recently advanced first, locked until the transaction ends (PostgreSQL skips the
    ones another worker is advancing)."""
    lock = fragment(tx.dialect, "claim_lock").replace(" OF d", "")
    rows = tx.fetchall(f"SELECT {_REPLAY_COLS} FROM delivery_replays WHERE status = 'running'"
                       f" ORDER BY updated_at LIMIT ? {lock}", (limit,))
    return [_replay(r) for r in rows]


def replay_chunk(tx: Tx, replay: ReplayRow, *, limit: int, now: datetime) -> tuple[int, int, int | None]:
    """Send again the next `limit` deliveries of the replay's window after its cursor (in id order) that are
    delivered or failed: pending, due now, attempts counted afresh, the same message id. Returns (replayed,
    skipped because pending, the last id gone through; None when the window has none left)."""
    rows = tx.fetchall(
        statements("delivery_recovery", tx.dialect)["replay_window_page"],
        (replay.tenant_id, replay.destination_id, db_time(tx, replay.since), db_time(tx, replay.until),
         replay.cursor_id, limit))
    if not rows:
        return 0, 0, None
    ids = [int(r[0]) for r in rows if r[1] != "pending"]
    replayed = 0
    if ids:
        ts = db_time(tx, now)
        replayed = tx.execute(
            f"{REQUEUE_SET} WHERE id IN ({', '.join('?' * len(ids))}) AND state <> 'pending'", (ts, ts, *ids))
    return replayed, len(rows) - replayed, int(rows[-1][0])


def update_replay(tx: Tx, replay_id: str, *, status: str, replayed: int, skipped: int, cursor_id: int,
                  now: datetime, finished: bool) -> None:
    ts = db_time(tx, now)
    tx.execute(statements("delivery_recovery", tx.dialect)["update_replay"],
               (status, replayed, skipped, cursor_id, ts, ts if finished else None, replay_id))


# --- failure streaks -------------------------------------------------------------------------------------------


def update_streak(tx: Tx, tenant_id: str, destination_id: str, *, reset: bool, failures: int,
                  first_failure: datetime | None) -> None:
    """After a batch of attempts to the destination: `reset` (a success came) restarts the streak at the
    `failures` after the last success; else they add to it. `failing_since` is when the streak began."""
    first = db_time(tx, first_failure) if first_failure is not None else None
    if reset and not failures:
        # the common case, all well: no write (and no row lock) unless a streak is to be ended
        tx.execute(statements("delivery_recovery", tx.dialect)["end_streak"], (tenant_id, destination_id))
    elif reset:
        tx.execute(statements("delivery_recovery", tx.dialect)["set_streak"],
                   (failures, first, tenant_id, destination_id))
    elif failures:
        tx.execute(statements("delivery_recovery", tx.dialect)["extend_streak"],
                   (failures, first, tenant_id, destination_id))


def disable_if_failing(tx: Tx, tenant_id: str, destination_id: str, *, min_failures: int, failing_before: datetime,
                       reason: str, now: datetime) -> bool:
    """Disable the destination with `reason` when it is active, its streak has at least `min_failures` attempts
    and began at or before `failing_before`; True when this call disabled it."""
    ts = db_time(tx, now)
    return tx.execute(
        statements("delivery_recovery", tx.dialect)["disable_if_failing"],
        (reason, ts, ts, tenant_id, destination_id, min_failures, db_time(tx, failing_before)),
    ) == 1


def streak(tx: Tx, tenant_id: str, destination_id: str) -> tuple[int, datetime | None]:
    """(failed attempts in a row, when the run began) of the destination; (0, None) when unknown."""
    row = tx.fetchone(statements("delivery_recovery", tx.dialect)["streak"], (tenant_id, destination_id))
    return (0, None) if row is None else (int(row[0]), from_timestamp(row[1]))


# --- endpoint statistics ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptRow:
    started_at: datetime
    duration_ms: float
    http_status: int | None
    error: str | None
    delivery_id: int


def attempts_in_window(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, until: datetime,
                       limit: int) -> list[AttemptRow]:
    """The destination's attempts started in [since, until), newest first, at most `limit`."""
    rows = tx.fetchall(statements("delivery_recovery", tx.dialect)["attempts_in_window"],
                       (tenant_id, destination_id, db_time(tx, since), db_time(tx, until), limit))
    return [AttemptRow(_time(r[0]), float(r[1]), r[2], r[3], int(r[4])) for r in rows]


def delivery_states(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, until: datetime,
                    limit: int) -> tuple[dict[str, int], int, datetime | None]:
    """The newest `limit` deliveries of the destination created in [since, until), counted per state (an
    index-only scan of at most `limit` entries): (counts, deliveries counted, creation time of the oldest
    counted)."""
    rows = tx.fetchall(
        statements("delivery_recovery", tx.dialect)["delivery_states"],
        (tenant_id, destination_id, db_time(tx, since), db_time(tx, until), limit))
    oldest = [t for t in (from_timestamp(r[2]) for r in rows) if t is not None]
    return {str(r[0]): int(r[1]) for r in rows}, sum(int(r[1]) for r in rows), min(oldest, default=None)


def _time(value: Any) -> datetime:
    parsed = from_timestamp(value)
    assert parsed is not None
    return parsed
