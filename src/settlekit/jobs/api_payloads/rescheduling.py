"""Payload check for JOB_RESCHEDULED, as settld's `core/rescheduling.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    date_parse,
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    only_fields,
    plain_object,
    reject,
)

RESCHEDULE_REASONS: Final = frozenset({"CUSTOMER_REQUEST", "NO_SUPPLY", "ROBOT_FAILURE", "OPS"})

_FIELDS: Final = frozenset({"jobId", "oldWindow", "newWindow", "reason", "requestedBy", "requiresRequote", "quoteRef"})
_WINDOW_FIELDS: Final = frozenset({"startAt", "endAt"})


def _window(window: Any, name: str) -> None:
    plain_object(window, name)
    only_fields(window, _WINDOW_FIELDS, name)
    start_at = field(window, "startAt")
    end_at = field(window, "endAt")
    iso_date(start_at, f"{name}.startAt")
    iso_date(end_at, f"{name}.endAt")
    if date_parse(start_at) >= date_parse(end_at):
        reject(f"{name}.startAt must be before endAt")


def validate_job_rescheduled(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    _window(field(payload, "oldWindow"), "payload.oldWindow")
    _window(field(payload, "newWindow"), "payload.newWindow")
    reason = field(payload, "reason")
    non_empty_string(reason, "payload.reason")
    if reason not in RESCHEDULE_REASONS:
        reject("payload.reason is not supported")
    requested_by = field(payload, "requestedBy")
    if not is_nullish(requested_by):
        non_empty_string(requested_by, "payload.requestedBy")
    requires_requote = field(payload, "requiresRequote")
    if requires_requote is not MISSING and type(requires_requote) is not bool:
        reject("payload.requiresRequote must be a boolean")
    quote_ref = field(payload, "quoteRef")
    if not is_nullish(quote_ref):
        non_empty_string(quote_ref, "payload.quoteRef")
