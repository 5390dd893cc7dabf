"""Payload checks for the SLA breach and credit events, as settld's `core/sla-events.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    date_parse,
    field,
    is_nullish,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
    safe_int,
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
_WINDOW_FIELDS: Final = frozenset({"startAt", "endAt"})
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
    plain_object(sla, name)
    only_fields(sla, _SLA_SNAPSHOT_FIELDS, name)
    safe_int(field(sla, "slaVersion"), f"{name}.slaVersion")
    if type(field(sla, "mustStartWithinWindow")) is not bool:
        reject(f"{name}.mustStartWithinWindow must be a boolean")
    max_stall_ms = field(sla, "maxStallMs")
    safe_int(max_stall_ms, f"{name}.maxStallMs")
    if max_stall_ms <= 0:
        reject(f"{name}.maxStallMs must be > 0")
    max_execution_ms = field(sla, "maxExecutionMs")
    safe_int(max_execution_ms, f"{name}.maxExecutionMs")
    if max_execution_ms <= 0:
        reject(f"{name}.maxExecutionMs must be > 0")


def _window(window: Any, name: str) -> None:
    plain_object(window, name)
    only_fields(window, _WINDOW_FIELDS, name)
    start_at = field(window, "startAt")
    end_at = field(window, "endAt")
    iso_date(start_at, f"{name}.startAt")
    iso_date(end_at, f"{name}.endAt")
    if date_parse(start_at) >= date_parse(end_at):
        reject(f"{name}.startAt must be before endAt")


def _lateness(breach: dict[str, Any], name: str) -> None:
    lateness_ms = field(breach, "latenessMs")
    safe_int(lateness_ms, f"{name}.latenessMs")
    if lateness_ms < 0:
        reject("latenessMs must be >= 0")  # settld's message carries no path here


def _breach(breach: Any, name: str) -> None:
    plain_object(breach, name)
    only_fields(breach, _BREACH_FIELDS, name)
    breach_type = field(breach, "type")
    non_empty_string(breach_type, f"{name}.type")
    if breach_type not in SLA_BREACH_TYPES:
        reject(f"{name}.type is not supported")

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
    plain_object(payload, "payload")
    only_fields(payload, _BREACH_DETECTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    iso_date(field(payload, "detectedAt"), "payload.detectedAt")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")
    _window(field(payload, "window"), "payload.window")
    _sla_snapshot(field(payload, "policy"), "payload.policy")
    _breaches(field(payload, "breaches"), "payload.breaches")


def _credit_trigger(trigger: Any) -> None:
    plain_object(trigger, "payload.trigger")
    only_fields(trigger, _TRIGGER_FIELDS, "payload.trigger")
    trigger_type = field(trigger, "type")
    non_empty_string(trigger_type, "payload.trigger.type")
    if trigger_type not in SLA_CREDIT_TRIGGER_TYPES:
        reject("payload.trigger.type is not supported")
    non_empty_string(field(trigger, "breachEventId"), "payload.trigger.breachEventId")
    iso_date(field(trigger, "detectedAt"), "payload.trigger.detectedAt")
    _window(field(trigger, "window"), "payload.trigger.window")
    _sla_snapshot(field(trigger, "policy"), "payload.trigger.policy")
    _breaches(field(trigger, "breaches"), "payload.trigger.breaches")


def validate_sla_credit_issued(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _CREDIT_ISSUED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "creditId"), "payload.creditId")
    iso_date(field(payload, "issuedAt"), "payload.issuedAt")
    amount_cents = field(payload, "amountCents")
    safe_int(amount_cents, "payload.amountCents")
    if amount_cents <= 0:
        reject("payload.amountCents must be positive")
    currency = field(payload, "currency")
    non_empty_string(currency, "payload.currency")
    if currency != "USD":
        reject("payload.currency is not supported")
    reason = field(payload, "reason")
    non_empty_string(reason, "payload.reason")
    if reason not in SLA_CREDIT_REASONS:
        reject("payload.reason is not supported")
    nullable_non_empty_string(field(payload, "settledEventId"), "payload.settledEventId")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")
    trigger = field(payload, "trigger")
    if not is_nullish(trigger):
        _credit_trigger(trigger)
