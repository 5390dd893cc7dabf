"""PostgreSQL append: one server-side function call swaps the head and inserts the events.

Without follow-up writes the call runs alone in autocommit mode, which makes it its own transaction: one round
trip. With follow-up writes (snapshot side tables, ledger, idempotency) the call's outcome is read first, then the
writes and COMMIT are pipelined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import psycopg.errors

from settlekit.store.database import AfterCommit
from settlekit.store.postgres.backend import PostgresDatabase, PostgresTx, pg_sql
from settlekit.store.postgres.ledger import LedgerRows
from settlekit.store.rows import (
    CommitBatch,
    CommitOutcome,
    Committed,
    DuplicateKey,
    GroupRolledBack,
    HeadMismatch,
    KeyInactive,
)

# The append function's arguments after the tenant: the stream, the expected head, the snapshot and batch id, the
# event (scalars; arrays with `[]`), the correlation ids and whether to NOTIFY.
_ARGUMENTS = (", ?::text, ?::text, ?::text, ?::boolean, ?::bigint, ?::text, ?::uuid, {e}, {e}, {e}, {e}, {e}, {e},"
              " {e}, {e}, {e}, ?::text, ?::text, ?::boolean) AS r")
_RESULT = "SELECT r.outcome, r.base_seq, r.head_hash, r.positions FROM "
# A batch that names an API key: `g` yields the tenant only while that key is active, else the function is not
# called and the statement answers no row (KeyInactive). OFFSET 0 keeps the planner from calling the function
# before that test.
_ACTIVE_TENANT = ("(SELECT ?::text AS tenant WHERE EXISTS (SELECT 1 FROM api_keys k WHERE k.key_id = ?::text"
                  " AND k.status = 'active') OFFSET 0) AS g CROSS JOIN LATERAL ")


def _append_sql(function: str, element: str, keyed: bool) -> str:
    call = f"{function}(g.tenant" if keyed else f"{function}(?::text"
    return pg_sql(_RESULT + (_ACTIVE_TENANT if keyed else "") + call + _ARGUMENTS.format(e=element)
                  ).replace("%s", "%b")


# by (one event, a key to check)
_APPEND_SQL = {(one, keyed): _append_sql("settlekit_append1" if one else "settlekit_append",
                                         "?::text" if one else "?::text[]", keyed)
               for one in (True, False) for keyed in (True, False)}
_COLUMNS = ("id", "type", "at", "payloadHash", "prevChainHash", "chainHash", "signature", "signerKeyId")
# A group of one-event appends in ONE statement: the function runs once per row, in the group's order (each call
# sees the rows of the calls before it), and an error in any call fails the statement, so the whole group. When a
# batch names an API key, a row whose key is no longer active is left out before the call (OFFSET 0): it answers
# no row.
_EACH_ARRAYS = ("?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[], ?::bigint[], ?::text[], ?::text[],"
                " ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],"
                " ?::text[], ?::text[]")
_EACH_NAMES = ("tenant, stream, stream_type, expected_hash, expect_empty, expected_seq, snapshot, batch, id, type,"
               " at, payload_hash, prev_hash, chain_hash, signature, key_id, json, correlation, causation")
_EACH_CALL = (" CROSS JOIN LATERAL settlekit_append1(b.tenant, b.stream, b.stream_type, b.expected_hash,"
              " b.expect_empty, b.expected_seq, b.snapshot, b.batch::uuid, b.id, b.type, b.at, b.payload_hash,"
              " b.prev_hash, b.chain_hash, b.signature, b.key_id, b.json, b.correlation, b.causation, TRUE) AS r"
              " ORDER BY b.n")
_EACH_RESULT = "SELECT b.n, r.outcome, r.base_seq, r.head_hash, r.positions FROM "
# by whether a batch of the group names a key
_APPEND_EACH_SQL = {
    False: pg_sql(_EACH_RESULT + f"unnest({_EACH_ARRAYS}) WITH ORDINALITY AS b({_EACH_NAMES}, n)" + _EACH_CALL
                  ).replace("%s", "%b"),
    True: pg_sql(_EACH_RESULT + f"(SELECT * FROM unnest({_EACH_ARRAYS}, ?::text[]) WITH ORDINALITY"
                 f" AS u({_EACH_NAMES}, api_key, n) WHERE u.api_key IS NULL OR EXISTS (SELECT 1 FROM api_keys k"
                 " WHERE k.key_id = u.api_key AND k.status = 'active') OFFSET 0) AS b" + _EACH_CALL
                 ).replace("%s", "%b"),
}


def append_params(batch: CommitBatch) -> tuple[str, tuple[Any, ...]]:
    """The statement and its parameters: scalars for one event, one array per column otherwise; a batch that
    names an API key goes through the statement that checks it."""
    b = batch
    keyed = b.active_api_key is not None
    tenant = (b.tenant_id, b.active_api_key) if keyed else (b.tenant_id,)
    head = (*tenant, b.stream_id, b.stream_type, b.prev_chain_hash, b.creates_stream, b.expected_version,
            b.snapshot_json, b.batch_id)
    events = b.events
    if len(events) == 1:
        e = events[0]
        return _APPEND_SQL[True, keyed], (*head, *(e[c] for c in _COLUMNS), b.jsons[0], b.correlation_id,
                                          b.causation_id, True)
    columns = [[e[c] for e in events] for c in _COLUMNS]
    return _APPEND_SQL[False, keyed], (*head, *columns, list(b.jsons), b.correlation_id, b.causation_id, True)


# A transaction the server rolled back for a deadlock or a serialization failure (SQLSTATE class 40) committed
# nothing: it is run again, up to this many times in all.
_ATTEMPTS = 3


def commit(db: PostgresDatabase, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
    """Run the append function; `after` runs in the same transaction only when the append succeeded. A
    transaction rolled back by the server (deadlock, serialization failure) is tried again."""
    attempt = 1
    while True:
        try:
            return _commit_once(db, batch, after)
        except psycopg.Error as exc:
            if attempt == _ATTEMPTS or not (exc.sqlstate or "").startswith("40"):
                raise
            attempt += 1


def _commit_once(db: PostgresDatabase, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
    sql, params = append_params(batch)
    try:
        with db.connection() as conn:
            if after is None:
                # One statement in autocommit mode is its own transaction: a single round trip.
                row = conn.execute(sql, params, binary=True).fetchone()
            else:
                with conn.pipeline(), conn.transaction():
                    row = conn.execute(sql, params, binary=True).fetchone()
                    if row is None or row[0] != "ok":
                        raise _Conflict(row)
                    after(PostgresTx(conn), int(row[1]), [int(p) for p in row[3]])
    except _Conflict as conflict:
        row = conflict.row
    except psycopg.errors.UniqueViolation as exc:
        raise DuplicateKey(str(exc.diag.constraint_name or exc)) from exc
    return _outcome(batch, row)


def write_group(db: PostgresDatabase, group: Sequence[tuple[CommitBatch, AfterCommit | None]],
                before_commit: Callable[[int], None]) -> list[CommitOutcome]:
    """Several appends in one transaction (a group commit), pipelined in two round trips: the appends (one
    statement when each has one event), whose answers the follow-up writes need; then the follow-up writes of
    those that succeeded, with their ledger rows gathered into one statement, and the COMMIT. One-event appends
    without follow-up writes: their one statement alone, in autocommit mode (one round trip). `before_commit(count)`
    runs once all are sent. A statement the database refuses (a uniqueness violation of an append or of a
    follow-up write, say) rolls the whole transaction back: GroupRolledBack."""
    try:
        return _write_group(db, group, before_commit)
    except psycopg.Error as exc:
        if _refused_statement(exc):
            raise GroupRolledBack(str(exc)) from exc
        raise


def _refused_statement(exc: psycopg.Error) -> bool:
    """An error the server answered for a statement (so the transaction, COMMIT included, did not take effect);
    not a lost connection or a server shutting down, whose outcome is unknown."""
    state = exc.sqlstate
    return state is not None and not state.startswith(("08", "57P"))


def _write_group(db: PostgresDatabase, group: Sequence[tuple[CommitBatch, AfterCommit | None]],
                 before_commit: Callable[[int], None]) -> list[CommitOutcome]:
    batches = [batch for batch, _ in group]
    if all(after is None and len(batch.events) == 1 for batch, after in group):
        # one-event appends without follow-up writes: their one statement in autocommit mode is the transaction
        # (one round trip, no BEGIN and COMMIT); nothing is sent before before_commit, as nothing is committed
        # before it otherwise
        before_commit(len(batches))
        with db.connection() as conn:
            rows = conn.execute(*_each_statement(batches), binary=True).fetchall()
        return _outcomes_by_number(batches, rows)
    with db.connection() as conn, conn.pipeline() as pipeline, conn.transaction():
        if all(len(batch.events) == 1 for batch in batches):
            cursor = conn.cursor()
            cursor.execute(*_each_statement(batches), binary=True)
            pipeline.sync()
            outcomes = _outcomes_by_number(batches, cursor.fetchall())
        else:
            cursors = []
            for batch in batches:
                sql, params = append_params(batch)
                cursors.append(conn.cursor())
                cursors[-1].execute(sql, params, binary=True)
            pipeline.sync()
            outcomes = [_outcome(batch, cursor.fetchone()) for batch, cursor in zip(batches, cursors, strict=True)]
        ledger_rows = LedgerRows()
        tx = PostgresTx(conn, ledger_rows)
        for (_, after), outcome in zip(group, outcomes, strict=True):
            if after is not None and isinstance(outcome, Committed):
                after(tx, outcome.base_seq, outcome.positions)
        ledger_rows.flush(tx)
        before_commit(len(outcomes))  # a follow-up write's failure surfaces with the COMMIT's answer
    return outcomes


def _each_statement(batches: Sequence[CommitBatch]) -> tuple[str, tuple[list[Any], ...]]:
    """`_APPEND_EACH_SQL` for `batches` and its columns: one element per (one-event) batch, and the API keys to
    check when a batch names one."""
    keyed = any(b.active_api_key is not None for b in batches)
    rows = [(b.tenant_id, b.stream_id, b.stream_type, b.prev_chain_hash, b.creates_stream, b.expected_version,
             b.snapshot_json, b.batch_id, *(b.events[0][c] for c in _COLUMNS), b.jsons[0], b.correlation_id,
             b.causation_id, *((b.active_api_key,) if keyed else ())) for b in batches]
    return _APPEND_EACH_SQL[keyed], tuple([row[i] for row in rows] for i in range(len(rows[0])))


def _outcome(batch: CommitBatch, row: tuple[Any, ...] | None) -> CommitOutcome:
    """What the append function answered for `batch` (no row: its API key was not active, nothing called)."""
    if row is None:
        assert batch.active_api_key is not None
        return KeyInactive(batch.active_api_key)
    if row[0] == "conflict":
        return HeadMismatch(None if row[1] is None else int(row[1]), row[2])
    return Committed(int(row[1]), [int(p) for p in row[3]])


def _outcomes_by_number(batches: Sequence[CommitBatch], rows: Sequence[tuple[Any, ...]]) -> list[CommitOutcome]:
    """The answers of `_APPEND_EACH_SQL` by batch: each row names its batch's number (from 1); a batch without one
    was left out for its API key."""
    by_number = {int(row[0]): row[1:] for row in rows}
    return [_outcome(batch, by_number.get(n)) for n, batch in enumerate(batches, start=1)]


class _Conflict(Exception):
    def __init__(self, row: tuple[Any, ...] | None):
        super().__init__("conflict")
        self.row = row
