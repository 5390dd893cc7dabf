"""PATCH /v1/destinations/{id} read the destination in one transaction and wrote every field back in another: a
concurrent secret rotation or a 410's disable was undone. The PATCH's fields are now applied to the row locked in
the save's transaction. Found by a reviewer."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from settlekit.application import destinations
from settlekit.delivery.signing import generate_secret
from settlekit.store import deliveries as store
from settlekit.store.db import connect
from support.api import TENANT_A, client, key_for, make_app


def test_patch_racing_a_410_disable_does_not_reenable_the_destination(pg_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    db = connect(pg_url)
    try:
        app = make_app(db)
        api = client(app, key_for(db, TENANT_A))
        r = api.post("/v1/destinations", json={"destinationId": "dst_a", "url": "http://127.0.0.1:9/h",
                                               "secret": generate_secret()})
        assert r.status_code == 201, r.text
        real_save = destinations.save_destination

        def worker_disables_first(*args: Any, **kwargs: Any) -> Any:
            # a delivery worker's 410 disables the destination (its own transaction, committed) while the PATCH
            # is between its read and its write
            with db.transaction() as tx:
                assert store.disable_if_active(tx, TENANT_A, "dst_a", reason="gone", now=datetime.now(UTC))
            return real_save(*args, **kwargs)

        monkeypatch.setattr(destinations, "save_destination", worker_disables_first)
        r = api.patch("/v1/destinations/dst_a", json={"artifactTypes": ["WorkCertificate.v1"]})
        assert r.status_code == 200, r.text
        monkeypatch.setattr(destinations, "save_destination", real_save)
        after = api.get("/v1/destinations/dst_a").json()
        assert after["status"] == "disabled" and after["disabledReason"] == "gone", (
            f"a PATCH of artifactTypes re-enabled a destination its receiver answered 410 (status "
            f"{after['status']}, reason {after['disabledReason']})")
    finally:
        db.close()


def test_concurrent_patches_do_not_undo_a_secret_rotation(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db = connect(pg_url)
    try:
        app = make_app(db)
        api = client(app, key_for(db, TENANT_A))
        r = api.post("/v1/destinations", json={"destinationId": "dst_a", "url": "http://127.0.0.1:9/h",
                                               "secret": generate_secret()})
        assert r.status_code == 201, r.text
        real_save = destinations.save_destination
        rotated: list[Any] = []

        def rotation_commits_first(*args: Any, **kwargs: Any) -> Any:
            # operator 1 rotates the secret (another API process) while operator 2's URL change is between its
            # read and its write
            if not rotated:
                monkeypatch.setattr(destinations, "save_destination", real_save)
                r = api.patch("/v1/destinations/dst_a", json={"secret": generate_secret()})
                assert r.status_code == 200, r.text
                rotated.append(r.json()["secretRef"])
            return real_save(*args, **kwargs)

        monkeypatch.setattr(destinations, "save_destination", rotation_commits_first)
        r = api.patch("/v1/destinations/dst_a", json={"url": "http://127.0.0.1:9/moved"})
        assert r.status_code == 200, r.text
        after = api.get("/v1/destinations/dst_a").json()
        assert after["secretRef"] == rotated[0], (
            f"the rotation to {rotated[0]} was answered 200, but the destination signs with {after['secretRef']}")
    finally:
        db.close()
