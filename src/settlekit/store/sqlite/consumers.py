"""The consumer repository's SQLite part: no row locks and serial writers.

A turn holds the database write lock, so "processing" is only observable from readers: in-process turns mark
themselves here so that state reads and reset can see them.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from settlekit.store.database import ConsumerDialect, Database, Row, Tx
from settlekit.store.rows import Gap, LockMode, Writer, gap_ranges

_local_turns: set[tuple[str, str, str]] = set()
_local_lock = threading.Lock()


class SqliteConsumers(ConsumerDialect):
    """Writers are serialised by the database lock: positions become visible in order, so no gaps arise."""

    commits_out_of_order = False
    row_locks: Mapping[LockMode, str] = {"none": "", "skip": "", "wait": "", "nowait": ""}

    def fetchone_locking(self, tx: Tx, sql: str, params: Sequence[Any]) -> Row | None:
        return tx.fetchone(sql, params)

    def fetch_events(self, tx: Tx, after: str, cursor: int, gaps: Sequence[Gap], limit: int) -> list[Row]:
        if not gaps:
            return tx.fetchall(after, (cursor, limit))
        ranges, bounds = gap_ranges(gaps)
        return tx.fetchall(
            "SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid, event_id, type,"
            f" correlation_id FROM events WHERE position > ? OR {ranges} ORDER BY position LIMIT ?",
            (cursor, *bounds, limit),
        )

    def horizon(self, tx: Tx) -> int:
        return sys.maxsize  # the turn holds the write lock: every other writer has ended

    def observation_xid(self, db: Database) -> int:
        return 0  # writers are serial: every one that drew a position has ended

    def oldest_writer(self, db: Database) -> Writer | None:
        return None

    @contextlib.contextmanager
    def turn(self, db: Database, name: str, instance_id: str) -> Iterator[None]:
        key = (db.url, name, instance_id)
        with _local_lock:
            _local_turns.add(key)
        try:
            yield
        finally:
            with _local_lock:
                _local_turns.discard(key)

    def turn_in_process(self, db: Database, name: str, instance_id: str) -> bool:
        with _local_lock:
            return (db.url, name, instance_id) in _local_turns

    def processing_keys(self, tx: Tx, db: Database, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return {k for k in keys if self.turn_in_process(db, *k)}
