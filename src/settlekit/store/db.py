"""The database interface shared by both backends.

The store interface is ready: repositories are written once against `Database`/`Tx`, with SQL using `?`
placeholders (the PostgreSQL backend rewrites them to `%s`), and branch on `tx.dialect` ("postgres" | "sqlite")
only where the dialects differ (locking, sequences, JSON types).

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
`MIGRATION_DATA_STEPS`: a function of the open transaction that both backends run right after the file's SQL, in
the same transaction, before the migration is recorded.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any, Literal

from settlekit.errors import ConfigurationError

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
    """A connection pool (PostgreSQL) or a per-thread connection set (SQLite)."""

    dialect: Dialect
    url: str

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


# migration name -> "module:function" taking the migration's Tx (imported when the migration runs)
MIGRATION_DATA_STEPS: dict[str, str] = {
    "0016_contract_hashes": "settlekit.store.contracts:rekey_contract_documents",
    "0023_server_secrets": "settlekit.store.cursor_secret:create",
}


def run_migration_data_step(name: str, tx: Tx) -> None:
    """Run migration `name`'s data step, if it has one, in its transaction."""
    target = MIGRATION_DATA_STEPS.get(name)
    if target is None:
        return
    module_name, _, function = target.partition(":")
    getattr(importlib.import_module(module_name), function)(tx)


def migration_files(dialect: Dialect) -> list[tuple[str, str]]:
    """(name, sql) for each migration of a backend, in order."""
    folder = resources.files("settlekit.store").joinpath(dialect, "migrations")
    out = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            out.append((entry.name[:-4], entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def connect(url: str, **options: Any) -> Database:
    """Open a database from a URL: `postgresql://…` or `sqlite:///path.db` (`sqlite://:memory:` is refused)."""
    if url.startswith(("postgresql://", "postgres://")):
        from settlekit.store.postgres.backend import PostgresDatabase

        return PostgresDatabase(url, **options)
    if url.startswith("sqlite:///"):
        from settlekit.store.sqlite.backend import SqliteDatabase

        return SqliteDatabase(url, **options)
    raise ConfigurationError(f"unsupported database URL {url!r}: use postgresql://… or sqlite:///path.db",
                             code="DATABASE_URL_INVALID")


@contextlib.contextmanager
def opened(url: str, *, migrate: bool = True, **options: Any) -> Iterator[Database]:
    db = connect(url, **options)
    try:
        if migrate:
            db.migrate()
        yield db
    finally:
        db.close()
