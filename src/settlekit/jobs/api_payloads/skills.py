"""settld's skill license event payload validators (core/skills.js)."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    field,
    non_empty_string,
    object_with_fields,
    one_of,
    optional_non_empty_string,
    positive_cents,
)

_LICENSED_FIELDS: Final = frozenset({"jobId", "skill", "pricing", "licenseId", "terms"})
_SKILL_FIELDS: Final = frozenset({"skillId", "version", "developerId"})
_PRICING_FIELDS: Final = frozenset({"model", "amountCents", "currency"})
_TERMS_FIELDS: Final = frozenset({"refundableUntilState", "requiresCertificationTier"})
_USED_FIELDS: Final = frozenset({"jobId", "licenseId", "step"})


def validate_skill_licensed(payload: Any) -> None:
    object_with_fields(payload, _LICENSED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")

    skill = field(payload, "skill")
    object_with_fields(skill, _SKILL_FIELDS, "payload.skill")
    for key in ("skillId", "version", "developerId"):
        non_empty_string(field(skill, key), f"payload.skill.{key}")

    pricing = field(payload, "pricing")
    object_with_fields(pricing, _PRICING_FIELDS, "payload.pricing")
    one_of(field(pricing, "model"), {"PER_JOB"}, "payload.pricing.model", "must be PER_JOB")
    positive_cents(field(pricing, "amountCents"), "payload.pricing.amountCents")
    non_empty_string(field(pricing, "currency"), "payload.pricing.currency")

    non_empty_string(field(payload, "licenseId"), "payload.licenseId")

    terms = field(payload, "terms")
    if terms is not MISSING:
        object_with_fields(terms, _TERMS_FIELDS, "payload.terms")
        for key in ("refundableUntilState", "requiresCertificationTier"):
            optional_non_empty_string(field(terms, key), f"payload.terms.{key}")


def validate_skill_used(payload: Any) -> None:
    object_with_fields(payload, _USED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "licenseId"), "payload.licenseId")
    optional_non_empty_string(field(payload, "step"), "payload.step")
