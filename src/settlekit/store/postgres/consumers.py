"""The consumer repository's PostgreSQL part: row locks, the transaction-id horizon and the blocking writer."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg.errors

from settlekit.store.database import ConsumerDialect, Database, Row, Tx
from settlekit.store.rows import BlockedProbe, ConsumerRowLocked, Gap, LockMode, Writer

_EVENTS_IN_GAPS_OR_AFTER = (
    "SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid::text::bigint, event_id, type,"
    " correlation_id FROM ("
    " (SELECT e.* FROM events e JOIN unnest(?::bigint[], ?::bigint[]) AS g(f, t) ON e.position BETWEEN g.f AND g.t)"
    " UNION ALL (SELECT e.* FROM events e WHERE e.position > ? ORDER BY e.position LIMIT ?)) AS s"
    " ORDER BY position LIMIT ?"
)
_HORIZON = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_CURRENT_XID = "SELECT pg_current_xact_id()::text::bigint"
# The transactions of this database running now (other than the caller's): the only ones that can still commit
# a position the dispatcher has not seen (a writer has its transaction id before it draws one).
_RUNNING_HERE = (
    "ARRAY(SELECT backend_xid::text::bigint FROM pg_stat_activity WHERE datid = (SELECT oid FROM pg_database"
    " WHERE datname = current_database()) AND backend_xid IS NOT NULL AND pid <> pg_backend_pid())"
)
_SNAPSHOT = f"SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, {_RUNNING_HERE}"
_BLOCKED_PROBE = (
    "SELECT c.xmin::text, c.last_processed_position,"
    f" (SELECT MIN(e.position) FROM events e WHERE e.position > c.last_processed_position), {_RUNNING_HERE},"
    " pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    " FROM consumer_state c WHERE c.name = ? AND c.instance_id = ? FOR UPDATE OF c SKIP LOCKED"
)
# Sessions of other roles show no start time without pg_read_all_stats; their age reads 0.
_OLDEST_WRITER = (
    "SELECT pid, datname, state, COALESCE(EXTRACT(EPOCH FROM (clock_timestamp() - xact_start))::float8, 0)"
    " FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
    " ORDER BY age(backend_xid) DESC LIMIT 1"
)


class PostgresConsumers(ConsumerDialect):
    """Turns lock their state row (FOR UPDATE SKIP LOCKED); concurrent writers commit positions out of order."""

    commits_out_of_order = True
    row_locks: Mapping[LockMode, str] = {
        "none": "",
        "skip": " FOR UPDATE SKIP LOCKED",
        "wait": " FOR UPDATE",
        "nowait": " FOR UPDATE NOWAIT",
    }

    def fetchone_locking(self, tx: Tx, sql: str, params: Sequence[Any]) -> Row | None:
        try:
            return tx.fetchone(sql, params)
        except psycopg.errors.LockNotAvailable:
            raise ConsumerRowLocked("the consumer state row is held by another transaction") from None

    def fetch_events(self, tx: Tx, after: str, cursor: int, gaps: Sequence[Gap], limit: int) -> list[Row]:
        if not gaps:
            return tx.fetchall(after, (cursor, limit))
        return tx.fetchall(_EVENTS_IN_GAPS_OR_AFTER, ([g.lo for g in gaps], [g.hi for g in gaps], cursor, limit, limit))

    def horizon(self, tx: Tx) -> int:
        """xmin of the current snapshot: every transaction with a lower xid has ended."""
        return int(tx.scalar(_HORIZON))

    def snapshot(self, tx: Tx) -> tuple[int, frozenset[int]]:
        row = tx.fetchone(_SNAPSHOT)
        assert row is not None
        return int(row[0]), frozenset(int(x) for x in row[1])

    def blocked_probe(self, tx: Tx, name: str, instance_id: str) -> BlockedProbe | None:
        row = tx.fetchone(_BLOCKED_PROBE, (name, instance_id))
        if row is None:
            return None
        return BlockedProbe(str(row[0]), int(row[1]), None if row[2] is None else int(row[2]),
                            frozenset(int(x) for x in row[3]), int(row[4]))

    def observation_xid(self, db: Database) -> int:
        """Every transaction that drew a position before this call has a lower xid, so once the horizon reaches
        this value all of them have ended. (A snapshot's xmax is only one past the highest *completed* xid, so
        an in-flight writer can sit at or above it; a freshly assigned xid has no such hole.)"""
        connection = getattr(db, "connection", None)
        if connection is not None:
            with connection() as conn:
                row = conn.execute(_CURRENT_XID).fetchone()
                return int(row[0])
        with db.transaction() as tx:
            return int(tx.scalar(_CURRENT_XID))

    def oldest_writer(self, db: Database) -> Writer | None:
        """The open transaction with the oldest transaction id in the cluster (other than ours): the one that
        keeps `pg_snapshot_xmin`, and with it gap retirement, from moving on."""
        with db.read() as tx:
            row = tx.fetchone(_OLDEST_WRITER)
        if row is None:
            return None
        return Writer(int(row[0]), row[1], row[2], float(row[3]))

    def turn(self, db: Database, name: str, instance_id: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # the row lock is what other sessions see

    def turn_in_process(self, db: Database, name: str, instance_id: str) -> bool:
        return False

    def processing_keys(self, tx: Tx, db: Database, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Rows of these names that a key-share lock skips are held FOR UPDATE by a turn."""
        names = sorted({k[0] for k in keys})
        marks = ",".join("?" for _ in names)
        sql = f"SELECT name, instance_id FROM consumer_state WHERE name IN ({marks}) FOR KEY SHARE SKIP LOCKED"
        free = {(r[0], r[1]) for r in tx.fetchall(sql, names)}
        return {k for k in keys if k not in free}
