"""settld's incident event payload validators (core/incidents.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    int_in_range,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_non_empty_string,
    plain_object,
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
    one_of(field(payload, "type"), INCIDENT_TYPES, "payload.type", "is not a supported incident type")
    int_in_range(field(payload, "severity"), "payload.severity", 1, 5)
    non_empty_string(field(payload, "summary"), "payload.summary")
    optional_non_empty_string(field(payload, "description"), "payload.description")
    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")


def validate_incident_reported(payload: Any) -> None:
    object_with_fields(payload, _REPORTED_FIELDS, "payload")
    _incident_core(payload)
    reported_by = field(payload, "reportedBy")
    if reported_by is not MISSING:
        one_of(reported_by, REPORTERS, "payload.reportedBy")


def validate_incident_detected(payload: Any) -> None:
    object_with_fields(payload, _DETECTED_FIELDS, "payload")
    _incident_core(payload)
    if field(payload, "signals") is not MISSING:
        plain_object(field(payload, "signals"), "payload.signals")
