"""The `policies` of a ContractDocument.v1, checked as settld 0.1.0 checks them before it stores a document (its
`validateContractDocumentV1` runs its older contract validator over the policies): a credit and an evidence policy
are required, every object takes its known keys only, and every number is a safe integer in its range.

Numbers are read as JavaScript reads them: an integral double such as `30.0` is the integer 30. `-0` is refused,
since settld cannot hash a document that holds it. The checks change nothing: a document is hashed as given.
Also the small field checks the contract validator (`settlekit.ledger.contracts`) shares; every refusal is a
ContractInvalid naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, Final

from settlekit.events.canonical import MAX_SAFE_INTEGER
from settlekit.events.js import js_is_safe_integer, js_nonblank
from settlekit.ledger.errors import ContractInvalid

ENVIRONMENT_TIERS: Final = ("ENV_MANAGED_BUILDING", "ENV_HOSPITALITY", "ENV_OFFICE_AFTER_HOURS", "ENV_IN_HOME")
PROOF_GATE_MODES: Final = ("warn", "strict", "holdback")
INSUFFICIENT_EVIDENCE_MODES: Final = ("ALLOW", "BLOCK_EXPORT", "SETTLE_ZERO", "HOLD_PERCENT")
COVERAGE_FEE_MODELS: Final = ("PER_JOB",)
CREDIT_FUNDING_MODELS: Final = ("PLATFORM_EXPENSE", "COVERAGE_RESERVE", "OPERATOR_CHARGEBACK", "INSURER_RECOVERABLE")

_POLICY_KEYS: Final = (
    "slaOverridesByEnvironmentTier",
    "proofPolicy",
    "creditPolicy",
    "evidencePolicy",
    "claimPolicy",
    "coveragePolicy",
)
_SLA_OVERRIDE_KEYS: Final = ("mustStartWithinWindow", "maxStallMs", "maxExecutionMs")
_CREDIT_KEYS: Final = ("enabled", "defaultAmountCents", "maxAmountCents", "currency", "ladder")
_LADDER_STEP_KEYS: Final = ("latenessMsGte", "amountCents")
_EVIDENCE_KEYS: Final = ("retentionDays",)
_PROOF_KEYS: Final = (
    "gateMode",
    "zoneCoverage",
    "insufficientEvidenceBehavior",
    "disputeWindowDays",
    "allowReproofAfterSettlementWithinDisputeWindow",
)
_ZONE_COVERAGE_KEYS: Final = ("thresholdPct", "allowExtraZones", "excuseIncidentTypes")
_INSUFFICIENT_EVIDENCE_KEYS: Final = ("mode", "holdPercent")
_CLAIM_KEYS: Final = ("currency", "autoApproveThresholdCents", "maxPayoutCents", "reservePercent")
_COVERAGE_KEYS: Final = (
    "required",
    "coverageTierId",
    "feeModel",
    "feeCentsPerJob",
    "creditFundingModel",
    "reserveFundPercent",
    "insurerId",
    "recoverablePercent",
    "recoverableTerms",
    "responseSlaSeconds",
    "includedAssistSeconds",
    "overageRateCentsPerMinute",
)
_COVERAGE_COUNTS: Final = ("responseSlaSeconds", "includedAssistSeconds", "overageRateCentsPerMinute")


# --- field checks, shared with the document validator ---


def invalid(path: str, why: str) -> ContractInvalid:
    return ContractInvalid(f"{path} {why}", path=path)


def known_object(value: Any, path: str, keys: Collection[str] | None) -> dict[str, Any]:
    """`value` when it is an object whose keys are all in `keys` (any keys when `keys` is None)."""
    if type(value) is not dict:
        raise invalid(path, "must be an object")
    if keys is not None:
        extra = sorted(k for k in value if k not in keys)
        if extra:
            raise invalid(f"{path}.{extra[0]}", "is not an allowed key")
    return value


def _range_text(low: int | None, high: int | None) -> str:
    if low is None:
        return "must be an integer"
    if high is None:
        return f"must be an integer >= {low}"
    return f"must be an integer {low}..{'2**53 - 1' if high == MAX_SAFE_INTEGER else high}"


def safe_int(value: Any, path: str, *, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int when JavaScript's `Number.isSafeInteger` takes it (an integral double counts, a boolean
    does not) and it lies in `low..high`; `-0` is refused."""
    if not js_is_safe_integer(value) or (low is not None and value < low) or (high is not None and value > high):
        raise invalid(path, _range_text(low, high))
    if type(value) is float and math.copysign(1.0, value) < 0 and value == 0:
        raise invalid(path, "must not be -0 (settld cannot hash it)")
    return int(value)


def nonblank(value: Any, path: str) -> str:
    """A string JavaScript's `trim` leaves non-empty."""
    if not js_nonblank(value):
        raise invalid(path, "must be a non-blank string")
    return value


def optional_nonblank(value: Any, path: str) -> str | None:
    """None, or a string JavaScript's `trim` leaves non-empty."""
    if value is None:
        return None
    if not js_nonblank(value):
        raise invalid(path, "must be a non-blank string or null")
    return value


def boolean(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise invalid(path, "must be a boolean")
    return value


def _optional_choice(value: Any, path: str, choices: tuple[str, ...]) -> None:
    """None (settld's default applies), or one of `choices`."""
    if value is not None and value not in choices:
        raise invalid(path, f"must be one of {list(choices)} or null")


def _usd(value: Any, path: str) -> None:
    if value != "USD" or type(value) is not str:
        raise invalid(path, "must be USD")


# --- policies ---


def validate_contract_policies(value: Any, path: str = "contract.policies") -> dict[str, Any]:
    """The document's `policies` when settld's contract validator takes them; raises ContractInvalid naming the
    first field it refuses."""
    policies = known_object(value, path, _POLICY_KEYS)
    if "slaOverridesByEnvironmentTier" in policies:
        _sla_overrides(policies["slaOverridesByEnvironmentTier"], f"{path}.slaOverridesByEnvironmentTier")
    _credit_policy(policies.get("creditPolicy"), f"{path}.creditPolicy")
    _evidence_policy(policies.get("evidencePolicy"), f"{path}.evidencePolicy")
    if policies.get("proofPolicy") is not None:
        _proof_policy(policies["proofPolicy"], f"{path}.proofPolicy")
    if "claimPolicy" in policies:
        _claim_policy(policies["claimPolicy"], f"{path}.claimPolicy")
    if "coveragePolicy" in policies:
        _coverage_policy(policies["coveragePolicy"], f"{path}.coveragePolicy")
    return policies


def _sla_overrides(value: Any, path: str) -> None:
    for tier, override in known_object(value, path, None).items():
        if tier not in ENVIRONMENT_TIERS:
            raise invalid(f"{path}.{tier}", f"is not an environment tier ({', '.join(ENVIRONMENT_TIERS)})")
        fields = known_object(override, f"{path}.{tier}", _SLA_OVERRIDE_KEYS)
        if "mustStartWithinWindow" in fields:
            boolean(fields["mustStartWithinWindow"], f"{path}.{tier}.mustStartWithinWindow")
        for key in ("maxStallMs", "maxExecutionMs"):
            if key in fields:
                safe_int(fields[key], f"{path}.{tier}.{key}", low=1)


def _credit_policy(value: Any, path: str) -> None:
    credit = known_object(value, path, _CREDIT_KEYS)
    boolean(credit.get("enabled"), f"{path}.enabled")
    default = safe_int(credit.get("defaultAmountCents"), f"{path}.defaultAmountCents", low=0)
    cap = safe_int(credit.get("maxAmountCents"), f"{path}.maxAmountCents", low=0)
    _usd(credit.get("currency"), f"{path}.currency")
    if cap > 0 and default > cap:
        raise invalid(f"{path}.defaultAmountCents", "must not exceed maxAmountCents (when that is above 0)")
    ladder = credit.get("ladder")
    if ladder is None:
        return
    if type(ladder) is not list:
        raise invalid(f"{path}.ladder", "must be a list or null")
    previous = -1
    for i, step in enumerate(ladder):
        step_path = f"{path}.ladder[{i}]"
        fields = known_object(step, step_path, _LADDER_STEP_KEYS)
        lateness = safe_int(fields.get("latenessMsGte"), f"{step_path}.latenessMsGte", low=0)
        amount = safe_int(fields.get("amountCents"), f"{step_path}.amountCents", low=0)
        if lateness <= previous:
            raise invalid(f"{step_path}.latenessMsGte", "must be above the step before's (the ladder rises strictly)")
        if cap > 0 and amount > cap:
            raise invalid(f"{step_path}.amountCents", "must not exceed maxAmountCents (when that is above 0)")
        previous = lateness


def _evidence_policy(value: Any, path: str) -> None:
    evidence = known_object(value, path, _EVIDENCE_KEYS)
    safe_int(evidence.get("retentionDays"), f"{path}.retentionDays", low=0)


def _proof_policy(value: Any, path: str) -> None:
    """Each key may be null or absent (settld fills in its default), except `zoneCoverage.allowExtraZones`."""
    proof = known_object(value, path, _PROOF_KEYS)
    _optional_choice(proof.get("gateMode"), f"{path}.gateMode", PROOF_GATE_MODES)
    if proof.get("zoneCoverage") is not None:
        zones_path = f"{path}.zoneCoverage"
        zones = known_object(proof["zoneCoverage"], zones_path, _ZONE_COVERAGE_KEYS)
        if zones.get("thresholdPct") is not None:
            safe_int(zones["thresholdPct"], f"{zones_path}.thresholdPct", low=0, high=100)
        if "allowExtraZones" in zones:
            boolean(zones["allowExtraZones"], f"{zones_path}.allowExtraZones")
        excused = zones.get("excuseIncidentTypes")
        if excused is not None:
            if type(excused) is not list:
                raise invalid(f"{zones_path}.excuseIncidentTypes", "must be a list or null")
            for i, kind in enumerate(excused):
                nonblank(kind, f"{zones_path}.excuseIncidentTypes[{i}]")
    if proof.get("insufficientEvidenceBehavior") is not None:
        behavior_path = f"{path}.insufficientEvidenceBehavior"
        behavior = known_object(proof["insufficientEvidenceBehavior"], behavior_path, _INSUFFICIENT_EVIDENCE_KEYS)
        _optional_choice(behavior.get("mode"), f"{behavior_path}.mode", INSUFFICIENT_EVIDENCE_MODES)
        if behavior.get("holdPercent") is not None:
            safe_int(behavior["holdPercent"], f"{behavior_path}.holdPercent", low=0, high=100)
    if proof.get("disputeWindowDays") is not None:
        safe_int(proof["disputeWindowDays"], f"{path}.disputeWindowDays", low=0, high=365)
    reproof = proof.get("allowReproofAfterSettlementWithinDisputeWindow")
    if reproof is not None:
        boolean(reproof, f"{path}.allowReproofAfterSettlementWithinDisputeWindow")


def _claim_policy(value: Any, path: str) -> None:
    claim = known_object(value, path, _CLAIM_KEYS)
    _usd(claim.get("currency"), f"{path}.currency")
    safe_int(claim.get("autoApproveThresholdCents"), f"{path}.autoApproveThresholdCents", low=0)
    safe_int(claim.get("maxPayoutCents"), f"{path}.maxPayoutCents", low=0)
    safe_int(claim.get("reservePercent"), f"{path}.reservePercent", low=0, high=100)


def _coverage_policy(value: Any, path: str) -> None:
    coverage = known_object(value, path, _COVERAGE_KEYS)
    boolean(coverage.get("required"), f"{path}.required")
    for key in ("coverageTierId", "insurerId", "recoverableTerms"):
        optional_nonblank(coverage.get(key), f"{path}.{key}")
    _optional_choice(coverage.get("feeModel"), f"{path}.feeModel", COVERAGE_FEE_MODELS)
    _optional_choice(coverage.get("creditFundingModel"), f"{path}.creditFundingModel", CREDIT_FUNDING_MODELS)
    if coverage.get("feeCentsPerJob") is not None:
        safe_int(coverage["feeCentsPerJob"], f"{path}.feeCentsPerJob", low=0)
    for key in ("reserveFundPercent", "recoverablePercent"):
        if coverage.get(key) is not None:
            safe_int(coverage[key], f"{path}.{key}", low=0, high=100)
    if coverage.get("creditFundingModel") == "INSURER_RECOVERABLE" and coverage.get("insurerId") is None:
        raise invalid(f"{path}.insurerId", "is required when creditFundingModel is INSURER_RECOVERABLE")
    for key in _COVERAGE_COUNTS:
        safe_int(coverage.get(key), f"{path}.{key}", low=0)
