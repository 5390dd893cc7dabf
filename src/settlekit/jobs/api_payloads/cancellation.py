"""Payload check for JOB_CANCELLED, as settld's `core/cancellation.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    only_fields,
    plain_object,
    reject,
)

CANCEL_REASONS: Final = frozenset({"CUSTOMER_REQUEST", "OPS", "NO_SUPPLY", "ROBOT_FAILURE", "ACCESS_FAILURE", "SYSTEM"})

_FIELDS: Final = frozenset({"jobId", "cancelledAt", "reason", "requestedBy"})


def validate_job_cancelled(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "cancelledAt"), "payload.cancelledAt")
    reason = field(payload, "reason")
    non_empty_string(reason, "payload.reason")
    if reason not in CANCEL_REASONS:
        reject("payload.reason is not supported")
    requested_by = field(payload, "requestedBy")
    if not is_nullish(requested_by):
        non_empty_string(requested_by, "payload.requestedBy")
