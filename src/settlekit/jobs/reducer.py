"""Incremental job reducer (02-jobs.md §4-§7).

`JobState = snapshot + facts`. The snapshot is the settld-compatible object; facts are settlekit-internal
values the ledger and artifact builders read instead of re-scanning earlier events.

Sharing rule (what makes `apply` O(1)): every call returns a fresh top-level snapshot dict and fresh copies
of the small sub-objects it touches. Growing collections (the snapshot lists and the facts' indexes) are
append-only and shared between consecutive states: on success `apply` may append to them, or replace an item
of a keyed list in place. `apply` validates everything before it changes anything, so when it raises its
input is untouched. Callers that need to keep an older state intact after a later successful `apply` use
`clone_state`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.canonical import plain_json
from settlekit.events.js import js_nonblank
from settlekit.events.js import truthy as js_truthy
from settlekit.jobs.errors import InvalidJobTransition
from settlekit.jobs.proof_fields import list_or_empty, proof_hashes
from settlekit.jobs.types import (
    CREATED,
    JOB_CREATED,
    JOB_EVENT_TYPES,
    TRANSITIONS,
    require_known_event_type,
)
from settlekit.jobs.validate import is_cents

STATE_FORMAT_VERSION: Final = 1
DEFAULT_TENANT_ID: Final = "tenant_default"

Event = Mapping[str, Any]
Snapshot = dict[str, Any]
Facts = dict[str, Any]


class JobState:
    """Snapshot plus facts. Treat as immutable; see the module docstring for the sharing rule."""

    __slots__ = ("snapshot", "facts")

    def __init__(self, snapshot: Snapshot, facts: Facts):
        self.snapshot = snapshot
        self.facts = facts

    @property
    def status(self) -> str:
        return self.snapshot["status"]

    def __repr__(self) -> str:
        s = self.snapshot
        return f"JobState(id={s.get('id')!r}, status={s['status']!r}, revision={s['revision']})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobState) and self.snapshot == other.snapshot and self.facts == other.facts

    __hash__ = None  # type: ignore[assignment]


# --- initial sub-objects ---


def _access_init() -> dict[str, Any]:
    return {
        "status": "none",
        "accessPlanId": None,
        "grantedAt": None,
        "deniedAt": None,
        "revokedAt": None,
        "expiredAt": None,
    }


def _execution_init() -> dict[str, Any]:
    return {
        "startedAt": None,
        "robotId": None,
        "stage": None,
        "lastHeartbeatAt": None,
        "lastHeartbeatStage": None,
        "lastHeartbeatProgress": None,
        "lastHeartbeatAssistRequested": None,
        "stalledAt": None,
        "stallReason": None,
        "resumedAt": None,
        "completedAt": None,
        "abortedAt": None,
    }


def _coverage_init() -> dict[str, Any]:
    return {
        "status": "none",
        "reservationId": None,
        "operatorId": None,
        "startAt": None,
        "endAt": None,
        "reservedAt": None,
        "releasedAt": None,
    }


def _assist_init() -> dict[str, Any]:
    return {
        "status": "none",
        "queueId": None,
        "operatorId": None,
        "queuedAt": None,
        "assignedAt": None,
        "acceptedAt": None,
        "declinedAt": None,
    }


def _initial_facts() -> Facts:
    return {
        "assistStarted": False,
        "completedSeen": False,
        "abortedSeen": False,
        "legacyCompletedSeen": False,
        "legacyAbortedSeen": False,
        "royaltiesCents": 0,
        "latestCompletion": None,
        "jobAtLatestCompletion": None,
        "proofStatusByAnchor": {},
        "latestProofEvent": None,
        "proofEventByAnchorAndFacts": {},
        "zoneCoverage": {},
        "incidentZonesByType": {},
        "signedEventCount": 0,
        "signerKeyIds": {},
        "settledEventCount": 0,
        "postSettlement": {},
        "skillLicenseIndex": {},
        "incidentIndex": {},
        "evidenceIndex": {},
        "claimIndex": {},
    }


def _track_signature(facts: Facts, event: Event) -> None:
    sig: Any = event.get("signature")
    if js_nonblank(sig):
        facts["signedEventCount"] += 1
    key_id: Any = event.get("signerKeyId")
    if js_nonblank(key_id) and key_id not in facts["signerKeyIds"]:
        facts["signerKeyIds"][key_id] = True


def initial_state(first_event: Event) -> JobState:
    """State after the genesis event, which must be a JOB_CREATED. Its payload is not judged (settld's core
    reads any value; the live path checks it first with `validate.check_genesis_payload`)."""
    t: Any = first_event.get("type")
    if t != JOB_CREATED:
        require_known_event_type(t)
        raise InvalidJobTransition(None, str(t), first_event.get("streamId"))
    p = first_event.get("payload")
    snapshot = _genesis_snapshot(first_event, p if type(p) is dict else {})
    facts = _initial_facts()
    _track_signature(facts, first_event)
    return JobState(snapshot, facts)


def _genesis_snapshot(first_event: Event, p: dict[str, Any]) -> Snapshot:
    """The job as JOB_CREATED (payload `p`, {} for a payload that is not an object) leaves it, keys in settld's
    order."""
    constraints: Any = p.get("constraints")
    snapshot: Snapshot = {
        "id": first_event["streamId"],
        "tenantId": _nn(p.get("tenantId"), DEFAULT_TENANT_ID),
        "customerId": p.get("customerId"),
        "siteId": p.get("siteId"),
        "contractId": p.get("contractId"),
        "customerContractHash": None,
        "customerPolicyHash": None,
        "customerCompilerId": None,
        "operatorContractHash": None,
        "operatorPolicyHash": None,
        "operatorCompilerId": None,
        "templateId": p.get("templateId"),
        "constraints": constraints if constraints is not None else {},
        "status": CREATED,
        "revision": 0,
        "createdAt": first_event["at"],
        "updatedAt": first_event["at"],
        "lastChainHash": first_event.get("chainHash"),
        "lastEventId": first_event["id"],
        "quote": None,
        "booking": None,
        "cancellation": None,
        "match": None,
        "reservation": None,
        "accessPlan": None,
        "access": _access_init(),
        "execution": _execution_init(),
        "operatorCoverage": _coverage_init(),
        "assist": _assist_init(),
        "skillLicenses": [],
        "skillUses": [],
        "proof": None,
        "settlement": None,
        "settlementHold": None,
        "dispute": None,
        "operatorCosts": [],
        "slaBreaches": [],
        "slaCredits": [],
        "riskScores": [],
        "incidents": [],
        "evidence": [],
        "claims": [],
    }
    if "templateId" not in p:
        del snapshot["templateId"]  # settld's job holds it as undefined, which JSON leaves out
    return snapshot


# --- per-type snapshot updates: (snapshot copy, facts copy, event, payload) -> None ---
#
# The updates follow settld's reducer value for value: `a ?? b` is `_nn(a, b)` (first value that is not
# null/undefined), payload times win over `event.at` where settld reads them, keyed lists keep the position of
# the first item with a given id (a JS Map), and the handlers never assume a payload field is present (the
# offline tools reduce every stream the reference accepts, whatever the live path's validation says).


def _nn(*values: Any) -> Any:
    """JS `a ?? b ?? ...`: the first value that is not None."""
    for v in values:
        if v is not None:
            return v
    return None


def _truthy_id(v: Any) -> bool:
    """JS truthiness of an id field (`if (claimId)`): a non-empty string or any other non-falsy JSON value."""
    if v is None or v is False or v == "":
        return False
    return not (type(v) in (int, float) and v == 0)

Handler = Callable[[Snapshot, Facts, Event, Mapping[str, Any]], None]


def _quote(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["quote"] = e.get("payload")


def _booked(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["booking"] = e.get("payload")
    if p.get("customerContractHash") is not None:
        s["customerContractHash"] = p["customerContractHash"]
    if p.get("policyHash") is not None:
        s["customerPolicyHash"] = p["policyHash"]
    if p.get("customerCompilerId") is not None:
        s["customerCompilerId"] = p["customerCompilerId"]
    if p.get("customerId") is not None:
        s["customerId"] = p["customerId"]
    if p.get("siteId") is not None:
        s["siteId"] = p["siteId"]
    contract: Any = p.get("contract")
    if p.get("contractId") is not None:
        s["contractId"] = p["contractId"]
    elif type(contract) is dict and contract.get("contractId") is not None:
        s["contractId"] = contract["contractId"]


def _matched(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["match"] = e.get("payload")
    for op_key, cust_key in (
        ("operatorContractHash", "customerContractHash"),
        ("operatorPolicyHash", "customerPolicyHash"),
        ("operatorCompilerId", "customerCompilerId"),
    ):
        v: Any = p.get(op_key)
        if v is None:
            v = s[op_key] if s[op_key] is not None else s[cust_key]
        s[op_key] = v


def _reserved(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["reservation"] = e.get("payload")


def _cancelled(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["cancellation"] = e.get("payload")


def _rescheduled(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    window: Any = p.get("newWindow")
    booking = s["booking"]
    if type(window) is dict and type(booking) is dict:
        booking = dict(booking)
        for key in ("startAt", "endAt"):
            value = _nn(window.get(key), booking.get(key))
            if value is not None or key in booking:
                booking[key] = value
        s["booking"] = booking
    s["match"] = None
    s["reservation"] = None
    s["operatorContractHash"] = None
    s["operatorPolicyHash"] = None
    s["operatorCompilerId"] = None
    s["operatorCoverage"] = _coverage_init()
    s["assist"] = _assist_init()
    s["accessPlan"] = None
    s["access"] = _access_init()


def _access_update(s: Snapshot, p: Mapping[str, Any], status: str, at_key: str, at: str) -> None:
    access = dict(s["access"])
    access["status"] = status
    if p.get("accessPlanId") is not None:
        access["accessPlanId"] = p["accessPlanId"]
    access[at_key] = at
    s["access"] = access


def _access_plan(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["accessPlan"] = e.get("payload")
    plan_id: Any = p.get("accessPlanId")
    # settld compares with `!==`: a payload without the field (undefined) always differs from the stored value
    if "accessPlanId" not in p or s["access"].get("accessPlanId") != plan_id:
        # a new plan (or a plan without id after one with an id) resets the access status to planned
        access = dict(s["access"])
        access["status"] = "planned"
        access["accessPlanId"] = plan_id
        s["access"] = access


def _access_granted(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    _access_update(s, p, "granted", "grantedAt", e["at"])


def _access_denied(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    _access_update(s, p, "denied", "deniedAt", e["at"])


def _access_revoked(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    _access_update(s, p, "revoked", "revokedAt", e["at"])


def _access_expired(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    _access_update(s, p, "expired", "expiredAt", e["at"])


def _execution_started(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = dict(s["execution"])
    if e["type"] == "EXECUTION_STARTED":
        # legacy start: the robot is the acting robot, the time is the event's
        actor: Any = e.get("actor")
        robot_id: Any = actor.get("id") if type(actor) is dict and actor.get("type") == "robot" else None
        ex["startedAt"] = e["at"]
    else:
        robot_id = p.get("robotId")
        ex["startedAt"] = _nn(p.get("startedAt"), e["at"])
    ex["robotId"] = _nn(robot_id, ex.get("robotId"))
    ex["stage"] = _nn(p.get("stage"), ex.get("stage"))
    s["execution"] = ex


def _heartbeat(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = s["execution"].copy()
    ex["lastHeartbeatAt"] = _nn(p.get("t"), e["at"])
    ex["lastHeartbeatStage"] = p.get("stage")
    ex["lastHeartbeatProgress"] = p.get("progress")
    ex["lastHeartbeatAssistRequested"] = p.get("assistRequested")
    ex["robotId"] = _nn(p.get("robotId"), ex.get("robotId"))
    s["execution"] = ex


def _capture_completion_anchor(s: Snapshot, f: Facts, e: Event) -> None:
    f["latestCompletion"] = {"eventId": e["id"], "chainHash": e.get("chainHash"), "index": s["revision"]}
    f["jobAtLatestCompletion"] = {
        "booking": s["booking"],
        "constraints": s["constraints"],
        "customerContractHash": s["customerContractHash"],
        "customerPolicyHash": s["customerPolicyHash"],
        "customerCompilerId": s["customerCompilerId"],
        "operatorContractHash": s["operatorContractHash"],
        "operatorPolicyHash": s["operatorPolicyHash"],
        "operatorCompilerId": s["operatorCompilerId"],
    }


def _completed(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = dict(s["execution"])
    ex["completedAt"] = e["at"]
    s["execution"] = ex
    f["completedSeen"] = True
    if e["type"] == "EXECUTION_COMPLETED":
        f["legacyCompletedSeen"] = True
    _capture_completion_anchor(s, f, e)


def _aborted(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = dict(s["execution"])
    ex["abortedAt"] = e["at"]
    s["execution"] = ex
    f["abortedSeen"] = True
    if e["type"] == "EXECUTION_ABORTED":
        f["legacyAbortedSeen"] = True


def _stalled(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = dict(s["execution"])
    ex["stalledAt"] = _nn(p.get("detectedAt"), e["at"])
    ex["stallReason"] = p.get("reason")
    s["execution"] = ex


def _resumed(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ex = dict(s["execution"])
    ex["resumedAt"] = _nn(p.get("resumedAt"), e["at"])
    ex["stalledAt"] = None
    ex["stallReason"] = None
    s["execution"] = ex
    # resuming clears the assist episode, including its timeout fields
    assist = _assist_init()
    assist["timedOutAt"] = None
    assist["timeoutReason"] = None
    s["assist"] = assist


def _assist_started(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    f["assistStarted"] = True


def _noop(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    return None


def _coverage_reserved(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["operatorCoverage"] = {
        "status": "reserved",
        "reservationId": p.get("reservationId"),
        "operatorId": p.get("operatorId"),
        "startAt": p.get("startAt"),
        "endAt": p.get("endAt"),
        "reservedAt": e["at"],
        "releasedAt": None,
    }


def _coverage_released(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    current: Any = s["operatorCoverage"].get("reservationId")
    if not _truthy_id(current) or p.get("reservationId") != current:
        return  # releasing another (or no) reservation changes nothing
    cov = dict(s["operatorCoverage"])
    cov["status"] = "released"
    cov["releasedAt"] = e["at"]
    s["operatorCoverage"] = cov


def _assist_update(status: str, at_key: str, kept: tuple[str, ...], replaced: tuple[str, ...] = ()) -> Handler:
    """`kept`: fields taken from the payload when present, else kept; `replaced`: always taken from the
    payload (null when absent). The time is the payload's own `at_key` field, else `event.at`."""

    def handler(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
        assist = dict(s["assist"])
        assist["status"] = status
        for field in kept:
            assist[field] = _nn(p.get(field), assist.get(field))
        for field in replaced:
            assist[field] = p.get(field)
        assist[at_key] = _nn(p.get(at_key), e["at"])
        if status == "timeout":
            assist["timeoutReason"] = p.get("reason")
        s["assist"] = assist

    return handler


def _index_key(v: Any) -> str:
    """Index key of an id value: the string itself, other JSON values in a form no string id can take."""
    if type(v) is str:
        return v
    try:
        return "\x00" + json.dumps(v, sort_keys=True)
    except RecursionError:  # nested deeper than json writes (recorded history): its plain text, keys as they come
        return "\x01" + plain_json(v)


def _keyed_put(items: list[Any], index: dict[str, int], item_id: Any, item: Any) -> None:
    """JS `Map.set` on an insertion-ordered list: a known id keeps its position, a new one is appended."""
    key = _index_key(item_id)
    idx = index.get(key)
    if idx is None:
        index[key] = len(items)
        items.append(item)
    else:
        items[idx] = item


def _keyed_get(items: list[Any], index: Mapping[str, int], item_id: Any) -> Any:
    idx = index.get(_index_key(item_id))
    return None if idx is None else items[idx]


def _skill_licensed(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    lic: Any = p.get("licenseId")
    if _truthy_id(lic):
        _keyed_put(s["skillLicenses"], f["skillLicenseIndex"], lic, e.get("payload"))
    pricing: Any = p.get("pricing")
    amount: Any = pricing.get("amountCents") if type(pricing) is dict else None
    if is_cents(amount) and amount > 0:
        f["royaltiesCents"] += amount


def _skill_used(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["skillUses"].append({"at": e["at"], "type": e["type"], "payload": e.get("payload")})


def _append_entry(key: str) -> Handler:
    def handler(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
        s[key].append({"at": e["at"], "payload": e.get("payload"), "actor": e.get("actor")})

    return handler


def _post_settlement_entry(key: str) -> Handler:
    append = _append_entry(key)

    def handler(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
        append(s, f, e, p)
        marks = dict(f["postSettlement"])
        marks[e["type"]] = p.get("settledEventId")
        f["postSettlement"] = marks

    return handler


def _incident(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    inc_id: Any = p.get("incidentId")
    if not _truthy_id(inc_id):
        return
    _keyed_put(
        s["incidents"],
        f["incidentIndex"],
        inc_id,
        {
            "incidentId": inc_id,
            "jobId": p.get("jobId") if p.get("jobId") is not None else s["id"],
            "type": p.get("type"),
            "severity": p.get("severity"),
            "summary": p.get("summary"),
            "description": p.get("description"),
            "signals": p.get("signals"),
            "reportedBy": p.get("reportedBy"),
            "sourceEventType": e["type"],
            "at": e["at"],
            "actor": e.get("actor"),
        },
    )
    zone: Any = p.get("zoneId")
    itype: Any = p.get("type")
    if type(zone) is str and zone and type(itype) is str:
        by_type = f["incidentZonesByType"]
        zones = by_type.get(itype)
        if zones is None:
            zones = by_type[itype] = {}
        zones[zone] = True


def _evidence_captured(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ev_id: Any = p.get("evidenceId")
    if not _truthy_id(ev_id):
        return
    _keyed_put(
        s["evidence"],
        f["evidenceIndex"],
        ev_id,
        {
            "evidenceId": ev_id,
            "jobId": p.get("jobId") if p.get("jobId") is not None else s["id"],
            "incidentId": p.get("incidentId"),
            "evidenceRef": p.get("evidenceRef"),
            "kind": p.get("kind"),
            "durationSeconds": p.get("durationSeconds"),
            "sizeBytes": p.get("sizeBytes"),
            "contentType": p.get("contentType"),
            "redaction": p.get("redaction"),
            "at": e["at"],
            "actor": e.get("actor"),
            "expiredAt": None,
            "retentionDays": None,  # set by EVIDENCE_EXPIRED only
            "expiredBy": None,
        },
    )


def _evidence_expired(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    ev_id: Any = p.get("evidenceId")
    if not _truthy_id(ev_id):
        return
    current: Any = _keyed_get(s["evidence"], f["evidenceIndex"], ev_id)
    if current is None:
        # expiry of evidence never captured in this stream: a record with only what the expiry says
        current = {
            "evidenceId": ev_id,
            "jobId": _nn(p.get("jobId"), s["id"]),
            "incidentId": None,
            "evidenceRef": p.get("evidenceRef"),
            "kind": None,
            "durationSeconds": None,
            "sizeBytes": None,
            "contentType": None,
            "redaction": None,
            "at": None,
            "actor": None,
            "expiredAt": None,
            "retentionDays": None,
            "expiredBy": None,
        }
    item = dict(current)
    item["evidenceRef"] = _nn(p.get("evidenceRef"), current.get("evidenceRef"))
    item["expiredAt"] = e["at"]
    item["retentionDays"] = _nn(p.get("retentionDays"), current.get("retentionDays"))
    item["expiredBy"] = e.get("actor")
    _keyed_put(s["evidence"], f["evidenceIndex"], ev_id, item)


def _zone_coverage(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    zone: Any = p.get("zoneId")
    window: Any = p.get("window")
    if type(zone) is not str or type(window) is not dict:
        return  # not a coverage report the proof can use (the artifact fold applies settld's own rules)
    report = {
        "zoneId": zone,
        "coveragePct": p.get("coveragePct"),
        "window": window,
        "eventId": e["id"],
        "chainHash": e.get("chainHash"),
        "at": e["at"],
    }
    current = f["zoneCoverage"].get(zone)
    if current is not None:
        cur_end: Any = current["window"].get("endAt")
        new_end: Any = window.get("endAt")
        comparable = type(cur_end) is str and type(new_end) is str
        if comparable and (new_end < cur_end or (new_end == cur_end and e["id"] < current["eventId"])):
            return
    coverage = dict(f["zoneCoverage"])
    coverage[zone] = report
    f["zoneCoverage"] = coverage


def _claim_update(
    s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any], base_status: str | None, changes: Mapping[str, Any]
) -> None:
    """Update the claim named by `p.claimId`; an unknown claim starts from a stub (with `base_status` when
    given), as settld does. A falsy claim id changes nothing."""
    claim_id: Any = p.get("claimId")
    if not _truthy_id(claim_id):
        return
    current: Any = _keyed_get(s["claims"], f["claimIndex"], claim_id)
    if current is None:
        current = {"claimId": claim_id, "jobId": s["id"], "incidentId": None}
        if base_status is not None:
            current["status"] = base_status
    claim = dict(current)
    claim.update(changes)
    _keyed_put(s["claims"], f["claimIndex"], claim_id, claim)


def _claim_opened(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    claim_id: Any = p.get("claimId")
    if not _truthy_id(claim_id):
        return
    _keyed_put(
        s["claims"],
        f["claimIndex"],
        claim_id,
        {
            "claimId": claim_id,
            "jobId": _nn(p.get("jobId"), s["id"]),
            "incidentId": p.get("incidentId"),
            "reasonCode": p.get("reasonCode"),
            "description": p.get("description"),
            "status": "OPEN",
            "triageCode": None,
            "triageNotes": None,
            "approved": None,
            "denied": None,
            "adjustedAt": None,
            "paid": None,
            "openedAt": e["at"],
            "actor": e.get("actor"),
        },
    )


def _claim_triaged(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    current: Any = _keyed_get(s["claims"], f["claimIndex"], p.get("claimId"))
    if current is None:
        current = {"status": "OPEN"}
    triage = {
        # triage moves an open claim only; a later triage keeps the status it finds
        "status": "TRIAGED" if current.get("status") == "OPEN" else current.get("status"),
        "triageCode": _nn(p.get("triageCode"), current.get("triageCode")),
        "triageNotes": _nn(p.get("notes"), current.get("triageNotes")),
        "triagedAt": e["at"],
        "triagedBy": e.get("actor"),
    }
    _claim_update(s, f, e, p, "OPEN", triage)


def _claim_approved(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    # `amounts` is kept as sent: a payout-only approval has no refundCents key
    approved = {"amounts": p.get("amounts"), "currency": p.get("currency"), "notes": p.get("notes")}
    approval = {"status": "APPROVED", "approved": approved, "approvedAt": e["at"], "approvedBy": e.get("actor")}
    _claim_update(s, f, e, p, None, approval)


def _claim_denied(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    denial = {
        "status": "DENIED",
        "denied": {"reasonCode": p.get("reasonCode"), "notes": p.get("notes")},
        "deniedAt": e["at"],
        "deniedBy": e.get("actor"),
    }
    _claim_update(s, f, e, p, None, denial)


def _job_adjusted(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    current: Any = _keyed_get(s["claims"], f["claimIndex"], p.get("claimId"))
    adjustment = {
        "adjustedAt": e["at"],
        "adjustmentId": _nn(p.get("adjustmentId"), current.get("adjustmentId") if current else None),
        "adjustedBy": e.get("actor"),
    }
    _claim_update(s, f, e, p, "APPROVED", adjustment)


def _claim_paid(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    payment = {
        "status": "PAID",
        "paid": {"amountCents": p.get("amountCents"), "currency": p.get("currency"), "paymentRef": p.get("paymentRef")},
        "paidAt": e["at"],
        "paidBy": e.get("actor"),
    }
    _claim_update(s, f, e, p, "APPROVED", payment)


def _proof_outcome(p: Mapping[str, Any]) -> dict[str, Any]:
    """What a PROOF_EVALUATED decided, as the snapshot's proof and the settlement proof ref both hold it."""
    return {
        "evaluatedAtChainHash": p.get("evaluatedAtChainHash"),
        "evaluationId": p.get("evaluationId"),
        "status": p.get("status"),
        "reasonCodes": list_or_empty(p.get("reasonCodes")),
        **proof_hashes(p),
    }


def _list_or_null(v: Any) -> list[Any] | None:
    return v if type(v) is list else None


def _proof_evaluated(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    if type(e.get("payload")) is not dict:
        return  # settld keeps the previous proof when the payload is not an object
    s["proof"] = {
        "evaluatedAt": p.get("evaluatedAt") if p.get("evaluatedAt") is not None else e["at"],
        **_proof_outcome(p),
        "missingEvidence": _list_or_null(p.get("missingEvidence")),
        "metrics": p.get("metrics"),
    }
    proof_event = {
        "id": e["id"],
        "at": e["at"],
        "chainHash": e.get("chainHash"),
        "payloadHash": e.get("payloadHash"),
        "signature": e.get("signature"),
        "signerKeyId": e.get("signerKeyId"),
        "payload": e.get("payload"),
    }
    f["latestProofEvent"] = proof_event
    anchor: Any = p.get("evaluatedAtChainHash")
    f["proofStatusByAnchor"][anchor] = p.get("status")
    f["proofEventByAnchorAndFacts"][f"{anchor}|{p.get('factsHash')}"] = proof_event


def _settled(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["settlement"] = {
        "settledAt": e["at"],
        "settledEventId": e["id"],
        "settlementProofRef": p.get("settlementProofRef"),
    }
    f["settledEventCount"] += 1


def _hold_held(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    prev: Any = s["settlementHold"]
    hold_id: Any = p.get("holdId")
    # re-holding the open hold with the same id is an update: it keeps the original heldAt
    is_update = (
        type(prev) is dict
        and prev.get("status") == "HELD"
        and _truthy_id(prev.get("holdId"))
        and prev.get("holdId") == hold_id
    )
    held_at: Any = prev.get("heldAt") if is_update else _nn(p.get("heldAt"), e["at"])
    exposure: Any = p.get("exposure")
    expected: Any = exposure.get("expected") if type(exposure) is dict else None
    held: Any = exposure.get("held") if type(exposure) is dict else None
    s["settlementHold"] = {
        "status": "HELD",
        "holdId": hold_id,
        "heldAt": held_at,
        "lastUpdatedAt": _nn(p.get("heldAt"), e["at"]),
        "factsHash": p.get("factsHash"),
        "evaluatedAtChainHash": p.get("evaluatedAtChainHash"),
        "reasonCodes": list_or_empty(p.get("reasonCodes")),
        "missingEvidence": _list_or_null(p.get("missingEvidence")),
        "triggeringProofRef": p.get("triggeringProofRef"),
        "pricingAnchor": p.get("pricingAnchor"),
        "currency": _nn(
            p.get("currency"),
            expected.get("currency") if type(expected) is dict else None,
            held.get("currency") if type(held) is dict else None,
        ),
        "expectedExposure": expected,
        "holdPolicy": exposure.get("holdPolicy") if type(exposure) is dict else None,
        "heldExposure": held,
    }


def _hold_base(prev: Any) -> dict[str, Any]:
    """The HELD fields a release or forfeiture carries over (null when there was no hold)."""
    h: Mapping[str, Any] = prev if type(prev) is dict else {}
    return {
        "heldAt": h.get("heldAt"),
        "lastUpdatedAt": h.get("lastUpdatedAt"),
        "factsHash": h.get("factsHash"),
        "evaluatedAtChainHash": h.get("evaluatedAtChainHash"),
        "reasonCodes": _nn(h.get("reasonCodes"), []),
        "missingEvidence": h.get("missingEvidence"),
        "triggeringProofRef": h.get("triggeringProofRef"),
        "pricingAnchor": h.get("pricingAnchor"),
        "currency": h.get("currency"),
        "expectedExposure": h.get("expectedExposure"),
        "holdPolicy": h.get("holdPolicy"),
        "heldExposure": h.get("heldExposure"),
    }


def _hold_released(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    prev: Any = s["settlementHold"]
    hold = _hold_base(prev)
    hold.update(
        {
            "status": "RELEASED",
            "holdId": _nn(p.get("holdId"), prev.get("holdId") if type(prev) is dict else None),
            "releasedAt": _nn(p.get("releasedAt"), e["at"]),
            "releaseReason": p.get("releaseReason"),
            "releasingProofRef": p.get("releasingProofRef"),
        }
    )
    s["settlementHold"] = hold


def _hold_forfeited(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    prev: Any = s["settlementHold"]
    hold = _hold_base(prev)
    hold.update(
        {
            "status": "FORFEITED",
            "holdId": _nn(p.get("holdId"), prev.get("holdId") if type(prev) is dict else None),
            "factsHash": _nn(p.get("factsHash"), hold["factsHash"]),
            "evaluatedAtChainHash": _nn(p.get("evaluatedAtChainHash"), hold["evaluatedAtChainHash"]),
            "forfeitedAt": _nn(p.get("forfeitedAt"), e["at"]),
            "forfeitureReason": p.get("forfeitureReason"),
            "decisionRef": p.get("decisionRef"),
            "decisionEventRef": p.get("decisionEventRef"),
        }
    )
    s["settlementHold"] = hold


def _dispute_opened(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["dispute"] = {
        "status": "OPEN",
        "disputeId": p.get("disputeId"),
        "openedAt": _nn(p.get("openedAt"), e["at"]),
        "openedBy": e.get("actor"),
        "reason": p.get("reason"),
    }


def _dispute_closed(s: Snapshot, f: Facts, e: Event, p: Mapping[str, Any]) -> None:
    s["dispute"] = {
        "status": "CLOSED",
        "disputeId": p.get("disputeId"),
        "closedAt": _nn(p.get("closedAt"), e["at"]),
        "closedBy": e.get("actor"),
        "resolution": p.get("resolution"),
    }


HANDLERS: Final[dict[str, Handler]] = {
    "QUOTE_PROPOSED": _quote,
    "BOOKED": _booked,
    "MATCHED": _matched,
    "RESERVED": _reserved,
    "EN_ROUTE": _noop,
    "ACCESS_PLAN_ISSUED": _access_plan,
    "ACCESS_GRANTED": _access_granted,
    "ACCESS_DENIED": _access_denied,
    "ACCESS_REVOKED": _access_revoked,
    "ACCESS_EXPIRED": _access_expired,
    "EXECUTION_STARTED": _execution_started,
    "JOB_EXECUTION_STARTED": _execution_started,
    "JOB_HEARTBEAT": _heartbeat,
    "TELEMETRY_HEARTBEAT": _noop,
    "CHECKPOINT_REACHED": _noop,
    "EXECUTION_COMPLETED": _completed,
    "JOB_EXECUTION_COMPLETED": _completed,
    "EXECUTION_ABORTED": _aborted,
    "JOB_EXECUTION_ABORTED": _aborted,
    "JOB_EXECUTION_STALLED": _stalled,
    "JOB_EXECUTION_RESUMED": _resumed,
    "ASSIST_STARTED": _assist_started,
    "ASSIST_ENDED": _noop,
    "ASSIST_REQUESTED": _assist_update("requested", "requestedAt", ()),
    "ASSIST_QUEUED": _assist_update("queued", "queuedAt", ("queueId",)),
    "ASSIST_ASSIGNED": _assist_update("assigned", "assignedAt", ("queueId",), ("operatorId",)),
    "ASSIST_ACCEPTED": _assist_update("accepted", "acceptedAt", ("operatorId", "queueId")),
    "ASSIST_DECLINED": _assist_update("declined", "declinedAt", ("operatorId", "queueId")),
    "ASSIST_TIMEOUT": _assist_update("timeout", "timedOutAt", ("queueId",)),
    "JOB_RESCHEDULED": _rescheduled,
    "JOB_CANCELLED": _cancelled,
    "OPERATOR_COVERAGE_RESERVED": _coverage_reserved,
    "OPERATOR_COVERAGE_RELEASED": _coverage_released,
    "SKILL_LICENSED": _skill_licensed,
    "SKILL_USED": _skill_used,
    "SKILL_METER_REPORTED": _skill_used,
    "RISK_SCORED": _append_entry("riskScores"),
    "OPERATOR_COST_RECORDED": _post_settlement_entry("operatorCosts"),
    "SLA_BREACH_DETECTED": _post_settlement_entry("slaBreaches"),
    "SLA_CREDIT_ISSUED": _post_settlement_entry("slaCredits"),
    "INCIDENT_REPORTED": _incident,
    "INCIDENT_DETECTED": _incident,
    "EVIDENCE_CAPTURED": _evidence_captured,
    "EVIDENCE_EXPIRED": _evidence_expired,
    "ZONE_COVERAGE_REPORTED": _zone_coverage,
    "CLAIM_OPENED": _claim_opened,
    "CLAIM_TRIAGED": _claim_triaged,
    "CLAIM_APPROVED": _claim_approved,
    "CLAIM_DENIED": _claim_denied,
    "JOB_ADJUSTED": _job_adjusted,
    "CLAIM_PAID": _claim_paid,
    "PROOF_EVALUATED": _proof_evaluated,
    "SETTLED": _settled,
    "SETTLEMENT_HELD": _hold_held,
    "SETTLEMENT_RELEASED": _hold_released,
    "SETTLEMENT_FORFEITED": _hold_forfeited,
    "DISPUTE_OPENED": _dispute_opened,
    "DISPUTE_CLOSED": _dispute_closed,
}


def check_event(state: JobState, event: Event) -> str | None:
    """Everything `apply` checks, without changing anything: what settld's core checks. Payloads are not judged
    here: settld's reducer reads any value, so the offline tools take every payload the reference takes; the live
    path validates them first (`api_payloads`, `validate.validate_payload`) and checks the event's type and the
    transition with `check_transition`, which refuses what the core takes.

    As settld's reducer: a JOB_CREATED restarts the job at CREATED (see `_restart`); a type outside the transition
    table (an unknown one, another stream's, "SETTLED " with a space) only counts as a revision; a transition type
    must fit the status; an event whose streamId is set and is not the job's is refused.

    Returns the status after the event, or None when the type does not change the status.
    """
    t: Any = event.get("type")
    snapshot = state.snapshot
    if t == JOB_CREATED:
        return CREATED
    stream_id: Any = event.get("streamId")
    if js_truthy(stream_id) and stream_id != snapshot["id"]:
        raise ValidationError(
            "event.streamId does not match the job id",
            code="STREAM_MISMATCH",
            streamId=stream_id,
            jobId=snapshot["id"],
        )
    row = TRANSITIONS.get(t) if type(t) is str else None
    if row is None:
        return None
    to_status = row.get(snapshot["status"])
    if to_status is None:
        raise InvalidJobTransition(snapshot["status"], t, snapshot["id"])
    return to_status


def check_transition(state: JobState, event: Event) -> str | None:
    """Known job type, stream id and transition; the status after the event, or None when the type does not
    change it."""
    t: Any = event.get("type")
    snapshot = state.snapshot
    if t not in JOB_EVENT_TYPES:
        require_known_event_type(t)
        raise ValidationError(
            f"event type {t} does not belong to a job stream",
            code="EVENT_TYPE_NOT_ALLOWED",
            eventType=t,
            jobId=snapshot["id"],
        )
    assert isinstance(t, str)
    if event.get("streamId") != snapshot["id"]:
        raise ValidationError(
            "event.streamId does not match the job id",
            code="STREAM_MISMATCH",
            streamId=event.get("streamId"),
            jobId=snapshot["id"],
        )
    if t == JOB_CREATED:
        raise InvalidJobTransition(snapshot["status"], t, snapshot["id"])
    row = TRANSITIONS.get(t)
    to_status: str | None = None
    if row is not None:
        to_status = row.get(snapshot["status"])
        if to_status is None:
            raise InvalidJobTransition(snapshot["status"], t, snapshot["id"])
    return to_status


def _step(state: JobState, event: Event, to_status: str | None) -> JobState:
    """Reducer step for an event that passed `check_event`."""
    t: Any = event["type"]
    if t == JOB_CREATED:
        return _restart(state, event)
    s = state.snapshot.copy()
    f = state.facts.copy()
    if to_status is not None:
        s["status"] = to_status
    s["revision"] += 1
    s["updatedAt"] = event["at"]
    s["lastChainHash"] = event.get("chainHash")
    s["lastEventId"] = event["id"]
    handler = HANDLERS.get(t) if type(t) is str else None
    if handler is not None:
        p = event.get("payload")
        handler(s, f, event, p if type(p) is dict else {})
    sig: Any = event.get("signature")
    if sig is not None or event.get("signerKeyId") is not None:
        _track_signature(f, event)
    return JobState(s, f)


# What settld's reducer keeps across a JOB_CREATED that is not the first event: it builds a new job from that
# event, but the lists and latest values it collects over the whole stream (its local maps and variables) are
# merged into the job after the loop, so they carry on.
_KEPT_ACROSS_RESTART: Final = (
    "proof", "settlement", "settlementHold", "dispute", "skillLicenses", "skillUses", "operatorCosts",
    "slaBreaches", "slaCredits", "riskScores", "incidents", "evidence", "claims",
)


def _restart(state: JobState, event: Event) -> JobState:
    """A JOB_CREATED after the first event, as settld's reducer takes it: the job starts again at CREATED from
    this event's payload (revision 0, its id the event's streamId), keeping what `_KEPT_ACROSS_RESTART` names.
    The facts (what the postings and artifacts read from earlier events: completions, proofs, assists, coverage,
    signatures, keyed lists) all carry on, as settld reads them from the events before."""
    p = event.get("payload")
    snapshot = _genesis_snapshot(event, p if type(p) is dict else {})
    for key in _KEPT_ACROSS_RESTART:
        snapshot[key] = state.snapshot[key]
    facts = state.facts.copy()
    sig: Any = event.get("signature")
    if sig is not None or event.get("signerKeyId") is not None:
        _track_signature(facts, event)
    return JobState(snapshot, facts)


def validate_and_apply(state: JobState, event: Event) -> JobState:
    """Transition check (`check_event`) and reducer step. Raises before changing anything."""
    return _step(state, event, check_event(state, event))


apply = validate_and_apply
"""`apply(state, event) -> state`: the reducer step (transition-checked; see `validate_and_apply`)."""


def reduce(events: Iterable[Event]) -> JobState:
    """Fold a whole stream; for tests and offline tools."""
    it = iter(events)
    try:
        first = next(it)
    except StopIteration:
        raise ValidationError("a job stream needs at least its JOB_CREATED event") from None
    state = initial_state(first)
    for event in it:
        state = _step(state, event, check_event(state, event))
    return state


# --- persistence ---


def serialize_state(state: JobState) -> dict[str, Any]:
    """JSON-able form of the whole state, for `streams.snapshot_json`."""
    return {"v": STATE_FORMAT_VERSION, "snapshot": state.snapshot, "facts": state.facts}


def deserialize_state(data: Mapping[str, Any]) -> JobState:
    """Inverse of `serialize_state`. The returned state owns its collections (lists and indexes are copied)."""
    if (
        data.get("v") != STATE_FORMAT_VERSION
        or type(data.get("snapshot")) is not dict
        or type(data.get("facts")) is not dict
    ):
        raise ValidationError("stored job state has an unknown format", code="JOB_STATE_INVALID")
    return own_collections(JobState(data["snapshot"], data["facts"]))


_SNAPSHOT_LISTS: Final = (
    "skillLicenses",
    "skillUses",
    "operatorCosts",
    "slaBreaches",
    "slaCredits",
    "riskScores",
    "incidents",
    "evidence",
    "claims",
)
_FACT_COLLECTIONS: Final = (
    "proofStatusByAnchor",
    "proofEventByAnchorAndFacts",
    "signerKeyIds",
    "skillLicenseIndex",
    "incidentIndex",
    "evidenceIndex",
    "claimIndex",
)


def own_collections(state: JobState) -> JobState:
    """A state whose growing collections are fresh shallow copies, so later `apply` calls on it never reach
    the collections of `state`. Cost: one pointer copy per collection item."""
    s = state.snapshot.copy()
    for key in _SNAPSHOT_LISTS:
        s[key] = list(s[key])
    f = state.facts.copy()
    for key in _FACT_COLLECTIONS:
        f[key] = dict(f[key])
    f["incidentZonesByType"] = {k: dict(v) for k, v in f["incidentZonesByType"].items()}
    return JobState(s, f)


def clone_state(state: JobState) -> JobState:
    """Alias of `own_collections`: keep `state` intact while continuing to apply events to the clone."""
    return own_collections(state)


def signer_key_ids(state: JobState) -> list[str]:
    """Sorted distinct signer key ids seen so far (code-unit order; key ids are ASCII)."""
    return sorted(state.facts["signerKeyIds"])


def settlement_proof_ref_for(state: JobState) -> dict[str, Any] | None:
    """A `SETTLED.settlementProofRef` built from the latest PROOF_EVALUATED anchored at the latest
    completion, or None when there is none: a helper for clients that finalize a SETTLED themselves (a server
    draft gets what settld's events route gives it, `server_rules.settlement_proof_ref`)."""
    completion = state.facts["latestCompletion"]
    latest = state.facts["latestProofEvent"]
    if completion is None or latest is None:
        return None
    p = latest["payload"] if type(latest["payload"]) is dict else {}
    if p.get("evaluatedAtChainHash") != completion["chainHash"]:
        return None
    return {
        "proofEventId": latest["id"],
        "proofEventAt": p.get("evaluatedAt") if p.get("evaluatedAt") is not None else latest["at"],
        "proofEventChainHash": latest["chainHash"],
        "proofEventPayloadHash": latest["payloadHash"],
        **_proof_outcome(p),
        "metrics": p.get("metrics"),
    }
