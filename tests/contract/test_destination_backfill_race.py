"""A destination disabled while a dispatcher turn is running: the turn's artifacts carry the turn's start time,
before `disabled_at`, so enabling with backfill found none of them (missing=0) and they were never delivered. The
backfill now looks from a margin before the disable. Found by a reviewer."""
from __future__ import annotations

import time
from typing import Any

from conftest import load_vector
from settlekit import failpoints
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.projections.artifacts import artifacts_consumer
from settlekit.store.db import connect
from support.api import TENANT_A, client, key_for, make_app


def test_artifacts_built_while_disabled_are_backfilled_on_enable(pg_url: str) -> None:
    db = connect(pg_url)
    try:
        app = make_app(db)
        api = client(app, key_for(db, TENANT_A))
        vector = load_vector("settle_completed.json")
        for signer in vector["signers"]:
            assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                              "purpose": signer["role"]}).status_code == 201
        r = api.post("/v1/destinations", json={"destinationId": "dst_a", "url": "http://127.0.0.1:9/h",
                                               "secret": generate_secret()})
        assert r.status_code == 201, r.text
        job_id = vector["events"][0]["streamId"]
        for event in vector["events"]:
            assert api.post(f"/v1/jobs/{job_id}/events", json=event).status_code == 201

        disabled: list[Any] = []

        def operator_disables(name: str) -> None:  # during the worker's turn (its transaction is open)
            if not disabled:
                time.sleep(0.05)
                r = api.post("/v1/destinations/dst_a/disable", json={"reason": "maintenance"})
                assert r.status_code == 200, r.text
                disabled.append(r.json())

        failpoints.arm("dispatch.after_fetch", operator_disables)
        Dispatcher(db, [artifacts_consumer(sink=WebhookDeliverySink())], listen=False).drain(30)
        failpoints.disarm_all()
        assert disabled
        arts = api.get(f"/v1/jobs/{job_id}/artifacts").json()["artifacts"]
        assert arts
        assert api.get("/v1/deliveries").json()["deliveries"] == []  # built while the destination was disabled

        r = api.post("/v1/destinations/dst_a/enable", json={"backfill": True})
        assert r.status_code == 200, r.text
        report = r.json()["backfill"]
        deliveries = api.get("/v1/deliveries").json()["deliveries"]
        assert report["missing"] == len(arts) and len(deliveries) == len(arts), (
            f"{len(arts)} artifacts were built while dst_a was disabled; enable reported missing="
            f"{report['missing']} and created {len(deliveries)} deliveries")
    finally:
        db.close()
