"""Database outages: requests answer 503 DATABASE_UNAVAILABLE with Retry-After instead of hanging or 500,
/readyz answers 503, work resumes by itself when the database comes back, and a write whose outcome the client
could not learn is safely retried with the same Idempotency-Key (or the same client-finalized event).

PostgreSQL outages go through a loopback TCP proxy that is cut and restored: the shared server never stops.
No timed assertions: waits are bounded only as hang guards."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conftest import load_vector
from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import Database, connect
from support.api import TENANT_A, client, key_for, make_app
from support.tcp_proxy import TcpProxy

HANG_GUARD = 60.0


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.05)


def _new_job(api: Any, job_id: str, **kwargs: Any) -> Any:
    return api.post(f"/v1/jobs/{job_id}/events", json={
        "type": "JOB_CREATED", "actor": {"type": "system", "id": "x"},
        "payload": {"templateId": "reset_lite", "tenantId": TENANT_A}},
        headers={"x-expected-prev-chain-hash": "null", **kwargs.pop("headers", {})}, **kwargs)


def _unavailable(r: Any) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "DATABASE_UNAVAILABLE"
    assert int(r.headers["retry-after"]) >= 1


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[TcpProxy, Database, Any, Any]]:
    direct = connect(pg_url)
    key = key_for(direct, TENANT_A)
    host = pg_url.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    proxy = TcpProxy(hostname, int(port or 5432))
    db = connect(pg_url.replace(f"@{host}/", f"@127.0.0.1:{proxy.port}/"))
    try:
        app = make_app(db)
        yield proxy, db, client(app, key, raise_server_exceptions=False), client(app, raise_server_exceptions=False)
    finally:
        proxy.close()
        db.close()
        direct.close()


def test_postgres_outage_answers_503_and_recovers(proxied: tuple[TcpProxy, Database, Any, Any]) -> None:
    proxy, db, api, anon = proxied
    assert _new_job(api, "job_before").status_code == 201
    proxy.cut()
    for job_id in ("job_down_1", "job_down_2"):  # the first meets a dropped connection, the next an empty pool
        _unavailable(_new_job(api, job_id))
    _unavailable(api.get("/v1/jobs"))
    _unavailable(api.get("/v1/jobs/job_before"))
    r = anon.get("/readyz")
    assert r.status_code == 503 and r.json()["code"] == "DATABASE_UNAVAILABLE"
    assert anon.get("/healthz").status_code == 200  # liveness does not depend on the database
    proxy.restore()
    _until(lambda: _new_job(api, f"job_after_{time.monotonic_ns()}").status_code == 201, "appends resume")
    _until(lambda: anon.get("/readyz").status_code == 200, "ready again")
    jobs = {j["jobId"] for j in api.get("/v1/jobs").json()["jobs"]}
    assert "job_before" in jobs and not {"job_down_1", "job_down_2"} & jobs


def test_postgres_outage_retry_with_the_same_idempotency_key(proxied: tuple[TcpProxy, Database, Any, Any]) -> None:
    proxy, db, api, _ = proxied
    proxy.cut()
    _unavailable(_new_job(api, "job_idem", headers={"Idempotency-Key": "k-1"}))
    proxy.restore()

    def retried() -> bool:
        r = _new_job(api, "job_idem", headers={"Idempotency-Key": "k-1"})
        assert r.status_code in (201, 503), r.text
        return bool(r.status_code == 201)

    _until(retried, "the retry succeeds")
    again = _new_job(api, "job_idem", headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert api.get("/v1/jobs/job_idem").json()["version"] == 1


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any]]:
    yield db, client(make_app(db), key_for(db, TENANT_A), raise_server_exceptions=False)


def _commit_then_fail(api: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The next append commits, then the connection "dies" before the client learns it (503)."""
    store = api.app.state.settlekit.store
    real = store.append_async
    calls: list[int] = []

    async def append(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        if not calls:
            calls.append(1)
            raise DatabaseUnavailableError(cause="failpoint: connection lost after commit")
        return result

    monkeypatch.setattr(store, "append_async", append)
    return calls


def test_committed_append_answered_503_is_safely_retried_with_the_same_key(
        env: tuple[Database, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db, api = env
    created = api.post("/v1/jobs", json={"jobId": "job_r", "payload": {"templateId": "reset_lite"}})
    head = created.json()["headChainHash"]
    quote = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
             "payload": {"amountCents": 100, "currency": "USD"}}
    headers = {"Idempotency-Key": "quote-1", "x-expected-prev-chain-hash": head}
    calls = _commit_then_fail(api, monkeypatch)
    _unavailable(api.post("/v1/jobs/job_r/events", json=quote, headers=headers))
    assert calls == [1]
    retry = api.post("/v1/jobs/job_r/events", json=quote, headers=headers)
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true", retry.text
    assert api.get("/v1/jobs/job_r").json()["version"] == 2  # appended exactly once
    # a retry without the key would be refused (the head moved), never appended twice
    r = api.post("/v1/jobs/job_r/events", json=quote, headers={"x-expected-prev-chain-hash": head})
    assert r.status_code == 409
    assert api.get("/v1/jobs/job_r").json()["version"] == 2


def test_committed_client_event_answered_503_is_safely_resent(
        env: tuple[Database, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    db, api = env
    vector = load_vector("settle_completed.json")
    for signer in vector["signers"]:
        assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                          "purpose": signer["role"]}).status_code == 201
    first = vector["events"][0]
    job_id = first["streamId"]
    _commit_then_fail(api, monkeypatch)
    _unavailable(api.post(f"/v1/jobs/{job_id}/events", json=first))
    again = api.post(f"/v1/jobs/{job_id}/events", json=first)
    assert again.status_code == 200 and again.json()["alreadyExists"] is True, again.text
    assert api.get(f"/v1/jobs/{job_id}/events").json()["events"] == [first]


def test_sqlite_locked_database_answers_503(sqlite_url: str) -> None:
    setup = connect(sqlite_url)
    setup.migrate()
    key = key_for(setup, TENANT_A)
    setup.close()
    db = connect(sqlite_url, busy_timeout_ms=200)
    holder = sqlite3.connect(sqlite_url[len("sqlite:///"):], isolation_level=None)
    try:
        api = client(make_app(db), key, raise_server_exceptions=False)
        assert _new_job(api, "job_ok").status_code == 201
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        _unavailable(_new_job(api, "job_locked"))
        holder.execute("ROLLBACK")
        assert _new_job(api, "job_locked").status_code == 201
    finally:
        holder.close()
        db.close()


def test_only_connection_errors_are_unavailable() -> None:
    import psycopg
    from psycopg_pool import PoolTimeout

    from settlekit.store.postgres.backend import is_unavailable

    assert is_unavailable(PoolTimeout("no connection"))
    assert is_unavailable(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not is_unavailable(psycopg.errors.LockNotAvailable("lock"))
    assert not is_unavailable(psycopg.errors.SerializationFailure("retry"))
    assert not is_unavailable(psycopg.errors.UndefinedTable("no table"))


def test_a_group_is_written_again_one_by_one_only_when_the_server_refused_a_statement() -> None:
    import psycopg

    from settlekit.store.postgres.events import _refused_statement

    assert _refused_statement(psycopg.errors.UniqueViolation("duplicate"))
    assert _refused_statement(psycopg.errors.SerializationFailure("retry"))
    assert not _refused_statement(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not _refused_statement(psycopg.errors.AdminShutdown("terminating connection"))
