"""Effective proof (04-artifacts.md §7) and the ZoneCoverageFacts.v1 hash, computed from a FoldState in
O(zones + proofs-for-the-anchor) instead of re-scanning the slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.artifacts.js import (
    coalesce,
    get,
    is_safe_int,
    js_sorted,
    js_string,
    locale_key,
    nonblank,
    truthy,
)
from settlekit.artifacts.state import FoldState, match_key
from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_hash

DEFAULT_THRESHOLD_PCT: Final = 95
DEFAULT_EXCUSE_TYPES: Final = ("BLOCKED_ZONE",)


class ZoneSetInvalid(ValidationError):
    code = "ZONE_SET_INVALID"


def _list_or_empty(v: Any) -> list[Any]:
    return v if type(v) is list else []


def summary_from_payload(p: Mapping[str, Any], at: Any) -> dict[str, Any]:
    """Proof summary of a PROOF_EVALUATED payload (`evaluatedAt` falls back to the event's `at`)."""
    return {
        "status": p.get("status"),
        "reasonCodes": _list_or_empty(p.get("reasonCodes")),
        "evaluatedAt": coalesce(p.get("evaluatedAt"), at),
        "evaluatedAtChainHash": p.get("evaluatedAtChainHash"),
        "evaluationId": p.get("evaluationId"),
        "requiredZonesHash": p.get("requiredZonesHash"),
        "customerPolicyHash": p.get("customerPolicyHash"),
        "operatorPolicyHash": p.get("operatorPolicyHash"),
        "factsHash": p.get("factsHash"),
        "metrics": p.get("metrics"),
    }


def summary_from_settlement_ref(ref: Any) -> dict[str, Any] | None:
    if type(ref) is not dict:
        return None
    forfeit = ref.get("forfeit")
    disposition = (
        {
            "kind": "FORFEIT",
            "holdId": forfeit.get("holdId"),
            "forfeitureReason": forfeit.get("forfeitureReason"),
            "forfeitEventId": forfeit.get("forfeitEventId"),
            "forfeitEventChainHash": forfeit.get("forfeitEventChainHash"),
            "forfeitEventPayloadHash": forfeit.get("forfeitEventPayloadHash"),
        }
        if type(forfeit) is dict
        else None
    )
    return {
        "status": ref.get("status"),
        "reasonCodes": _list_or_empty(ref.get("reasonCodes")),
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


def _validate_zone_set(zone_set: Any) -> list[str]:
    """ZoneSet.v1 checks of settld's proof verifier; returns the zone ids (untrimmed, in order)."""
    if type(zone_set) is not dict:
        raise ZoneSetInvalid("requiredZones must be an object")
    unknown = set(zone_set) - {"schemaVersion", "zoneSetId", "zones"}
    if unknown:
        raise ZoneSetInvalid(f"requiredZones has unknown field {sorted(unknown)[0]}")
    if zone_set.get("schemaVersion") != "ZoneSet.v1":
        raise ZoneSetInvalid("requiredZones.schemaVersion is not supported")
    if not nonblank(zone_set.get("zoneSetId")):
        raise ZoneSetInvalid("requiredZones.zoneSetId must be a non-empty string")
    zones = zone_set.get("zones")
    if type(zones) is not list or not zones:
        raise ZoneSetInvalid("requiredZones.zones must be a non-empty array")
    seen: set[str] = set()
    ids: list[str] = []
    for i, z in enumerate(zones):
        if type(z) is not dict:
            raise ZoneSetInvalid(f"requiredZones.zones[{i}] must be an object")
        if set(z) - {"zoneId", "label", "areaSqFt"}:
            raise ZoneSetInvalid(f"requiredZones.zones[{i}] has an unknown field")
        zone_id = z.get("zoneId")
        if not nonblank(zone_id):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].zoneId must be a non-empty string")
        assert isinstance(zone_id, str)
        label = z.get("label")
        if label is not None and not nonblank(label):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].label must be a non-empty string")
        area = z.get("areaSqFt")
        if area is not None and (type(area) not in (int, float) or not area > 0 or area == float("inf")):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].areaSqFt must be a positive number")
        if zone_id.strip() in seen:
            raise ZoneSetInvalid("requiredZones zone ids must be unique")
        seen.add(zone_id.strip())
        ids.append(zone_id)
    return ids


def zone_coverage_facts(fs: FoldState, booking: Any, anchor: str) -> dict[str, Any]:
    """The ZoneCoverageFacts.v1 document for `anchor`, with the booking at the anchor and the whole slice's
    coverage reports and excuse incidents."""
    policy_snapshot = get(booking, "policySnapshot")
    proof_policy = coalesce(get(policy_snapshot, "proofPolicy"), get(policy_snapshot, "proof"))
    zc = coalesce(get(proof_policy, "zoneCoverage"), {})
    threshold = get(zc, "thresholdPct")
    threshold_pct = threshold if is_safe_int(threshold) else DEFAULT_THRESHOLD_PCT
    raw_types = get(zc, "excuseIncidentTypes")
    excuse_types = [js_string(t) for t in raw_types] if type(raw_types) is list else list(DEFAULT_EXCUSE_TYPES)
    excuse_sorted = js_sorted(set(excuse_types))
    required = coalesce(get(booking, "requiredZones"))
    doc: dict[str, Any] = {
        "schemaVersion": "ZoneCoverageFacts.v1",
        "evaluatedAtChainHash": anchor,
        "requiredZonesHash": get(booking, "requiredZonesHash"),
        "thresholdPct": threshold_pct,
        "requiredZoneIds": [],
        "coverageByZone": [],
        "excusedZones": [],
        "excuseIncidentTypes": excuse_sorted,
    }
    if not truthy(required) or type(required) not in (dict, list):
        return doc
    required_ids = _validate_zone_set(required)
    wanted = set(required_ids)
    rows = []
    for zone_id, report in fs.coverage.items():
        if zone_id not in wanted:
            continue
        pct = report["coveragePct"]
        rows.append(
            {
                "zoneId": zone_id,
                "coveragePct": pct if is_safe_int(pct) else None,
                "window": report["window"],
                "eventId": report["eventId"],
                "chainHash": report["chainHash"],
                "at": report["at"],
            }
        )
    rows.sort(key=lambda r: (locale_key(r["zoneId"]), locale_key(str(coalesce(r["eventId"], "")))))
    excused: set[str] = set()
    for t in set(excuse_types):
        zones = fs.excused.get(t)
        if zones:
            excused.update(zones)
    doc["requiredZoneIds"] = js_sorted(set(required_ids))
    doc["coverageByZone"] = rows
    doc["excusedZones"] = js_sorted(excused)
    return doc


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
    anchor = anchor.strip()
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
