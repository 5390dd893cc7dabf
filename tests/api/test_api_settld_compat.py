"""settld's own clients (`/compat/settld`, api.settld_compat): settld's job routes, headers, answer shapes, status
codes and error shape over settlekit's append, on both backends. The live check with settld's SDKs under node is
tests/contract/test_settld_clients.py (opt-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from settlekit.events.envelope import Signer, finalize, make_draft, verify_chain
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, key_for, make_app

P = "/compat/settld"
ROBOT = {"type": "robot", "id": "rob_7"}
BACK_OFFICE = {"type": "system", "id": "backoffice"}


@pytest.fixture
def env(db: Database) -> Iterator[dict[str, Any]]:
    app = make_app(db)
    key = key_for(db, TENANT_A)
    api = client(app, key)
    api.headers["x-proxy-tenant-id"] = TENANT_A
    robot = Signer.generate()
    r = api.post("/v1/keys", json={"publicKeyPem": robot.public_key_pem, "purpose": "robot"})
    assert r.status_code == 201, r.text
    yield {"db": db, "app": app, "api": api, "key": key, "robot": robot,
           "server": app.state.settlekit.appender.server_signer}
    api.close()


def _window() -> tuple[str, str]:
    now = datetime.now(UTC)
    return tuple(f"{t.isoformat(timespec='milliseconds')[:-6]}Z"  # type: ignore[return-value]
                 for t in (now - timedelta(hours=1), now + timedelta(hours=8)))


def _create(api: Any, **headers: str) -> dict[str, Any]:
    r = api.post(f"{P}/jobs", json={"templateId": "reset_lite", "customerId": "cust_1", "siteId": "site_1",
                                    "constraints": {"zoneId": "zone_a"}}, headers=headers)
    assert r.status_code == 201, r.text
    job: dict[str, Any] = r.json()["job"]
    return job


def _draft(api: Any, job_id: str, type_: str, payload: Any, prev: str | None, **headers: str) -> Any:
    return api.post(f"{P}/jobs/{job_id}/events", json={"type": type_, "actor": BACK_OFFICE, "payload": payload},
                    headers={"x-proxy-expected-prev-chain-hash": prev if prev is not None else "null", **headers})


def _reserved(api: Any) -> dict[str, Any]:
    """A job through settld's routes up to RESERVED with an access plan (server drafts): its last answer's job."""
    job = _create(api)
    job_id = job["id"]
    start, end = _window()
    steps = [
        ("QUOTE_PROPOSED", {"amountCents": 6500, "currency": "USD",
                            "breakdown": {"coverageFeeCents": 0, "totalCents": 6500}}),
        ("BOOKED", {"startAt": start, "endAt": end, "environmentTier": "ENV_MANAGED_BUILDING",
                    "requiresOperatorCoverage": False, "zoneId": "zone_a", "customerId": "cust_1",
                    "siteId": "site_1", "sla": {"slaVersion": 1, "mustStartWithinWindow": True,
                                                "maxStallMs": 300000, "maxExecutionMs": 28800000},
                    "contractId": "contract_default", "contractVersion": 1}),
        ("MATCHED", {"robotId": "rob_7"}),
        ("RESERVED", {"robotId": "rob_7", "startAt": start, "endAt": end, "reservationId": f"rsv_{job_id}"}),
        ("ACCESS_PLAN_ISSUED", {"jobId": job_id, "accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE",
                                "credentialRef": "vault://ap_1", "scope": {"areas": ["lobby"], "noGo": []},
                                "validFrom": start, "validTo": end, "revocable": True, "requestedBy": "system"}),
    ]
    for type_, payload in steps:
        r = _draft(api, job_id, type_, payload, job["lastChainHash"])
        assert r.status_code == 201, r.text
        job = r.json()["job"]
    return job


def _signed(job: dict[str, Any], type_: str, payload: Any, robot: Signer) -> dict[str, Any]:
    draft = make_draft(stream_id=job["id"], type=type_, actor=ROBOT, payload=payload)
    return finalize(draft, job["lastChainHash"], robot)


def test_a_job_created_booked_and_completed_through_settlds_routes(env: dict[str, Any]) -> None:
    api, robot = env["api"], env["robot"]
    job = _reserved(api)
    job_id = job["id"]
    assert job_id.startswith("job_") and job["status"] == "RESERVED"
    for type_, payload in [("EN_ROUTE", {"etaSeconds": 600}),
                           ("ACCESS_GRANTED", {"jobId": job_id, "accessPlanId": "ap_1",
                                               "method": "BUILDING_CONCIERGE"}),
                           ("EXECUTION_STARTED", {"stage": "TASK"}),
                           ("EXECUTION_COMPLETED", {"report": {"tasksCompleted": 1}})]:
        event = _signed(job, type_, payload, robot)
        r = api.post(f"{P}/jobs/{job_id}/events", json=event,
                     headers={"x-idempotency-key": f"cli:{event['id']}:{job['lastChainHash'][:16]}"})
        assert r.status_code == 201, r.text
        body = r.json()
        assert set(body) == {"event", "job", "ledgerEntryId", "ledgerEntryIds"}
        assert body["event"] == event  # stored as the client finalized it
        job = body["job"]
        assert job["lastChainHash"] == event["chainHash"] and job["lastEventId"] == event["id"]
    assert job["status"] == "COMPLETED"

    r = api.post(f"{P}/jobs/{job_id}/events", json={"type": "SETTLED", "actor": BACK_OFFICE, "payload": None},
                 headers={"x-proxy-expected-prev-chain-hash": job["lastChainHash"]})
    assert r.status_code == 201, r.text
    settled = r.json()
    assert settled["job"]["status"] == "SETTLED"
    assert settled["ledgerEntryIds"] and settled["ledgerEntryId"] == settled["ledgerEntryIds"][0]
    assert settled["ledgerEntryId"] == f"jnl_{settled['event']['id']}"

    got = api.get(f"{P}/jobs/{job_id}")
    assert got.status_code == 200 and got.json() == {"job": settled["job"]}
    assert got.headers["x-settld-protocol"] == "1.0" and got.headers["x-settld-supported-protocols"] == "1.0"
    events = api.get(f"{P}/jobs/{job_id}/events").json()["events"]
    assert events == api.get(f"/v1/jobs/{job_id}/export").json()
    verify_chain(events, {robot.key_id: robot.public_key_pem, env["server"].key_id: env["server"].public_key_pem})
    created = events[0]
    assert created["actor"] == {"type": "system", "id": "proxy"}
    assert created["payload"] == {"tenantId": TENANT_A, "customerId": "cust_1", "siteId": "site_1",
                                  "contractId": None, "templateId": "reset_lite", "constraints": {"zoneId": "zone_a"}}



def _error(r: Any, status: int, error: str, code: str) -> Any:
    """settld's error shape: `{error, code, details}` as JSON (not problem+json), the request id kept."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert r.headers["x-request-id"] and r.headers["x-settld-protocol"] == "1.0"
    body = r.json()
    assert set(body) - {"details"} == {"error", "code"} and (body["error"], body["code"]) == (error, code), body
    return body.get("details", "left out")


def test_chain_conflicts_answer_settlds_409(env: dict[str, Any]) -> None:
    """The executor SDK rebases on exactly 409 `event append conflict`: a finalized event on a stale head and a
    draft with a stale x-proxy-expected-prev-chain-hash get it, with settld's details."""
    api, robot = env["api"], env["robot"]
    job = _reserved(api)
    head = job["lastChainHash"]
    stale = _signed(dict(job, lastChainHash="0" * 64), "EN_ROUTE", {"etaSeconds": 1}, robot)
    details = _error(api.post(f"{P}/jobs/{job['id']}/events", json=stale), 409, "event append conflict",
                     "PREV_CHAIN_HASH_MISMATCH")
    assert details == {"expectedPrevChainHash": head, "gotPrevChainHash": "0" * 64}
    details = _error(_draft(api, job["id"], "QUOTE_PROPOSED", {}, "1" * 64), 409, "event append conflict",
                     "PREV_CHAIN_HASH_MISMATCH")
    assert details == {"expectedPrevChainHash": head, "gotExpectedPrevChainHash": "1" * 64}
    # a finalized event's own prevChainHash is its precondition: settld ignores the header there
    event = _signed(job, "EN_ROUTE", {"etaSeconds": 1}, robot)
    r = api.post(f"{P}/jobs/{job['id']}/events", json=event, headers={"x-proxy-expected-prev-chain-hash": "2" * 64})
    assert r.status_code == 201, r.text


def test_a_draft_needs_the_precondition_header(env: dict[str, Any]) -> None:
    api = env["api"]
    job = _create(api)
    r = api.post(f"{P}/jobs/{job['id']}/events", json={"type": "QUOTE_PROPOSED", "actor": BACK_OFFICE,
                                                       "payload": {"amountCents": 1, "currency": "USD"}})
    assert _error(r, 428, "missing precondition", "MISSING_PRECONDITION") == \
        "x-proxy-expected-prev-chain-hash is required"


def test_idempotency_key_replays_the_first_answer(env: dict[str, Any]) -> None:
    api, robot = env["api"], env["robot"]
    job = _reserved(api)
    event = _signed(job, "EN_ROUTE", {"etaSeconds": 600}, robot)
    headers = {"x-idempotency-key": f"cli:{event['id']}:{job['lastChainHash'][:16]}"}
    first = api.post(f"{P}/jobs/{job['id']}/events", json=event, headers=headers)
    again = api.post(f"{P}/jobs/{job['id']}/events", json=event, headers=headers)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    other = _signed(job, "EN_ROUTE", {"etaSeconds": 5}, robot)
    details = _error(api.post(f"{P}/jobs/{job['id']}/events", json=other, headers=headers), 409,
                     "idempotency key conflict", "IDEMPOTENCY_CONFLICT")
    assert details == "request differs from initial use of this key"
    # POST /jobs with a key: the one job, whatever id a retry would have drawn
    created = [api.post(f"{P}/jobs", json={"templateId": "reset_lite"}, headers={"x-idempotency-key": "job-1"})
               for _ in range(2)]
    assert [c.status_code for c in created] == [201, 201] and created[0].json() == created[1].json()
    # the same signed event sent again without a key is already there: 200 with the stored event
    resent = api.post(f"{P}/jobs/{job['id']}/events", json=event)
    assert resent.status_code == 200, resent.text
    assert resent.json()["event"] == event


def test_tenant_header_must_be_the_keys_tenant(env: dict[str, Any]) -> None:
    db, app, api = env["db"], env["app"], env["api"]
    job = _create(api)
    assert _error(api.get(f"{P}/jobs/{job['id']}", headers={"x-proxy-tenant-id": TENANT_B}), 403, "forbidden",
                  "FORBIDDEN") is None
    # absent or blank: settld's default tenant, which this key belongs to
    bare = client(app, env["key"])
    assert bare.get(f"{P}/jobs/{job['id']}").status_code == 200
    assert bare.get(f"{P}/jobs/{job['id']}", headers={"x-proxy-tenant-id": " "}).status_code == 200
    other = client(app, key_for(db, TENANT_B))
    _error(other.get(f"{P}/jobs/{job['id']}"), 403, "forbidden", "FORBIDDEN")
    _error(other.get(f"{P}/jobs/{job['id']}", headers={"x-proxy-tenant-id": TENANT_B}), 404, "job not found",
           "NOT_FOUND")
    details = _error(other.post(f"{P}/jobs", json={"templateId": "t"}, headers={"x-proxy-tenant-id": "x" * 201}),
                     400, "invalid tenant", "SCHEMA_INVALID")
    assert details == {"message": "tenantId must be at most 200 characters without newlines"}
    r = other.post(f"{P}/jobs", json={"templateId": "t"}, headers={"x-proxy-tenant-id": f" {TENANT_B} "})
    assert r.status_code == 201 and r.json()["job"]["tenantId"] == TENANT_B, r.text


def test_keys_and_scopes_refused_as_settld_does(env: dict[str, Any]) -> None:
    db, app, api = env["db"], env["app"], env["api"]
    job = _create(api)
    for headers in ({}, {"authorization": "Bearer sk_0123456789abcdef_nope"}, {"authorization": "Basic x"}):
        r = client(app).get(f"{P}/jobs/{job['id']}", headers=headers)
        _error(r, 403, "forbidden", "FORBIDDEN")
        assert "www-authenticate" not in r.headers
    reader = client(app, key_for(db, TENANT_A, ["jobs:read"]))
    assert reader.get(f"{P}/jobs/{job['id']}").status_code == 200
    _error(reader.post(f"{P}/jobs", json={"templateId": "t"}), 403, "forbidden", "FORBIDDEN")
    # SETTLED moves money: jobs:write alone is not enough
    writer = client(app, key_for(db, TENANT_A, ["jobs:read", "jobs:write"]))
    r = writer.post(f"{P}/jobs/{job['id']}/events", json={"type": "SETTLED", "actor": BACK_OFFICE, "payload": None},
                    headers={"x-proxy-expected-prev-chain-hash": job["lastChainHash"]})
    _error(r, 403, "forbidden", "FORBIDDEN")


def test_refusals_in_settlds_shape(env: dict[str, Any]) -> None:
    api, robot = env["api"], env["robot"]
    # settld's bodies leave `details` out here
    assert api.get(f"{P}/jobs/job_missing").json() == {"error": "job not found", "code": "NOT_FOUND"}
    _error(api.get(f"{P}/jobs/job_missing/events"), 404, "job not found", "NOT_FOUND")
    assert api.post(f"{P}/jobs", json={}).json() == {"error": "templateId is required", "code": "SCHEMA_INVALID"}
    # settld appends to existing jobs only: JOB_CREATED comes from POST /jobs
    r = _draft(api, "job_new", "JOB_CREATED", {"templateId": "t"}, None)
    _error(r, 404, "job not found", "NOT_FOUND")
    _error(api.post(f"{P}/jobs", json={"customerId": "c"}), 400, "templateId is required", "SCHEMA_INVALID")
    _error(api.post(f"{P}/jobs"), 400, "templateId is required", "SCHEMA_INVALID")
    job = _reserved(api)
    jid = job["id"]
    _error(api.post(f"{P}/jobs/{jid}/events", json={"actor": BACK_OFFICE}), 400, "type is required",
           "SCHEMA_INVALID")
    assert _error(api.post(f"{P}/jobs/{jid}/events", content=b"{", headers={"content-type": "application/json"}),
                  400, "invalid JSON body", "SCHEMA_INVALID") == "left out"
    early = _signed(job, "EXECUTION_COMPLETED", {}, robot)
    details = _error(api.post(f"{P}/jobs/{jid}/events", json=early), 400, "job transition rejected",
                     "TRANSITION_ILLEGAL")
    assert details["fromStatus"] == "RESERVED" and details["eventType"] == "EXECUTION_COMPLETED"
    forged = _signed(job, "EN_ROUTE", {"etaSeconds": 1}, robot)
    forged["signature"] = Signer.generate().sign_payload_hash(forged["payloadHash"])
    # settld's details: a sentence naming the event's index in the stream (six events are stored)
    assert _error(api.post(f"{P}/jobs/{jid}/events", json=forged), 400, "event chain verification failed",
                  "SIG_INVALID") == "signature invalid at index 6"
    unknown = _signed(job, "EN_ROUTE", {"etaSeconds": 1}, Signer.generate())
    assert _error(api.post(f"{P}/jobs/{jid}/events", json=unknown), 400, "event chain verification failed",
                  "SIGNER_UNKNOWN") == "unknown signerKeyId at index 6"
    tampered = dict(_signed(job, "EN_ROUTE", {"etaSeconds": 1}, robot), payload={"etaSeconds": 2})
    assert _error(api.post(f"{P}/jobs/{jid}/events", json=tampered), 400, "event chain verification failed",
                  "CHAIN_BREAK") == "payloadHash mismatch at index 6"
    r = api.post(f"{P}/jobs/{jid}/events", json={"type": "EN_ROUTE", "actor": ROBOT, "payload": None},
                 headers={"x-proxy-expected-prev-chain-hash": job["lastChainHash"]})
    _error(r, 400, "signature policy rejected", "SIGNATURE_POLICY")
    # nothing of it was appended
    assert api.get(f"{P}/jobs/{jid}").json()["job"] == job


def test_a_body_over_the_limit(db: Database) -> None:
    app = make_app(db, max_body_bytes=64)
    api = client(app, key_for(db, TENANT_A))
    r = api.post(f"{P}/jobs", json={"templateId": "x" * 100})
    assert _error(r, 413, "request body too large", "BODY_TOO_LARGE") == "left out"


def test_at_the_root_only_when_asked(db: Database) -> None:
    """settld's API SDK resolves `/jobs` against the origin: `settld_compat_at_root` serves the routes there too."""
    key = key_for(db, TENANT_A)
    plain = client(make_app(db), key)
    r = plain.post("/jobs", json={"templateId": "reset_lite"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
    rooted = client(make_app(db, settld_compat_at_root=True), key)
    created = rooted.post("/jobs", json={"templateId": "reset_lite"})
    assert created.status_code == 201, created.text
    job_id = created.json()["job"]["id"]
    assert rooted.get(f"/jobs/{job_id}").json() == rooted.get(f"{P}/jobs/{job_id}").json()
    _error(rooted.get("/jobs/job_missing"), 404, "job not found", "NOT_FOUND")
    # one resource under either path: an idempotency key used at the root replays under the prefix
    head = created.json()["job"]["lastChainHash"]
    quote = {"type": "QUOTE_PROPOSED", "actor": BACK_OFFICE,
             "payload": {"amountCents": 6500, "currency": "USD", "breakdown": {"coverageFeeCents": 0,
                                                                               "totalCents": 6500}}}
    headers = {"x-proxy-expected-prev-chain-hash": head, "x-idempotency-key": "quote-1"}
    first = rooted.post(f"/jobs/{job_id}/events", json=quote, headers=headers)
    again = rooted.post(f"{P}/jobs/{job_id}/events", json=quote, headers=headers)
    assert first.status_code == again.status_code == 201 and first.json() == again.json(), again.text
    assert rooted.get(f"/v1/jobs/{job_id}").status_code == 200  # settlekit's own routes unchanged


def test_not_in_the_openapi_document(db: Database) -> None:
    paths = client(make_app(db)).get("/openapi.json").json()["paths"]
    assert paths and not [p for p in paths if not p.startswith("/v1/") and "jobs" in p]
    assert not [p for p in paths if p.startswith(P)]


def test_rate_limit_and_metrics_as_on_v1(db: Database) -> None:
    """The key's token bucket and the append metrics are the API's own: a 429 in settld's shape keeps Retry-After,
    and appends through settld's routes are counted by outcome."""
    registry = CollectorRegistry()
    app = make_app(db, rate_limit_per_second=0.01, rate_limit_burst=2, registry=registry)
    api = client(app, key_for(db, TENANT_A))
    assert api.post(f"{P}/jobs", json={"templateId": "reset_lite"}).status_code == 201
    assert registry.get_sample_value("settlekit_append_total", {"outcome": "created"}) == 1
    assert api.post(f"{P}/jobs", json={}).status_code == 400
    assert registry.get_sample_value("settlekit_append_total", {"outcome": "refused"}) == 1
    r = api.get(f"{P}/jobs/job_missing")
    assert _error(r, 429, "rate limit exceeded", "RATE_LIMITED") is None
    assert int(r.headers["retry-after"]) > 0


def test_an_unexpected_failure_is_settlds_500(env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from settlekit.application import ledger

    def broken(*args: Any) -> list[str]:
        raise RuntimeError("disk on fire")

    job = _create(env["api"])
    monkeypatch.setattr(ledger, "entry_ids_for_event", broken)
    api = client(env["app"], env["key"], raise_server_exceptions=False)
    r = _draft(api, job["id"], "QUOTE_PROPOSED", {"amountCents": 6500, "currency": "USD",
                                                  "breakdown": {"coverageFeeCents": 0, "totalCents": 6500}},
               job["lastChainHash"])
    details = _error(r, 500, "internal error", "INTERNAL")
    assert "disk on fire" not in r.text and details == {"message": "internal server error"}


def _exact(value: Any) -> bytes:
    return orjson.dumps(value)


def test_answers_byte_for_byte(env: dict[str, Any]) -> None:
    """settld's SDKs parse these answers: their exact bytes (key order, nulls, the event as stored) for a job's
    creation, an append (201), its idempotent replay and the same event sent again (200), and the two reads."""
    api, robot = env["api"], env["robot"]

    def job_now(job_id: str) -> Any:
        return json.loads(api.get(f"/v1/jobs/{job_id}").content)["job"]

    def stored(job_id: str) -> list[Any]:
        return list(json.loads(api.get(f"/v1/jobs/{job_id}/export").content))

    created = [api.post(f"{P}/jobs", json={"templateId": "reset_lite", "constraints": None},
                        headers={"x-idempotency-key": "job-bytes"}) for _ in range(2)]
    job = created[0].json()["job"]
    assert [c.status_code for c in created] == [201, 201]
    assert created[0].headers["content-type"] == "application/json"
    expected = b'{"job":' + _exact(job_now(job["id"])) + b"}"
    assert created[0].content == created[1].content == expected
    assert json.loads(created[0].content)["job"]["customerId"] is None  # nulls stay

    job = _reserved(api)
    job_id = job["id"]
    # a payload number as the client signed it (a fraction and an integer beyond 32 bits stay as they were)
    event = _signed(job, "EN_ROUTE", {"etaSeconds": 600, "note": {"ratio": 0.5, "big": 2**40}}, robot)
    headers = {"x-idempotency-key": f"cli:{event['id']}"}
    first = api.post(f"{P}/jobs/{job_id}/events", json=event, headers=headers)
    assert first.status_code == 201, first.text
    assert stored(job_id)[-1] == event
    expected = (b'{"event":' + _exact(event) + b',"job":' + _exact(job_now(job_id))
                + b',"ledgerEntryId":null,"ledgerEntryIds":[]}')
    assert first.content == expected
    again = api.post(f"{P}/jobs/{job_id}/events", json=event, headers=headers)
    assert again.status_code == 201 and again.content == expected
    # sent again without the key: already stored, 200 with the stored event (and, as today, no job state)
    resent = api.post(f"{P}/jobs/{job_id}/events", json=event)
    assert resent.status_code == 200
    assert resent.content == b'{"event":' + _exact(event) + b',"job":null,"ledgerEntryId":null,"ledgerEntryIds":[]}'

    # an event that posts ledger entries names them, the first one alone too
    head = job_now(job_id)["lastChainHash"]
    for type_, payload in [("ACCESS_GRANTED", {"jobId": job_id, "accessPlanId": "ap_1",
                                               "method": "BUILDING_CONCIERGE"}),
                           ("EXECUTION_STARTED", {"stage": "TASK"}),
                           ("EXECUTION_COMPLETED", {"report": {"tasksCompleted": 1}})]:
        step = _signed(dict(job, lastChainHash=head), type_, payload, robot)
        assert api.post(f"{P}/jobs/{job_id}/events", json=step).status_code == 201
        head = step["chainHash"]
    settled = _draft(api, job_id, "SETTLED", None, head)
    assert settled.status_code == 201, settled.text
    entry_ids = settled.json()["ledgerEntryIds"]
    assert entry_ids
    # a server draft's event as the append made it (the store keeps its canonical form: the same members)
    event = json.loads(settled.content)["event"]
    assert event == stored(job_id)[-1]
    expected = (b'{"event":' + _exact(event) + b',"job":' + _exact(job_now(job_id))
                + b',"ledgerEntryId":' + _exact(entry_ids[0]) + b',"ledgerEntryIds":' + _exact(entry_ids) + b"}")
    assert settled.content == expected

    got = api.get(f"{P}/jobs/{job_id}")
    assert got.status_code == 200 and got.content == b'{"job":' + _exact(job_now(job_id)) + b"}"
    events = api.get(f"{P}/jobs/{job_id}/events")
    assert events.status_code == 200 and events.content == b'{"events":' + _exact(stored(job_id)) + b"}"
