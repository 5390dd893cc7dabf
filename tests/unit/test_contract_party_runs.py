"""Allocations and artifacts of jobs that pin an operator contract document, against the reference's own outputs
(tests/vectors/reference_runs/contract_parties.json.gz, README there): the document's party ids replace the
defaults for every role, the subcontractor's and the insurer's included, when they are strings JavaScript's
`trim` leaves non-empty."""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import process_job_events
from settlekit.ledger.allocations import allocations_for_entry, contract_party_id, default_party_ids
from settlekit.ledger.contracts import normalize_contract_document
from settlekit.ledger.errors import ContractInvalid

BUNDLE: dict[str, Any] = parse_json(
    gzip.decompress((VECTORS / "reference_runs" / "contract_parties.json.gz").read_bytes()).decode("utf-8"))
RUNS: list[dict[str, Any]] = BUNDLE["runs"]
TENANT: str = BUNDLE["tenantId"]


def _resolver(run: dict[str, Any]) -> Any:
    contracts: dict[str, Any] = run["contracts"]

    def resolve(digest: Any) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = contracts.get(digest) if isinstance(digest, str) else None
        return value
    return resolve


def _allocations_as_settld(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each entry allocated against the job after its event, with the document that job pins (settld's outbox)."""
    resolve = _resolver(run)
    state = None
    out: list[dict[str, Any]] = []
    for event in run["events"]:
        result = process_job_events(state, [event], tenant_id=TENANT, with_allocations=False)
        state = result.state
        doc = resolve(result.snapshot.get("operatorContractHash"))
        for item in result.ledger_entries:
            out.extend(allocations_for_entry(item["entry"], result.snapshot, tenant_id=TENANT, contract_doc=doc))
    return out


@pytest.mark.parametrize("run", RUNS, ids=[f"contract{i}" for i in range(len(RUNS))])
def test_allocations_take_the_pinned_documents_party_ids_as_settld(run: dict[str, Any]) -> None:
    assert canonical_json(_allocations_as_settld(run)) == canonical_json(run["allocations"])


@pytest.mark.parametrize("run", RUNS, ids=[f"contract{i}" for i in range(len(RUNS))])
def test_the_live_pipeline_allocates_as_settld_where_no_split_plan_runs(run: dict[str, Any]) -> None:
    """The append path's entries are settld's, and its allocations (the pinned document resolved per entry) too,
    except where a document has an enabled split plan: the live path executes it (a settlekit extension, README;
    only for a document settlekit stores), and every posting is still allocated exactly its amount."""
    executes_a_plan = any(_has_enabled_plan(doc) for doc in run["contracts"].values())
    # a document with a plan is executed, so it must be one settlekit stores (`contracts add` validates it)
    contracts = ({digest: doc for digest, doc in run["contracts"].items() if _registrable(doc)}
                 if executes_a_plan else run["contracts"])
    result = process_job_events(None, run["events"], tenant_id=TENANT,
                                contract_resolver=_resolver({"contracts": contracts}))
    assert canonical_json(result.ledger_entries) == canonical_json(run["ledgerEntries"])
    if not executes_a_plan:
        assert canonical_json(result.allocations) == canonical_json(run["allocations"])
    assert _per_posting(result.allocations) == _per_posting(run["allocations"])


def _per_posting(allocations: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    """Cents allocated per (entry, posting, account)."""
    sums: dict[tuple[str, str, str], int] = {}
    for a in allocations:
        key = (a["entryId"], a["postingId"], a["accountId"])
        sums[key] = sums.get(key, 0) + a["amountCents"]
    return sums


def _registrable(doc: Any) -> bool:
    """Whether settlekit stores the document (`contracts add` validates it): the live path resolves no other."""
    try:
        normalize_contract_document(doc)
    except ContractInvalid:
        return False
    return True


def _has_enabled_plan(doc: Any) -> bool:
    connect = doc.get("connect") if type(doc) is dict else None
    return type(connect) is dict and connect.get("enabled") is True and connect.get("splitPlan") is not None


@pytest.mark.parametrize("run", RUNS, ids=[f"contract{i}" for i in range(len(RUNS))])
def test_artifacts_with_the_pinned_document_equal_the_reference_byte_for_byte(run: dict[str, Any]) -> None:
    events = run["events"]
    assert derive_outbox(events) == run["artifactOutbox"]
    built = build_all(events, generated_at=BUNDLE["generatedAt"], contract_resolver=_resolver(run))
    assert [canonical_json(a) for a in built] == [canonical_json(a) for a in run["artifacts"]]


def test_the_runs_exercise_every_role_and_javascripts_trim() -> None:
    """The bundle holds allocations to a document's subcontractor and insurer party ids, and ids that only
    JavaScript's `trim` judges (kept: U+001C, U+0085, U+200B; blank: U+FEFF)."""
    by_role: dict[str, set[str]] = {}
    for run in RUNS:
        for a in run["allocations"]:
            by_role.setdefault(a["partyRole"], set()).add(a["partyId"])
    assert any(not p.startswith("pty_subcontractor") for p in by_role["subcontractor"])
    assert any(not p.startswith("pty_insurer") for p in by_role["insurer"])
    ids = set().union(*by_role.values())
    assert {"\x1c", "\x85", "\u200b"} <= ids and "\ufeff" not in ids


def test_the_runs_hash_split_plans_that_leave_out_optional_keys() -> None:
    """Statements of jobs whose enabled plan has a rule without `partyId` or `appliesTo`: settld hashes the plan as
    given, and the bundle's statements carry that hash."""
    def leaves_out_keys(doc: Any) -> bool:
        rules = doc["connect"]["splitPlan"].get("rules", []) if _has_enabled_plan(doc) else []
        return any("partyId" not in r for r in rules)

    hashed = [a["settlement"]["splitPlanHash"] for run in RUNS for doc in run["contracts"].values()
              if leaves_out_keys(doc)
              for a in run["artifacts"] if a.get("artifactType") == "SettlementStatement.v1"]
    assert hashed and all(h is not None for h in hashed)


def test_contract_party_id_reads_any_role_with_javascripts_trim() -> None:
    doc = {"parties": {"insurer": {"partyId": "pty_ins"}, "subcontractor": {"partyId": "\x1c"},
                       "platform": {"partyId": "\ufeff"}, "operator": {"partyId": 7}, "customer": ["pty_c"]}}
    assert contract_party_id(doc, "insurer") == "pty_ins"
    assert contract_party_id(doc, "subcontractor") == "\x1c"
    assert contract_party_id(doc, "platform") is None
    assert contract_party_id(doc, "operator") is None
    assert contract_party_id(doc, "customer") is None
    assert contract_party_id({"parties": [{"partyId": "x"}]}, "platform") is None
    snapshot = {"booking": {"policySnapshot": {"coveragePolicy": {"insurerId": "ins_1"}}}}
    assert default_party_ids(snapshot, doc)["insurer"] == "pty_ins"
    assert default_party_ids(snapshot, None)["insurer"] == "pty_insurer:ins_1"
