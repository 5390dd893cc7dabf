"""Builder behaviour the golden vectors do not exercise: effective proof (FRESH / STALE / SETTLEMENT / no
completion), ProofReceipt, the ZoneCoverageFacts hash, CreditMemo funding, the coverage trigger condition,
RISK_SCORED anchoring per batch, contract documents and settlement totals."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from settlekit.artifacts.build import build_all, build_one, derive_tasks
from settlekit.events.canonical import canonical_json
from settlekit.events.js import locale_key
from support.streams import (
    OPERATOR_ACTOR,
    ROBOT_ACTOR,
    StreamBuilder,
    booking_payload,
    heartbeat,
    lifecycle_to_executing,
)

POLICY = "a" * 64
ZONES = {"schemaVersion": "ZoneSet.v1", "zoneSetId": "zs_1", "zones": [{"zoneId": "zone_b"}, {"zoneId": "zone_a"}]}


def _facts_hash(anchor: str, coverage: list[dict[str, Any]], excused: list[str] | None = None) -> str:
    """ZoneCoverageFacts.v1 written out by hand from the spec (04-artifacts.md §7)."""
    doc = {
        "schemaVersion": "ZoneCoverageFacts.v1",
        "evaluatedAtChainHash": anchor,
        "requiredZonesHash": "rz_1",
        "thresholdPct": 95,
        "requiredZoneIds": ["zone_a", "zone_b"],
        "coverageByZone": coverage,
        "excusedZones": excused or [],
        "excuseIncidentTypes": ["BLOCKED_ZONE"],
    }
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def _completed_stream() -> StreamBuilder:
    booking = booking_payload()
    booking["requiredZones"] = ZONES
    booking["requiredZonesHash"] = "rz_1"
    b = StreamBuilder(job_id="job_p", prefix="evt_p")
    lifecycle_to_executing(b, booking=booking)
    heartbeat(b)
    return b


def _coverage(b: StreamBuilder, zone: str, pct: int, end: str) -> dict[str, Any]:
    return b.add(
        "ZONE_COVERAGE_REPORTED",
        {"zoneId": zone, "coveragePct": pct, "window": {"startAt": "2026-01-05T10:00:00.000Z", "endAt": end}},
        ROBOT_ACTOR,
    )


def _row(e: dict[str, Any]) -> dict[str, Any]:
    p = e["payload"]
    return {"zoneId": p["zoneId"], "coveragePct": p["coveragePct"], "window": p["window"], "eventId": e["id"],
            "chainHash": e["chainHash"], "at": e["at"]}


def _proof(b: StreamBuilder, anchor: str, facts_hash: str, *, status: str = "PASS", cph: str = POLICY) -> Any:
    return b.add(
        "PROOF_EVALUATED",
        {
            "evaluatedAt": b.next_at,
            "evaluatedAtChainHash": anchor,
            "evaluationId": f"ev_{len(b.events)}",
            "status": status,
            "reasonCodes": [],
            "missingEvidence": [],
            "requiredZonesHash": "rz_1",
            "customerPolicyHash": cph,
            "operatorPolicyHash": POLICY,
            "factsHash": facts_hash,
            "metrics": {"requiredZones": 2},
        },
    )


def test_effective_proof_fresh_then_stale_after_late_coverage() -> None:
    b = _completed_stream()
    za = _coverage(b, "zone_a", 100, "2026-01-05T11:00:00.000Z")
    zb_old = _coverage(b, "zone_b", 90, "2026-01-05T10:30:00.000Z")
    zb = _coverage(b, "zone_b", 97, "2026-01-05T11:00:00.000Z")
    _coverage(b, "zone_b", 10, "2026-01-05T10:45:00.000Z")  # older window: does not win
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    anchor = done["chainHash"]
    fresh_hash = _facts_hash(anchor, [_row(za), _row(zb)])
    assert fresh_hash != _facts_hash(anchor, [_row(za), _row(zb_old)])
    proof = _proof(b, anchor, fresh_hash)

    cert = build_one(b.events, "WorkCertificate.v1", proof["id"])
    assert cert["proof"]["source"] == {"kind": "FRESH"}
    assert cert["proof"]["factsHash"] == fresh_hash
    assert cert["proof"]["evaluatedAt"] == proof["payload"]["evaluatedAt"]
    receipt = build_one(b.events, "ProofReceipt.v1", proof["id"])
    assert receipt["proofReceipt"] == {
        "proofEventId": proof["id"],
        "proofEventAt": proof["payload"]["evaluatedAt"],
        "proofEventChainHash": proof["chainHash"],
        "proofEventPayloadHash": proof["payloadHash"],
        "proofEventSignerKeyId": None,
        "proofEventSignature": None,
        "evaluatedAtChainHash": anchor,
        "evaluationId": proof["payload"]["evaluationId"],
        "status": "PASS",
        "reasonCodes": [],
        "missingEvidence": [],
        "requiredZonesHash": "rz_1",
        "customerPolicyHash": POLICY,
        "operatorPolicyHash": POLICY,
        "factsHash": fresh_hash,
        "metrics": {"requiredZones": 2},
    }
    assert receipt["job"]["status"] == "COMPLETED"

    # a later coverage report changes the facts: the proof is now stale
    late = _coverage(b, "zone_a", 99, "2026-01-05T12:00:00.000Z")
    b.add("SETTLED", {})
    statement = build_one(b.events, "SettlementStatement.v1")
    expected = _facts_hash(anchor, [_row(late), _row(zb)])
    assert statement["proof"]["source"] == {"kind": "STALE"}
    assert statement["proof"]["expectedFactsHash"] == expected
    assert statement["proof"]["factsHash"] == fresh_hash
    # the proof event triggers PROOF_RECEIPT, WorkCertificate and SettlementStatement at its own anchor
    kinds = [(t.source_event_id, t.artifact_type) for t in derive_tasks(b.events)]
    assert (proof["id"], "ProofReceipt.v1") in kinds and (proof["id"], "SettlementStatement.v1") in kinds


def test_fresh_match_requires_the_customer_policy_hash() -> None:
    b = _completed_stream()
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    facts_hash = _facts_hash(done["chainHash"], [])
    _proof(b, done["chainHash"], facts_hash, cph="b" * 64)
    cert = build_one(b.events, "WorkCertificate.v1")
    assert cert["proof"]["source"] == {"kind": "STALE"}
    assert cert["proof"]["expectedFactsHash"] == facts_hash
    _proof(b, done["chainHash"], facts_hash)
    assert build_one(b.events, "WorkCertificate.v1")["proof"]["source"] == {"kind": "FRESH"}


def test_excused_zone_enters_the_facts() -> None:
    b = _completed_stream()
    b.add("INCIDENT_REPORTED", {"incidentId": "inc_1", "type": "BLOCKED_ZONE", "severity": 2, "zoneId": " zone_b "})
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    facts_hash = _facts_hash(done["chainHash"], [], excused=["zone_b"])
    _proof(b, done["chainHash"], facts_hash)
    assert build_one(b.events, "WorkCertificate.v1")["proof"]["source"] == {"kind": "FRESH"}


def test_proof_without_completion_has_no_source() -> None:
    b = _completed_stream()
    proof = _proof(b, b.events[-1]["chainHash"], "f" * 64, status="INSUFFICIENT_EVIDENCE")
    cert = build_one(b.events, "WorkCertificate.v1", proof["id"])
    assert "source" not in cert["proof"]
    assert cert["proof"]["status"] == "INSUFFICIENT_EVIDENCE"
    assert cert["job"]["status"] == "EXECUTING"


def test_no_proof_at_all_is_null_and_invalid_zone_set_falls_back() -> None:
    booking = booking_payload()
    booking["requiredZones"] = {"schemaVersion": "ZoneSet.v1", "zoneSetId": "zs", "zones": []}  # invalid
    b = StreamBuilder(job_id="job_z", prefix="evt_z")
    lifecycle_to_executing(b, booking=booking)
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    assert build_one(b.events, "WorkCertificate.v1")["proof"] is None
    b2 = StreamBuilder(job_id="job_z", prefix="evt_z")
    b2.events = b.events[:-1]
    _proof(b2, done["chainHash"], "f" * 64)
    cert = build_one(b2.events, "WorkCertificate.v1")
    assert cert["proof"]["factsHash"] == "f" * 64 and "source" not in cert["proof"]


def test_settlement_proof_ref_wins_with_forfeit_disposition() -> None:
    b = _completed_stream()
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    ref = {
        "proofEventId": "evt_x", "proofEventAt": "2026-01-05T12:00:00.000Z", "proofEventChainHash": "c" * 64,
        "proofEventPayloadHash": "d" * 64, "evaluatedAtChainHash": done["chainHash"], "evaluationId": "ev_9",
        "status": "FAIL", "reasonCodes": "not-a-list", "factsHash": "e" * 64,
        "forfeit": {"holdId": "hold_1", "forfeitureReason": "late", "forfeitEventId": "evt_f"},
    }
    settled = b.add("SETTLED", {"settlementProofRef": ref})
    cert = build_one(b.events, "WorkCertificate.v1", settled["id"])
    assert cert["proof"] == {
        "status": "FAIL", "reasonCodes": [], "evaluatedAt": "2026-01-05T12:00:00.000Z",
        "evaluatedAtChainHash": done["chainHash"], "evaluationId": "ev_9", "requiredZonesHash": None,
        "customerPolicyHash": None, "operatorPolicyHash": None, "factsHash": "e" * 64, "metrics": None,
        "source": {
            "kind": "SETTLEMENT", "proofEventId": "evt_x", "proofEventChainHash": "c" * 64,
            "proofEventPayloadHash": "d" * 64,
            "disposition": {"kind": "FORFEIT", "holdId": "hold_1", "forfeitureReason": "late",
                            "forfeitEventId": "evt_f", "forfeitEventChainHash": None,
                            "forfeitEventPayloadHash": None},
        },
    }


def _settled_with_coverage(**booking_kw: Any) -> StreamBuilder:
    b = StreamBuilder(job_id="job_c", prefix="evt_c")
    lifecycle_to_executing(b, amount=8000, coverage_fee=500, booking=booking_payload(coverage_fee=500, **booking_kw))
    b.add("OPERATOR_COVERAGE_RESERVED", {"reservationId": "r1", "operatorId": "op_9",
                                         "startAt": "2026-01-05T10:00:00.000Z", "endAt": "2026-01-05T18:00:00.000Z"})
    b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
    b.add("ASSIST_ENDED", {}, OPERATOR_ACTOR)
    b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    return b


def test_credit_memo_insurer_funding_and_credit_id() -> None:
    b = _settled_with_coverage(credit_funding_model="INSURER_RECOVERABLE", insurer_id="ins_1",
                               recoverable_percent=150)
    settled_id = b.events[-1]["id"]
    credit = b.add("SLA_CREDIT_ISSUED", {"creditId": "cr_7", "amountCents": 333, "currency": "USD",
                                         "issuedAt": b.next_at, "reason": "late", "trigger": {"kind": "SLA"},
                                         "settledEventId": settled_id, "policyHash": POLICY})
    memo = build_one(b.events, "CreditMemo.v1", credit["id"])
    assert memo["artifactId"] == "credit_job_c_cr_7"
    assert memo["credit"] == {
        "creditId": "cr_7", "type": "SLA", "amountCents": 333, "currency": "USD", "issuedAt": credit["at"],
        "reason": "late", "trigger": {"kind": "SLA"}, "settledEventId": settled_id,
        "funding": {"model": "INSURER_RECOVERABLE", "insurerId": "ins_1", "recoverablePercent": 100,
                    "recoverableCents": 333, "receivableRefId": "recv_job_c_cr_7"},
    }
    statement = build_one(b.events, "SettlementStatement.v1", credit["id"])
    roles = {(r["partyRole"], r["partyId"]) for r in statement["settlement"]["partyRollups"]}
    assert ("insurer", "pty_insurer:ins_1") in roles and ("operator", "pty_operator:op_9") in roles
    assert statement["settlement"]["slaCreditsCents"] == 333


def test_credit_memo_without_insurer_has_null_funding_details() -> None:
    b = _settled_with_coverage(credit_funding_model="COVERAGE_RESERVE", insurer_id="ins_1")
    credit = b.add("SLA_CREDIT_ISSUED", {"creditId": "cr_1", "amountCents": 100, "currency": "USD",
                                         "issuedAt": b.next_at, "settledEventId": b.events[-1]["id"],
                                         "policyHash": POLICY})
    funding = build_one(b.events, "CreditMemo.v1", credit["id"])["credit"]["funding"]
    assert funding == {"model": "COVERAGE_RESERVE", "insurerId": None, "recoverablePercent": None,
                       "recoverableCents": None, "receivableRefId": None}


def test_settlement_totals_sum_to_zero_and_ids_sorted() -> None:
    b = _settled_with_coverage(reserve_fund_percent=20)
    statement = build_one(b.events, "SettlementStatement.v1")
    s = statement["settlement"]
    assert sum(s["totalsByAccountId"].values()) == 0
    assert s["ledgerEntryIds"] == sorted(s["ledgerEntryIds"])
    assert len(s["ledgerEntryIds"]) == 5
    assert sum(r["balanceDeltaCents"] for r in s["partyRollups"]) == 0
    assert s["quoteAmountCents"] == 8000 and s["splitPlanHash"] is None


@pytest.mark.parametrize(
    ("coverage", "expected"),
    [
        ({"required": False, "feeCentsPerJob": 0}, False),
        ({"required": "true", "feeCentsPerJob": 0}, False),
        ({"required": True}, True),
        ({"feeCentsPerJob": 1}, True),
        ({"feeCentsPerJob": 1.5}, False),
        ({"coverageTierId": "  "}, False),
        ({"coverageTierId": "tier_x"}, True),
    ],
)
def test_coverage_certificate_trigger_condition(coverage: dict[str, Any], expected: bool) -> None:
    booking = booking_payload()
    booking["policySnapshot"]["coveragePolicy"] = coverage
    b = StreamBuilder(job_id="job_t", prefix="evt_t")
    lifecycle_to_executing(b, booking=booking)
    types = [t.artifact_type for t in derive_tasks(b.events)]
    assert (types == ["CoverageCertificate.v1"]) is expected


def _booked_with_risk() -> StreamBuilder:
    b = StreamBuilder(job_id="job_r", prefix="evt_r")
    b.add("JOB_CREATED", {"tenantId": "tenant_x", "templateId": "t", "constraints": {"zoneId": "z"}})
    b.add("QUOTE_PROPOSED", {"amountCents": 100, "currency": "USD"})
    booked = b.add("BOOKED", booking_payload(coverage_fee=50))
    b.add("RISK_SCORED", {"basis": "BOOK", "sourceEventId": booked["id"], "scoredAt": b.next_at, "riskScore": 5})
    b.add("RISK_SCORED", {"basis": "BOOK", "sourceEventId": booked["id"], "scoredAt": b.next_at, "riskScore": 6})
    return b


def test_risk_scored_anchors_only_within_the_same_batch() -> None:
    b = _booked_with_risk()
    events = b.events
    one_batch = derive_tasks(events)
    assert one_batch[0].source_chain_hash == events[3]["chainHash"]  # the FIRST risk of the batch
    same = derive_tasks(events, batch_ids=["a", "a", "b", "b", "b"])
    assert same[0].source_chain_hash == events[3]["chainHash"]
    later = derive_tasks(events, batch_ids=["a", "a", "b", "c", "c"])
    assert later[0].source_chain_hash == events[2]["chainHash"]
    cert = build_all(events, batch_ids=["a", "a", "b", "c", "c"])[0]
    assert cert["job"]["risk"] is None and cert["jobVersion"] == 3 and cert["tenantId"] == "tenant_x"
    cert = build_all(events)[0]
    assert cert["job"]["risk"]["riskScore"] == 5 and cert["sourceEventType"] == "BOOKED"
    assert cert["sourceEventChainHash"] == cert["atChainHash"] == events[3]["chainHash"]
    assert cert["artifactId"] == f"coverage_job_r_{events[2]['id']}"


def test_contract_document_sets_split_plan_hash_and_parties() -> None:
    b = StreamBuilder(job_id="job_k", prefix="evt_k")
    lifecycle_to_executing(b)
    b.events[3] = {}  # replaced below: MATCHED with an operator contract
    b.events = b.events[:3]
    b.add("MATCHED", {"robotId": "rob_1", "operatorContractHash": "c" * 64, "operatorPolicyHash": "d" * 64})
    b.add("RESERVED", {"robotId": "rob_1", "reservationId": "rsv_1"})
    b.add("EN_ROUTE", {"etaSeconds": 1}, ROBOT_ACTOR)
    b.add("ACCESS_GRANTED", {"accessPlanId": "ap"}, ROBOT_ACTOR)
    b.add("EXECUTION_STARTED", {"stage": "TASK"}, ROBOT_ACTOR)
    b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    plan = {"type": "SplitPlan.v1", "v": 1, "currency": "USD",
            "rules": [{"partyRole": "operator", "share": {"type": "remainder"}}]}
    doc = {"parties": {"operator": {"partyId": "pty_acme", "requiresSignature": False}},
           "connect": {"enabled": True, "splitPlan": plan}}
    seen: list[str] = []

    def resolver(contract_hash: str) -> dict[str, Any]:
        seen.append(contract_hash)
        return doc

    statement = build_one(b.events, "SettlementStatement.v1", contract_resolver=resolver)
    assert seen == ["c" * 64]
    s = statement["settlement"]
    # the plan hashed as the document gives it, absent keys left out (settld's hashSplitPlanV1 answers this value)
    assert s["splitPlanHash"] == hashlib.sha256(canonical_json(plan).encode()).hexdigest() == (
        "482d07b30a83e22d7323d7ca8bd08d13eeb5f99921ca14168ea0629d3db22057")
    assert ("operator", "pty_acme") in {(r["partyRole"], r["partyId"]) for r in s["partyRollups"]}
    assert statement["job"]["operatorContractHash"] == "c" * 64

    def failing(contract_hash: str) -> dict[str, Any]:
        raise LookupError(contract_hash)

    assert build_one(b.events, "SettlementStatement.v1", contract_resolver=failing)["settlement"]["splitPlanHash"] \
        is None


def test_locale_order_for_party_ids() -> None:
    ids = ["pty_b", "pty:a", "PTY_a", "pty_a", "pty10", "pty9"]
    # ICU root: "_" < ":" (punctuation order), punctuation < digits < letters; case is a tertiary difference
    assert sorted(ids, key=locale_key) == ["pty_a", "PTY_a", "pty_b", "pty:a", "pty10", "pty9"]


def test_artifact_documents_are_json_round_trip_stable() -> None:
    b = _settled_with_coverage()
    for artifact in build_all(b.events):
        assert json.loads(json.dumps(artifact)) == artifact


def test_non_ascii_zone_ids_keep_the_proof_fresh() -> None:
    # requiredZoneIds: JS default sort (code units: "zone_f" < "zone_é"); coverageByZone: localeCompare
    # ("zone_é" < "zone_f"); the facts hash written out in the reference's order must match settlekit's
    zones = {"schemaVersion": "ZoneSet.v1", "zoneSetId": "zs_u", "zones": [{"zoneId": "zone_f"}, {"zoneId": "zone_é"}]}
    booking = booking_payload()
    booking["requiredZones"] = zones
    booking["requiredZonesHash"] = "rz_1"
    b = StreamBuilder(job_id="job_u", prefix="evt_u")
    lifecycle_to_executing(b, booking=booking)
    zf = _coverage(b, "zone_f", 100, "2026-01-05T11:00:00.000Z")
    ze = _coverage(b, "zone_é", 100, "2026-01-05T11:00:00.000Z")
    done = b.add("EXECUTION_COMPLETED", {"report": {}}, ROBOT_ACTOR)
    doc = {
        "schemaVersion": "ZoneCoverageFacts.v1",
        "evaluatedAtChainHash": done["chainHash"],
        "requiredZonesHash": "rz_1",
        "thresholdPct": 95,
        "requiredZoneIds": ["zone_f", "zone_é"],
        "coverageByZone": [_row(ze), _row(zf)],
        "excusedZones": [],
        "excuseIncidentTypes": ["BLOCKED_ZONE"],
    }
    facts_hash = hashlib.sha256(canonical_json(doc).encode()).hexdigest()
    proof = _proof(b, done["chainHash"], facts_hash)
    cert = build_one(b.events, "WorkCertificate.v1", proof["id"])
    assert cert["proof"]["source"] == {"kind": "FRESH"} and cert["proof"]["factsHash"] == facts_hash
