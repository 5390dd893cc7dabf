"""Effective proof (04-artifacts.md §7), computed from a FoldState in O(zones + proofs-for-the-anchor) instead
of re-scanning the slice. The ZoneCoverageFacts.v1 document lives in `settlekit.jobs.zone_coverage` (the server
rules need it too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from settlekit.artifacts.state import FoldState, match_key
from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_hash
from settlekit.events.js import (
    coalesce,
    get,
    is_object,
    js_trim,
    nonblank,
    truthy,
)
from settlekit.jobs.proof_fields import list_or_empty, proof_hashes
from settlekit.jobs.zone_coverage import zone_coverage_facts


def summary_from_payload(p: Mapping[str, Any], at: Any) -> dict[str, Any]:
    """Proof summary of a PROOF_EVALUATED payload (`evaluatedAt` falls back to the event's `at`)."""
    return {
        "status": p.get("status"),
        "reasonCodes": list_or_empty(p.get("reasonCodes")),
        "evaluatedAt": coalesce(p.get("evaluatedAt"), at),
        "evaluatedAtChainHash": p.get("evaluatedAtChainHash"),
        "evaluationId": p.get("evaluationId"),
        **proof_hashes(p),
        "metrics": p.get("metrics"),
    }


def summary_from_settlement_ref(ref: Any) -> dict[str, Any] | None:
    """The proof summary a SETTLED's `settlementProofRef` gives: None unless it is an object; an array counts
    as an object without fields, as in settld."""
    if not is_object(ref):
        return None
    if type(ref) is not dict:
        ref = {}
    forfeit: Any = ref.get("forfeit")
    disposition = (
        {
            "kind": "FORFEIT",
            "holdId": get(forfeit, "holdId"),
            "forfeitureReason": get(forfeit, "forfeitureReason"),
            "forfeitEventId": get(forfeit, "forfeitEventId"),
            "forfeitEventChainHash": get(forfeit, "forfeitEventChainHash"),
            "forfeitEventPayloadHash": get(forfeit, "forfeitEventPayloadHash"),
        }
        if is_object(forfeit)
        else None
    )
    return {
        "status": ref.get("status"),
        "reasonCodes": list_or_empty(ref.get("reasonCodes")),
        "evaluatedAt": ref.get("proofEventAt"),
        "evaluatedAtChainHash": ref.get("evaluatedAtChainHash"),
        "evaluationId": ref.get("evaluationId"),
        "requiredZonesHash": ref.get("requiredZonesHash"),
        "customerPolicyHash": ref.get("customerPolicyHash"),
        "operatorPolicyHash": ref.get("operatorPolicyHash"),
        "factsHash": ref.get("factsHash"),
        "metrics": ref.get("metrics"),
        "source": {
            "kind": "SETTLEMENT",
            "proofEventId": ref.get("proofEventId"),
            "proofEventChainHash": ref.get("proofEventChainHash"),
            "proofEventPayloadHash": ref.get("proofEventPayloadHash"),
            "disposition": disposition,
        },
    }


def latest_proof_summary(fs: FoldState) -> dict[str, Any] | None:
    latest = fs.facts["latestProofEvent"]
    if latest is None or type(latest.get("payload")) is not dict:
        return None
    return summary_from_payload(latest["payload"], latest.get("at"))


def effective_proof(fs: FoldState) -> dict[str, Any] | None:
    """The proof block of WorkCertificate and SettlementStatement (§7)."""
    snapshot = fs.snapshot
    settlement = snapshot.get("settlement")
    if type(settlement) is dict:
        ref = settlement.get("settlementProofRef")
        if truthy(ref):
            return summary_from_settlement_ref(ref)
    completion = fs.facts["latestCompletion"]
    anchor: Any = completion.get("chainHash") if completion else None
    if not nonblank(anchor):
        return latest_proof_summary(fs)
    assert isinstance(anchor, str)
    anchor = js_trim(anchor)
    job_at = fs.facts["jobAtLatestCompletion"] or {}
    booking = job_at.get("booking")
    try:
        facts_hash = canonical_hash(zone_coverage_facts(fs, booking, anchor))
    except ValidationError:
        return latest_proof_summary(fs)
    cph = coalesce(job_at.get("customerPolicyHash"), get(booking, "policyHash"))
    if truthy(cph):
        match = fs.proof_match_policy.get(match_key(anchor, facts_hash, cph)) if type(cph) is str else None
    else:
        match = fs.proof_match.get(match_key(anchor, facts_hash))
    if match is not None:
        return {**summary_from_payload(match["payload"], match.get("at")), "source": {"kind": "FRESH"}}
    stale = latest_proof_summary(fs)
    if stale is None:
        return None
    return {**stale, "source": {"kind": "STALE"}, "expectedFactsHash": facts_hash}
