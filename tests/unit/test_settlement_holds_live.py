"""settld's API rules for settlement holds on the live path, on corpus streams: a hold copies the fresh
INSUFFICIENT_EVIDENCE proof (its reference, missing evidence and reason codes), names the pricing anchor, the
hold identity and a whole-cent exposure of the quoted amount; a release references a fresh PASS/FAIL proof; a
forfeiture names the held facts and a recorded forfeit decision. Some types need a payload before anything else."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conftest import load_differential
from settlekit.jobs import process_job_events
from support.live_states import live_refusal, state_before

HOLD = ("d037_proof", 16)  # completed, INSUFFICIENT_EVIDENCE proof at 15, hold at 16
RELEASE = ("d037_proof", 19)  # a PASS proof at 18 after new coverage
FORFEIT = ("d058_holds", 17)  # hold at 15, forfeit decision at 16


def _changed(event: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """The event with payload field `path` (dotted) set to `value`, or dropped for `...`."""
    out = copy.deepcopy(event)
    *parents, last = path.split(".")
    target = out["payload"]
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return out


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("holdId", " ", ("SCHEMA_INVALID", "payload.holdId must be a non-empty string")),
    ("evaluatedAtChainHash", ..., ("PAYLOAD_FIELD_INVALID", "payload.evaluatedAtChainHash must be a non-empty string")),
    ("factsHash", "abc", ("PAYLOAD_FIELD_INVALID", "payload.factsHash must be 64-hex")),
    ("evaluatedAtChainHash", "0" * 64,
     ("ANCHOR_MISMATCH", "payload.evaluatedAtChainHash must match latest completion anchor")),
    ("factsHash", "0" * 64, ("FACTS_HASH_MISMATCH", "payload.factsHash must match current factsHash")),
    ("triggeringProofRef", None, ("PAYLOAD_FIELD_INVALID", "payload.triggeringProofRef is required")),
    ("triggeringProofRef", [], ("PROOF_REF_MISMATCH", "payload.triggeringProofRef must match PROOF_EVALUATED")),
    ("triggeringProofRef.proofEventPayloadHash", ...,
     ("PROOF_REF_MISMATCH", "payload.triggeringProofRef must match PROOF_EVALUATED")),
    ("missingEvidence", ["ZONE_COVERAGE"],
     ("PROOF_REF_MISMATCH", "payload.missingEvidence must match triggering PROOF_EVALUATED.missingEvidence")),
    ("reasonCodes", ...,
     ("PROOF_REF_MISMATCH", "payload.reasonCodes must match triggering PROOF_EVALUATED.reasonCodes")),
    ("pricingAnchor", "x", ("PAYLOAD_FIELD_INVALID", "payload.pricingAnchor is required")),
    ("pricingAnchor", {},
     ("PRICING_ANCHOR_MISMATCH", "payload.pricingAnchor.evaluatedAtChainHash must match latest completion anchor")),
    ("pricingAnchor.customerPolicyHash", ...,
     ("PRICING_ANCHOR_MISMATCH", "payload.pricingAnchor.customerPolicyHash must match current customerPolicyHash")),
    ("pricingAnchor.operatorPolicyHash", None,
     ("PRICING_ANCHOR_MISMATCH", "payload.pricingAnchor.operatorPolicyHash must match current operatorPolicyHash")),
    ("holdId", "hold_other", ("HOLD_ID_MISMATCH", "payload.holdId must match expected hold identity")),
    ("pricingAnchor.quoteEventId", "",
     ("PAYLOAD_FIELD_INVALID", "payload.pricingAnchor.quoteEventId must be a non-empty string")),
    ("pricingAnchor.quoteEventId", "evt_d037_proof_0003",
     ("PRICING_ANCHOR_MISMATCH", "payload.pricingAnchor.quoteEventId must reference QUOTE_PROPOSED")),
    ("exposure", ..., ("PAYLOAD_FIELD_INVALID", "payload.exposure is required")),
    ("exposure.expected", 5, ("PAYLOAD_FIELD_INVALID", "payload.exposure.expected is required")),
    ("exposure.expected.currency", ...,
     ("PAYLOAD_FIELD_INVALID", "payload.exposure.expected.currency must be a non-empty string")),
    ("exposure.expected.amountNetCents", 1.5,
     ("HOLD_EXPOSURE_INVALID", "payload.exposure.expected.amountNetCents must be a safe integer")),
    ("exposure.expected.amountGrossCents", 14984,
     ("HOLD_EXPOSURE_INVALID", "payload.exposure.expected.amountGrossCents must match quote amountCents")),
])
def test_a_hold_settld_refuses_is_refused_with_its_message(path: str, value: Any, expected: tuple[str, str]) -> None:
    state, hold = state_before(*HOLD)
    process_job_events(state, [hold], live=True)
    assert live_refusal(state, _changed(hold, path, value)) == expected


def test_optional_pricing_fields_and_integral_amounts_pass() -> None:
    """A pricing anchor without a quote id, and 14983.0 for the gross amount (a safe integer in JavaScript)."""
    state, hold = state_before(*HOLD)
    process_job_events(state, [_changed(hold, "pricingAnchor.quoteEventId", None)], live=True)
    process_job_events(state, [_changed(hold, "exposure.expected.amountGrossCents", 14983.0)], live=True)


def test_a_hold_is_active_once_on_the_same_facts() -> None:
    state, hold = state_before(*HOLD)
    after = process_job_events(state, [hold], live=True).state
    again = {**hold, "id": hold["id"] + "_again"}
    assert live_refusal(after, again) == ("SETTLEMENT_HOLD_ALREADY_ACTIVE", "settlement hold already active")


def test_a_hold_needs_an_insufficient_evidence_proof_on_the_current_facts() -> None:
    """After new coverage the facts changed: the proof no longer covers them; after the PASS proof on the new
    facts, a hold on them is refused for its verdict."""
    events = load_differential("d037_proof")["events"]
    hold = events[16]
    state, coverage = state_before("d037_proof", 17)
    state = process_job_events(state, [coverage], live=True).state
    assert live_refusal(state, hold) == ("FACTS_HASH_MISMATCH", "payload.factsHash must match current factsHash")
    state = process_job_events(state, [events[18]], live=True).state
    on_new_facts = _changed(hold, "factsHash", events[18]["payload"]["factsHash"])
    assert live_refusal(state, on_new_facts) == (
        "PROOF_STATUS_MISMATCH", "settlement hold requires INSUFFICIENT_EVIDENCE proof")


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("holdId", "hold_other", ("SETTLEMENT_HOLD_NOT_ACTIVE", "settlement hold must be active to release")),
    ("releasingProofRef", ..., ("PAYLOAD_FIELD_INVALID", "payload.releasingProofRef is required")),
    ("releasingProofRef.status", "FAIL",
     ("PROOF_REF_MISMATCH", "payload.releasingProofRef must match PROOF_EVALUATED")),
])
def test_a_release_settld_refuses_is_refused_with_its_message(path: str, value: Any,
                                                              expected: tuple[str, str]) -> None:
    state, release = state_before(*RELEASE)
    process_job_events(state, [release], live=True)
    assert live_refusal(state, _changed(release, path, value)) == expected


def test_a_release_needs_a_fresh_pass_or_fail_proof() -> None:
    """Right after the hold the fresh proof is the INSUFFICIENT_EVIDENCE one; after new coverage no proof covers
    the facts until the PASS proof."""
    release = load_differential("d037_proof")["events"][RELEASE[1]]
    held, _ = state_before("d037_proof", 17)
    assert live_refusal(held, release) == (
        "PROOF_STATUS_MISMATCH", "settlement hold release requires PASS or FAIL proof")
    covered, _ = state_before("d037_proof", 18)
    assert live_refusal(covered, release) == (
        "PROOF_REQUIRED", "settlement hold release requires a matching PROOF_EVALUATED")


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("forfeitureReason", ..., ("PAYLOAD_FIELD_INVALID", "payload.forfeitureReason must be a non-empty string")),
    ("decisionRef", " ", ("PAYLOAD_FIELD_INVALID", "payload.decisionRef must be a non-empty string")),
    ("decisionEventRef", [], ("PAYLOAD_FIELD_INVALID", "payload.decisionEventRef must be an object")),
    ("factsHash", ..., ("PAYLOAD_FIELD_INVALID", "payload.factsHash must be a non-empty string")),
    ("factsHash", "0" * 64, ("FACTS_HASH_MISMATCH", "payload.factsHash must match current factsHash")),
    ("holdId", "hold_other", ("SETTLEMENT_HOLD_NOT_ACTIVE", "settlement hold must be active to forfeit")),
    ("decisionEventRef", ...,
     ("DECISION_REF_REQUIRED", "payload.decisionEventRef or payload.decisionRef is required")),
    ("decisionEventRef", {},
     ("DECISION_REF_MISMATCH", "payload.decisionEventRef must reference DECISION_RECORDED")),
    ("decisionEventRef.decisionEventId", "evt_d058_holds_0016",
     ("DECISION_REF_MISMATCH", "payload.decisionEventRef must reference DECISION_RECORDED")),
    ("decisionEventRef.reasonCodes", [],
     ("DECISION_REF_MISMATCH", "payload.decisionEventRef must match referenced DECISION_RECORDED")),
    ("forfeitureReason", "OTHER", ("DECISION_REF_MISMATCH",
                                   "referenced decision forfeitureReason must match payload.forfeitureReason")),
])
def test_a_forfeiture_settld_refuses_is_refused_with_its_message(path: str, value: Any,
                                                                 expected: tuple[str, str]) -> None:
    state, forfeit = state_before(*FORFEIT)
    process_job_events(state, [forfeit], live=True)
    assert live_refusal(state, _changed(forfeit, path, value)) == expected


def test_a_forfeiture_may_name_its_decision_by_reference_only() -> None:
    state, forfeit = state_before(*FORFEIT)
    by_ref = _changed(_changed(forfeit, "decisionEventRef", ...), "decisionRef", "dec_1")
    hold = process_job_events(state, [by_ref], live=True).state["snapshot"]["settlementHold"]
    assert (hold["status"], hold["decisionRef"], hold["forfeitedAt"]) == (
        "FORFEITED", "dec_1", forfeit["payload"]["forfeitedAt"])


@pytest.mark.parametrize("event_type", ["SETTLEMENT_HELD", "SETTLEMENT_RELEASED", "SETTLEMENT_FORFEITED",
                                        "DECISION_RECORDED", "MATCHED", "DISPUTE_OPENED"])
@pytest.mark.parametrize("payload", [None, "x", 0])
def test_these_types_need_a_payload_first(event_type: str, payload: Any) -> None:
    state, event = state_before(*HOLD)
    assert live_refusal(state, {**event, "type": event_type, "payload": payload}) == (
        "PAYLOAD_REQUIRED", "payload is required")
