"""settld's operator cost event payload validator (core/operator-cost.js)."""

from __future__ import annotations

import math
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
    safe_int,
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
    plain_object(payload, "payload")
    only_fields(payload, _RECORDED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")
    nullable_non_empty_string(field(payload, "operatorId"), "payload.operatorId")

    for key in ("assistSeconds", "rateCentsPerMinute", "costCents"):
        value = field(payload, key)
        safe_int(value, f"payload.{key}")
        if value < 0:
            reject(f"payload.{key} must be >= 0")

    currency = field(payload, "currency")
    non_empty_string(currency, "payload.currency")
    if currency != "USD":
        reject("payload.currency is not supported")
    basis = field(payload, "basis")
    non_empty_string(basis, "payload.basis")
    if basis not in COST_BASES:
        reject("payload.basis is not supported")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")

    expected = operator_cost_cents(field(payload, "assistSeconds"), field(payload, "rateCentsPerMinute"))
    if field(payload, "costCents") != expected:
        reject("payload.costCents must match deterministic operator cost formula")
