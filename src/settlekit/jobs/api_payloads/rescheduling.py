"""Payload check for JOB_RESCHEDULED, as settld's `core/rescheduling.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_boolean,
    time_window,
)

RESCHEDULE_REASONS: Final = frozenset({"CUSTOMER_REQUEST", "NO_SUPPLY", "ROBOT_FAILURE", "OPS"})

_FIELDS: Final = frozenset({"jobId", "oldWindow", "newWindow", "reason", "requestedBy", "requiresRequote", "quoteRef"})


def validate_job_rescheduled(payload: Any) -> None:
    object_with_fields(payload, _FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    time_window(field(payload, "oldWindow"), "payload.oldWindow")
    time_window(field(payload, "newWindow"), "payload.newWindow")
    one_of(field(payload, "reason"), RESCHEDULE_REASONS, "payload.reason")
    nullable_non_empty_string(field(payload, "requestedBy"), "payload.requestedBy")
    optional_boolean(field(payload, "requiresRequote"), "payload.requiresRequote")
    nullable_non_empty_string(field(payload, "quoteRef"), "payload.quoteRef")
