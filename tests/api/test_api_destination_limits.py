"""Bounds of a tenant's destinations: how many it may create through the API (`max_destinations_per_tenant`), and
its `artifactTypes` (at most 32 names of at most 100 characters; `[]` is refused instead of meaning every type)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from settlekit.application import destinations
from settlekit.application.destinations import DestinationPolicy
from settlekit.delivery.signing import generate_secret
from settlekit.errors import ConflictError
from settlekit.runtime.settings import Settings
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, key_for, make_app


def _body(destination_id: str, **fields: Any) -> dict[str, Any]:
    return {"destinationId": destination_id, "url": "http://127.0.0.1:9/h", "secret": generate_secret(), **fields}


def test_artifact_types_are_bounded_and_never_empty(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A))
    for types in ([], ["x" * 101], [f"T{i}.v1" for i in range(33)], [""]):
        r = api.post("/v1/destinations", json=_body("d1", artifactTypes=types))
        assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", (types, r.text)
    assert api.get("/v1/destinations").json()["destinations"] == []
    r = api.post("/v1/destinations", json=_body("d1", artifactTypes=["SettlementStatement.v1"]))
    assert r.status_code == 201 and r.json()["artifactTypes"] == ["SettlementStatement.v1"], r.text
    r = api.patch("/v1/destinations/d1", json={"artifactTypes": []})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    r = api.patch("/v1/destinations/d1", json={"ordering": "strict_scope"})  # omitted: kept
    assert r.status_code == 200 and r.json()["artifactTypes"] == ["SettlementStatement.v1"], r.text
    r = api.patch("/v1/destinations/d1", json={"artifactTypes": None})  # null: every type
    assert r.status_code == 200 and r.json()["artifactTypes"] is None, r.text
    r = api.patch("/v1/destinations/d1", json={"artifactTypes": [f"T{i}.v1" for i in range(32)]})
    assert r.status_code == 200 and len(r.json()["artifactTypes"]) == 32, r.text


def test_an_idempotency_key_tells_an_omitted_artifact_types_from_a_null_one(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A))
    assert api.post("/v1/destinations", json=_body("d1", artifactTypes=["A.v1"])).status_code == 201
    headers = {"Idempotency-Key": "patch-1"}
    assert api.patch("/v1/destinations/d1", json={}, headers=headers).status_code == 200
    r = api.patch("/v1/destinations/d1", json={"artifactTypes": None}, headers=headers)
    assert r.status_code == 409 and r.json()["code"] == "IDEMPOTENCY_CONFLICT", r.text


def test_destinations_per_tenant(db: Database) -> None:
    assert DestinationPolicy.from_settings(Settings(max_destinations_per_tenant=3)).max_destinations_per_tenant == 3
    app = make_app(db, destination_policy=dataclasses.replace(DestinationPolicy.local(),
                                                              max_destinations_per_tenant=3))
    api = client(app, key_for(db, TENANT_A))
    for i in range(3):
        assert api.post("/v1/destinations", json=_body(f"d{i}")).status_code == 201
    r = api.post("/v1/destinations", json=_body("d3"))
    assert r.status_code == 409 and r.json()["code"] == "DESTINATION_LIMIT_REACHED", r.text
    assert r.json()["details"]["limit"] == 3
    assert api.patch("/v1/destinations/d0", json={"url": "http://127.0.0.1:9/other"}).status_code == 200
    assert len(api.get("/v1/destinations").json()["destinations"]) == 3
    other = client(app, key_for(db, TENANT_B))
    assert other.post("/v1/destinations", json=_body("d3")).status_code == 201


def test_creates_near_the_limit_take_turns(db: Database) -> None:
    """Eight creates at once with one place left: exactly one is saved (on PostgreSQL the tenant's rows are
    locked and counted again; SQLite's writers take turns)."""
    policy = dataclasses.replace(DestinationPolicy.local(), max_destinations_per_tenant=3)
    for i in range(2):
        destinations.add_destination(db, "ten", f"d{i}", url="http://127.0.0.1:9/h", secret_ref="",
                                secret_value=generate_secret(), policy=policy)
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def create(n: int) -> None:
        start.wait(timeout=30)
        try:
            destinations.add_destination(db, "ten", f"new{n}", url="http://127.0.0.1:9/h", secret_ref="",
                                    secret_value=generate_secret(), policy=policy)
            outcomes.append("saved")
        except ConflictError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["DESTINATION_LIMIT_REACHED"] * 7 + ["saved"]
    assert len(destinations.list_destinations(db, "ten")) == 3
