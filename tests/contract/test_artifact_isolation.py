"""One tenant's artifact conflict never halts the shared artifacts consumer. An artifact id is settld's
`<prefix>_<jobId>_<eventId>`, and job and event ids may hold `_`: a tenant's job `job_x_y` settled by event `z`
and its job `job_x` settled by event `y_z` both give `cert_job_x_y_z`. The second conflicts with the stored first
(ARTIFACT_ANCHOR_CONFLICT, as settld's store refuses it too). Before, that conflict halted the consumer on that
event until it was dead: no tenant's artifacts were built, nothing was delivered. Now the event is dead-lettered
at once (`skip_permanent_error`) and the consumer goes on."""

from __future__ import annotations

import json
from typing import Any

from conftest import load_vector
from settlekit.application.consumers import dead_letters
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.events.envelope import Signer, finalize
from settlekit.projections.artifacts import CONSUMER_NAME, artifacts_consumer
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, key_for, make_app

_DERIVED = ("payloadHash", "prevChainHash", "chainHash", "signature", "signerKeyId")


def _moved(vector: dict[str, Any], job_id: str, event_ids: list[str], tenant: str) -> list[dict[str, Any]]:
    """The vector's events moved to `job_id`, `event_ids` and `tenant`, chained and signed again."""
    old_job = vector["events"][0]["streamId"]
    signers = {s["keyId"]: Signer.from_pem(s["privateKeyPem"], s["publicKeyPem"]) for s in vector["signers"]}
    out: list[dict[str, Any]] = []
    for event, event_id in zip(vector["events"], event_ids, strict=True):
        text = json.dumps({k: v for k, v in event.items() if k not in _DERIVED})
        draft = json.loads(text.replace(old_job, job_id).replace('"tenant_default"', json.dumps(tenant)))
        draft.update({"id": event_id, **{k: None for k in _DERIVED}})
        out.append(finalize(draft, out[-1]["chainHash"] if out else None, signers.get(event.get("signerKeyId"))))
    return out


def _append(api: Any, vector: dict[str, Any], job_id: str, events: list[dict[str, Any]]) -> None:
    for signer in vector["signers"]:
        api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"], "purpose": signer["role"]})
    for event in events:
        r = api.post(f"/v1/jobs/{job_id}/events", json=event)
        assert r.status_code == 201, r.text


def test_colliding_artifact_ids_of_one_tenant_do_not_stop_other_tenants_artifacts(db: Database) -> None:
    app = make_app(db)
    tenant_a, tenant_b = client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))
    vector = load_vector("settle_completed.json")
    n = len(vector["events"])
    _append(tenant_a, vector, "job_x_y", _moved(vector, "job_x_y", [f"a1_{i}" for i in range(n - 1)] + ["z"], TENANT_A))
    _append(tenant_a, vector, "job_x", _moved(vector, "job_x", [f"a2_{i}" for i in range(n - 1)] + ["y_z"], TENANT_A))
    _append(tenant_b, vector, "job_b", _moved(vector, "job_b", [f"b_{i}" for i in range(n)], TENANT_B))
    dispatcher = Dispatcher(db, [artifacts_consumer(sink=WebhookDeliverySink())], listen=False)
    dispatcher.drain(30)
    state = dispatcher.state(CONSUMER_NAME)
    assert state is not None and state.status != "dead" and state.last_error is None, state
    assert tenant_b.get("/v1/jobs/job_b/artifacts").json()["artifacts"], "tenant B got no artifacts"
    first = tenant_a.get("/v1/jobs/job_x_y/artifacts").json()["artifacts"]
    assert "cert_job_x_y_z" in {a["artifactId"] for a in first}
    second = tenant_a.get("/v1/jobs/job_x/artifacts").json()["artifacts"]
    assert all(a["jobId"] == "job_x" for a in second), second
    letters = dead_letters(db, CONSUMER_NAME)
    assert [(d["reason"], d["errorClass"]) for d in letters] == [("skip_permanent_error", "ArtifactConflict")], letters
    assert letters[0]["eventId"] == "y_z"
