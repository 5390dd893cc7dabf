"""Payload checks for the remote-assist events, as settld's `core/assist.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
)

ASSIST_PRIORITIES: Final = frozenset({"LOW", "NORMAL", "HIGH", "CRITICAL"})

_REQUESTED_FIELDS: Final = frozenset({"jobId", "robotId", "requestedAt", "reason", "priority"})
_QUEUED_FIELDS: Final = frozenset({"jobId", "queueId", "queuedAt", "reason", "priority"})
_ASSIGNED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "assignedAt"})
_ACCEPTED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "acceptedAt"})
_DECLINED_FIELDS: Final = frozenset({"jobId", "queueId", "operatorId", "declinedAt", "reason"})
_TIMEOUT_FIELDS: Final = frozenset({"jobId", "queueId", "timedOutAt", "reason"})


def _object_with(payload: Any, allowed: frozenset[str]) -> None:
    plain_object(payload, "payload")
    only_fields(payload, allowed, "payload")


def _required_strings(payload: dict[str, Any], *keys: str) -> None:
    for key in keys:
        non_empty_string(field(payload, key), f"payload.{key}")


def _optional_reason_and_priority(payload: dict[str, Any]) -> None:
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")
    priority = field(payload, "priority")
    if not is_nullish(priority):
        non_empty_string(priority, "payload.priority")
        if priority not in ASSIST_PRIORITIES:
            reject("payload.priority is not supported")


def validate_assist_requested(payload: Any) -> None:
    _object_with(payload, _REQUESTED_FIELDS)
    _required_strings(payload, "jobId", "robotId")
    iso_date(field(payload, "requestedAt"), "payload.requestedAt")
    _optional_reason_and_priority(payload)


def validate_assist_queued(payload: Any) -> None:
    _object_with(payload, _QUEUED_FIELDS)
    _required_strings(payload, "jobId", "queueId")
    iso_date(field(payload, "queuedAt"), "payload.queuedAt")
    _optional_reason_and_priority(payload)


def validate_assist_assigned(payload: Any) -> None:
    _object_with(payload, _ASSIGNED_FIELDS)
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "assignedAt"), "payload.assignedAt")


def validate_assist_accepted(payload: Any) -> None:
    _object_with(payload, _ACCEPTED_FIELDS)
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "acceptedAt"), "payload.acceptedAt")


def validate_assist_declined(payload: Any) -> None:
    _object_with(payload, _DECLINED_FIELDS)
    _required_strings(payload, "jobId", "queueId", "operatorId")
    iso_date(field(payload, "declinedAt"), "payload.declinedAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")


def validate_assist_timeout(payload: Any) -> None:
    _object_with(payload, _TIMEOUT_FIELDS)
    _required_strings(payload, "jobId", "queueId")
    iso_date(field(payload, "timedOutAt"), "payload.timedOutAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")
