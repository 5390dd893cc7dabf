"""Completing server drafts (events the server signs) whose payload leaves out what settld's rules require.

BOOKED: settld's API accepts one only with its policy snapshot and that snapshot's hash (`policySnapshot`,
`policyHash`), plus `creditPolicy` and `evidencePolicy`; its booking route computes them, its events route refuses
a BOOKED without them. settlekit completes a BOOKED draft that leaves them out (a deliberate leniency, README), with
settld's default credit and evidence policies. DECISION_RECORDED: settld's events route completes a draft itself
(decisionId, kind, the latest hold, decidedAt, the lists, policyHash); so does settlekit. A client-finalized event
is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.events.js import coalesce
from settlekit.jobs.api_payloads._js import is_nonblank
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
                            hold_ids: list[str]) -> dict[str, Any]:
    """A DECISION_RECORDED draft's payload as settld's events route completes it (`hold_ids`: the job's holds,
    latest last). The decisionId, when absent, derives from the draft's id, so a retried draft gets the same one."""
    base: Any = draft.get("payload")
    base = base if type(base) is dict else {}
    booking = snapshot.get("booking") if type(snapshot.get("booking")) is dict else {}
    assert isinstance(booking, dict)
    policy_hash = coalesce(base.get("policyHash"), booking.get("policyHash"), snapshot.get("customerPolicyHash"))
    return {
        "jobId": draft["streamId"],
        "decisionId": base["decisionId"] if is_nonblank(base.get("decisionId")) else f"dec_{draft.get('id')}",
        "decidedAt": draft.get("at"),
        "kind": base["kind"] if is_nonblank(base.get("kind")) else "SETTLEMENT_FORFEIT",
        "holdId": base["holdId"] if is_nonblank(base.get("holdId")) else (hold_ids[-1] if hold_ids else None),
        "forfeitureReason": coalesce(base.get("forfeitureReason"), base.get("reason")),
        "reasonCodes": base["reasonCodes"] if type(base.get("reasonCodes")) is list else [],
        "evidenceRefs": base["evidenceRefs"] if type(base.get("evidenceRefs")) is list else [],
        "policyHash": policy_hash,
    }
