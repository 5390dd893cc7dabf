"""Payload checks for the dispatch events, as settld's `core/dispatch-events.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    date_parse,
    field,
    is_finite_number,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
)

DISPATCH_FAILURE_REASONS: Final = frozenset({"NO_SUPPLY", "NO_ROBOTS", "NO_OPERATORS", "CONFLICT", "INVALID_STATE"})

_REQUESTED_FIELDS: Final = frozenset({"jobId", "requestedAt", "trigger"})
_EVALUATED_FIELDS: Final = frozenset(
    {"jobId", "evaluatedAt", "window", "zoneId", "requiresOperatorCoverage", "candidates", "selected"}
)
_WINDOW_FIELDS: Final = frozenset({"startAt", "endAt"})
_CANDIDATE_FIELDS: Final = frozenset({"robotId", "score", "reasons", "rejected"})
_SELECTED_FIELDS: Final = frozenset({"robotId", "operatorId"})
_CONFIRMED_FIELDS: Final = frozenset({"jobId", "confirmedAt"})
_FAILED_FIELDS: Final = frozenset({"jobId", "failedAt", "reason", "details"})


def validate_dispatch_requested(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _REQUESTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "requestedAt"), "payload.requestedAt")
    nullable_non_empty_string(field(payload, "trigger"), "payload.trigger")


def _window(window: Any, name: str) -> None:
    plain_object(window, name)
    only_fields(window, _WINDOW_FIELDS, name)
    start_at = field(window, "startAt")
    end_at = field(window, "endAt")
    iso_date(start_at, f"{name}.startAt")
    iso_date(end_at, f"{name}.endAt")
    if date_parse(start_at) >= date_parse(end_at):
        reject(f"{name}.startAt must be before endAt")


def _candidate(item: Any, name: str) -> None:
    plain_object(item, name)
    only_fields(item, _CANDIDATE_FIELDS, name)
    non_empty_string(field(item, "robotId"), f"{name}.robotId")
    if not is_finite_number(field(item, "score")):
        reject(f"{name}.score must be a finite number")
    rejected = field(item, "rejected")
    if rejected is not MISSING and type(rejected) is not bool:
        reject(f"{name}.rejected must be a boolean")
    reasons = field(item, "reasons")
    if not is_nullish(reasons):
        if type(reasons) is not list:
            reject(f"{name}.reasons must be an array")
        for reason in reasons:
            non_empty_string(reason, f"{name}.reasons[]")


def validate_dispatch_evaluated(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _EVALUATED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "evaluatedAt"), "payload.evaluatedAt")
    _window(field(payload, "window"), "payload.window")

    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")
    requires_coverage = field(payload, "requiresOperatorCoverage")
    if requires_coverage is not MISSING and type(requires_coverage) is not bool:
        reject("payload.requiresOperatorCoverage must be a boolean")

    candidates = field(payload, "candidates")
    if not is_nullish(candidates):
        if type(candidates) is not list:
            reject("payload.candidates must be an array")
        for index, item in enumerate(candidates):
            _candidate(item, f"payload.candidates[{index}]")

    selected = field(payload, "selected")
    if not is_nullish(selected):
        plain_object(selected, "payload.selected")
        only_fields(selected, _SELECTED_FIELDS, "payload.selected")
        non_empty_string(field(selected, "robotId"), "payload.selected.robotId")
        nullable_non_empty_string(field(selected, "operatorId"), "payload.selected.operatorId")


def validate_dispatch_confirmed(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _CONFIRMED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "confirmedAt"), "payload.confirmedAt")


def validate_dispatch_failed(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _FAILED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "failedAt"), "payload.failedAt")
    reason = field(payload, "reason")
    non_empty_string(reason, "payload.reason")
    if reason not in DISPATCH_FAILURE_REASONS:
        reject("payload.reason is not supported")
    details = field(payload, "details")
    if not is_nullish(details):
        plain_object(details, "payload.details")
