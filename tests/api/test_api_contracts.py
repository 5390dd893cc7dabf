"""`POST /v1/contracts` and `GET /v1/contracts/{hash}`: contract documents registered through the API, with the
hashes settld computes (the vendored reference answers), per tenant, all or nothing."""

from __future__ import annotations

from typing import Any

import pytest

from settlekit.store.contracts import get_contract
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, key_for, make_app
from support.contracts import settld_accepted_contracts


@pytest.fixture
def apis(db: Database) -> tuple[Database, Any, Any, Any]:
    app = make_app(db)
    return (db, client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B)),
            client(app, key_for(db, TENANT_A, ["jobs:read", "jobs:write", "ops"])))


def test_a_registered_document_has_settlds_hashes_and_reads_back(apis: tuple[Database, Any, Any, Any]) -> None:
    db, api, _, _ = apis
    case = settld_accepted_contracts()[0]
    document, settld = case["document"], case["settld"]
    r = api.post("/v1/contracts", json=document)
    assert r.status_code == 201, r.text
    assert r.json() == {"tenantId": TENANT_A, "contractHash": settld["document"]["contractHash"],
                        "policyHash": settld["template"]["policyHash"], "compilerId": "contract_compiler.v1",
                        "splitPlanHash": settld["template"]["policyTemplate"]["connect"]["splitPlanHash"]}
    again = api.post("/v1/contracts", json=document)
    assert again.status_code == 200 and again.json() == r.json()
    digest = r.json()["contractHash"]
    read = api.get(f"/v1/contracts/{digest}")
    assert read.status_code == 200 and read.json() == {"tenantId": TENANT_A, "contractHash": digest,
                                                        "document": document}
    assert get_contract(db, TENANT_A, digest) == document


def test_an_invalid_document_is_refused_and_nothing_is_stored(apis: tuple[Database, Any, Any, Any]) -> None:
    db, api, _, _ = apis
    document = dict(settld_accepted_contracts()[0]["document"], contractVersion=0)
    r = api.post("/v1/contracts", json=document)
    assert r.status_code == 400 and r.json()["code"] == "CONTRACT_INVALID", r.text
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM contract_documents") == 0
    for body in (b"[]", b"\"text\"", b"{"):
        r = api.post("/v1/contracts", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] in ("CONTRACT_INVALID", "JSON_INVALID"), r.text


def test_documents_are_the_tenants_own_and_registering_needs_admin(apis: tuple[Database, Any, Any, Any]) -> None:
    _, api, other, ops_only = apis
    document = settld_accepted_contracts()[0]["document"]
    assert ops_only.post("/v1/contracts", json=document).status_code == 403
    digest = api.post("/v1/contracts", json=document).json()["contractHash"]
    assert ops_only.get(f"/v1/contracts/{digest}").status_code == 200
    r = other.get(f"/v1/contracts/{digest}")
    assert r.status_code == 404 and r.json()["code"] == "CONTRACT_NOT_FOUND"
    assert api.get("/v1/contracts/" + "0" * 64).status_code == 404
    assert api.get("/v1/contracts/not-a-hash").status_code == 400
