"""Server drafts on the live path completed as settld's events route completes them: a SETTLEMENT_FORFEITED draft
gets the hold on the current facts, the anchor, the facts hash and its decision's reference; a SETTLED draft under
proof gating the fresh proof's reference (after a forfeiture, status FAIL with the forfeiture). Checked against
the corpus' own events, which settld's route completed."""

from __future__ import annotations

import pytest

from settlekit.jobs import deserialize_state, process_job_events
from settlekit.jobs.drafts import complete_forfeit_draft
from settlekit.jobs.server_rules import load_facts, settlement_proof_ref
from support.live_states import live_refusal, state_before

FORFEIT = ("d058_holds", 17)  # hold at 15, forfeit decision at 16


def test_a_forfeit_draft_is_completed_as_settlds_events_route_does() -> None:
    """A draft naming only its reason gets the hold on the current facts, the anchor, the facts hash and a
    reference to the matching forfeit decision: the corpus' forfeiture, which the rules accept."""
    state, recorded = state_before(*FORFEIT)
    draft = {**recorded, "payload": {"forfeitureReason": "EVIDENCE_NOT_PROVIDED"}}
    payload = complete_forfeit_draft(draft, deserialize_state(state), load_facts(state))
    assert payload == {**recorded["payload"], "decisionRef": None}
    process_job_events(state, [{**draft, "payload": payload}], live=True)
    by_id = complete_forfeit_draft({**draft, "payload": {"decisionId": "dec_1", "reason": "EVIDENCE_NOT_PROVIDED"}},
                                   deserialize_state(state), load_facts(state))
    assert by_id["decisionEventRef"] == recorded["payload"]["decisionEventRef"]
    unknown = complete_forfeit_draft({**draft, "payload": {}}, deserialize_state(state), load_facts(state))
    assert unknown["forfeitureReason"] == "MANUAL" and "decisionEventRef" not in unknown
    assert live_refusal(state, {**draft, "payload": unknown}) == (
        "DECISION_REF_REQUIRED", "payload.decisionEventRef or payload.decisionRef is required")


@pytest.mark.parametrize(("name", "index"), [("d058_holds", 18), ("d037_proof", 20)])
def test_a_settled_draft_gets_settlds_settlement_proof_ref(name: str, index: int) -> None:
    """Under proof gating: the fresh proof (after a forfeiture, status FAIL with the forfeiture), as the corpus'
    settlements, which settld's route completed."""
    state, settled = state_before(name, index)
    assert settled["type"] == "SETTLED"
    assert settlement_proof_ref(deserialize_state(state), load_facts(state)) == settled["payload"][
        "settlementProofRef"]
