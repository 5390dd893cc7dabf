"""Contract-document hashes against the settld 0.1.0 reference (a tool, not collected by pytest).

Generates ContractDocument.v1 documents that take every optional key present, absent and null (parties and each
role, scope and each of its keys, effective and its dates, policies with and without their optional policies,
connect enabled and disabled, with and without a split plan, plan rules with and without `partyId` and
`appliesTo`), and some that settld or settlekit refuses: about a third get one or two edits from EDITS, one per
refusal rule of settld's validator (its legacy policy validator included) and of settlekit's split-plan rules, and
some values settld takes that a stricter reading might not (integral doubles such as `2.0`, `-0`, dates only
`Date.parse` reads); about 800 documents take every edit at least once. Then it hashes each with the reference
under node (contract_hashes.mjs: its validator, `hashContractDocumentV1`, `hashSplitPlanV1` of the document's plan
and `compileContractPolicyTemplate`) and with settlekit (`contract_hash`, `split_plan_hash`,
`compile_contract_policy`). Prints every difference in the hashes and a tally of the documents only one side
accepts (exit 1 if any hash differs or one side alone takes a document other than a split plan settlekit refuses
on purpose); `--vendor FILE` writes the documents with the reference's answers
(tests/vectors/reference_runs/contract_hashes.json.gz).

    python tests/reference/contract_hashes.py SETTLD_DIR [--documents 1000] [--seed 1] [--vendor BUNDLE.json.gz]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from settlekit.errors import SettlekitError  # noqa: E402
from settlekit.events.canonical import parse_json  # noqa: E402
from settlekit.ledger.contracts import (  # noqa: E402
    SPLIT_PLAN_EXECUTION_RULE,
    compile_contract_policy,
    contract_hash,
    split_plan_hash,
)

REFERENCE = "settld 0.1.0 (commit 7fcd6f0), tests/reference/contract_hashes.mjs under node"
ABSENT = object()
CREDIT = {"enabled": True, "defaultAmountCents": 500, "maxAmountCents": 2000, "currency": "USD",
          "ladder": [{"latenessMsGte": 0, "amountCents": 100}, {"latenessMsGte": 60000, "amountCents": 500}]}
OPTIONAL_POLICIES: dict[str, list[Any]] = {
    "slaOverridesByEnvironmentTier": [{}, {"ENV_MANAGED_BUILDING": {"maxStallMs": 60000}},
                                      {"ENV_IN_HOME": {"mustStartWithinWindow": True, "maxExecutionMs": 3600000}}],
    "proofPolicy": [None, {}, {"gateMode": "strict"},
                    {"gateMode": "holdback", "zoneCoverage": {"thresholdPct": 90, "allowExtraZones": False},
                     "insufficientEvidenceBehavior": {"mode": "HOLD_PERCENT", "holdPercent": 20},
                     "disputeWindowDays": 7}],
    "claimPolicy": [{"currency": "USD", "autoApproveThresholdCents": 1000, "maxPayoutCents": 50000,
                     "reservePercent": 10}],
    "coveragePolicy": [{"required": False, "responseSlaSeconds": 0, "includedAssistSeconds": 0,
                        "overageRateCentsPerMinute": 0},
                       {"required": True, "coverageTierId": None, "feeModel": "PER_JOB", "feeCentsPerJob": 300,
                        "insurerId": "ins_1", "recoverablePercent": 50, "responseSlaSeconds": 60,
                        "includedAssistSeconds": 120, "overageRateCentsPerMinute": 30}],
}
ROLES = ("platform", "operator", "customer")
SCOPE_STRINGS = ("customerId", "siteId", "templateId", "zoneId", "skillId")
SHARES: list[dict[str, Any]] = [{"type": "percentage", "valueBasisPoints": 2500},
                                {"type": "percentage", "valueBasisPoints": 0},
                                {"type": "fixed", "valueCents": 150}, {"type": "remainder"}]


def _maybe(rnd: random.Random, value: Any, *, absent: float = 0.35, null: float = 0.2) -> Any:
    """`value`, or ABSENT, or None."""
    r = rnd.random()
    return ABSENT if r < absent else None if r < absent + null else value


def _put(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is not ABSENT:
        obj[key] = value


def policies(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.03:
        return rnd.choice([ABSENT, None, {}])  # settld refuses these: it requires credit and evidence policies
    out: dict[str, Any] = {"creditPolicy": copy.deepcopy(CREDIT) if rnd.random() < 0.5 else
                           {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0, "currency": "USD",
                            **({"ladder": None} if rnd.random() < 0.3 else {})},
                           "evidencePolicy": {"retentionDays": rnd.choice([0, 30, 365])}}
    for key, choices in OPTIONAL_POLICIES.items():
        if rnd.random() < 0.4:
            out[key] = copy.deepcopy(rnd.choice(choices))
    return {k: out[k] for k in rnd.sample(list(out), len(out))}  # key order is irrelevant to canonical JSON


def split_rule(rnd: random.Random, i: int) -> dict[str, Any]:
    rule: dict[str, Any] = {"partyRole": rnd.choice(("platform", "operator", "customer", "subcontractor",
                                                     "insurer"))}
    _put(rule, "partyId", _maybe(rnd, f"pty_rule_{i}"))
    rule["share"] = copy.deepcopy(SHARES[i % len(SHARES)])
    _put(rule, "appliesTo", _maybe(rnd, rnd.choice(("gross", "net_after_credits", "credits"))))
    return rule


def split_plan(rnd: random.Random) -> dict[str, Any]:
    rules = [split_rule(rnd, i) for i in range(rnd.randint(1, 4))]
    plan: dict[str, Any] = {"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": rules}
    r = rnd.random()
    if r < 0.04:
        plan["rules"] = []  # settld takes an empty list; settlekit refuses it
    elif r < 0.08:
        plan["currency"] = "EUR"
    elif r < 0.1:
        plan["rules"][0]["share"] = {"type": "fixed", "valueCents": -5}  # settld takes any safe integer
    return plan


def connect(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.3:
        return ABSENT
    if r < 0.32:
        return None  # settld refuses a null connect
    out: dict[str, Any] = {"enabled": rnd.random() < 0.6}
    p = rnd.random()
    if p < 0.55:
        out["splitPlan"] = split_plan(rnd)
    elif p < 0.7:
        out["splitPlan"] = None
    return out


def parties(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.3:
        return ABSENT
    if r < 0.33:
        return None  # settld refuses a null parties object
    out: dict[str, Any] = {}
    for role in ROLES:
        p = rnd.random()
        if p < 0.45:
            continue
        if p < 0.48:
            out[role] = None  # settld refuses a null party
        elif p < 0.52:
            out[role] = {"partyId": f"pty_{role}_x"}  # settld requires requiresSignature
        else:
            out[role] = {"partyId": f"pty_{role}_{rnd.randint(1, 9)}", "requiresSignature": rnd.random() < 0.5}
    return out


def scope(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.35:
        return ABSENT
    if r < 0.38:
        return None
    out: dict[str, Any] = {}
    for key in SCOPE_STRINGS:
        _put(out, key, _maybe(rnd, f"{key[:-2]}_{rnd.randint(1, 5)}"))
    is_default = rnd.random()
    if is_default < 0.5:
        out["isDefault"] = is_default < 0.25
    elif is_default < 0.53:
        out["isDefault"] = None  # settld refuses a null isDefault
    return out


def effective(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.4:
        return ABSENT
    if r < 0.43:
        return None
    out: dict[str, Any] = {}
    _put(out, "from", _maybe(rnd, "2026-01-01T00:00:00.000Z"))
    _put(out, "to", _maybe(rnd, rnd.choice(["2026-12-31T23:59:59.999Z", "2027-06-30"] * 4 + ["soon"])))
    return out


def document(rnd: random.Random, n: int) -> dict[str, Any]:
    contract_id = f"ctr_{n}" if rnd.random() < 0.97 else rnd.choice(["\x1c", "\ufeff", " ctr_padded "])
    doc: dict[str, Any] = {"type": "ContractDocument.v1", "v": 1, "contractId": contract_id,
                           "contractVersion": rnd.choice([1, 2, 7, 2**53 - 1])}
    name = rnd.random()
    if name < 0.85:
        doc["name"] = f"Contract {n}"
    elif name < 0.95:
        doc["name"] = rnd.choice(["Contrat ünï", "合同 \u2028", "emoji \U0001f680", 'quote " \\ tab\t'])
    elif name < 0.975:
        doc["name"] = None  # settld requires a name
    for key, make in (("parties", parties), ("scope", scope), ("policies", policies), ("effective", effective),
                      ("connect", connect)):
        _put(doc, key, make(rnd))
    return {k: doc[k] for k in rnd.sample(list(doc), len(doc))}


DELETE = object()
PLAN = {"type": "SplitPlan.v1", "v": 1, "currency": "USD",
        "rules": [{"partyRole": "operator", "share": {"type": "percentage", "valueBasisPoints": 2500}},
                  {"partyRole": "platform", "share": {"type": "remainder"}}]}
PROOF = {"gateMode": "holdback",
         "zoneCoverage": {"thresholdPct": 90, "allowExtraZones": False, "excuseIncidentTypes": ["BLOCKED_ZONE"]},
         "insufficientEvidenceBehavior": {"mode": "HOLD_PERCENT", "holdPercent": 20}, "disputeWindowDays": 7,
         "allowReproofAfterSettlementWithinDisputeWindow": False}
COVERAGE = {"required": True, "coverageTierId": "tier_1", "feeModel": "PER_JOB", "feeCentsPerJob": 300,
            "creditFundingModel": "PLATFORM_EXPENSE", "reserveFundPercent": 100, "insurerId": "ins_1",
            "recoverablePercent": 50, "recoverableTerms": "net 30", "responseSlaSeconds": 60,
            "includedAssistSeconds": 120, "overageRateCentsPerMinute": 30}
# what an edit puts at a path that is missing (or not an object) before it sets a key below it
BASES: dict[tuple[str, ...], Any] = {
    ("parties",): {}, ("parties", "operator"): {"partyId": "pty_operator_1", "requiresSignature": False},
    ("scope",): {}, ("effective",): {}, ("connect",): {"enabled": True}, ("connect", "splitPlan"): PLAN,
    ("policies",): {"creditPolicy": CREDIT, "evidencePolicy": {"retentionDays": 30}},
    ("policies", "creditPolicy"): CREDIT, ("policies", "evidencePolicy"): {"retentionDays": 30},
    ("policies", "proofPolicy"): PROOF, ("policies", "proofPolicy", "zoneCoverage"): PROOF["zoneCoverage"],
    ("policies", "proofPolicy", "insufficientEvidenceBehavior"): PROOF["insufficientEvidenceBehavior"],
    ("policies", "claimPolicy"): OPTIONAL_POLICIES["claimPolicy"][0], ("policies", "coveragePolicy"): COVERAGE,
    ("policies", "slaOverridesByEnvironmentTier"): {},
    ("policies", "slaOverridesByEnvironmentTier", "ENV_IN_HOME"): {"mustStartWithinWindow": True,
                                                                    "maxStallMs": 1000, "maxExecutionMs": 2000},
}


def _rules(*rules: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    return [(("connect", "splitPlan", "rules"), list(rules))]


def _pct(role: str, bps: Any, **more: Any) -> dict[str, Any]:
    return {"partyRole": role, "share": {"type": "percentage", "valueBasisPoints": bps}, **more}


def _each(path: tuple[str, ...], *values: Any) -> list[list[tuple[tuple[str, ...], Any]]]:
    return [[(path, v)] for v in values]


_CREDIT = ("policies", "creditPolicy")
_LADDER = (*_CREDIT, "ladder")
_EVIDENCE = ("policies", "evidencePolicy")
_SLA = ("policies", "slaOverridesByEnvironmentTier")
_HOME = (*_SLA, "ENV_IN_HOME")
_PROOF = ("policies", "proofPolicy")
_ZONES = (*_PROOF, "zoneCoverage")
_IEB = (*_PROOF, "insufficientEvidenceBehavior")
_CLAIM = ("policies", "claimPolicy")
_COVERAGE = ("policies", "coveragePolicy")
_DATES = ("", " ", "2026-13-01", "2026-02-30", "2026-01-01T25:00:00Z", "Tue, 01 Jan 2026 00:00:00 GMT", "2026",
          "January 5, 2026", "+275760-09-13T00:00:00.000Z", "+275760-09-13T00:00:00.001Z", "not a date 2026",
          20260101)
# Each edit is a list of (path, value) settings (DELETE removes the key). One or more per refusal rule of settld's
# validator, values at and beside each boundary, and settlekit's deliberate split-plan refusals.
EDITS: list[list[tuple[tuple[str, ...], Any]]] = [
    *_each(("name",), " ", "", "\u3000", "\ufeff", "\u200b", 5, DELETE),
    *_each(("contractVersion",), 2.0, -0.0, 1.5, 0),
    *_each(("v",), 1.0),
    *_each(("parties",), []),
    *_each(("parties", "customer"), [], "pty_customer"),
    *_each(("parties", "insurer"), {"partyId": "pty_insurer", "requiresSignature": True}),
    *_each(("parties", "operator", "partyId"), " ", "", "\u00a0", 7, DELETE, "\u200b"),
    *_each(("parties", "operator", "requiresSignature"), None, "true", 0, DELETE),
    *_each(("parties", "operator", "role"), "x"),
    *_each(("scope",), []),
    *_each(("scope", "siteId"), "", " ", 5, "\t"),
    *_each(("scope", "customerId"), ""), *_each(("scope", "templateId"), "\n"),
    *_each(("scope", "zoneId"), " "), *_each(("scope", "skillId"), ""),
    *_each(("scope", "isDefault"), "yes", 0),
    *_each(("scope", "region"), "eu"),
    *_each(("effective",), []), *_each(("effective", "until"), "2026-01-01"),
    *_each(("effective", "from"), *_DATES), *_each(("effective", "to"), *_DATES),
    *_each(("connect",), []), *_each(("connect", "enabled"), None, "true", DELETE),
    *_each(("connect", "extra"), 1), *_each(("connect", "splitPlan"), [], "plan"),
    *_each(("connect", "splitPlan", "v"), 1.0, 2), *_each(("connect", "splitPlan", "currency"), "usd", ""),
    _rules({"partyRole": "operator", "partyId": "", "share": {"type": "remainder"}}),
    _rules({"partyRole": "operator", "partyId": " ", "share": {"type": "remainder"}}),
    _rules({"partyRole": "", "share": {"type": "remainder"}}),
    _rules({"partyRole": "operator", "share": {"type": "remainder"}, "appliesTo": ""}),
    _rules(_pct("operator", 2500.0)), _rules(_pct("operator", -0.0)), _rules(_pct("operator", 10000.5)),
    _rules({"partyRole": "operator", "share": {"type": "fixed", "valueCents": 150.0}}),
    _rules({"partyRole": "operator", "share": {"type": "fixed", "valueCents": -0.0}}),
    _rules({"partyRole": "operator", "share": {"type": "fixed", "valueCents": 2**53}}),
    _rules({"partyRole": "operator", "share": {"type": "fixed"}}),
    _rules({"partyRole": "operator", "share": {"type": "share"}}),
    _rules({"partyRole": "operator", "share": {"type": "remainder", "note": "x"}}),
    # settlekit executes enabled plans: these settld stores and settlekit refuses, on purpose
    _rules(_pct("operator", 6000), _pct("platform", 5000)),
    _rules(_pct("operator", 6000), _pct("platform", 5000, appliesTo="credits")),
    _rules({"partyRole": "operator", "share": {"type": "remainder"}},
           {"partyRole": "platform", "share": {"type": "remainder"}, "appliesTo": "gross"}),
    _rules({"partyRole": "operator", "share": {"type": "remainder"}},
           {"partyRole": "platform", "share": {"type": "remainder"}, "appliesTo": "credits"}),
    _rules({"partyRole": "operator", "share": {"type": "percentage", "valueBasisPoints": 100, "valueCents": 5}}),
    _rules({"partyRole": "operator", "share": {"type": "remainder", "valueCents": 5}}),
    *_each(("policies",), []), *_each(("policies", "sla"), {}),
    *_each(_CREDIT, DELETE, None, []), *_each((*_CREDIT, "extra"), 1),
    *_each((*_CREDIT, "enabled"), DELETE, "yes", None),
    *_each((*_CREDIT, "defaultAmountCents"), -1, 1.5, None, DELETE, 500.0, -0.0, 2**53),
    *_each((*_CREDIT, "maxAmountCents"), -1, DELETE, 2000.0),
    *_each((*_CREDIT, "currency"), "EUR", "", DELETE, "usd"),
    *_each(_CREDIT, {"enabled": True, "defaultAmountCents": 3000, "maxAmountCents": 2000, "currency": "USD"},
           {"enabled": True, "defaultAmountCents": 3000, "maxAmountCents": 0, "currency": "USD"},
           {"enabled": True, "defaultAmountCents": 2000, "maxAmountCents": 2000, "currency": "USD"},
           {**CREDIT, "ladder": [{"latenessMsGte": 0, "amountCents": 5000}]},
           {**CREDIT, "maxAmountCents": 0, "defaultAmountCents": 0,
            "ladder": [{"latenessMsGte": 0, "amountCents": 5000}]}),
    *_each(_LADDER, None, {}, "x", [], [None], [{"latenessMsGte": 0, "amountCents": 100, "x": 1}],
           [{"latenessMsGte": -1, "amountCents": 1}], [{"latenessMsGte": 0}],
           [{"latenessMsGte": 0, "amountCents": -1}],
           [{"latenessMsGte": 0, "amountCents": 100}, {"latenessMsGte": 0, "amountCents": 200}],
           [{"latenessMsGte": 60000, "amountCents": 100}, {"latenessMsGte": 0, "amountCents": 200}],
           [{"latenessMsGte": 1.0, "amountCents": 5.0}], [{"latenessMsGte": 0.5, "amountCents": 5}]),
    *_each(_EVIDENCE, DELETE, None, []), *_each((*_EVIDENCE, "extra"), 1),
    *_each((*_EVIDENCE, "retentionDays"), DELETE, -1, None, 1.5, 30.0, -0.0, "30"),
    *_each(_SLA, None, [], {"ENV_MARS": {}}, {"": {}}, {"ENV_HOSPITALITY": {}, "ENV_OFFICE_AFTER_HOURS":
                                                         {"maxExecutionMs": 5}}),
    *_each(_HOME, None, []), *_each((*_HOME, "extra"), 1),
    *_each((*_HOME, "mustStartWithinWindow"), None, "y", DELETE),
    *_each((*_HOME, "maxStallMs"), 0, -5, None, 1.5, 1000.0, DELETE),
    *_each((*_HOME, "maxExecutionMs"), 0, None, DELETE),
    *_each(_PROOF, []), *_each((*_PROOF, "extra"), 1),
    *_each((*_PROOF, "gateMode"), "", "loose", None, 5),
    *_each(_ZONES, None, []), *_each((*_ZONES, "extra"), 1),
    *_each((*_ZONES, "thresholdPct"), 101, -1, None, 50.0, "90", 100),
    *_each((*_ZONES, "allowExtraZones"), None, "no", DELETE),
    *_each((*_ZONES, "excuseIncidentTypes"), None, "x", [""], [" "], [5], [], [None]),
    *_each(_IEB, None, []), *_each((*_IEB, "extra"), 1),
    *_each((*_IEB, "mode"), "NOPE", None, "", "BLOCK_EXPORT", "SETTLE_ZERO"),
    *_each((*_IEB, "holdPercent"), 101, None, -1, 20.0, 100),
    *_each((*_PROOF, "disputeWindowDays"), 366, 365, None, -1, 7.5),
    *_each((*_PROOF, "allowReproofAfterSettlementWithinDisputeWindow"), None, "yes", True),
    *_each(_CLAIM, None, []), *_each((*_CLAIM, "extra"), 1),
    *_each((*_CLAIM, "currency"), "EUR", DELETE),
    *_each((*_CLAIM, "autoApproveThresholdCents"), -1, DELETE, None),
    *_each((*_CLAIM, "maxPayoutCents"), -1, DELETE),
    *_each((*_CLAIM, "reservePercent"), 101, -1, 100, None),
    *_each(_COVERAGE, None, []), *_each((*_COVERAGE, "extra"), 1),
    *_each((*_COVERAGE, "required"), DELETE, "yes", None),
    *_each((*_COVERAGE, "coverageTierId"), "", None, " "),
    *_each((*_COVERAGE, "feeModel"), "PER_MONTH", None, ""),
    *_each((*_COVERAGE, "feeCentsPerJob"), -1, None, 1.5),
    *_each((*_COVERAGE, "creditFundingModel"), "X", None, "COVERAGE_RESERVE", "OPERATOR_CHARGEBACK",
           "INSURER_RECOVERABLE"),
    *([((*_COVERAGE, "creditFundingModel"), "INSURER_RECOVERABLE"), ((*_COVERAGE, "insurerId"), v)]
      for v in (None, DELETE, "", "ins_2")),
    *_each((*_COVERAGE, "reserveFundPercent"), 101, None, -1, 50),
    *_each((*_COVERAGE, "recoverablePercent"), -1, 101, None),
    *_each((*_COVERAGE, "recoverableTerms"), "", "terms", None, 7),
    *_each((*_COVERAGE, "responseSlaSeconds"), DELETE, -1, None),
    *_each((*_COVERAGE, "includedAssistSeconds"), -1), *_each((*_COVERAGE, "overageRateCentsPerMinute"), DELETE),
]


def _apply(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set (or with DELETE remove) `path`, putting BASES (else `{}`) where a container on the way is missing."""
    node = doc
    for depth, key in enumerate(path[:-1], start=1):
        if type(node.get(key)) is not dict:
            node[key] = copy.deepcopy(BASES.get(path[:depth], {}))
        node = node[key]
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)


def edited(rnd: random.Random, doc: dict[str, Any], pending: list[Any]) -> dict[str, Any]:
    """About a third of the documents with one or two EDITS applied, taken from `pending`: EDITS shuffled, dealt
    out in turn (refilled when empty), so that about 800 documents take every edit."""
    if rnd.random() < 0.65:
        return doc
    for _ in range(1 if rnd.random() < 0.8 else 2):
        if not pending:
            pending.extend(rnd.sample(EDITS, len(EDITS)))
        for path, value in pending.pop():
            _apply(doc, path, value)
    return doc


def documents(rnd: random.Random, count: int) -> list[dict[str, Any]]:
    pending: list[Any] = []
    return [edited(rnd, document(rnd, n), pending) for n in range(count)]


def _attempt(fn: Any) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except SettlekitError as exc:
        return None, str(exc)


def differences(doc: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """Where settlekit hashes a document, its plan or its template otherwise than the reference. Documents only one
    side accepts are validation differences (`accepted_by`), not listed here."""
    found = []
    mine, _ = _attempt(lambda: contract_hash(doc))
    if theirs["document"]["ok"] and mine is not None and mine != theirs["document"]["contractHash"]:
        found.append("contractHash")
    compiled, _ = _attempt(lambda: compile_contract_policy(doc))
    if theirs["document"]["ok"] and compiled is not None:
        template, policy_hash, _ = compiled
        if policy_hash != theirs["template"]["policyHash"] or template != theirs["template"]["policyTemplate"]:
            found.append("policyHash")
    plan = theirs["splitPlan"]
    if plan is not None and plan["ok"]:
        mine_plan, _ = _attempt(lambda: split_plan_hash(doc["connect"]["splitPlan"]))
        if mine_plan is not None and mine_plan != plan["splitPlanHash"]:
            found.append("splitPlanHash")
    return found


def accepted_by(doc: dict[str, Any], theirs: dict[str, Any]) -> str:
    """both, neither, settlekit only, settld only, or "settld only (split plan)": refused by one of settlekit's
    deliberate split-plan rules (docs/contracts.md, "Which documents are accepted")."""
    try:
        contract_hash(doc)
        refusal: SettlekitError | None = None
    except SettlekitError as exc:
        refusal = exc
    if not theirs["document"]["ok"]:
        return "neither" if refusal is not None else "settlekit only"
    if refusal is None:
        return "both"
    deliberate = refusal.details.get("rule") == SPLIT_PLAN_EXECUTION_RULE
    return "settld only (split plan)" if deliberate else "settld only"


def _reference(settld: str, docs: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    source, answer = work / "documents.json", work / "reference.json"
    source.write_text(json.dumps(docs), encoding="utf-8")
    subprocess.run(["node", str(HERE / "contract_hashes.mjs"), settld, str(source), str(answer)],
                   capture_output=True, text=True, check=True)
    value: list[dict[str, Any]] = parse_json(answer.read_text(encoding="utf-8"))
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld", help="a checkout of settld 0.1.0 (commit 7fcd6f0)")
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vendor", type=Path, help="write the documents with the reference's answers here")
    parser.add_argument("--verbose", action="store_true", help="print every validation difference")
    args = parser.parse_args()
    docs = documents(random.Random(args.seed), args.documents)
    with tempfile.TemporaryDirectory() as work:
        answers = _reference(args.settld, docs, Path(work))
    tally: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    for n, (doc, theirs) in enumerate(zip(docs, answers, strict=True)):
        who = accepted_by(doc, theirs)
        tally[f"accepted by {who}"] += 1
        if who == "settlekit only":
            refusals[f"settld: {theirs['document']['message']}"] += 1
        elif who.startswith("settld only"):
            refusals[f"settlekit: {_attempt(lambda d=doc: contract_hash(d))[1]}"] += 1  # type: ignore[misc]
        if args.verbose and who != "both" and who != "neither":
            print(f"document {n} accepted by {who}: {json.dumps(doc)}")
        found = differences(doc, theirs)
        tally["DIFFERENT" if found else "same hashes"] += 1
        if found:
            print(f"document {n}: {', '.join(found)} differ: {json.dumps(doc)}")
    for reason, count in refusals.most_common():
        print(f"{count:5d}  refused by {reason}")
    print(json.dumps(dict(sorted(tally.items()))))
    if args.vendor:
        cases = [{"document": doc, "settld": theirs} for doc, theirs in zip(docs, answers, strict=True)]
        bundle = {"reference": REFERENCE, "seed": args.seed, "cases": cases}
        args.vendor.write_bytes(gzip.compress(json.dumps(bundle).encode("utf-8"), mtime=0))
        print(f"{len(cases)} documents -> {args.vendor}")
    # the goal: equal hashes, and no document one side takes unless it is a split plan settlekit refuses on purpose
    return 1 if tally["DIFFERENT"] or tally["accepted by settlekit only"] or tally["accepted by settld only"] else 0


if __name__ == "__main__":
    sys.exit(main())
