"""Payload checks for the dispatch events, as settld's `core/dispatch-events.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_finite_number,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_boolean,
    plain_object,
    reject,
    string_array,
    time_window,
)

DISPATCH_FAILURE_REASONS: Final = frozenset({"NO_SUPPLY", "NO_ROBOTS", "NO_OPERATORS", "CONFLICT", "INVALID_STATE"})

_REQUESTED_FIELDS: Final = frozenset({"jobId", "requestedAt", "trigger"})
_EVALUATED_FIELDS: Final = frozenset(
    {"jobId", "evaluatedAt", "window", "zoneId", "requiresOperatorCoverage", "candidates", "selected"}
)
_CANDIDATE_FIELDS: Final = frozenset({"robotId", "score", "reasons", "rejected"})
_SELECTED_FIELDS: Final = frozenset({"robotId", "operatorId"})
_CONFIRMED_FIELDS: Final = frozenset({"jobId", "confirmedAt"})
_FAILED_FIELDS: Final = frozenset({"jobId", "failedAt", "reason", "details"})


def validate_dispatch_requested(payload: Any) -> None:
    object_with_fields(payload, _REQUESTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "requestedAt"), "payload.requestedAt")
    nullable_non_empty_string(field(payload, "trigger"), "payload.trigger")


def _candidate(item: Any, name: str) -> None:
    object_with_fields(item, _CANDIDATE_FIELDS, name)
    non_empty_string(field(item, "robotId"), f"{name}.robotId")
    if not is_finite_number(field(item, "score")):
        reject(f"{name}.score must be a finite number")
    optional_boolean(field(item, "rejected"), f"{name}.rejected")
    reasons = field(item, "reasons")
    if not is_nullish(reasons):
        string_array(reasons, f"{name}.reasons")


def validate_dispatch_evaluated(payload: Any) -> None:
    object_with_fields(payload, _EVALUATED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "evaluatedAt"), "payload.evaluatedAt")
    time_window(field(payload, "window"), "payload.window")

    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")
    optional_boolean(field(payload, "requiresOperatorCoverage"), "payload.requiresOperatorCoverage")

    candidates = field(payload, "candidates")
    if not is_nullish(candidates):
        if type(candidates) is not list:
            reject("payload.candidates must be an array")
        for index, item in enumerate(candidates):
            _candidate(item, f"payload.candidates[{index}]")

    selected = field(payload, "selected")
    if not is_nullish(selected):
        object_with_fields(selected, _SELECTED_FIELDS, "payload.selected")
        non_empty_string(field(selected, "robotId"), "payload.selected.robotId")
        nullable_non_empty_string(field(selected, "operatorId"), "payload.selected.operatorId")


def validate_dispatch_confirmed(payload: Any) -> None:
    object_with_fields(payload, _CONFIRMED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "confirmedAt"), "payload.confirmedAt")


def validate_dispatch_failed(payload: Any) -> None:
    object_with_fields(payload, _FAILED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "failedAt"), "payload.failedAt")
    one_of(field(payload, "reason"), DISPATCH_FAILURE_REASONS, "payload.reason")
    details = field(payload, "details")
    if not is_nullish(details):
        plain_object(details, "payload.details")
