"""The live API's append-time domain rules for job events (live path only; pure, no I/O).

settld 0.1.0 judges an event in layers: payload validators and the transition table (`validate`, `reducer`:
every path, offline included), posting rules (`ledger.postings`: errors are recorded, never refused), and the
HTTP API's own domain rules at append time. This module is that last layer: ordering rules ("only allowed
after settlement"), duplicates ("already recorded for this settlement"), cross-checks against the job ("payload.t
must match event.at", "payload.settledEventId must match last SETTLED event id"), claim and proof gating. Only
the store's append path applies it (`process_job_events(..., live=True)`); offline tools never do, so they
reproduce settld on every stream its core accepts.

Each refusal raises `ServerRuleViolation` with a stable `code` and settld's message text. The rules need a
little history the job snapshot does not keep (last QUOTE_PROPOSED / BOOKED / SETTLED ids, claim states as
the API sees them, proof keys, ...): `observe` folds it into a JSON-able dict stored with the job state under
`STATE_KEY`, with its format's version; a stored history of another version, or none (a state stored before
these rules existed), is rebuilt from the stream's events before the next live append (`facts_from_events`).

Rules that need data outside the job stream (robot and operator registry, availability, shift capacity,
closed months, tenant quotas and evidence allow-lists) are not applied here: robots and operators are taken
as existing, active and in zone.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_hash, canonical_json, is_safe_int
from settlekit.events.js import (
    coalesce,
    date_parse_ms,
    get,
    is_object,
    js_is_safe_integer,
    js_string,
    js_usv_string,
    truthy,
)
from settlekit.jobs.api_payloads._js import (
    MISSING,
    Rejected,
    is_hex64,
    is_nonblank,
    is_nullish,
    js_trim,
    strictly_equal,
)
from settlekit.jobs.api_payloads._js import field as js_field
from settlekit.jobs.api_payloads.booking import zone_set_hash
from settlekit.jobs.errors import DomainRuleViolation
from settlekit.jobs.reducer import JobState
from settlekit.jobs.zone_coverage import observe_coverage_report, observe_excuse_incident, zone_coverage_facts
from settlekit.ledger.postings import gate_mode

STATE_KEY: Final = "serverRules"
Event = Mapping[str, Any]
Facts = dict[str, Any]

_TERMINAL: Final = frozenset({"COMPLETED", "ABORTED", "SETTLED"})
_DECIDED: Final = frozenset({"APPROVED", "DENIED", "PAID"})
_SEP: Final = "\x1f"


class ServerRuleViolation(DomainRuleViolation):
    """An event the live API refuses at append time (409, `code` stable, message settld's text)."""

    def __init__(self, code: str, message: str, **details: Any):
        super().__init__(message, code=code, status=409, **details)


# The rule history's format. A stored history of another version (or none: a state stored before the rules) is
# rebuilt from the stream's events (`facts_from_events`) before the next live append judges anything.
FACTS_VERSION: Final = 2


def empty_facts() -> Facts:
    return {
        "version": FACTS_VERSION,
        "incidents": {},
        "claims": {},
        "evidence": {},
        "evidenceExpired": {},
        "risk": {},
        "lastQuoteEventId": None,
        "lastBookedEventId": None,
        "lastSettledEventId": None,
        "executionStarted": False,
        "proofKeys": {},
        "proofs": [],
        "proofAnchors": {},
        "costSettled": {},
        "breachSettled": {},
        "creditSettled": {},
        "creditIds": {},
        "holds": {},
        "held": [],
        "forfeits": [],
        "quoteEventIds": {},
        "decisionEvents": [],
        "disputes": {},
        "skillUsed": [],
        "coverage": {},
        "excused": {},
        "decisions": {},
    }


def facts_are_current(stored_state: Mapping[str, Any]) -> bool:
    """Whether a stored job state carries a rule history of the current format."""
    stored = stored_state.get(STATE_KEY)
    return isinstance(stored, dict) and stored.get("version") == FACTS_VERSION


def facts_from_events(events: Sequence[Event]) -> Facts:
    """The rule history of a stream, from its events in order."""
    facts = empty_facts()
    for event in events:
        observe(facts, event)
    return facts


def load_facts(stored_state: Mapping[str, Any] | None, *, read_only: bool = False) -> Facts:
    """A private copy of the rule history stored with a job state (empty for a new stream or an old state).
    `read_only`: the caller folds no event into it (`folds_into_facts` is false for all its events) and only reads
    it, so the stored history itself serves when it is in the current form (no copy)."""
    stored = stored_state.get(STATE_KEY) if stored_state is not None else None
    if type(stored) is dict and list(stored) == _FACT_KEYS:
        # every key in empty_facts' order: the update below would give the same
        return stored if read_only else _copy_tree(stored)
    facts = empty_facts()
    if isinstance(stored, dict):
        facts.update(_copy_tree(stored))
    return facts


def _copy_tree(value: Any) -> Any:
    """A deep copy of parsed JSON: dicts and lists are copied, strings and numbers shared (immutable); anything
    else takes copy.deepcopy. Several times faster than deepcopy on the stored facts, and without recursion (a
    recorded payload kept in the facts may nest thousands of levels)."""
    def copied(item: Any, pending: list[tuple[Any, Any]]) -> Any:
        kind = type(item)
        if kind is dict or kind is list:
            container: Any = {} if kind is dict else []
            pending.append((item, container))
            return container
        return item if kind in _SHARED_TYPES else copy.deepcopy(item)

    pending: list[tuple[Any, Any]] = []
    root = copied(value, pending)
    while pending:
        source, target = pending.pop()
        if type(source) is dict:
            for k, v in source.items():
                target[k] = copied(v, pending)
        else:
            target.extend(copied(v, pending) for v in source)
    return root


_SHARED_TYPES: Final = frozenset({str, int, float, bool, type(None)})
_FACT_KEYS: Final = list(empty_facts())


def _p(event: Event) -> dict[str, Any]:
    p = event.get("payload")
    return p if type(p) is dict else {}


def _key(*parts: Any) -> str:
    return _SEP.join("" if v is None else str(v) for v in parts)


# ------------------------------------------------------------------ history


def observe(facts: Facts, event: Event) -> None:
    """Fold an accepted event into the rule history."""
    t = event.get("type")
    p = _p(event)
    if t in ("INCIDENT_REPORTED", "INCIDENT_DETECTED"):
        _observe_incident(facts, event, p)
    elif t == "ZONE_COVERAGE_REPORTED":
        observe_coverage_report(facts["coverage"], event)
    elif t == "QUOTE_PROPOSED":
        facts["lastQuoteEventId"] = event.get("id")
        facts["quoteEventIds"].setdefault(str(event.get("id")), True)
    elif t == "BOOKED":
        facts["lastBookedEventId"] = event.get("id")
    elif t == "SETTLED":
        facts["lastSettledEventId"] = event.get("id")
    elif t in ("EXECUTION_STARTED", "JOB_EXECUTION_STARTED"):
        facts["executionStarted"] = True
    elif t == "RISK_SCORED":
        facts["risk"][_key(p.get("basis"), p.get("sourceEventId"))] = True
    elif t == "EVIDENCE_CAPTURED":
        ev = p.get("evidenceId")
        if ev is not None and str(ev) not in facts["evidence"]:
            facts["evidence"][str(ev)] = {"evidenceRef": p.get("evidenceRef")}
    elif t == "EVIDENCE_EXPIRED":
        facts["evidenceExpired"][str(p.get("evidenceId"))] = True
    elif t == "PROOF_EVALUATED":
        _observe_proof(facts, event, p)
    elif t == "OPERATOR_COST_RECORDED":
        facts["costSettled"][_key(p.get("settledEventId"))] = True
    elif t == "SLA_BREACH_DETECTED":
        facts["breachSettled"][_key(p.get("settledEventId"))] = True
    elif t == "SLA_CREDIT_ISSUED":
        facts["creditSettled"][_key(p.get("settledEventId"))] = True
        facts["creditIds"][_key(p.get("creditId"))] = True
    elif t == "SKILL_USED":
        facts["skillUsed"].append(p.get("licenseId"))
    elif t in ("SETTLEMENT_HELD", "SETTLEMENT_RELEASED", "SETTLEMENT_FORFEITED"):
        _observe_hold(facts, event, p)
    elif t == "DECISION_RECORDED":
        facts["decisions"][_key(p.get("decisionId"))] = True
        facts["decisionEvents"].append(
            {"ref": decision_event_ref(event), "payloadObject": type(event.get("payload")) in (dict, list)})
    elif t in ("DISPUTE_OPENED", "DISPUTE_CLOSED"):
        d = facts["disputes"].setdefault(_key(p.get("disputeId")), {"opened": False, "closed": False})
        d["opened" if t == "DISPUTE_OPENED" else "closed"] = True
    if t in _CLAIM_TYPES:
        _observe_claim(facts, t, p)


def _observe_incident(facts: Facts, event: Event, p: Mapping[str, Any]) -> None:
    inc = p.get("incidentId")
    if inc is not None:
        facts["incidents"][str(inc)] = {"type": p.get("type"), "severity": p.get("severity")}
    observe_excuse_incident(facts["excused"], event)


def _observe_proof(facts: Facts, event: Event, p: Mapping[str, Any]) -> None:
    anchor, facts_hash = p.get("evaluatedAtChainHash"), p.get("factsHash")
    facts["proofAnchors"][str(anchor)] = True
    if facts_hash is not None:
        facts["proofKeys"][_key(anchor, p.get("customerPolicyHash"), facts_hash)] = True
    facts["proofs"].append(
        {
            "id": event.get("id"),
            "at": event.get("at"),
            "chainHash": event.get("chainHash"),
            "payloadHash": event.get("payloadHash"),
            "signerKeyId": event.get("signerKeyId"),
            "signature": event.get("signature"),
            "payload": p,
        }
    )


_CLAIM_TYPES: Final = frozenset(
    {"CLAIM_OPENED", "CLAIM_TRIAGED", "CLAIM_APPROVED", "CLAIM_DENIED", "JOB_ADJUSTED", "CLAIM_PAID"}
)


# the event types `observe` folds into the rule history; it leaves the history as it is for every other event
_OBSERVED_TYPES: Final = _CLAIM_TYPES | frozenset({
    "INCIDENT_REPORTED", "INCIDENT_DETECTED", "ZONE_COVERAGE_REPORTED", "QUOTE_PROPOSED", "BOOKED", "SETTLED",
    "EXECUTION_STARTED", "JOB_EXECUTION_STARTED", "RISK_SCORED", "EVIDENCE_CAPTURED", "EVIDENCE_EXPIRED",
    "PROOF_EVALUATED", "OPERATOR_COST_RECORDED", "SLA_BREACH_DETECTED", "SLA_CREDIT_ISSUED", "SKILL_USED",
    "SETTLEMENT_HELD", "SETTLEMENT_RELEASED", "SETTLEMENT_FORFEITED", "DECISION_RECORDED", "DISPUTE_OPENED",
    "DISPUTE_CLOSED",
})


def folds_into_facts(event: Mapping[str, Any]) -> bool:
    """Whether `observe` may change the rule history for `event` (a type it does not know by name: assume so)."""
    t = event.get("type")
    return type(t) is not str or t in _OBSERVED_TYPES


def _observe_claim(facts: Facts, t: Any, p: Mapping[str, Any]) -> None:
    """Claim state as the API derives it from the stream (not the reducer's claim list)."""
    claim_id = p.get("claimId")
    if claim_id is None:
        return
    claims = facts["claims"]
    c = claims.get(str(claim_id)) or {
        "exists": False, "status": "NONE", "incidentId": None, "amounts": None, "adjusted": False,
    }
    if t == "CLAIM_OPENED":
        c.update(exists=True, status="OPEN", incidentId=p.get("incidentId"), opened=True)
    elif t == "CLAIM_TRIAGED":
        if c["exists"] and c["status"] not in _DECIDED:
            c["status"] = "TRIAGED"
    elif t == "CLAIM_APPROVED":
        c.update(exists=True, status="APPROVED", amounts=p.get("amounts"))
    elif t == "CLAIM_DENIED":
        c.update(exists=True, status="DENIED", amounts=None)
    elif t == "JOB_ADJUSTED":
        c["adjusted"] = True
    elif t == "CLAIM_PAID":
        c["status"] = "PAID"
    claims[str(claim_id)] = c


def _observe_hold(facts: Facts, event: Event, p: Mapping[str, Any]) -> None:
    """Hold states by holdId, and in order the holds (holdId, anchor, factsHash) and forfeitures."""
    hold_id = p.get("holdId")
    if not is_nonblank(hold_id):
        return
    h = facts["holds"].setdefault(hold_id, {"status": "NONE", "heldFactsHash": None})
    t = event.get("type")
    if t == "SETTLEMENT_HELD":
        h["status"] = "HELD"
        if type(p.get("factsHash")) is str:
            h["heldFactsHash"] = p["factsHash"]
        facts["held"].append([hold_id, p.get("evaluatedAtChainHash"), p.get("factsHash")])
    elif t == "SETTLEMENT_RELEASED":
        h["status"] = "RELEASED"
    else:
        h["status"] = "FORFEITED"
        facts["forfeits"].append({
            "holdId": hold_id,
            "factsHash": p.get("factsHash"),
            "forfeitureReason": p.get("forfeitureReason"),
            "forfeitEventId": event.get("id"),
            "forfeitEventChainHash": event.get("chainHash"),
            "forfeitEventPayloadHash": event.get("payloadHash"),
        })


def decision_event_ref(event: Event) -> dict[str, Any]:
    """A DECISION_RECORDED as a decisionEventRef names it."""
    p = _p(event)
    return {
        "decisionEventId": event.get("id"),
        "decisionEventAt": coalesce(p.get("decidedAt"), event.get("at")),
        "decisionEventChainHash": event.get("chainHash"),
        "decisionEventPayloadHash": event.get("payloadHash"),
        "decisionEventSignerKeyId": event.get("signerKeyId"),
        "decisionEventSignature": event.get("signature"),
        "decisionId": p.get("decisionId"),
        "kind": p.get("kind"),
        "holdId": p.get("holdId"),
        "forfeitureReason": p.get("forfeitureReason"),
        "reasonCodes": p["reasonCodes"] if type(p.get("reasonCodes")) is list else [],
        "evidenceRefs": p["evidenceRefs"] if type(p.get("evidenceRefs")) is list else [],
        "policyHash": p.get("policyHash"),
    }


# ------------------------------------------------------------------ checks


def _refuse(code: str, message: str) -> ServerRuleViolation:
    return ServerRuleViolation(code, message)


def _job_id(p: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    # Deliberately lenient: an absent payload.jobId means this job (settld requires it); null is not absent.
    if "jobId" in p and p["jobId"] != s["id"]:
        raise _refuse("JOB_ID_MISMATCH", "payload.jobId must match job id")


def _at(p: Mapping[str, Any], event: Event, field: str) -> None:
    # Deliberately lenient: an absent payload timestamp means event.at (server drafts get `at` on append).
    if field in p and p[field] != event.get("at"):
        raise _refuse("EVENT_TIME_MISMATCH", f"payload.{field} must match event.at")


# The payload field each type's `_at` rule compares with event.at (for the types settld's API validators check).
EVENT_TIME_FIELD: Final[Mapping[str, str]] = {
    "PROOF_EVALUATED": "evaluatedAt",
    "RISK_SCORED": "scoredAt",
    "DISPATCH_REQUESTED": "requestedAt",
    "DISPATCH_EVALUATED": "evaluatedAt",
    "DISPATCH_CONFIRMED": "confirmedAt",
    "DISPATCH_FAILED": "failedAt",
    "OPERATOR_COVERAGE_RELEASED": "releasedAt",
    "JOB_CANCELLED": "cancelledAt",
    "EVIDENCE_VIEWED": "viewedAt",
    "EVIDENCE_EXPIRED": "expiredAt",
    "JOB_EXECUTION_STARTED": "startedAt",
    "JOB_EXECUTION_COMPLETED": "completedAt",
    "JOB_HEARTBEAT": "t",
    "JOB_EXECUTION_STALLED": "detectedAt",
    "JOB_EXECUTION_RESUMED": "resumedAt",
    "JOB_EXECUTION_ABORTED": "abortedAt",
    "ASSIST_REQUESTED": "requestedAt",
    "ASSIST_QUEUED": "queuedAt",
    "ASSIST_ASSIGNED": "assignedAt",
    "ASSIST_ACCEPTED": "acceptedAt",
    "ASSIST_DECLINED": "declinedAt",
    "ASSIST_TIMEOUT": "timedOutAt",
    "SLA_BREACH_DETECTED": "detectedAt",
    "SLA_CREDIT_ISSUED": "issuedAt",
}


# settld's validators of these types refuse a payload.jobId field (the others require one).
_WITHOUT_JOB_ID: Final = frozenset({"BOOKED", "RESERVED"})


def with_implied_fields(event: Event) -> Event:
    """The event as settld's API validators should see it under settlekit's two lenient rules: an absent
    `payload.jobId` means this job, an absent event-time field means event.at. Present fields are untouched."""
    p = event.get("payload")
    if type(p) is not dict:
        return event
    implied: dict[str, Any] = {}
    if "jobId" not in p and event.get("type") not in _WITHOUT_JOB_ID:
        implied["jobId"] = event.get("streamId")
    time_field = EVENT_TIME_FIELD.get(str(event.get("type")))
    if time_field is not None and time_field not in p:
        implied[time_field] = event.get("at")
    return {**event, "payload": {**implied, **p}} if implied else event


def _not_terminal(s: Mapping[str, Any]) -> None:
    if s["status"] in _TERMINAL:
        raise _refuse("JOB_TERMINAL", "job is terminal")


def _status_in(s: Mapping[str, Any], allowed: frozenset[str] | set[str], message: str) -> None:
    if s["status"] not in allowed:
        raise _refuse("STATUS_NOT_ALLOWED", message)


def _actor(event: Event) -> Mapping[str, Any]:
    a = event.get("actor")
    return a if type(a) is dict else {}


def _booking(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    b = s.get("booking")
    return b if type(b) is dict else None


DEFAULT_ZONE_ID: Final = "zone_default"


def _zone(v: Any) -> str:
    """settld's `normalizeZoneId`: the zone id trimmed as by JavaScript, the default zone for a blank or absent one
    or a value that is not a string."""
    return js_trim(v) if is_nonblank(v) else DEFAULT_ZONE_ID


def _policy_hash(s: Mapping[str, Any], p: Mapping[str, Any]) -> None:
    expected = (_booking(s) or {}).get("policyHash")
    if expected and p.get("policyHash") != expected:
        raise _refuse("POLICY_HASH_MISMATCH", "payload.policyHash must match booking.policyHash")


def _expected_robot(s: Mapping[str, Any]) -> Any:
    ex = s.get("execution") or {}
    res = s.get("reservation") or {}
    return ex.get("robotId") or res.get("robotId")


Check = Callable[[JobState, Facts, Event, dict[str, Any]], None]


def _access_plan(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _not_terminal(s)
    if s["status"] in ("EXECUTING", "ASSISTED"):
        raise _refuse("STATUS_NOT_ALLOWED", "cannot issue access plan after execution start")


def _current_access_plan(p: dict[str, Any], s: Mapping[str, Any], verb: str) -> Mapping[str, Any]:
    """The job's access plan, which the event's payload must name (settld's wording for `verb`)."""
    _job_id(p, s)
    plan = s.get("accessPlan")
    if not plan:
        raise _refuse("ACCESS_PLAN_REQUIRED", f"access plan is required before access can be {verb}")
    if p.get("accessPlanId") != plan.get("accessPlanId"):
        raise _refuse("ACCESS_PLAN_MISMATCH", "payload.accessPlanId does not match current access plan")
    return plan


def _access_result(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    plan = _current_access_plan(p, s, "granted/denied")
    if not _within(e.get("at"), plan.get("validFrom"), plan.get("validTo")):
        raise _refuse("ACCESS_WINDOW", "access event is outside access plan window")
    if (s.get("access") or {}).get("status") in ("revoked", "expired"):
        raise _refuse("ACCESS_REVOKED", "access is revoked/expired")


def _access_revoked(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    plan = _current_access_plan(p, s, "revoked/expired")
    if e.get("type") == "ACCESS_REVOKED" and plan.get("revocable") is False:
        raise _refuse("ACCESS_NOT_REVOCABLE", "access plan is not revocable")


def _within(at: Any, start: Any, end: Any) -> bool:

    t, a, b = date_parse_ms(at), date_parse_ms(start), date_parse_ms(end)
    return t == t and a == a and b == b and a <= t <= b  # NaN-safe


def _booked(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    _not_terminal(st.snapshot)


def _zone_coverage(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _status_in(s, {"EXECUTING", "ASSISTED", "COMPLETED", "SETTLED"},
               "zone coverage can only be reported during/after execution")
    required = (_booking(s) or {}).get("requiredZones")
    if required and type(required) is dict:
        zones = required.get("zones")
        ids = {str(z.get("zoneId")) for z in zones if type(z) is dict} if type(zones) is list else set()
        if p.get("zoneId") not in ids:
            raise _refuse("ZONE_NOT_REQUIRED", "payload.zoneId is not in requiredZones")


def _proof_evaluated(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _status_in(s, {"COMPLETED", "SETTLED"}, "proof can only be evaluated after completion")
    _at(p, e, "evaluatedAt")
    booking = _booking(s) or {}
    if booking.get("policyHash") and p.get("customerPolicyHash") != booking.get("policyHash"):
        raise _refuse("POLICY_HASH_MISMATCH", "payload.customerPolicyHash must match booking.policyHash")
    if s.get("operatorPolicyHash") and p.get("operatorPolicyHash") != s.get("operatorPolicyHash"):
        raise _refuse("POLICY_HASH_MISMATCH", "payload.operatorPolicyHash must match pinned operatorPolicyHash")
    required_zones = booking.get("requiredZones")
    if type(required_zones) in (dict, list):  # any JS object, even an empty one
        try:
            computed = zone_set_hash(required_zones)
        except Rejected as exc:
            raise _refuse("ZONE_SET_MISMATCH", exc.message) from exc
        if booking.get("requiredZonesHash") and computed != booking["requiredZonesHash"]:
            raise _refuse("ZONE_SET_MISMATCH", "booking.requiredZonesHash mismatch")
        if p.get("requiredZonesHash") != computed:
            raise _refuse("ZONE_SET_MISMATCH", "payload.requiredZonesHash must match booking.requiredZonesHash")
    if p.get("factsHash") is not None and _key(
        p.get("evaluatedAtChainHash"), p.get("customerPolicyHash"), p.get("factsHash")
    ) in f["proofKeys"]:
        raise _refuse(
            "PROOF_ALREADY_EXISTS_FOR_FACTS",
            "proof already exists for evaluatedAtChainHash+customerPolicyHash+factsHash",
        )


def completion_anchor(st: JobState) -> str | None:
    """The chain hash of the latest completion (settld's proof anchor), trimmed; None without one."""
    completion = st.facts.get("latestCompletion")
    ch = completion.get("chainHash") if completion else None
    return js_trim(ch) if type(ch) is str and is_nonblank(ch) else None


class _Coverage:
    """The two accumulators `zone_coverage_facts` reads."""

    def __init__(self, f: Facts):
        self.coverage = f["coverage"]
        self.excused = f["excused"]


def current_facts_hash(st: JobState, f: Facts, anchor: str) -> tuple[str | None, Any, Any]:
    """(factsHash of the zone-coverage facts now, customerPolicyHash and operatorPolicyHash at the anchor), as the
    proof verifier computes them; (None, ...) when the booking's zone set is invalid."""
    job_at = st.facts.get("jobAtLatestCompletion") or {}
    booking = job_at.get("booking")
    cph = coalesce(job_at.get("customerPolicyHash"), get(booking, "policyHash"))
    oph = job_at.get("operatorPolicyHash")
    try:
        doc = zone_coverage_facts(_Coverage(f), booking, anchor)
    except ValidationError:
        return None, cph, oph
    return canonical_hash(doc), cph, oph


def _matching_proof(f: Facts, anchor: str, cph: Any, facts_hash: str) -> dict[str, Any] | None:
    """The latest PROOF_EVALUATED on (anchor, factsHash), of customer policy `cph` when one is pinned."""
    for proof in reversed(f["proofs"]):
        pp = proof["payload"]
        if pp.get("evaluatedAtChainHash") != anchor or pp.get("factsHash") != facts_hash:
            continue
        if truthy(cph) and not strictly_equal(pp.get("customerPolicyHash", MISSING), cph):
            continue
        found: dict[str, Any] = proof
        return found
    return None


def _proof_status(proof: Mapping[str, Any]) -> str | None:
    status = proof["payload"].get("status")
    return None if status is None else js_trim(js_string(status))


_REF_KEYS: Final = (
    "proofEventId",
    "proofEventChainHash",
    "proofEventPayloadHash",
    "evaluatedAtChainHash",
    "customerPolicyHash",
    "factsHash",
    "status",
)
_FORFEIT_KEYS: Final = ("holdId", "forfeitureReason", "forfeitEventId", "forfeitEventChainHash",
                        "forfeitEventPayloadHash")
_DECISION_REF_KEYS: Final = ("decisionEventId", "decisionEventChainHash", "decisionEventPayloadHash", "decisionId",
                             "kind", "holdId", "forfeitureReason", "policyHash")


def _same_fields(expected: Mapping[str, Any], actual: Any, keys: tuple[str, ...]) -> bool:
    """Each key equal (JS `===`, absent = null) in `expected` and `actual`, an object or array."""
    if type(actual) not in (dict, list):
        return False
    a = actual if type(actual) is dict else {}
    return all(strictly_equal(expected.get(k), a.get(k)) for k in keys)


def _same_list(expected: Any, actual: Any) -> bool:
    """Two arrays (anything else counts as empty) with the same items, compared with `===`."""
    e = expected if type(expected) is list else []
    a = actual if type(actual) is list else []
    return len(e) == len(a) and all(strictly_equal(x, y) for x, y in zip(e, a, strict=True))


def _require_proof_ref(p: Mapping[str, Any], field: str, proof: Mapping[str, Any]) -> None:
    """`payload.<field>` must be an object naming `proof` (a hold's triggering, a release's releasing proof)."""
    ref = p.get(field)
    if not is_object(ref):
        raise _refuse("PAYLOAD_FIELD_INVALID", f"payload.{field} is required")
    if not _same_fields(_proof_ref(proof), ref, _REF_KEYS):
        raise _refuse("PROOF_REF_MISMATCH", f"payload.{field} must match PROOF_EVALUATED")


def _proof_ref(proof: Mapping[str, Any], status: Any = None) -> dict[str, Any]:
    """The fields of a proof reference that must name `proof` (status `status` instead of the proof's, if given)."""
    pp = proof["payload"]
    return {
        "proofEventId": proof["id"],
        "proofEventChainHash": proof["chainHash"],
        "proofEventPayloadHash": proof["payloadHash"],
        "evaluatedAtChainHash": pp.get("evaluatedAtChainHash"),
        "customerPolicyHash": pp.get("customerPolicyHash"),
        "factsHash": pp.get("factsHash"),
        "status": coalesce(status, pp.get("status")),
    }


def latest_hold_id(f: Facts, anchor: str | None = None, facts_hash: str | None = None) -> str | None:
    """The holdId of the latest SETTLEMENT_HELD (with `anchor`, on `facts_hash`, when given)."""
    for hold_id, held_anchor, held_facts_hash in reversed(f["held"]):
        if anchor is None or (held_anchor == anchor and held_facts_hash == facts_hash):
            found: str = hold_id
            return found
    return None


def _forfeit_for(f: Facts, anchor: str, facts_hash: str) -> dict[str, Any] | None:
    """The forfeiture of the latest hold on (anchor, factsHash), as a settlementProofRef.forfeit, or None."""
    hold_id = latest_hold_id(f, anchor, facts_hash)
    if hold_id is None:
        return None
    for forfeit in reversed(f["forfeits"]):
        if forfeit["holdId"] == hold_id and forfeit["factsHash"] == facts_hash:
            return {"holdId": hold_id, **{k: forfeit[k] for k in _FORFEIT_KEYS[1:]}}
    return None


def decision_event(f: Facts, *, event_id: str | None = None, decision_id: str | None = None,
                   hold_id: Any = None, forfeiture_reason: Any = None) -> dict[str, Any] | None:
    """A recorded DECISION_RECORDED as a decisionEventRef: the one with event id `event_id`, else the latest with
    `decision_id`, else the latest SETTLEMENT_FORFEIT of `hold_id` for `forfeiture_reason`."""
    decisions = f["decisionEvents"]
    if event_id is not None:
        found = next((d for d in decisions if d["ref"]["decisionEventId"] == event_id), None)
    elif decision_id is not None:
        found = next((d for d in reversed(decisions) if d["ref"]["decisionId"] == decision_id), None)
    else:
        found = next((d for d in reversed(decisions) if d["ref"]["kind"] == "SETTLEMENT_FORFEIT"
                      and strictly_equal(d["ref"]["holdId"], hold_id)
                      and strictly_equal(d["ref"]["forfeitureReason"], forfeiture_reason)), None)
    return dict(found["ref"]) if found is not None else None


def _hold_status(f: Facts, hold_id: Any) -> dict[str, Any]:
    h = f["holds"].get(hold_id) if type(hold_id) is str else None
    return h if h is not None else {"status": "NONE", "heldFactsHash": None}


def _payload_hashes(p: Mapping[str, Any]) -> None:
    """A hold or forfeiture names its anchor and a 64-hex factsHash."""
    _non_empty(p, "evaluatedAtChainHash")
    _non_empty(p, "factsHash")
    if not is_hex64(js_trim(p["factsHash"])):
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.factsHash must be 64-hex")


def _fresh_proof(st: JobState, f: Facts, p: Mapping[str, Any], what: str, *,
                 pinned: bool) -> tuple[str, str, Any, Any, dict[str, Any]]:
    """(anchor, factsHash, customerPolicyHash, operatorPolicyHash, proof) for a hold step under proof gating:
    the latest completion, the facts now and the PROOF_EVALUATED on them; `pinned`: the payload names the anchor
    and the facts hash."""
    if gate_mode(st.snapshot) == "warn":
        raise _refuse("PROOF_GATE_DISABLED", f"{what} requires strict/holdback proof gating")
    anchor = completion_anchor(st)
    if anchor is None:
        raise _refuse("PROOF_REQUIRED", f"{what} requires a completion anchor")
    if pinned and p.get("evaluatedAtChainHash") != anchor:
        raise _refuse("ANCHOR_MISMATCH", "payload.evaluatedAtChainHash must match latest completion anchor")
    facts_hash, cph, oph = current_facts_hash(st, f, anchor)
    if not facts_hash:
        raise _refuse("PROOF_STALE", f"{what} requires a current factsHash")
    if pinned and p.get("factsHash") != facts_hash:
        raise _refuse("FACTS_HASH_MISMATCH", "payload.factsHash must match current factsHash")
    proof = _matching_proof(f, anchor, cph, facts_hash)
    if proof is None:
        raise _refuse("PROOF_REQUIRED", f"{what} requires a matching PROOF_EVALUATED")
    return anchor, facts_hash, cph, oph, proof


def _hold(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "heldAt")
    _non_empty(p, "holdId")
    _payload_hashes(p)
    if s["status"] != "COMPLETED":
        raise _refuse("STATUS_NOT_ALLOWED", "settlement hold can only be created after completion")
    anchor, _, cph, oph, proof = _fresh_proof(st, f, p, "settlement hold", pinned=True)
    if _proof_status(proof) != "INSUFFICIENT_EVIDENCE":
        raise _refuse("PROOF_STATUS_MISMATCH", "settlement hold requires INSUFFICIENT_EVIDENCE proof")
    _require_proof_ref(p, "triggeringProofRef", proof)
    for field in ("missingEvidence", "reasonCodes"):  # copied from the proof as they are
        if not _same_list(proof["payload"].get(field), p.get(field)):
            raise _refuse("PROOF_REF_MISMATCH", f"payload.{field} must match triggering PROOF_EVALUATED.{field}")
    _pricing_anchor(f, p, anchor, cph, oph)
    _exposure(s, p)
    held = _hold_status(f, p["holdId"])
    if held["status"] == "HELD" and held["heldFactsHash"] == p["factsHash"]:
        raise _refuse("SETTLEMENT_HOLD_ALREADY_ACTIVE", "settlement hold already active")


def hold_id_for(anchor: str, customer_policy_hash: Any) -> str | None:
    """The identity of the hold on a completion anchor under a customer policy (None without a policy hash)."""
    if not is_nonblank(customer_policy_hash):
        return None
    text = f"{anchor}\n{js_trim(customer_policy_hash)}"
    return "hold_" + hashlib.sha256(js_usv_string(text).encode("utf-8")).hexdigest()


def _pricing_anchor(f: Facts, p: Mapping[str, Any], anchor: str, cph: Any, oph: Any) -> None:
    pa = p.get("pricingAnchor")
    if not is_object(pa):
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.pricingAnchor is required")
    if not strictly_equal(js_field(pa, "evaluatedAtChainHash"), anchor):
        raise _refuse("PRICING_ANCHOR_MISMATCH",
                      "payload.pricingAnchor.evaluatedAtChainHash must match latest completion anchor")
    if not strictly_equal(js_field(pa, "customerPolicyHash"), cph):
        raise _refuse("PRICING_ANCHOR_MISMATCH",
                      "payload.pricingAnchor.customerPolicyHash must match current customerPolicyHash")
    if not strictly_equal(js_field(pa, "operatorPolicyHash"), oph):
        raise _refuse("PRICING_ANCHOR_MISMATCH",
                      "payload.pricingAnchor.operatorPolicyHash must match current operatorPolicyHash")
    expected_id = hold_id_for(anchor, cph)
    if expected_id is not None and p["holdId"] != expected_id:
        raise _refuse("HOLD_ID_MISMATCH", "payload.holdId must match expected hold identity")
    quote_id = js_field(pa, "quoteEventId")
    if not is_nullish(quote_id):
        if not is_nonblank(quote_id):
            raise _refuse("PAYLOAD_FIELD_INVALID", "payload.pricingAnchor.quoteEventId must be a non-empty string")
        if quote_id not in f["quoteEventIds"]:
            raise _refuse("PRICING_ANCHOR_MISMATCH",
                          "payload.pricingAnchor.quoteEventId must reference QUOTE_PROPOSED")


def _exposure(s: Mapping[str, Any], p: Mapping[str, Any]) -> None:
    exposure = p.get("exposure")
    if not is_object(exposure):
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.exposure is required")
    expected = js_field(exposure, "expected")
    if not is_object(expected):
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.exposure.expected is required")
    currency = js_field(expected, "currency")
    if not is_nonblank(currency):
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.exposure.expected.currency must be a non-empty string")
    for name in ("amountGrossCents", "amountNetCents", "coverageFeeCents"):
        if not js_is_safe_integer(js_field(expected, name)):
            raise _refuse("HOLD_EXPOSURE_INVALID", f"payload.exposure.expected.{name} must be a safe integer")
    quote_amount = get(s.get("quote"), "amountCents")
    if js_is_safe_integer(quote_amount) and not strictly_equal(js_field(expected, "amountGrossCents"), quote_amount):
        raise _refuse("HOLD_EXPOSURE_INVALID",
                      "payload.exposure.expected.amountGrossCents must match quote amountCents")


def _release(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "releasedAt")
    _non_empty(p, "holdId")
    if s["status"] != "COMPLETED":
        raise _refuse("STATUS_NOT_ALLOWED", "settlement hold release can only happen before settlement")
    if _hold_status(f, p["holdId"])["status"] != "HELD":
        raise _refuse("SETTLEMENT_HOLD_NOT_ACTIVE", "settlement hold must be active to release")
    *_, proof = _fresh_proof(st, f, p, "settlement hold release", pinned=False)
    if _proof_status(proof) not in ("PASS", "FAIL"):
        raise _refuse("PROOF_STATUS_MISMATCH", "settlement hold release requires PASS or FAIL proof")
    _require_proof_ref(p, "releasingProofRef", proof)


def _forfeit(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "forfeitedAt")
    _non_empty(p, "holdId")
    _non_empty(p, "forfeitureReason")
    if p.get("decisionRef") is not None:
        _non_empty(p, "decisionRef")
    decision_ref = p.get("decisionEventRef")
    if decision_ref is not None and type(decision_ref) is not dict:
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.decisionEventRef must be an object")
    _payload_hashes(p)
    if s["status"] != "COMPLETED":
        raise _refuse("STATUS_NOT_ALLOWED", "settlement hold forfeiture can only happen before settlement")
    *_, proof = _fresh_proof(st, f, p, "settlement hold forfeiture", pinned=True)
    if _proof_status(proof) != "INSUFFICIENT_EVIDENCE":
        raise _refuse("PROOF_STATUS_MISMATCH", "settlement hold forfeiture requires INSUFFICIENT_EVIDENCE proof")
    held = _hold_status(f, p["holdId"])
    if held["status"] != "HELD":
        raise _refuse("SETTLEMENT_HOLD_NOT_ACTIVE", "settlement hold must be active to forfeit")
    if truthy(held["heldFactsHash"]) and held["heldFactsHash"] != p["factsHash"]:
        raise _refuse("FACTS_HASH_MISMATCH", "settlement hold forfeiture requires matching held factsHash")
    if decision_ref is None and p.get("decisionRef") is None:
        raise _refuse("DECISION_REF_REQUIRED", "payload.decisionEventRef or payload.decisionRef is required")
    if decision_ref is not None:
        _forfeit_decision(f, p, decision_ref)


def _forfeit_decision(f: Facts, p: Mapping[str, Any], ref: Mapping[str, Any]) -> None:
    """A forfeiture's decisionEventRef names a recorded SETTLEMENT_FORFEIT decision on this hold and reason."""
    event_id = ref.get("decisionEventId")
    found = next((d for d in f["decisionEvents"] if d["ref"]["decisionEventId"] == event_id), None) \
        if type(event_id) is str and event_id else None
    if found is None:
        raise _refuse("DECISION_REF_MISMATCH", "payload.decisionEventRef must reference DECISION_RECORDED")
    expected = found["ref"]
    if not (found["payloadObject"] and _same_fields(expected, ref, _DECISION_REF_KEYS)
            and _same_list(expected["reasonCodes"], ref.get("reasonCodes"))
            and _same_list(expected["evidenceRefs"], ref.get("evidenceRefs"))):
        raise _refuse("DECISION_REF_MISMATCH", "payload.decisionEventRef must match referenced DECISION_RECORDED")
    if expected["kind"] != "SETTLEMENT_FORFEIT":
        raise _refuse("DECISION_REF_MISMATCH", "referenced decision kind must be SETTLEMENT_FORFEIT")
    if not strictly_equal(expected["holdId"], p["holdId"]):
        raise _refuse("DECISION_REF_MISMATCH", "referenced decision holdId must match payload.holdId")
    if not strictly_equal(expected["forfeitureReason"], p["forfeitureReason"]):
        raise _refuse("DECISION_REF_MISMATCH",
                      "referenced decision forfeitureReason must match payload.forfeitureReason")


def _non_empty(p: Mapping[str, Any], field: str) -> None:
    if not is_nonblank(p.get(field)):
        raise _refuse("PAYLOAD_FIELD_INVALID", f"payload.{field} must be a non-empty string")


def _string_list(p: Mapping[str, Any], field: str) -> None:
    v = p.get(field)
    if v is None:
        return
    if type(v) is not list:
        raise _refuse("PAYLOAD_FIELD_INVALID", f"payload.{field} must be an array")
    for item in v:
        if not is_nonblank(item):
            raise _refuse("PAYLOAD_FIELD_INVALID", f"payload.{field}[] must be a non-empty string")


def _decision_recorded(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "decidedAt")
    _non_empty(p, "decisionId")
    _non_empty(p, "kind")
    if s["status"] != "COMPLETED":
        raise _refuse("STATUS_NOT_ALLOWED", "decision can only be recorded after completion and before settlement")
    if p["kind"] != "SETTLEMENT_FORFEIT":
        raise _refuse("PAYLOAD_FIELD_INVALID", "payload.kind is not supported")
    if _key(p["decisionId"]) in f["decisions"]:
        raise _refuse("DECISION_ALREADY_RECORDED", "decision already recorded")
    _non_empty(p, "holdId")
    _non_empty(p, "forfeitureReason")
    if f["holds"].get(p["holdId"], {}).get("status") != "HELD":
        raise _refuse("SETTLEMENT_HOLD_NOT_ACTIVE", "forfeit decision requires an active hold")
    _string_list(p, "reasonCodes")
    _string_list(p, "evidenceRefs")
    if p.get("policyHash") is not None:
        _non_empty(p, "policyHash")


def _settled_dispute(st: JobState, f: Facts, e: Event, p: dict[str, Any], at_key: str, not_settled: str) -> Any:
    """Checks shared by dispute open and close (job id, time, settled job); the dispute's facts or None."""
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, at_key)
    if s["status"] != "SETTLED":
        raise _refuse("JOB_NOT_SETTLED", not_settled)
    return f["disputes"].get(_key(p.get("disputeId")))


def _dispute_opened(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    d = _settled_dispute(st, f, e, p, "openedAt", "dispute can only be opened after settlement")
    if d and d["opened"] and not d["closed"]:
        raise _refuse("DISPUTE_ALREADY_OPEN", "dispute already open")


def _dispute_closed(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    d = _settled_dispute(st, f, e, p, "closedAt", "dispute close can only occur after settlement")
    if not (d and d["opened"] and not d["closed"]):
        raise _refuse("DISPUTE_NOT_OPEN", "dispute is not open")


def _features_match(features: Mapping[str, Any], source: Mapping[str, Any], what: str) -> None:
    """A risk score's features name the quote's (or booking's) environment tier, coverage, zone and site."""
    coverage = source.get("requiresOperatorCoverage")
    for field in ("environmentTier", "requiresOperatorCoverage", "zoneId", "siteId"):
        expected = source.get(field)
        checked = type(coverage) is bool if field == "requiresOperatorCoverage" else truthy(expected)
        if checked and not strictly_equal(features.get(field), expected):
            raise _refuse("RISK_FEATURES_MISMATCH", f"payload.features.{field} must match {what} {field}")


def _risk_scored(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "scoredAt")
    basis, source = p.get("basis"), p.get("sourceEventId")
    if _key(basis, source) in f["risk"]:
        raise _refuse("RISK_ALREADY_SCORED", "risk already scored for this source event")
    features = p.get("features") if type(p.get("features")) is dict else {}
    assert isinstance(features, dict)
    if s.get("templateId") and features.get("templateId") != s.get("templateId"):
        raise _refuse("RISK_FEATURES_MISMATCH", "payload.features.templateId must match job.templateId")
    if basis == "QUOTE":
        if not s.get("quote"):
            raise _refuse("QUOTE_MISSING", "risk scoring requires a quote")
        if s["status"] != "QUOTED":
            raise _refuse("STATUS_NOT_ALLOWED", "risk scoring (QUOTE) requires QUOTED status")
        inputs = (s.get("quote") or {}).get("inputs")
        _features_match(features, inputs if type(inputs) is dict else {}, "quote")
        last, what = f["lastQuoteEventId"], "QUOTE_PROPOSED"
    else:
        if not _booking(s):
            raise _refuse("BOOKING_MISSING", "risk scoring (BOOK) requires a booking")
        if s["status"] != "BOOKED":
            raise _refuse("STATUS_NOT_ALLOWED", "risk scoring (BOOK) requires BOOKED status")
        _features_match(features, _booking(s) or {}, "booking")
        _policy_hash(s, p)
        last, what = f["lastBookedEventId"], "BOOKED"
    if not last:
        raise _refuse("SOURCE_EVENT_MISSING", f"risk scoring requires a prior {what} event")
    if source != last:
        raise _refuse("SOURCE_EVENT_MISMATCH", f"payload.sourceEventId must match last {what} event id")


def _dispatch(allowed_from_booked: bool, field: str, what: str) -> Check:
    def check(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
        s = st.snapshot
        _job_id(p, s)
        _at(p, e, field)
        if not _booking(s):
            raise _refuse("BOOKING_MISSING", f"{what} requires a booking")
        if allowed_from_booked and s["status"] != "BOOKED":
            requested = what == "dispatch"
            raise _refuse("STATUS_NOT_ALLOWED", "dispatch can only be requested from BOOKED" if requested
                          else f"{what} requires BOOKED status")

    return check


def _dispatch_confirmed(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "confirmedAt")
    if not s.get("reservation"):
        raise _refuse("RESERVATION_MISSING", "dispatch confirmation requires a robot reservation")
    booking = _booking(s) or {}
    if booking.get("requiresOperatorCoverage") and (s.get("operatorCoverage") or {}).get("status") != "reserved":
        raise _refuse("OPERATOR_COVERAGE_MISSING", "dispatch confirmation requires operator coverage reservation")


def _matched(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    if not _booking(st.snapshot):
        raise _refuse("BOOKING_MISSING", "cannot match before booking")


def _reserved(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:

    s = st.snapshot
    _not_terminal(s)
    booking = _booking(s)
    if not booking:
        raise _refuse("BOOKING_MISSING", "cannot reserve robot before booking")
    if date_parse_ms(p.get("startAt")) < date_parse_ms(booking.get("startAt")) or date_parse_ms(
        p.get("endAt")
    ) > date_parse_ms(booking.get("endAt")):
        raise _refuse("RESERVATION_WINDOW", "reservation window must be within booked window")
    matched = (s.get("match") or {}).get("robotId")
    if matched and matched != p.get("robotId"):
        raise _refuse("ROBOT_MISMATCH", "reservation robotId must match matched robotId")


def _coverage_reserved(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _not_terminal(s)
    booking = _booking(s)
    if not booking:
        raise _refuse("BOOKING_MISSING", "operator coverage requires a booking")
    if booking.get("requiresOperatorCoverage") is not True:
        raise _refuse("OPERATOR_COVERAGE_NOT_REQUIRED", "operator coverage reservation is not required for this job")
    if s["status"] != "RESERVED":
        raise _refuse("STATUS_NOT_ALLOWED", "operator coverage reservation requires RESERVED status")
    res = s.get("reservation")
    if not res:
        raise _refuse("RESERVATION_MISSING", "operator coverage reservation requires a robot reservation")
    if p.get("startAt") != res.get("startAt") or p.get("endAt") != res.get("endAt"):
        raise _refuse("RESERVATION_WINDOW", "operator coverage window must match robot reservation window")


def _coverage_released(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "releasedAt")
    if (s.get("operatorCoverage") or {}).get("reservationId") != p.get("reservationId"):
        raise _refuse(
            "RESERVATION_MISMATCH", "operator coverage release reservationId does not match current reservation"
        )


def _license_ids(s: Mapping[str, Any]) -> list[Any]:
    return [lic.get("licenseId") for lic in s.get("skillLicenses") or [] if type(lic) is dict]


def _skill_licensed(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _not_terminal(s)
    if s["status"] in ("EXECUTING", "ASSISTED"):
        raise _refuse("STATUS_NOT_ALLOWED", "cannot license skills after execution start")
    if p.get("licenseId") in _license_ids(s):
        raise _refuse("SKILL_LICENSE_DUPLICATE", "licenseId already exists for this job")


def _skill_used(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _status_in(s, {"EXECUTING", "ASSISTED"}, "skill usage is only allowed during execution")
    if p.get("licenseId") not in _license_ids(s):
        raise _refuse("SKILL_NOT_LICENSED", "skill used without license")


def _rescheduled(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _status_in(s, {"BOOKED", "MATCHED", "RESERVED"}, "job is not reschedulable")
    booking = _booking(s)
    if not booking:
        raise _refuse("BOOKING_MISSING", "job booking is required for reschedule")
    old = p.get("oldWindow") if type(p.get("oldWindow")) is dict else {}
    assert isinstance(old, dict)
    if booking.get("startAt") != old.get("startAt") or booking.get("endAt") != old.get("endAt"):
        raise _refuse("WINDOW_MISMATCH", "payload.oldWindow must match current booking window")
    if p.get("requiresRequote") is True:
        raise _refuse("REQUOTE_UNSUPPORTED", "requiresRequote is not supported in v0.6")


def _cancelled(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    _job_id(p, st.snapshot)
    _at(p, e, "cancelledAt")
    _not_terminal(st.snapshot)


def _incident_reported(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if s["status"] in ("CREATED", "QUOTED"):
        raise _refuse("STATUS_NOT_ALLOWED", "cannot report incident before job is booked")
    if str(p.get("incidentId")) in f["incidents"]:
        raise _refuse("INCIDENT_DUPLICATE", "incidentId already exists for this job")
    if _actor(e).get("type") != "operator" and "reportedBy" not in p:
        raise _refuse("REPORTED_BY_REQUIRED", "payload.reportedBy is required for server-side incident reports")


def _incident_detected(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _status_in(s, {"EN_ROUTE", "ACCESS_GRANTED", "EXECUTING", "ASSISTED", "ABORTING_SAFE_EXIT"},
               "incident detection is only allowed once the job is en route")
    if str(p.get("incidentId")) in f["incidents"]:
        raise _refuse("INCIDENT_DUPLICATE", "incidentId already exists for this job")


def _evidence_captured(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    incident = f["incidents"].get(str(p.get("incidentId")))
    if incident is None:
        raise _refuse("INCIDENT_NOT_FOUND", "evidence must reference an existing incidentId")
    if str(p.get("evidenceId")) in f["evidence"]:
        raise _refuse("EVIDENCE_DUPLICATE", "evidenceId already exists for this job")
    constraints = s.get("constraints") if type(s.get("constraints")) is dict else {}
    assert isinstance(constraints, dict)
    if constraints.get("privacyMode") == "minimal" and p.get("kind") == "VIDEO_CLIP":
        sev = incident.get("severity")
        if not is_safe_int(sev) or sev < 4:
            raise _refuse(
                "EVIDENCE_PRIVACY",
                "video evidence is not allowed in privacyMode=minimal unless incident severity >= 4",
            )


def _evidence_seen(field: str) -> Check:
    def check(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
        s = st.snapshot
        _job_id(p, s)
        _at(p, e, field)
        captured = f["evidence"].get(str(p.get("evidenceId")))
        if captured is None:
            raise _refuse("EVIDENCE_NOT_FOUND", "evidenceId not found for this job")
        if captured["evidenceRef"] != p.get("evidenceRef"):
            raise _refuse("EVIDENCE_REF_MISMATCH", "payload.evidenceRef does not match captured evidenceRef")
        if e.get("type") == "EVIDENCE_EXPIRED":
            if str(p.get("evidenceId")) in f["evidenceExpired"]:
                raise _refuse("EVIDENCE_ALREADY_EXPIRED", "evidence already expired")
            _policy_hash(s, p)

    return check


def _claim_state(f: Facts, p: Mapping[str, Any]) -> dict[str, Any]:
    c = f["claims"].get(str(p.get("claimId")))
    if not c or not c["exists"]:
        raise _refuse("CLAIM_NOT_FOUND", "unknown claimId")
    return c


def _claim_opened(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if s["status"] in ("CREATED", "QUOTED"):
        raise _refuse("STATUS_NOT_ALLOWED", "cannot open claim before job is booked")
    if str(p.get("incidentId")) not in f["incidents"]:
        raise _refuse("INCIDENT_NOT_FOUND", "claim must reference an existing incidentId")
    c = f["claims"].get(str(p.get("claimId")))
    if c and c.get("opened"):
        raise _refuse("CLAIM_DUPLICATE", "claimId already exists for this job")


def _claim_triaged(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    _job_id(p, st.snapshot)
    if _claim_state(f, p)["status"] in _DECIDED:
        raise _refuse("CLAIM_TRANSITION_ILLEGAL", "cannot triage a decided claim")


_AFTER_EXECUTION: Final = frozenset({"COMPLETED", "ABORTED", "SETTLED"})
MAX_AUTO_APPROVE_CENTS: Final = 10_000


def _claim_approved(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    c = _claim_state(f, p)
    if c["status"] in _DECIDED:
        raise _refuse("CLAIM_TRANSITION_ILLEGAL", "claim is already decided")
    _status_in(s, _AFTER_EXECUTION, "claim approval is only allowed after the job is completed/aborted")
    if not c["incidentId"]:
        raise _refuse("INCIDENT_NOT_FOUND", "claim is missing incidentId")
    incident = f["incidents"].get(str(c["incidentId"]))
    if incident is None:
        raise _refuse("INCIDENT_NOT_FOUND", "claim incidentId not found")
    if incident.get("type") != "ACCESS_FAILURE" and not f["executionStarted"]:
        raise _refuse("EXECUTION_NOT_STARTED", "cannot approve claim: job never reached execution")
    amounts = p.get("amounts") if type(p.get("amounts")) is dict else {}
    assert isinstance(amounts, dict)
    payout = amounts.get("payoutCents") or 0
    refund = amounts.get("refundCents") or 0
    actor = _actor(e)
    elevated = actor.get("type") == "system" and actor.get("id") == "proxy_admin"
    if payout + refund > MAX_AUTO_APPROVE_CENTS and not elevated:
        raise _refuse("CLAIM_APPROVAL_LIMIT", "claim approval exceeds policy max without elevated actor")
    if refund:
        job_amount = (s.get("quote") or {}).get("amountCents")
        if not is_safe_int(job_amount) or job_amount <= 0:
            raise _refuse("QUOTE_MISSING", "job quote is required for refund adjustments")
        if refund > job_amount:
            raise _refuse("CLAIM_AMOUNTS_INVALID", "refundCents exceeds job amount")


def _claim_denied(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if _claim_state(f, p)["status"] in _DECIDED:
        raise _refuse("CLAIM_TRANSITION_ILLEGAL", "claim is already decided")
    _status_in(s, _AFTER_EXECUTION, "claim denial is only allowed after the job is completed/aborted")


def _job_adjusted(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    c = _claim_state(f, p)
    if c["status"] != "APPROVED":
        raise _refuse("CLAIM_TRANSITION_ILLEGAL", "job adjustment requires an approved claim")
    if c["adjusted"]:
        raise _refuse("CLAIM_ALREADY_ADJUSTED", "claim is already adjusted")
    if s["status"] != "SETTLED":
        raise _refuse("JOB_NOT_SETTLED", "job adjustment is only allowed after settlement")


def _claim_paid(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    _job_id(p, st.snapshot)
    c = _claim_state(f, p)
    if c["status"] != "APPROVED":
        raise _refuse("CLAIM_TRANSITION_ILLEGAL", "claim must be approved before it can be paid")
    if not c["adjusted"]:
        raise _refuse("CLAIM_NOT_ADJUSTED", "claim must be adjusted before it can be paid")
    amounts = c["amounts"] if type(c["amounts"]) is dict else {}
    expected = (amounts.get("payoutCents") or 0) + (amounts.get("refundCents") or 0)
    if p.get("amountCents") != expected:
        raise _refuse("CLAIM_AMOUNTS_INVALID", "payload.amountCents must equal approved total")


def _robot_matches_actor(p: Mapping[str, Any], e: Event) -> None:
    actor = _actor(e)
    if actor.get("type") == "robot" and p.get("robotId") != actor.get("id"):
        raise _refuse("ACTOR_MISMATCH", "payload.robotId must match event.actor.id")


def _robot_report(p: Mapping[str, Any], s: Mapping[str, Any], e: Event, at_field: str) -> None:
    """Checks of a robot's JOB_EXECUTION_* report: job id, its time field and a robot actor naming itself."""
    _job_id(p, s)
    _at(p, e, at_field)
    _robot_matches_actor(p, e)


def _payload_robot_is_expected(p: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    expected = _expected_robot(s)
    if expected and p.get("robotId") != expected:
        raise _refuse("ROBOT_MISMATCH", "payload.robotId must match execution robotId")


def _execution_started(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    if e.get("type") == "JOB_EXECUTION_STARTED":
        _robot_report(p, s, e, "startedAt")
    plan = s.get("accessPlan")
    if not plan:
        raise _refuse("ACCESS_PLAN_REQUIRED", "cannot start execution without an access plan")
    if (s.get("access") or {}).get("status") != "granted":
        raise _refuse("ACCESS_NOT_GRANTED", "cannot start execution without access granted")
    if not _within(e.get("at"), plan.get("validFrom"), plan.get("validTo")):
        raise _refuse("ACCESS_WINDOW", "execution start is outside access plan window")


def _heartbeat(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "t")
    actor = _actor(e)
    if actor.get("type") != "robot":
        raise _refuse("ACTOR_MISMATCH", "job heartbeat requires actor.type=robot")
    if p.get("robotId") != actor.get("id"):
        raise _refuse("ACTOR_MISMATCH", "payload.robotId must match event.actor.id")
    _status_in(s, {"EXECUTING", "ASSISTED", "STALLED", "ABORTING_SAFE_EXIT"},
               "job heartbeat is only allowed during execution/safe-exit")
    res, match, ex = s.get("reservation") or {}, s.get("match") or {}, s.get("execution") or {}
    expected = res.get("robotId") or match.get("robotId") or ex.get("robotId")
    if expected and expected != actor.get("id"):
        raise _refuse("ROBOT_MISMATCH", "heartbeat rejected: robotId does not match job robotId")


def liveness_policy(environment_tier: Any) -> tuple[int, int]:
    """settld's liveness policy: (heartbeat interval, stall threshold) in ms; homes beat every 30 s, others 60 s."""
    interval = 30_000 if environment_tier == "ENV_IN_HOME" else 60_000
    return interval, interval * 3


def _stalled(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "detectedAt")
    _status_in(s, {"EXECUTING", "ASSISTED"}, "stall is only allowed during execution")
    interval, stall_after = liveness_policy((_booking(s) or {}).get("environmentTier"))
    policy = p.get("policy") if type(p.get("policy")) is dict else {}
    assert isinstance(policy, dict)
    for field, expected in (("heartbeatIntervalMs", interval), ("stallAfterMs", stall_after)):
        if not strictly_equal(policy.get(field), expected):
            raise _refuse("LIVENESS_POLICY_MISMATCH", f"payload.policy.{field} mismatch")
    ex = s.get("execution") or {}
    started = ex.get("startedAt")
    if not started:
        raise _refuse("EXECUTION_NOT_STARTED", "stall requires execution startedAt")
    last = ex.get("lastHeartbeatAt") if ex.get("lastHeartbeatAt") is not None else started
    if p.get("lastHeartbeatAt") != last:
        raise _refuse("HEARTBEAT_MISMATCH", "payload.lastHeartbeatAt must match projected last heartbeat")
    now_ms, last_ms = date_parse_ms(e.get("at")), date_parse_ms(last)
    if not (math.isfinite(now_ms) and math.isfinite(last_ms)):
        raise _refuse("STALL_NOT_DUE", "stall timing is invalid")
    if now_ms - last_ms <= stall_after:
        raise _refuse("STALL_NOT_DUE", "stall rejected: heartbeat is not past stall threshold")
    _payload_robot_is_expected(p, s)


def _resumed(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "resumedAt")
    if s["status"] != "STALLED":
        raise _refuse("STATUS_NOT_ALLOWED", "resume is only allowed from STALLED")
    _payload_robot_is_expected(p, s)
    _robot_matches_actor(p, e)
    if _actor(e).get("type") != "robot":  # the server resumes only on a heartbeat after the stall
        ex = s.get("execution") or {}
        stalled, last = ex.get("stalledAt"), ex.get("lastHeartbeatAt")
        if not stalled:
            raise _refuse("RESUME_NOT_ALLOWED", "server resume requires execution.stalledAt")
        if not last:
            raise _refuse("RESUME_NOT_ALLOWED", "server resume requires a heartbeat")
        if date_parse_ms(last) <= date_parse_ms(stalled):
            raise _refuse("RESUME_NOT_ALLOWED", "server resume requires heartbeat after stall")


def _aborted(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    _at(p, e, "abortedAt")
    _payload_robot_is_expected(p, s)
    _robot_matches_actor(p, e)


def _assist(field: str, *, actor_kind: str | None = None, id_field: str | None = None,
            statuses: frozenset[str] | None = None) -> Check:
    def check(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
        s = st.snapshot
        _job_id(p, s)
        _at(p, e, field)
        actor = _actor(e)
        if actor_kind is not None and id_field is not None:
            if actor.get("type") != actor_kind:
                raise _refuse("ACTOR_MISMATCH", _ASSIST_ACTOR_MSG[str(e.get("type"))])
            if p.get(id_field) != actor.get("id"):
                raise _refuse("ACTOR_MISMATCH", f"payload.{id_field} must match event.actor.id")
        if statuses is not None:
            _status_in(s, statuses, "assist requests are only allowed during execution/stall")

    return check


_ASSIST_ACTOR_MSG: Final = {
    "ASSIST_REQUESTED": "assist requests require actor.type=robot",
    "ASSIST_ACCEPTED": "assist accepted requires actor.type=operator",
    "ASSIST_DECLINED": "assist declined requires actor.type=operator",
}


def _checkpoint(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _status_in(s, {"EXECUTING", "ASSISTED"}, "checkpoint is only allowed during execution")
    if (s.get("access") or {}).get("status") in ("revoked", "expired"):
        raise _refuse("ACCESS_REVOKED", "checkpoint rejected: access is revoked/expired")


def _completed(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    if e.get("type") == "JOB_EXECUTION_COMPLETED":
        _robot_report(p, s, e, "completedAt")
    if (s.get("access") or {}).get("status") in ("revoked", "expired"):
        raise _refuse("ACCESS_REVOKED", "cannot complete execution after access is revoked/expired")


def _post_settlement(what: str) -> Callable[[JobState, Facts, dict[str, Any]], None]:
    def check(st: JobState, f: Facts, p: dict[str, Any]) -> None:
        last = f["lastSettledEventId"]
        if not last:
            raise _refuse("SETTLEMENT_MISSING", f"{what} requires prior SETTLED event")
        if p.get("settledEventId") != last:
            raise _refuse("SETTLED_EVENT_MISMATCH", "payload.settledEventId must match last SETTLED event id")

    return check


def _operator_cost(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if s["status"] != "SETTLED":
        raise _refuse("JOB_NOT_SETTLED", "operator cost can only be recorded after settlement")
    _post_settlement("operator cost")(st, f, p)
    if _key(p.get("settledEventId")) in f["costSettled"]:
        raise _refuse("ALREADY_RECORDED_FOR_SETTLEMENT", "operator cost already recorded for this settlement")
    booking = _booking(s) or {}
    constraints = s.get("constraints") or {}
    job_zone = _zone(coalesce(booking.get("zoneId"), constraints.get("zoneId")))
    if p.get("zoneId") is not None and _zone(p.get("zoneId")) != job_zone:
        raise _refuse("ZONE_MISMATCH", "payload.zoneId must match job zone")


def _sla_breach(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if s["status"] != "SETTLED":
        raise _refuse("JOB_NOT_SETTLED", "SLA breach detection can only be recorded after settlement")
    _at(p, e, "detectedAt")
    _post_settlement("SLA breach")(st, f, p)
    if _key(p.get("settledEventId")) in f["breachSettled"]:
        raise _refuse("ALREADY_RECORDED_FOR_SETTLEMENT", "SLA breach already recorded for this settlement")
    booking = _booking(s)
    if not booking:
        raise _refuse("BOOKING_MISSING", "SLA breach requires a booking")
    window = p.get("window") if type(p.get("window")) is dict else {}
    assert isinstance(window, dict)
    if window.get("startAt") != booking.get("startAt") or window.get("endAt") != booking.get("endAt"):
        raise _refuse("WINDOW_MISMATCH", "payload.window must match booking window")
    if not booking.get("sla"):
        raise _refuse("SLA_POLICY_MISSING", "SLA breach requires booking.sla")
    if canonical_json(p.get("policy")) != canonical_json(booking.get("sla")):
        raise _refuse("SLA_POLICY_MISMATCH", "payload.policy must match booking.sla")
    _policy_hash(s, p)


def _sla_credit(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    _job_id(p, s)
    if s["status"] != "SETTLED":
        raise _refuse("JOB_NOT_SETTLED", "SLA credit can only be issued after settlement")
    _at(p, e, "issuedAt")
    credit_policy = (_booking(s) or {}).get("creditPolicy")
    credit_policy = credit_policy if type(credit_policy) is dict else {}
    if credit_policy.get("enabled") is not True:
        raise _refuse("SLA_CREDITS_DISABLED", "SLA credits are disabled")
    _post_settlement("SLA credit")(st, f, p)
    settled = _key(p.get("settledEventId"))
    if settled not in f["breachSettled"]:
        raise _refuse("SLA_BREACH_REQUIRED", "SLA credit requires a recorded SLA breach")
    if settled in f["creditSettled"] or _key(p.get("creditId")) in f["creditIds"]:
        raise _refuse("ALREADY_RECORDED_FOR_SETTLEMENT", "SLA credit already issued for this settlement")
    max_cents = credit_policy.get("maxAmountCents")
    amount = p.get("amountCents")
    if is_safe_int(max_cents) and max_cents > 0 and is_safe_int(amount) and amount > max_cents:
        raise _refuse("SLA_CREDIT_MAX_EXCEEDED", "SLA credit exceeds configured maximum")
    _policy_hash(s, p)


def _settled(st: JobState, f: Facts, e: Event, p: dict[str, Any]) -> None:
    s = st.snapshot
    licensed = _license_ids(s)
    for lic in f["skillUsed"]:
        if lic and lic not in licensed:
            raise _refuse("SKILL_NOT_LICENSED", "cannot settle: unlicensed skill usage exists")
    if s["status"] != "COMPLETED" or gate_mode(s) == "warn":
        return
    proof, forfeit = _settlement_proof(st, f)
    actual = p.get("settlementProofRef")
    ok = _same_fields(_proof_ref(proof, "FAIL" if forfeit else None), actual, _REF_KEYS)
    if ok and forfeit is not None:
        ok = _same_fields(forfeit, get(actual, "forfeit"), _FORFEIT_KEYS)
    if not ok:
        raise _refuse(
            "SETTLEMENT_PROOF_REF_REQUIRED",
            "cannot settle: settlementProofRef must reference the fresh proof used for settlement",
        )


def _settlement_proof(st: JobState, f: Facts) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The fresh proof a settlement under proof gating must reference, and the forfeiture that lets an
    INSUFFICIENT_EVIDENCE proof settle (as a settlementProofRef.forfeit), or the refusal."""
    anchor = completion_anchor(st)
    if anchor is None:
        raise _refuse("PROOF_REQUIRED", "cannot settle: missing completion anchor")
    facts_hash, cph, _ = current_facts_hash(st, f, anchor)
    if not facts_hash:
        raise _refuse("PROOF_STALE", "cannot settle: proof factsHash missing (stale-proof protection)")
    proof = _matching_proof(f, anchor, cph, facts_hash)
    if proof is None:
        if anchor in f["proofAnchors"]:
            raise _refuse("PROOF_STALE", "cannot settle: proof is stale (matching PROOF_EVALUATED missing)")
        raise _refuse("PROOF_REQUIRED", "cannot settle: proof verdict is required (PROOF_EVALUATED missing)")
    status = _proof_status(proof)
    if not status:
        raise _refuse("PROOF_REQUIRED", "cannot settle: proof verdict is required (PROOF_EVALUATED missing status)")
    forfeit = None
    if status == "INSUFFICIENT_EVIDENCE":
        forfeit = _forfeit_for(f, anchor, facts_hash)
        if forfeit is None:
            raise _refuse("PROOF_INSUFFICIENT", "cannot settle: proof verdict is INSUFFICIENT_EVIDENCE")
    return proof, forfeit


def settlement_proof_ref(state: JobState, facts: Facts) -> dict[str, Any] | None:
    """The settlementProofRef settld's events route gives a SETTLED server draft of a completed job under proof
    gating (the fresh proof; after a forfeiture, status FAIL and the forfeiture); None when there is none."""
    if state.snapshot["status"] != "COMPLETED" or gate_mode(state.snapshot) == "warn":
        return None
    try:
        proof, forfeit = _settlement_proof(state, facts)
    except ServerRuleViolation:
        return None
    pp = proof["payload"]
    ref = {
        "proofEventId": proof["id"],
        "proofEventAt": coalesce(pp.get("evaluatedAt"), proof.get("at")),
        "proofEventChainHash": proof["chainHash"],
        "proofEventPayloadHash": proof["payloadHash"],
        "proofEventSignerKeyId": proof.get("signerKeyId"),
        "proofEventSignature": proof.get("signature"),
        "evaluationId": pp.get("evaluationId"),
        "evaluatedAtChainHash": pp.get("evaluatedAtChainHash"),
        "status": "FAIL" if forfeit else _proof_status(proof),
        "reasonCodes": pp["reasonCodes"] if type(pp.get("reasonCodes")) is list else [],
        "requiredZonesHash": pp.get("requiredZonesHash"),
        "customerPolicyHash": pp.get("customerPolicyHash"),
        "operatorPolicyHash": pp.get("operatorPolicyHash"),
        "factsHash": pp.get("factsHash"),
        "metrics": pp.get("metrics"),
    }
    if forfeit:
        ref["forfeit"] = forfeit
    return ref


_SAFE_EXIT_FORBIDDEN: Final = frozenset(
    {"CHECKPOINT_REACHED", "SKILL_USED", "SKILL_METER_REPORTED", "EXECUTION_COMPLETED", "JOB_EXECUTION_COMPLETED"}
)

CHECKS: Final[dict[str, Check]] = {
    "ACCESS_PLAN_ISSUED": _access_plan,
    "ACCESS_GRANTED": _access_result,
    "ACCESS_DENIED": _access_result,
    "ACCESS_REVOKED": _access_revoked,
    "ACCESS_EXPIRED": _access_revoked,
    "BOOKED": _booked,
    "ZONE_COVERAGE_REPORTED": _zone_coverage,
    "PROOF_EVALUATED": _proof_evaluated,
    "SETTLEMENT_HELD": _hold,
    "SETTLEMENT_RELEASED": _release,
    "SETTLEMENT_FORFEITED": _forfeit,
    "DECISION_RECORDED": _decision_recorded,
    "DISPUTE_OPENED": _dispute_opened,
    "DISPUTE_CLOSED": _dispute_closed,
    "RISK_SCORED": _risk_scored,
    "DISPATCH_REQUESTED": _dispatch(True, "requestedAt", "dispatch"),
    "DISPATCH_EVALUATED": _dispatch(True, "evaluatedAt", "dispatch evaluation"),
    "DISPATCH_CONFIRMED": _dispatch_confirmed,
    "DISPATCH_FAILED": _dispatch(True, "failedAt", "dispatch failure"),
    "MATCHED": _matched,
    "RESERVED": _reserved,
    "OPERATOR_COVERAGE_RESERVED": _coverage_reserved,
    "OPERATOR_COVERAGE_RELEASED": _coverage_released,
    "SKILL_LICENSED": _skill_licensed,
    "SKILL_USED": _skill_used,
    "JOB_RESCHEDULED": _rescheduled,
    "JOB_CANCELLED": _cancelled,
    "INCIDENT_REPORTED": _incident_reported,
    "INCIDENT_DETECTED": _incident_detected,
    "EVIDENCE_CAPTURED": _evidence_captured,
    "EVIDENCE_VIEWED": _evidence_seen("viewedAt"),
    "EVIDENCE_EXPIRED": _evidence_seen("expiredAt"),
    "CLAIM_OPENED": _claim_opened,
    "CLAIM_TRIAGED": _claim_triaged,
    "CLAIM_APPROVED": _claim_approved,
    "CLAIM_DENIED": _claim_denied,
    "JOB_ADJUSTED": _job_adjusted,
    "CLAIM_PAID": _claim_paid,
    "EXECUTION_STARTED": _execution_started,
    "JOB_EXECUTION_STARTED": _execution_started,
    "JOB_HEARTBEAT": _heartbeat,
    "JOB_EXECUTION_STALLED": _stalled,
    "JOB_EXECUTION_RESUMED": _resumed,
    "JOB_EXECUTION_ABORTED": _aborted,
    "ASSIST_REQUESTED": _assist(
        "requestedAt", actor_kind="robot", id_field="robotId",
        statuses=frozenset({"EXECUTING", "ASSISTED", "STALLED"}),
    ),
    "ASSIST_QUEUED": _assist("queuedAt"),
    "ASSIST_ASSIGNED": _assist("assignedAt"),
    "ASSIST_ACCEPTED": _assist("acceptedAt", actor_kind="operator", id_field="operatorId"),
    "ASSIST_DECLINED": _assist("declinedAt", actor_kind="operator", id_field="operatorId"),
    "ASSIST_TIMEOUT": _assist("timedOutAt"),
    "CHECKPOINT_REACHED": _checkpoint,
    "EXECUTION_COMPLETED": _completed,
    "JOB_EXECUTION_COMPLETED": _completed,
    "OPERATOR_COST_RECORDED": _operator_cost,
    "SLA_BREACH_DETECTED": _sla_breach,
    "SLA_CREDIT_ISSUED": _sla_credit,
    "SETTLED": _settled,
}


# settld's domain rules of these types refuse an event without a payload object before anything else
_PAYLOAD_REQUIRED: Final = frozenset({
    "MATCHED", "SETTLEMENT_HELD", "SETTLEMENT_RELEASED", "SETTLEMENT_FORFEITED", "DECISION_RECORDED",
    "DISPUTE_OPENED", "DISPUTE_CLOSED",
})


def check_payload_present(event: Event) -> None:
    """Raise ServerRuleViolation("payload is required") when `event` is of a type whose rules need a payload and
    has none (null, or a JSON scalar; an array passes, as in JavaScript). Runs before payload validation."""
    if event.get("type") in _PAYLOAD_REQUIRED and type(event.get("payload")) not in (dict, list):
        raise _refuse("PAYLOAD_REQUIRED", "payload is required")


def check(state: JobState, facts: Facts, event: Event) -> None:
    """Raise ServerRuleViolation when the live API refuses `event` on top of `state` (history `facts`)."""
    t: Any = event.get("type")
    rule = CHECKS.get(t)
    if rule is not None:
        rule(state, facts, event, _p(event))
    if state.snapshot["status"] == "ABORTING_SAFE_EXIT" and t in _SAFE_EXIT_FORBIDDEN:
        raise _refuse("STATUS_NOT_ALLOWED", "event rejected during safe-exit")
