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

from settlekit.store.postgres.backend import PostgresDatabase, PostgresTx, pg_sql

_APPEND_SQL = pg_sql(
    "SELECT outcome, base_seq, head_hash, positions FROM settlekit_append(?::text, ?::text, ?::text,"
    " ?::text, ?::boolean, ?::bigint, ?::text, ?::uuid, ?::text[], ?::text, ?::text, ?::boolean)"
).replace("%s", "%b")


class UniqueViolation(Exception):
    def __init__(self, constraint: str):
        super().__init__(constraint)
        self.constraint = constraint


AfterAppend = Callable[[PostgresTx, int, list[int]], None]


def append(db: PostgresDatabase, params: Sequence[Any], after: AfterAppend | None) -> tuple[Any, ...]:
    """Run the append function (its event columns flattened into one text array, 9 per event); returns ('ok', base_seq, positions) or ('conflict', seq, chain_hash).

    `params` are the function's arguments without the trailing notify flag. `after` runs in the same
    transaction only when the append succeeded."""
    try:
        with db.pool.connection() as conn:
            if after is None:
                # One statement in autocommit mode is its own transaction: a single round trip.
                row = conn.execute(_APPEND_SQL, (*params, True), binary=True).fetchone()
            else:
                with conn.pipeline(), conn.transaction():
                    row = conn.execute(_APPEND_SQL, (*params, True), binary=True).fetchone()
                    assert row is not None
                    if row[0] != "ok":
                        raise _Conflict(row)
                    after(PostgresTx(conn), int(row[1]), [int(p) for p in row[3]])
    except _Conflict as conflict:
        row = conflict.row
    except psycopg.errors.UniqueViolation as exc:
        raise UniqueViolation(str(exc.diag.constraint_name or exc)) from exc
    assert row is not None
    if row[0] == "conflict":
        return ("conflict", None if row[1] is None else int(row[1]), row[2])
    return ("ok", int(row[1]), [int(p) for p in row[3]])


class _Conflict(Exception):
    def __init__(self, row: tuple[Any, ...]):
        super().__init__("conflict")
        self.row = row
