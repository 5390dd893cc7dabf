"""Payload checks for the SLA breach and credit events, as settld's `core/sla-events.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    boolean,
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    reject,
    safe_int,
    safe_int_above_zero,
    time_window,
)

SLA_BREACH_TYPES: Final = frozenset({"START_LATE", "COMPLETE_LATE", "EXCESS_STALL", "ABORTED"})
SLA_CREDIT_REASONS: Final = frozenset({"SLA_BREACH"})
SLA_CREDIT_TRIGGER_TYPES: Final = frozenset({"SLA_BREACH"})

_BREACH_DETECTED_FIELDS: Final = frozenset(
    {"jobId", "detectedAt", "settledEventId", "policyHash", "window", "policy", "breaches"}
)
_CREDIT_ISSUED_FIELDS: Final = frozenset(
    {"jobId", "creditId", "issuedAt", "amountCents", "currency", "reason", "settledEventId", "policyHash", "trigger"}
)
_TRIGGER_FIELDS: Final = frozenset({"type", "breachEventId", "detectedAt", "window", "policy", "breaches"})
_SLA_SNAPSHOT_FIELDS: Final = frozenset({"slaVersion", "mustStartWithinWindow", "maxStallMs", "maxExecutionMs"})
_BREACH_FIELDS: Final = frozenset(
    {
        "type",
        "startedAt",
        "completedAt",
        "abortedAt",
        "windowStartAt",
        "windowEndAt",
        "latenessMs",
        "totalStallMs",
        "maxStallMs",
    }
)


def _sla_snapshot(sla: Any, name: str) -> None:
    object_with_fields(sla, _SLA_SNAPSHOT_FIELDS, name)
    safe_int(field(sla, "slaVersion"), f"{name}.slaVersion")
    boolean(field(sla, "mustStartWithinWindow"), f"{name}.mustStartWithinWindow")
    safe_int_above_zero(field(sla, "maxStallMs"), f"{name}.maxStallMs")
    safe_int_above_zero(field(sla, "maxExecutionMs"), f"{name}.maxExecutionMs")


def _lateness(breach: dict[str, Any], name: str) -> None:
    lateness_ms = field(breach, "latenessMs")
    safe_int(lateness_ms, f"{name}.latenessMs")
    if lateness_ms < 0:
        reject("latenessMs must be >= 0")  # settld's message carries no path here


def _breach(breach: Any, name: str) -> None:
    object_with_fields(breach, _BREACH_FIELDS, name)
    breach_type = field(breach, "type")
    one_of(breach_type, SLA_BREACH_TYPES, f"{name}.type")

    if breach_type == "START_LATE":
        iso_date(field(breach, "startedAt"), f"{name}.startedAt")
        iso_date(field(breach, "windowStartAt"), f"{name}.windowStartAt")
        _lateness(breach, name)
    elif breach_type == "COMPLETE_LATE":
        iso_date(field(breach, "completedAt"), f"{name}.completedAt")
        iso_date(field(breach, "windowEndAt"), f"{name}.windowEndAt")
        _lateness(breach, name)
    elif breach_type == "EXCESS_STALL":
        total_stall_ms = field(breach, "totalStallMs")
        max_stall_ms = field(breach, "maxStallMs")
        safe_int(total_stall_ms, f"{name}.totalStallMs")
        safe_int(max_stall_ms, f"{name}.maxStallMs")
        if total_stall_ms < 0:
            reject("totalStallMs must be >= 0")
        if max_stall_ms <= 0:
            reject("maxStallMs must be > 0")
    else:
        iso_date(field(breach, "abortedAt"), f"{name}.abortedAt")


def _breaches(breaches: Any, name: str) -> None:
    if type(breaches) is not list or not breaches:
        reject(f"{name} must be a non-empty array")
    for index, breach in enumerate(breaches):
        _breach(breach, f"{name}[{index}]")


def validate_sla_breach_detected(payload: Any) -> None:
    object_with_fields(payload, _BREACH_DETECTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "detectedAt"), "payload.detectedAt")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")
    time_window(field(payload, "window"), "payload.window")
    _sla_snapshot(field(payload, "policy"), "payload.policy")
    _breaches(field(payload, "breaches"), "payload.breaches")


def _credit_trigger(trigger: Any) -> None:
    object_with_fields(trigger, _TRIGGER_FIELDS, "payload.trigger")
    one_of(field(trigger, "type"), SLA_CREDIT_TRIGGER_TYPES, "payload.trigger.type")
    non_empty_string(field(trigger, "breachEventId"), "payload.trigger.breachEventId")
    iso_date(field(trigger, "detectedAt"), "payload.trigger.detectedAt")
    time_window(field(trigger, "window"), "payload.trigger.window")
    _sla_snapshot(field(trigger, "policy"), "payload.trigger.policy")
    _breaches(field(trigger, "breaches"), "payload.trigger.breaches")


def validate_sla_credit_issued(payload: Any) -> None:
    object_with_fields(payload, _CREDIT_ISSUED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "creditId"), "payload.creditId")
    iso_date(field(payload, "issuedAt"), "payload.issuedAt")
    amount_cents = field(payload, "amountCents")
    safe_int(amount_cents, "payload.amountCents")
    if amount_cents <= 0:
        reject("payload.amountCents must be positive")
    one_of(field(payload, "currency"), {"USD"}, "payload.currency")
    one_of(field(payload, "reason"), SLA_CREDIT_REASONS, "payload.reason")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")
    trigger = field(payload, "trigger")
    if not is_nullish(trigger):
        _credit_trigger(trigger)
