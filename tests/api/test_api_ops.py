"""Operator routes: destinations (write-only secrets), deliveries and requeue, signer key rotation/revocation,
artifacts, readiness, metrics, and the `settlekit keys` CLI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from settlekit.cli.api_keys import api_keys_app
from settlekit.delivery.signing import generate_secret
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.store.db import Database, connect
from support.api import TENANT_A, Seeded, client, key_for, make_app, seed_tenant


@pytest.fixture
def seeded_env(db: Database) -> Iterator[tuple[Database, Any, Seeded]]:
    app = make_app(db)
    api = client(app, key_for(db, TENANT_A))
    yield db, api, seed_tenant(db, api)


def test_destinations_secret_is_write_only(seeded_env: tuple[Database, Any, Seeded]) -> None:
    db, api, seeded = seeded_env
    secret = generate_secret()
    r = api.post("/v1/destinations", json={"destinationId": "dst_2", "url": "http://127.0.0.1:9/x",
                                          "secret": secret, "artifactTypes": ["WorkCertificate"]})
    assert r.status_code == 201, r.text
    assert r.json()["artifactTypes"] == ["WorkCertificate"] and r.json()["status"] == "active"
    texts = [r.text, api.get("/v1/destinations").text, api.get("/v1/destinations/dst_2").text]
    r = api.patch("/v1/destinations/dst_2", json={"url": "http://127.0.0.1:9/y", "signing": "both"})
    assert r.status_code == 200 and r.json()["url"] == "http://127.0.0.1:9/y" and r.json()["signing"] == "both"
    texts.append(r.text)
    for text in texts:
        assert secret not in text and "whsec_" not in text
    r = api.post("/v1/destinations/dst_2/disable", json={"reason": "maintenance"})
    assert r.json()["status"] == "disabled" and r.json()["disabledReason"] == "maintenance"
    assert api.post("/v1/destinations/dst_2/enable").json()["status"] == "active"
    # refused inputs: SSRF guard (metadata address), unknown fields, both secret forms, bad id
    for body, code in (
            ({"destinationId": "dst_3", "url": "http://169.254.169.254/", "secret": secret}, None),
            ({"destinationId": "dst_3", "url": "http://127.0.0.1:9/", "secret": secret, "bogus": 1},
             "SCHEMA_INVALID"),
            ({"destinationId": "dst_3", "url": "http://127.0.0.1:9/", "secret": secret,
              "secretRef": "file:/x"}, "SCHEMA_INVALID"),
            ({"destinationId": "bad id!", "url": "http://127.0.0.1:9/", "secret": secret}, "SCHEMA_INVALID"),
            ({"destinationId": "dst_3", "url": "http://127.0.0.1:9/", "secret": secret,
              "allowPrivateNetwork": "yes"}, "SCHEMA_INVALID")):
        r = api.post("/v1/destinations", json=body)
        assert 400 <= r.status_code < 500, r.text
        if code:
            assert r.json()["code"] == code
    assert api.get("/v1/destinations/dst_3").status_code == 404


def test_disable_reasons_are_not_metric_labels(db: Database) -> None:
    """A disable's free text is its disabledReason, never a label value: 30 reasons, one series on /metrics."""
    app = make_app(db)
    api = client(app, key_for(db, TENANT_A))
    r = api.post("/v1/destinations", json={"destinationId": "dst_m", "url": "http://127.0.0.1:9/m",
                                          "secret": generate_secret()})
    assert r.status_code == 201, r.text
    for i in range(30):
        r = api.post("/v1/destinations/dst_m/disable", json={"reason": f"tenant text {i}"})
        assert r.status_code == 200 and r.json()["disabledReason"] == f"tenant text {i}", r.text
    text = client(app, key_for(db, "system", ["ops"])).get("/metrics").text
    series = [line for line in text.splitlines() if line.startswith("settlekit_destinations_disabled_total")]
    assert series == ['settlekit_destinations_disabled_total{reason="operator"} 30.0']
    assert "tenant text" not in text


def test_deliveries_and_requeue(seeded_env: tuple[Database, Any, Seeded]) -> None:
    db, api, seeded = seeded_env
    pending = api.get("/v1/deliveries", params={"state": "pending"}).json()["deliveries"]
    assert pending and all(d["state"] == "pending" for d in pending)
    assert api.get("/v1/deliveries", params={"state": "failed"}).json()["deliveries"] == []
    assert api.get("/v1/deliveries", params={"state": "nope"}).status_code == 400
    r = api.post(f"/v1/deliveries/{seeded.delivery_id}/requeue")
    assert r.status_code == 409 and r.json()["details"]["state"] == "pending"
    with db.transaction() as tx:
        tx.execute("UPDATE deliveries SET state = 'failed', attempts = 5 WHERE id = ?", (seeded.delivery_row,))
    r = api.post(f"/v1/deliveries/{seeded.delivery_id}/requeue")
    assert r.status_code == 200, r.text
    detail = api.get(f"/v1/deliveries/{seeded.delivery_id}").json()
    assert detail["state"] == "pending" and detail["attempts"] == 0 and detail["attemptLog"] == []
    with db.transaction() as tx:
        tx.execute("UPDATE deliveries SET state = 'failed' WHERE tenant_id = ?", (TENANT_A,))
    r = api.post(f"/v1/destinations/{seeded.destination_id}/requeue")
    assert r.status_code == 200 and r.json()["requeued"] == len(api.get("/v1/deliveries").json()["deliveries"])
    unknown = "A" * 32  # not a delivery id of this tenant
    assert api.get(f"/v1/deliveries/{unknown}").status_code == 404
    assert api.post(f"/v1/deliveries/{unknown}/requeue").status_code == 404
    for path in (f"/v1/deliveries/{seeded.delivery_row}", f"/v1/deliveries/{seeded.delivery_row}/requeue"):
        r = api.get(path) if path.endswith(str(seeded.delivery_row)) else api.post(path)
        assert r.status_code == 400 and r.json()["code"] == "CURSOR_NUMERIC", r.text


def test_artifacts_routes(seeded_env: tuple[Database, Any, Seeded]) -> None:
    db, api, seeded = seeded_env
    listed = api.get(f"/v1/jobs/{seeded.job_id}/artifacts").json()
    types = sorted(a["artifactType"] for a in listed["artifacts"])
    assert types == sorted(a["artifactType"] for a in seeded.vector["artifacts"])
    one = api.get(f"/v1/artifacts/{seeded.artifact_id}").json()
    assert one["artifactId"] == seeded.artifact_id and one["tenantId"] == TENANT_A
    eff = api.get(f"/v1/jobs/{seeded.job_id}/artifacts/effective", params={"type": "SettlementStatement"})
    assert eff.status_code == 200 and eff.json()["artifactType"].startswith("SettlementStatement")
    r = api.get(f"/v1/jobs/{seeded.job_id}/artifacts/effective", params={"type": "CreditMemo"})
    assert r.status_code == 404 and r.json()["code"] == "ARTIFACT_NOT_FOUND"
    r = api.get(f"/v1/jobs/{seeded.job_id}/artifacts", params={"type": "Nope"})
    assert r.status_code == 400
    page = api.get(f"/v1/jobs/{seeded.job_id}/artifacts", params={"limit": 1}).json()
    assert len(page["artifacts"]) == 1 and page["nextCursor"]
    assert api.get("/v1/artifacts/art_missing").status_code == 404


def test_signer_keys_rotate_and_revoke(seeded_env: tuple[Database, Any, Seeded]) -> None:
    db, api, seeded = seeded_env
    robot = next(s for s in seeded.vector["signers"] if s["role"] == "robot")
    keys = {k["keyId"]: k for k in api.get("/v1/keys").json()["keys"]}
    assert set(keys) == set(seeded.key_ids) and all(k["status"] == "active" for k in keys.values())
    successor = Signer.generate()
    r = api.post(f"/v1/keys/{robot['keyId']}/rotate", json={"publicKeyPem": successor.public_key_pem})
    assert r.status_code == 200, r.text
    assert r.json()["rotated"]["status"] == "rotated" and r.json()["successor"]["keyId"] == successor.key_id
    assert r.json()["successor"]["purpose"] == "robot"
    r = api.post(f"/v1/keys/{successor.key_id}/revoke")
    assert r.status_code == 200 and r.json()["status"] == "revoked"
    # a new robot event signed with the revoked key is refused; nothing is stored
    head = api.get(f"/v1/jobs/{seeded.job_id}").json()
    draft = make_draft(stream_id=seeded.job_id, type="JOB_HEARTBEAT", actor={"type": "robot", "id": "rob_1"},
                       payload={}, at="2026-01-05T11:00:00.000Z")
    event = finalize(draft, head["headChainHash"], successor)
    r = api.post(f"/v1/jobs/{seeded.job_id}/events", json=event)
    assert r.status_code == 400 and r.json()["code"] == "SIGNER_KEY_NOT_ACTIVE", r.text
    assert api.get(f"/v1/jobs/{seeded.job_id}").json()["version"] == head["version"]
    assert api.post("/v1/keys/key_missing/revoke").status_code == 404
    r = api.post("/v1/keys", json={"publicKeyPem": "not a pem", "purpose": "robot"})
    assert r.status_code == 400
    r = api.post("/v1/keys", json={"publicKeyPem": successor.public_key_pem, "purpose": "wizard"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "body.purpose"



def test_a_revoked_signer_key_is_never_rotated(seeded_env: tuple[Database, Any, Seeded]) -> None:
    """Revocation is final: rotating a revoked key answers 409 SIGNER_KEY_STATUS_CONFLICT, leaves it revoked and
    registers no successor (before, the key became `rotated` and the successor was registered). Rotating or
    revoking again is allowed and keeps the status."""
    db, api, seeded = seeded_env
    robot = next(s for s in seeded.vector["signers"] if s["role"] == "robot")
    assert api.post(f"/v1/keys/{robot['keyId']}/revoke").json()["status"] == "revoked"
    successor = Signer.generate()
    r = api.post(f"/v1/keys/{robot['keyId']}/rotate", json={"publicKeyPem": successor.public_key_pem})
    assert r.status_code == 409 and r.json()["code"] == "SIGNER_KEY_STATUS_CONFLICT", r.text
    keys = {k["keyId"]: k["status"] for k in api.get("/v1/keys").json()["keys"]}
    assert keys[robot["keyId"]] == "revoked" and successor.key_id not in keys
    assert api.post(f"/v1/keys/{robot['keyId']}/revoke").json()["status"] == "revoked"
    operator = next(s for s in seeded.vector["signers"] if s["role"] == "operator")
    for _ in range(2):
        r = api.post(f"/v1/keys/{operator['keyId']}/rotate")
        assert r.status_code == 200 and r.json()["rotated"]["status"] == "rotated", r.text
    assert api.post(f"/v1/keys/{operator['keyId']}/revoke").json()["status"] == "revoked"


def test_rotating_with_a_successor_of_a_conflicting_purpose_changes_nothing(
        seeded_env: tuple[Database, Any, Seeded]) -> None:
    """The successor takes the rotated key's purpose; when that key is registered with another purpose the rotation
    is refused (409 SIGNER_KEY_CONFLICT) and the old key stays active: both changes are one transaction."""
    db, api, seeded = seeded_env
    robot = next(s for s in seeded.vector["signers"] if s["role"] == "robot")
    other = Signer.generate()
    assert api.post("/v1/keys", json={"publicKeyPem": other.public_key_pem, "purpose": "operator"}).status_code == 201
    r = api.post(f"/v1/keys/{robot['keyId']}/rotate", json={"publicKeyPem": other.public_key_pem})
    assert r.status_code == 409 and r.json()["code"] == "SIGNER_KEY_CONFLICT", r.text
    keys = {k["keyId"]: k for k in api.get("/v1/keys").json()["keys"]}
    assert keys[robot["keyId"]]["status"] == "active" and keys[other.key_id]["purpose"] == "operator"

def test_readyz_and_metrics(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db = connect(sqlite_url)
    db.migrate()
    try:
        app = make_app(db)
        anon = client(app)
        api = client(app, key_for(db, TENANT_A))
        api.get("/v1/jobs")
        api.get("/v1/jobs/job_nope")
        assert anon.get("/metrics").status_code == 401
        assert api.get("/metrics").status_code == 403  # a tenant's key: not the operator tenant
        text = client(app, key_for(db, "system", ["ops"])).get("/metrics").text
        assert 'settlekit_api_requests_total{method="GET",route="/v1/jobs",status="200"} 1.0' in text
        assert 'route="/v1/jobs/{job_id}",status="404"' in text
        monkeypatch.setattr(type(db), "pending_migrations", lambda self: ["0099_future"])
        r = anon.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "MIGRATIONS_PENDING"
        assert r.json()["details"]["pendingMigrations"] == ["0099_future"]
    finally:
        db.close()


def test_keys_cli(sqlite_url: str) -> None:
    runner = CliRunner()
    r = runner.invoke(api_keys_app, ["create", "--db", sqlite_url, "--tenant", "t1", "--scopes", "jobs:read,ops"])
    assert r.exit_code == 0, r.output
    secret = r.stdout.strip().splitlines()[-1]
    assert secret.startswith("sk_")
    db = connect(sqlite_url)
    try:
        api = client(make_app(db), secret)
        assert api.get("/v1/jobs").status_code == 200
        assert api.post("/v1/jobs", json={"payload": {"templateId": "t"}}).status_code == 403
        key_id = secret.split("_")[1]
        listed = runner.invoke(api_keys_app, ["list", "--db", sqlite_url])
        assert key_id in listed.stdout and secret not in listed.stdout
        assert runner.invoke(api_keys_app, ["revoke", "--db", sqlite_url, key_id]).exit_code == 0
        assert api.get("/v1/jobs").status_code == 401
    finally:
        db.close()
    bad = runner.invoke(api_keys_app, ["create", "--db", sqlite_url, "--tenant", "t1", "--scopes", "root"])
    assert bad.exit_code == 2
