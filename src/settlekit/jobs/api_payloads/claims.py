"""settld's claim event payload validators (core/claims.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    is_nullish,
    non_empty_string,
    non_negative_cents,
    only_fields,
    plain_object,
    positive_cents,
    reject,
)

CLAIM_REASON_CODES: Final = frozenset(
    {
        "DAMAGE_PROPERTY",
        "PRIVACY_VIOLATION",
        "SAFETY_NEAR_MISS",
        "FAILURE_TO_COMPLETE",
        "ACCESS_FAILURE",
        "THEFT_ALLEGATION",
        "ROBOT_STUCK",
        "UNEXPECTED_HUMAN_CONTACT",
        "OTHER",
    }
)
CLAIM_TRIAGE_CODES: Final = frozenset({"AUTO", "REVIEW", "ESCALATE"})

_OPENED_FIELDS: Final = frozenset({"jobId", "claimId", "incidentId", "reasonCode", "description"})
_TRIAGED_FIELDS: Final = frozenset({"jobId", "claimId", "triageCode", "notes"})
_APPROVED_FIELDS: Final = frozenset({"jobId", "claimId", "amounts", "currency", "reasonCode", "notes"})
_AMOUNTS_FIELDS: Final = frozenset({"payoutCents", "refundCents"})
_DENIED_FIELDS: Final = frozenset({"jobId", "claimId", "reasonCode", "notes"})
_PAID_FIELDS: Final = frozenset({"jobId", "claimId", "amountCents", "currency", "paymentRef"})
_ADJUSTED_FIELDS: Final = frozenset({"jobId", "claimId", "adjustmentId", "notes"})


def _reason_code(value: Any) -> None:
    non_empty_string(value, "payload.reasonCode")
    if value not in CLAIM_REASON_CODES:
        reject("payload.reasonCode is not supported")


def _optional_text(payload: dict[str, Any], key: str) -> None:
    value = field(payload, key)
    if value is not MISSING:
        non_empty_string(value, f"payload.{key}")


def validate_claim_opened(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _OPENED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "incidentId"), "payload.incidentId")
    _reason_code(field(payload, "reasonCode"))
    _optional_text(payload, "description")


def validate_claim_triaged(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _TRIAGED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    triage_code = field(payload, "triageCode")
    non_empty_string(triage_code, "payload.triageCode")
    if triage_code not in CLAIM_TRIAGE_CODES:
        reject("payload.triageCode is not supported")
    _optional_text(payload, "notes")


def validate_claim_approved(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _APPROVED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "currency"), "payload.currency")

    amounts = field(payload, "amounts")
    plain_object(amounts, "payload.amounts")
    only_fields(amounts, _AMOUNTS_FIELDS, "payload.amounts")
    payout = field(amounts, "payoutCents")
    refund = field(amounts, "refundCents")
    payout = 0 if is_nullish(payout) else payout
    refund = 0 if is_nullish(refund) else refund
    non_negative_cents(payout, "payload.amounts.payoutCents")
    non_negative_cents(refund, "payload.amounts.refundCents")
    if payout == 0 and refund == 0:
        reject("payload.amounts must include a non-zero payoutCents and/or refundCents")

    if field(payload, "reasonCode") is not MISSING:
        _reason_code(field(payload, "reasonCode"))
    _optional_text(payload, "notes")


def validate_claim_denied(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _DENIED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    _reason_code(field(payload, "reasonCode"))
    _optional_text(payload, "notes")


def validate_claim_paid(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _PAID_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    positive_cents(field(payload, "amountCents"), "payload.amountCents")
    non_empty_string(field(payload, "currency"), "payload.currency")
    non_empty_string(field(payload, "paymentRef"), "payload.paymentRef")


def validate_job_adjusted(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _ADJUSTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "adjustmentId"), "payload.adjustmentId")
    _optional_text(payload, "notes")
