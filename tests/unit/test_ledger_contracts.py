"""ContractDocument.v1 / SplitPlan.v1 validation and hashing; allocations with contracts and split plans."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from settlekit.events.canonical import canonical_hash
from settlekit.jobs import process_job_events
from settlekit.ledger import (
    ContractInvalid,
    allocate_split,
    allocations_for_entry,
    compile_contract_policy,
    contract_hash,
    contract_split_plan_hash,
    executable_split_plan,
    legacy_contract_hash,
    normalize_contract_document,
    normalize_split_plan,
    split_plan_hash,
)
from settlekit.ledger.contracts import SPLIT_PLAN_EXECUTION_RULE
from support.streams import (
    OPERATOR_ACTOR,
    ROBOT_ACTOR,
    StreamBuilder,
    booking_payload,
    lifecycle_to_executing,
)

PLAN = {
    "type": "SplitPlan.v1",
    "v": 1,
    "currency": "USD",
    "rules": [
        {
            "partyRole": "operator",
            "partyId": "pty_fleet_a",
            "share": {"type": "percentage", "valueBasisPoints": 7000},
        },
        {"partyRole": "subcontractor", "partyId": "pty_dev", "share": {"type": "fixed", "valueCents": 100}},
        {"partyRole": "operator", "share": {"type": "remainder"}},
    ],
}
DOC = {
    "type": "ContractDocument.v1",
    "v": 1,
    "contractId": "ctr_1",
    "contractVersion": 2,
    "name": "Fleet A",
    "parties": {"operator": {"partyId": "pty_fleet_a_main", "requiresSignature": True}},
    "policies": {
        "creditPolicy": {"enabled": True, "defaultAmountCents": 500, "maxAmountCents": 2000, "currency": "USD"},
        "evidencePolicy": {"retentionDays": 30},
        "slaOverridesByEnvironmentTier": {"ENV_IN_HOME": {"maxStallMs": 60000}},
    },
    "connect": {"enabled": True, "splitPlan": PLAN},
}


def test_split_plan_normalization_and_hash() -> None:
    norm = normalize_split_plan(PLAN)
    assert norm["rules"][2] == {
        "partyRole": "operator",
        "partyId": None,
        "share": {"type": "remainder"},
        "appliesTo": None,
    }
    assert split_plan_hash(PLAN) == canonical_hash(PLAN) != canonical_hash(norm)  # the plan as given, as settld
    explicit = copy.deepcopy(PLAN)
    explicit["rules"][2]["partyId"] = None
    assert split_plan_hash(explicit) == canonical_hash(explicit) != split_plan_hash(PLAN)  # null is not absent
    changed = copy.deepcopy(PLAN)
    changed["rules"][0]["share"]["valueBasisPoints"] = 6999
    assert split_plan_hash(changed) != split_plan_hash(PLAN)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.update(type="SplitPlan.v2"),
        lambda p: p.update(currency="EUR"),
        lambda p: p.update(rules=[]),
        lambda p: p.update(extra=1),
        lambda p: p["rules"][0].update(partyRole="bank"),
        lambda p: p["rules"][0]["share"].update(valueBasisPoints=10001),
        lambda p: p["rules"][0]["share"].update(valueBasisPoints=True),
        lambda p: p["rules"][1]["share"].update(valueCents=-1),
        lambda p: p["rules"][0].update(appliesTo="everything"),
        lambda p: p["rules"].append({"partyRole": "platform", "share": {"type": "remainder"}}),
        lambda p: p["rules"].append(
            {"partyRole": "platform", "share": {"type": "percentage", "valueBasisPoints": 3001}}
        ),
    ],
)
def test_split_plan_rejections(mutate: Any) -> None:
    plan = copy.deepcopy(PLAN)
    mutate(plan)
    with pytest.raises(ContractInvalid) as exc:
        normalize_split_plan(plan)
    assert exc.value.status == 400


def test_contract_document_normalization_and_hash() -> None:
    norm = normalize_contract_document(DOC)
    assert norm["scope"] is None and norm["effective"] is None
    assert (
        norm["parties"]["platform"] is None and norm["parties"]["operator"]["partyId"] == "pty_fleet_a_main"
    )
    # settld hashes the document as given: omitted optional keys stay omitted (03-ledger.md §10 says otherwise)
    assert contract_hash(DOC) == canonical_hash(DOC) != canonical_hash(norm)
    assert legacy_contract_hash(DOC) == canonical_hash(norm)
    # the normalized form fills in null where settld takes none (a party, scope, effective): not a document it stores
    with pytest.raises(ContractInvalid):
        contract_hash(norm)
    full = {**DOC, "parties": {role: {"partyId": f"pty_{role}", "requiresSignature": False}
                               for role in ("platform", "operator", "customer")},
            "scope": {"siteId": "site_1", "isDefault": False}, "effective": {"from": "2026-01-01"}}
    assert contract_hash(normalize_contract_document(full)) == legacy_contract_hash(full) != contract_hash(full)
    assert contract_split_plan_hash(DOC) == canonical_hash(PLAN) == split_plan_hash(PLAN)
    disabled = {**DOC, "connect": {"enabled": False, "splitPlan": PLAN}}
    assert contract_split_plan_hash(disabled) is None
    template, policy_hash, compiler = compile_contract_policy(DOC)
    assert template == {"schemaVersion": "ContractPolicyTemplate.v1", "contractId": "ctr_1", "contractVersion": 2,
                        "policies": DOC["policies"],
                        "connect": {"enabled": True, "splitPlanHash": split_plan_hash(PLAN)}}
    assert policy_hash == canonical_hash(template) and compiler == "contract_compiler.v1"


@pytest.mark.parametrize("connect", [None, {"enabled": False}, {"enabled": False, "splitPlan": PLAN},
                                     {"enabled": True}, {"enabled": True, "splitPlan": None}])
def test_policy_template_without_an_enabled_plan_has_no_split_plan_hash(connect: Any) -> None:
    """settld's compiler hashes the plan only when connect is enabled and a plan is given; a document without
    connect compiles to `enabled: false`."""
    doc = {k: v for k, v in DOC.items() if k != "connect"}
    if connect is not None:
        doc["connect"] = connect
    template, policy_hash, _ = compile_contract_policy(doc)
    enabled = connect is not None and connect["enabled"]
    assert template["connect"] == {"enabled": enabled, "splitPlanHash": None}
    assert template["policies"] == DOC["policies"] and policy_hash == canonical_hash(template)


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path (`...` removes the key), making the objects on the way."""
    *parents, last = path.split(".")
    for key in parents:
        doc = doc.setdefault(key, {})
    if value is ...:
        doc.pop(last, None)
    else:
        doc[last] = value


_PROOF = "policies.proofPolicy"
_COVERAGE = "policies.coveragePolicy"
_FULL_COVERAGE = {"required": True, "responseSlaSeconds": 0, "includedAssistSeconds": 0,
                  "overageRateCentsPerMinute": 0}


@pytest.mark.parametrize(
    ("edits", "field"),
    [
        ({"unknown": 1}, "contract.unknown"),
        ({"type": "Contract"}, "contract.type"),
        ({"contractVersion": 0}, "contract.contractVersion"),
        ({"contractVersion": 1.5}, "contract.contractVersion"),
        ({"contractId": ""}, "contract.contractId"),
        # settld requires a name, and policies that its policy checks take
        ({"name": ...}, "contract.name"),
        ({"name": None}, "contract.name"),
        ({"name": " \u3000"}, "contract.name"),
        ({"policies": ...}, "contract.policies"),
        ({"policies": None}, "contract.policies"),
        ({"policies": {"sla": {"maxStallMs": 1}}}, "contract.policies.sla"),
        ({"policies.creditPolicy": ...}, "contract.policies.creditPolicy"),
        ({"policies.evidencePolicy": {}}, "contract.policies.evidencePolicy.retentionDays"),
        ({"policies.evidencePolicy.retentionDays": -0.0}, "contract.policies.evidencePolicy.retentionDays"),
        ({"policies.creditPolicy.defaultAmountCents": 2001}, "contract.policies.creditPolicy.defaultAmountCents"),
        ({"policies.creditPolicy.currency": "EUR"}, "contract.policies.creditPolicy.currency"),
        ({"policies.creditPolicy.ladder": [{"latenessMsGte": 5, "amountCents": 1},
                                           {"latenessMsGte": 5, "amountCents": 2}]},
         "contract.policies.creditPolicy.ladder[1].latenessMsGte"),
        ({"policies.creditPolicy.ladder": [{"latenessMsGte": 0, "amountCents": 2001}]},
         "contract.policies.creditPolicy.ladder[0].amountCents"),
        ({"policies.slaOverridesByEnvironmentTier": {"ENV_MARS": {}}},
         "contract.policies.slaOverridesByEnvironmentTier.ENV_MARS"),
        ({"policies.slaOverridesByEnvironmentTier.ENV_IN_HOME.maxStallMs": 0},
         "contract.policies.slaOverridesByEnvironmentTier.ENV_IN_HOME.maxStallMs"),
        ({"policies.slaOverridesByEnvironmentTier.ENV_IN_HOME.mustStartWithinWindow": None},
         "contract.policies.slaOverridesByEnvironmentTier.ENV_IN_HOME.mustStartWithinWindow"),
        ({f"{_PROOF}.gateMode": "loose"}, f"contract.{_PROOF}.gateMode"),
        ({f"{_PROOF}.zoneCoverage.allowExtraZones": None}, f"contract.{_PROOF}.zoneCoverage.allowExtraZones"),
        ({f"{_PROOF}.zoneCoverage.excuseIncidentTypes": [" "]},
         f"contract.{_PROOF}.zoneCoverage.excuseIncidentTypes[0]"),
        ({f"{_PROOF}.disputeWindowDays": 366}, f"contract.{_PROOF}.disputeWindowDays"),
        ({"policies.claimPolicy": None}, "contract.policies.claimPolicy"),
        ({_COVERAGE: {**_FULL_COVERAGE, "creditFundingModel": "INSURER_RECOVERABLE"}},
         f"contract.{_COVERAGE}.insurerId"),
        ({_COVERAGE: {**_FULL_COVERAGE, "coverageTierId": ""}}, f"contract.{_COVERAGE}.coverageTierId"),
        ({_COVERAGE: {"required": True}}, f"contract.{_COVERAGE}.responseSlaSeconds"),
        # null where settld takes only an object, a boolean or a non-blank string
        ({"parties": None}, "contract.parties"),
        ({"parties.customer": None}, "contract.parties.customer"),
        ({"parties.bank": {"partyId": "x", "requiresSignature": False}}, "contract.parties.bank"),
        ({"parties.operator.partyId": " "}, "contract.parties.operator.partyId"),
        ({"parties.operator.partyId": ...}, "contract.parties.operator.partyId"),
        ({"parties.operator.requiresSignature": ...}, "contract.parties.operator.requiresSignature"),
        ({"scope": None}, "contract.scope"),
        ({"scope.isDefault": None}, "contract.scope.isDefault"),
        ({"scope.isDefault": "no"}, "contract.scope.isDefault"),
        ({"scope.siteId": ""}, "contract.scope.siteId"),
        ({"effective": None}, "contract.effective"),
        ({"effective.from": ""}, "contract.effective.from"),
        ({"effective.to": "soon"}, "contract.effective.to"),
        ({"effective.to": "2026-01-01T25:00:00Z"}, "contract.effective.to"),
        ({"connect": None}, "contract.connect"),
        ({"connect": {"enabled": "yes"}}, "contract.connect.enabled"),
        ({"connect.splitPlan.rules": [{"partyRole": "operator", "partyId": "", "share": {"type": "remainder"}}]},
         "splitPlan.rules[0].partyId"),
    ],
)
def test_contract_rejections_name_the_field(edits: dict[str, Any], field: str) -> None:
    doc = copy.deepcopy(DOC)
    for path, value in edits.items():
        _set(doc, path, value)
    with pytest.raises(ContractInvalid) as exc:
        normalize_contract_document(doc)
    assert exc.value.code == "CONTRACT_INVALID" and exc.value.status == 400
    assert exc.value.details["path"] == field and str(exc.value).startswith(f"CONTRACT_INVALID: {field} ")
    assert "rule" not in exc.value.details  # settld refuses these too


@pytest.mark.parametrize(
    "edits",
    [
        {"contractVersion": 2.0, "v": 1.0},  # integral doubles are integers to JavaScript
        {"policies.evidencePolicy.retentionDays": 30.0, "connect.splitPlan.rules.0": None},
        {"name": "\u200b"},  # not white space to JavaScript's trim
        {f"{_PROOF}": None},
        {f"{_PROOF}.gateMode": None, f"{_PROOF}.zoneCoverage": None, f"{_PROOF}.disputeWindowDays": None,
         f"{_PROOF}.allowReproofAfterSettlementWithinDisputeWindow": None},  # settld's defaults apply
        {"policies.creditPolicy": {"enabled": True, "defaultAmountCents": 3000, "maxAmountCents": 0,
                                   "currency": "USD", "ladder": None}},  # no cap when the maximum is 0
        {_COVERAGE: {**_FULL_COVERAGE, "creditFundingModel": "INSURER_RECOVERABLE", "insurerId": "ins_1",
                     "feeModel": None, "reserveFundPercent": None}},
        {"scope": {}, "effective": {}, "parties": {}},
        {"scope.siteId": None, "effective.from": "Tue, 01 Jan 2026 00:00:00 GMT", "effective.to": "2026"},
    ],
)
def test_settld_accepts_these_and_so_does_settlekit(edits: dict[str, Any]) -> None:
    doc = copy.deepcopy(DOC)
    for path, value in edits.items():
        if path == "connect.splitPlan.rules.0":  # a percentage given as an integral double
            doc["connect"]["splitPlan"]["rules"][0]["share"]["valueBasisPoints"] = 7000.0
            continue
        _set(doc, path, value)
    normalized = normalize_contract_document(doc)
    assert type(normalized["contractVersion"]) is int
    assert contract_hash(doc) == canonical_hash(doc)
    assert normalize_split_plan(doc["connect"]["splitPlan"])["rules"][0]["share"]["valueBasisPoints"] == 7000


@pytest.mark.parametrize(
    "rules",
    [
        [],
        [{"partyRole": "operator", "share": {"type": "fixed", "valueCents": -5}}],
        [{"partyRole": "operator", "share": {"type": "percentage", "valueBasisPoints": 6000}},
         {"partyRole": "platform", "share": {"type": "percentage", "valueBasisPoints": 5000}}],
        [{"partyRole": "operator", "share": {"type": "remainder"}},
         {"partyRole": "platform", "share": {"type": "remainder"}, "appliesTo": "gross"}],
        [{"partyRole": "operator", "share": {"type": "remainder", "valueCents": 5}}],
    ],
)
def test_split_plans_refused_on_purpose_say_so(rules: list[dict[str, Any]]) -> None:
    """settld stores these plans; settlekit executes enabled plans and refuses them, `details.rule` says why."""
    doc = copy.deepcopy(DOC)
    doc["connect"] = {"enabled": False, "splitPlan": {**PLAN, "rules": rules}}
    with pytest.raises(ContractInvalid) as exc:
        normalize_contract_document(doc)
    assert exc.value.details["rule"] == SPLIT_PLAN_EXECUTION_RULE


def test_a_stored_plan_with_a_blank_party_id_still_executes() -> None:
    """settlekit took a blank rule `partyId` before it applied settld's rule; a stored document's plan is not
    validated again when it is executed: the rule pays its role's default party."""
    plan = copy.deepcopy(PLAN)
    plan["rules"][0]["partyId"] = " "
    doc = {**DOC, "connect": {"enabled": True, "splitPlan": plan}}
    with pytest.raises(ContractInvalid):
        normalize_contract_document(doc)
    assert executable_split_plan(doc) is not None and contract_split_plan_hash(doc) == canonical_hash(plan)
    result = process_job_events(None, _settled_events())
    settled = result.ledger_entries[-1]["entry"]
    allocs = allocations_for_entry(settled, result.snapshot, contract_doc=doc, execute_split_plan=True)
    owner = {a["partyId"] for a in allocs if a["accountId"] == "acct_owner_payable"}
    assert owner == {"pty_fleet_a_main", "pty_dev"}  # the 70 % rule's blank id: the operator's default party


def _rules(draw_rules: list[tuple[str, int]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, value in draw_rules:
        if kind == "percentage":
            out.append(
                {
                    "partyRole": "operator",
                    "partyId": f"p{len(out)}",
                    "share": {"type": "percentage", "valueBasisPoints": value},
                }
            )
        elif kind == "fixed":
            out.append(
                {
                    "partyRole": "operator",
                    "partyId": f"p{len(out)}",
                    "share": {"type": "fixed", "valueCents": value},
                }
            )
        else:
            out.append({"partyRole": "operator", "partyId": f"p{len(out)}", "share": {"type": "remainder"}})
    return out


@given(
    amount=st.integers(min_value=-(10**12), max_value=10**12),
    rules=st.lists(
        st.tuples(
            st.sampled_from(["percentage", "fixed", "remainder"]), st.integers(min_value=0, max_value=10000)
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_allocate_split_never_loses_a_cent(amount: int, rules: list[tuple[str, int]]) -> None:
    plan_rules = _rules(rules)
    assume(sum(v for k, v in rules if k == "percentage") <= 10000)
    assume(sum(1 for k, _ in rules if k == "remainder") <= 1)
    normalize_split_plan({"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": plan_rules})
    split = allocate_split(amount, plan_rules)
    assert sum(share for _, share in split) == amount
    assert all(share != 0 for _, share in split)
    assert all((share > 0) == (amount > 0) for _, share in split)


def test_allocate_split_rounding_rule() -> None:
    thirds = _rules([("percentage", 3333), ("percentage", 3333), ("percentage", 3334)])
    assert [s for _, s in allocate_split(100, thirds)] == [33, 33, 34]
    assert [s for _, s in allocate_split(101, thirds)] == [34, 33, 34]
    partial = _rules([("percentage", 5000)])
    split = allocate_split(101, partial)
    assert [s for _, s in split] == [50, 51] and split[1][0] == {}  # leftover to the default party
    with_fixed = _rules([("fixed", 150), ("percentage", 5000), ("remainder", 0)])
    assert [s for _, s in allocate_split(-1000, with_fixed)] == [-150, -425, -425]


def _settled_events() -> list[dict[str, Any]]:
    b = StreamBuilder()
    lifecycle_to_executing(b, booking=booking_payload())
    b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    return b.events


def test_contract_party_ids_override_defaults() -> None:
    result = process_job_events(None, _settled_events(), contract_doc=DOC)
    owner = [a for a in result.allocations if a["accountId"] == "acct_owner_payable"]
    assert [a["partyId"] for a in owner] == ["pty_fleet_a_main"]
    escrow = [a for a in result.allocations if a["accountId"] == "acct_customer_escrow"]
    assert {a["partyId"] for a in escrow} == {"pty_customer:cust_1"}


def test_split_plan_execution_divides_operator_payouts() -> None:
    result = process_job_events(None, _settled_events())
    settled = result.ledger_entries[-1]["entry"]
    owner_posting = next(p for p in settled["postings"] if p["accountId"] == "acct_owner_payable")
    allocs = allocations_for_entry(settled, result.snapshot, contract_doc=DOC, execute_split_plan=True)
    owner = [a for a in allocs if a["accountId"] == "acct_owner_payable"]
    assert sum(a["amountCents"] for a in owner) == owner_posting["amountCents"]
    by_party = {a["partyId"]: a["amountCents"] for a in owner}
    left = -owner_posting["amountCents"] - 100
    assert by_party["pty_dev"] == -100
    assert by_party["pty_fleet_a"] == -(left * 7000 // 10000)
    assert by_party["pty_fleet_a_main"] == owner_posting["amountCents"] + 100 + left * 7000 // 10000
    # every posting's allocations sum to the posting
    for i, posting in enumerate(settled["postings"]):
        assert sum(a["amountCents"] for a in allocs if a["postingId"] == f"p{i}") == posting["amountCents"]
    # without connect.enabled the plan is not executed
    plain = allocations_for_entry(
        settled, result.snapshot, contract_doc={**DOC, "connect": {"enabled": False}}, execute_split_plan=True
    )
    assert len(plain) == len(settled["postings"])
