"""Payload checks for the remote-assist events, as settld's `core/assist.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
)

ASSIST_PRIORITIES: Final = frozenset({"LOW", "NORMAL", "HIGH", "CRITICAL"})

_REQUESTED_FIELDS: Final = frozenset({"jobId", "robotId", "requestedAt", "reason", "priority"})
_QUEUED_FIELDS: Final = frozenset({"jobId", "queueId", "queuedAt", "reason", "priority"})
_ASSIGNED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "assignedAt"})
_ACCEPTED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "acceptedAt"})
_DECLINED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "declinedAt", "reason"})
_TIMEOUT_FIELDS: Final = frozenset({"jobId", "queueId", "timedOutAt", "reason"})


def _required_strings(payload: dict[str, Any], *keys: str) -> None:
    for key in keys:
        non_empty_string(field(payload, key), f"payload.{key}")


def _optional_reason_and_priority(payload: dict[str, Any]) -> None:
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")
    priority = field(payload, "priority")
    if not is_nullish(priority):
        one_of(priority, ASSIST_PRIORITIES, "payload.priority")


def validate_assist_requested(payload: Any) -> None:
    object_with_fields(payload, _REQUESTED_FIELDS, "payload")
    _required_strings(payload, "jobId", "robotId")
    iso_date(field(payload, "requestedAt"), "payload.requestedAt")
    _optional_reason_and_priority(payload)


def validate_assist_queued(payload: Any) -> None:
    object_with_fields(payload, _QUEUED_FIELDS, "payload")
    _required_strings(payload, "jobId", "queueId")
    iso_date(field(payload, "queuedAt"), "payload.queuedAt")
    _optional_reason_and_priority(payload)


def validate_assist_assigned(payload: Any) -> None:
    object_with_fields(payload, _ASSIGNED_FIELDS, "payload")
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "assignedAt"), "payload.assignedAt")


def validate_assist_accepted(payload: Any) -> None:
    object_with_fields(payload, _ACCEPTED_FIELDS, "payload")
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "acceptedAt"), "payload.acceptedAt")


def validate_assist_declined(payload: Any) -> None:
    object_with_fields(payload, _DECLINED_FIELDS, "payload")
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "declinedAt"), "payload.declinedAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")


def validate_assist_timeout(payload: Any) -> None:
    object_with_fields(payload, _TIMEOUT_FIELDS, "payload")
    _required_strings(payload, "jobId", "queueId")
    iso_date(field(payload, "timedOutAt"), "payload.timedOutAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")
