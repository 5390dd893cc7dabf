"""ContractDocument.v1, SplitPlan.v1 and PolicySnapshot.v1: validation, normalization and hashing
(03-ledger.md §10, docs/contracts.md), plus split-plan execution over one amount.

A contract document and a split plan are hashed as given, once they validate: the canonical JSON of the document
itself, an absent key absent and a null one null, as settld 0.1.0 hashes them (`hashContractDocumentV1`,
`hashSplitPlanV1`). Normalization (every absent optional key filled with null) gives the validated view that
allocations and split-plan execution read; it is not hashed. Unknown keys are rejected.

A document is accepted when settld's validator (`validateContractDocumentV1`, its policy checks in
`settlekit.ledger.contract_policies`) accepts it and its split plan is one settlekit can execute (stricter than
settld: docs/contracts.md, "Which documents are accepted"). Stored documents are not validated again when read: a
split plan registered before settlekit applied all of settld's rules still executes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from settlekit.events.canonical import canonical_hash
from settlekit.events.js_date import js_date_parse_ms
from settlekit.ledger.accounts import MAX_AMOUNT_CENTS
from settlekit.ledger.contract_policies import (
    boolean,
    invalid,
    known_object,
    nonblank,
    optional_nonblank,
    safe_int,
    validate_contract_policies,
)
from settlekit.ledger.errors import ContractInvalid

CONTRACT_COMPILER_ID: Final = "contract_compiler.v1"
CONTRACT_PARTY_ROLES: Final = ("platform", "operator", "customer")
SPLIT_PARTY_ROLES: Final = ("platform", "operator", "customer", "subcontractor", "insurer")
SPLIT_APPLIES_TO: Final = ("gross", "net_after_credits", "credits")

_DOC_KEYS: Final = (
    "type",
    "v",
    "contractId",
    "contractVersion",
    "name",
    "parties",
    "scope",
    "policies",
    "effective",
    "connect",
)
_SCOPE_IDS: Final = ("customerId", "siteId", "templateId", "zoneId", "skillId")
_SCOPE_KEYS: Final = (*_SCOPE_IDS, "isDefault")
_EFFECTIVE_KEYS: Final = ("from", "to")
_PLAN_KEYS: Final = ("type", "v", "currency", "rules")
_RULE_KEYS: Final = ("partyRole", "partyId", "share", "appliesTo")
_SHARE_KEYS: Final = ("type", "valueBasisPoints", "valueCents")
_SHARE_VALUE_KEY: Final = {"percentage": "valueBasisPoints", "fixed": "valueCents", "remainder": None}
# `details.rule` of a refusal settld does not make: settlekit executes enabled split plans, so it takes only plans
# it can run (docs/contracts.md, "Which documents are accepted")
SPLIT_PLAN_EXECUTION_RULE: Final = "settlekit-split-plan-execution"
_POLICY_SNAPSHOT_KEYS: Final = (
    "schemaVersion",
    "contractId",
    "contractVersion",
    "environmentTier",
    "requiresOperatorCoverage",
    "sla",
    "proofPolicy",
    "creditPolicy",
    "evidencePolicy",
    "claimPolicy",
    "coveragePolicy",
)


def _not_executable(path: str, why: str) -> ContractInvalid:
    """A refusal of a split plan settld stores (`SPLIT_PLAN_EXECUTION_RULE`)."""
    return ContractInvalid(f"{path} {why}", path=path, rule=SPLIT_PLAN_EXECUTION_RULE)


def _opt_str(v: Any, path: str) -> str | None:
    if v is not None and type(v) is not str:
        raise invalid(path, "must be a string or null")
    return v


def _opt_date(v: Any, path: str) -> str | None:
    """None, or a non-blank string JavaScript's `Date.parse` reads."""
    if v is None:
        return None
    if not math.isfinite(js_date_parse_ms(nonblank(v, path))):
        raise invalid(path, "must be a date JavaScript's Date.parse reads (ISO 8601) or null")
    return v


def _versioned_obj(v: Any, path: str, keys: tuple[str, ...], type_name: str) -> dict[str, Any]:
    """`known_object`, then the document's `type` (must be `type_name`) and `v` (must be the number 1; `1.0` is 1 in
    JavaScript)."""
    d = known_object(v, path, keys)
    if d.get("type") != type_name:
        raise invalid(f"{path}.type", f"must be {type_name}")
    version = d.get("v")
    if type(version) not in (int, float) or version != 1:
        raise invalid(f"{path}.v", "must be 1")
    return d


# --- SplitPlan.v1 ---


def normalize_split_plan(plan: Any) -> dict[str, Any]:
    """Validate a SplitPlan.v1 and return its normalized form (absent optional keys -> null)."""
    return _split_plan(plan, registering=True)


def _split_plan(plan: Any, *, registering: bool) -> dict[str, Any]:
    """The normalized plan. When not `registering` (a stored document's plan, read to execute it) a blank rule
    `partyId` passes, as it did before settlekit refused it: the rule then pays its role's default party."""
    p = _versioned_obj(plan, "splitPlan", _PLAN_KEYS, "SplitPlan.v1")
    if p.get("currency") != "USD":
        raise invalid("splitPlan.currency", "must be USD")
    rules = p.get("rules")
    if type(rules) is not list:
        raise invalid("splitPlan.rules", "must be a list")
    if not rules:
        raise _not_executable("splitPlan.rules", "must be a non-empty list")
    out_rules = []
    bps_by_scope: dict[str, int] = {}
    remainders_by_scope: dict[str, int] = {}
    for i, rule in enumerate(rules):
        out_rules.append(
            _normalize_split_rule(rule, f"splitPlan.rules[{i}]", bps_by_scope, remainders_by_scope, registering)
        )
    for scope, total in bps_by_scope.items():
        if total > 10000:
            raise _not_executable("splitPlan.rules", f"percentages for {scope} add up to more than 100 %")
    for scope, count in remainders_by_scope.items():
        if count > 1:
            raise _not_executable("splitPlan.rules", f"more than one remainder rule for {scope}")
    return {"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": out_rules}


def _normalize_split_rule(
    rule: Any, path: str, bps_by_scope: dict[str, int], remainders_by_scope: dict[str, int], registering: bool
) -> dict[str, Any]:
    """One normalized split rule; its percentage / remainder is counted in its scope (`appliesTo`, default
    gross) for the plan-wide checks."""
    r = known_object(rule, path, _RULE_KEYS)
    if r.get("partyRole") not in SPLIT_PARTY_ROLES:
        raise invalid(f"{path}.partyRole", f"must be one of {list(SPLIT_PARTY_ROLES)}")
    check_party_id = optional_nonblank if registering else _opt_str  # settld: null or non-blank
    party_id = check_party_id(r.get("partyId"), f"{path}.partyId")
    applies = r.get("appliesTo")
    if applies is not None and applies not in SPLIT_APPLIES_TO:
        raise invalid(f"{path}.appliesTo", f"must be one of {list(SPLIT_APPLIES_TO)}")
    scope = applies or "gross"
    share = r.get("share")
    if type(share) is not dict:
        raise invalid(f"{path}.share", "must be an object")
    norm_share = _normalize_share(share, f"{path}.share")
    if norm_share["type"] == "percentage":
        bps_by_scope[scope] = bps_by_scope.get(scope, 0) + norm_share["valueBasisPoints"]
    elif norm_share["type"] == "remainder":
        remainders_by_scope[scope] = remainders_by_scope.get(scope, 0) + 1
    return {"partyRole": r["partyRole"], "partyId": party_id, "share": norm_share, "appliesTo": applies}


def _normalize_share(share: dict[str, Any], path: str) -> dict[str, Any]:
    """The share with only its type's value key (settld takes either value key on any type; settlekit refuses
    the other one) and a fixed share of 0 cents or more (settld takes any safe integer)."""
    known_object(share, path, _SHARE_KEYS)
    kind = share.get("type")
    if type(kind) is not str or kind not in _SHARE_VALUE_KEY:
        raise invalid(f"{path}.type", "must be percentage, fixed or remainder")
    value_key = _SHARE_VALUE_KEY[kind]
    other = sorted(k for k in share if k not in ("type", value_key))
    if other:
        raise _not_executable(f"{path}.{other[0]}", f"is not an allowed key for a {kind} share")
    if kind == "percentage":
        bps = safe_int(share.get("valueBasisPoints"), f"{path}.valueBasisPoints", low=0, high=10000)
        return {"type": "percentage", "valueBasisPoints": bps}
    if kind == "fixed":
        cents = safe_int(share.get("valueCents"), f"{path}.valueCents")
        if not 0 <= cents <= MAX_AMOUNT_CENTS:
            raise _not_executable(f"{path}.valueCents", "must be an integer 0..2**53 - 1")
        return {"type": "fixed", "valueCents": cents}
    return {"type": "remainder"}


def split_plan_hash(plan: Any) -> str:
    """`splitPlanHash = sha256_hex(canonical(plan))`: the plan as given, once it validates (settld's
    `hashSplitPlanV1`; an absent `partyId` or `appliesTo` stays absent, a null one null)."""
    normalize_split_plan(plan)
    return canonical_hash(plan)


def allocate_split(amount: int, rules: list[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], int]]:
    """Divide an integer `amount` over split rules without losing a cent.

    Rounding rule, applied to |amount| with the sign restored at the end:
    1. fixed shares, in rule order, each capped at what is still unallocated;
    2. percentage shares of the amount left after the fixed shares, each floored
       (`left * bps // 10000`);
    3. every cent still unallocated goes to the remainder rule; without a remainder rule the leftover cents
       go one at a time to the percentage rules with the largest discarded fractions (ties: earlier rule first), and
       whatever is still left (no percentage rules, or percentages below 100 %) is returned as a final pair
       with an empty rule `{}` meaning "the posting's default party".
    The returned amounts (zeros omitted) always sum to `amount`.
    """
    sign = -1 if amount < 0 else 1
    total = abs(amount)
    left = total
    shares = [0] * len(rules)
    for i, r in enumerate(rules):
        if r["share"]["type"] == "fixed":
            take = min(r["share"]["valueCents"], left)
            shares[i] = take
            left -= take
    base = left
    fractions: list[tuple[int, int]] = []
    bps_total = 0
    for i, r in enumerate(rules):
        if r["share"]["type"] == "percentage":
            bps = r["share"]["valueBasisPoints"]
            bps_total += bps
            shares[i] = min(base * bps // 10000, left)  # caps plans that were not validated
            fractions.append((-(base * bps % 10000), i))
            left -= shares[i]
    remainder_idx = next((i for i, r in enumerate(rules) if r["share"]["type"] == "remainder"), None)
    leftover_default = 0
    if remainder_idx is not None:
        shares[remainder_idx] = left
        left = 0
    elif bps_total == 10000:
        for _, i in sorted(fractions):
            if left == 0:
                break
            shares[i] += 1
            left -= 1
    leftover_default = left
    out: list[tuple[Mapping[str, Any], int]] = [
        (r, sign * shares[i]) for i, r in enumerate(rules) if shares[i]
    ]
    if leftover_default:
        out.append(({}, sign * leftover_default))
    return out


# --- ContractDocument.v1 ---


def normalize_contract_document(doc: Any) -> dict[str, Any]:
    """Validate a ContractDocument.v1 and return its normalized form. `parties`, `scope`, `effective` and `connect`
    may be absent but not null (as in settld); `name` and `policies` are required."""
    d = _versioned_obj(doc, "contract", _DOC_KEYS, "ContractDocument.v1")
    contract_id = nonblank(d.get("contractId"), "contract.contractId")
    version = safe_int(d.get("contractVersion"), "contract.contractVersion", low=1)
    name = nonblank(d.get("name"), "contract.name")
    parties = _normalize_parties(d["parties"]) if "parties" in d else None
    scope = _normalize_scope(d["scope"]) if "scope" in d else None
    policies = validate_contract_policies(d.get("policies"), "contract.policies")
    effective: dict[str, Any] | None = None
    if "effective" in d:
        raw = known_object(d["effective"], "contract.effective", _EFFECTIVE_KEYS)
        effective = {k: _opt_date(raw.get(k), f"contract.effective.{k}") for k in _EFFECTIVE_KEYS}
    connect = _normalize_connect(d["connect"]) if "connect" in d else None
    return {
        "type": "ContractDocument.v1",
        "v": 1,
        "contractId": contract_id,
        "contractVersion": version,
        "name": name,
        "parties": parties,
        "scope": scope,
        "policies": policies,
        "effective": effective,
        "connect": connect,
    }


def _normalize_parties(value: Any) -> dict[str, Any]:
    """`contract.parties`: every role present in the output, null when absent. A party given is an object with a
    non-blank `partyId` and a boolean `requiresSignature`."""
    raw = known_object(value, "contract.parties", CONTRACT_PARTY_ROLES)
    parties: dict[str, Any] = {}
    for role in CONTRACT_PARTY_ROLES:
        if role not in raw:
            parties[role] = None
            continue
        path = f"contract.parties.{role}"
        entry = known_object(raw[role], path, ("partyId", "requiresSignature"))
        parties[role] = {
            "partyId": nonblank(entry.get("partyId"), f"{path}.partyId"),
            "requiresSignature": boolean(entry.get("requiresSignature"), f"{path}.requiresSignature"),
        }
    return parties


def _normalize_scope(value: Any) -> dict[str, Any]:
    """`contract.scope`: each id null or non-blank, `isDefault` absent or a boolean (null is refused, as in
    settld); absent keys are null in the output."""
    raw = known_object(value, "contract.scope", _SCOPE_KEYS)
    scope: dict[str, Any] = {k: optional_nonblank(raw.get(k), f"contract.scope.{k}") for k in _SCOPE_IDS}
    scope["isDefault"] = boolean(raw["isDefault"], "contract.scope.isDefault") if "isDefault" in raw else None
    return scope


def _normalize_connect(value: Any) -> dict[str, Any]:
    raw = known_object(value, "contract.connect", ("enabled", "splitPlan"))
    enabled = boolean(raw.get("enabled"), "contract.connect.enabled")
    plan = raw.get("splitPlan")
    return {"enabled": enabled, "splitPlan": normalize_split_plan(plan) if plan is not None else None}


def contract_hash(doc: Any) -> str:
    """`contractHash = sha256_hex(canonical(document))`: the document as given, once it validates (settld's
    `hashContractDocumentV1`). Documents that differ only in an omitted optional key against a null one hash
    differently, as in settld."""
    normalize_contract_document(doc)
    return canonical_hash(doc)


def legacy_contract_hash(doc: Any) -> str:
    """The contract hash of settlekit before it hashed documents as settld does: the normalized document (absent
    optional keys filled with null). Kept only to resolve pins made with it (the store's hash aliases)."""
    return canonical_hash(normalize_contract_document(doc))


def executable_split_plan(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The normalized split plan when `connect.enabled is True` and a plan exists, else None. The plan of a stored
    document is read as it was registered: a blank rule `partyId` passes (`_split_plan`)."""
    if not doc:
        return None
    connect = doc.get("connect")
    if type(connect) is not dict or connect.get("enabled") is not True or connect.get("splitPlan") is None:
        return None
    return _split_plan(connect["splitPlan"], registering=False)


def contract_split_plan_hash(doc: Mapping[str, Any] | None) -> str | None:
    """`SettlementStatement.settlement.splitPlanHash`: when connect is enabled and the plan validates, the hash of
    the plan as the document gives it (`split_plan_hash`); else None. Raises ContractInvalid for an enabled plan
    that does not validate."""
    if executable_split_plan(doc) is None:
        return None
    assert doc is not None
    return canonical_hash(doc["connect"]["splitPlan"])


def compile_contract_policy(doc: Any) -> tuple[dict[str, Any], str, str]:
    """ContractPolicyTemplate.v1 of a document: `(template, policyHash, compilerId)`, as settld's
    `compileContractPolicyTemplate`: `policies` as the document gives it, `connect.enabled` true
    only for `connect.enabled is True`, and `connect.splitPlanHash` the plan's hash (`split_plan_hash`) only when
    connect is enabled and a plan is given, else null (a disabled plan is not hashed)."""
    normalize_contract_document(doc)
    connect = doc.get("connect")
    enabled = type(connect) is dict and connect.get("enabled") is True
    plan = connect.get("splitPlan") if enabled else None
    template = {
        "schemaVersion": "ContractPolicyTemplate.v1",
        "contractId": doc["contractId"],
        "contractVersion": doc["contractVersion"],
        "policies": doc.get("policies"),
        "connect": {"enabled": enabled, "splitPlanHash": split_plan_hash(plan) if plan is not None else None},
    }
    return template, canonical_hash(template), CONTRACT_COMPILER_ID


# --- PolicySnapshot.v1 ---


def normalize_policy_snapshot(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """PolicySnapshot.v1 keys with absent ones as null; other keys are rejected."""
    s = known_object(snapshot, "policySnapshot", _POLICY_SNAPSHOT_KEYS)
    return {k: s.get(k) for k in _POLICY_SNAPSHOT_KEYS}


def policy_snapshot_hash(snapshot: Mapping[str, Any]) -> str:
    return canonical_hash(normalize_policy_snapshot(snapshot))
