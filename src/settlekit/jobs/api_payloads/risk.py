"""Payload check for RISK_SCORED, as settld's `core/risk.js` validates it."""

from __future__ import annotations

import math
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    date_parse,
    field,
    is_nullish,
    non_empty_string,
    nullable_non_empty_string,
    only_fields,
    plain_object,
    reject,
    safe_int,
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


def _at_least_zero(obj: dict[str, Any], key: str, name: str) -> None:
    value = field(obj, key)
    safe_int(value, name)
    if value < 0:
        reject(f"{name} must be >= 0")


def _above_zero(obj: dict[str, Any], key: str, name: str) -> None:
    value = field(obj, key)
    safe_int(value, name)
    if value <= 0:
        reject(f"{name} must be > 0")


def _within(obj: dict[str, Any], key: str, name: str, high: int) -> None:
    value = field(obj, key)
    safe_int(value, name)
    if value < 0 or value > high:
        reject(f"{name} must be within 0..{high}")


def validate_risk_scored(payload: Any) -> None:
    plain_object(payload, "payload")
    only_fields(payload, _FIELDS, "payload")

    non_empty_string(field(payload, "jobId"), "payload.jobId")
    basis = field(payload, "basis")
    non_empty_string(basis, "payload.basis")
    if basis not in RISK_BASES:
        reject("payload.basis is not supported")
    scored_at = field(payload, "scoredAt")
    non_empty_string(scored_at, "payload.scoredAt")
    if not math.isfinite(date_parse(scored_at)):
        reject("payload.scoredAt must be an ISO date string")
    non_empty_string(field(payload, "sourceEventId"), "payload.sourceEventId")

    _above_zero(payload, "modelVersion", "payload.modelVersion")
    _within(payload, "riskScore", "payload.riskScore", 100)
    _at_least_zero(payload, "expectedAssistSeconds", "payload.expectedAssistSeconds")
    _within(payload, "expectedIncidentProbabilityBps", "payload.expectedIncidentProbabilityBps", 10_000)
    _at_least_zero(payload, "expectedCreditBurnRateCents", "payload.expectedCreditBurnRateCents")

    currency = field(payload, "currency")
    non_empty_string(currency, "payload.currency")
    if currency != "USD":
        reject("payload.currency is not supported")

    policy_hash = field(payload, "policyHash")
    if not is_nullish(policy_hash):
        non_empty_string(policy_hash, "payload.policyHash")

    features = field(payload, "features")
    plain_object(features, "payload.features")
    only_fields(features, _FEATURE_FIELDS, "payload.features")
    non_empty_string(field(features, "templateId"), "payload.features.templateId")
    environment_tier = field(features, "environmentTier")
    non_empty_string(environment_tier, "payload.features.environmentTier")
    if environment_tier not in ENV_TIERS:
        reject("payload.features.environmentTier is not supported")
    if type(field(features, "requiresOperatorCoverage")) is not bool:
        reject("payload.features.requiresOperatorCoverage must be a boolean")
    nullable_non_empty_string(field(features, "zoneId"), "payload.features.zoneId")
    nullable_non_empty_string(field(features, "siteId"), "payload.features.siteId")
    nullable_non_empty_string(field(features, "customerId"), "payload.features.customerId")

    _at_least_zero(features, "availableRobots", "payload.features.availableRobots")
    _at_least_zero(features, "activeOperators", "payload.features.activeOperators")
    _within(features, "avgAvailableRobotTrustScoreBps", "payload.features.avgAvailableRobotTrustScoreBps", 10_000)
    _above_zero(features, "historyWindowDays", "payload.features.historyWindowDays")
    _at_least_zero(features, "historySampleJobs", "payload.features.historySampleJobs")
    _within(features, "historyIncidentRateBps", "payload.features.historyIncidentRateBps", 10_000)
    _within(features, "historyStallRateBps", "payload.features.historyStallRateBps", 10_000)
    _at_least_zero(features, "historyAvgAssistSeconds", "payload.features.historyAvgAssistSeconds")
    _at_least_zero(features, "historyAvgCreditCents", "payload.features.historyAvgCreditCents")
    _at_least_zero(features, "historyAvgClaimsPaidCents", "payload.features.historyAvgClaimsPaidCents")
