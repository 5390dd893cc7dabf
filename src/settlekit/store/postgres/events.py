"""PostgreSQL append: one server-side function call swaps the head and inserts the events.

Without follow-up writes the call runs alone in autocommit mode, which makes it its own transaction: one round
trip. With follow-up writes (snapshot side tables, ledger, idempotency) the call's outcome is read first, then the
writes and COMMIT are pipelined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg.errors

from settlekit.store.events import AfterCommit, CommitBatch, Committed, DuplicateKey, HeadMismatch
from settlekit.store.postgres.backend import PostgresDatabase, PostgresTx, pg_sql

_APPEND_SQL = pg_sql(
    "SELECT outcome, base_seq, head_hash, positions FROM settlekit_append(?::text, ?::text, ?::text,"
    " ?::text, ?::boolean, ?::bigint, ?::text, ?::uuid, ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],"
    " ?::text[], ?::text[], ?::text[], ?::text[], ?::text, ?::text, ?::boolean)"
).replace("%s", "%b")
_APPEND1_SQL = pg_sql(
    "SELECT outcome, base_seq, head_hash, positions FROM settlekit_append1(?::text, ?::text, ?::text,"
    " ?::text, ?::boolean, ?::bigint, ?::text, ?::uuid, ?::text, ?::text, ?::text, ?::text, ?::text,"
    " ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::boolean)"
).replace("%s", "%b")
_COLUMNS = ("id", "type", "at", "payloadHash", "prevChainHash", "chainHash", "signature", "signerKeyId")


def append_params(batch: CommitBatch) -> tuple[str, tuple[Any, ...]]:
    """The statement and its parameters: scalars for one event, one array per column otherwise."""
    b = batch
    head = (b.tenant_id, b.stream_id, b.stream_type, b.prev_chain_hash, b.creates_stream, b.expected_version,
            b.snapshot_json, b.batch_id)
    events = b.events
    if len(events) == 1:
        e = events[0]
        return _APPEND1_SQL, (*head, *(e[c] for c in _COLUMNS), b.jsons[0], b.correlation_id, b.causation_id,
                              True)
    columns = [[e[c] for e in events] for c in _COLUMNS]
    return _APPEND_SQL, (*head, *columns, list(b.jsons), b.correlation_id, b.causation_id, True)


def commit(db: PostgresDatabase, batch: CommitBatch, after: AfterCommit | None) -> Committed | HeadMismatch:
    """Run the append function; `after` runs in the same transaction only when the append succeeded."""
    sql, params = append_params(batch)
    try:
        with db.connection() as conn:
            if after is None:
                # One statement in autocommit mode is its own transaction: a single round trip.
                row = conn.execute(sql, params, binary=True).fetchone()
            else:
                with conn.pipeline(), conn.transaction():
                    row = conn.execute(sql, params, binary=True).fetchone()
                    assert row is not None
                    if row[0] != "ok":
                        raise _Conflict(row)
                    after(PostgresTx(conn), int(row[1]), [int(p) for p in row[3]])
    except _Conflict as conflict:
        row = conflict.row
    except psycopg.errors.UniqueViolation as exc:
        raise DuplicateKey(str(exc.diag.constraint_name or exc)) from exc
    assert row is not None
    if row[0] == "conflict":
        return HeadMismatch(None if row[1] is None else int(row[1]), row[2])
    return Committed(int(row[1]), [int(p) for p in row[3]])


def write_group(db: PostgresDatabase, group: Sequence[tuple[CommitBatch, AfterCommit | None]],
                before_commit: Callable[[int], None]) -> list[Committed | HeadMismatch]:
    """Several appends in one transaction (a group commit), pipelined: every function call is sent before the
    first answer is read, then the follow-up writes of those that succeeded; `before_commit(count)` runs once all
    are written. A uniqueness violation raises (the transaction is rolled back)."""
    with db.connection() as conn, conn.pipeline() as pipeline, conn.transaction():
        cursors = []
        for batch, _ in group:
            sql, params = append_params(batch)
            cursor = conn.cursor()
            cursor.execute(sql, params, binary=True)
            cursors.append(cursor)
        pipeline.sync()
        outcomes = [_outcome(cursor.fetchone()) for cursor in cursors]
        tx = PostgresTx(conn)
        for (_, after), outcome in zip(group, outcomes, strict=True):
            if after is not None and isinstance(outcome, Committed):
                after(tx, outcome.base_seq, outcome.positions)
        pipeline.sync()  # a follow-up write's failure surfaces here, before the COMMIT
        before_commit(len(outcomes))
    return outcomes


def _outcome(row: tuple[Any, ...] | None) -> Committed | HeadMismatch:
    assert row is not None
    if row[0] == "conflict":
        return HeadMismatch(None if row[1] is None else int(row[1]), row[2])
    return Committed(int(row[1]), [int(p) for p in row[3]])


class _Conflict(Exception):
    def __init__(self, row: tuple[Any, ...]):
        super().__init__("conflict")
        self.row = row
