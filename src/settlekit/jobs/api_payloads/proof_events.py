"""Payload check for PROOF_EVALUATED, as settld's `core/proof-events.js` validates it (with the missing-evidence
token rules of `core/proof.js`)."""

from __future__ import annotations

import re
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_nullish,
    js_keys,
    js_trim,
    non_empty_string,
    nullable_hex64,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    plain_object,
    reject,
    string_array,
)

PROOF_STATUSES: Final = frozenset({"PASS", "FAIL", "INSUFFICIENT_EVIDENCE"})
MISSING_EVIDENCE_KINDS: Final = frozenset({"REQUIRED_ZONES", "ZONE_COVERAGE", "WITNESS"})

_FIELDS: Final = frozenset(
    {
        "jobId",
        "evaluatedAt",
        "evaluatedAtChainHash",
        "evaluationId",
        "customerPolicyHash",
        "operatorPolicyHash",
        "requiredZonesHash",
        "factsHash",
        "status",
        "reasonCodes",
        "missingEvidence",
        "triggeredFacts",
        "metrics",
    }
)
_FACT_FIELDS: Final = frozenset({"eventId", "type", "zoneId"})
_DETAIL: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,47}")


def _canonical_missing_evidence_token(token: str) -> str:
    """settld's canonical spelling of a non-blank token: `KIND` or `KIND:detail`."""
    raw = js_trim(token)
    kind_raw, colon, detail_raw = raw.partition(":")
    kind = kind_raw.upper()
    if kind not in MISSING_EVIDENCE_KINDS:
        reject("missingEvidence kind is not supported")
    if not colon:
        return kind
    if ":" in detail_raw:
        reject("missingEvidence detail must not include ':'")
    detail = detail_raw.lower()
    if _DETAIL.fullmatch(detail) is None:
        reject("missingEvidence detail has invalid characters")
    return f"{kind}:{detail}"


def _missing_evidence(missing_evidence: Any) -> None:
    if type(missing_evidence) is not list:
        reject("payload.missingEvidence must be an array")
    for token in missing_evidence:
        non_empty_string(token, "payload.missingEvidence[]")
        if _canonical_missing_evidence_token(token) != token:
            reject("payload.missingEvidence must be canonical")
    # every token is now canonical (ASCII), so plain sorting is JS's default sort
    canonical_list = sorted(dict.fromkeys(missing_evidence))
    if len(missing_evidence) != len(canonical_list):
        reject("payload.missingEvidence must be deduped")
    if missing_evidence != canonical_list:
        reject("payload.missingEvidence must be sorted")


def validate_proof_evaluated(payload: Any) -> None:
    object_with_fields(payload, _FIELDS, "payload")

    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "evaluatedAt"), "payload.evaluatedAt")
    non_empty_string(field(payload, "evaluatedAtChainHash"), "payload.evaluatedAtChainHash")

    nullable_hex64(field(payload, "evaluationId"), "payload.evaluationId")
    nullable_non_empty_string(field(payload, "customerPolicyHash"), "payload.customerPolicyHash")
    nullable_non_empty_string(field(payload, "operatorPolicyHash"), "payload.operatorPolicyHash")
    nullable_non_empty_string(field(payload, "requiredZonesHash"), "payload.requiredZonesHash")
    nullable_hex64(field(payload, "factsHash"), "payload.factsHash")

    one_of(field(payload, "status"), PROOF_STATUSES, "payload.status")
    string_array(field(payload, "reasonCodes"), "payload.reasonCodes")

    missing_evidence = field(payload, "missingEvidence")
    if not is_nullish(missing_evidence):
        _missing_evidence(missing_evidence)

    triggered_facts = field(payload, "triggeredFacts")
    if type(triggered_facts) is not list:
        reject("payload.triggeredFacts must be an array")
    for fact in triggered_facts:
        plain_object(fact, "payload.triggeredFacts[]")
        if any(key not in _FACT_FIELDS for key in js_keys(fact)):
            reject("payload.triggeredFacts contains unknown field")
        nullable_non_empty_string(field(fact, "eventId"), "triggeredFacts[].eventId")
        non_empty_string(field(fact, "type"), "triggeredFacts[].type")
        nullable_non_empty_string(field(fact, "zoneId"), "triggeredFacts[].zoneId")

    metrics = field(payload, "metrics")
    plain_object({} if is_nullish(metrics) else metrics, "payload.metrics")
