"""Consumer repository (05-dispatcher.md §2): consumer_state, consumer_dead_letters and the dispatcher's reads of
the global event order, written once for both backends.

Statements live in `store/queries/consumers.sql` (portable) and `store/<dialect>/queries/consumers.sql`; what the
two databases do differently (row locks, PostgreSQL's transaction-id horizon, SQLite's in-process turn marks) is a
`ConsumerDialect` in `store/postgres/consumers.py` and `store/sqlite/consumers.py`, the database's `family.consumers`.
Every method runs in the caller's transaction unless it says otherwise; transaction boundaries are the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from settlekit.events.canonical import parse_json
from settlekit.store.database import ConsumerDialect, Database, Row, Tx
from settlekit.store.rows import BlockedProbe, ConsumerRowLocked, Gap, LockMode, Writer, gap_ranges
from settlekit.store.sql import statements
from settlekit.store.streams import StoredEvent

# the row types live in store/rows.py (the dialects use them too); consumers of this repository import them here
__all__ = ["BlockedProbe", "ConsumerDialect", "ConsumerRepository", "ConsumerRowLocked", "ConsumerState",
           "DispatchedEvent", "Gap", "LockMode", "PrecheckRow", "Writer", "dump_gaps", "gap_ranges", "parse_gaps"]

# ---------------------------------------------------------------------------------------------------- row types


def parse_gaps(value: Any) -> list[Gap]:
    """Gaps from the stored JSON (text or already decoded)."""
    items = json.loads(value) if isinstance(value, str | bytes) else (value or [])
    return [Gap(int(g["from"]), int(g["to"]), int(g.get("xmax") or 0), float(g.get("at") or 0.0)) for g in items]


def dump_gaps(gaps: Sequence[Gap]) -> str:
    return json.dumps([g.to_json() for g in gaps], separators=(",", ":"))


@dataclass
class ConsumerState:
    name: str
    instance_id: str
    status: str
    cursor: int
    attempts: int
    rearm_count: int
    pending_gaps: list[Gap]
    last_error: str | None
    skipped_count: int
    updated_at: str
    processing: bool = False

    @property
    def pending_gap_positions(self) -> int:
        return sum(g.size for g in self.pending_gaps)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "instanceId": self.instance_id,
            "status": "processing" if self.processing else self.status,
            "storedStatus": self.status,
            "processing": self.processing,
            "lastProcessedPosition": self.cursor,
            "attempts": self.attempts,
            "rearmCount": self.rearm_count,
            "pendingGaps": [g.to_json() for g in self.pending_gaps],
            "lastError": self.last_error,
            "skippedCount": self.skipped_count,
            "updatedAt": self.updated_at,
        }


class DispatchedEvent(StoredEvent):
    """A StoredEvent read by the dispatcher; the envelope JSON is parsed on first access of `event`."""

    def __init__(
        self,
        position: int,
        tenant_id: str,
        stream_id: str,
        stream_type: str,
        seq: int,
        raw: str,
        txid: int | None,
        event_id: str,
        event_type: str,
        correlation_id: str | None,
    ):
        object.__setattr__(
            self,
            "__dict__",
            {
                "position": position,
                "tenant_id": tenant_id,
                "stream_id": stream_id,
                "stream_type": stream_type,
                "seq": seq,
                "txid": txid,
                "raw_json": raw,
                "_event_id": event_id,
                "_type": event_type,
                "correlation_id": correlation_id,
                "_parsed": None,
            },
        )

    raw_json: str
    correlation_id: str | None

    @property
    def event(self) -> dict[str, Any]:
        parsed = self.__dict__["_parsed"]
        if parsed is None:
            parsed = parse_json(self.raw_json)
            object.__setattr__(self, "_parsed", parsed)
        return parsed

    @property
    def event_id(self) -> str:
        return str(self.__dict__["_event_id"])

    @property
    def type(self) -> str:
        return str(self.__dict__["_type"])


class PrecheckRow(NamedTuple):
    """One consumer row as the dispatcher's idle pre-check sees it (the driver's values, unconverted)."""

    name: str
    instance_id: str
    status: str
    cursor: int
    no_gaps: bool | int  # truthy when the row has no pending gaps
    next_event_age: float | None  # seconds since the first event past the cursor was recorded; None: none
    high_water_mark: int


# ---------------------------------------------------------------------------------------------------- dialects


# ---------------------------------------------------------------------------------------------------- repository


def _state(row: Sequence[Any]) -> tuple[ConsumerState, float]:
    """(state, seconds since updated_at) from a row of the `state` columns."""
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


class ConsumerRepository:
    """The only code that reads or writes consumer rows, for one database."""

    def __init__(self, db: Database):
        self.db = db
        self._dialect = db.family.consumers
        self._sql = sql = statements("consumers", db.dialect)
        self._read_state = {mode: sql["state"] + clause for mode, clause in self._dialect.row_locks.items()}
        self._precheck: dict[int, str] = {}  # by the number of names
        self.commits_out_of_order = self._dialect.commits_out_of_order

    # ------------------------------------------------------------------ consumer_state

    def current(self, name: str, instance_id: str) -> ConsumerState | None:
        """The row plus a `processing` flag (a turn holds its lock right now), or None."""
        with self.db.read() as tx:
            got = self.read_state(tx, name, instance_id)
            if got is None:
                return None
            state = got[0]
            state.processing = (name, instance_id) in self.processing_keys(tx, [(name, instance_id)])
        return state

    def register(self, tx: Tx, name: str, instance_id: str, *, at_head: bool) -> None:
        """Create the state row if missing (cursor 0, or the high-water mark with `at_head`); never moves an
        existing cursor."""
        tx.execute(self._sql["register_at_head" if at_head else "register"], (name, instance_id))

    def precheck(self, tx: Tx, names: Sequence[str]) -> list[PrecheckRow]:
        """Every state row of these consumer names with what decides whether a turn can have work."""
        sql = self._precheck.get(len(names))
        if sql is None:
            sql = self._precheck[len(names)] = f"{self._sql['precheck']} ({','.join('?' for _ in names)})"
        return [PrecheckRow._make(r) for r in tx.fetchall(sql, names)]

    def read_state(
        self, tx: Tx, name: str, instance_id: str, lock: LockMode = "none"
    ) -> tuple[ConsumerState, float] | None:
        """(state, seconds since its last update), or None when there is no row (or it is locked under `skip`)."""
        row = self._dialect.fetchone_locking(tx, self._read_state[lock], (name, instance_id))
        return None if row is None else _state(row)

    def exists(self, tx: Tx, name: str, instance_id: str) -> bool:
        return tx.fetchone(self._sql["exists"], (name, instance_id)) is not None

    def list_states(self, tx: Tx) -> list[tuple[ConsumerState, float]]:
        """Every state row, in (name, instance_id) order, with the seconds since the first event past its cursor
        was recorded (0 when there is none)."""
        return [(_state(r)[0], float(r[11] or 0.0)) for r in tx.fetchall(self._sql["list_states"])]

    def write_state(self, tx: Tx, state: ConsumerState, *, skipped: int = 0) -> None:
        """Store cursor, attempts, status, error, gaps and re-arm count; `skipped` adds to the skipped count."""
        tx.execute(
            self._sql["write_state"],
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

    def record_error(self, tx: Tx, name: str, instance_id: str, message: str) -> None:
        tx.execute(self._sql["record_error"], (message, name, instance_id))

    # ------------------------------------------------------------------ turns

    def turn(self, name: str, instance_id: str) -> AbstractContextManager[None]:
        """Hold around a turn's transaction (see `turn_in_process` and `processing_keys`)."""
        return self._dialect.turn(self.db, name, instance_id)

    def turn_in_process(self, name: str, instance_id: str) -> bool:
        """True when a turn of this process holds the row where the database cannot report it (SQLite: a writer
        would just wait for the turn to commit). Always False on PostgreSQL, where a `nowait` read tells."""
        return self._dialect.turn_in_process(self.db, name, instance_id)

    def processing_keys(self, tx: Tx, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (name, instance_id) rows currently held by a turn."""
        if not keys:
            return set()
        return self._dialect.processing_keys(tx, self.db, keys)

    def horizon(self, tx: Tx) -> int:
        return self._dialect.horizon(tx)

    def snapshot(self, tx: Tx) -> tuple[int, frozenset[int]]:
        """(horizon, the transaction ids running now), taken at the same instant."""
        return self._dialect.snapshot(tx)

    def blocked_probe(self, tx: Tx, name: str, instance_id: str) -> BlockedProbe | None:
        return self._dialect.blocked_probe(tx, name, instance_id)

    def observation_xid(self) -> int:
        """A transaction id assigned now, in its own committed transaction."""
        return self._dialect.observation_xid(self.db)

    def oldest_writer(self) -> Writer | None:
        """The open transaction holding gap retirement back (in its own read), or None."""
        return self._dialect.oldest_writer(self.db)

    # ------------------------------------------------------------------ events

    def fetch_events(self, tx: Tx, cursor: int, gaps: Sequence[Gap], limit: int) -> list[DispatchedEvent]:
        """Rows in a pending gap or past the cursor, in position order, at most `limit`."""
        rows = self._dialect.fetch_events(tx, self._sql["events_after"], cursor, gaps, limit)
        # Both drivers already return ints for the integer columns (txid is cast to bigint on PostgreSQL).
        return [DispatchedEvent(*r) for r in rows]

    def high_water_mark(self, tx: Tx) -> int:
        return int(tx.scalar(self._sql["high_water_mark"]))

    def lag(self, tx: Tx, cursor: int) -> tuple[int, float | None]:
        """(high-water mark, seconds since the first event past `cursor` was recorded or None)."""
        row = tx.fetchone(self._sql["lag"], (cursor,))
        return (0, None) if row is None else (int(row[0]), row[1])

    def smallest_visible_in(self, tx: Tx, gaps: Sequence[Gap]) -> int | None:
        if not gaps:
            return None
        ranges, params = gap_ranges(gaps)
        value = tx.scalar(f"SELECT MIN(position) FROM events WHERE {ranges}", params)
        return None if value is None else int(value)

    def next_position_after(self, tx: Tx, cursor: int) -> int | None:
        value = tx.scalar(self._sql["next_position_after"], (cursor,))
        return None if value is None else int(value)

    def positions_between(self, tx: Tx, after: int, upto: int) -> list[int]:
        """The visible positions in (after, upto], ascending."""
        return [int(r[0]) for r in tx.fetchall(self._sql["positions_between"], (after, upto))]

    # ------------------------------------------------------------------ consumer_dead_letters

    def insert_dead_letter(
        self,
        tx: Tx,
        name: str,
        instance_id: str,
        position: int,
        reason: str,
        error_class: str | None,
        message: str | None,
    ) -> None:
        """Copy the event at `position` into the consumer's dead letters."""
        tx.execute(self._sql["insert_dead_letter"], (name, instance_id, reason, error_class, message, position))

    def dead_letters(self, tx: Tx, name: str, instance_id: str) -> list[Row]:
        """(id, position, event_id, event_type, reason, error_class, error_message, created_at), oldest first."""
        return tx.fetchall(self._sql["dead_letters"], (name, instance_id))
