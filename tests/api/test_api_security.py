"""API security: every route is tenant-scoped (a key of tenant B can neither read nor change tenant A's data),
authentication is required everywhere except the open paths, scopes are enforced, rate limit, body limit,
problem+json errors without stack traces."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from settlekit.api.app import OPEN_PATHS
from settlekit.api.auth import create_api_key, revoke_api_key
from settlekit.delivery.signing import generate_secret
from settlekit.events.envelope import Signer
from settlekit.store.db import Database, connect
from support.api import TENANT_A, TENANT_B, Seeded, client, key_for, make_app, seed_tenant, tenant_rows
from support.contracts import settld_accepted_contracts

# A valid body for every write route (so a refusal is about the tenant, not the input).
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/jobs"): {"payload": {"templateId": "reset_lite"}},
    ("POST", "/v1/jobs/{job_id}/events"): {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
                                            "payload": {"amountCents": 100, "currency": "USD"}},
    ("POST", "/v1/destinations"): {"destinationId": "dst_b_own", "url": "http://127.0.0.1:9/b",
                                   "secret": generate_secret()},
    ("PATCH", "/v1/destinations/{destination_id}"): {"url": "http://127.0.0.1:9/b2"},
    ("POST", "/v1/destinations/{destination_id}/disable"): {"reason": "operator"},
    ("POST", "/v1/deliveries/requeue"): {"since": "2000-01-01T00:00:00Z", "destinationId": "dst_a"},
    ("POST", "/v1/destinations/{destination_id}/replay"): {
        "since": (datetime.now(UTC) - timedelta(days=1)).isoformat()},
    ("POST", "/v1/keys"): {"publicKeyPem": Signer.generate().public_key_pem, "purpose": "robot"},
    ("POST", "/v1/keys/{key_id}/rotate"): {},
    ("POST", "/v1/contracts"): settld_accepted_contracts()[0]["document"],
    ("POST", "/v1/ops/consumers/{name}/reset"): {"to": 0},
    ("PUT", "/v1/finance/gl-mapping"): {"schemaVersion": "GlMapping.v1", "accounts": {"acct_cash": {"glAccount": "1"}}},
}
QUERIES: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/v1/jobs/{job_id}/artifacts/effective"): {"type": "WorkCertificate"},
    ("GET", "/v1/finance/consistency"): {"from": "2026-01", "to": "2026-01"},
}
HEADERS: dict[tuple[str, str], dict[str, str]] = {
    ("POST", "/v1/jobs/{job_id}/events"): {"x-expected-prev-chain-hash": "null"},
}
# Deployment-wide routes: only admin keys of the operator tenant ("system").
OPERATOR_ROUTES = {p for p in (
    "/v1/ops/consumers", "/v1/ops/consumers/{name}", "/v1/ops/consumers/{name}/restart",
    "/v1/ops/consumers/{name}/disable", "/v1/ops/consumers/{name}/enable", "/v1/ops/consumers/{name}/skip",
    "/v1/ops/consumers/{name}/reset", "/v1/ops/consumers/{name}/dead-letters", "/metrics")}
# Collections: tenant B gets its own (empty or own) list, never A's rows.
# (the event feed too: the app's streams are closed in these tests, so a stream answers its first line and ends)
COLLECTIONS = {"/v1/jobs", "/v1/destinations", "/v1/deliveries", "/v1/keys", "/v1/ledger/balances", "/v1/events",
               "/v1/events/stream", "/v1/ledger/accounts/{account_id}/postings"}
CREATES = {("POST", "/v1/jobs"), ("POST", "/v1/destinations"), ("POST", "/v1/keys"), ("POST", "/v1/contracts")}
# Finance routes answer for the key's own tenant: 404 until tenant B has its own close or mapping, then B's own
# document (closing a month or storing a mapping writes in B's namespace only).
OWN_TENANT = {"/v1/finance/closes/{month}", "/v1/finance/closes/{month}/journal.csv",
              "/v1/finance/closes/{month}/gl-batch", "/v1/finance/closes/{month}/proofs/{job_id}",
              "/v1/finance/consistency", "/v1/finance/gl-mapping"}


def api_routes() -> list[tuple[str, str]]:
    app = _route_app()
    out = []
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path not in OPEN_PATHS:
            for method in sorted(route.methods or ()):
                out.append((method, route.path_format))  # the template, without its convertors
    return sorted(out)


_ROUTE_APP: Any = None


def _route_app() -> Any:
    global _ROUTE_APP
    if _ROUTE_APP is None:
        import tempfile

        tmp = tempfile.mkdtemp(prefix="sk-api-routes-")
        db = connect(f"sqlite:///{Path(tmp) / 'routes.db'}")
        db.migrate()
        _ROUTE_APP = make_app(db)
    return _ROUTE_APP


ROUTES = api_routes()


def _path(template: str, seeded: Seeded) -> str:
    return (template.replace("{job_id}", seeded.job_id).replace("{artifact_id}", seeded.artifact_id)
            .replace("{destination_id}", seeded.destination_id).replace("{delivery_id}", str(seeded.delivery_id))
            .replace("{key_id}", seeded.key_ids[0]).replace("{name}", "settlekit:artifacts")
            .replace("{month}", "2026-01").replace("{account_id}", "acct_cash")
            .replace("{contract_hash}", seeded.contract_hash).replace("{replay_id}", seeded.replay_id))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('xtenant') / 'x.db'}"
    db = connect(url)
    db.migrate()
    app = make_app(db)
    app.state.settlekit.feed.close()
    seeded = seed_tenant(db, client(app, key_for(db, TENANT_A)))
    yield {"db": db, "app": app, "seeded": seeded, "b_key": key_for(db, TENANT_B)}
    db.close()


def _request(api: Any, method: str, template: str, seeded: Seeded) -> Any:
    body = BODIES.get((method, template))
    kwargs: dict[str, Any] = {"headers": HEADERS.get((method, template), {}),
                              "params": QUERIES.get((method, template), {})}
    if body is not None:
        kwargs["json"] = body
    return api.request(method, _path(template, seeded), **kwargs)


def _check_isolated(db: Database, api: Any, method: str, template: str, seeded: Seeded) -> None:
    before = tenant_rows(db, TENANT_A)
    r = _request(api, method, template, seeded)
    assert r.status_code < 500, r.text
    for marker in seeded.markers:
        assert marker not in r.text, f"{method} {template} leaked {marker!r}: {r.text[:300]}"
    if template in OPERATOR_ROUTES:
        assert r.status_code == 403 and r.json()["code"] == "OPERATOR_TENANT_REQUIRED"
    elif template in COLLECTIONS and method == "GET":
        assert r.status_code == 200
    elif template in OWN_TENANT:
        assert r.status_code in (200, 201, 404), f"{method} {template}: {r.status_code} {r.text[:300]}"
    elif (method, template) in CREATES:
        assert r.status_code in (201, 409), r.text  # created in B's own namespace (or B's own duplicate)
    else:
        assert r.status_code == 404, f"{method} {template}: {r.status_code} {r.text[:300]}"
        assert r.headers["content-type"] == "application/problem+json"
    assert tenant_rows(db, TENANT_A) == before, f"{method} {template} changed tenant A's data"


def test_route_list_is_covered() -> None:
    """A new route must be added to this file's plan (bodies, operator or collection lists)."""
    paths = {p for _, p in ROUTES}
    assert paths >= OPERATOR_ROUTES | COLLECTIONS
    assert {k for k in BODIES} <= set(ROUTES)
    params = {"job_id", "artifact_id", "destination_id", "delivery_id", "key_id", "name", "month", "account_id",
              "contract_hash", "replay_id"}
    for _, template in ROUTES:
        names = {part[1:-1] for part in template.split("/") if part.startswith("{")}
        assert names <= params, f"unknown path parameter in {template}"
    assert len(ROUTES) >= 30


@pytest.mark.parametrize(("method", "template"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_cross_tenant_isolation(world: dict[str, Any], method: str, template: str) -> None:
    api = client(world["app"], world["b_key"])
    _check_isolated(world["db"], api, method, template, world["seeded"])


def test_cross_tenant_isolation_all_routes_on_both_backends(db: Database) -> None:
    app = make_app(db)
    app.state.settlekit.feed.close()
    seeded = seed_tenant(db, client(app, key_for(db, TENANT_A)))
    api = client(app, key_for(db, TENANT_B))
    for method, template in ROUTES:
        _check_isolated(db, api, method, template, seeded)


@pytest.mark.parametrize(("method", "template"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_every_route_needs_a_key(world: dict[str, Any], method: str, template: str) -> None:
    before = tenant_rows(world["db"], TENANT_A)
    for headers in ({}, {"authorization": "Bearer sk_0000000000000000_nope"}, {"authorization": "Basic abc"},
                    {"x-api-key": "garbage"}):
        r = client(world["app"]).request(method, _path(template, world["seeded"]), headers=headers, json={})
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"] == "Bearer"
    assert tenant_rows(world["db"], TENANT_A) == before


def test_open_paths_and_unknown_routes(world: dict[str, Any]) -> None:
    anon = client(world["app"])
    assert anon.get("/healthz").json()["status"] == "ok"
    assert anon.get("/readyz").json() == {"status": "ready"}
    assert anon.get("/metrics").status_code == 401  # deployment-wide data: an operator key only
    spec = anon.get("/openapi.json").json()
    assert "/v1/jobs/{job_id}/events" in spec["paths"]
    assert anon.get("/docs").status_code == 200
    assert anon.get("/redoc").status_code == 200
    # a path no route serves is 404 with or without a key; a known one without a key stays 401
    for unknown in (anon.get("/nope"), anon.post("/v1/jobs/job_1/nope"),
                    client(world["app"], "sk_nope_nope").get("/v1/nope")):
        assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND", unknown.text
        assert unknown.headers["content-type"] == "application/problem+json"
        assert "www-authenticate" not in unknown.headers
    assert anon.get("/v1/jobs/job_1").status_code == 401
    assert anon.delete("/v1/jobs").status_code == 401  # a known path, another method
    r = client(world["app"], world["b_key"]).get("/nope")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "NOT_FOUND"
    r = client(world["app"], world["b_key"]).delete("/v1/jobs")
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED"


def test_revoked_key_and_key_format(world: dict[str, Any]) -> None:
    db = world["db"]
    key_id, secret = create_api_key(db, TENANT_B, ["jobs:read"])
    assert secret.startswith(f"sk_{key_id}_")
    api = client(world["app"], secret)
    assert api.get("/v1/jobs").status_code == 200
    # wrong secret for a real key id
    assert client(world["app"], secret[:-2] + "xx").get("/v1/jobs").status_code == 401
    revoke_api_key(db, key_id)
    r = api.get("/v1/jobs")
    assert r.status_code == 401 and r.json()["code"] == "API_KEY_INVALID"
    with db.read() as tx:
        stored = tx.scalar("SELECT secret_hash FROM api_keys WHERE key_id = ?", (key_id,))
    assert secret.split("_", 2)[2] not in stored  # only the hash is stored


@pytest.mark.parametrize(("scopes", "method", "path", "expected"), [
    (["jobs:read"], "POST", "/v1/jobs", 403),
    (["jobs:write"], "GET", "/v1/jobs", 403),
    (["jobs:read"], "GET", "/v1/destinations", 403),
    (["ops"], "POST", "/v1/keys", 403),
    (["ops"], "GET", "/v1/keys", 200),
    (["jobs:read", "jobs:write", "ops"], "GET", "/v1/ops/consumers", 403),
    (["admin"], "GET", "/v1/jobs", 200),
])
def test_scopes(world: dict[str, Any], scopes: list[str], method: str, path: str, expected: int) -> None:
    api = client(world["app"], key_for(world["db"], TENANT_B, scopes))
    body: Any = {"payload": {"templateId": "x"}} if method == "POST" and path == "/v1/jobs" else None
    if path == "/v1/keys" and method == "POST":
        body = {"publicKeyPem": world["seeded"].vector["signers"][0]["publicKeyPem"], "purpose": "server"}
    r = api.request(method, path, json=body)
    assert r.status_code == expected, r.text
    if expected == 403:
        assert r.json()["code"] in ("SCOPE_REQUIRED", "OPERATOR_TENANT_REQUIRED")


def test_finance_types_need_finance_scope(world: dict[str, Any]) -> None:
    db = world["db"]
    api = client(world["app"], key_for(db, TENANT_B, ["jobs:read", "jobs:write"]))
    created = api.post("/v1/jobs", json={"jobId": "job_fin", "payload": {"templateId": "reset_lite"}})
    assert created.status_code == 201, created.text
    head = created.json()["headChainHash"]
    for etype in ("SETTLED", "JOB_ADJUSTED", "CLAIM_OPENED", "SLA_CREDIT_ISSUED", "OPERATOR_COST_RECORDED"):
        r = api.post("/v1/jobs/job_fin/events", json={"type": etype, "actor": {"type": "system", "id": "x"},
                                                      "payload": {}},
                     headers={"x-expected-prev-chain-hash": head})
        assert r.status_code == 403 and r.json()["details"]["scope"] == "finance:write", r.text
    # a batch that hides a finance type behind an allowed one is refused as a whole
    r = api.post("/v1/jobs/job_fin/events", json=[
        {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
         "payload": {"amountCents": 100, "currency": "USD"}},
        {"type": "SETTLED", "actor": {"type": "system", "id": "x"}, "payload": {}}],
        headers={"x-expected-prev-chain-hash": head})
    assert r.status_code == 403
    assert len(api.get("/v1/jobs/job_fin/events").json()["events"]) == 1


def test_operator_tenant_runs_consumer_verbs(world: dict[str, Any]) -> None:
    api = client(world["app"], key_for(world["db"], "system", ["admin"]))
    listed = api.get("/v1/ops/consumers").json()["consumers"]
    assert any(c["name"] == "settlekit:artifacts" for c in listed)
    assert api.get("/v1/ops/consumers/nope").status_code == 404
    r = api.post("/v1/ops/consumers/settlekit:artifacts/restart")
    assert r.status_code == 409, r.text  # not dead
    assert api.post("/v1/ops/consumers/settlekit:artifacts/disable").json()["status"] == "disabled"
    assert api.post("/v1/ops/consumers/settlekit:artifacts/enable").json()["status"] == "idle"
    r = api.post("/v1/ops/consumers/settlekit:artifacts/reset", json={"to": -1})
    assert r.status_code == 400, r.text
    r = api.post("/v1/ops/consumers/settlekit:artifacts/reset", json={"to": "now"})
    assert r.status_code == 200, r.text
    assert api.get("/v1/ops/consumers/settlekit:artifacts/dead-letters").json()["deadLetters"] == []


def test_rate_limit(sqlite_url: str) -> None:
    db = connect(sqlite_url)
    db.migrate()
    try:
        app = make_app(db, rate_limit_per_second=0.5, rate_limit_burst=3)
        api = client(app, key_for(db, TENANT_B))
        codes = [api.get("/v1/jobs").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = api.get("/v1/jobs")
        assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
        assert int(r.headers["retry-after"]) >= 1
        assert r.headers["content-type"] == "application/problem+json"
        # another key has its own bucket
        assert client(app, key_for(db, TENANT_B)).get("/v1/jobs").status_code == 200
    finally:
        db.close()


def test_unhandled_errors_never_leak_a_trace(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from settlekit.application import jobs as streams

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals /path/to/file.py line 42")

    monkeypatch.setattr(streams, "job_page", boom)
    api = client(world["app"], world["b_key"], raise_server_exceptions=False)
    r = api.get("/v1/jobs")
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "INTERNAL"
    assert "secret internals" not in r.text and "Traceback" not in r.text


@pytest.mark.parametrize("claimed", ["tenant_default", None])
def test_a_job_cannot_claim_another_tenant(world: dict[str, Any], claimed: str | None) -> None:
    """JOB_CREATED naming another tenant (or none, which means settld's default tenant) is refused on every
    route that creates a job, in a draft or client-finalized, and nothing is written."""
    from support.streams import StreamBuilder

    db = world["db"]
    api = client(world["app"], world["b_key"])
    payload: dict[str, Any] = {"templateId": "reset_lite"}
    if claimed is not None:
        payload["tenantId"] = claimed
    finalized = StreamBuilder("job_claim_fin", prefix=f"evt_claim_{claimed}").add("JOB_CREATED", payload)
    before = tenant_rows(db, TENANT_B)
    attempts = [
        api.post("/v1/jobs/job_claim_fin/events", json=finalized),
        api.post("/v1/jobs/job_claim_fin/events", json=[finalized]),
    ]
    if claimed is not None:
        attempts.append(api.post("/v1/jobs", json={"jobId": "job_claim", "payload": payload}))
        attempts.append(api.post("/v1/jobs/job_claim/events", headers={"x-expected-prev-chain-hash": "null"},
                                 json={"type": "JOB_CREATED", "actor": {"type": "system", "id": "x"},
                                       "payload": payload}))
    for r in attempts:
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "JOB_TENANT_MISMATCH"
        assert r.headers["content-type"] == "application/problem+json"
    for job in ("job_claim", "job_claim_fin"):
        assert api.get(f"/v1/jobs/{job}").status_code == 404
    assert tenant_rows(db, TENANT_B) == before


def test_a_job_draft_without_tenant_gets_the_keys_tenant(world: dict[str, Any]) -> None:
    api = client(world["app"], world["b_key"])
    r = api.post("/v1/jobs/job_own_tenant/events", headers={"x-expected-prev-chain-hash": "null"},
                 json={"type": "JOB_CREATED", "actor": {"type": "system", "id": "x"},
                       "payload": {"templateId": "reset_lite"}})
    assert r.status_code == 201, r.text
    assert r.json()["events"][0]["payload"]["tenantId"] == TENANT_B
    assert r.json()["job"]["tenantId"] == TENANT_B
