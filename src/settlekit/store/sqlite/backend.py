"""SQLite backend: WAL mode, one connection per thread, BEGIN IMMEDIATE so there is a single writer."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from settlekit.errors import ConfigurationError, DatabaseUnavailableError
from settlekit.store.database import Database, Dialect, DialectFamily, Row, Tx, migration_files
from settlekit.store.migration_steps import run_data_step
from settlekit.store.sqlite import ledger as ledger_writer

try:
    import fcntl
except ImportError:  # not POSIX: writers of other processes wait in SQLite's busy handler
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# Wake-ups between threads of this process; other processes fall back to polling.
_wakeups: dict[str, threading.Condition] = {}
_wakeups_lock = threading.Lock()


def _enable_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL. Two connections switching a new file at once can get SQLITE_BUSY without the busy handler
    being consulted, so the switch is retried until the busy timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def _condition_for(path: str) -> threading.Condition:
    with _wakeups_lock:
        cond = _wakeups.get(path)
        if cond is None:
            cond = _wakeups[path] = threading.Condition()
        return cond


class _WriterQueue:
    """Where the writers of one database file wait before BEGIN IMMEDIATE: the threads of this process on a lock
    (woken as soon as it is free), other processes on an advisory lock of `<file>-writer`, tried again within two
    milliseconds. SQLite's own busy handler sleeps up to 100 ms between tries, so a writer often slept long after
    the lock was free (a quarter of the append path's time in `settlekit demo`). Where the lock file cannot be
    opened or locked (a read-only directory, another user's file, a file system without locks), writers of other
    processes wait in SQLite's busy handler as before.

    A writer waits at most its timeout in all: `turn` yields the time left of it, which bounds SQLite's busy
    handler at BEGIN IMMEDIATE (`_begin_immediate`)."""

    def __init__(self, path: str):
        self._lock = threading.Lock()
        self._path = path + "-writer"
        self._fd: int | None = None
        self._usable = fcntl is not None
        self.users = 0
        self.clock: Callable[[], float] = time.monotonic

    def _file(self) -> int | None:
        if self._fd is None and self._usable:
            for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # flock works on a file opened read-only too
                try:
                    self._fd = os.open(self._path, flags, 0o666)
                    break
                except OSError:
                    continue
            else:
                self._give_up(f"cannot open {self._path}")
        return self._fd

    def _give_up(self, why: str) -> None:
        self._usable = False
        log.warning("SQLite writers of other processes wait in SQLite's busy handler: %s", why)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (a thread of the parent may have held it) and a file of its own (an
        advisory lock belongs to the open file, which the child shares with its parent)."""
        self._lock = threading.Lock()
        self.close()

    @contextlib.contextmanager
    def turn(self, timeout_s: float) -> Iterator[float]:
        """The writer's turn, waited for at most `timeout_s`; yields the seconds left of it (DatabaseUnavailableError
        when none is left before the turn comes)."""
        deadline = self.clock() + timeout_s
        if not self._lock.acquire(timeout=timeout_s):
            raise DatabaseUnavailableError(cause="database is locked")
        try:
            fd = self._file()
            locked = fd is not None and self._lock_file(fd, deadline)
            try:
                yield max(0.0, deadline - self.clock())
            finally:
                if locked:
                    assert fcntl is not None and fd is not None
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()

    def _lock_file(self, fd: int, deadline: float) -> bool:
        """Take the file's lock (True), or False when locks do not work here."""
        assert fcntl is not None
        delay = 0.0002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if self.clock() >= deadline:
                    raise DatabaseUnavailableError(cause="database is locked") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.002)
            except OSError as exc:
                self._give_up(f"cannot lock {self._path}: {exc}")
                return False


_writer_queues: dict[str, _WriterQueue] = {}


def _writer_queue_for(path: str) -> _WriterQueue:
    """The process's queue for a database file (one more user: `_leave_writer_queue` when done)."""
    with _wakeups_lock:
        found = _writer_queues.get(path)
        if found is None:
            found = _writer_queues[path] = _WriterQueue(path)
        found.users += 1
        return found


def _leave_writer_queue(path: str) -> None:
    with _wakeups_lock:
        found = _writer_queues.get(path)
        if found is not None:
            found.users -= 1
            if found.users <= 0:
                found.close()
                del _writer_queues[path]


def _reset_writer_queues_in_child() -> None:
    for found in _writer_queues.values():
        found.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_writer_queues_in_child)


# sqlite3.OperationalError messages that mean "not now" rather than a bug in a statement.
_UNAVAILABLE_MESSAGES = ("database is locked", "database is busy", "unable to open database", "disk i/o error",
                         "database table is locked")


@contextlib.contextmanager
def _available() -> Iterator[None]:
    """A locked, busy or unopenable database file becomes DatabaseUnavailableError; other errors pass."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if not str(exc).lower().startswith(_UNAVAILABLE_MESSAGES):
            raise
        raise DatabaseUnavailableError(cause=str(exc)) from exc


class SqliteTx(Tx):
    dialect: Dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.wants_notify = False

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._conn.executemany(sql, rows)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        name = "sp_" + uuid.uuid4().hex[:12]
        self._conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self._conn.execute(f"ROLLBACK TO {name}")
            self._conn.execute(f"RELEASE {name}")
            raise
        self._conn.execute(f"RELEASE {name}")

    def write_ledger_rows(self, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                          postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                          sums: Sequence[Sequence[Any]]) -> None:
        ledger_writer.write_entries(self, tenant_id, job_id, entries, postings, allocations, sums)

    @property
    def raw(self) -> sqlite3.Connection:
        return self._conn

    def notify(self) -> None:
        self.wants_notify = True


class SqliteDatabase(Database):
    dialect: Dialect = "sqlite"

    def __init__(self, url: str, *, family: DialectFamily, busy_timeout_ms: int = 30000):
        path = url[len("sqlite:///"):]
        if not path or path == ":memory:":
            raise ConfigurationError("SQLite needs a file path: sqlite:///path.db", code="DATABASE_URL_INVALID")
        self.url = url
        self.family = family
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._wake = _condition_for(path)
        self._writers_path = os.path.abspath(path)
        self._writers = _writer_queue_for(self._writers_path)
        self._generation = 0
        self._closed = False

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise ConfigurationError("database is closed", code="DATABASE_CLOSED")
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                       timeout=self._busy_timeout_ms / 1000)
                _enable_wal(conn, self._busy_timeout_ms / 1000)
            except sqlite3.OperationalError as exc:
                raise DatabaseUnavailableError(f"cannot open SQLite database {self.path}: {exc}") from exc
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqliteTx]:
        with _available():
            conn = self._conn()
            if conn.in_transaction:
                raise ConfigurationError("nested transaction on one thread", code="NESTED_TRANSACTION")
            with self._writers.turn(self._busy_timeout_ms / 1000) as left_s:
                self._begin_immediate(conn, left_s)
                tx = SqliteTx(conn)
                try:
                    yield tx
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        tx.run_after_commit()
        if tx.wants_notify:
            with self._wake:
                self._wake.notify_all()

    @contextlib.contextmanager
    def read(self) -> Iterator[SqliteTx]:
        with _available():
            conn = self._conn()
            conn.execute("BEGIN")
            try:
                yield SqliteTx(conn)
            finally:
                conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def query(self) -> Iterator[SqliteTx]:
        with _available():
            conn = self._conn()
            if conn.in_transaction:
                raise ConfigurationError("nested transaction on one thread", code="NESTED_TRANSACTION")
            yield SqliteTx(conn)

    def migrate(self) -> list[str]:
        applied: list[str] = []
        conn = self._conn()
        with self._writers.turn(self._busy_timeout_ms / 1000) as left_s:
            self._begin_immediate(conn, left_s)
            self._migrate_in(conn, applied)
        return applied

    def _begin_immediate(self, conn: sqlite3.Connection, left_s: float) -> None:
        """BEGIN IMMEDIATE, SQLite's busy handler waiting at most `left_s` (what the writer's turn left of the busy
        timeout, to the millisecond) instead of the whole timeout again."""
        left_ms = round(left_s * 1000)
        if left_ms >= self._busy_timeout_ms:
            conn.execute("BEGIN IMMEDIATE")
            return
        conn.execute(f"PRAGMA busy_timeout={left_ms}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")

    def _migrate_in(self, conn: sqlite3.Connection, applied: list[str]) -> None:
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY,"
                         " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))")
            done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
            for name, sql in migration_files(self.dialect):
                if name in done:
                    continue
                for statement in _split_statements(sql):
                    conn.execute(statement)
                run_data_step(name, SqliteTx(conn))
                conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
                applied.append(name)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def applied_migrations(self) -> list[str]:
        conn = self._conn()
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_migrations'").fetchone()
        if not exists:
            return []
        return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]

    def wait_for_notify(self, timeout: float) -> bool:
        with self._wake:
            return self._wake.wait(timeout)

    def close(self) -> None:
        if not self._closed:
            _leave_writer_queue(self._writers_path)
        self._closed = True
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


def _split_statements(sql: str) -> list[str]:
    """Split a migration on `;` at line ends (statements never put `;` at a line end inside a literal)."""
    parts: list[str] = []
    buf: list[str] = []
    for line in sql.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        if line.rstrip().endswith(";"):
            stmt = "\n".join(buf).strip()
            if stmt.strip(";").strip():
                parts.append(stmt)
            buf = []
    tail = "\n".join(buf).strip()
    if tail:
        parts.append(tail)
    return parts
