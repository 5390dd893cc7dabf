"""Webhook secrets through the API (issue 11 items 1, 2, 6 and rotation), on both backends: a tenant names
only its own stored secrets, by the opaque id the server issued; paths are refused without telling whether
they exist; ids are checked before anything is written; a refused request writes nothing; a rotation signs
with both secrets until its grace period ends (checked with the official `standardwebhooks` library)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.receiver import ReceiverServer
from settlekit.delivery.secrets import SecretResolver
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.events.canonical import canonical_hash
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, key_for, make_app

URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any, Any]]:
    app = make_app(db)
    yield db, client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))


def _counts(db: Database) -> tuple[int, int]:
    with db.read() as tx:
        return (int(tx.scalar("SELECT count(*) FROM webhook_secrets")),
                int(tx.scalar("SELECT count(*) FROM destinations")))


def test_secret_values_are_stored_per_tenant_and_never_returned(env: tuple[Database, Any, Any]) -> None:
    db, api, _ = env
    secret = generate_secret()
    r = api.post("/v1/destinations", json={"destinationId": "d1", "url": URL, "secret": secret})
    assert r.status_code == 201, r.text
    ref = r.json()["secretRef"]
    assert ref.startswith("sec_") and len(ref) == 36
    with db.read() as tx:
        row = tx.fetchone("SELECT tenant_id, secret FROM webhook_secrets WHERE secret_id = ?", (ref,))
        stored_ref = tx.scalar("SELECT secret_ref FROM destinations WHERE destination_id = 'd1'")
    assert row == (TENANT_A, secret) and stored_ref == f"secret:{ref}"
    for text in (r.text, api.get("/v1/destinations").text, api.get("/v1/destinations/d1").text):
        assert secret not in text and "whsec_" not in text
    # the tenant may reuse its own secret by id
    r = api.post("/v1/destinations", json={"destinationId": "d2", "url": URL, "secretRef": ref})
    assert r.status_code == 201 and r.json()["secretRef"] == ref
    assert _counts(db) == (1, 2)


@pytest.mark.parametrize("secret", ["a\x0bb", "a\u2028b", "a\x85b", " padded", "padded ", "\u3000"])
def test_a_secret_is_one_line_as_it_is_read_back(env: tuple[Database, Any, Any], secret: str) -> None:
    """A secret by value is stored as text and read back split into lines and stripped: one holding a line break
    of Python's (\\v, U+2028, U+0085, …) signed with two secrets, one with white space around it with another than
    given, one of white space only with none (every delivery and test send failed). Each is refused; nothing is
    written."""
    db, api, _ = env
    r = api.post("/v1/destinations", json={"destinationId": "d1", "url": URL, "secret": secret,
                                           "signing": "settld_legacy"})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    assert _counts(db) == (0, 0)
    r = api.post("/v1/destinations", json={"destinationId": "d1", "url": URL, "secret": "a b\tc",
                                           "signing": "settld_legacy"})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_path_references_are_refused_without_an_oracle(env: tuple[Database, Any, Any], tmp_path: Path,
                                                       method: str) -> None:
    """Item 1: `file:` (existing or missing, the other tenant's or a system file), `env:`, `inline:` and bare
    paths all get one answer, which names no path; the file system is never consulted."""
    db, api, _ = env
    assert api.post("/v1/destinations", json={"destinationId": "d1", "url": URL,
                                              "secret": generate_secret()}).status_code == 201
    existing = tmp_path / "other-tenant.secret"
    existing.write_text(generate_secret() + "\n")
    refs = [f"file:{existing}", f"file:{tmp_path / 'missing.secret'}", "file:/etc/passwd", "file:/etc/shadow",
            "file:relative/x", "env:HOME", "inline:" + generate_secret(), "/etc/passwd", "../../etc/passwd",
            "secret:sec_" + "0" * 32, "sec_" + "0" * 31, "SEC_" + "0" * 32]
    before = _counts(db)
    bodies = set()
    same_id = {"X-Request-Id": "req-same"}  # the bodies are compared whole, the request id included
    for ref in refs:
        if method == "POST":
            r = api.post("/v1/destinations", json={"destinationId": "d9", "url": URL, "secretRef": ref},
                         headers=same_id)
        else:
            r = api.patch("/v1/destinations/d1", json={"secretRef": ref}, headers=same_id)
        assert r.status_code == 400 and r.json()["code"] == "SECRET_REF_FORBIDDEN", r.text
        assert str(tmp_path) not in r.text and "/etc" not in r.text and ref not in r.text
        bodies.add(r.text)
    assert len(bodies) == 1  # the same answer for every reference: nothing to learn
    assert _counts(db) == before


def test_a_tenant_cannot_name_another_tenants_secret(env: tuple[Database, Any, Any]) -> None:
    db, api_a, api_b = env
    r = api_a.post("/v1/destinations", json={"destinationId": "d1", "url": URL, "secret": generate_secret()})
    a_ref = r.json()["secretRef"]
    assert api_b.post("/v1/destinations", json={"destinationId": "b1", "url": URL,
                                                "secret": generate_secret()}).status_code == 201
    before = _counts(db)
    unknown = "sec_" + "f" * 32
    answers = []
    same_id = {"X-Request-Id": "req-same"}  # the bodies are compared whole, the request id included
    for ref in (a_ref, unknown):
        r = api_b.post("/v1/destinations", json={"destinationId": "b2", "url": URL, "secretRef": ref},
                       headers=same_id)
        assert r.status_code == 400 and r.json()["code"] == "SECRET_NOT_FOUND", r.text
        p = api_b.patch("/v1/destinations/b1", json={"secretRef": ref}, headers=same_id)
        assert p.status_code == 400 and p.json()["code"] == "SECRET_NOT_FOUND", p.text
        answers.append((r.text.replace(ref, "X"), p.text.replace(ref, "X")))
    assert answers[0] == answers[1]  # another tenant's id looks exactly like one that does not exist
    assert _counts(db) == before
    with db.read() as tx:
        b_refs = {r[0] for r in tx.fetchall("SELECT secret_ref FROM destinations WHERE tenant_id = ?", (TENANT_B,))}
    assert f"secret:{a_ref}" not in b_refs
    # the resolver itself is scoped: tenant B's lookup of A's id finds nothing
    with db.read() as tx, pytest.raises(Exception) as exc:
        SecretResolver().resolve(f"secret:{a_ref}", tx=tx, tenant_id=TENANT_B)
    assert getattr(exc.value, "code", None) == "SECRET_NOT_FOUND"


@pytest.mark.parametrize("bad_id", ["../../../../tmp/x", "a/b", "x/../../y", "..", ".hidden", "a b", "a:b",
                                    "/abs", "d" * 65, "é"])
def test_ids_are_checked_before_anything_is_written(env: tuple[Database, Any, Any], tmp_path: Path,
                                                     bad_id: str) -> None:
    """Item 2: a bad destinationId is refused (400) and nothing is written: no row, no secret, no file."""
    db, api, _ = env
    before = _counts(db)
    files_before = sorted(p for p in tmp_path.rglob("*"))
    r = api.post("/v1/destinations", json={"destinationId": bad_id, "url": URL, "secret": generate_secret()})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    assert _counts(db) == before
    assert sorted(p for p in tmp_path.rglob("*")) == files_before


def test_refused_creates_leave_no_secret_behind(env: tuple[Database, Any, Any]) -> None:
    """Item 6: every refused create or update writes nothing (the secret is stored only with its
    destination, in one transaction)."""
    db, api, _ = env
    good = {"destinationId": "d1", "url": URL, "secret": generate_secret()}
    assert api.post("/v1/destinations", json=good).status_code == 201
    before = _counts(db)
    refused = [
        ({**good, "destinationId": "d2", "url": "http://169.254.169.254/latest"}, "DESTINATION_URL_FORBIDDEN"),
        ({**good, "destinationId": "d2", "url": "ftp://127.0.0.1/"}, "DESTINATION_URL_FORBIDDEN"),
        ({**good, "destinationId": "d2", "secret": "not-a-whsec"}, "WEBHOOK_SECRET_INVALID"),
        ({**good, "destinationId": "d2", "secret": "whsec_***"}, "WEBHOOK_SECRET_INVALID"),
        ({**good, "destinationId": "d2", "secret": "whsec_a\nwhsec_b"}, "SCHEMA_INVALID"),
        ({**good, "secret": generate_secret()}, "CONFLICT"),  # d1 exists
        ({**good, "destinationId": "d2", "secretRef": "sec_" + "1" * 32}, "SCHEMA_INVALID"),  # both forms
        ({"destinationId": "d2", "url": URL}, "SCHEMA_INVALID"),  # no secret
    ]
    for _ in range(3):
        for body, code in refused:
            r = api.post("/v1/destinations", json=body)
            assert 400 <= r.status_code < 500 and r.json()["code"] == code, r.text
        r = api.patch("/v1/destinations/d1", json={"url": "http://169.254.169.254/", "secret": generate_secret()})
        assert r.status_code == 400 and r.json()["code"] == "DESTINATION_URL_FORBIDDEN"
        r = api.patch("/v1/destinations/nope", json={"secret": generate_secret()})
        assert r.status_code == 404
    assert _counts(db) == before


def test_rotation_keeps_the_old_secret_for_its_grace_then_drops_it(env: tuple[Database, Any, Any]) -> None:
    db, api, _ = env
    old, new = generate_secret(), generate_secret()
    first = api.post("/v1/destinations", json={"destinationId": "d1", "url": URL, "secret": old}).json()
    r = api.patch("/v1/destinations/d1", json={"secret": new})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["previousSecretRef"] == first["secretRef"] and body["secretRef"] != first["secretRef"]
    until = datetime.fromisoformat(body["previousSecretExpiresAt"].replace("Z", "+00:00"))
    assert timedelta(hours=23) < until - datetime.now(UTC) <= timedelta(hours=24)
    with db.read() as tx:
        dest = store.get_destination(tx, TENANT_A, "d1")
        assert dest is not None
        resolver = SecretResolver()
        assert resolver.for_destination(tx, dest, datetime.now(UTC)) == [old, new]  # oldest first
        assert resolver.for_destination(tx, dest, until + timedelta(seconds=1)) == [new]
    assert _counts(db)[0] == 2
    # once the grace is over, the next save of any of the tenant's destinations deletes the old secret
    past = datetime.now(UTC) - timedelta(seconds=1)
    with db.transaction() as tx:
        tx.execute("UPDATE destinations SET previous_secret_expires_at = ? WHERE destination_id = 'd1'",
                   (store.db_time(tx, past),))
    assert api.get("/v1/destinations/d1").json()["previousSecretRef"] is None
    assert api.post("/v1/destinations", json={"destinationId": "d2", "url": URL,
                                              "secretRef": body["secretRef"]}).status_code == 201
    assert _counts(db) == (1, 2)
    with db.read() as tx:
        assert tx.scalar("SELECT previous_secret_ref FROM destinations WHERE destination_id = 'd1'") is None
    # a rotation with no grace ends the old secret at once, and the unused secret is deleted
    r = api.patch("/v1/destinations/d2", json={"secret": generate_secret(), "secretGraceSeconds": 0})
    assert r.status_code == 200 and r.json()["previousSecretRef"] is None
    assert _counts(db)[0] == 2  # d1's (shared until now) and d2's new one
    r = api.patch("/v1/destinations/d1", json={"secret": generate_secret(), "secretGraceSeconds": 0})
    assert _counts(db)[0] == 2  # the formerly shared secret is gone
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM webhook_secrets WHERE secret = ?", (new,)) == 0
    r = api.patch("/v1/destinations/d1", json={"secretGraceSeconds": -1, "secret": new})
    assert r.status_code == 400


def _artifact(tenant: str, n: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
                           "artifactId": f"cert_job{n}_evt_1", "tenantId": tenant, "jobId": f"job{n}",
                           "jobVersion": 1}
    doc["artifactHash"] = canonical_hash(doc)
    return doc


def _deliver(db: Database, docs: dict[tuple[str, str], dict[str, Any]]) -> None:
    worker = DeliveryWorker(
        db, artifact_loader=lambda tx, tenant, aid: docs.get((tenant, aid)),
        config=WorkerConfig(allow_insecure_http=True, allow_loopback=True,
                            sender=SenderConfig(timeout=5.0, connect_timeout=2.0)))

    async def go() -> None:
        async with worker:
            await worker.run_once()

    asyncio.run(go())


def test_deliveries_during_a_rotation_verify_with_either_secret(env: tuple[Database, Any, Any]) -> None:
    """Standard Webhooks multi-signature: during the grace period every delivery carries one `v1,` entry per
    secret (space separated), so receivers holding either secret accept it; afterwards only the new one."""
    db, api, _ = env
    old, new = generate_secret(), generate_secret()
    with ReceiverServer(secrets=[new]) as rx:
        url = f"{rx.url}hook"
        assert api.post("/v1/destinations", json={"destinationId": "d1", "url": url, "secret": old}).status_code == 201
        assert api.patch("/v1/destinations/d1", json={"secret": new}).status_code == 200
        docs: dict[tuple[str, str], dict[str, Any]] = {}
        doc = _artifact(TENANT_A, 1)
        docs[(TENANT_A, doc["artifactId"])] = doc
        with db.transaction() as tx:
            assert enqueue_artifact(tx, TENANT_A, doc, now=datetime.now(UTC)) == 1
        _deliver(db, docs)
        assert len(rx.requests) == 1 and rx.requests[0].status == 200
        req = rx.requests[0]
        signatures = req.headers["webhook-signature"].split(" ")
        assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
        for secret in (old, new):
            assert Webhook(secret).verify(req.body, req.headers) == doc
        with pytest.raises(WebhookVerificationError):
            Webhook(generate_secret()).verify(req.body, req.headers)
        # end the grace period: the next delivery is signed with the new secret only
        r = api.patch("/v1/destinations/d1", json={"secret": new, "secretGraceSeconds": 0})
        assert r.status_code == 200 and r.json()["previousSecretRef"] is None
        doc2 = _artifact(TENANT_A, 2)
        docs[(TENANT_A, doc2["artifactId"])] = doc2
        with db.transaction() as tx:
            assert enqueue_artifact(tx, TENANT_A, doc2, now=datetime.now(UTC)) == 1
        _deliver(db, docs)
        assert len(rx.requests) == 2
        req = rx.requests[1]
        assert len(req.headers["webhook-signature"].split(" ")) == 1
        assert Webhook(new).verify(req.body, req.headers) == doc2
        with pytest.raises(WebhookVerificationError):
            Webhook(old).verify(req.body, req.headers)


def test_switching_to_standard_signing_ends_the_grace_of_a_secret_that_cannot_sign_that_way(db: Database) -> None:
    """A legacy-signed destination moved to Standard Webhooks with a new whsec_ secret (a PATCH: a rotation). The
    old secret is not a whsec_ one, so it cannot sign the new way; before, it was kept for the grace (24 h) and
    every delivery failed before sending (secret_ref_invalid), and the test send answered 400. Now its grace ends at
    once: the test send and a worker's delivery are signed with the new secret only and verify."""
    app = make_app(db)
    api = client(app, key_for(db, TENANT_A))
    new = generate_secret()
    with ReceiverServer(secrets=[new]) as rx:
        r = api.post("/v1/destinations", json={"destinationId": "d1", "url": f"{rx.url}hook",
                                               "signing": "settld_legacy", "secret": "a-legacy-shared-secret"})
        assert r.status_code == 201, r.text
        r = api.patch("/v1/destinations/d1", json={"signing": "standard", "secret": new})
        assert r.status_code == 200, r.text
        sent = api.post("/v1/destinations/d1/test")
        assert sent.status_code == 200, sent.text
        doc = {"schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
               "artifactId": "cert_j_e", "tenantId": TENANT_A, "jobId": "j", "jobVersion": 1}
        doc["artifactHash"] = canonical_hash(doc)
        with db.transaction() as tx:
            assert enqueue_artifact(tx, TENANT_A, doc, now=datetime.now(UTC)) == 1
        worker = DeliveryWorker(db, artifact_loader=lambda tx, t, a: doc if a == doc["artifactId"] else None,
                                config=WorkerConfig(allow_insecure_http=True, allow_loopback=True,
                                                    sender=SenderConfig(timeout=5.0, connect_timeout=2.0)))

        async def one_pass() -> None:
            async with worker:
                await worker.run_once()

        asyncio.run(one_pass())
        with db.read() as tx:
            (delivery,) = store.list_deliveries(tx, TENANT_A)
        assert (delivery.state, delivery.last_error) == ("delivered", None)
        assert len(rx.requests) == 2  # the test send and the delivery, each verified by the receiver
