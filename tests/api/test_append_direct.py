"""The event append has two ways in: the middleware serves it directly when the body has a Content-Length (what
clients send), FastAPI's route when it does not (a chunked body). Both give the same answers, in the same order of
checks. Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from settlekit.api.auth import revoke_api_key
from settlekit.simulate import Fleet, job_stream
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app


def _chunked(body: Any) -> Iterator[bytes]:
    """The body as a stream of chunks: sent without Content-Length, so it takes FastAPI's route."""
    data = orjson.dumps(body)
    yield data[:10]
    yield data[10:]


@pytest.fixture
def api(db: Database) -> Any:
    app = make_app(db, max_body_bytes=16 * 1024)
    fleet = Fleet.create()
    keyed = client(app, key_for(db, TENANT_A))
    for registration in fleet.registrations():
        assert keyed.post("/v1/keys", json={k: v for k, v in registration.items() if k != "keyId"}).status_code == 201
    return app, keyed, fleet


def test_both_ways_append_alike(api: Any) -> None:
    app, keyed, fleet = api
    events = job_stream("settle_completed", "job_two_ways", fleet, 0)
    answers = []
    for i, event in enumerate(events[:4]):
        path = "/v1/jobs/job_two_ways/events"
        r = keyed.post(path, json=event) if i % 2 == 0 else keyed.post(path, content=_chunked(event))
        assert r.status_code == 201, r.text
        answers.append(r.json())
    assert [a["firstSeq"] for a in answers] == [1, 2, 3, 4]
    assert keyed.get("/v1/jobs/job_two_ways/export").json() == events[:4]
    again = keyed.post("/v1/jobs/job_two_ways/events", content=_chunked(events[3]))
    assert again.status_code == 200 and again.json()["alreadyExists"] is True


@pytest.mark.parametrize("chunked", [False, True])
def test_both_ways_refuse_alike(api: Any, chunked: bool) -> None:
    app, keyed, fleet = api
    anon = client(app)
    event = job_stream("settle_completed", "job_refused", fleet, 0)[0]

    def post(who: Any, body: Any, headers: dict[str, str] | None = None) -> Any:
        if chunked:
            return who.post("/v1/jobs/job_refused/events", content=_chunked(body), headers=headers or {})
        return who.post("/v1/jobs/job_refused/events", content=orjson.dumps(body), headers=headers or {})

    assert post(anon, event).json()["code"] == "UNAUTHENTICATED"
    big = {**event, "payload": {"blob": "x" * 20_000}}
    assert post(anon, big).status_code == 401  # who you are comes before what you sent
    assert post(keyed, big).json()["code"] == "PAYLOAD_TOO_LARGE"
    assert post(keyed, {**event, "payload": {"s": "a\u0000b"}}).json()["code"] == "SCHEMA_INVALID"
    reader = client(app, key_for(keyed.app.state.settlekit.db, TENANT_A, ["jobs:read"]))
    r = post(reader, event)
    assert r.status_code == 403 and r.json()["code"] == "SCOPE_REQUIRED"
    r = post(keyed, event, {"x-request-id": "req-123"})
    assert r.status_code == 201 and r.headers["x-request-id"] == "req-123"
    assert "ratelimit-limit" in {k.lower() for k in r.headers}


def test_the_key_read_with_the_stream_authenticates_as_on_its_own(api: Any) -> None:
    """The direct append reads the API key's row with the stream: a wrong secret, an unknown key id and a revoked
    key are refused before anything else (even a body that does not parse), and nothing is written."""
    app, keyed, fleet = api
    db = keyed.app.state.settlekit.db
    event = job_stream("settle_completed", "job_keyed", fleet, 0)[0]
    token = key_for(db, TENANT_A)
    key_id = token.split("_")[1]
    wrong_secret = client(app, f"sk_{key_id}_not-the-secret")
    unknown = client(app, "sk_0000000000000000_secret")
    for who in (wrong_secret, unknown):
        for body in (orjson.dumps(event), b"{not json"):
            r = who.post("/v1/jobs/job_keyed/events", content=body)
            assert r.status_code == 401 and r.json()["code"] == "API_KEY_INVALID", r.text
    own = client(app, token)
    assert own.post("/v1/jobs/job_keyed/events", content=b"{not json").json()["code"] == "JSON_INVALID"
    revoke_api_key(db, key_id)
    r = own.post("/v1/jobs/job_keyed/events", content=orjson.dumps(event))
    assert r.status_code == 401 and r.json()["code"] == "API_KEY_INVALID"
    assert keyed.get("/v1/jobs/job_keyed/export").status_code == 404


def test_a_signer_key_revoked_between_appends_is_refused_at_once(api: Any) -> None:
    """The signer keys read with the API key are the current ones: after a revocation the next event signed by
    that key is refused (SIGNER_KEY_NOT_ACTIVE) and not stored."""
    app, keyed, fleet = api
    events = job_stream("settle_completed", "job_signer", fleet, 0)
    signed = [i for i, e in enumerate(events) if e.get("signature") and e["actor"]["type"] in ("robot", "operator")]
    first = signed[0]
    for event in events[:first]:
        assert keyed.post("/v1/jobs/job_signer/events", json=event).status_code == 201
    signer = events[first]["signerKeyId"]
    assert keyed.post(f"/v1/keys/{signer}/revoke").status_code == 200
    r = keyed.post("/v1/jobs/job_signer/events", json=events[first])
    assert r.json()["code"] == "SIGNER_KEY_NOT_ACTIVE", r.text
    assert len(keyed.get("/v1/jobs/job_signer/export").json()) == first


def test_the_stream_is_read_in_the_keys_tenant(api: Any) -> None:
    """Two tenants appending to the same job id each get their own stream: the stream read with the key is the
    key's tenant's (here tenant B's JOB_CREATED names tenant B and starts at seq 1 beside tenant A's job)."""
    app, keyed, fleet = api
    db = keyed.app.state.settlekit.db
    a_events = job_stream("settle_completed", "job_shared_id", fleet, 0)
    assert keyed.post("/v1/jobs/job_shared_id/events", json=a_events[0]).status_code == 201
    other = client(app, key_for(db, "tenant_b"))
    for registration in fleet.registrations():
        body = {k: v for k, v in registration.items() if k != "keyId"}
        assert other.post("/v1/keys", json=body).status_code == 201
    b_events = job_stream("settle_completed", "job_shared_id", fleet, 1, tenant_id="tenant_b")
    r = other.post("/v1/jobs/job_shared_id/events", json=b_events[0])
    assert r.status_code == 201 and r.json()["firstSeq"] == 1, r.text
    r = other.post("/v1/jobs/job_shared_id/events", json=a_events[1])  # links to tenant A's head: not B's
    assert r.status_code == 409 and r.json()["code"] == "PREV_CHAIN_HASH_MISMATCH"
    assert keyed.post("/v1/jobs/job_shared_id/events", json=a_events[1]).status_code == 201
