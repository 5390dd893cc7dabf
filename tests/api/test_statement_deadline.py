"""The client-side statement deadline (`SETTLEKIT_DB_STATEMENT_TIMEOUT`) on PostgreSQL: a round trip without an
answer in time is cancelled on the server and answered 503 DATABASE_UNAVAILABLE, and an append so cut is not
written (the cancellation's answer says so), so the same append sent again with its Idempotency-Key is written
once. Migrations have no deadline. The outage through PgBouncer is tests/e2e/test_pgbouncer_outage.py.

Bounds are hang guards only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import Database, connect
from settlekit.store.postgres.backend import _MIGRATION_LOCK_KEY, PostgresDatabase, StatementDeadlineExceeded
from support.api import TENANT_A, client, key_for, make_app

HANG_GUARD = 60.0
DEADLINE = 0.6


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.02)


def _new_job(api: Any, job_id: str, key: str) -> Any:
    return api.post(f"/v1/jobs/{job_id}/events", json={
        "type": "JOB_CREATED", "actor": {"type": "system", "id": "x"},
        "payload": {"templateId": "reset_lite", "tenantId": TENANT_A}},
        headers={"x-expected-prev-chain-hash": "null", "Idempotency-Key": key})


@pytest.fixture
def deadlined(pg_url: str) -> Iterator[tuple[Database, Any]]:
    direct = connect(pg_url)
    key = key_for(direct, TENANT_A)
    direct.close()
    db = connect(pg_url, statement_timeout=DEADLINE, unavailable_hold=0.2)
    try:
        yield db, client(make_app(db), key, raise_server_exceptions=False)
    finally:
        db.close()


def test_an_append_without_an_answer_in_time_is_cancelled_503_and_not_written(
        pg_url: str, deadlined: tuple[Database, Any]) -> None:
    db, api = deadlined
    assert _new_job(api, "job_before", "k-0").status_code == 201
    with psycopg.connect(pg_url) as blocker:  # every append waits for this lock
        blocker.execute("LOCK TABLE streams IN EXCLUSIVE MODE")
        r = _new_job(api, "job_held", "k-1")
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["code"] == "DATABASE_UNAVAILABLE"
        # the cancellation reached the server: nothing waits for the lock any more
        waiting = blocker.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'streams'::regclass").fetchone()
        assert waiting == (0,)
        blocker.rollback()

    def retried() -> bool:
        again = _new_job(api, "job_held", "k-1")
        assert again.status_code in (201, 503), again.text
        # written now, not replayed: the append the deadline cut had written nothing
        assert "idempotent-replayed" not in again.headers, again.headers
        return bool(again.status_code == 201)

    _until(retried, "the append goes through once the lock is gone")
    replay = _new_job(api, "job_held", "k-1")
    assert replay.status_code == 201 and replay.headers["idempotent-replayed"] == "true"
    assert api.get("/v1/jobs/job_held").json()["version"] == 1


def test_a_read_without_an_answer_in_time_is_503_and_the_connection_is_not_reused(
        pg_url: str, deadlined: tuple[Database, Any]) -> None:
    db, api = deadlined
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("LOCK TABLE streams IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(DatabaseUnavailableError) as caught, db.query() as tx:
            tx.fetchall("SELECT count(*) FROM streams")
        assert isinstance(caught.value.__cause__, StatementDeadlineExceeded)
        assert caught.value.__cause__.cancelled
        blocker.rollback()

    def reads() -> bool:
        try:
            with db.query() as tx:
                return tx.scalar("SELECT count(*) FROM streams") is not None
        except DatabaseUnavailableError:
            return False  # the short hold after a failure

    _until(reads, "reads work again")


def test_migrations_have_no_deadline(pg_url: str) -> None:
    db = connect(pg_url, statement_timeout=DEADLINE)
    assert isinstance(db, PostgresDatabase)
    done = threading.Event()
    failure: list[BaseException] = []

    def migrate() -> None:
        try:
            db.migrate()
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    try:
        with psycopg.connect(pg_url) as blocker:
            blocker.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            thread = threading.Thread(target=migrate)
            thread.start()
            _until(lambda: blocker.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone() == (1,),
                "migrate waits for the lock")
            assert not done.wait(4 * DEADLINE)  # well past the deadline, still waiting
            blocker.rollback()
        thread.join(HANG_GUARD)
        assert done.is_set() and failure == []
        # the deadline is back for what follows on that connection
        with db.connection() as conn:
            assert getattr(conn, "deadline", None) == DEADLINE
    finally:
        db.close()


def test_an_answer_that_comes_after_the_cancellation_was_asked_is_taken(pg_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement that ends in the grace between the cancellation and the deadline (here a cancellation that
    never arrives) gives its own result, not an error; the connection is then not reused, since a cancellation
    arriving late could stop its next statement."""
    from settlekit.store.postgres import backend

    monkeypatch.setattr(backend.DeadlineConnection, "cancel_safe", lambda self, timeout=0.0: None)
    db = connect(pg_url, statement_timeout=1.6, min_size=1, max_size=1)  # the cancellation goes at 1.2 s
    try:
        with db.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute("SELECT 7 FROM pg_sleep(1.3)").fetchone() == (7,)
        with db.connection() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        db.close()
