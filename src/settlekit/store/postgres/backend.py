"""PostgreSQL backend: psycopg 3 with a connection pool, prepared statements and LISTEN/NOTIFY wake-ups.

Safe behind a transaction-pooling PgBouncer: every lock is transaction-scoped, no session setting, temporary table
or held cursor outlives its transaction, and NOTIFY is sent at commit. What needs a session of its own is the
LISTEN connection (`direct_url`, which bypasses the pooler) and server-side prepared statements
(`prepared_statements=False` unless the pooler tracks them: PgBouncer >= 1.22 with `max_prepared_statements`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from settlekit.errors import DatabaseUnavailableError
from settlekit.store.database import Database, Dialect, DialectFamily, EventListener, Row, Tx, migration_files
from settlekit.store.migration_steps import run_data_step
from settlekit.store.postgres import ledger as ledger_writer
from settlekit.store.postgres.ledger import LedgerRows
from settlekit.store.reachability import Reachability

NOTIFY_CHANNEL = "settlekit_events"
_MIGRATION_LOCK_KEY = 0x5E77_1E1D
_sql_cache: dict[str, str] = {}


def pg_sql(sql: str) -> str:
    """Rewrite `?` placeholders to psycopg's `%s` (and escape literal `%`)."""
    out = _sql_cache.get(sql)
    if out is None:
        out = sql.replace("%", "%%").replace("?", "%s")
        _sql_cache[sql] = out
    return out


# SQLSTATEs that mean the server went away or refuses connections (class 08 is matched by prefix).
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})


def is_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "the database cannot be reached": a pool wait that ran out, a connection
    that failed or was lost (no SQLSTATE, or class 08), a server shutting down or refusing connections."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _UNAVAILABLE_STATES


# A prepared statement missing on the server connection (26000) or a name another client's statement holds there
# (42P05): psycopg's statements met a transaction-mode pooler. Raised before the statement runs.
_LOST_PREPARED_STATES = frozenset({"26000", "42P05"})


def _lost_prepared_statement(exc: psycopg.Error) -> bool:
    return exc.sqlstate in _LOST_PREPARED_STATES and "_pg3_" in str(exc)


# A refused connection attempt that says nothing of the connections already open: the server is at its limit.
_TOO_MANY_CONNECTIONS = "53300"


class StatementDeadlineExceeded(psycopg.OperationalError):
    """No answer to a round trip (a statement, a pipeline sync, a COMMIT) within the connection's deadline, nor to
    the cancellation asked for then: the connection is closed. Like a lost connection it has no SQLSTATE, so the
    database counts as unavailable (503). `cancelled`: the server answered that it stopped the statement, so
    nothing of it took effect; otherwise its outcome is unknown (a write may have committed)."""

    def __init__(self, message: str, *, cancelled: bool):
        super().__init__(message)
        self.cancelled = cancelled


# of a round trip's deadline, the part left for the answer to a cancellation (at most)
_CANCEL_GRACE = 0.5


class DeadlineConnection(psycopg.Connection[Any]):
    """A connection that waits at most `deadline` seconds for the answer to each round trip (None: no limit).
    The client-side counterpart of statement_timeout: it also holds when the server is never reached, such as a
    query a pooler (PgBouncer) keeps waiting for a server connection, or a network that drops packets.

    Shortly before the deadline (`_CANCEL_GRACE`, at most a quarter of it) the server is asked to cancel the
    statement and whatever answer comes in time is taken: the statement's own (it completed: its result, or its
    error) or the cancellation (nothing took effect). Without an answer the outcome is unknown. But for the
    statement's own answer, the connection is then closed (StatementDeadlineExceeded); after its own answer, once
    its user is done with it (a late cancellation could stop its next statement)."""

    deadline: float | None = None
    cancel_sent = False  # the connection is then closed once its user is done (PostgresDatabase._pooled)

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        limit = self.deadline
        if timeout is not None or limit is None:
            return super().wait(gen, interval, timeout)
        grace = min(_CANCEL_GRACE, limit / 4)
        try:
            return super().wait(gen, interval, limit - grace)
        except psycopg.errors._WaitTimeout:
            pass
        started = time.monotonic()
        self.cancel_sent = True
        try:
            with contextlib.suppress(psycopg.OperationalError):  # no cancellation: wait for the answer all the same
                self.cancel_safe(timeout=grace)
            return super().wait(gen, interval, max(0.01, grace - (time.monotonic() - started)))
        except psycopg.errors.QueryCanceled:
            self.pgconn.finish()
            raise StatementDeadlineExceeded(f"no answer from the database within {limit:g} s: cancelled",
                                            cancelled=True) from None
        except psycopg.errors._WaitTimeout:
            self.pgconn.finish()  # what was sent may still run: this session cannot be used again
            raise StatementDeadlineExceeded(f"no answer from the database within {limit:g} s",
                                            cancelled=False) from None

    @contextlib.contextmanager
    def without_deadline(self) -> Iterator[None]:
        """Round trips without the deadline (migrations), for this checkout."""
        self.deadline = None
        try:
            yield
        finally:
            del self.deadline  # back to the class's


def _reporting_connection(reachability: Reachability, deadline: float | None) -> type[DeadlineConnection]:
    """The pool's connection class: every connection attempt tells `reachability` whether the server took it;
    each round trip waits at most `deadline` seconds for its answer."""

    class ReportingConnection(DeadlineConnection):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as exc:
                if exc.sqlstate != _TOO_MANY_CONNECTIONS:
                    reachability.failed()
                raise
            reachability.reached()
            return conn

    ReportingConnection.deadline = deadline
    return ReportingConnection


class PostgresTx(Tx):
    """`ledger_rows`: where the ledger rows of the transaction's appends gather until one statement sends them
    (a group commit sets it; store/postgres/ledger.py)."""

    dialect: Dialect = "postgres"

    def __init__(self, conn: psycopg.Connection[Any], ledger_rows: LedgerRows | None = None):
        self._conn = conn
        self._cur = conn.cursor()
        self._notified = False
        self.ledger_rows = ledger_rows

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._cur.execute(pg_sql(sql), params)
        return self._cur.rowcount

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._cur.execute(pg_sql(sql), params)
        return self._cur.fetchall()

    def write_ledger_rows(self, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                          postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                          sums: Sequence[Sequence[Any]]) -> None:
        ledger_writer.write_entries(self, tenant_id, job_id, entries, postings, allocations, sums)

    def fetchall_binary(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Binary parameters and results: arrays of JSON text need no escaping."""
        self._cur.execute(pg_sql(sql).replace("%s", "%b"), params, binary=True)
        return self._cur.fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cur.executemany(pg_sql(sql), rows)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        with self._conn.transaction():
            yield

    @property
    def raw(self) -> psycopg.Connection[Any]:
        return self._conn

    def notify(self) -> None:
        if not self._notified:
            self._notified = True
            self._cur.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')")


# libpq options (unless the URL sets them): a server or network that vanished without closing the connection
# (packets dropped, a host gone) is noticed within about 30 s by TCP keepalives while a connection waits for an
# answer, and data the server never acknowledges fails the connection after 30 s, instead of the kernel's default
# of many minutes
DEAD_PEER_DETECTION: dict[str, Any] = {
    "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4,
    "tcp_user_timeout": 30_000,
}


def _unset_in(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The `options` the connection string `url` does not set itself."""
    given = conninfo_to_dict(url)
    return {name: value for name, value in options.items() if name not in given}


@contextlib.contextmanager
def _no_deadline(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """`conn`'s round trips without the statement deadline (a migration may rewrite a large table)."""
    if isinstance(conn, DeadlineConnection):
        with conn.without_deadline():
            yield
    else:
        yield


class PostgresDatabase(Database):
    """A psycopg pool. While the server is unreachable every operation fails within `timeout` seconds (the wait
    for a pooled connection) plus `statement_timeout` (the wait for each answer, whatever sits between settlekit
    and the server) with DatabaseUnavailableError (503 in the API) instead of waiting; once a connection attempt
    has failed or a round trip ran out of time, operations fail at once for `unavailable_hold` seconds, then one of
    them tries again (store/reachability.py). Lost
    connections are replaced by attempts at most about a second apart (`reconnect_timeout` bounds each backoff
    series, a new one starts on demand), so work resumes within a couple of seconds of the server coming back."""

    dialect: Dialect = "postgres"
    wakes_across_processes = True

    def __init__(self, url: str, *, family: DialectFamily, min_size: int = 1, max_size: int = 16, timeout: float = 1.5,
                 reconnect_timeout: float = 2.0, connect_timeout: int = 5, direct_url: str | None = None,
                 prepared_statements: bool = True, unavailable_hold: float = 1.0,
                 statement_timeout: float | None = None):
        self.url = url
        self.family = family
        # each round trip waits at most this long for its answer (None: no limit; migrations never have one)
        self.statement_timeout = statement_timeout or None
        # a probe waits for the pool at most `timeout`; past that allowance another caller may probe
        self.reachability = Reachability(
            unavailable_hold, probe_allowance=timeout + (statement_timeout or 0.0) + max(unavailable_hold, 1.0))
        # LISTEN needs a session that stays one server connection: not a transaction-pooled one
        self.direct_url = direct_url or url
        self.prepared_statements = prepared_statements
        self._probe_kwargs: dict[str, Any] = _unset_in(url, {"connect_timeout": connect_timeout})
        # None: psycopg never prepares (every statement is sent with its text, which any pooler routes)
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 2 if prepared_statements else None,
                                  **_unset_in(url, {**DEAD_PEER_DETECTION, "connect_timeout": connect_timeout})}
        self._pool_kwargs = kwargs  # the pool's own dict: what its new connections get
        self._turning_off = threading.Lock()
        # an unreachable direct server must not hold the dispatcher's wait (and a shutdown) for minutes
        self._listen_kwargs: dict[str, Any] = _unset_in(
            self.direct_url, {**DEAD_PEER_DETECTION, "connect_timeout": connect_timeout})
        self.pool = ConnectionPool(
            url, min_size=min_size, max_size=max_size, timeout=timeout, open=True, kwargs=kwargs,
            reconnect_timeout=reconnect_timeout, name="settlekit",
            connection_class=_reporting_connection(self.reachability, self.statement_timeout),
        )
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._listen_lock = threading.Lock()
        self._checking = threading.Lock()

    @contextlib.contextmanager
    def _available(self) -> Iterator[None]:
        """Connection-level failures become DatabaseUnavailableError (and trigger a sweep of idle connections,
        which are likely dead too); every other error passes unchanged. While the server is known to be
        unreachable, DatabaseUnavailableError at once (except for the one caller that probes)."""
        probing = self.reachability.admit()
        try:
            yield
        except psycopg.Error as exc:
            if _lost_prepared_statement(exc):  # raised before the statement ran: it may be sent again
                self.turn_off_prepared_statements(f"{exc.sqlstate} {str(exc).strip()!r}")
                raise DatabaseUnavailableError("prepared statements do not survive the connection pooler: turned "
                                               "off, try again", cause=type(exc).__name__) from exc
            if not is_unavailable(exc):
                self.reachability.reached()  # the server answered
                raise
            if probing or (isinstance(exc, StatementDeadlineExceeded) and not exc.cancelled):
                # a round trip the deadline cut, whose cancellation got no answer either, counts as a failed
                # attempt: what queues behind it fails at once (a cancelled one only says the statement was slow)
                self.reachability.failed()
            self._sweep_idle()
            raise DatabaseUnavailableError(cause=type(exc).__name__) from exc
        except BaseException:
            if probing:  # an error of the operation's own: another caller probes now
                self.reachability.probe_ended()
            raise
        self.reachability.reached()

    def check_reachable(self) -> None:
        self.reachability.check()

    def turn_off_prepared_statements(self, reason: str) -> None:
        """For a process that meets prepared statements lost to a pooler after its start check (or without it):
        no more of them, new connections do not prepare and those open now are replaced (their statements live on
        server connections any client may get next). Logged once."""
        with self._turning_off:
            if self._pool_kwargs.get("prepare_threshold") is None:
                return
            self._pool_kwargs["prepare_threshold"] = None
            self.prepared_statements = False
        self.pool.drain()
        logging.getLogger("settlekit.store").warning(
            "prepared statements turned off: they do not survive the connection pooler (%s); set "
            "SETTLEKIT_DB_PREPARED_STATEMENTS=false behind PgBouncer in transaction mode before 1.22 or without "
            "max_prepared_statements", reason)

    def prepared_statements_survive(self) -> bool:
        """Whether a statement prepared on a connection of the URL runs again in a later transaction. Not through
        a pooler in transaction mode that gives each transaction another server connection without carrying the
        statements over (PgBouncer before 1.22, or without `max_prepared_statements`): psycopg's `_pg3_0` is then
        missing, or another client's, and writes fail. The probe, with two connections of its own: the first
        prepares a statement in one transaction; the second opens a transaction and asks for its server's
        process; when that is the process the first ran on (a pooler hands out the most recently released
        server connection), the first runs its statement again, now elsewhere. True when prepared statements
        are off, when it ran, or when the second connection did not get that server (nothing to conclude: a
        direct connection never does)."""
        if not self.prepared_statements:
            return True
        question = "SELECT pg_backend_pid()"
        try:
            with psycopg.connect(self.url, autocommit=True, **self._probe_kwargs) as first, \
                    psycopg.connect(self.url, autocommit=True, **self._probe_kwargs) as second:
                row = first.execute(question, prepare=True).fetchone()
                with second.transaction():
                    other = second.execute(question).fetchone()
                    if row is None or other is None or other[0] != row[0]:
                        return True
                    first.execute(question, prepare=True)
        except (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement):
            return False  # missing where it runs now, or another client's of the same name there already
        except psycopg.Error as exc:
            if is_unavailable(exc):
                raise DatabaseUnavailableError(cause=type(exc).__name__) from exc
            raise
        return True

    def _sweep_idle(self) -> None:
        """Check the pool's idle connections in the background (one sweep at a time), so requests after an
        outage do not each meet a connection the server dropped."""
        if not self._checking.acquire(blocking=False):
            return

        def sweep() -> None:
            try:
                self.pool.check()
            except Exception:  # the pool is closing or the server is still down: the next failure sweeps again
                logging.getLogger("settlekit.store").debug("idle connection sweep failed", exc_info=True)
            finally:
                self._checking.release()

        threading.Thread(target=sweep, name="settlekit-pool-sweep", daemon=True).start()

    @contextlib.contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool, closed instead of reused when a cancellation was sent for one of its
        statements (see DeadlineConnection): arriving late, it could stop the next one."""
        with self.pool.connection() as conn:
            try:
                yield conn
            finally:
                if getattr(conn, "cancel_sent", False):
                    conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        with self._available(), self._pooled() as conn:
            with conn.transaction():
                tx = PostgresTx(conn)
                yield tx
            tx.run_after_commit()

    @contextlib.contextmanager
    def query(self) -> Iterator[PostgresTx]:
        with self._available(), self._pooled() as conn:
            yield PostgresTx(conn)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection for backend-specific fast paths."""
        with self._available(), self._pooled() as conn:
            yield conn

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self._available(), self.pool.connection() as conn, _no_deadline(conn):
            with conn.transaction():
                tx = PostgresTx(conn)
                tx.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK_KEY,))
                tx.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY,"
                    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
                done = {row[0] for row in tx.fetchall("SELECT name FROM schema_migrations")}
                for name, sql in migration_files(self.dialect):
                    if name in done:
                        continue
                    tx.raw.execute(sql)
                    run_data_step(name, tx)
                    tx.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
                    applied.append(name)
            tx.run_after_commit()
        return applied


    def applied_migrations(self) -> list[str]:
        with self.transaction() as tx:
            if tx.scalar("SELECT to_regclass('schema_migrations')") is None:
                return []
            return [row[0] for row in tx.fetchall("SELECT name FROM schema_migrations ORDER BY name")]

    def wait_for_notify(self, timeout: float) -> bool:
        try:
            with self._listen_lock:
                if self._listen_conn is None or self._listen_conn.closed:
                    self._listen_conn = psycopg.connect(self.direct_url, autocommit=True, **self._listen_kwargs)
                    self._listen_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                conn = self._listen_conn
            woke = False
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                woke = True
            return woke
        except psycopg.Error as exc:  # the session is opened again at the next wait
            with self._listen_lock:
                if self._listen_conn is not None:
                    self._listen_conn.close()
                    self._listen_conn = None
            raise DatabaseUnavailableError("the LISTEN session failed", cause=type(exc).__name__) from exc

    def event_listener(self) -> EventListener:
        return _Listener(self.direct_url, self._listen_kwargs)

    def close(self) -> None:
        with self._listen_lock:
            if self._listen_conn is not None:
                self._listen_conn.close()
                self._listen_conn = None
        self.pool.close()


class _Listener(EventListener):
    """A LISTEN session of its own on the direct URL, opened on the first wait (and again after a failure)."""

    def __init__(self, url: str, kwargs: dict[str, Any]):
        self.url = url
        self.kwargs = kwargs
        self._conn: psycopg.Connection[Any] | None = None

    def wait(self, timeout: float) -> bool:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, autocommit=True, **self.kwargs)
                self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            woke = False
            for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                woke = True
            return woke
        except psycopg.Error:
            self.close()
            raise DatabaseUnavailableError("the LISTEN session failed") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
