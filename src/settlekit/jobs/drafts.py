"""Completing server drafts (events the server signs) whose payload leaves out what settld's rules require.

BOOKED: settld's API accepts one only with its policy snapshot and that snapshot's hash (`policySnapshot`,
`policyHash`), plus `creditPolicy` and `evidencePolicy`; its booking route computes them, its events route refuses
a BOOKED without them. settlekit completes a BOOKED draft that leaves them out (a deliberate leniency, README), with
settld's default credit and evidence policies. DECISION_RECORDED and SETTLEMENT_FORFEITED: settld's events route
completes a draft itself (the decision: decisionId, kind, the latest hold, decidedAt, the lists, policyHash; the
forfeiture: the hold on the current facts, the anchor, the facts hash, the reason and a reference to the recorded
decision); so does settlekit. SETTLEMENT_HELD and SETTLEMENT_RELEASED drafts are taken as they are (settld's proof
worker writes them whole). A client-finalized event is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.events.js import coalesce
from settlekit.jobs.api_payloads._js import is_nonblank
from settlekit.jobs.reducer import JobState
from settlekit.jobs.server_rules import (
    Facts,
    completion_anchor,
    current_facts_hash,
    decision_event,
    latest_hold_id,
)
from settlekit.ledger.contracts import normalize_policy_snapshot, policy_snapshot_hash

DEFAULT_CREDIT_POLICY: Final = {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0, "currency": "USD"}
DEFAULT_EVIDENCE_POLICY: Final = {"retentionDays": 0}


def complete_booking_draft(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The draft's payload with `creditPolicy`, `evidencePolicy`, `policySnapshot` and `policyHash` filled in
    where absent (a payload that already has a snapshot is returned as it is)."""
    out = dict(payload)
    if "policySnapshot" in out:
        return out
    if out.get("creditPolicy") is None:
        out["creditPolicy"] = dict(DEFAULT_CREDIT_POLICY)
    if out.get("evidencePolicy") is None:
        out["evidencePolicy"] = dict(DEFAULT_EVIDENCE_POLICY)
    snapshot = normalize_policy_snapshot({
        "schemaVersion": "PolicySnapshot.v1",
        "contractId": out.get("contractId"),
        "contractVersion": out.get("contractVersion"),
        "environmentTier": out.get("environmentTier"),
        "requiresOperatorCoverage": out.get("requiresOperatorCoverage"),
        "sla": out.get("sla"),
        "creditPolicy": out["creditPolicy"],
        "evidencePolicy": out["evidencePolicy"],
    })
    out["policySnapshot"] = snapshot
    if "policyHash" not in out:
        out["policyHash"] = policy_snapshot_hash(snapshot)
    return out


def complete_decision_draft(draft: Mapping[str, Any], snapshot: Mapping[str, Any],
                            latest_hold: str | None) -> dict[str, Any]:
    """A DECISION_RECORDED draft's payload as settld's events route completes it (`latest_hold`: the holdId of
    the job's latest SETTLEMENT_HELD). The decisionId, when absent, derives from the draft's id, so a retried
    draft gets the same one."""
    base = _base(draft)
    booking = snapshot.get("booking") if type(snapshot.get("booking")) is dict else {}
    assert isinstance(booking, dict)
    policy_hash = coalesce(base.get("policyHash"), booking.get("policyHash"), snapshot.get("customerPolicyHash"))
    return {
        "jobId": draft["streamId"],
        "decisionId": base["decisionId"] if is_nonblank(base.get("decisionId")) else f"dec_{draft.get('id')}",
        "decidedAt": draft.get("at"),
        "kind": base["kind"] if is_nonblank(base.get("kind")) else "SETTLEMENT_FORFEIT",
        "holdId": base["holdId"] if is_nonblank(base.get("holdId")) else latest_hold,
        "forfeitureReason": coalesce(base.get("forfeitureReason"), base.get("reason")),
        "reasonCodes": base["reasonCodes"] if type(base.get("reasonCodes")) is list else [],
        "evidenceRefs": base["evidenceRefs"] if type(base.get("evidenceRefs")) is list else [],
        "policyHash": policy_hash,
    }


def complete_forfeit_draft(draft: Mapping[str, Any], state: JobState, facts: Facts) -> dict[str, Any]:
    """A SETTLEMENT_FORFEITED draft's payload as settld's events route completes it: the draft's fields, then the
    job id, the hold (the draft's, else the latest on the current facts), forfeitedAt, the reason (`reason`, else
    MANUAL), decisionRef, the completion anchor and the current facts hash; and a decisionEventRef to the decision
    the draft names (`decisionEventId`, else `decisionId`), else to the latest forfeit decision of that hold and
    reason. `facts`: the job's server rule history."""
    base = _base(draft)
    anchor = completion_anchor(state)
    facts_hash = current_facts_hash(state, facts, anchor)[0] if anchor is not None else None
    hold_id = base["holdId"] if is_nonblank(base.get("holdId")) else None
    if hold_id is None and anchor is not None and facts_hash is not None:
        hold_id = latest_hold_id(facts, anchor, facts_hash)
    payload = {
        **base,
        "jobId": draft["streamId"],
        "holdId": hold_id,
        "forfeitedAt": draft.get("at"),
        "forfeitureReason": coalesce(base.get("forfeitureReason"), base.get("reason"), "MANUAL"),
        "decisionRef": base.get("decisionRef"),
        "evaluatedAtChainHash": anchor,
        "factsHash": facts_hash,
    }
    if is_nonblank(base.get("decisionEventId")):
        ref = decision_event(facts, event_id=base["decisionEventId"])
    elif is_nonblank(base.get("decisionId")):
        ref = decision_event(facts, decision_id=base["decisionId"])
    else:
        ref = decision_event(facts, hold_id=hold_id, forfeiture_reason=payload["forfeitureReason"])
    if ref is not None:
        payload["decisionEventRef"] = ref
    return payload


def _base(draft: Mapping[str, Any]) -> dict[str, Any]:
    base = draft.get("payload")
    return base if type(base) is dict else {}
