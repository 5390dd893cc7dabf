"""Job routes on both backends: a vector's lifecycle through the API, server drafts with the precondition
header, bad input leaves nothing stored, idempotent replays, listing and paging."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import load_vector
from settlekit.events.canonical import canonical_hash
from settlekit.events.envelope import Signer, finalize
from settlekit.jobs.api_payloads import api_payload_error
from settlekit.store.db import Database
from settlekit.store.idempotency import request_hash
from support.api import TENANT_A, client, key_for, make_app, tenant_rows

ACTOR = {"type": "system", "id": "ops"}
QUOTE = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p1"},
         "payload": {"amountCents": 6500, "currency": "USD"}}


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any]]:
    app = make_app(db, max_body_bytes=64 * 1024)
    yield db, client(app, key_for(db, TENANT_A))


@pytest.mark.parametrize("name", ["settle_completed.json", "claim_adjust_paid.json"])
def test_vector_lifecycle_through_api(env: tuple[Database, Any], name: str) -> None:
    db, api = env
    vector = load_vector(name)
    for signer in vector["signers"]:
        r = api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"], "purpose": signer["role"]})
        assert r.status_code == 201 and r.json()["keyId"] == signer["keyId"], r.text
    job_id = vector["events"][0]["streamId"]
    for event in vector["events"]:
        r = api.post(f"/v1/jobs/{job_id}/events", json=event)
        assert r.status_code == 201, r.text
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["job"] == vector["job"]
    assert job["headChainHash"] == vector["events"][-1]["chainHash"] and job["version"] == len(vector["events"])
    assert api.get(f"/v1/jobs/{job_id}/export").json() == vector["events"]
    assert api.get(f"/v1/jobs/{job_id}/events").json()["events"] == vector["events"]
    through = vector["events"][3]["chainHash"]
    assert api.get(f"/v1/jobs/{job_id}/events", params={"throughChainHash": through}).json()["events"] == \
        vector["events"][:4]
    r = api.get(f"/v1/jobs/{job_id}/export", params={"throughChainHash": "0" * 64})
    assert r.status_code == 404 and r.json()["code"] == "ATCHAINHASH_NOT_FOUND"
    assert api.get(f"/v1/jobs/{job_id}/ledger/entries").json()["entries"] == vector["ledgerEntries"]
    assert api.get(f"/v1/jobs/{job_id}/ledger/allocations").json()["allocations"] == vector["allocations"]
    balances = api.get("/v1/ledger/balances").json()
    assert balances["balances"] == vector["ledgerTotalsByAccountId"] and balances["totalCents"] == 0
    # replaying a stored client event is acknowledged without appending
    r = api.post(f"/v1/jobs/{job_id}/events", json=vector["events"][-1])
    assert r.status_code == 200 and r.json()["alreadyExists"] is True
    assert api.get(f"/v1/jobs/{job_id}").json()["version"] == len(vector["events"])


def _with_vector_keys(api: Any, name: str) -> tuple[dict[str, Any], str]:
    """The vector, its signer keys registered for the tenant, and its job's events path."""
    vector = load_vector(name)
    for signer in vector["signers"]:
        api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"], "purpose": signer["role"]})
    return vector, f"/v1/jobs/{vector['events'][0]['streamId']}/events"


def test_client_finalized_events_honour_the_expected_head_header(env: tuple[Database, Any]) -> None:
    """settlekit's x-expected-prev-chain-hash, when given with client-finalized events, must be the head too;
    settld's x-proxy- name is ignored there, as settld ignores it."""
    db, api = env
    vector, path = _with_vector_keys(api, "settle_completed.json")
    events = vector["events"]
    for event in events[:3]:
        assert api.post(path, json=event).status_code == 201
    head = events[2]["chainHash"]
    for wrong in ("ab" * 32, "null"):
        r = api.post(path, json=events[3], headers={"x-expected-prev-chain-hash": wrong})
        assert r.status_code == 409 and r.json()["code"] == "PREV_CHAIN_HASH_MISMATCH", r.text
        assert r.json()["details"] == {"expectedPrevChainHash": None if wrong == "null" else wrong,
                                       "currentPrevChainHash": head}
    assert api.get(path.removesuffix("/events")).json()["version"] == 3
    r = api.post(path, json=events[3], headers={"x-proxy-expected-prev-chain-hash": "ab" * 32})
    assert r.status_code == 201, r.text
    r = api.post(path, json=events[4], headers={"x-expected-prev-chain-hash": events[3]["chainHash"]})
    assert r.status_code == 201, r.text
    # a replay of stored events names their old head: still acknowledged
    r = api.post(path, json=events[4], headers={"x-expected-prev-chain-hash": events[3]["chainHash"]})
    assert r.status_code == 200 and r.json()["alreadyExists"] is True
    # the header is not part of an idempotent request's identity with finalized events: a retry that adds it
    # (the spool's flusher sends it) is the same request
    r = api.post(path, json=events[5], headers={"Idempotency-Key": "k-finalized"})
    assert r.status_code == 201, r.text
    _assert_replayed_with_header(api, path, events[5], "k-finalized", events[4]["chainHash"], r.json(), version=6)


def _assert_replayed_with_header(api: Any, path: str, event: dict[str, Any], key: str, head: str,
                                 answer: Any, *, version: int) -> None:
    """A retry of `event` under `key` that sends the expected-head header replays `answer`; nothing is added."""
    again = api.post(path, json=event, headers={"Idempotency-Key": key, "x-expected-prev-chain-hash": head})
    assert again.status_code == 201 and again.headers.get("idempotent-replayed") == "true", again.text
    assert again.json() == answer
    assert api.get(path.removesuffix("/events")).json()["version"] == version


def test_a_key_stored_with_the_header_in_its_hash_still_replays(env: tuple[Database, Any]) -> None:
    """Keys recorded while the expected-head header was part of a finalized request's hash still replay a retry
    that sends the header."""
    db, api = env
    vector, path = _with_vector_keys(api, "settle_completed.json")
    events = vector["events"]
    assert api.post(path, json=events[0]).status_code == 201
    first = api.post(path, json=events[1], headers={"Idempotency-Key": "k-old"})
    assert first.status_code == 201, first.text
    earlier = request_hash("POST", path, events[1], events[0]["chainHash"])
    with db.transaction() as tx:
        tx.execute("UPDATE idempotency_keys SET request_hash = ? WHERE idem_key = ?", (earlier, "k-old"))
    _assert_replayed_with_header(api, path, events[1], "k-old", events[0]["chainHash"], first.json(), version=2)


def test_an_unsigned_server_signed_event_is_refused_and_its_draft_is_signed(env: tuple[Database, Any]) -> None:
    """settld's API refuses a client-finalized event of a server-signed type without a signature ("server-signed
    events require signature"); settlekit too, with nothing written. The same content as a server draft is
    accepted and stored with the server's signature."""
    db, api = env
    vector, path = _with_vector_keys(api, "settle_completed.json")
    events = vector["events"]
    assert api.post(path, json=events[0]).status_code == 201
    before = tenant_rows(db, TENANT_A)
    unsigned = dict(events[1], signature=None, signerKeyId=None)  # the chain does not cover the signature
    assert unsigned["type"] == "QUOTE_PROPOSED"
    r = api.post(path, json=unsigned)
    assert r.status_code == 400 and r.json()["code"] == "SIGNER_POLICY_VIOLATION", r.text
    assert r.json()["details"]["requiredSigner"] == "server" and "server draft" in r.json()["detail"]
    assert tenant_rows(db, TENANT_A) == before
    draft = {k: events[1][k] for k in ("id", "type", "actor", "payload", "at")}
    r = api.post(path, json=draft, headers={"x-expected-prev-chain-hash": events[0]["chainHash"]})
    assert r.status_code == 201, r.text
    stored = api.get(path).json()["events"][1]
    assert stored["payloadHash"] == events[1]["payloadHash"] and stored["signature"] is not None
    assert stored["signerKeyId"] not in {s["keyId"] for s in vector["signers"]}


def test_a_payload_settlds_validators_refuse_is_refused_with_their_message(env: tuple[Database, Any]) -> None:
    """A signed client-finalized JOB_HEARTBEAT with a field settld's validator does not know: 400 SCHEMA_INVALID,
    settld's message, nothing written; the event as recorded is then accepted."""
    db, api = env
    vector, path = _with_vector_keys(api, "settle_completed.json")
    events = vector["events"]
    for event in events[:9]:
        assert api.post(path, json=event).status_code == 201
    robot = next(s for s in vector["signers"] if s["role"] == "robot")
    original = events[9]
    assert original["type"] == "JOB_HEARTBEAT"
    draft = {k: original[k] for k in ("v", "id", "at", "streamId", "type", "actor")}
    changed = finalize({**draft, "payload": {**original["payload"], "battery": 80}}, original["prevChainHash"],
                       Signer.from_pem(robot["privateKeyPem"], robot["publicKeyPem"]))
    before = tenant_rows(db, TENANT_A)
    r = api.post(path, json=changed)
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    assert r.json()["detail"] == "payload contains unknown field: battery"
    assert r.json()["details"] == {"eventType": "JOB_HEARTBEAT", "rule": "settld-api-validator"}
    assert tenant_rows(db, TENANT_A) == before
    assert api.post(path, json=original).status_code == 201


def test_a_booked_draft_gets_its_policy_snapshot_and_hash(env: tuple[Database, Any]) -> None:
    """settld accepts BOOKED only with policySnapshot and policyHash (its booking route computes them); a BOOKED
    server draft without them is completed with settld's default credit and evidence policies."""
    db, api = env
    created = api.post("/v1/jobs", json={"jobId": "job_book", "payload": {"templateId": "t"}}).json()
    path = "/v1/jobs/job_book/events"
    head = api.post(path, json=QUOTE, headers={"x-expected-prev-chain-hash": created["headChainHash"]}).json()
    booked = load_vector("settle_completed.json")["events"][2]["payload"]
    lean = {k: v for k, v in booked.items()
            if k not in ("policySnapshot", "policyHash", "creditPolicy", "evidencePolicy")}
    r = api.post(path, json={"type": "BOOKED", "actor": ACTOR, "payload": lean},
                 headers={"x-expected-prev-chain-hash": head["headChainHash"]})
    assert r.status_code == 201, r.text
    stored = api.get(path).json()["events"][-1]["payload"]
    assert stored["creditPolicy"] == {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0,
                                      "currency": "USD"}
    assert stored["evidencePolicy"] == {"retentionDays": 0}
    assert stored["policyHash"] == canonical_hash(stored["policySnapshot"])
    assert api_payload_error("BOOKED", stored) is None


def test_server_draft_precondition(env: tuple[Database, Any]) -> None:
    db, api = env
    r = api.post("/v1/jobs", json={"payload": {"templateId": "reset_lite", "constraints": {}}})
    assert r.status_code == 201, r.text
    body = r.json()
    job_id, head = body["jobId"], body["headChainHash"]
    assert job_id.startswith("job_") and body["job"]["status"] == "CREATED"
    assert body["events"][0]["payload"]["tenantId"] == TENANT_A
    path = f"/v1/jobs/{job_id}/events"
    r = api.post(path, json=QUOTE)
    assert r.status_code == 428 and r.json()["code"] == "PRECONDITION_REQUIRED"
    r = api.post(path, json=QUOTE, headers={"x-expected-prev-chain-hash": "null"})
    assert r.status_code == 409 and r.json()["code"] == "PREV_CHAIN_HASH_MISMATCH"
    assert r.json()["details"]["currentPrevChainHash"] == head
    r = api.post(path, json=QUOTE, headers={"x-proxy-expected-prev-chain-hash": head})
    assert r.status_code == 201 and r.json()["job"]["status"] == "QUOTED", r.text
    stale = api.post(path, json=QUOTE, headers={"x-expected-prev-chain-hash": head})
    assert stale.status_code == 409 and stale.json()["code"] == "PREV_CHAIN_HASH_MISMATCH"
    # a new job by id, with an empty header meaning "stream must be empty"
    r = api.post("/v1/jobs/job_given/events", json={"type": "JOB_CREATED", "actor": ACTOR,
                                                     "payload": {"templateId": "t"}},
                 headers={"x-expected-prev-chain-hash": ""})
    assert r.status_code == 201, r.text
    r = api.post("/v1/jobs", json={"jobId": "job_given", "payload": {"templateId": "t"}})
    assert r.status_code == 409 and r.json()["code"] == "JOB_ALREADY_EXISTS"


def _bad_requests(head: str) -> list[tuple[dict[str, Any], int, str]]:
    h = {"x-expected-prev-chain-hash": head}
    return [
        ({"content": b"{not json", "headers": h}, 400, "JSON_INVALID"),
        ({"content": b'{"type": NaN}', "headers": h}, 400, "JSON_INVALID"),
        ({"json": {**QUOTE, "extra": 1}, "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": {**QUOTE, "actor": {"type": "x", "id": "y", "z": 1}}, "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": {**QUOTE, "type": 5}, "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": [], "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": "a string", "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": {**QUOTE, "type": "NOT_A_TYPE"}, "headers": h}, 400, "EVENT_TYPE_UNKNOWN"),
        ({"json": {**QUOTE, "payload": {"amountCents": "lots", "currency": "USD"}}, "headers": h}, 400, ""),
        # settld's payload validators and domain rules run before the transition check
        ({"json": {"type": "BOOKED", "actor": ACTOR, "payload": {}}, "headers": h}, 400, "SCHEMA_INVALID"),
        ({"json": {"type": "MATCHED", "actor": ACTOR, "payload": {"robotId": "rob_1"}}, "headers": h}, 409,
         "BOOKING_MISSING"),
        ({"json": {"type": "EN_ROUTE", "actor": {"type": "robot", "id": "r"}, "payload": {}}, "headers": h},
         400, "SIGNER_POLICY_VIOLATION"),
        ({"json": {**QUOTE, "payload": {"blob": "x" * 70_000}}, "headers": h}, 413, "PAYLOAD_TOO_LARGE"),
        ({"json": QUOTE, "headers": {"x-expected-prev-chain-hash": "f" * 64}}, 409, "PREV_CHAIN_HASH_MISMATCH"),
    ]


def test_bad_input_stores_nothing(env: tuple[Database, Any]) -> None:
    db, api = env
    created = api.post("/v1/jobs", json={"jobId": "job_bad", "payload": {"templateId": "t"}}).json()
    before = tenant_rows(db, TENANT_A)
    for kwargs, status, code in _bad_requests(created["headChainHash"]):
        r = api.post("/v1/jobs/job_bad/events", **kwargs)
        assert r.status_code == status, (kwargs.get("json"), r.text)
        assert r.headers["content-type"] == "application/problem+json"
        if code:
            assert r.json()["code"] == code, r.text
        assert tenant_rows(db, TENANT_A) == before
    # create-job body checks: unknown field, wrong type, missing payload, foreign tenant, bad id
    for body, path in (({"payload": {}, "x": 1}, "body.x"), ({"payload": []}, "body.payload"),
                       ({}, "body.payload"), ({"jobId": "has space", "payload": {}}, "body.jobId")):
        r = api.post("/v1/jobs", json=body)
        assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
        assert r.json()["details"]["field"] == path
    r = api.post("/v1/jobs", json={"payload": {"templateId": "t", "tenantId": "tenant_other"}})
    assert r.status_code == 403 and r.json()["code"] == "JOB_TENANT_MISMATCH", r.text
    r = api.post("/v1/jobs/job_missing/events", json=QUOTE, headers={"x-expected-prev-chain-hash": "null"})
    assert r.status_code == 404 and r.json()["code"] == "JOB_NOT_FOUND"
    for path in ("/v1/jobs/job_missing", "/v1/jobs/job_missing/events", "/v1/jobs/job_missing/export",
                 "/v1/jobs/job_missing/ledger/entries", "/v1/jobs/job_missing/artifacts"):
        r = api.get(path)
        assert r.status_code == 404 and r.json()["code"] == "JOB_NOT_FOUND", path
    assert tenant_rows(db, TENANT_A) == before


def test_raw_body_limit(env: tuple[Database, Any]) -> None:
    db, api = env
    before = tenant_rows(db, TENANT_A)
    big = b'{"payload": {"templateId": "' + b"x" * 70_000 + b'"}}'
    r = api.post("/v1/jobs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert r.json()["details"]["limitBytes"] == 64 * 1024

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
        yield b'{"payload": {"templateId": "'
        for _ in range(20):
            yield b"y" * 5000
        yield b'"}}'

    r = api.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert tenant_rows(db, TENANT_A) == before


def test_idempotency_replay(env: tuple[Database, Any]) -> None:
    db, api = env
    body = {"payload": {"templateId": "reset_lite"}}
    first = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "create-1"})
    again = api.post("/v1/jobs", json=body, headers={"Idempotency-Key": "create-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert len(api.get("/v1/jobs").json()["jobs"]) == 1
    r = api.post("/v1/jobs", json={"payload": {"templateId": "other"}}, headers={"Idempotency-Key": "create-1"})
    assert r.status_code == 409 and r.json()["code"] == "IDEMPOTENCY_CONFLICT"
    job_id, head = first.json()["jobId"], first.json()["headChainHash"]
    h = {"x-idempotency-key": "q-1", "x-expected-prev-chain-hash": head}
    one = api.post(f"/v1/jobs/{job_id}/events", json=QUOTE, headers=h)
    two = api.post(f"/v1/jobs/{job_id}/events", json=QUOTE, headers=h)  # head moved on: still a replay
    assert one.status_code == two.status_code == 201 and one.json() == two.json()
    assert api.get(f"/v1/jobs/{job_id}").json()["version"] == 2
    # another key (principal) with the same idempotency key is a different scope
    other = client(api.app, key_for(db, TENANT_A, ["jobs:write", "jobs:read"]))
    r = other.post(f"/v1/jobs/{job_id}/events", json=QUOTE, headers=h)
    assert r.status_code == 409 and r.json()["code"] == "PREV_CHAIN_HASH_MISMATCH"
    # non-append writes replay too
    d = {"destinationId": "dst_1", "url": "http://127.0.0.1:9/h", "secretRef": "sec_" + "0" * 32}
    r1 = api.post("/v1/destinations", json=d, headers={"Idempotency-Key": "d1"})
    assert r1.status_code == 400 and r1.json()["code"] == "SECRET_NOT_FOUND"  # failures are not recorded
    from settlekit.delivery.signing import generate_secret

    d = {"destinationId": "dst_1", "url": "http://127.0.0.1:9/h", "secret": generate_secret()}
    r1 = api.post("/v1/destinations", json=d, headers={"Idempotency-Key": "d1"})
    r2 = api.post("/v1/destinations", json=d, headers={"Idempotency-Key": "d1"})
    assert r1.status_code == r2.status_code == 201 and r1.json() == r2.json()
    assert r2.headers["idempotent-replayed"] == "true"
    assert api.post("/v1/destinations", json=d).status_code == 409


def test_list_jobs_paging_and_status(env: tuple[Database, Any]) -> None:
    db, api = env
    heads = {}
    for n in range(7):
        r = api.post("/v1/jobs", json={"jobId": f"job_{n:02d}", "payload": {"templateId": "t"}})
        heads[f"job_{n:02d}"] = r.json()["headChainHash"]
    for job_id in ("job_01", "job_04", "job_05"):
        r = api.post(f"/v1/jobs/{job_id}/events", json=QUOTE, headers={"x-expected-prev-chain-hash": heads[job_id]})
        assert r.status_code == 201
    seen, cursor = [], None
    while True:
        page = api.get("/v1/jobs", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        seen += [j["jobId"] for j in page["jobs"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [f"job_{n:02d}" for n in range(7)]
    quoted = api.get("/v1/jobs", params={"status": "QUOTED", "limit": 2}).json()
    assert [j["jobId"] for j in quoted["jobs"]] == ["job_01", "job_04"] and quoted["nextCursor"]
    rest = api.get("/v1/jobs", params={"status": "QUOTED", "limit": 2, "cursor": quoted["nextCursor"]}).json()
    assert [j["jobId"] for j in rest["jobs"]] == ["job_05"] and rest["nextCursor"] is None
    assert api.get("/v1/jobs", params={"cursor": "%%%"}).json()["code"] == "CURSOR_INVALID"
    assert api.get("/v1/jobs", params={"limit": 0}).status_code == 400
