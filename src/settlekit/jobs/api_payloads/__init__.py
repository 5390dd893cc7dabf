"""settld 0.1.0's API payload validators for job events, on settlekit's live append path.

settld's HTTP API checks every job event it appends with a validator from its core modules (one per type:
known fields only, types, ranges, enumerations, safe URLs) before its domain rules; its core reducer, and so
every offline tool, does not. settlekit's live path does the same: `check_api_payload` refuses exactly what
settld's route refuses, with settld's message, and offline paths never call it. One module per settld core
module; `_js` holds the JavaScript value semantics they share. `tests/unit/test_api_payloads.py` checks them
against the reference's own validators run on the vendored cases in `tests/vectors/reference_runs/`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.jobs.api_payloads import (
    access,
    assist,
    booking,
    cancellation,
    claims,
    dispatch_events,
    evidence,
    incidents,
    liveness,
    operator_cost,
    operator_coverage,
    proof_events,
    rescheduling,
    risk,
    skills,
    sla_events,
    zone_coverage,
)
from settlekit.jobs.api_payloads._js import MISSING, Rejected

Check = Callable[[Any], None]


class ApiPayloadRejected(ValidationError):
    """A payload settld's API validators refuse (400 SCHEMA_INVALID, message settld's text)."""

    def __init__(self, event_type: str, message: str):
        super().__init__(message, eventType=event_type, rule="settld-api-validator")


def _access_result(event_type: str) -> Check:
    return lambda payload: access.validate_access_result(payload, event_type)


# type -> (validator, whether the route passes `payload ?? {}` rather than the payload as sent)
ROUTES: Final[Mapping[str, tuple[Check, bool]]] = {
    "ACCESS_PLAN_ISSUED": (access.validate_access_plan_issued, False),
    "ACCESS_GRANTED": (_access_result("ACCESS_GRANTED"), False),
    "ACCESS_DENIED": (_access_result("ACCESS_DENIED"), False),
    "ACCESS_REVOKED": (access.validate_access_revoked, False),
    "ACCESS_EXPIRED": (access.validate_access_revoked, False),
    "BOOKED": (booking.validate_booked, True),
    "ZONE_COVERAGE_REPORTED": (zone_coverage.validate_zone_coverage_reported, True),
    "PROOF_EVALUATED": (proof_events.validate_proof_evaluated, True),
    "RISK_SCORED": (risk.validate_risk_scored, True),
    "DISPATCH_REQUESTED": (dispatch_events.validate_dispatch_requested, True),
    "DISPATCH_EVALUATED": (dispatch_events.validate_dispatch_evaluated, True),
    "DISPATCH_CONFIRMED": (dispatch_events.validate_dispatch_confirmed, True),
    "DISPATCH_FAILED": (dispatch_events.validate_dispatch_failed, True),
    "RESERVED": (booking.validate_reserved, True),
    "OPERATOR_COVERAGE_RESERVED": (operator_coverage.validate_operator_coverage_reserved, True),
    "OPERATOR_COVERAGE_RELEASED": (operator_coverage.validate_operator_coverage_released, True),
    "SKILL_LICENSED": (skills.validate_skill_licensed, False),
    "SKILL_USED": (skills.validate_skill_used, False),
    "JOB_RESCHEDULED": (rescheduling.validate_job_rescheduled, True),
    "JOB_CANCELLED": (cancellation.validate_job_cancelled, True),
    "INCIDENT_REPORTED": (incidents.validate_incident_reported, False),
    "INCIDENT_DETECTED": (incidents.validate_incident_detected, False),
    "EVIDENCE_CAPTURED": (evidence.validate_evidence_captured, False),
    "EVIDENCE_VIEWED": (evidence.validate_evidence_viewed, False),
    "EVIDENCE_EXPIRED": (evidence.validate_evidence_expired, False),
    "CLAIM_OPENED": (claims.validate_claim_opened, False),
    "CLAIM_TRIAGED": (claims.validate_claim_triaged, False),
    "CLAIM_APPROVED": (claims.validate_claim_approved, False),
    "CLAIM_DENIED": (claims.validate_claim_denied, False),
    "JOB_ADJUSTED": (claims.validate_job_adjusted, False),
    "CLAIM_PAID": (claims.validate_claim_paid, False),
    "JOB_EXECUTION_STARTED": (liveness.validate_job_execution_started, True),
    "JOB_HEARTBEAT": (liveness.validate_job_heartbeat, True),
    "JOB_EXECUTION_STALLED": (liveness.validate_job_execution_stalled, True),
    "JOB_EXECUTION_RESUMED": (liveness.validate_job_execution_resumed, True),
    "JOB_EXECUTION_ABORTED": (liveness.validate_job_execution_aborted, True),
    "JOB_EXECUTION_COMPLETED": (liveness.validate_job_execution_completed, True),
    "ASSIST_REQUESTED": (assist.validate_assist_requested, True),
    "ASSIST_QUEUED": (assist.validate_assist_queued, True),
    "ASSIST_ASSIGNED": (assist.validate_assist_assigned, True),
    "ASSIST_ACCEPTED": (assist.validate_assist_accepted, True),
    "ASSIST_DECLINED": (assist.validate_assist_declined, True),
    "ASSIST_TIMEOUT": (assist.validate_assist_timeout, True),
    "OPERATOR_COST_RECORDED": (operator_cost.validate_operator_cost_recorded, True),
    "SLA_BREACH_DETECTED": (sla_events.validate_sla_breach_detected, True),
    "SLA_CREDIT_ISSUED": (sla_events.validate_sla_credit_issued, True),
}


def api_payload_error(event_type: str, payload: Any = MISSING) -> str | None:
    """settld's message for a payload its API refuses for `event_type`, or None when it accepts it (or has no
    validator for the type). `payload` is the event's payload as sent (MISSING when there is none)."""
    route = ROUTES.get(event_type)
    if route is None:
        return None
    check, null_as_empty = route
    value = None if payload is MISSING else payload  # the route reads `event.payload ?? null`
    if null_as_empty and value is None:
        value = {}
    try:
        check(value)
    except Rejected as exc:
        return exc.message
    return None


def check_api_payload(event: Mapping[str, Any]) -> None:
    """Raise ApiPayloadRejected when settld's API would refuse the event's payload."""
    event_type = event.get("type")
    if type(event_type) is not str:
        return
    message = api_payload_error(event_type, event.get("payload", MISSING))
    if message is not None:
        raise ApiPayloadRejected(event_type, message)
