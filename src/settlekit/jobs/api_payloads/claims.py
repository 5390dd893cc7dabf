"""settld's claim event payload validators (core/claims.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    is_nullish,
    non_empty_string,
    non_negative_cents,
    object_with_fields,
    one_of,
    optional_non_empty_string,
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


def validate_claim_opened(payload: Any) -> None:
    object_with_fields(payload, _OPENED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "incidentId"), "payload.incidentId")
    one_of(field(payload, "reasonCode"), CLAIM_REASON_CODES, "payload.reasonCode")
    optional_non_empty_string(field(payload, "description"), "payload.description")


def validate_claim_triaged(payload: Any) -> None:
    object_with_fields(payload, _TRIAGED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    one_of(field(payload, "triageCode"), CLAIM_TRIAGE_CODES, "payload.triageCode")
    optional_non_empty_string(field(payload, "notes"), "payload.notes")


def validate_claim_approved(payload: Any) -> None:
    object_with_fields(payload, _APPROVED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "currency"), "payload.currency")

    amounts = field(payload, "amounts")
    object_with_fields(amounts, _AMOUNTS_FIELDS, "payload.amounts")
    payout = field(amounts, "payoutCents")
    refund = field(amounts, "refundCents")
    payout = 0 if is_nullish(payout) else payout
    refund = 0 if is_nullish(refund) else refund
    non_negative_cents(payout, "payload.amounts.payoutCents")
    non_negative_cents(refund, "payload.amounts.refundCents")
    if payout == 0 and refund == 0:
        reject("payload.amounts must include a non-zero payoutCents and/or refundCents")

    reason_code = field(payload, "reasonCode")
    if reason_code is not MISSING:
        one_of(reason_code, CLAIM_REASON_CODES, "payload.reasonCode")
    optional_non_empty_string(field(payload, "notes"), "payload.notes")


def validate_claim_denied(payload: Any) -> None:
    object_with_fields(payload, _DENIED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    one_of(field(payload, "reasonCode"), CLAIM_REASON_CODES, "payload.reasonCode")
    optional_non_empty_string(field(payload, "notes"), "payload.notes")


def validate_claim_paid(payload: Any) -> None:
    object_with_fields(payload, _PAID_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    positive_cents(field(payload, "amountCents"), "payload.amountCents")
    non_empty_string(field(payload, "currency"), "payload.currency")
    non_empty_string(field(payload, "paymentRef"), "payload.paymentRef")


def validate_job_adjusted(payload: Any) -> None:
    object_with_fields(payload, _ADJUSTED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "claimId"), "payload.claimId")
    non_empty_string(field(payload, "adjustmentId"), "payload.adjustmentId")
    optional_non_empty_string(field(payload, "notes"), "payload.notes")
