"""The values the store's repositories and the dialect backends (store/postgres, store/sqlite) pass each other:
an append batch and its outcomes, and the dispatcher's gaps, writers and probes. Nothing here reads a database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from settlekit.errors import ConflictError

# ---------------------------------------------------------------------------------------------------- appends


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
    # the batch commits only while this API key is active (the API served the append from its caches, without
    # reading the key); else nothing is written and the outcome is KeyInactive
    active_api_key: str | None = None

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


class KeyInactive(NamedTuple):
    """The batch's `active_api_key` was no longer active (revoked) when it came to be written: nothing was
    written."""

    key_id: str


# what writing one CommitBatch came to
CommitOutcome = Committed | HeadMismatch | KeyInactive


class DuplicateKey(Exception):
    """A write broke a uniqueness rule; `kind` says which: "idempotency" (the key was recorded concurrently),
    "event_id" (an event id is already stored), "stream" (a concurrent append took the same seq, or the stream
    already holds the chain hash) or "other" (a rule of another table: a fault, never a conflict to answer)."""

    def __init__(self, constraint: str):
        super().__init__(constraint)
        self.kind = duplicate_kind(constraint)


def duplicate_kind(constraint: str) -> str:
    """The uniqueness rule a constraint name (PostgreSQL) or message (SQLite) stands for."""
    if "idempotency" in constraint:
        return "idempotency"
    if "event_id" in constraint:
        return "event_id"
    if any(name in constraint for name in _STREAM_RULES):
        return "stream"
    return "other"


# the stream's uniqueness rules: PostgreSQL's constraint names, SQLite's "UNIQUE constraint failed: …" columns
_STREAM_RULES = ("events_stream_seq", "events_stream_chain_hash", "streams_pkey", "events.stream_id",
                 "streams.stream_id")


class GroupRolledBack(Exception):
    """The database refused a statement of a group's transaction, so its COMMIT did not take effect: nothing of the
    group is written (unlike a failure whose outcome is unknown, such as a lost connection during the COMMIT)."""


# ---------------------------------------------------------------------------------------------------- consumers

LockMode = Literal["none", "skip", "wait", "nowait"]
"""How a state read locks the row: not at all, skipping a locked row, waiting for it, or failing at once."""


@dataclass(frozen=True)
class Gap:
    """An inclusive range of positions below the cursor that were invisible when observed.

    `seen_at` (unix seconds, 0 = unknown) is when the range was first recorded; it only feeds the oldest-gap
    gauge and takes no part in equality."""

    lo: int
    hi: int
    xmax: int
    seen_at: float = field(default=0.0, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"from": self.lo, "to": self.hi, "xmax": str(self.xmax)}
        if self.seen_at:
            out["at"] = round(self.seen_at, 3)
        return out

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True)
class Writer:
    """An open transaction that holds a transaction id (PostgreSQL, from pg_stat_activity)."""

    pid: int
    database: str | None
    state: str | None
    age_seconds: float


class BlockedProbe(NamedTuple):
    """A consumer row's version (its tuple's xmin: any update changes it), its cursor, the first visible position
    past the cursor, the transaction ids of the database running now and the horizon."""

    revision: str
    cursor: int
    next_position: int | None
    running: frozenset[int]
    horizon: int


class ConsumerRowLocked(ConflictError):
    """A `nowait` state read met a row another transaction holds: the consumer is in a turn (the dispatcher's
    ConsumerProcessing names the consumer; the code is the same)."""

    code = "CONSUMER_PROCESSING"


def gap_ranges(gaps: Sequence[Gap]) -> tuple[str, list[int]]:
    """`position BETWEEN ? AND ? OR …` over the gaps, with its parameters."""
    return " OR ".join("position BETWEEN ? AND ?" for _ in gaps), [v for g in gaps for v in (g.lo, g.hi)]
