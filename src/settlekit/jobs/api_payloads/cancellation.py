"""Payload check for JOB_CANCELLED, as settld's `core/cancellation.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
)

CANCEL_REASONS: Final = frozenset({"CUSTOMER_REQUEST", "OPS", "NO_SUPPLY", "ROBOT_FAILURE", "ACCESS_FAILURE", "SYSTEM"})

_FIELDS: Final = frozenset({"jobId", "cancelledAt", "reason", "requestedBy"})


def validate_job_cancelled(payload: Any) -> None:
    object_with_fields(payload, _FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "cancelledAt"), "payload.cancelledAt")
    one_of(field(payload, "reason"), CANCEL_REASONS, "payload.reason")
    nullable_non_empty_string(field(payload, "requestedBy"), "payload.requestedBy")
