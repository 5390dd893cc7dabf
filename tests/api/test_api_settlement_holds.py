"""A held job through the API on both backends: after a corpus stream's hold, a forfeit decision, the forfeiture
and the settlement are sent as server drafts naming little more than the reason, and are completed as settld's
events route completes them (the hold on the current facts, the decision's reference, the settlement's proof
reference with the forfeiture), so that the hold rules accept each."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import load_differential, load_vector
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app, tenant_rows

ACTOR = {"type": "system", "id": "ops"}


@pytest.fixture
def api(db: Database) -> Iterator[Any]:
    yield client(make_app(db), key_for(db, TENANT_A))


def _held_job(api: Any) -> tuple[list[dict[str, Any]], str]:
    """The corpus stream d058_holds through its SETTLEMENT_HELD, appended as recorded (its keys registered)."""
    for signer in load_vector("settle_completed.json")["signers"]:  # the corpus is signed with the same keys
        api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"], "purpose": signer["role"]})
    events = load_differential("d058_holds")["events"]
    path = f"/v1/jobs/{events[0]['streamId']}/events"
    for event in events[:16]:
        r = api.post(path, json=event)
        assert r.status_code == 201, r.text
    assert events[15]["type"] == "SETTLEMENT_HELD"
    return events, path


def _draft(api: Any, path: str, event_type: str, payload: Any) -> Any:
    head = api.get(path).json()["events"][-1]["chainHash"]
    return api.post(path, json={"type": event_type, "actor": ACTOR, "payload": payload},
                    headers={"x-expected-prev-chain-hash": head})


def test_a_forfeiture_and_settlement_sent_as_drafts_are_completed_and_accepted(db: Database, api: Any) -> None:
    events, path = _held_job(api)
    hold_id = events[15]["payload"]["holdId"]
    r = _draft(api, path, "DECISION_RECORDED", {"reason": "EVIDENCE_NOT_PROVIDED"})
    assert r.status_code == 201, r.text
    decision = api.get(path).json()["events"][-1]
    assert decision["payload"]["holdId"] == hold_id and decision["payload"]["kind"] == "SETTLEMENT_FORFEIT"

    before = tenant_rows(db, TENANT_A)
    r = _draft(api, path, "SETTLEMENT_FORFEITED", {})  # reason MANUAL: no decision for it
    assert r.status_code == 409 and r.json()["code"] == "DECISION_REF_REQUIRED", r.text
    assert tenant_rows(db, TENANT_A) == before

    r = _draft(api, path, "SETTLEMENT_FORFEITED", {"reason": "EVIDENCE_NOT_PROVIDED"})
    assert r.status_code == 201, r.text
    forfeit = api.get(path).json()["events"][-1]
    ref = forfeit["payload"]["decisionEventRef"]
    assert ref["decisionEventId"] == decision["id"] and ref["decisionEventChainHash"] == decision["chainHash"]
    assert forfeit["payload"]["factsHash"] == events[15]["payload"]["factsHash"]
    assert forfeit["payload"]["holdId"] == hold_id

    r = _draft(api, path, "SETTLED", None)
    assert r.status_code == 201, r.text
    settled = api.get(path).json()["events"][-1]["payload"]["settlementProofRef"]
    assert settled["status"] == "FAIL" and settled["proofEventId"] == events[14]["id"]
    assert settled["forfeit"] == {
        "holdId": hold_id, "forfeitureReason": "EVIDENCE_NOT_PROVIDED", "forfeitEventId": forfeit["id"],
        "forfeitEventChainHash": forfeit["chainHash"], "forfeitEventPayloadHash": forfeit["payloadHash"],
    }
    job = api.get(f"/v1/jobs/{events[0]['streamId']}").json()["job"]
    assert job["status"] == "SETTLED" and job["settlementHold"]["status"] == "FORFEITED"


def test_a_release_draft_is_judged_as_sent(db: Database, api: Any) -> None:
    """settld's route completes no SETTLEMENT_RELEASED (or _HELD) draft, its proof worker writes them whole: a
    release draft while the fresh proof is still INSUFFICIENT_EVIDENCE is refused with settld's message."""
    events, path = _held_job(api)
    before = tenant_rows(db, TENANT_A)
    r = _draft(api, path, "SETTLEMENT_RELEASED", {"holdId": events[15]["payload"]["holdId"]})
    assert r.status_code == 409 and r.json()["code"] == "PROOF_STATUS_MISMATCH", r.text
    assert r.json()["detail"] == "settlement hold release requires PASS or FAIL proof"
    assert tenant_rows(db, TENANT_A) == before
