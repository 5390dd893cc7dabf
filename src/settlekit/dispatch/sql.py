"""The dispatcher's own SQL against consumer_state, consumer_dead_letters and events, for both dialects."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from settlekit.dispatch.gaps import parse_gaps
from settlekit.dispatch.model import ConsumerProcessing, ConsumerState, DispatchedEvent, Gap
from settlekit.store.db import Database, Dialect, Tx

LockMode = Literal["none", "skip", "wait", "nowait"]

_STATE_COLS = (
    "name, instance_id, status, last_processed_position, attempts, rearm_count, {gaps}, last_error,"
    " skipped_count, updated_at, {age}"
)
_EVENT_COLS = "position, tenant_id, stream_id, stream_type, seq, event_json, {txid}, event_id, type, correlation_id"


def now_sql(dialect: Dialect) -> str:
    return "now()" if dialect == "postgres" else "strftime('%Y-%m-%dT%H:%M:%fZ','now')"


def age_sql(dialect: Dialect, column: str) -> str:
    """Seconds between `column` and the database clock."""
    if dialect == "postgres":
        return f"EXTRACT(EPOCH FROM (clock_timestamp() - {column}))::float8"
    return f"((julianday('now') - julianday({column})) * 86400.0)"


def gaps_param(dialect: Dialect) -> str:
    return "?::jsonb" if dialect == "postgres" else "?"


def state_select(dialect: Dialect) -> str:
    gaps = "pending_gaps::text" if dialect == "postgres" else "pending_gaps"
    return _STATE_COLS.format(gaps=gaps, age=age_sql(dialect, "updated_at"))


def row_to_state(row: Sequence[Any]) -> tuple[ConsumerState, float]:
    """(state, seconds since updated_at) from a `state_select` row."""
    updated = row[9]
    updated_at = updated.isoformat() if isinstance(updated, datetime) else str(updated)
    state = ConsumerState(
        name=row[0],
        instance_id=row[1],
        status=row[2],
        cursor=int(row[3]),
        attempts=int(row[4]),
        rearm_count=int(row[5]),
        pending_gaps=parse_gaps(row[6]),
        last_error=row[7],
        skipped_count=int(row[8]),
        updated_at=updated_at,
    )
    return state, float(row[10] or 0.0)


def read_state(tx: Tx, name: str, instance_id: str, lock: LockMode = "none") -> tuple[ConsumerState, float] | None:
    sql = f"SELECT {state_select(tx.dialect)} FROM consumer_state WHERE name = ? AND instance_id = ?"
    if tx.dialect == "postgres":
        sql += {
            "none": "",
            "skip": " FOR UPDATE SKIP LOCKED",
            "wait": " FOR UPDATE",
            "nowait": " FOR UPDATE NOWAIT",
        }[lock]
    if lock == "nowait" and tx.dialect == "postgres":
        import psycopg.errors

        try:
            row = tx.fetchone(sql, (name, instance_id))
        except psycopg.errors.LockNotAvailable:
            raise ConsumerProcessing(
                f"consumer {name!r} (instance {instance_id!r}) is in a turn right now; retry",
                consumer=name,
                instanceId=instance_id,
            ) from None
    else:
        row = tx.fetchone(sql, (name, instance_id))
    return None if row is None else row_to_state(row)


def row_exists(tx: Tx, name: str, instance_id: str) -> bool:
    return (
        tx.fetchone("SELECT 1 FROM consumer_state WHERE name = ? AND instance_id = ?", (name, instance_id)) is not None
    )


def high_water_mark(tx: Tx) -> int:
    return int(tx.scalar("SELECT COALESCE(MAX(position), 0) FROM events"))


def horizon(tx: Tx) -> int:
    """xmin of the current snapshot (PostgreSQL): every transaction with a lower xid has ended."""
    return int(tx.scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"))


def observation_xid(db: Database) -> int:
    """A transaction id assigned now, in its own committed transaction (PostgreSQL).

    Every transaction that drew a position before this call has a lower xid, so once the horizon reaches
    this value all of them have ended. (A snapshot's xmax is only one past the highest *completed* xid, so
    an in-flight writer can sit at or above it; a freshly assigned xid has no such hole.)
    """
    connection = getattr(db, "connection", None)
    if connection is not None:
        with connection() as conn:
            row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            return int(row[0])
    with db.transaction() as tx:
        return int(tx.scalar("SELECT pg_current_xact_id()::text::bigint"))


@dataclass(frozen=True)
class Writer:
    """An open transaction that holds a transaction id (PostgreSQL, from pg_stat_activity)."""

    pid: int
    database: str | None
    state: str | None
    age_seconds: float


def oldest_writer(db: Database) -> Writer | None:
    """The open transaction with the oldest transaction id in the cluster (other than ours): the one that
    keeps `pg_snapshot_xmin` — and with it gap retirement — from moving on. None when there is none.
    Sessions of other roles show no start time without pg_read_all_stats; their age reads 0."""
    with db.read() as tx:
        row = tx.fetchone(
            "SELECT pid, datname, state,"
            " COALESCE(EXTRACT(EPOCH FROM (clock_timestamp() - xact_start))::float8, 0)"
            " FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
            " ORDER BY age(backend_xid) DESC LIMIT 1"
        )
    if row is None:
        return None
    return Writer(int(row[0]), row[1], row[2], float(row[3]))


def _event_cols(dialect: Dialect) -> str:
    return _EVENT_COLS.format(txid="txid::text::bigint" if dialect == "postgres" else "txid")


def fetch_events(tx: Tx, cursor: int, gaps: Sequence[Gap], limit: int) -> list[DispatchedEvent]:
    """Rows in a pending gap or past the cursor, in position order, at most `limit`."""
    cols = _event_cols(tx.dialect)
    if not gaps:
        rows = tx.fetchall(f"SELECT {cols} FROM events WHERE position > ? ORDER BY position LIMIT ?", (cursor, limit))
    elif tx.dialect == "postgres":
        rows = tx.fetchall(
            f"SELECT {cols} FROM ("
            f" (SELECT e.* FROM events e JOIN unnest(?::bigint[], ?::bigint[]) AS g(f, t)"
            f"   ON e.position BETWEEN g.f AND g.t)"
            f" UNION ALL (SELECT e.* FROM events e WHERE e.position > ? ORDER BY e.position LIMIT ?)) AS s"
            f" ORDER BY position LIMIT ?",
            ([g.lo for g in gaps], [g.hi for g in gaps], cursor, limit, limit),
        )
    else:
        ranges = " OR ".join("position BETWEEN ? AND ?" for _ in gaps)
        params: list[Any] = [v for g in gaps for v in (g.lo, g.hi)]
        rows = tx.fetchall(
            f"SELECT {cols} FROM events WHERE position > ? OR {ranges} ORDER BY position LIMIT ?",
            (cursor, *params, limit),
        )
    # Both drivers already return ints for the integer columns (txid is cast to bigint on PostgreSQL).
    return [DispatchedEvent(*r) for r in rows]


def smallest_visible_in(tx: Tx, gaps: Sequence[Gap]) -> int | None:
    if not gaps:
        return None
    ranges = " OR ".join("position BETWEEN ? AND ?" for _ in gaps)
    value = tx.scalar(f"SELECT MIN(position) FROM events WHERE {ranges}", [v for g in gaps for v in (g.lo, g.hi)])
    return None if value is None else int(value)


def next_position_after(tx: Tx, cursor: int) -> int | None:
    value = tx.scalar("SELECT MIN(position) FROM events WHERE position > ?", (cursor,))
    return None if value is None else int(value)


def insert_dead_letter(
    tx: Tx,
    name: str,
    instance_id: str,
    position: int,
    reason: str,
    error_class: str | None,
    message: str | None,
) -> None:
    tx.execute(
        "INSERT INTO consumer_dead_letters (consumer_name, instance_id, position, event_id, tenant_id,"
        " stream_id, event_type, reason, error_class, error_message, event_json)"
        " SELECT ?, ?, position, event_id, tenant_id, stream_id, type, ?, ?, ?, event_json FROM events"
        " WHERE position = ?",
        (name, instance_id, reason, error_class, message, position),
    )


def write_state(tx: Tx, state: ConsumerState, *, skipped: int = 0) -> None:
    from settlekit.dispatch.gaps import dump_gaps

    tx.execute(
        f"UPDATE consumer_state SET last_processed_position = ?, attempts = ?, status = ?, last_error = ?,"
        f" pending_gaps = {gaps_param(tx.dialect)}, rearm_count = ?,"
        f" skipped_count = skipped_count + ?, updated_at = {now_sql(tx.dialect)}"
        f" WHERE name = ? AND instance_id = ?",
        (
            state.cursor,
            state.attempts,
            state.status,
            state.last_error,
            dump_gaps(state.pending_gaps),
            state.rearm_count,
            skipped,
            state.name,
            state.instance_id,
        ),
    )


# SQLite has no row locks: a turn holds the database write lock, so "processing" is only observable from
# readers; in-process turns mark themselves here so state()/reset can see them.
_local_turns: set[tuple[str, str, str]] = set()
_local_lock = threading.Lock()


@contextlib.contextmanager
def local_turn(db: Database, name: str, instance_id: str) -> Iterator[None]:
    key = (db.url, name, instance_id)
    with _local_lock:
        _local_turns.add(key)
    try:
        yield
    finally:
        with _local_lock:
            _local_turns.discard(key)


def in_local_turn(db: Database, name: str, instance_id: str) -> bool:
    with _local_lock:
        return (db.url, name, instance_id) in _local_turns


def processing_keys(tx: Tx, db: Database, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (name, instance_id) rows currently locked by a turn."""
    if not keys:
        return set()
    if tx.dialect != "postgres":
        return {k for k in keys if in_local_turn(db, *k)}
    names = sorted({k[0] for k in keys})
    marks = ",".join("?" for _ in names)
    free = {
        (r[0], r[1])
        for r in tx.fetchall(
            f"SELECT name, instance_id FROM consumer_state WHERE name IN ({marks}) FOR KEY SHARE SKIP LOCKED",
            names,
        )
    }
    return {k for k in keys if k not in free}
