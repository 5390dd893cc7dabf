"""Shared helpers for the API tests (no tests here): app/client construction and seeding a tenant through the
API with a golden vector's job, its signer keys, a destination, artifacts and deliveries."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from conftest import load_vector
from settlekit.api.app import create_app
from settlekit.api.auth import create_api_key
from settlekit.api.ratelimit import RateLimiter
from settlekit.application.destinations import DestinationPolicy
from settlekit.cursors import DELIVERY, EVENT, Cursors
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.events.envelope import Signer
from settlekit.projections.artifacts import artifacts_consumer
from settlekit.runtime.settings import Settings
from settlekit.store import cursor_secret
from settlekit.store.db import Database
from support.contracts import settld_accepted_contracts

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TENANT_A = "tenant_default"  # the vectors' tenant
TENANT_B = "tenant_b"
ALL_SCOPES = ["jobs:read", "jobs:write", "finance:write", "ops", "admin"]


def make_app(db: Database, **options: Any) -> Any:
    """The API on `db`; `options` are settings (`Settings` fields) or live objects of `create_app`."""
    live = {name: options.pop(name) for name in ("destination_policy", "registered_consumers", "registry", "mounts")
            if name in options}
    live.setdefault("destination_policy", DestinationPolicy.local())
    live.setdefault("registry", CollectorRegistry())
    options.setdefault("rate_limit_per_second", 1e6)
    options.setdefault("rate_limit_burst", 1_000_000)
    app = create_app(db, Settings(**options), server_signer=Signer.generate(), **live)
    app.state.settlekit.auth_failures = RateLimiter(1e6, 1_000_000)  # tests share one client address
    return app


def client(app: Any, api_key: str | None = None, **kwargs: Any) -> TestClient:
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return TestClient(app, headers=headers, **kwargs)


def key_for(db: Database, tenant: str, scopes: list[str] | None = None) -> str:
    return create_api_key(db, tenant, scopes or ALL_SCOPES)[1]


def cursors_of(db: Database) -> Cursors:
    """The deployment's cursor codec (the key every API process on `db` derives)."""
    return Cursors(cursor_secret.read(db))


def position_of(db: Database, tenant: str, token: str) -> int:
    """The event position behind a cursor the API returned to `tenant`."""
    return cursors_of(db).decode(EVENT, tenant, token, field="cursor")[0]


def event_cursor(db: Database, tenant: str, position: int) -> str:
    """The cursor the API shows `tenant` for an event position."""
    return cursors_of(db).encode(EVENT, tenant, position)


def delivery_token(db: Database, tenant: str, delivery_id: int) -> str:
    """The id the API shows `tenant` for a delivery row."""
    return cursors_of(db).encode(DELIVERY, tenant, delivery_id)


def delivery_row_id(db: Database, tenant: str, token: str) -> int:
    """The delivery row behind an id the API returned to `tenant`."""
    return cursors_of(db).decode(DELIVERY, tenant, token, field="deliveryId")[0]


@dataclass
class Seeded:
    vector: dict[str, Any]
    job_id: str
    destination_id: str
    destination_url: str
    artifact_id: str
    delivery_id: str  # as the API shows it to the tenant
    key_ids: list[str]
    markers: list[str] = field(default_factory=list)
    contract_hash: str = ""  # a contract document the tenant registered
    replay_id: str = ""  # a replay of its destination
    delivery_row: int = 0  # the row behind delivery_id


def seed_tenant(db: Database, api: TestClient, vector_name: str = "settle_completed.json") -> Seeded:
    """Load a vector through the API: signer keys, a destination, the client-finalized events; then run the
    artifact consumer so artifacts and deliveries exist."""
    vector = load_vector(vector_name)
    key_ids = []
    for signer in vector["signers"]:
        r = api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"], "purpose": signer["role"]})
        assert r.status_code == 201, r.text
        key_ids.append(r.json()["keyId"])
    url = "http://127.0.0.1:9/hooks/tenant-a-secret-path"
    r = api.post("/v1/destinations", json={"destinationId": "dst_a", "url": url, "secret": generate_secret()})
    assert r.status_code == 201, r.text
    job_id = vector["events"][0]["streamId"]
    for event in vector["events"]:
        r = api.post(f"/v1/jobs/{job_id}/events", json=event)
        assert r.status_code == 201, r.text
    Dispatcher(db, [artifacts_consumer(sink=WebhookDeliverySink())], listen=False).drain(30)
    arts = api.get(f"/v1/jobs/{job_id}/artifacts").json()["artifacts"]
    assert arts, "the artifact consumer built nothing"
    deliveries = api.get("/v1/deliveries").json()["deliveries"]
    assert deliveries
    r = api.post("/v1/contracts", json=settld_accepted_contracts()[0]["document"])
    assert r.status_code == 201, r.text
    contract_hash = r.json()["contractHash"]
    replay = api.post("/v1/destinations/dst_a/replay", json={"since": "2000-01-01T00:00:00Z",
                                                             "until": "2000-01-02T00:00:00Z"})
    assert replay.status_code == 202, replay.text
    markers = [vector["events"][-1]["chainHash"], url, arts[0]["artifactHash"], TENANT_A]
    return Seeded(vector, job_id, "dst_a", url, arts[0]["artifactId"], deliveries[0]["id"], key_ids, markers,
                  contract_hash, replay.json()["replayId"], delivery_row_id(db, TENANT_A, deliveries[0]["id"]))


def tenant_rows(db: Database, tenant: str) -> dict[str, Any]:
    """Everything stored for a tenant, to check that a request changed nothing."""
    out: dict[str, Any] = {}
    with db.read() as tx:
        for table, order in (("streams", "stream_id"), ("events", "position"), ("signer_keys", "key_id"),
                             ("destinations", "destination_id"), ("deliveries", "id"),
                             ("ledger_entries", "entry_id"), ("ledger_balances", "account_id"),
                             ("artifacts", "artifact_id"), ("idempotency_keys", "idem_key"),
                             ("contract_documents", "contract_hash")):
            out[table] = [tuple(str(v) for v in row)
                          for row in tx.fetchall(f"SELECT * FROM {table} WHERE tenant_id = ? ORDER BY {order}",
                                                 (tenant,))]
    return out
