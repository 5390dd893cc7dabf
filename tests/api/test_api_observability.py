"""What an operator sees of a request: the `X-Request-Id` in the answer, in its problem body and in every log line
logged while it runs; the RateLimit-* headers of the per-key bucket; the append counter and latency histogram per
outcome; 404 (not 401) for a path no route serves."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from conftest import load_vector
from settlekit.api.ratelimit import Quota, RateLimiter
from settlekit.runtime.logging import configure_logging, reset_logging
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    try:
        yield stream
    finally:
        reset_logging()
        logging.getLogger().setLevel(logging.WARNING)


def test_every_problem_body_carries_the_request_id(sqlite_db: Database) -> None:
    app = make_app(sqlite_db)

    @app.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    api = client(app, key_for(sqlite_db, TENANT_A), raise_server_exceptions=False)
    anon = client(app)
    answers = {
        "unknown job (404)": api.get("/v1/jobs/job_nope"),
        "no key (401)": anon.get("/v1/jobs"),
        "unknown path (404)": anon.get("/nope"),
        "invalid body (400)": api.post("/v1/jobs", json={"payload": "not an object"}),
        "unhandled (500)": api.get("/v1/boom"),
    }
    for name, r in answers.items():
        assert r.headers["content-type"] == "application/problem+json", name
        assert r.json()["requestId"] == r.headers["x-request-id"], name
    given = api.get("/v1/jobs/job_nope", headers={"X-Request-Id": "req-42"})
    assert given.headers["x-request-id"] == "req-42" and given.json()["requestId"] == "req-42"
    assert "requestId" not in api.get("/v1/jobs").json()  # success bodies are unchanged


def test_a_line_logged_inside_a_route_carries_the_request_id(sqlite_db: Database, json_log: io.StringIO) -> None:
    app = make_app(sqlite_db)
    log = logging.getLogger("settlekit.test.route")

    @app.get("/v1/sync-work")
    def sync_work() -> dict[str, str]:  # runs on a worker thread
        log.info("sync work")
        return {}

    @app.get("/v1/async-work")
    async def async_work() -> dict[str, str]:
        log.info("async work")
        return {}

    api = client(app, key_for(sqlite_db, TENANT_A))
    api.get("/v1/sync-work", headers={"X-Request-Id": "req-sync"})
    api.get("/v1/async-work", headers={"X-Request-Id": "req-async"})
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    by_event = {(e["event"], e["request_id"]) for e in lines if e["logger"].startswith("settlekit.")}
    assert {("sync work", "req-sync"), ("request", "req-sync"), ("async work", "req-async"),
            ("request", "req-async")} <= by_event
    assert all(e.get("tenant") == TENANT_A for e in lines if e["logger"] == "settlekit.test.route")


def test_ratelimit_headers_follow_the_key_bucket(sqlite_db: Database) -> None:
    app = make_app(sqlite_db)
    now = [100.0]
    app.state.settlekit.limiter = RateLimiter(0.5, 3, clock=lambda: now[0])
    api = client(app, key_for(sqlite_db, TENANT_A))

    def quota(r: Any) -> tuple[str, str, str]:
        return r.headers["ratelimit-limit"], r.headers["ratelimit-remaining"], r.headers["ratelimit-reset"]

    # a full bucket of 3 refilling at 0.5/s: each request takes a token, the bucket is full again in reset seconds
    assert [quota(api.get("/v1/jobs")) for _ in range(3)] == [("3", "2", "2"), ("3", "1", "4"), ("3", "0", "6")]
    limited = api.get("/v1/jobs/job_nope")
    assert limited.status_code == 429 and limited.json()["code"] == "RATE_LIMITED"
    assert quota(limited) == ("3", "0", "6") and limited.headers["retry-after"] == "2"
    assert limited.json()["requestId"] == limited.headers["x-request-id"]
    now[0] += 2.0  # one token back
    r = api.get("/v1/jobs/job_nope")
    assert r.status_code == 404 and quota(r) == ("3", "0", "6")  # error answers of an allowed request too
    # open paths are not rate-limited and carry no RateLimit headers; nor does a failed authentication
    assert "ratelimit-limit" not in client(app).get("/healthz").headers
    assert "ratelimit-limit" not in client(app, "sk_nope_nope").get("/v1/jobs").headers


def test_no_ratelimit_headers_when_rate_limiting_is_off(sqlite_db: Database) -> None:
    app = make_app(sqlite_db)
    app.state.settlekit.limiter = RateLimiter(0, 1)
    r = client(app, key_for(sqlite_db, TENANT_A)).get("/v1/jobs")
    assert r.status_code == 200 and "ratelimit-limit" not in r.headers


def test_rate_limiter_acquire_reports_the_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 2, clock=lambda: now[0])
    assert limiter.acquire("k") == Quota(limit=2, remaining=1, reset=1, wait=0.0)
    assert limiter.acquire("k") == Quota(limit=2, remaining=0, reset=1, wait=0.0)
    assert limiter.acquire("k") == Quota(limit=2, remaining=0, reset=1, wait=0.5)
    now[0] = 10.0
    assert limiter.acquire("k") == Quota(limit=2, remaining=1, reset=1, wait=0.0)
    assert RateLimiter(0, 5).acquire("k") is None


def test_append_counter_and_histogram_per_outcome(sqlite_db: Database) -> None:
    registry = CollectorRegistry()
    app = make_app(sqlite_db, registry=registry)
    api = client(app, key_for(sqlite_db, TENANT_A))

    def count(outcome: str) -> float | None:
        return registry.get_sample_value("settlekit_append_total", {"outcome": outcome})

    assert count("created") == 0 and count("conflict") == 0  # every outcome is exported from the start
    create = {"jobId": "job_obs", "payload": {"templateId": "reset_lite"}}
    assert api.post("/v1/jobs", json=create, headers={"Idempotency-Key": "k1"}).status_code == 201
    r = api.post("/v1/jobs", json=create, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 201 and r.headers["idempotent-replayed"] == "true"
    assert api.post("/v1/jobs", json=create).status_code == 409  # JOB_ALREADY_EXISTS
    stale = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
             "payload": {"amountCents": 100, "currency": "USD"}}
    assert api.post("/v1/jobs/job_obs/events", json=stale,
                    headers={"x-expected-prev-chain-hash": "0" * 64}).status_code == 409
    assert api.post("/v1/jobs/job_nope/events", json=stale,
                    headers={"x-expected-prev-chain-hash": "null"}).status_code == 404
    assert api.post("/v1/jobs/job_obs/events", content=b"[]").status_code == 400
    vector = load_vector("settle_completed.json")
    for signer in vector["signers"]:
        assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                          "purpose": signer["role"]}).status_code == 201
    first = vector["events"][0]
    assert api.post(f"/v1/jobs/{first['streamId']}/events", json=first).status_code == 201
    assert api.post(f"/v1/jobs/{first['streamId']}/events", json=first).status_code == 200  # already there
    assert {o: count(o) for o in ("created", "replayed", "existing", "conflict", "refused", "error")} == {
        "created": 2, "replayed": 1, "existing": 1, "conflict": 2, "refused": 2, "error": 0}
    timed = registry.get_sample_value("settlekit_append_duration_seconds_count", {"outcome": "created"})
    assert timed == 2
    assert registry.get_sample_value("settlekit_append_duration_seconds_sum", {"outcome": "created"}) > 0


def test_openapi_declares_the_request_id_and_ratelimit_headers(sqlite_db: Database) -> None:
    spec = client(make_app(sqlite_db)).get("/openapi.json").json()
    assert set(spec["components"]["headers"]) == {"X-Request-Id", "RateLimit-Limit", "RateLimit-Remaining",
                                                  "RateLimit-Reset", "Retry-After", "WWW-Authenticate",
                                                  "Idempotent-Replayed"}
    created = spec["paths"]["/v1/jobs"]["post"]["responses"]["201"]["headers"]
    assert created["RateLimit-Remaining"] == {"$ref": "#/components/headers/RateLimit-Remaining"}
    assert set(spec["paths"]["/healthz"]["get"]["responses"]["200"]["headers"]) == {"X-Request-Id"}


def test_httpx_request_lines_are_not_logged_at_info(json_log: io.StringIO) -> None:
    """httpx logs each request with its full URL at info (a webhook URL may carry credentials): only its
    warnings come out; reset_logging gives httpx its level back."""
    logging.getLogger("httpx").info('HTTP Request: POST https://hooks.example/x?token=s3cret "HTTP/1.1 200 OK"')
    logging.getLogger("httpx").warning("httpx warning")
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert [line["event"] for line in lines if line["logger"] == "httpx"] == ["httpx warning"]
    assert "s3cret" not in json_log.getvalue()
    reset_logging()
    assert logging.getLogger("httpx").level == logging.NOTSET


def test_psycopg_pool_messages_are_throttled(json_log: io.StringIO) -> None:
    """psycopg's pool logs every failed reconnection: through `configure_logging`, each message template goes out
    at most once per 30 s, the next one counting those held back."""
    from settlekit.runtime.logging import Throttle

    pool = logging.getLogger("psycopg.pool")
    throttle = next(f for f in pool.filters if isinstance(f, Throttle))
    now = [0.0]
    throttle.clock = lambda: now[0]
    for _ in range(10):
        pool.warning("error connecting in %r: %s", "settlekit", "connection refused")
        now[0] += 1.0
    pool.warning("reconnection attempt in pool %r failed after %s sec", "settlekit", 2.0)
    now[0] += 30.0
    pool.warning("error connecting in %r: %s", "settlekit", "connection refused")
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert [(line["event"].split(" in ")[0], line.get("suppressed")) for line in lines] == [
        ("error connecting", None), ("reconnection attempt", None), ("error connecting", 9)]
