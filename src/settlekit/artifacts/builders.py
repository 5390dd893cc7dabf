"""Pure builders of the six v1 job artifacts from a folded slice (04-artifacts.md §2-§5, §9).

`build_artifact(fs, task, …)` reads only the FoldState at the end of the slice (and the source event), so a
build costs O(size of the output + ledger entries), never a re-scan of the events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from settlekit.artifacts import types as T
from settlekit.artifacts.proof import effective_proof
from settlekit.artifacts.state import FoldState
from settlekit.errors import CanonicalJsonError, SettlekitError, ValidationError
from settlekit.events.canonical import canonical_hash, sha256_hex
from settlekit.events.js import (
    coalesce,
    get,
    js_add,
    js_integer,
    js_is_safe_integer,
    js_sorted,
    js_string,
    locale_key,
    nonblank,
    truthy,
)
from settlekit.jobs.proof_fields import proof_hashes
from settlekit.ledger.allocations import allocations_for_entry
from settlekit.ledger.contracts import contract_split_plan_hash
from settlekit.ledger.postings import js_floor_div

ContractResolver = Callable[[str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class BuildTask:
    """One (source event, artifact type) build request (§6); `source_chain_hash` is the slice anchor."""

    tenant_id: str
    job_id: str
    source_event_id: str | None
    source_event_type: str | None
    source_chain_hash: str | None
    source_at: str | None
    artifact_type: str

    def to_outbox(self) -> dict[str, Any]:
        """The settld `ARTIFACT_ENQUEUE` message form (vectors' `artifactOutbox`)."""
        return {
            "type": "ARTIFACT_ENQUEUE",
            "tenantId": self.tenant_id,
            "jobId": self.job_id,
            "sourceEventId": self.source_event_id,
            "sourceEventType": self.source_event_type,
            "sourceChainHash": self.source_chain_hash,
            "sourceAt": self.source_at,
            "artifactTypes": [self.artifact_type],
        }

    @classmethod
    def from_outbox(cls, msg: Mapping[str, Any]) -> BuildTask:
        types = msg.get("artifactTypes") or []
        return cls(
            tenant_id=msg["tenantId"],
            job_id=msg["jobId"],
            source_event_id=msg.get("sourceEventId"),
            source_event_type=msg.get("sourceEventType"),
            source_chain_hash=msg.get("sourceChainHash"),
            source_at=msg.get("sourceAt"),
            artifact_type=T.require_artifact_type(types[0] if types else None),
        )


# ---------------------------------------------------------------------------------------------- ids


def artifact_id(
    artifact_type: str, job_id: str, source_event: Mapping[str, Any] | None, head_chain_hash: Any
) -> str:
    """`<prefix>_<jobId>_<suffix>` (§5); CreditMemo uses the payload's creditId when it is non-blank."""
    prefix = T.ID_PREFIX[artifact_type]
    if artifact_type == T.CREDIT_MEMO and source_event is not None:
        credit_id = get(source_event.get("payload"), "creditId")
        if nonblank(credit_id):
            return f"{prefix}_{job_id}_{credit_id}"
    if source_event is not None and nonblank(source_event.get("id")):
        suffix = source_event["id"]
    elif source_event is not None and nonblank(source_event.get("chainHash")):
        suffix = source_event["chainHash"]
    elif head_chain_hash is not None:
        suffix = head_chain_hash
    else:
        suffix = "unknown"
    return f"{prefix}_{job_id}_{suffix}"


def compute_artifact_hash(artifact: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the artifact; it must not contain `artifactHash` (§3)."""
    if "artifactHash" in artifact:
        raise ValidationError("an artifact must not include artifactHash when hashed", code="ARTIFACT_INVALID")
    return canonical_hash(artifact)


# ---------------------------------------------------------------------------------------------- parts


def policy_hash_from_booking(booking: Any) -> str | None:
    if type(booking) is not dict:
        return None
    if nonblank(booking.get("policyHash")):
        return str(booking["policyHash"])
    ps = booking.get("policySnapshot")
    if type(ps) in (dict, list) and truthy(ps):
        try:
            return canonical_hash(ps)
        except CanonicalJsonError:
            pass  # not canonical JSON (e.g. a negative zero): settld too falls back to the field hash below
    return canonical_hash(
        {
            "sla": booking.get("sla"),
            "creditPolicy": booking.get("creditPolicy"),
            "evidencePolicy": booking.get("evidencePolicy"),
            "requiresOperatorCoverage": booking.get("requiresOperatorCoverage"),
            "environmentTier": booking.get("environmentTier"),
            "startAt": booking.get("startAt"),
            "endAt": booking.get("endAt"),
        }
    )


def _risk(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    scores = snapshot.get("riskScores")
    if type(scores) is not list or not scores:
        return None
    latest = scores[-1]
    p = get(latest, "payload")
    if type(p) is not dict:
        return None
    return {
        "basis": p.get("basis"),
        "scoredAt": coalesce(p.get("scoredAt"), get(latest, "at")),
        "modelVersion": p.get("modelVersion"),
        "riskScore": p.get("riskScore"),
        "expectedAssistSeconds": p.get("expectedAssistSeconds"),
        "expectedIncidentProbabilityBps": p.get("expectedIncidentProbabilityBps"),
        "expectedCreditBurnRateCents": p.get("expectedCreditBurnRateCents"),
        "currency": p.get("currency"),
        "policyHash": p.get("policyHash"),
    }


def _evidence(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = snapshot.get("evidence")
    if type(items) is not list:
        return []
    out = []
    for e in items:
        ref = get(e, "evidenceRef")
        out.append(
            {
                "evidenceId": get(e, "evidenceId"),
                "capturedAt": get(e, "capturedAt"),  # the snapshot has no capturedAt: always null (§12)
                "contentType": get(e, "contentType"),
                "evidenceRefHash": sha256_hex(ref) if nonblank(ref) else None,
                "redaction": get(e, "redaction"),
                "expiredAt": get(e, "expiredAt"),
            }
        )
    return out


def _window(booking: Any) -> dict[str, Any] | None:
    if type(booking) is not dict:
        return None
    return {"startAt": booking.get("startAt"), "endAt": booking.get("endAt")}


def _ids(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    booking = snapshot.get("booking")
    return {
        "templateId": snapshot.get("templateId"),
        "customerId": coalesce(get(booking, "customerId"), snapshot.get("customerId")),
        "siteId": coalesce(get(booking, "siteId"), snapshot.get("siteId")),
        "contractId": coalesce(get(booking, "contractId"), snapshot.get("contractId")),
    }


def _zone(snapshot: Mapping[str, Any]) -> Any:
    return coalesce(get(snapshot.get("booking"), "zoneId"), get(snapshot.get("constraints"), "zoneId"))


def _contract_pins(snapshot: Mapping[str, Any], policy_hash: str | None) -> dict[str, Any]:
    booking = snapshot.get("booking")
    return {
        "customerContractHash": get(booking, "customerContractHash"),
        "customerCompilerId": get(booking, "customerCompilerId"),
        "customerPolicyHash": policy_hash,
        "operatorContractHash": snapshot.get("operatorContractHash"),
        "operatorCompilerId": snapshot.get("operatorCompilerId"),
        "operatorPolicyHash": snapshot.get("operatorPolicyHash"),
    }


def _count(snapshot: Mapping[str, Any], key: str) -> int:
    return len(_list(snapshot, key))


def _list(snapshot: Mapping[str, Any], key: str) -> list[Any]:
    v = snapshot.get(key)
    return v if type(v) is list else []


def _coverage_policy(booking: Any) -> Any:
    return coalesce(get(get(booking, "policySnapshot"), "coveragePolicy"), get(booking, "coveragePolicy"))


# ---------------------------------------------------------------------------------------------- bodies


def _job_placement(s: Mapping[str, Any], booking: Any, policy_hash: str | None) -> dict[str, Any]:
    """The job fields the work certificate and the settlement statement both open with."""
    return {
        **_ids(s),
        **_contract_pins(s, policy_hash),
        "requiredZonesHash": get(booking, "requiredZonesHash"),
        "zoneId": _zone(s),
        "environmentTier": get(booking, "environmentTier"),
    }


def _work_certificate(fs: FoldState, policy_hash: str | None) -> dict[str, Any]:
    s = fs.snapshot
    booking = s.get("booking")
    return {
        "proof": effective_proof(fs),
        "job": {
            **_job_placement(s, booking, policy_hash),
            "bookingWindow": _window(booking),
            "access": s.get("access"),
            "execution": s.get("execution"),
            "assist": s.get("assist"),
            "operatorCoverage": s.get("operatorCoverage"),
            "risk": _risk(s),
            "incidentsCount": _count(s, "incidents"),
            "claimsCount": _count(s, "claims"),
            "slaBreachesCount": _count(s, "slaBreaches"),
            "slaCreditsCount": _count(s, "slaCredits"),
            "status": s.get("status"),
        },
        "evidence": _evidence(s),
    }


def _proof_receipt(fs: FoldState, policy_hash: str | None) -> dict[str, Any]:
    s = fs.snapshot
    booking = s.get("booking")
    latest = fs.facts["latestProofEvent"]
    receipt = None
    if latest is not None and type(latest.get("payload")) is dict:
        p = latest["payload"]
        receipt = {
            "proofEventId": latest.get("id"),
            "proofEventAt": coalesce(p.get("evaluatedAt"), latest.get("at")),
            "proofEventChainHash": latest.get("chainHash"),
            "proofEventPayloadHash": latest.get("payloadHash"),
            "proofEventSignerKeyId": latest.get("signerKeyId"),
            "proofEventSignature": latest.get("signature"),
            "evaluatedAtChainHash": p.get("evaluatedAtChainHash"),
            "evaluationId": p.get("evaluationId"),
            "status": p.get("status"),
            "reasonCodes": p["reasonCodes"] if type(p.get("reasonCodes")) is list else [],
            "missingEvidence": p["missingEvidence"] if type(p.get("missingEvidence")) is list else [],
            **proof_hashes(p),
            "metrics": p.get("metrics"),
        }
    return {
        "proofReceipt": receipt,
        "job": {
            **_ids(s),
            "environmentTier": get(booking, "environmentTier"),
            "bookingWindow": _window(booking),
            "status": s.get("status"),
        },
    }


def _coverage_certificate(fs: FoldState, policy_hash: str | None) -> dict[str, Any]:
    s = fs.snapshot
    booking = s.get("booking")
    cp = _coverage_policy(booking)
    ps = get(booking, "policySnapshot")
    return {
        "job": {
            **_ids(s),
            **_contract_pins(s, policy_hash),
            "zoneId": _zone(s),
            "environmentTier": get(booking, "environmentTier"),
            "bookingWindow": _window(booking),
            "risk": _risk(s),
        },
        "coverage": {
            "required": get(cp, "required"),
            "coverageTierId": get(cp, "coverageTierId"),
            "feeModel": get(cp, "feeModel"),
            "feeCentsPerJob": get(cp, "feeCentsPerJob"),
            "creditFundingModel": get(cp, "creditFundingModel"),
            "reserveFundPercent": get(cp, "reserveFundPercent"),
            "insurerId": get(cp, "insurerId"),
            "recoverablePercent": get(cp, "recoverablePercent"),
            "recoverableTerms": get(cp, "recoverableTerms"),
            "responseSlaSeconds": get(cp, "responseSlaSeconds"),
            "includedAssistSeconds": get(cp, "includedAssistSeconds"),
            "overageRateCentsPerMinute": get(cp, "overageRateCentsPerMinute"),
            "creditPolicy": coalesce(get(ps, "creditPolicy"), get(booking, "creditPolicy")),
            "sla": coalesce(get(ps, "sla"), get(booking, "sla")),
        },
    }


def _short_job(s: Mapping[str, Any]) -> dict[str, Any]:
    return {**_ids(s), "zoneId": _zone(s), "environmentTier": get(s.get("booking"), "environmentTier")}


def _incident_packet(fs: FoldState, policy_hash: str | None) -> dict[str, Any]:
    s = fs.snapshot
    incidents = _list(s, "incidents")
    claims = _list(s, "claims")
    return {
        "job": _short_job(s),
        "incidents": [
            {
                "incidentId": get(i, "incidentId"),
                "type": get(i, "type"),
                "severity": get(i, "severity"),
                # not kept by the snapshot: always null in v1 (§12)
                "status": get(i, "status"),
                "reportedAt": get(i, "reportedAt"),
                "detectedAt": get(i, "detectedAt"),
                "description": get(i, "description"),
                "reportedBy": get(i, "reportedBy"),
            }
            for i in incidents
        ],
        "claims": [
            {
                "claimId": get(c, "claimId"),
                "incidentId": get(c, "incidentId"),
                "status": get(c, "status"),
                "approved": get(c, "approved"),
                "paid": get(c, "paid"),
                "openedAt": get(c, "openedAt"),
                "triagedAt": get(c, "triagedAt"),
                "approvedAt": get(c, "approvedAt"),
                "deniedAt": get(c, "deniedAt"),
                "paidAt": get(c, "paidAt"),
            }
            for c in claims
        ],
        "evidence": _evidence(s),
    }


def _credit_memo(fs: FoldState, source_event: Mapping[str, Any] | None) -> dict[str, Any]:
    if source_event is None:
        raise ValidationError("a CreditMemo needs its SLA_CREDIT_ISSUED source event in the slice",
                              code="ARTIFACT_SOURCE_NOT_FOUND")
    s = fs.snapshot
    p = coalesce(source_event.get("payload"), {})
    cp = _coverage_policy(s.get("booking"))
    model = get(cp, "creditFundingModel")
    insurer = get(cp, "insurerId") if model == "INSURER_RECOVERABLE" else None
    raw_pct = coalesce(get(cp, "recoverablePercent"), 100)
    pct = min(max(int(raw_pct), 0), 100) if js_is_safe_integer(raw_pct) else 100
    amount = get(p, "amountCents")
    credit_id = get(p, "creditId")
    ref_id = credit_id if nonblank(credit_id) else source_event.get("id")
    has_insurer = truthy(insurer)
    return {
        "credit": {
            "creditId": credit_id,
            "type": "SLA",
            "amountCents": amount,
            "currency": get(p, "currency"),
            "issuedAt": coalesce(get(p, "issuedAt"), source_event.get("at")),
            "reason": get(p, "reason"),
            "trigger": get(p, "trigger"),
            "settledEventId": get(p, "settledEventId"),
            "funding": {
                "model": model,
                "insurerId": insurer,
                "recoverablePercent": pct if has_insurer else None,
                "recoverableCents": js_integer(js_floor_div(int(amount), pct, 100))
                if has_insurer and js_is_safe_integer(amount) else None,
                "receivableRefId": f"recv_{s['id']}_{ref_id}" if has_insurer and truthy(ref_id) else None,
            },
        },
        "job": _short_job(s),
    }


_FEE_ACCOUNTS = frozenset({"acct_platform_revenue"})
_PAYOUT_ACCOUNTS = frozenset({"acct_owner_payable", "acct_operator_payable"})
_CREDIT_ACCOUNTS = frozenset({"acct_customer_credits_payable"})


def settlement_rollup(
    fs: FoldState, tenant_id: str, contract_doc: Mapping[str, Any] | None
) -> dict[str, Any]:
    """`SettlementStatement.settlement` (§9), from the slice's entries and the job at the end of the slice."""
    s = fs.snapshot
    entry_ids, totals, allocations = _tally_entries(fs, tenant_id, contract_doc)
    party_rollups = _party_rollups(allocations)
    quote_amount = get(s.get("quote"), "amountCents")
    claims = _list(s, "claims")
    return {
        "currency": "USD",
        "quoteAmountCents": int(quote_amount) if js_is_safe_integer(quote_amount) else 0,
        "operatorCostCents": _sum_payload(s.get("operatorCosts"), "costCents"),
        "slaCreditsCents": _sum_payload(s.get("slaCredits"), "amountCents"),
        "claimsPaidCents": _claims_paid(claims),
        "splitPlanHash": _split_plan_hash(contract_doc),
        "partyRollups": party_rollups,
        "ledgerEntryIds": js_sorted(entry_ids),
        "totalsByAccountId": totals,
    }


def _tally_entries(
    fs: FoldState, tenant_id: str, contract_doc: Mapping[str, Any] | None
) -> tuple[list[str], dict[str, int | float], list[dict[str, Any]]]:
    """`(entry ids, totals by account id, allocations)` of the slice's entries that have an id; an entry whose
    allocation fails adds no allocations (settld skips it, §9.3)."""
    s = fs.snapshot
    entry_ids: list[str] = []
    totals: dict[str, int | float] = {}  # JS numbers: sums beyond the safe range are doubles (js_add)
    allocations: list[dict[str, Any]] = []
    for entry in fs.entries:
        if not truthy(entry.get("id")):
            continue
        entry_ids.append(entry["id"])
        for posting in entry.get("postings") or []:
            amount = posting.get("amountCents")
            account = posting.get("accountId")
            if truthy(account) and js_is_safe_integer(amount):
                totals[account] = js_add(totals.get(account, 0), int(amount))
        try:
            allocations.extend(allocations_for_entry(entry, s, tenant_id=tenant_id, contract_doc=contract_doc))
        except SettlekitError:
            continue  # settld skips an entry whose allocation fails (§9.3)
    return entry_ids, totals, allocations


def _party_rollups(allocations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fees, payouts, credits and balance delta per (role, party), sorted by role then party id."""
    rollups: dict[tuple[str, str], dict[str, Any]] = {}
    for a in allocations:
        role: Any = a.get("partyRole")
        party: Any = a.get("partyId")
        if not truthy(role) or not truthy(party):
            continue
        row = rollups.get((role, party))
        if row is None:
            row = rollups[(role, party)] = {
                "partyRole": role,
                "partyId": party,
                "feesCents": 0,
                "payoutCents": 0,
                "creditsCents": 0,
                "netCents": 0,
                "balanceDeltaCents": 0,
            }
        amount = int(a["amountCents"]) if js_is_safe_integer(a.get("amountCents")) else 0
        row["balanceDeltaCents"] = js_add(row["balanceDeltaCents"], amount)
        account = a.get("accountId")
        if account in _FEE_ACCOUNTS:
            row["feesCents"] = js_add(row["feesCents"], -amount)
        if account in _PAYOUT_ACCOUNTS:
            row["payoutCents"] = js_add(row["payoutCents"], -amount)
        if account in _CREDIT_ACCOUNTS:
            row["creditsCents"] = js_add(row["creditsCents"], -amount)
        row["netCents"] = js_add(js_add(row["feesCents"], row["payoutCents"]), row["creditsCents"])
    return sorted(
        rollups.values(),
        key=lambda r: (
            locale_key(js_string(coalesce(r["partyRole"], ""))),
            locale_key(js_string(coalesce(r["partyId"], ""))),
        ),
    )


def _claims_paid(claims: list[Any]) -> int | float:
    total: int | float = 0
    for c in claims:
        amount = get(get(c, "paid"), "amountCents")
        if get(c, "status") == "PAID" and js_is_safe_integer(amount):
            total = js_add(total, int(amount))
    return total


def _sum_payload(items: Any, key: str) -> int | float:
    if type(items) is not list:
        return 0
    total: int | float = 0
    for item in items:
        v = get(get(item, "payload"), key)
        if js_is_safe_integer(v):
            total = js_add(total, int(v))
    return total


def _split_plan_hash(contract_doc: Mapping[str, Any] | None) -> str | None:
    if contract_doc is None:
        return None
    try:
        return contract_split_plan_hash(contract_doc)
    except SettlekitError:
        return None


def resolve_contract(snapshot: Mapping[str, Any], resolver: ContractResolver | None) -> Mapping[str, Any] | None:
    """The operator contract document by `job.operatorContractHash`; a failed lookup means no document, and a
    document whose split plan cannot be hashed is dropped (as settld does)."""
    contract_hash = snapshot.get("operatorContractHash")
    if resolver is None or not truthy(contract_hash):
        return None
    try:
        doc = resolver(str(contract_hash))
    except (SettlekitError, LookupError):
        return None
    if doc is None:
        return None
    try:
        contract_split_plan_hash(doc)
    except SettlekitError:
        return None
    return doc


def _settlement_statement(
    fs: FoldState, policy_hash: str | None, tenant_id: str, contract_doc: Mapping[str, Any] | None
) -> dict[str, Any]:
    s = fs.snapshot
    return {
        "proof": effective_proof(fs),
        "job": _job_placement(s, s.get("booking"), policy_hash),
        "settlement": settlement_rollup(fs, tenant_id, contract_doc),
    }


# ---------------------------------------------------------------------------------------------- assembly


def _event_proof(fs: FoldState, head: Mapping[str, Any]) -> dict[str, Any]:
    facts = fs.facts
    return {
        "lastChainHash": head.get("chainHash"),
        "eventCount": fs.count,
        "signatures": {
            "signedEventCount": facts["signedEventCount"],
            "signerKeyIds": js_sorted(facts["signerKeyIds"]),
        },
    }


def _artifact_body(
    fs: FoldState,
    artifact_type: str,
    policy_hash: str | None,
    task: BuildTask,
    source_event: Mapping[str, Any] | None,
    contract_resolver: ContractResolver | None,
) -> dict[str, Any]:
    """The type-specific part of an artifact (only a settlement statement resolves the operator contract)."""
    if artifact_type == T.WORK_CERTIFICATE:
        return _work_certificate(fs, policy_hash)
    if artifact_type == T.PROOF_RECEIPT:
        return _proof_receipt(fs, policy_hash)
    if artifact_type == T.COVERAGE_CERTIFICATE:
        return _coverage_certificate(fs, policy_hash)
    if artifact_type == T.INCIDENT_PACKET:
        return _incident_packet(fs, policy_hash)
    if artifact_type == T.CREDIT_MEMO:
        return _credit_memo(fs, source_event)
    contract_doc = resolve_contract(fs.snapshot, contract_resolver)
    return _settlement_statement(fs, policy_hash, task.tenant_id, contract_doc)


def _add_source_fields(
    artifact: dict[str, Any], task: BuildTask, source_event: Mapping[str, Any] | None, head: Mapping[str, Any]
) -> None:
    """The source event's id, type and chain hash, and the anchor (`atChainHash`), in that key order."""
    source_chain_hash = task.source_chain_hash
    artifact["sourceEventId"] = task.source_event_id
    artifact["sourceEventType"] = source_event.get("type") if source_event is not None else task.source_event_type
    artifact["sourceEventChainHash"] = (
        source_chain_hash if source_chain_hash is not None else get(source_event, "chainHash")
    )
    artifact["atChainHash"] = source_chain_hash if source_chain_hash is not None else head.get("chainHash")


def build_artifact(
    fs: FoldState,
    task: BuildTask,
    source_event: Mapping[str, Any] | None,
    *,
    generated_at: str | None = None,
    contract_resolver: ContractResolver | None = None,
) -> dict[str, Any]:
    """The artifact of `task` from `fs` folded through the task's anchor (`fs.head` is the slice's last event).

    `source_event` is the event with `task.source_event_id` when it lies in the slice, else None.
    `generated_at` defaults to the `at` of the slice's last event (deterministic rebuilds, §8).
    """
    head = fs.head
    if fs.job is None or head is None:
        raise ValidationError("the slice is empty", code="ARTIFACT_SLICE_EMPTY")
    s = fs.snapshot
    artifact_type = T.require_artifact_type(task.artifact_type)
    policy_hash = policy_hash_from_booking(s.get("booking"))
    generated = generated_at if generated_at is not None else head.get("at")
    if not nonblank(generated):
        raise ValidationError("generatedAt must be a non-empty string", code="ARTIFACT_INVALID")
    artifact: dict[str, Any] = {
        "schemaVersion": artifact_type,
        "artifactType": artifact_type,
        "artifactId": artifact_id(artifact_type, s["id"], source_event, head.get("chainHash")),
        "generatedAt": generated,
        "tenantId": task.tenant_id,
        "jobId": s["id"],
        "jobVersion": fs.count,
        "policyHash": policy_hash,
        "eventProof": _event_proof(fs, head),
    }
    artifact.update(_artifact_body(fs, artifact_type, policy_hash, task, source_event, contract_resolver))
    _add_source_fields(artifact, task, source_event, head)
    artifact["artifactHash"] = compute_artifact_hash(artifact)
    return artifact
