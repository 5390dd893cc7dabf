"""The answers are the ones the OpenAPI document declares, on both backends: schemathesis' conformance checks
(status code, content type, body schema, required headers) over explicit requests that random generation rarely
makes: the successful writes (create, append, register, rotate, replay), the ops verbs on a live consumer, the
metrics, and the errors every route shares (401, 404, 409, 413, 428, 429). The property-based run over every
operation (test_api_schemathesis.py) applies the same checks to generated requests."""

from __future__ import annotations

from typing import Any

import pytest

from settlekit.events.envelope import Signer
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app, seed_tenant

schemathesis = pytest.importorskip("schemathesis")
from support.conformance import nonconformance  # noqa: E402

QUOTE = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p1"},
         "payload": {"amountCents": 6500, "currency": "USD"}}


class Checked:
    """Requests made as schemathesis cases of one app's document, each answer checked for conformance."""

    def __init__(self, app: Any, key: str):
        self.schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        self.key = key

    def __call__(self, method: str, path: str, status: int, *, key: str | None = None, code: str | None = None,
                 **parts: Any) -> Any:
        case = self.schema[path][method].Case(**parts)
        headers = {"Authorization": f"Bearer {key or self.key}"} if (key or self.key) else {}
        response = case.call(headers=headers)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text[:400]}"
        assert nonconformance(case, response) is None, f"{method} {path}: {nonconformance(case, response)}"
        if code is not None:
            assert response.json()["code"] == code, response.text
        return response


def test_successful_writes_and_reads_conform(db: Database) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A)
    seeded = seed_tenant(db, client(app, key))
    call = Checked(app, key)
    job = {"job_id": seeded.job_id}

    created = call("POST", "/v1/jobs", 201, body={"payload": {"templateId": "reset_lite", "constraints": {}}},
                   headers={"Idempotency-Key": "create-1"})
    replay = call("POST", "/v1/jobs", 201, body={"payload": {"templateId": "reset_lite", "constraints": {}}},
                  headers={"Idempotency-Key": "create-1"})
    assert replay.headers["idempotent-replayed"] == ["true"] and replay.json() == created.json()
    new_job = created.json()["jobId"]
    call("POST", "/v1/jobs", 409, body={"jobId": new_job, "payload": {"templateId": "t"}}, code="JOB_ALREADY_EXISTS")
    call("POST", "/v1/jobs/{job_id}/events", 201, path_parameters={"job_id": new_job}, body=QUOTE,
         headers={"x-expected-prev-chain-hash": created.json()["headChainHash"]})
    call("POST", "/v1/jobs/{job_id}/events", 428, path_parameters={"job_id": new_job}, body=QUOTE,
         code="PRECONDITION_REQUIRED")
    call("POST", "/v1/jobs/{job_id}/events", 200, path_parameters=job, body=seeded.vector["events"][0])
    call("POST", "/v1/jobs/{job_id}/events", 404, path_parameters={"job_id": "job_none"}, body=QUOTE,
         headers={"x-expected-prev-chain-hash": "null"}, code="JOB_NOT_FOUND")

    artifact_type = call("GET", "/v1/artifacts/{artifact_id}", 200,
                         path_parameters={"artifact_id": seeded.artifact_id}).json()["artifactType"]
    call("GET", "/v1/jobs/{job_id}/artifacts/effective", 200, path_parameters=job, query={"type": artifact_type})
    call("GET", "/v1/jobs/{job_id}/export", 200, path_parameters=job)
    call("GET", "/v1/jobs", 400, query={"cursor": "!"}, code="CURSOR_INVALID")

    pem = Signer.generate().public_key_pem
    registered = call("POST", "/v1/keys", 201, body={"publicKeyPem": pem, "purpose": "robot", "entityId": "r9"})
    key_id = {"key_id": registered.json()["keyId"]}
    call("POST", "/v1/keys/{key_id}/rotate", 200, path_parameters=key_id,
         body={"publicKeyPem": Signer.generate().public_key_pem})
    call("POST", "/v1/keys/{key_id}/revoke", 200, path_parameters=key_id)
    call("POST", "/v1/keys/{key_id}/revoke", 404, path_parameters={"key_id": "key_none"},
         code="SIGNER_KEY_NOT_FOUND")


def test_destinations_deliveries_and_ops_conform(db: Database) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A)
    seeded = seed_tenant(db, client(app, key))
    call = Checked(app, key)
    operator = key_for(db, "system", ["admin"])
    dest = {"destination_id": seeded.destination_id}

    call("POST", "/v1/destinations", 201, body={"destinationId": "dst_b", "url": "http://127.0.0.1:9/b",
                                                "secret": "whsec_" + "A" * 43 + "="})
    call("POST", "/v1/destinations/{destination_id}/disable", 200, path_parameters=dest)
    enabled = call("POST", "/v1/destinations/{destination_id}/enable", 200, path_parameters=dest,
                   body={"backfill": True})
    assert enabled.json()["backfill"]["since"] is not None
    call("PATCH", "/v1/destinations/{destination_id}", 200, path_parameters=dest, body={"ordering": "strict_scope"})
    call("POST", "/v1/destinations/{destination_id}/requeue", 200, path_parameters=dest)
    call("GET", "/v1/destinations/{destination_id}", 404, path_parameters={"destination_id": "dst_none"},
         code="NOT_FOUND")
    call("POST", "/v1/deliveries/{delivery_id}/requeue", 409, path_parameters={"delivery_id": seeded.delivery_id},
         code="CONFLICT")  # pending: only failed deliveries are requeued
    call("POST", "/v1/deliveries/requeue", 200, body={"since": "2020-01-01T00:00:00Z"})

    consumer = {"name": "settlekit:artifacts"}
    call("GET", "/metrics", 200, key=operator)
    call("GET", "/metrics", 403, code="OPERATOR_TENANT_REQUIRED")
    call("POST", "/v1/ops/consumers/{name}/restart", 409, key=operator, path_parameters=consumer,
         code="CONSUMER_NOT_DEAD")
    call("POST", "/v1/ops/consumers/{name}/disable", 200, key=operator, path_parameters=consumer)
    call("POST", "/v1/ops/consumers/{name}/enable", 200, key=operator, path_parameters=consumer)
    call("POST", "/v1/ops/consumers/{name}/skip", 200, key=operator, path_parameters=consumer)
    call("POST", "/v1/ops/consumers/{name}/reset", 200, key=operator, path_parameters=consumer, body={"to": 0})
    call("GET", "/v1/ops/consumers/{name}/dead-letters", 200, key=operator, path_parameters=consumer)
    call("GET", "/v1/ops/consumers/{name}", 404, key=operator, path_parameters={"name": "none"},
         code="CONSUMER_NOT_FOUND")


def test_a_consumer_that_never_ran_conforms(db: Database) -> None:
    """A consumer this process runs that has no state yet is listed as `never-run`, as the document says."""
    app = make_app(db, registered_consumers=["settlekit:never"])
    listed = Checked(app, key_for(db, "system", ["admin"]))("GET", "/v1/ops/consumers", 200)
    assert [(c["status"], c["storedStatus"]) for c in listed.json()["consumers"]] == [("never-run", "never-run")]


def test_shared_refusals_conform(db: Database) -> None:
    app = make_app(db, max_body_bytes=1024, rate_limit_per_second=0.001, rate_limit_burst=2)
    key = key_for(db, TENANT_A)
    call = Checked(app, key)
    call("GET", "/v1/jobs", 401, key="sk_0123456789abcdef_nope", code="API_KEY_INVALID")
    call("POST", "/v1/jobs", 413, body={"payload": {"note": "x" * 2048}}, code="PAYLOAD_TOO_LARGE")
    call("GET", "/v1/jobs/{job_id}", 404, path_parameters={"job_id": "job_none"}, code="JOB_NOT_FOUND")
    call("GET", "/v1/jobs/{job_id}", 404, path_parameters={"job_id": ""}, code="NOT_FOUND")  # no 307 to /v1/jobs
    limited = call("GET", "/v1/jobs", 429, code="RATE_LIMITED")
    assert int(limited.headers["retry-after"][0]) >= 1
    call("GET", "/healthz", 200, key="")
    call("GET", "/readyz", 200, key="")
