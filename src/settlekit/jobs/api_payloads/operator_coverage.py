"""settld's operator coverage event payload validators (core/operator-coverage.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    start_before_end,
)

_RESERVED_FIELDS: Final = frozenset({"jobId", "operatorId", "startAt", "endAt", "reservationId", "zoneId"})
_RELEASED_FIELDS: Final = frozenset({"jobId", "reservationId", "releasedAt", "reason"})


def validate_operator_coverage_reserved(payload: Any) -> None:
    object_with_fields(payload, _RESERVED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "operatorId"), "payload.operatorId")
    start_before_end(field(payload, "startAt"), field(payload, "endAt"), "payload.startAt", "payload.endAt")
    non_empty_string(field(payload, "reservationId"), "payload.reservationId")
    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")


def validate_operator_coverage_released(payload: Any) -> None:
    object_with_fields(payload, _RELEASED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "reservationId"), "payload.reservationId")
    iso_date(field(payload, "releasedAt"), "payload.releasedAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")
