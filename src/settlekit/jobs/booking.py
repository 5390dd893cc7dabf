"""Completing a BOOKED server draft the way settld's booking route builds its payload.

settld's API accepts a BOOKED event only with its policy snapshot and that snapshot's hash (`policySnapshot`,
`policyHash`), plus `creditPolicy` and `evidencePolicy`; its booking route computes them. settlekit completes a
BOOKED *draft* (which the server signs) that leaves them out, with settld's defaults for the two policies. A
client-finalized BOOKED is never changed: it must carry them, as in settld.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.ledger.contracts import normalize_policy_snapshot, policy_snapshot_hash

DEFAULT_CREDIT_POLICY: Final = {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0, "currency": "USD"}
DEFAULT_EVIDENCE_POLICY: Final = {"retentionDays": 0}


def complete_booking_draft(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The draft's payload with `creditPolicy`, `evidencePolicy`, `policySnapshot` and `policyHash` filled in
    where absent (a payload that already has a snapshot is returned as it is)."""
    out = dict(payload)
    if "policySnapshot" in out:
        return out
    out.setdefault("creditPolicy", dict(DEFAULT_CREDIT_POLICY))
    out.setdefault("evidencePolicy", dict(DEFAULT_EVIDENCE_POLICY))
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
