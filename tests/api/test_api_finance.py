"""The finance routes: close a month (admin), read it, stream its journal (the bytes hash to the close's
journal.sha256), GL mapping and batch, the log proofs; tenants see only their own closes."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from settlekit.append import job_appender
from settlekit.ledger.accounts import ACCOUNT_IDS
from settlekit.ledger.close import verify_close_document, verify_consistency_proof, verify_inclusion_proof
from settlekit.simulate import SCENARIO_ORDER, Fleet, job_stream
from settlekit.store.db import Database
from support.api import TENANT_B, client, key_for, make_app

T = "tenant_fin"


def _seed(db: Database) -> None:
    store = job_appender(db, clock=lambda: datetime(2026, 1, 6, tzinfo=UTC), server_rules=False)
    fleet = Fleet.create()
    for reg in fleet.registrations():
        store.signer_keys.register(T, reg["publicKeyPem"], reg["purpose"], entity_id=reg.get("entityId"))
    for i, scenario in enumerate(SCENARIO_ORDER):
        events = job_stream(scenario, f"job_{i:04d}", fleet, i)
        store.append(T, events[0]["streamId"], events)


def test_close_read_stream_and_prove(db: Database) -> None:
    _seed(db)
    app = make_app(db)
    api = client(app, key_for(db, T))
    reader = client(app, key_for(db, T, ["jobs:read"]))
    assert reader.post("/v1/finance/closes/2026-01").status_code == 403
    assert api.post("/v1/finance/closes/2026-13").status_code == 400
    first = api.post("/v1/finance/closes/2026-01")
    assert first.status_code == 201, first.text
    doc = first.json()
    assert verify_close_document(doc)["ok"]
    again = api.post("/v1/finance/closes/2026-01")
    assert again.status_code == 200 and again.content == first.content
    assert reader.get("/v1/finance/closes/2026-01").json() == doc
    assert client(app, key_for(db, TENANT_B)).get("/v1/finance/closes/2026-01").json()["code"] == \
        "FINANCE_CLOSE_NOT_FOUND"
    csv = reader.get("/v1/finance/closes/2026-01/journal.csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert hashlib.sha256(csv.content).hexdigest() == doc["journal"]["sha256"] == csv.headers["x-content-sha256"]
    proof = reader.get("/v1/finance/closes/2026-01/proofs/job_0002").json()
    assert verify_inclusion_proof(proof)["ok"]
    assert reader.get("/v1/finance/closes/2026-01/proofs/job_nope").json()["code"] == "FINANCE_LEAF_NOT_FOUND"
    assert api.post("/v1/finance/closes/2026-02").status_code == 201
    cons = reader.get("/v1/finance/consistency", params={"from": "2026-01", "to": "2026-02"}).json()
    assert verify_consistency_proof(cons)["ok"]
    assert api.post("/v1/finance/closes/2099-01").json()["code"] == "FINANCE_PERIOD_OPEN"
    # the last month expressible as YYYY-MM has no following month to end at: still open, not a malformed month
    last = api.post("/v1/finance/closes/9999-12")
    assert (last.status_code, last.json()["code"]) == (409, "FINANCE_PERIOD_OPEN")


def test_gl_mapping_and_streamed_batch(db: Database) -> None:
    _seed(db)
    api = client(make_app(db), key_for(db, T))
    assert api.post("/v1/finance/closes/2026-01").status_code == 201
    assert api.get("/v1/finance/closes/2026-01/gl-batch").json()["code"] == "FINANCE_GL_MAPPING_NOT_FOUND"
    bad = api.put("/v1/finance/gl-mapping", json={"schemaVersion": "GlMapping.v1", "accounts": {}})
    assert bad.status_code == 400 and bad.json()["code"] == "FINANCE_GL_MAPPING_INVALID"
    partial = {"schemaVersion": "GlMapping.v1", "accounts": {ACCOUNT_IDS[0]: {"glAccount": "1000"}}}
    assert api.put("/v1/finance/gl-mapping", json=partial).status_code == 200
    assert api.get("/v1/finance/closes/2026-01/gl-batch").json()["code"] == "FINANCE_GL_ACCOUNT_UNMAPPED"
    full = {"schemaVersion": "GlMapping.v1", "accounts": {a: {"glAccount": str(1000 + i)}
                                                          for i, a in enumerate(ACCOUNT_IDS)}}
    assert api.put("/v1/finance/gl-mapping", json=full).status_code == 200
    assert api.get("/v1/finance/gl-mapping").json() == full
    batch = api.get("/v1/finance/closes/2026-01/gl-batch").json()
    assert batch["lineCount"] == len(batch["lines"]) > 0


def test_a_month_is_four_ascii_digits_of_a_year_from_0001(db: Database) -> None:
    api = client(make_app(db), key_for(db, T))
    for month in ("0000-01", "\u0662\u0660\u0662\u0666-01", "2026-1", "12026-01"):
        for answer in (api.post(f"/v1/finance/closes/{month}"), api.get(f"/v1/finance/closes/{month}")):
            assert answer.status_code == 400 and answer.json()["code"] == "SCHEMA_INVALID", (month, answer.text)
    assert api.get("/v1/finance/closes/0001-01").json()["code"] == "FINANCE_CLOSE_NOT_FOUND"
