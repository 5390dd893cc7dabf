"""settld's operator cost event payload validator (core/operator-cost.js)."""

from __future__ import annotations

import math
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    reject,
    safe_int_at_least_zero,
)

COST_BASES: Final = frozenset({"SHIFT_RATE", "CONTRACT_RATE", "BLENDED"})

_RECORDED_FIELDS: Final = frozenset(
    {
        "jobId",
        "zoneId",
        "operatorId",
        "assistSeconds",
        "rateCentsPerMinute",
        "costCents",
        "currency",
        "basis",
        "settledEventId",
    }
)


def operator_cost_cents(assist_seconds: int | float, rate_cents_per_minute: int | float) -> float:
    """Whole started minutes times the rate, in JavaScript's double arithmetic."""
    billable_minutes = math.ceil(assist_seconds / 60)
    return float(billable_minutes) * float(rate_cents_per_minute)


def validate_operator_cost_recorded(payload: Any) -> None:
    object_with_fields(payload, _RECORDED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")
    nullable_non_empty_string(field(payload, "operatorId"), "payload.operatorId")

    for key in ("assistSeconds", "rateCentsPerMinute", "costCents"):
        safe_int_at_least_zero(field(payload, key), f"payload.{key}")

    one_of(field(payload, "currency"), {"USD"}, "payload.currency")
    one_of(field(payload, "basis"), COST_BASES, "payload.basis")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")

    expected = operator_cost_cents(field(payload, "assistSeconds"), field(payload, "rateCentsPerMinute"))
    if field(payload, "costCents") != expected:
        reject("payload.costCents must match deterministic operator cost formula")
