"""Issue 11 low items: /metrics needs an operator key and carries no destination ids by default; export
filenames are escaped (RFC 6266 / RFC 8187); failed authentications are rate-limited per client address with
bounded memory; the bearer key is the one documented (and accepted) credential."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from settlekit.api.ratelimit import RateLimiter
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.receiver import ReceiverServer
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.events.canonical import canonical_hash
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app


def test_metrics_need_an_operator_ops_key(db: Database) -> None:
    app = make_app(db)
    assert client(app).get("/metrics").status_code == 401
    r = client(app, key_for(db, TENANT_A)).get("/metrics")
    assert r.status_code == 403 and r.json()["code"] == "OPERATOR_TENANT_REQUIRED"
    assert client(app, key_for(db, "system", ["jobs:read"])).get("/metrics").status_code == 403
    r = client(app, key_for(db, "system", ["ops"])).get("/metrics")
    assert r.status_code == 200 and "settlekit_api_requests_total" in r.text


@pytest.mark.parametrize("per_destination", [False, True])
def test_destination_ids_are_not_metric_labels_by_default(db: Database, per_destination: bool) -> None:
    secret = generate_secret()
    doc: dict[str, Any] = {"schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
                           "artifactId": "cert_j_evt_1", "tenantId": TENANT_A, "jobId": "j", "jobVersion": 1}
    doc["artifactHash"] = canonical_hash(doc)
    registry = CollectorRegistry()
    with ReceiverServer(secrets=[secret]) as rx:
        app = make_app(db)
        api = client(app, key_for(db, TENANT_A))
        r = api.post("/v1/destinations", json={"destinationId": "dst_private_name", "url": rx.url,
                                               "secret": secret})
        assert r.status_code == 201, r.text
        with db.transaction() as tx:
            enqueue_artifact(tx, TENANT_A, doc, now=datetime.now(UTC))
        worker = DeliveryWorker(db, artifact_loader=lambda tx, t, a: doc, registry=registry,
                                config=WorkerConfig(allow_insecure_http=True, allow_loopback=True,
                                                    sender=SenderConfig(timeout=5.0),
                                                    per_destination_metrics=per_destination))

        async def go() -> None:
            async with worker:
                await worker.run_once()

        asyncio.run(go())
        assert len(rx.requests) == 1
    text = generate_latest(registry).decode()
    assert ('destination_id="dst_private_name"' in text) is per_destination
    label = "dst_private_name" if per_destination else "all"
    assert registry.get_sample_value("settlekit_delivery_attempts_total",
                                     {"destination_id": label, "outcome": "delivered"}) == 1


@pytest.mark.parametrize("job_id", ['x";filename="evil.exe', "a\\b..c", "caf\u00e9", 'q;x=1,"y"\'z',
                                    "plain-job_1"])
def test_export_filename_is_escaped(db: Database, job_id: str) -> None:
    api = client(make_app(db), key_for(db, TENANT_A))
    r = api.post("/v1/jobs", json={"jobId": job_id, "payload": {"templateId": "t"}})
    assert r.status_code == 201, r.text
    from urllib.parse import quote

    r = api.get(f"/v1/jobs/{quote(job_id, safe='')}/export")
    assert r.status_code == 200, r.text
    header = r.headers["content-disposition"]
    params = header.split("; ")
    assert params[0] == "attachment" and len(params) == 3, header  # nothing injected
    fallback, extended = params[1], params[2]
    assert fallback.startswith('filename="') and fallback.endswith('"')
    assert all(c.isalnum() or c in "._-" for c in fallback[len('filename="'):-1]), header
    assert extended.startswith("filename*=UTF-8''")
    assert unquote(extended[len("filename*=UTF-8''"):]) == f"{job_id}.json"


def test_failed_authentications_are_rate_limited_per_address(db: Database) -> None:
    app = make_app(db)
    now = [0.0]
    app.state.settlekit.auth_failures = RateLimiter(0.5, 5, clock=lambda: now[0], max_entries=1000)
    good = key_for(db, TENANT_A)
    attacker = client(app, "sk_0123456789abcdef_wrong", client=("203.0.113.7", 4000))
    codes = [attacker.get("/v1/jobs").status_code for _ in range(7)]
    assert codes == [401] * 5 + [429] * 2
    r = attacker.get("/v1/jobs")
    assert r.json()["code"] == "RATE_LIMITED" and int(r.headers["retry-after"]) >= 1
    # the address is blocked before any key is looked up, a valid key included
    assert client(app, good, client=("203.0.113.7", 4001)).get("/v1/jobs").status_code == 429
    # other addresses are not affected
    assert client(app, "sk_0123456789abcdef_wrong", client=("198.51.100.1", 1)).get("/v1/jobs").status_code == 401
    assert client(app, good, client=("198.51.100.2", 1)).get("/v1/jobs").status_code == 200
    now[0] += 10.0  # the bucket refills
    assert client(app, good, client=("203.0.113.7", 4002)).get("/v1/jobs").status_code == 200
    # successful requests spend no failure tokens
    for _ in range(20):
        assert client(app, good, client=("192.0.2.9", 1)).get("/v1/jobs").status_code == 200


def test_rate_limiter_memory_is_bounded() -> None:
    limiter = RateLimiter(1.0, 2, clock=lambda: 0.0, max_entries=100)
    for i in range(10_000):
        limiter.take(f"198.51.{i // 256}.{i % 256}")
    assert len(limiter) == 100
    assert limiter.take("198.51.39.15") == 0.0  # recent: still tracked (its second and last token)
    assert limiter.take("198.51.39.15") > 0


def test_only_the_documented_bearer_key_authenticates(db: Database) -> None:
    app = make_app(db)
    secret = key_for(db, TENANT_A)
    anon = client(app)
    assert anon.get("/v1/jobs", headers={"x-api-key": secret}).status_code == 401
    assert anon.get("/v1/jobs", headers={"authorization": f"Bearer {secret}"}).status_code == 200
    spec = anon.get("/openapi.json").json()
    scheme = spec["components"]["securitySchemes"]["apiKey"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert spec["security"] == [{"apiKey": []}]
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "security" not in spec["paths"]["/v1/jobs"]["get"] or spec["paths"]["/v1/jobs"]["get"]["security"]
    assert "x-api-key" not in anon.get("/openapi.json").text.lower()


def test_a_key_that_works_is_not_locked_out_by_bad_keys_from_its_address(db: Database) -> None:
    """Clients behind one address (a NAT, a proxy): one presenting bad keys uses up the address's failed-
    authentication budget, and the others, whose keys authenticated within the hour, keep working; a key not seen
    working yet waits like a guess, a revoked one stops at once, and a guess never gets past the limit."""
    from settlekit.api.auth import revoke_api_key
    from settlekit.api.ratelimit import RecentKeys

    app = make_app(db)
    now = [0.0]
    app.state.settlekit.auth_failures = RateLimiter(1.0, 20, clock=lambda: now[0], max_entries=1000)
    app.state.settlekit.recent_keys = RecentKeys(ttl=3600.0, clock=lambda: now[0])
    nat = ("203.0.113.7", 4000)
    working, idle = key_for(db, TENANT_A), key_for(db, TENANT_A)
    assert client(app, working, client=nat).get("/v1/jobs").status_code == 200
    attacker = client(app, "sk_0123456789abcdef_wrong", client=nat)
    assert [attacker.get("/v1/jobs").status_code for _ in range(22)] == [401] * 20 + [429] * 2
    for _ in range(5):
        assert client(app, working, client=nat).get("/v1/jobs").status_code == 200
    assert client(app, idle, client=nat).get("/v1/jobs").status_code == 429  # not seen working: waits
    guess = working[:-1] + ("A" if working[-1] != "A" else "B")
    assert client(app, guess, client=nat).get("/v1/jobs").status_code == 429  # a guess at a working key
    now[0] += 3601.0  # an hour without a request: no longer known, the address's budget refilled meanwhile
    assert client(app, working, client=nat).get("/v1/jobs").status_code == 200
    assert [attacker.get("/v1/jobs").status_code for _ in range(21)] == [401] * 20 + [429]
    revoke_api_key(db, working.split("_")[1])
    assert client(app, working, client=nat).get("/v1/jobs").status_code == 401  # revoked: looked up, refused
    assert working not in app.state.settlekit.recent_keys
    assert client(app, working, client=nat).get("/v1/jobs").status_code == 429


def test_a_405_allows_every_method_of_the_path(db: Database) -> None:
    """For every documented path, a method it does not serve is 405 METHOD_NOT_ALLOWED whose `Allow` lists every
    method the document gives the path (Starlette named only the first matching route's: GET where PATCH is served
    too, POST where GET is)."""
    import re

    app = make_app(db)
    api = client(app, key_for(db, TENANT_A, ["jobs:read", "jobs:write", "finance:write", "ops", "admin"]))
    paths = app.openapi()["paths"]
    methods = {path: {m.upper() for m in ops if m in ("get", "post", "put", "patch", "delete")}
               for path, ops in paths.items()}
    # a parameter is one path segment; a delivery id is a token of 16 or more characters or digits (its route's
    # convertor), so /v1/deliveries/requeue is not a delivery's URL
    templates = {path: re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path).replace(
        re.escape("{delivery_id}"), "[0-9]+")) + "$") for path in paths}
    checked = 0
    for path in paths:
        concrete = re.sub(r"\{[^}]+\}", "x1", path.replace("{delivery_id}", "1"))
        # the methods of every documented path this URL matches
        served = set().union(*(methods[p] for p, pattern in templates.items() if pattern.match(concrete)))
        for method in ("PUT", "DELETE", "PATCH", "POST"):
            if method in served:
                continue
            r = api.request(method, concrete)
            assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED", (method, path, r.text)
            assert set(r.headers["allow"].split(", ")) == served, (method, path, r.headers["allow"])
            checked += 1
    assert checked > 50
