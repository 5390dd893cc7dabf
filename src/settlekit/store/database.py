"""The database interface shared by both backends.

Repositories are written once against `Database`/`Tx`, with SQL using `?` placeholders (the PostgreSQL backend
rewrites them to `%s`); SQL that differs per dialect is a named statement (`store/sql.py`), behaviour that differs
is the database's `DialectFamily` (below). `store/db.py` opens a database of either dialect.

Migrations are plain SQL files, one folder per backend:
    src/settlekit/store/postgres/migrations/NNNN_name.sql
    src/settlekit/store/sqlite/migrations/NNNN_name.sql
Each file is applied once, in order, and recorded in `schema_migrations`. Numbers are allocated per area:
    0001 events, streams, signer keys, idempotency      0002 job snapshots and ledger
    0003 dispatcher (consumer state, dead letters)      0004 artifacts
    0005 destinations and deliveries                    0006 API keys
A migration file may hold several statements separated by `;` at line ends (SQLite runs them with executescript;
PostgreSQL in one transaction under an advisory lock, so two processes migrating at once is safe).
A migration whose data cannot be moved in SQL alone (a hash computed in Python) names a data step in
`store/migration_steps.py`: a function of the open transaction that both backends run right after the file's SQL,
in the same transaction, before the migration is recorded.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, Protocol

from settlekit.store.rows import (
    BlockedProbe,
    CommitBatch,
    CommitOutcome,
    Gap,
    LockMode,
    Writer,
)

Dialect = Literal["postgres", "sqlite"]
Row = tuple[Any, ...]


class Tx(abc.ABC):
    """One open database transaction."""

    dialect: Dialect

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; returns the affected row count."""

    @abc.abstractmethod
    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a query and return every row."""

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.fetchone(sql, params)
        return None if row is None else row[0]

    @abc.abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows."""

    @abc.abstractmethod
    def savepoint(self) -> contextlib.AbstractContextManager[None]:
        """A nested savepoint: rolled back alone when the block raises."""

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once this transaction (a `Database.transaction()`) has committed; never when it rolls
        back. For what must not be said of a write that did not happen (an audit line)."""
        callbacks: list[Callable[[], None]] | None = getattr(self, "_after_commit", None)
        if callbacks is None:
            callbacks = []
            self._after_commit = callbacks
        callbacks.append(callback)

    def run_after_commit(self) -> None:
        """Called by the backend once the transaction has committed."""
        for callback in getattr(self, "_after_commit", None) or ():
            callback()

    @abc.abstractmethod
    def write_ledger_rows(self, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                          postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                          sums: Sequence[Sequence[Any]]) -> None:
        """Write the ledger rows of one append (`store.ledger.write_entries` builds them; the dialect's writer in
        store/<dialect>/ledger.py keeps the rows of the entries it really inserts)."""

    @property
    @abc.abstractmethod
    def raw(self) -> Any:
        """The driver connection, for backend-specific code in store/postgres and store/sqlite."""

    @abc.abstractmethod
    def notify(self) -> None:
        """Wake dispatchers once this transaction commits (PostgreSQL NOTIFY; in-process on SQLite)."""


class EventListener(abc.ABC):
    """Wake-ups on appends for one waiter of its own (the event feed), apart from the dispatcher's wait."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> bool:
        """Block until an append commits (or timeout); True when woken. Called from one thread at a time."""

    def close(self) -> None:  # noqa: B027  (a listener that holds nothing has nothing to release)
        """Release what the listener holds (from the thread that waits on it)."""
        return None


class _SharedWait(EventListener):
    """A listener that shares the database's own wait (where every waiter is woken anyway)."""

    def __init__(self, db: Database):
        self.db = db

    def wait(self, timeout: float) -> bool:
        return self.db.wait_for_notify(timeout)


class Database(abc.ABC):
    """A connection pool (PostgreSQL) or a per-thread connection set (SQLite). `family`: what its dialect does
    its own way (the append's writes, the dispatcher's reads), chosen once when the database is opened
    (`store.db.connect`)."""

    dialect: Dialect
    url: str
    family: DialectFamily

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Tx]:
        """A read-write transaction; commits on success, rolls back on exception."""

    def read(self) -> contextlib.AbstractContextManager[Tx]:
        """A transaction used only for reading."""
        return self.transaction()

    def query(self) -> contextlib.AbstractContextManager[Tx]:
        """A connection for independent single-statement reads: no transaction around them where the backend
        allows (saves the BEGIN/COMMIT round trips). Each statement sees the latest committed data."""
        return self.read()

    def prepared_statements_survive(self) -> bool:
        """Whether the statements this database prepares can be run again in a later transaction (False: a
        connection pooler in transaction mode loses them; see the PostgreSQL backend). True where nothing is
        prepared on a server."""
        return True

    def check_reachable(self) -> None:  # noqa: B027  (a backend without a known-unreachable state has none)
        """Raise DatabaseUnavailableError at once while the database is known to be unreachable (a recent
        connection attempt failed); nothing otherwise. Takes no connection: for callers about to queue work."""
        return None

    @abc.abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending migrations; returns the names applied."""

    @abc.abstractmethod
    def applied_migrations(self) -> list[str]:
        """Names of migrations already recorded."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every connection."""

    # whether `wait_for_notify` wakes for appends of every process (PostgreSQL's NOTIFY), not only this one's
    wakes_across_processes: bool = False

    @abc.abstractmethod
    def wait_for_notify(self, timeout: float) -> bool:
        """Block until an append commits (or timeout); True when woken."""

    def event_listener(self) -> EventListener:
        """A wake-up source of its own for one more waiter (on PostgreSQL a LISTEN session of its own, on the
        direct URL: a notification taken by one session is not seen by another's wait)."""
        return _SharedWait(self)

    def pending_migrations(self) -> list[str]:
        done = set(self.applied_migrations())
        return [name for name, _ in migration_files(self.dialect) if name not in done]

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def migration_files(dialect: Dialect) -> list[tuple[str, str]]:
    """(name, sql) for each migration of a backend, in order."""
    folder = resources.files("settlekit.store").joinpath(dialect, "migrations")
    out = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            out.append((entry.name[:-4], entry.read_text(encoding="utf-8")))
    out.sort()
    return out


# ---------------------------------------------------------------------------------------------------- dialects
# What each dialect implements its own way. store/postgres/family.py and store/sqlite/family.py build one
# `DialectFamily` each; `store.db.connect` gives it to the database it opens. The repositories ask
# `db.family` and never name a dialect.

# Runs inside the append transaction once the events are in: (tx, base_seq, positions).
AfterCommit = Callable[[Tx, int, list[int]], None]


class EventWriter(Protocol):
    """The event recorder's backend (store/<dialect>/events.py): one batch, or a group of batches in one
    transaction."""

    def commit(self, db: Any, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome: ...

    def write_group(self, db: Any, group: Sequence[tuple[CommitBatch, AfterCommit | None]],
                    before_commit: Callable[[int], None]) -> list[CommitOutcome]: ...


class ConsumerDialect(abc.ABC):
    """What PostgreSQL and SQLite do differently for consumers."""

    commits_out_of_order: bool
    """True when a lower position can become visible after a higher one (concurrent writers), so positions the
    fetch skipped must be kept as pending gaps."""

    row_locks: Mapping[LockMode, str]
    """The clause appended to a state read for each lock mode."""

    @abc.abstractmethod
    def fetchone_locking(self, tx: Tx, sql: str, params: Sequence[Any]) -> Row | None:
        """Run a locking read; a row held elsewhere under `nowait` raises ConsumerRowLocked."""

    @abc.abstractmethod
    def fetch_events(self, tx: Tx, after: str, cursor: int, gaps: Sequence[Gap], limit: int) -> list[Row]:
        """Event rows in a pending gap or past the cursor (`after` is the statement without gaps)."""

    @abc.abstractmethod
    def horizon(self, tx: Tx) -> int:
        """A transaction id below which every writer has ended (taken before the turn's fetch)."""

    def snapshot(self, tx: Tx) -> tuple[int, frozenset[int]]:
        """`horizon`, with the transaction ids running now (none where writers are serial)."""
        return self.horizon(tx), frozenset()

    def blocked_probe(self, tx: Tx, name: str, instance_id: str) -> BlockedProbe | None:
        """What a blocked turn compares with the last one, the state row locked (None: no row, or it is held
        elsewhere). Only where commits come out of order (gaps exist)."""
        raise NotImplementedError

    @abc.abstractmethod
    def observation_xid(self, db: Database) -> int:
        """A transaction id assigned now: once the horizon passes it, every writer that drew a position before
        this call has ended."""

    @abc.abstractmethod
    def oldest_writer(self, db: Database) -> Writer | None:
        """The open transaction that keeps the horizon from moving on, when the database can tell."""

    @abc.abstractmethod
    def turn(self, db: Database, name: str, instance_id: str) -> AbstractContextManager[None]:
        """Held around a turn's transaction, so that other threads of this process can see the turn."""

    @abc.abstractmethod
    def turn_in_process(self, db: Database, name: str, instance_id: str) -> bool:
        """True when a turn of this process holds the row and only this process can tell."""

    @abc.abstractmethod
    def processing_keys(self, tx: Tx, db: Database, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (name, instance_id) rows a turn holds right now."""


@dataclass(frozen=True)
class DialectFamily:
    """One dialect's own implementations: the event recorder's writer and the consumers' locks and reads."""

    name: Dialect
    events: EventWriter
    consumers: ConsumerDialect
