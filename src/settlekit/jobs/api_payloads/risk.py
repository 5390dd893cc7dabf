"""Payload check for RISK_SCORED, as settld's `core/risk.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    boolean,
    field,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    safe_int_above_zero,
    safe_int_at_least_zero,
    safe_int_within,
)
from settlekit.jobs.api_payloads.booking import ENV_TIERS

RISK_BASES: Final = frozenset({"QUOTE", "BOOK"})

_FIELDS: Final = frozenset(
    {
        "jobId",
        "basis",
        "scoredAt",
        "sourceEventId",
        "modelVersion",
        "riskScore",
        "expectedAssistSeconds",
        "expectedIncidentProbabilityBps",
        "expectedCreditBurnRateCents",
        "currency",
        "policyHash",
        "features",
    }
)
_FEATURE_FIELDS: Final = frozenset(
    {
        "templateId",
        "environmentTier",
        "requiresOperatorCoverage",
        "zoneId",
        "siteId",
        "customerId",
        "availableRobots",
        "activeOperators",
        "avgAvailableRobotTrustScoreBps",
        "historyWindowDays",
        "historySampleJobs",
        "historyIncidentRateBps",
        "historyStallRateBps",
        "historyAvgAssistSeconds",
        "historyAvgCreditCents",
        "historyAvgClaimsPaidCents",
    }
)


def validate_risk_scored(payload: Any) -> None:
    object_with_fields(payload, _FIELDS, "payload")

    non_empty_string(field(payload, "jobId"), "payload.jobId")
    one_of(field(payload, "basis"), RISK_BASES, "payload.basis")
    iso_date(field(payload, "scoredAt"), "payload.scoredAt")
    non_empty_string(field(payload, "sourceEventId"), "payload.sourceEventId")

    safe_int_above_zero(field(payload, "modelVersion"), "payload.modelVersion")
    safe_int_within(field(payload, "riskScore"), "payload.riskScore", 100)
    safe_int_at_least_zero(field(payload, "expectedAssistSeconds"), "payload.expectedAssistSeconds")
    safe_int_within(field(payload, "expectedIncidentProbabilityBps"), "payload.expectedIncidentProbabilityBps", 10_000)
    safe_int_at_least_zero(field(payload, "expectedCreditBurnRateCents"), "payload.expectedCreditBurnRateCents")

    one_of(field(payload, "currency"), {"USD"}, "payload.currency")
    nullable_non_empty_string(field(payload, "policyHash"), "payload.policyHash")

    features = field(payload, "features")
    object_with_fields(features, _FEATURE_FIELDS, "payload.features")
    non_empty_string(field(features, "templateId"), "payload.features.templateId")
    one_of(field(features, "environmentTier"), ENV_TIERS, "payload.features.environmentTier")
    boolean(field(features, "requiresOperatorCoverage"), "payload.features.requiresOperatorCoverage")
    nullable_non_empty_string(field(features, "zoneId"), "payload.features.zoneId")
    nullable_non_empty_string(field(features, "siteId"), "payload.features.siteId")
    nullable_non_empty_string(field(features, "customerId"), "payload.features.customerId")

    safe_int_at_least_zero(field(features, "availableRobots"), "payload.features.availableRobots")
    safe_int_at_least_zero(field(features, "activeOperators"), "payload.features.activeOperators")
    safe_int_within(
        field(features, "avgAvailableRobotTrustScoreBps"), "payload.features.avgAvailableRobotTrustScoreBps", 10_000
    )
    safe_int_above_zero(field(features, "historyWindowDays"), "payload.features.historyWindowDays")
    safe_int_at_least_zero(field(features, "historySampleJobs"), "payload.features.historySampleJobs")
    safe_int_within(field(features, "historyIncidentRateBps"), "payload.features.historyIncidentRateBps", 10_000)
    safe_int_within(field(features, "historyStallRateBps"), "payload.features.historyStallRateBps", 10_000)
    safe_int_at_least_zero(field(features, "historyAvgAssistSeconds"), "payload.features.historyAvgAssistSeconds")
    safe_int_at_least_zero(field(features, "historyAvgCreditCents"), "payload.features.historyAvgCreditCents")
    safe_int_at_least_zero(field(features, "historyAvgClaimsPaidCents"), "payload.features.historyAvgClaimsPaidCents")
