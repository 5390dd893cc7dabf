"""The event recorder: writes one append batch in one transaction (one round trip on PostgreSQL).

The append use case (`settlekit.append`) builds a `CommitBatch`; the recorder hands it to the backend of the
database's dialect (`store/postgres/events.py`, `store/sqlite/events.py`), which checks the expected stream head,
inserts the events, moves the head with the new snapshot and runs `after` (the domain's rows, the idempotency
record) in the same transaction.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from settlekit.store.db import Database, Tx


@dataclass(frozen=True, slots=True)
class CommitBatch:
    """One append, ready to write: finalized envelopes and their stored JSON text, in stream order.

    `prev_chain_hash` is the head the batch links to (None: the stream must not exist yet, or be empty when
    `expected_version` is 0); `expected_version`, when given, must also match the head's seq. `snapshot_json`
    replaces the stream's stored state (None keeps it)."""

    tenant_id: str
    stream_id: str
    stream_type: str
    prev_chain_hash: str | None
    expected_version: int | None
    events: Sequence[dict[str, Any]]
    jsons: Sequence[str]
    snapshot_json: str | None
    batch_id: str
    correlation_id: str | None = None
    causation_id: str | None = None

    @property
    def creates_stream(self) -> bool:
        """The batch may create the stream (it expects no head)."""
        return self.prev_chain_hash is None and self.expected_version in (None, 0)


class Committed(NamedTuple):
    base_seq: int  # the head's seq before the batch: its events got base_seq + 1, base_seq + 2, ...
    positions: list[int]


class HeadMismatch(NamedTuple):
    """The stream head is not the one the batch expects: nothing was written."""

    seq: int | None  # None: the stream does not exist
    chain_hash: str | None


# Runs inside the append transaction once the events are in: (tx, base_seq, positions).
AfterCommit = Callable[[Tx, int, list[int]], None]


class DuplicateKey(Exception):
    """A write broke a uniqueness rule; `kind` says which: "idempotency" (the key was recorded concurrently),
    "event_id" (an event id is already stored) or "stream" (a concurrent append took the same seq)."""

    def __init__(self, constraint: str):
        super().__init__(constraint)
        self.kind = duplicate_kind(constraint)


def duplicate_kind(constraint: str) -> str:
    """The uniqueness rule a constraint name (PostgreSQL) or message (SQLite) stands for."""
    if "idempotency" in constraint:
        return "idempotency"
    if "event_id" in constraint:
        return "event_id"
    return "stream"


class _Backend(Protocol):
    def commit(self, db: Any, batch: CommitBatch, after: AfterCommit | None) -> Committed | HeadMismatch: ...


class EventRecorder:
    """Writes append batches to one Database with its dialect's backend."""

    def __init__(self, db: Database):
        self.db = db
        backend: _Backend = importlib.import_module(f"settlekit.store.{db.dialect}.events")
        self._commit = backend.commit

    def commit(self, batch: CommitBatch, after: AfterCommit | None = None) -> Committed | HeadMismatch:
        """Write `batch` if the stream head is the one it expects, with `after` in the same transaction.
        Raises DuplicateKey when an insert breaks a uniqueness rule (nothing is written)."""
        return self._commit(self.db, batch, after)
