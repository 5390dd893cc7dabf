"""The backfill's margin before a disable never reaches back past the destination's last enable: artifacts built
during an earlier disabled period, whose enable declined the backfill, are not delivered by the next
enable-with-backfill (they were, when the destination was disabled again within 5 minutes). Found by a reviewer."""
from __future__ import annotations

from conftest import load_vector
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.projections.artifacts import artifacts_consumer
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app


def test_backfill_does_not_reach_into_an_earlier_disabled_period(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A))
    vector = load_vector("settle_completed.json")
    for signer in vector["signers"]:
        assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                          "purpose": signer["role"]}).status_code == 201
    assert api.post("/v1/destinations", json={"destinationId": "dst_a", "url": "http://127.0.0.1:9/h",
                                              "secret": generate_secret()}).status_code == 201
    assert api.post("/v1/destinations/dst_a/disable", json={"reason": "maintenance"}).status_code == 200
    job_id = vector["events"][0]["streamId"]
    for event in vector["events"]:
        assert api.post(f"/v1/jobs/{job_id}/events", json=event).status_code == 201
    Dispatcher(db, [artifacts_consumer(sink=WebhookDeliverySink())], listen=False).drain(30)
    arts = api.get(f"/v1/jobs/{job_id}/artifacts").json()["artifacts"]
    assert arts and api.get("/v1/deliveries").json()["deliveries"] == []

    first = api.post("/v1/destinations/dst_a/enable", json={"backfill": False})  # the operator declines
    assert first.status_code == 200 and first.json()["backfill"]["missing"] == len(arts)
    assert api.get("/v1/deliveries").json()["deliveries"] == []
    assert api.post("/v1/destinations/dst_a/disable", json={"reason": "maintenance"}).status_code == 200

    second = api.post("/v1/destinations/dst_a/enable", json={"backfill": True})
    assert second.status_code == 200, second.text
    report = second.json()["backfill"]
    created = api.get("/v1/deliveries").json()["deliveries"]
    assert (report["missing"], len(created)) == (0, 0), (
        f"nothing was built while dst_a was disabled the second time (since={report['since']}), yet the backfill "
        f"reported missing={report['missing']} and created {len(created)} deliveries of artifacts built during "
        f"the first disabled period, whose backfill was declined")
