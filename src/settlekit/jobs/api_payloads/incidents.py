"""settld's incident event payload validators (core/incidents.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    is_safe_integer,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
)

INCIDENT_TYPES: Final = frozenset(
    {
        "DAMAGE_PROPERTY",
        "PRIVACY_VIOLATION",
        "SAFETY_NEAR_MISS",
        "FAILURE_TO_COMPLETE",
        "BLOCKED_ZONE",
        "ACCESS_FAILURE",
        "THEFT_ALLEGATION",
        "ROBOT_STUCK",
        "UNEXPECTED_HUMAN_CONTACT",
    }
)
REPORTERS: Final = frozenset({"customer", "operator", "ops", "system"})

_REPORTED_FIELDS: Final = frozenset(
    {"jobId", "incidentId", "type", "severity", "summary", "description", "reportedBy", "zoneId"}
)
_DETECTED_FIELDS: Final = frozenset(
    {"jobId", "incidentId", "type", "severity", "summary", "description", "signals", "zoneId"}
)


def _incident_core(payload: dict[str, Any]) -> None:
    """The checks both incident events share, in settld's order."""
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "incidentId"), "payload.incidentId")
    incident_type = field(payload, "type")
    non_empty_string(incident_type, "payload.type")
    if incident_type not in INCIDENT_TYPES:
        reject("payload.type is not a supported incident type")
    severity = field(payload, "severity")
    if not is_safe_integer(severity) or not 1 <= severity <= 5:
        reject("payload.severity must be an integer in range 1..5")
    non_empty_string(field(payload, "summary"), "payload.summary")
    if field(payload, "description") is not MISSING:
        non_empty_string(field(payload, "description"), "payload.description")
    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")


def validate_incident_reported(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _REPORTED_FIELDS, "payload")
    _incident_core(payload)
    reported_by = field(payload, "reportedBy")
    if reported_by is not MISSING:
        non_empty_string(reported_by, "payload.reportedBy")
        if reported_by not in REPORTERS:
            reject("payload.reportedBy is not supported")


def validate_incident_detected(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _DETECTED_FIELDS, "payload")
    _incident_core(payload)
    if field(payload, "signals") is not MISSING:
        plain_object(field(payload, "signals"), "payload.signals")
