"""settld's evidence event payload validators (core/evidence.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    iso_date,
    non_empty_string,
    non_negative_int,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_non_empty_string,
    positive_int,
    reject,
    utf16_length,
)
from settlekit.jobs.api_payloads.url_safety import url_safety_code

EVIDENCE_KINDS: Final = frozenset({"VIDEO_CLIP", "STILL_IMAGE", "SENSOR_SNAPSHOT"})
REDACTION_STATES: Final = frozenset({"NONE", "REQUESTED", "APPLIED"})
MAX_EVIDENCE_REF_LENGTH: Final = 2048

_CAPTURED_FIELDS: Final = frozenset(
    {
        "jobId",
        "incidentId",
        "evidenceId",
        "evidenceRef",
        "kind",
        "durationSeconds",
        "sizeBytes",
        "contentType",
        "redaction",
    }
)
_REDACTION_FIELDS: Final = frozenset({"state", "notes"})
_VIEWED_FIELDS: Final = frozenset({"jobId", "evidenceId", "evidenceRef", "viewedAt"})
_EXPIRED_FIELDS: Final = frozenset({"jobId", "evidenceId", "evidenceRef", "expiredAt", "retentionDays", "policyHash"})


def _evidence_ref(ref: Any) -> None:
    """A reference to stored evidence, never the evidence itself, and a URL settld deems safe."""
    non_empty_string(ref, "payload.evidenceRef")
    if utf16_length(ref) > MAX_EVIDENCE_REF_LENGTH:
        reject("payload.evidenceRef is too long")
    if ref.startswith("data:"):
        reject("payload.evidenceRef must not be a data: URI")
    if "base64" in ref:
        reject("payload.evidenceRef must not include base64 data")
    code = url_safety_code(ref)
    if code is not None:
        reject(f"payload.evidenceRef is unsafe ({code})")


def validate_evidence_captured(payload: Any) -> None:
    object_with_fields(payload, _CAPTURED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "incidentId"), "payload.incidentId")
    non_empty_string(field(payload, "evidenceId"), "payload.evidenceId")
    _evidence_ref(field(payload, "evidenceRef"))
    one_of(field(payload, "kind"), EVIDENCE_KINDS, "payload.kind")

    for key in ("durationSeconds", "sizeBytes"):
        if field(payload, key) is not MISSING:
            positive_int(field(payload, key), f"payload.{key}")
    optional_non_empty_string(field(payload, "contentType"), "payload.contentType")

    redaction = field(payload, "redaction")
    if redaction is not MISSING:
        object_with_fields(redaction, _REDACTION_FIELDS, "payload.redaction")
        one_of(field(redaction, "state"), REDACTION_STATES, "payload.redaction.state")
        optional_non_empty_string(field(redaction, "notes"), "payload.redaction.notes")


def validate_evidence_viewed(payload: Any) -> None:
    object_with_fields(payload, _VIEWED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "evidenceId"), "payload.evidenceId")
    _evidence_ref(field(payload, "evidenceRef"))
    iso_date(field(payload, "viewedAt"), "payload.viewedAt")


def validate_evidence_expired(payload: Any) -> None:
    object_with_fields(payload, _EXPIRED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "evidenceId"), "payload.evidenceId")
    _evidence_ref(field(payload, "evidenceRef"))
    iso_date(field(payload, "expiredAt"), "payload.expiredAt")
    non_negative_int(field(payload, "retentionDays"), "payload.retentionDays")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")
