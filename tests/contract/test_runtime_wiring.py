"""The runtime's wiring: the retention cleanups on a schedule, the queue gauges on the worker's /metrics, JSON
logs with a request id per API request."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from test_delivery_worker import T0, Artifacts, add_destination, artifact, enqueue

from settlekit.application import idempotency as idempotent_writes
from settlekit.errors import ConfigurationError
from settlekit.runtime import CLEANUP_LOCK_KEY, CleanupScheduler, Settings
from settlekit.runtime.logging import configure_logging, reset_logging
from settlekit.store import deliveries as delivery_store
from settlekit.store import idempotency
from settlekit.store.db import Database, connect
from support.api import TENANT_A, client, key_for, make_app

SETTLEKIT = Path(sys.executable).with_name("settlekit")


def idempotency_rows(db: Database) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT count(*) FROM idempotency_keys"))


def delivery_states(db: Database) -> list[str]:
    with db.read() as tx:
        return sorted(str(r[0]) for r in tx.fetchall("SELECT state FROM deliveries"))


def seed_expired(db: Database, *, pending: bool = True) -> None:
    """One delivered and one failed delivery that expired on T0 + 1 day, one pending delivery (never expires)
    unless `pending` is False, and one idempotency key stored now (expires in 30 days). The destination is a
    loopback address nothing listens on."""
    arts = Artifacts()
    add_destination(db, "http://127.0.0.1:9/hooks", "file:/x")
    for job in ("j", "k", "l") if pending else ("j", "k"):
        enqueue(db, arts, artifact(job, 1))
    with db.transaction() as tx:
        a, b = delivery_store.claim(tx, worker="w", limit=2, lease=timedelta(seconds=60), now=T0)
        delivery_store.mark_delivered(tx, a.id, "w", status=200, now=T0, retention=timedelta(days=1))
        delivery_store.mark_failed(tx, b.id, "w", status=500, error="non_2xx", now=T0, retention=timedelta(days=1))
    scope = idempotency.KeyScope(TENANT_A, "key_1", "POST /v1/x", "idem-1")
    idempotent_writes.run(db, scope, "hash", lambda: (201, {"ok": True}), json.dumps)


def test_cleanup_tick_deletes_expired_rows_only(db: Database) -> None:
    seed_expired(db)
    registry = CollectorRegistry()
    now = datetime.now(UTC)
    assert delivery_states(db) == ["delivered", "failed", "pending"] and idempotency_rows(db) == 1

    first = CleanupScheduler(db, interval=60, clock=lambda: now, registry=registry).tick()
    assert (first.deliveries, first.idempotency_keys, first.skipped) == (2, 0, False)
    assert delivery_states(db) == ["pending"] and idempotency_rows(db) == 1

    later = CleanupScheduler(db, interval=60, clock=lambda: now + timedelta(days=31), registry=registry)
    assert later.tick().idempotency_keys == 1
    assert idempotency_rows(db) == 0 and delivery_states(db) == ["pending"]
    assert later.tick().deliveries == 0  # idempotent: nothing left to delete
    assert registry.get_sample_value("settlekit_cleanup_deleted_rows_total", {"table": "deliveries"}) == 2
    assert registry.get_sample_value("settlekit_cleanup_deleted_rows_total", {"table": "idempotency_keys"}) == 1


def test_cleanup_deletes_in_batches(db: Database) -> None:
    seed_expired(db)
    result = CleanupScheduler(db, interval=60, registry=CollectorRegistry(), batch=1).tick()
    assert result.deliveries == 2 and delivery_states(db) == ["pending"]


def test_cleanup_tick_skips_while_another_process_runs_one(pg_url: str) -> None:
    db = connect(pg_url)
    db.migrate()
    try:
        seed_expired(db)
        scheduler = CleanupScheduler(db, interval=60, registry=CollectorRegistry())
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (CLEANUP_LOCK_KEY,))
            assert scheduler.tick().skipped
            assert delivery_states(db) == ["delivered", "failed", "pending"]
            other.execute("SELECT pg_advisory_unlock(%s)", (CLEANUP_LOCK_KEY,))
        result = scheduler.tick()
        assert not result.skipped and result.deliveries == 2
    finally:
        db.close()


def test_failed_cleanup_is_logged_and_counted(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    db = connect(sqlite_url)
    db.migrate()
    db.close()  # every statement now fails
    registry = CollectorRegistry()
    scheduler = CleanupScheduler(db, interval=60, registry=registry)
    with caplog.at_level(logging.ERROR, logger="settlekit.runtime"):
        assert scheduler.run_once() is None
    assert registry.get_sample_value("settlekit_cleanup_errors_total") == 1
    [record] = [r for r in caplog.records if r.name == "settlekit.runtime"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    with pytest.raises(ConfigurationError):
        scheduler.tick()


def test_cleanup_and_log_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().cleanup_interval == 300.0 and Settings().log_level == "INFO"
    monkeypatch.setenv("SETTLEKIT_CLEANUP_INTERVAL", "15")
    monkeypatch.setenv("SETTLEKIT_LOG_LEVEL", "debug")
    settings = Settings()
    assert (settings.cleanup_interval, settings.log_level) == (15.0, "DEBUG")
    assert Settings(cleanup_interval=0.0).cleanup_interval == 0.0  # the flag wins over the env
    monkeypatch.setenv("SETTLEKIT_CLEANUP_INTERVAL", "-1")
    with pytest.raises(ConfigurationError, match="SETTLEKIT_CLEANUP_INTERVAL"):
        Settings()
    monkeypatch.setenv("SETTLEKIT_CLEANUP_INTERVAL", "60")
    monkeypatch.setenv("SETTLEKIT_LOG_LEVEL", "chatty")
    with pytest.raises(ConfigurationError, match="SETTLEKIT_LOG_LEVEL"):
        Settings()


def _poll(url: str, pattern: str, deadline_s: float = 60.0) -> str:
    """GET `url` until its body matches `pattern` (the worker's first cleanup runs on its own thread)."""
    deadline = time.monotonic() + deadline_s
    text = ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        if re.search(pattern, text, re.M):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} never appeared in {url}:\n{text}")


@pytest.fixture
def worker_process(db_url: str) -> Iterator[tuple[Database, subprocess.Popen[str], str]]:
    db = connect(db_url)
    db.migrate()
    seed_expired(db, pending=False)
    env = {**os.environ, "SETTLEKIT_LOG_LEVEL": "INFO"}
    proc = subprocess.Popen([str(SETTLEKIT), "worker", "--db", db_url, "--metrics-port", "0",
                             "--cleanup-interval", "3600"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = ""
        for line in proc.stderr:
            found = re.search(r"metrics on (http://\S+/metrics)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the worker did not announce its metrics address"
        yield db, proc, url
    finally:
        proc.terminate()
        proc.wait(30)
        db.close()


def test_worker_schedules_cleanup_and_serves_queue_gauges(
        worker_process: tuple[Database, subprocess.Popen[str], str]) -> None:
    db, proc, url = worker_process
    text = _poll(url, r'^settlekit_cleanup_deleted_rows_total\{table="deliveries"\} 2\.0$')
    assert delivery_states(db) == []
    text = _poll(url, r'^settlekit_delivery_dlq_size 0\.0$')  # the failed row was past its retention
    for gauge in ('settlekit_deliveries_pending{state="pending"}', "settlekit_delivery_oldest_pending_seconds",
                  "settlekit_consumer_lag_events", "settlekit_cleanup_errors_total"):
        assert gauge in text, gauge
    proc.terminate()
    assert proc.wait(30) == 0
    assert proc.stderr is not None
    logged = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
    cleanup = [e for e in logged if e["event"].startswith("retention cleanup deleted")]
    assert cleanup and cleanup[0]["level"] == "info" and cleanup[0]["logger"] == "settlekit.runtime"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    try:
        yield stream
    finally:
        reset_logging()
        logging.getLogger().setLevel(logging.WARNING)


def _request_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]  # every line is one JSON object
    return [e for e in lines if e.get("event") == "request"]


def test_api_request_log_line_is_json_with_request_id_tenant_key_and_code(
        sqlite_url: str, json_log: io.StringIO) -> None:
    db = connect(sqlite_url)
    db.migrate()
    try:
        secret = key_for(db, TENANT_A)
        api = client(make_app(db), secret)
        ok = api.get("/v1/jobs", headers={"X-Request-Id": "req-abc-123"})
        assert ok.status_code == 200 and ok.headers["x-request-id"] == "req-abc-123"
        missing = api.get("/v1/jobs/job_nope")
        assert missing.status_code == 404
        generated = missing.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)
        bad_id = api.get("/v1/jobs", headers={"X-Request-Id": "x" * 200})  # too long: replaced
        assert bad_id.headers["x-request-id"] != "x" * 200
        denied = client(make_app(db), "sk_nope_nope").get("/v1/jobs", headers={"X-Request-Id": "req-denied"})
        assert denied.status_code == 401
    finally:
        db.close()
    key_id = secret.split("_")[1]
    first, second, _, third = _request_lines(json_log)
    assert first["request_id"] == "req-abc-123" and first["tenant"] == TENANT_A and first["key_id"] == key_id
    assert (first["status"], first["method"], first["route"], first["level"]) == (200, "GET", "/v1/jobs", "info")
    assert "error_code" not in first and "timestamp" in first and first["logger"] == "settlekit.api.request"
    assert second["request_id"] == generated and second["error_code"] == "JOB_NOT_FOUND" and second["status"] == 404
    assert second["tenant"] == TENANT_A
    assert third["request_id"] == "req-denied" and third["status"] == 401 and "tenant" not in third
    assert isinstance(third["error_code"], str) and third["error_code"]


def test_stdlib_loggers_come_out_as_json_with_the_bound_context(json_log: io.StringIO) -> None:
    from settlekit.runtime import logging as logs

    logs.clear()
    logs.bind(request_id="r1", tenant="t1")
    try:
        logging.getLogger("settlekit.somewhere").info("hello %s", "world", extra={"jobId": "job_1"})
        logging.getLogger("settlekit.somewhere").debug("below the level")
    finally:
        logs.clear()
    [line] = [json.loads(x) for x in json_log.getvalue().splitlines()]
    assert line["event"] == "hello world" and line["jobId"] == "job_1"
    assert (line["request_id"], line["tenant"], line["level"]) == ("r1", "t1", "info")


def test_workers_register_the_queue_gauges_and_run_the_cleanup_while_started(db: Database) -> None:
    from settlekit.runtime import Workers

    seed_expired(db, pending=False)
    registry = CollectorRegistry()
    workers = Workers(db, Settings(db_url=db.url, cleanup_interval=0), registry=registry)  # ticks driven here
    assert registry.get_sample_value("settlekit_delivery_dlq_size") is None
    workers.start()
    try:
        assert registry.get_sample_value("settlekit_delivery_dlq_size") == 1
        assert registry.get_sample_value("settlekit_deliveries_pending", {"state": "delivered"}) == 1
        assert workers.cleanup.tick().deliveries == 2
        assert registry.get_sample_value("settlekit_delivery_dlq_size") == 0
    finally:
        workers.stop()
    assert registry.get_sample_value("settlekit_delivery_dlq_size") is None  # unregistered on stop


def test_an_unhandled_error_is_logged_with_its_request_id(sqlite_url: str, json_log: io.StringIO) -> None:
    db = connect(sqlite_url)
    db.migrate()
    try:
        app = make_app(db)

        @app.get("/v1/boom")
        def boom() -> None:
            raise RuntimeError("boom")

        api = client(app, key_for(db, TENANT_A), raise_server_exceptions=False)
        r = api.get("/v1/boom", headers={"X-Request-Id": "req-boom"})
        assert r.status_code == 500 and r.json()["code"] == "INTERNAL"
        assert r.headers["x-request-id"] == "req-boom"
    finally:
        db.close()
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    [error] = [e for e in lines if e["logger"] == "settlekit.api"]
    assert error["level"] == "error" and error["request_id"] == "req-boom"
    assert "RuntimeError: boom" in error["exception"]
    [request] = [e for e in lines if e.get("event") == "request"]
    assert (request["status"], request["error_code"], request["level"]) == (500, "INTERNAL", "error")
    assert request["request_id"] == "req-boom" and request["tenant"] == TENANT_A
