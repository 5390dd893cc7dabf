"""Contract-document hashes against the settld 0.1.0 reference (a tool, not collected by pytest).

Generates ContractDocument.v1 documents that take every optional key present, absent and null (parties and each
role, scope and each of its keys, effective and its dates, policies with and without their optional policies,
connect enabled and disabled, with and without a split plan, plan rules with and without `partyId` and
`appliesTo`), and some that settld or settlekit refuses, then hashes each with the reference under node
(contract_hashes.mjs: its validator, `hashContractDocumentV1`, `hashSplitPlanV1` of the document's plan and
`compileContractPolicyTemplate`) and with settlekit (`contract_hash`, `split_plan_hash`, `compile_contract_policy`).
Prints every difference in the hashes and a tally of the documents only one side accepts; `--vendor FILE` writes
the documents with the reference's answers (tests/vectors/reference_runs/contract_hashes.json.gz).

    python tests/reference/contract_hashes.py SETTLD_DIR [--documents 500] [--seed 1] [--vendor BUNDLE.json.gz]
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
from settlekit.ledger.contracts import compile_contract_policy, contract_hash, split_plan_hash  # noqa: E402

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


def documents(rnd: random.Random, count: int) -> list[dict[str, Any]]:
    return [document(rnd, n) for n in range(count)]


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
    mine = _attempt(lambda: contract_hash(doc))[1] is None
    ref = theirs["document"]["ok"]
    return "both" if mine and ref else "settld only" if ref else "settlekit only" if mine else "neither"


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
    parser.add_argument("--documents", type=int, default=500)
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
        elif who == "settld only":
            refusals[f"settlekit: {_attempt(lambda d=doc: contract_hash(d))[1]}"] += 1  # type: ignore[misc]
        if args.verbose and who in ("settlekit only", "settld only"):
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
    return 1 if tally["DIFFERENT"] else 0


if __name__ == "__main__":
    sys.exit(main())
