"""Database outages: requests answer 503 DATABASE_UNAVAILABLE with Retry-After instead of hanging or 500,
/readyz answers 503, work resumes by itself when the database comes back, and a write whose outcome the client
could not learn is safely retried with the same Idempotency-Key (or the same client-finalized event). Once a
connection attempt has failed, requests are answered at once instead of queueing for the database, and what
queues for it is bounded (503 OVERLOADED beyond).

PostgreSQL outages go through a loopback TCP proxy that is cut and restored: the shared server never stops.
No timed assertions: waits are bounded only as hang guards."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest

from conftest import load_vector
from settlekit.api.deps import AUTH_THREADS
from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import Database, connect
from settlekit.store.reachability import FAST_FAILURE_CAUSE
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


def _created() -> dict[str, Any]:
    return {"type": "JOB_CREATED", "actor": {"type": "system", "id": "x"},
            "payload": {"templateId": "reset_lite", "tenantId": TENANT_A}}


def _concurrent_appends(app: Any, api_key: str, job_ids: Sequence[str],
                        while_waiting: Callable[[list[httpx.Response]], bool] | None = None) -> list[httpx.Response]:
    """One JOB_CREATED append per job id, all at once, in process (the app on this thread's own event loop).
    `while_waiting(answers so far)` is called as answers come in until it returns True (a hang guard bounds it)."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                     headers={"authorization": f"Bearer {api_key}"}) as api:
            tasks = [asyncio.ensure_future(api.post(f"/v1/jobs/{job_id}/events", json=_created(),
                                                    headers={"x-expected-prev-chain-hash": "null"}))
                     for job_id in job_ids]
            if while_waiting is not None:
                deadline = time.monotonic() + HANG_GUARD
                while not while_waiting([t.result() for t in tasks if t.done()]):
                    assert time.monotonic() < deadline, "hang guard: answers while waiting"
                    await asyncio.wait([t for t in tasks if not t.done()], timeout=0.05,
                                       return_when=asyncio.FIRST_COMPLETED)
            return list(await asyncio.wait_for(asyncio.gather(*tasks), HANG_GUARD))

    return asyncio.run(run())


def _refused_at_once(r: httpx.Response) -> bool:
    """A 503 given without waiting for the database: the known outage or the queue bound."""
    problem = r.json()
    return problem["code"] == "OVERLOADED" or problem.get("details", {}).get("cause") == FAST_FAILURE_CAUSE


def _stored_jobs(db: Database, prefix: str) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT COUNT(*) FROM events WHERE stream_id LIKE ?", (f"{prefix}%",)))


def test_postgres_outage_answers_concurrent_appends_at_once_with_bounded_queueing_then_recovers(
        pg_url: str, proxied: tuple[TcpProxy, Database, Any, Any]) -> None:
    """Two bursts of 300 concurrent appends while the database is unreachable: every one is a 503 problem with
    Retry-After, and only the few that reached the database before its connection attempts failed (or that probe
    it again) waited for it; the second burst barely asks the pool for a connection. Nothing is left queued,
    nothing is written, and appends succeed again without a restart once the database is back."""
    proxy, db, api, _ = proxied
    api_key = api.headers["authorization"].removeprefix("Bearer ")
    ctx = api.app.state.settlekit
    assert _new_job(api, "job_before").status_code == 201
    proxy.cut()
    bursts = []
    for burst in range(2):
        requested = db.pool.get_stats().get("requests_num", 0)  # type: ignore[attr-defined]
        answers = _concurrent_appends(api.app, api_key, [f"job_burst{burst}_{i}" for i in range(300)])
        for r in answers:
            _overloaded_or_unavailable(r)
        waited = sum(not _refused_at_once(r) for r in answers)
        bursts.append((waited, db.pool.get_stats().get("requests_num", 0) - requested))  # type: ignore[attr-defined]
    (first_waited, _), (second_waited, second_requested) = bursts
    assert first_waited <= 3 * AUTH_THREADS, bursts  # without the known outage: all 300, each a pool timeout
    assert second_waited <= AUTH_THREADS and second_requested <= AUTH_THREADS, bursts
    assert ctx.auth_threads.pending == 0 and ctx.appender.recorder.group.pending == 0
    proxy.restore()
    _until(lambda: _new_job(api, f"job_after_{time.monotonic_ns()}").status_code == 201, "appends resume")
    assert _stored_jobs(db, "job_burst") == 0
    assert _new_job(api, "job_burst0_0").status_code == 201  # refused before: nothing of it was written


def _overloaded_or_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] in ("DATABASE_UNAVAILABLE", "OVERLOADED")
    assert int(r.headers["retry-after"]) >= 1


def _close_stalled(db: Database, app: Any, held: list[Any]) -> None:
    """Give back the pooled connections a stall test still holds, then stop the app's threads and the database."""
    for conn in held:
        db.pool.putconn(conn)  # type: ignore[attr-defined]
    app.state.settlekit.auth_threads.shutdown(wait=True)
    app.state.settlekit.appender.close()
    db.close()


def test_appends_beyond_the_queue_bound_are_refused_at_once_while_the_database_stalls(pg_url: str) -> None:
    """Every pooled connection is taken (the database is reachable but nothing gets through): the append route's
    threads hold their bound of requests, the others are refused at once with 503 OVERLOADED and write nothing;
    once connections are free again the held requests are written."""
    db = connect(pg_url, max_size=2, timeout=HANG_GUARD)
    api_key = key_for(db, TENANT_A)
    bound = 4
    app = make_app(db, max_queued_appends=bound)  # SETTLEKIT_MAX_QUEUED_APPENDS
    assert app.state.settlekit.auth_threads.max_pending == bound
    assert app.state.settlekit.appender.recorder.group.max_queued == bound
    held = [db.pool.getconn() for _ in range(2)]  # type: ignore[attr-defined]
    released = False

    def release_once_the_rest_is_refused(answers: list[httpx.Response]) -> bool:
        nonlocal released
        if len(answers) >= 20 - bound and not released:
            for conn in held:
                db.pool.putconn(conn)  # type: ignore[attr-defined]
            released = True
        return released

    try:
        answers = _concurrent_appends(app, api_key, [f"job_q_{i}" for i in range(20)],
                                      while_waiting=release_once_the_rest_is_refused)
        refused = [r for r in answers if r.status_code == 503]
        assert sorted(r.status_code for r in answers) == [201] * bound + [503] * (20 - bound)
        for r in refused:
            _overloaded_or_unavailable(r)
            assert r.json()["code"] == "OVERLOADED" and r.json()["details"]["limit"] == bound
        assert _stored_jobs(db, "job_q_") == bound
    finally:
        _close_stalled(db, app, [] if released else held)


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any]]:
    yield db, client(make_app(db), key_for(db, TENANT_A), raise_server_exceptions=False)


def _commit_then_fail(api: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The next append commits, then the connection "dies" before the client learns it (503)."""
    store = api.app.state.settlekit.appender
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


def test_connections_notice_a_peer_that_vanished_without_closing(pg_url: str) -> None:
    """TCP keepalives and a user timeout on every connection (pool and LISTEN), so a server or network that
    disappears without closing the connection fails it within about 30 s instead of the kernel's minutes; a
    value in the URL wins."""
    import socket

    db = connect(f"{pg_url}{'&' if '?' in pg_url else '?'}keepalives_idle=7")
    try:
        with db.query() as tx:
            sock = socket.socket(fileno=tx.raw.pgconn.socket)
            try:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 30_000
            finally:
                sock.detach()  # the descriptor stays the connection's
        assert db.wait_for_notify(0.01) is False  # opens the dispatcher's LISTEN connection
        params = db._listen_conn.info.get_parameters()  # type: ignore[attr-defined]
        assert (params["keepalives_idle"], params["tcp_user_timeout"]) == ("7", "30000")
    finally:
        db.close()


def test_a_probe_ending_with_an_error_of_its_own_does_not_prolong_the_outage(pg_url: str) -> None:
    """While the database is known unreachable, the caller that probes it may end with an error of its own (a
    404 raised inside its transaction): the database is not kept refused for the probe's whole allowance; the
    next operation probes at once and, reaching the server, ends the outage."""
    from settlekit.errors import NotFoundError
    from settlekit.store.reachability import Reachability

    db = connect(pg_url)
    db.pool.wait()  # type: ignore[attr-defined]  # the pool's first connection made (it reports reaching the server)
    now = [100.0]
    db.reachability = Reachability(1.0, probe_allowance=60.0, clock=lambda: now[0])  # type: ignore[attr-defined]
    try:
        db.reachability.failed()  # type: ignore[attr-defined]
        with pytest.raises(DatabaseUnavailableError):
            db.check_reachable()
        now[0] += 1.0
        with pytest.raises(NotFoundError), db.query() as tx:  # the probe
            tx.scalar("SELECT 1")
            raise NotFoundError("no such job", code="JOB_NOT_FOUND")
        with db.query() as tx:  # without the probe ended: refused for the allowance's 60 s
            assert tx.scalar("SELECT 1") == 1
        assert not db.reachability.known_unreachable  # type: ignore[attr-defined]
    finally:
        db.close()


def test_a_probe_that_finds_the_server_still_unreachable_starts_a_new_hold(pg_url: str) -> None:
    """While the database is known to be unreachable, the one caller let through (the probe) failing with a
    connection error starts a new hold of fast failures, after which the next caller probes at once, instead of
    the others waiting out the probe's whole allowance."""
    import psycopg

    from settlekit.store.db import connect
    from settlekit.store.postgres.backend import PostgresDatabase
    from settlekit.store.reachability import Reachability

    now = [0.0]
    db = connect(pg_url)
    assert isinstance(db, PostgresDatabase)
    db.reachability = Reachability(30.0, probe_allowance=600.0, clock=lambda: now[0])
    try:
        db.reachability.failed()
        now[0] = 31.0  # the hold is over: the next caller probes
        with pytest.raises(DatabaseUnavailableError), db.connection():
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        now[0] = 60.0  # within the new hold (31 + 30): others fail at once
        with pytest.raises(DatabaseUnavailableError) as refused:
            db.check_reachable()
        assert refused.value.details["cause"] == FAST_FAILURE_CAUSE
        now[0] = 62.0  # past the new hold, long before the first probe's allowance (31 + 600): probe again
        db.check_reachable()
        with db.query() as tx:
            assert tx.scalar("SELECT 1") == 1
        assert not db.reachability.known_unreachable
    finally:
        db.close()


def test_routed_requests_beyond_the_bound_are_refused_at_once_while_the_database_stalls(pg_url: str) -> None:
    """Every pooled connection is taken: the requests other than appends that the process already holds wait (at
    most SETTLEKIT_MAX_ROUTED_REQUESTS of them), one more is refused at once with 503 OVERLOADED and Retry-After;
    once connections are free again the held requests are answered, and the bound is free again."""
    db = connect(pg_url, max_size=2, timeout=HANG_GUARD)
    api_key = key_for(db, TENANT_A)
    bound = 3
    app = make_app(db, max_routed_requests=bound)
    held = [db.pool.getconn() for _ in range(2)]  # type: ignore[attr-defined]
    released = False

    async def run() -> tuple[list[httpx.Response], httpx.Response]:
        nonlocal released
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                     headers={"authorization": f"Bearer {api_key}"}) as api:
            tasks = [asyncio.ensure_future(api.get("/v1/jobs")) for _ in range(12)]
            deadline = time.monotonic() + HANG_GUARD
            while sum(t.done() for t in tasks) < 12 - bound:
                assert time.monotonic() < deadline, "hang guard: the refusals did not come at once"
                await asyncio.sleep(0.02)
            assert all(t.result().status_code == 503 for t in tasks if t.done())
            assert (await api.get("/healthz")).status_code == 200  # open paths are not bounded
            for conn in held:
                db.pool.putconn(conn)  # type: ignore[attr-defined]
            released = True
            answers = list(await asyncio.wait_for(asyncio.gather(*tasks), HANG_GUARD))
            return answers, await api.get("/v1/jobs")

    try:
        answers, after = asyncio.run(run())
        assert sorted(r.status_code for r in answers) == [200] * bound + [503] * (12 - bound)
        for r in answers:
            if r.status_code == 503:
                _overloaded_or_unavailable(r)
                assert r.json()["code"] == "OVERLOADED" and r.json()["details"]["limit"] == bound
        assert after.status_code == 200
    finally:
        _close_stalled(db, app, [] if released else held)


def test_requests_still_sending_their_body_take_nothing_from_the_routed_bound(db: Database) -> None:
    """Writes whose body never arrives (after their authentication) hold no thread: with a bound of one, reads
    are still answered; the stalled writes are refused nothing and write nothing."""
    api_key = key_for(db, TENANT_A)
    app = make_app(db, max_routed_requests=1)
    headers = [(b"host", b"api"), (b"authorization", f"Bearer {api_key}".encode()),
               (b"content-type", b"application/json"), (b"content-length", b"100")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/destinations", "raw_path": b"/v1/destinations", "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("api", 80)}

    async def run() -> tuple[int, list[Any]]:
        never = asyncio.Event()
        sent: list[Any] = []

        reading = 0  # requests that asked for their body

        async def receive() -> dict[str, Any]:
            nonlocal reading
            reading += 1
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        stalled = []
        for n in range(1, 4):  # one after the other: each is authenticated, then waits for its body
            stalled.append(asyncio.ensure_future(app(dict(scope), receive, send)))
            deadline = time.monotonic() + HANG_GUARD
            while reading < n:
                assert time.monotonic() < deadline, "the request never asked for its body"
                await asyncio.sleep(0.01)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                     headers={"authorization": f"Bearer {api_key}"}) as api:
            status = (await asyncio.wait_for(api.get("/v1/jobs"), HANG_GUARD)).status_code
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
        return status, sent

    try:
        status, sent = asyncio.run(run())
        assert status == 200
        paths = app.openapi()["paths"]  # documented where it can be answered: not on the event stream
        assert "OVERLOADED" in str(paths["/v1/jobs"]["get"]["responses"]["503"])
        assert "OVERLOADED" not in str(paths["/v1/events/stream"]["get"]["responses"].get("503"))
        assert sent == []  # the stalled writes got no answer (and wrote nothing)
        with db.read() as tx:
            assert tx.scalar("SELECT count(*) FROM destinations") == 0
    finally:
        app.state.settlekit.auth_threads.shutdown(wait=True)
        app.state.settlekit.appender.close()


def test_an_open_event_stream_ends_cleanly_in_an_outage_and_resumes(
        proxied: tuple[TcpProxy, Database, Any, Any], pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """An open GET /v1/events/stream when the database goes away: the stream ends with a final `event: problem`
    message (DATABASE_UNAVAILABLE, `retry:` the Retry-After in ms) and a well-formed end of the chunked body,
    logged as what it is (a 200 stream that ended, a warning), not a 500; resumed with Last-Event-ID once the
    database is back, it sends the events appended meanwhile. Before, the body broke off mid-chunk and the log
    said 500 "Caught handled exception, but response already started"."""
    from support.http_server import serve

    proxy, db, api, _ = proxied
    app = api.app
    app.state.settlekit.feed.poll_interval = 0.05
    direct = connect(pg_url)
    key = key_for(direct, TENANT_A)
    assert _new_job(api, "job_feed_1").status_code == 201
    lines: list[str] = []
    with caplog.at_level(logging.INFO), serve(app) as base, \
            httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=HANG_GUARD) as http:
        with http.stream("GET", "/v1/events/stream") as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():  # an incomplete chunked body raises here (httpx.RemoteProtocolError)
                lines.append(line)
                if line.startswith("id: "):
                    proxy.cut()
        ids = [line[4:] for line in lines if line.startswith("id: ")]
        assert len(ids) == 1
        final = lines[lines.index("event: problem"):]
        assert final[1] == "retry: 1000", final
        problem = json.loads(final[2].removeprefix("data: "))
        assert problem["code"] == "DATABASE_UNAVAILABLE" and problem["details"]["retryAfterSeconds"] == 1
        direct_api = client(make_app(direct), key)
        assert direct_api.post("/v1/jobs/job_feed_2/events", json=_created(),
                               headers={"x-expected-prev-chain-hash": "null"}).status_code == 201
        proxy.restore()
        _until(lambda: http.get("/readyz").status_code == 200, "the database back")
        with http.stream("GET", "/v1/events/stream", headers={"Last-Event-ID": ids[-1]}) as resumed:
            for line in resumed.iter_lines():
                if line.startswith("data: "):
                    assert json.loads(line[6:])["streamId"] == "job_feed_2"
                    break
    direct.close()
    requests = [r for r in caplog.records if r.name == "settlekit.api.request" and r.getMessage() == "request"
                and getattr(r, "path", "") == "/v1/events/stream"]
    assert requests and all(getattr(r, "status", None) == 200 for r in requests)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and getattr(r, "path", "") != "/readyz"]
    assert not errors, [(r.name, r.getMessage(), getattr(r, "path", None)) for r in errors]
    ended = [r for r in caplog.records if r.name == "settlekit.api.feed"]
    assert [r.getMessage() for r in ended] == ["event stream ended: DATABASE_UNAVAILABLE"]
