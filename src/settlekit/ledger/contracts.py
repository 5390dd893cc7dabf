"""ContractDocument.v1, SplitPlan.v1 and PolicySnapshot.v1: validation, normalization and hashing
(03-ledger.md §10, docs/contracts.md), plus split-plan execution over one amount.

A contract document and a split plan are hashed as given, once they validate: the canonical JSON of the document
itself, an absent key absent and a null one null, as settld 0.1.0 hashes them (`hashContractDocumentV1`,
`hashSplitPlanV1`). Normalization (every absent optional key filled with null) gives the validated view that
allocations and split-plan execution read; it is not hashed. Unknown keys are rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.events.canonical import canonical_hash, is_safe_int
from settlekit.events.js import js_nonblank
from settlekit.ledger.accounts import MAX_AMOUNT_CENTS
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
_SCOPE_KEYS: Final = ("customerId", "siteId", "templateId", "zoneId", "skillId", "isDefault")
_EFFECTIVE_KEYS: Final = ("from", "to")
_PLAN_KEYS: Final = ("type", "v", "currency", "rules")
_RULE_KEYS: Final = ("partyRole", "partyId", "share", "appliesTo")
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


def _bad(path: str, why: str) -> ContractInvalid:
    return ContractInvalid(f"{path} {why}", path=path)


def _obj(v: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if type(v) is not dict:
        raise _bad(path, "must be an object")
    extra = [k for k in v if k not in keys]
    if extra:
        raise _bad(f"{path}.{sorted(extra)[0]}", "is not an allowed key")
    return v


def _opt_str(v: Any, path: str) -> str | None:
    if v is not None and type(v) is not str:
        raise _bad(path, "must be a string or null")
    return v


def _opt_bool(v: Any, path: str) -> bool | None:
    if v is not None and type(v) is not bool:
        raise _bad(path, "must be a boolean or null")
    return v


def _pos_int(v: Any, path: str) -> int:
    if not is_safe_int(v) or v <= 0:
        raise _bad(path, "must be a positive integer")
    return v


def _versioned_obj(v: Any, path: str, keys: tuple[str, ...], type_name: str) -> dict[str, Any]:
    """`_obj`, then the document's `type` (must be `type_name`) and `v` (must be the integer 1)."""
    d = _obj(v, path, keys)
    if d.get("type") != type_name:
        raise _bad(f"{path}.type", f"must be {type_name}")
    if d.get("v") != 1 or type(d.get("v")) is not int:
        raise _bad(f"{path}.v", "must be 1")
    return d


# --- SplitPlan.v1 ---


def normalize_split_plan(plan: Any) -> dict[str, Any]:
    """Validate a SplitPlan.v1 and return its normalized form (absent optional keys -> null)."""
    p = _versioned_obj(plan, "splitPlan", _PLAN_KEYS, "SplitPlan.v1")
    if p.get("currency") != "USD":
        raise _bad("splitPlan.currency", "must be USD")
    rules = p.get("rules")
    if type(rules) is not list or not rules:
        raise _bad("splitPlan.rules", "must be a non-empty list")
    out_rules = []
    bps_by_scope: dict[str, int] = {}
    remainders_by_scope: dict[str, int] = {}
    for i, rule in enumerate(rules):
        out_rules.append(_normalize_split_rule(rule, f"splitPlan.rules[{i}]", bps_by_scope, remainders_by_scope))
    for scope, total in bps_by_scope.items():
        if total > 10000:
            raise _bad("splitPlan.rules", f"percentages for {scope} add up to more than 100 %")
    for scope, count in remainders_by_scope.items():
        if count > 1:
            raise _bad("splitPlan.rules", f"more than one remainder rule for {scope}")
    return {"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": out_rules}


def _normalize_split_rule(
    rule: Any, path: str, bps_by_scope: dict[str, int], remainders_by_scope: dict[str, int]
) -> dict[str, Any]:
    """One normalized split rule; its percentage / remainder is counted in its scope (`appliesTo`, default
    gross) for the plan-wide checks."""
    r = _obj(rule, path, _RULE_KEYS)
    if r.get("partyRole") not in SPLIT_PARTY_ROLES:
        raise _bad(f"{path}.partyRole", f"must be one of {list(SPLIT_PARTY_ROLES)}")
    party_id = _opt_str(r.get("partyId"), f"{path}.partyId")
    applies = r.get("appliesTo")
    if applies is not None and applies not in SPLIT_APPLIES_TO:
        raise _bad(f"{path}.appliesTo", f"must be one of {list(SPLIT_APPLIES_TO)}")
    scope = applies or "gross"
    share = r.get("share")
    if type(share) is not dict:
        raise _bad(f"{path}.share", "must be an object")
    norm_share = _normalize_share(share, f"{path}.share")
    if norm_share["type"] == "percentage":
        bps_by_scope[scope] = bps_by_scope.get(scope, 0) + norm_share["valueBasisPoints"]
    elif norm_share["type"] == "remainder":
        remainders_by_scope[scope] = remainders_by_scope.get(scope, 0) + 1
    return {"partyRole": r["partyRole"], "partyId": party_id, "share": norm_share, "appliesTo": applies}


def _normalize_share(share: dict[str, Any], path: str) -> dict[str, Any]:
    kind = share.get("type")
    if kind == "percentage":
        _obj(share, path, ("type", "valueBasisPoints"))
        bps = share.get("valueBasisPoints")
        if type(bps) is not int or not 0 <= bps <= 10000:
            raise _bad(f"{path}.valueBasisPoints", "must be an integer 0..10000")
        return {"type": "percentage", "valueBasisPoints": bps}
    if kind == "fixed":
        _obj(share, path, ("type", "valueCents"))
        cents = share.get("valueCents")
        if type(cents) is not int or not 0 <= cents <= MAX_AMOUNT_CENTS:
            raise _bad(f"{path}.valueCents", "must be an integer 0..2**53 - 1")
        return {"type": "fixed", "valueCents": cents}
    if kind == "remainder":
        _obj(share, path, ("type",))
        return {"type": "remainder"}
    raise _bad(f"{path}.type", "must be percentage, fixed or remainder")


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
    """Validate a ContractDocument.v1 and return its normalized form."""
    d = _versioned_obj(doc, "contract", _DOC_KEYS, "ContractDocument.v1")
    contract_id = d.get("contractId")
    if not js_nonblank(contract_id):  # settld: a string JavaScript's trim leaves non-empty
        raise _bad("contract.contractId", "must be a non-empty string")
    version = _pos_int(d.get("contractVersion"), "contract.contractVersion")
    name = _opt_str(d.get("name"), "contract.name")

    parties = _normalize_parties(d["parties"]) if d.get("parties") is not None else None
    scope: dict[str, Any] | None = None
    if d.get("scope") is not None:
        raw = _obj(d["scope"], "contract.scope", _SCOPE_KEYS)
        scope = {k: _opt_str(raw.get(k), f"contract.scope.{k}") for k in _SCOPE_KEYS[:-1]}
        scope["isDefault"] = _opt_bool(raw.get("isDefault"), "contract.scope.isDefault")
    policies = d.get("policies")
    if policies is not None and type(policies) is not dict:
        raise _bad("contract.policies", "must be an object")
    effective: dict[str, Any] | None = None
    if d.get("effective") is not None:
        raw = _obj(d["effective"], "contract.effective", _EFFECTIVE_KEYS)
        effective = {k: _opt_str(raw.get(k), f"contract.effective.{k}") for k in _EFFECTIVE_KEYS}
    connect = _normalize_connect(d["connect"]) if d.get("connect") is not None else None
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
    """`contract.parties`: every role present in the output, null when absent."""
    raw = _obj(value, "contract.parties", CONTRACT_PARTY_ROLES)
    parties: dict[str, Any] = {}
    for role in CONTRACT_PARTY_ROLES:
        entry = raw.get(role)
        if entry is None:
            parties[role] = None
            continue
        e = _obj(entry, f"contract.parties.{role}", ("partyId", "requiresSignature"))
        parties[role] = {
            "partyId": _opt_str(e.get("partyId"), f"contract.parties.{role}.partyId"),
            "requiresSignature": _opt_bool(
                e.get("requiresSignature"), f"contract.parties.{role}.requiresSignature"
            ),
        }
    return parties


def _normalize_connect(value: Any) -> dict[str, Any]:
    raw = _obj(value, "contract.connect", ("enabled", "splitPlan"))
    enabled = raw.get("enabled")
    if type(enabled) is not bool:
        raise _bad("contract.connect.enabled", "must be a boolean")
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
    """The normalized split plan when `connect.enabled is True` and a plan exists, else None."""
    if not doc:
        return None
    connect = doc.get("connect")
    if type(connect) is not dict or connect.get("enabled") is not True or connect.get("splitPlan") is None:
        return None
    return normalize_split_plan(connect["splitPlan"])


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
    `compileContractPolicyTemplate`: `policies` as the document gives it (null when absent), `connect.enabled` true
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
    s = _obj(snapshot, "policySnapshot", _POLICY_SNAPSHOT_KEYS)
    return {k: s.get(k) for k in _POLICY_SNAPSHOT_KEYS}


def policy_snapshot_hash(snapshot: Mapping[str, Any]) -> str:
    return canonical_hash(normalize_policy_snapshot(snapshot))
