"""Lean payload validation for job events (02-jobs.md §6): the live append path's schema layer.

The live path runs it after settld's API validators (`api_payloads`) and before the API's domain rules
(`server_rules`). Offline tools do not: settld's core reduces any payload, so they take every stream the
reference accepts. Where settld has a validator for the type, every rule here is implied by it (a `-0` its
validators would take cannot be hashed, by settld's canonical JSON either); for the types it has none for
(JOB_CREATED, QUOTE_PROPOSED, MATCHED, SETTLED, the settlement holds, disputes, and a payload that is not an
object) they are settlekit's own live-path rules (README, deliberate differences). Validators are plain
functions over dicts; each gets the snapshot and facts *before* the event and never mutates them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.canonical import is_safe_int
from settlekit.events.js import date_parse_ms, js_nonblank
from settlekit.jobs.errors import PayloadInvalid
from settlekit.ledger.accounts import MAX_AMOUNT_CENTS

ENVIRONMENT_TIERS: Final = frozenset(
    {"ENV_MANAGED_BUILDING", "ENV_HOSPITALITY", "ENV_OFFICE_AFTER_HOURS", "ENV_IN_HOME"}
)
PROOF_STATUSES: Final = frozenset({"PASS", "FAIL", "INSUFFICIENT_EVIDENCE"})
_HEX = frozenset("0123456789abcdef")
MAX_ID_LENGTH: Final = 200  # an id that becomes part of another id (an artifact's), as event and job ids

Payload = Mapping[str, Any]
Validator = Callable[[str, Payload, Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], None]


def is_cents(v: Any) -> bool:
    """A non-negative integer amount within MAX_AMOUNT_CENTS (never a bool or float)."""
    return type(v) is int and 0 <= v <= MAX_AMOUNT_CENTS


def is_nonblank(v: Any) -> bool:
    """A string JavaScript's `trim` leaves non-empty, as settld's checks judge one."""
    return js_nonblank(v)


def is_hex64(v: Any) -> bool:
    """64 hex digits, either case (settld matches /^[a-f0-9]{64}$/i)."""
    return type(v) is str and len(v) == 64 and set(v.lower()) <= _HEX


def _str(t: str, p: Payload, field: str) -> str:
    v: Any = p.get(field)
    if not is_nonblank(v):
        raise PayloadInvalid(t, field, "must be a non-empty string")
    return v


def _opt_str(t: str, p: Payload, field: str) -> None:
    v: Any = p.get(field)
    if v is not None and type(v) is not str:
        raise PayloadInvalid(t, field, "must be a string or null")


def _cents(t: str, p: Payload, field: str, *, positive: bool = False) -> int:
    v: Any = p.get(field)
    if not is_cents(v) or (positive and v == 0):
        raise PayloadInvalid(
            t, field, f"must be an integer {'> 0' if positive else '>= 0'} and <= {MAX_AMOUNT_CENTS}"
        )
    return v


def _currency(t: str, p: Payload, field: str = "currency") -> None:
    if p.get(field) != "USD":
        raise PayloadInvalid(t, field, "must be USD")


def _dict(t: str, p: Payload, field: str, *, optional: bool = False) -> Mapping[str, Any] | None:
    v: Any = p.get(field)
    if v is None and optional:
        return None
    if type(v) is not dict:
        raise PayloadInvalid(t, field, "must be an object")
    return v


def _parse_instant(t: str, field: str, v: Any) -> float:
    """A date string as settld reads it (`Date.parse`, V8's parser): its milliseconds."""
    ms = date_parse_ms(v) if type(v) is str else math.nan
    if math.isnan(ms):
        raise PayloadInvalid(t, field, "must be a date string Date.parse reads")
    return ms


# --- per-type validators ---


def _job_created(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "templateId")
    c: Any = p.get("constraints")
    if c is not None and type(c) is not dict:
        raise PayloadInvalid(t, "constraints", "must be an object")
    if c is not None:
        _opt_str(t, c, "zoneId")
    for field in ("tenantId", "customerId", "siteId", "contractId"):
        _opt_str(t, p, field)


def _quote(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    amount = _cents(t, p, "amountCents")
    b = _dict(t, p, "breakdown", optional=True)
    if b is not None and b.get("coverageFeeCents") is not None:
        fee = b["coverageFeeCents"]
        if not is_cents(fee):
            raise PayloadInvalid(t, "breakdown.coverageFeeCents", "must be an integer >= 0")
        if fee > amount:
            raise PayloadInvalid(t, "breakdown.coverageFeeCents", "must not exceed amountCents")


def _booked(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    start: Any = _parse_instant(t, "startAt", p.get("startAt"))
    end: Any = _parse_instant(t, "endAt", p.get("endAt"))
    if not start < end:
        raise PayloadInvalid(t, "endAt", "must be after startAt")
    if p.get("environmentTier") not in ENVIRONMENT_TIERS:
        raise PayloadInvalid(t, "environmentTier", f"must be one of {sorted(ENVIRONMENT_TIERS)}")
    if type(p.get("requiresOperatorCoverage")) is not bool:
        raise PayloadInvalid(t, "requiresOperatorCoverage", "must be a boolean")
    _str(t, p, "contractId")
    if not is_safe_int(p.get("contractVersion")) or p["contractVersion"] <= 0:
        raise PayloadInvalid(t, "contractVersion", "must be a positive integer")
    if p.get("sla") is not None and type(p.get("sla")) is not dict:
        raise PayloadInvalid(t, "sla", "must be an object")
    for field in ("zoneId", "customerId", "siteId", "customerCompilerId", "requiredZonesHash"):
        _opt_str(t, p, field)
    for field in ("customerContractHash", "policyHash"):
        if p.get(field) is not None and not is_hex64(p[field]):
            raise PayloadInvalid(t, field, "must be 64 hex characters")
    ps = _dict(t, p, "policySnapshot", optional=True)
    if ps is not None:
        for field in ("proofPolicy", "coveragePolicy", "creditPolicy"):
            if ps.get(field) is not None and type(ps[field]) is not dict:
                raise PayloadInvalid(t, f"policySnapshot.{field}", "must be an object or null")


def _risk_scored(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    if p.get("basis") not in ("QUOTE", "BOOK"):
        raise PayloadInvalid(t, "basis", "must be QUOTE or BOOK")
    _str(t, p, "sourceEventId")


def _matched(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "robotId")
    # settld's events route: a compiler id, like either hash, needs both hashes, and is then a non-blank string
    ch, ph, compiler = p.get("operatorContractHash"), p.get("operatorPolicyHash"), p.get("operatorCompilerId")
    if ch is None and ph is None and compiler is None:
        return
    if ch is None or ph is None:
        raise PayloadInvalid(t, "operatorContractHash", "and payload.operatorPolicyHash must be provided together")
    for field, v in (("operatorContractHash", ch), ("operatorPolicyHash", ph)):
        if not is_hex64(v):
            raise PayloadInvalid(t, field, "must be a 64-byte hex sha256")
    if compiler is not None and not is_nonblank(compiler):
        raise PayloadInvalid(t, "operatorCompilerId", "must be a non-empty string")


def _coverage_reserved(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    for field in ("reservationId", "operatorId", "startAt", "endAt"):
        _str(t, p, field)


def _assist_operator(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "operatorId")
    _opt_str(t, p, "queueId")


def _skill_licensed(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "licenseId")
    skill_id: Any = p.get("skillId")
    skill: Any = p.get("skill")
    if not is_nonblank(skill_id) and not (type(skill) is dict and is_nonblank(skill.get("skillId"))):
        raise PayloadInvalid(t, "skillId", "must be a non-empty string (or skill.skillId)")
    pricing = _dict(t, p, "pricing")
    assert pricing is not None
    _cents(t, pricing, "amountCents")


def _incident(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "incidentId")
    _str(t, p, "type")
    sev: Any = p.get("severity")
    if not is_safe_int(sev) or not 1 <= sev <= 5:
        raise PayloadInvalid(t, "severity", "must be an integer 1..5")
    for field in ("summary", "description", "reportedBy", "zoneId"):
        _opt_str(t, p, field)


def _evidence_captured(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    for field in ("evidenceId", "incidentId", "evidenceRef", "kind"):
        _str(t, p, field)
    # contentType and sizeBytes are optional, as in settld; when present they must be well-formed.
    if p.get("contentType") is not None:
        _str(t, p, "contentType")
    if p.get("sizeBytes") is not None and not is_cents(p.get("sizeBytes")):
        raise PayloadInvalid(t, "sizeBytes", "must be an integer >= 0")
    d = p.get("durationSeconds")
    if d is not None and not (type(d) in (int, float) and d >= 0):
        raise PayloadInvalid(t, "durationSeconds", "must be a number >= 0")


def _evidence_ref(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "evidenceId")


def _zone_coverage(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "zoneId")
    pct: Any = p.get("coveragePct")
    if type(pct) not in (int, float) or not 0 <= pct <= 100:
        raise PayloadInvalid(t, "coveragePct", "must be a number 0..100")
    w = _dict(t, p, "window")
    assert w is not None
    _str(t, w, "startAt")
    _str(t, w, "endAt")


def _claim_opened(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "claimId")
    for field in ("incidentId", "reasonCode", "description"):
        _opt_str(t, p, field)


def _claim_ref(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "claimId")


def _claim_approved(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "claimId")
    amounts = _dict(t, p, "amounts")
    assert amounts is not None
    # A missing payoutCents or refundCents counts as 0 (settld); at least one must be > 0.
    payout = _cents(t, amounts, "payoutCents") if amounts.get("payoutCents") is not None else 0
    refund = _cents(t, amounts, "refundCents") if amounts.get("refundCents") is not None else 0
    if payout + refund <= 0:
        raise PayloadInvalid(t, "amounts", "payoutCents + refundCents must be > 0")
    _opt_str(t, p, "notes")


def _claim_denied(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "claimId")
    _opt_str(t, p, "reasonCode")
    _opt_str(t, p, "notes")


def _job_adjusted(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "claimId")
    _opt_str(t, p, "adjustmentId")


def _claim_paid(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "claimId")
    _cents(t, p, "amountCents", positive=True)
    _opt_str(t, p, "paymentRef")


def _proof_evaluated(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "evaluatedAtChainHash")
    _opt_str(t, p, "evaluationId")
    if p.get("status") not in PROOF_STATUSES:
        raise PayloadInvalid(t, "status", f"must be one of {sorted(PROOF_STATUSES)}")
    for field in ("reasonCodes", "missingEvidence"):
        v: Any = p.get(field)
        if v is not None and type(v) is not list:
            raise PayloadInvalid(t, field, "must be a list")


def _settled(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    ref = p.get("settlementProofRef")
    if ref is not None and type(ref) is not dict:
        raise PayloadInvalid(t, "settlementProofRef", "must be an object or null")


def _opt_event_id(t: str, p: Payload, field: str) -> None:
    v: Any = p.get(field)
    if v is not None and not is_nonblank(v):
        raise PayloadInvalid(t, field, "must be a non-empty string or null")


def _operator_cost(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _cents(t, p, "costCents")
    _currency(t, p)
    _opt_event_id(t, p, "settledEventId")


def _sla_breach(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _opt_event_id(t, p, "settledEventId")


def _sla_credit(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    if len(_str(t, p, "creditId")) > MAX_ID_LENGTH:  # it names the CreditMemo: credit_<jobId>_<creditId>
        raise PayloadInvalid(t, "creditId", f"must be at most {MAX_ID_LENGTH} characters")
    _cents(t, p, "amountCents", positive=True)
    _currency(t, p)
    if "issuedAt" in p:  # absent: the event's own time (README, deliberate differences)
        _parse_instant(t, "issuedAt", p.get("issuedAt"))
    _opt_str(t, p, "reason")
    _opt_event_id(t, p, "settledEventId")
    _opt_event_id(t, p, "policyHash")


def _heartbeat(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    ts: Any = p.get("t", "-")  # absent: the event's own time (README, deliberate differences)
    if type(ts) is not str or not ts:
        raise PayloadInvalid(t, "t", "must be a non-empty string")


def _rescheduled(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    w = _dict(t, p, "newWindow")
    assert w is not None
    start: Any = _parse_instant(t, "newWindow.startAt", w.get("startAt"))
    end: Any = _parse_instant(t, "newWindow.endAt", w.get("endAt"))
    if not start < end:
        raise PayloadInvalid(t, "newWindow.endAt", "must be after startAt")


def _hold(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "holdId")


def _dispute(t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]) -> None:
    _str(t, p, "disputeId")


def _job_started(
    t: str, p: Payload, e: Mapping[str, Any], s: Mapping[str, Any], f: Mapping[str, Any]
) -> None:
    _str(t, p, "robotId")


VALIDATORS: Final[dict[str, Validator]] = {
    "JOB_CREATED": _job_created,
    "QUOTE_PROPOSED": _quote,
    "BOOKED": _booked,
    "RISK_SCORED": _risk_scored,
    "MATCHED": _matched,
    "OPERATOR_COVERAGE_RESERVED": _coverage_reserved,
    "ASSIST_ASSIGNED": _assist_operator,
    "ASSIST_ACCEPTED": _assist_operator,
    "SKILL_LICENSED": _skill_licensed,
    "INCIDENT_REPORTED": _incident,
    "INCIDENT_DETECTED": _incident,
    "EVIDENCE_CAPTURED": _evidence_captured,
    "EVIDENCE_EXPIRED": _evidence_ref,
    "EVIDENCE_VIEWED": _evidence_ref,
    "ZONE_COVERAGE_REPORTED": _zone_coverage,
    "CLAIM_OPENED": _claim_opened,
    "CLAIM_TRIAGED": _claim_ref,
    "CLAIM_APPROVED": _claim_approved,
    "CLAIM_DENIED": _claim_denied,
    "JOB_ADJUSTED": _job_adjusted,
    "CLAIM_PAID": _claim_paid,
    "PROOF_EVALUATED": _proof_evaluated,
    "SETTLED": _settled,
    "OPERATOR_COST_RECORDED": _operator_cost,
    "SLA_BREACH_DETECTED": _sla_breach,
    "SLA_CREDIT_ISSUED": _sla_credit,
    "JOB_HEARTBEAT": _heartbeat,
    "JOB_RESCHEDULED": _rescheduled,
    "SETTLEMENT_HELD": _hold,
    "SETTLEMENT_RELEASED": _hold,
    "SETTLEMENT_FORFEITED": _hold,
    "DISPUTE_OPENED": _dispute,
    "DISPUTE_CLOSED": _dispute,
    "JOB_EXECUTION_STARTED": _job_started,
}


def check_genesis_payload(event: Mapping[str, Any]) -> None:
    """The live path's check of a JOB_CREATED payload: an object with `templateId` (the reducer takes any)."""
    p = event.get("payload")
    if type(p) is not dict:
        raise ValidationError("JOB_CREATED.payload must be an object", field="<root>", eventType="JOB_CREATED")
    _job_created("JOB_CREATED", p, event, {}, {})


def validate_payload(event: Mapping[str, Any], snapshot: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """Schema and domain checks for one job event against the state before it. Never mutates anything."""
    t = event["type"]
    p = event.get("payload")
    if p is None:
        p = {}
    elif type(p) is not dict:
        raise PayloadInvalid(t, "<root>", "must be an object or null")
    validator: Any = VALIDATORS.get(t)
    if validator is not None:
        validator(t, p, event, snapshot, facts)


_HEX64_ANY_CASE: Final = frozenset("0123456789abcdefABCDEF")


def check_matched_as_settld(event: Mapping[str, Any]) -> None:
    """settld's events route on a MATCHED payload (what its domain check adds to its validators), for recorded
    history, which skips this module's own rules: a payload object (an array passes, as in JavaScript), a non-blank
    `robotId`, and the operator contract and policy hashes together, each 64 hex digits of either case, with a
    non-blank `operatorCompilerId` only beside them. Its robot registry and zone checks are not made (settlekit
    has no robot registry)."""
    t = "MATCHED"
    p = event.get("payload")
    if type(p) not in (dict, list):
        raise PayloadInvalid(t, "<root>", "is required")
    values: Mapping[str, Any] = p if type(p) is dict else {}
    if not js_nonblank(values.get("robotId")):
        raise PayloadInvalid(t, "robotId", "must be a non-empty string")
    ch, ph, compiler = values.get("operatorContractHash"), values.get("operatorPolicyHash"), \
        values.get("operatorCompilerId")
    if ch is None and ph is None and compiler is None:
        return
    if ch is None or ph is None:
        raise PayloadInvalid(t, "operatorContractHash", "and payload.operatorPolicyHash must be provided together")
    for field, v in (("operatorContractHash", ch), ("operatorPolicyHash", ph)):
        if type(v) is not str or len(v) != 64 or not set(v) <= _HEX64_ANY_CASE:
            raise PayloadInvalid(t, field, "must be a 64-byte hex sha256")
    if compiler is not None and not js_nonblank(compiler):
        raise PayloadInvalid(t, "operatorCompilerId", "must be a non-empty string")
