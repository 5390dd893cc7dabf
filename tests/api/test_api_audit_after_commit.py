"""Audit lines of requeue and replay are written once their transaction has committed (Tx.after_commit): a
requeue rolled back because its Idempotency-Key answer could not be stored is not audited, and its successful retry
is audited once. Found by a reviewer."""
from __future__ import annotations

import logging
from typing import Any

import pytest

from settlekit.errors import DatabaseUnavailableError
from settlekit.store import idempotency as keys
from settlekit.store.db import Database
from support.api import TENANT_A, Seeded, client, key_for, make_app, seed_tenant


def _failed_deliveries_and_one_lost_answer(db: Database, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> tuple[Any, Seeded]:
    """A seeded tenant whose deliveries have failed, the audit log captured, and the next stored Idempotency-Key
    answer lost to a database outage (the write's transaction rolls back): (API client, seeded tenant)."""
    api = client(make_app(db), key_for(db, TENANT_A), raise_server_exceptions=False)
    seeded = seed_tenant(db, api)
    with db.transaction() as tx:
        tx.execute("UPDATE deliveries SET state = 'failed', attempts = 5 WHERE tenant_id = ?", (TENANT_A,))
    real = keys.complete_in
    failures = [1]

    def lost(*args: Any, **kwargs: Any) -> bool:
        if failures[0]:
            failures[0] -= 1
            raise DatabaseUnavailableError(cause="OperationalError")
        return real(*args, **kwargs)

    monkeypatch.setattr(keys, "complete_in", lost)
    caplog.set_level(logging.INFO, logger="settlekit.delivery.audit")
    return api, seeded


def test_a_rolled_back_keyed_requeue_is_not_audited(db: Database, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    api, seeded = _failed_deliveries_and_one_lost_answer(db, monkeypatch, caplog)
    h = {"Idempotency-Key": "rq-1"}
    first = api.post(f"/v1/deliveries/{seeded.delivery_id}/requeue", headers=h)
    assert first.status_code == 503
    state = api.get(f"/v1/deliveries/{seeded.delivery_id}").json()["state"]
    assert state == "failed"  # rolled back: nothing was requeued
    audited = [r for r in caplog.records if r.getMessage() == "delivery requeued"]
    assert audited == [], "audit says 'delivery requeued' for a requeue that was rolled back"


def test_one_keyed_requeue_is_audited_once(db: Database, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    api, seeded = _failed_deliveries_and_one_lost_answer(db, monkeypatch, caplog)
    h = {"Idempotency-Key": "rq-2"}
    assert api.post(f"/v1/destinations/{seeded.destination_id}/requeue", headers=h).status_code == 503
    r = api.post(f"/v1/destinations/{seeded.destination_id}/requeue", headers=h)
    assert r.status_code == 200
    audited = [(r.getMessage(), getattr(r, "count", None)) for r in caplog.records
               if r.getMessage() == "deliveries requeued"]
    assert len(audited) == 1, audited
