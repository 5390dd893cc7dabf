"""Which answer wins when a request to append to a job is wrong in several ways at once: a missing job (or a
stream that is not a job) is 404 JOB_NOT_FOUND before anything about the events is looked at (their shape, the
precondition header, the signature, an idempotency key's record), while a malformed body and a missing finance
scope are refused first. Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import load_vector
from settlekit.append import Appender
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app

QUOTE = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p1"},
         "payload": {"amountCents": 6500, "currency": "USD"}}
NOT_A_JOB = "robot_stream_1"


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any]]:
    app = make_app(db, max_body_bytes=64 * 1024)
    yield db, client(app, key_for(db, TENANT_A))


def _cases(signed: dict[str, Any]) -> list[tuple[str, Any, dict[str, str], int, str]]:
    """(name, body, headers, status, code) for appends to a stream that is not an existing job."""
    h = {"x-expected-prev-chain-hash": "null"}
    return [
        ("draft", QUOTE, h, 404, "JOB_NOT_FOUND"),
        ("draft without the precondition header", QUOTE, {}, 404, "JOB_NOT_FOUND"),
        ("unknown field", {**QUOTE, "bogus": 1}, h, 404, "JOB_NOT_FOUND"),
        ("actor missing", {"type": "QUOTE_PROPOSED", "payload": {}}, h, 404, "JOB_NOT_FOUND"),
        ("unknown event type", {**QUOTE, "type": "NO_SUCH_TYPE"}, h, 404, "JOB_NOT_FOUND"),
        ("wrong head in the header", QUOTE, {"x-expected-prev-chain-hash": "ab" * 32}, 404, "JOB_NOT_FOUND"),
        ("finalized, bad signature", {**signed, "signature": "AAAA"}, {}, 404, "JOB_NOT_FOUND"),
        ("finalized, other stream", {**signed, "streamId": "job_elsewhere"}, {}, 404, "JOB_NOT_FOUND"),
        ("finalized, bad shape", {**signed, "chainHash": 7}, {}, 404, "JOB_NOT_FOUND"),
        ("idempotency key of another request", QUOTE, {**h, "Idempotency-Key": "used-1"}, 404, "JOB_NOT_FOUND"),
        ("malformed JSON", b"{", {"content-type": "application/json"}, 400, "JSON_INVALID"),
        ("empty list", [], {}, 400, "SCHEMA_INVALID"),
        ("not an object", [1], {}, 400, "SCHEMA_INVALID"),
    ]


def _post(api: Any, job_id: str, body: Any, headers: dict[str, str]) -> Any:
    path = f"/v1/jobs/{job_id}/events"
    if isinstance(body, bytes):
        return api.post(path, content=body, headers=headers)
    return api.post(path, json=body, headers=headers)


def _seed(db: Database, api: Any) -> dict[str, Any]:
    """An existing job with a recorded idempotency key ("used-1"), a robot stream, and a signed event of a job
    that does not exist here."""
    r = api.post("/v1/jobs", json={"jobId": "job_there", "payload": {"templateId": "t1"}})
    assert r.status_code == 201, r.text
    h = {"Idempotency-Key": "used-1", "x-expected-prev-chain-hash": r.json()["headChainHash"]}
    assert api.post("/v1/jobs/job_there/events", json=QUOTE, headers=h).status_code == 201
    Appender(db).append(TENANT_A, NOT_A_JOB, [{"type": "ROBOT_REGISTERED", "actor": {"type": "system", "id": "t"},
                                               "payload": {}}], expected_prev_chain_hash=None)
    vector = load_vector("settle_completed.json")
    return dict(vector["events"][1])


@pytest.mark.parametrize("target", ["missing", "not a job"])
def test_job_not_found_precedence(env: tuple[Database, Any], target: str) -> None:
    db, api = env
    signed = _seed(db, api)
    job_id = signed["streamId"] if target == "missing" else NOT_A_JOB
    if target == "not a job":
        signed["streamId"] = NOT_A_JOB
    cases = _cases(signed)
    answers = []
    for name, body, headers, _, _ in cases:
        r = _post(api, job_id, body, headers)
        answers.append((name, r.status_code, r.json().get("code")))
    assert answers == [(name, status, code) for name, _, _, status, code in cases]
    # nothing was stored for the refused requests
    assert api.get(f"/v1/jobs/{job_id}").status_code == 404


def test_finance_scope_before_job_not_found(env: tuple[Database, Any]) -> None:
    db, _ = env
    writer = client(env[1].app, key_for(db, TENANT_A, ["jobs:write", "jobs:read"]))
    settled = {"type": "SETTLED", "actor": {"type": "system", "id": "api"}, "payload": {}}
    r = writer.post("/v1/jobs/job_missing/events", json=settled, headers={"x-expected-prev-chain-hash": "null"})
    assert (r.status_code, r.json()["code"]) == (403, "SCOPE_REQUIRED")
    r = env[1].post("/v1/jobs/job_missing/events", json=settled, headers={"x-expected-prev-chain-hash": "null"})
    assert (r.status_code, r.json()["code"]) == (404, "JOB_NOT_FOUND")


def test_job_created_makes_the_stream(env: tuple[Database, Any]) -> None:
    """JOB_CREATED as the first event of a missing stream passes the check (and its own rules apply after)."""
    _, api = env
    created = {"type": "JOB_CREATED", "actor": {"type": "system", "id": "api"},
               "payload": {"templateId": "t1", "tenantId": TENANT_A}}
    r = api.post("/v1/jobs/job_new/events", json=created, headers={"x-expected-prev-chain-hash": "null"})
    assert r.status_code == 201, r.text
    r = api.post("/v1/jobs/job_new2/events", json={**created, "bogus": 1},
                 headers={"x-expected-prev-chain-hash": "null"})
    assert (r.status_code, r.json()["code"]) == (400, "SCHEMA_INVALID")



def test_job_created_on_another_stream(env: tuple[Database, Any]) -> None:
    """A stream that exists but is not a job is not a job, whatever the first event."""
    db, api = env
    _seed(db, api)
    created = {"type": "JOB_CREATED", "actor": {"type": "system", "id": "api"},
               "payload": {"templateId": "t1", "tenantId": TENANT_A}}
    r = api.post(f"/v1/jobs/{NOT_A_JOB}/events", json=created, headers={"x-expected-prev-chain-hash": "null"})
    assert (r.status_code, r.json()["code"]) == (404, "JOB_NOT_FOUND")
