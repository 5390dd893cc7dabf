"""Contract documents stored per tenant: a job that pins an operator contract with connect.enabled gets its
allocations from the split plan (never losing a cent); without one the defaults apply."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import threading
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.append import job_appender
from settlekit.application.ledger import rebuild
from settlekit.artifacts.builders import resolve_contract
from settlekit.events.canonical import canonical_hash, parse_json
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.ledger import (
    ContractInvalid,
    compile_contract_policy,
    contract_hash,
    legacy_contract_hash,
    normalize_contract_document,
)
from settlekit.store import contracts as contracts_store
from settlekit.store import ledger as ledger_rows
from settlekit.store import ledger_timeline as timeline
from settlekit.store.contracts import get_contract, put_contract
from settlekit.store.db import Database
from support.streams import OPERATOR_ACTOR, ROBOT_ACTOR, StreamBuilder, booking_payload

T = "tenant_c"
PLAN = {"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": [
    {"partyRole": "operator", "partyId": "pty_fleet_a", "share": {"type": "percentage", "valueBasisPoints": 7000}},
    {"partyRole": "subcontractor", "partyId": "pty_dev", "share": {"type": "fixed", "valueCents": 100}},
    {"partyRole": "operator", "share": {"type": "remainder"}},
]}
POLICIES = {"creditPolicy": {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0, "currency": "USD"},
            "evidencePolicy": {"retentionDays": 30}}
DOC = {"type": "ContractDocument.v1", "v": 1, "contractId": "ctr_1", "contractVersion": 2, "name": "Fleet A",
       "parties": {"operator": {"partyId": "pty_fleet_a_main", "requiresSignature": True}},
       "policies": POLICIES, "connect": {"enabled": True, "splitPlan": PLAN}}
# every optional key given, so that its normalized form (absent keys as null) is a document settld stores too
FULL = {**DOC, "contractId": "ctr_full",
        "parties": {role: {"partyId": f"pty_{role}_full", "requiresSignature": False}
                    for role in ("platform", "operator", "customer")},
        "scope": {"customerId": "cust_1", "isDefault": False}, "effective": {"from": "2026-01-01T00:00:00.000Z"}}


def _settled_job(job_id: str, operator_contract_hash: str | None) -> list[dict]:
    b = StreamBuilder(job_id, prefix=f"evt_{job_id}")
    b.add("JOB_CREATED", {"tenantId": T, "templateId": "reset_lite", "customerId": "cust_1", "siteId": "site_1",
                          "constraints": {"zoneId": "zone_a"}})
    b.add("QUOTE_PROPOSED", {"amountCents": 6500, "currency": "USD", "breakdown": {"totalCents": 6500}})
    b.add("BOOKED", booking_payload())
    match = {"robotId": "rob_1"}
    if operator_contract_hash is not None:
        match["operatorContractHash"] = operator_contract_hash
        match["operatorPolicyHash"] = compile_contract_policy(DOC)[1]
    b.add("MATCHED", match)
    b.add("RESERVED", {"robotId": "rob_1", "reservationId": "rsv_1"})
    b.add("EN_ROUTE", {"etaSeconds": 600}, ROBOT_ACTOR)
    b.add("ACCESS_GRANTED", {"accessPlanId": "ap_1"}, ROBOT_ACTOR)
    b.add("EXECUTION_STARTED", {"stage": "TASK"}, ROBOT_ACTOR)
    b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    return b.events


def _appender_with_signers(db: Database) -> tuple[Any, dict[str, Signer]]:
    """A job appender without access planning (the test streams are core-valid only) and a registered key for each
    signer kind."""
    store = job_appender(db, server_rules=False)
    signers = {"server": Signer.generate(), "robot": Signer.generate(), "operator": Signer.generate()}
    for kind, signer in signers.items():
        store.signer_keys.register(T, signer.public_key_pem, kind)
    return store, signers


def _signed(events: list[dict], signers: dict[str, Signer]) -> list[dict]:
    """Re-chain the builder's unsigned events, each signed by the key of its actor's kind."""
    out, prev = [], None
    for e in events:
        draft = make_draft(stream_id=e["streamId"], type=e["type"], actor=e["actor"], payload=e["payload"],
                           at=e["at"], id=e["id"])
        signer = signers.get(e["actor"]["type"], signers["server"])
        out.append(finalize(draft, prev, signer))
        prev = out[-1]["chainHash"]
    return out


def test_split_plan_allocations_from_a_registered_contract(db: Database) -> None:
    digest = put_contract(db, T, DOC)
    assert digest == contract_hash(DOC) and put_contract(db, T, DOC) == digest
    assert get_contract(db, T, digest) == DOC and get_contract(db, "other", digest) is None
    store, signers = _appender_with_signers(db)
    for job_id, pinned in (("job_plan", digest), ("job_plain", None)):
        for event in _signed(_settled_job(job_id, pinned), signers):
            store.append(T, job_id, [event])
    plan_allocs = ledger_rows.allocations_for_job(db, T, "job_plan")
    owner = [a for a in plan_allocs if a["accountId"] == "acct_owner_payable"]
    assert {a["partyId"] for a in owner} == {"pty_fleet_a", "pty_fleet_a_main", "pty_dev"}
    by_party = {a["partyId"]: a["amountCents"] for a in owner}
    assert by_party["pty_dev"] == -100
    entries = ledger_rows.entries_for_job(db, T, "job_plan")
    for item in entries:
        for i, posting in enumerate(item["entry"]["postings"]):
            got = sum(a["amountCents"] for a in plan_allocs
                      if a["entryId"] == item["entry"]["id"] and a["postingId"] == f"p{i}")
            assert got == posting["amountCents"]
    plain = [a for a in ledger_rows.allocations_for_job(db, T, "job_plain") if a["accountId"] == "acct_owner_payable"]
    assert len(plain) == 1 and plain[0]["partyId"].startswith("pty_operator")


def test_invalid_contract_is_refused(db: Database) -> None:
    with pytest.raises(ContractInvalid):
        put_contract(db, T, {**DOC, "connect": {"enabled": "yes"}})
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM contract_documents") == 0


# a document settlekit stored before it refused what settld refuses (no name, policies settld does not know, a null
# scope and party, a party without requiresSignature, a blank rule partyId in the enabled plan)
LENIENT = {"type": "ContractDocument.v1", "v": 1, "contractId": "ctr_lenient", "contractVersion": 1, "name": None,
           "parties": {"operator": {"partyId": "pty_fleet_a_main"}, "customer": None}, "scope": None,
           "policies": {"sla": {"maxStallMs": 1}},
           "connect": {"enabled": True, "splitPlan": {**PLAN, "rules": [{**PLAN["rules"][0], "partyId": " "},
                                                                        *PLAN["rules"][1:]]}}}


def test_a_document_stored_before_the_stricter_validator_keeps_working(db: Database) -> None:
    """Lookups do not validate a stored document again: a job that pins one today's validator refuses still gets
    it, its party ids and its split plan (the rule with a blank partyId pays the operator's party)."""
    digest = canonical_hash(LENIENT)  # the key put_contract gave it
    with db.transaction() as tx:
        tx.execute("INSERT INTO contract_documents (tenant_id, contract_hash, contract_id, document_json)"
                   " VALUES (?, ?, ?, ?)", (T, digest, "ctr_lenient", json.dumps(LENIENT)))
    with pytest.raises(ContractInvalid):
        put_contract(db, T, LENIENT)
    assert get_contract(db, T, digest) == LENIENT
    assert resolve_contract({"operatorContractHash": digest}, lambda h: get_contract(db, T, h)) == LENIENT
    store, signers = _appender_with_signers(db)
    for event in _signed(_settled_job("job_lenient", digest), signers):
        store.append(T, "job_lenient", [event])
    owner = [a for a in ledger_rows.allocations_for_job(db, T, "job_lenient") if a["accountId"] == "acct_owner_payable"]
    assert {a["partyId"] for a in owner} == {"pty_fleet_a_main", "pty_dev"}
    assert rebuild(db).differences == []


def test_contracts_cli(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from settlekit.cli import app
    from settlekit.store.db import connect

    url = f"sqlite:///{tmp_path / 'c.db'}"
    connect(url).migrate()
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(DOC))
    result = CliRunner().invoke(app, ["contracts", "add", str(doc), "--db", url, "--tenant", T])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == contract_hash(DOC)
    doc.write_text(json.dumps({**DOC, "v": 2}))
    assert CliRunner().invoke(app, ["contracts", "add", str(doc), "--db", url, "--tenant", T]).exit_code == 1


def test_contracts_are_read_off_the_event_loop(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through Appender.append_async, the pinned contract (registered or not) is read on a worker thread, never
    on the event loop's, and the allocations are the blocking path's."""
    digest = put_contract(db, T, DOC)
    reads: list[bool] = []
    real = contracts_store.get_contract

    def spy(*args: Any) -> Any:
        reads.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(contracts_store, "get_contract", spy)
    store, signers = _appender_with_signers(db)

    async def run() -> None:
        for job_id, pinned in (("job_async", digest), ("job_unregistered", "f" * 64)):
            for event in _signed(_settled_job(job_id, pinned), signers):
                await store.append_async(T, job_id, [event])

    asyncio.run(run())
    assert reads and not any(reads), reads  # read at all, and never on the loop's thread
    owner = {a["partyId"] for a in ledger_rows.allocations_for_job(db, T, "job_async")
             if a["accountId"] == "acct_owner_payable"}
    assert owner == {"pty_fleet_a", "pty_fleet_a_main", "pty_dev"}
    unregistered = [a for a in ledger_rows.allocations_for_job(db, T, "job_unregistered")
                    if a["accountId"] == "acct_owner_payable"]
    assert len(unregistered) == 1 and unregistered[0]["partyId"].startswith("pty_operator")


# --- settld's contract hash (migration 0016): documents re-keyed, old hashes kept as aliases ---

def _as_before_migration_0016(db: Database) -> None:
    """The schema as it was before migration 0016 (which only added the alias table and moved the keys)."""
    with db.transaction() as tx:
        tx.execute("DROP TABLE contract_hash_aliases")
        tx.execute("DELETE FROM schema_migrations WHERE name = ?", ("0016_contract_hashes",))


def _old_hash(document: dict[str, Any]) -> str:
    """settlekit's hash before 0016 (absent optional keys as null), whose validator took any contractId that
    Python's strip leaves non-empty."""
    normalized = normalize_contract_document({**document, "contractId": "ctr_any"})
    return canonical_hash({**normalized, "contractId": document["contractId"]})


def _store_as_before_migration_0016(db: Database, tenant: str, document: dict[str, Any]) -> str:
    """What put_contract wrote before: the document under settlekit's old hash."""
    digest = _old_hash(document)
    with db.transaction() as tx:
        tx.execute("INSERT INTO contract_documents (tenant_id, contract_hash, contract_id, document_json)"
                   " VALUES (?, ?, ?, ?)", (tenant, digest, document["contractId"],
                                            json.dumps(document, ensure_ascii=False, separators=(",", ":"))))
    return digest


def _keys(db: Database) -> set[tuple[str, str]]:
    with db.read() as tx:
        return {(r[0], r[1]) for r in tx.fetchall("SELECT tenant_id, contract_hash FROM contract_documents")}


# every optional key given (null where it may be): the old hash and settld's agree, nothing moves
EXPLICIT = normalize_contract_document({**FULL, "contractId": "ctr_explicit"})
# stored before, refused by today's validator (U+FEFF is white space to JavaScript's trim): it still moves
BOM_ID = {**DOC, "contractId": "\ufeff"}


def test_migration_0016_rekeys_documents_and_old_pins_still_resolve(db: Database) -> None:
    _as_before_migration_0016(db)
    old = {name: _store_as_before_migration_0016(db, T, d) for name, d in
           (("doc", DOC), ("explicit", EXPLICIT), ("bom", BOM_ID))}
    old_elsewhere = _store_as_before_migration_0016(db, "tenant_other", DOC)
    assert old_elsewhere == old["doc"] == legacy_contract_hash(DOC) and old["explicit"] == contract_hash(EXPLICIT)
    with pytest.raises(ContractInvalid):
        contract_hash(BOM_ID)

    assert db.migrate() == ["0016_contract_hashes"]
    new = {"doc": contract_hash(DOC), "explicit": contract_hash(EXPLICIT), "bom": canonical_hash(BOM_ID)}
    assert new["doc"] != old["doc"] and new["bom"] != old["bom"]
    assert _keys(db) == {(T, h) for h in new.values()} | {("tenant_other", new["doc"])}
    for name, d in (("doc", DOC), ("explicit", EXPLICIT), ("bom", BOM_ID)):
        assert get_contract(db, T, new[name]) == d and get_contract(db, T, old[name]) == d
    assert get_contract(db, "tenant_other", old["doc"]) == DOC and get_contract(db, "nobody", old["doc"]) is None
    assert db.migrate() == []

    # a job that pinned the old hash gets its allocations from the document's split plan, as before
    store, signers = _appender_with_signers(db)
    for job_id, pinned in (("job_old_pin", old["doc"]), ("job_new_pin", new["doc"])):
        for event in _signed(_settled_job(job_id, pinned), signers):
            store.append(T, job_id, [event])
        owner = {a["partyId"] for a in ledger_rows.allocations_for_job(db, T, job_id)
                 if a["accountId"] == "acct_owner_payable"}
        assert owner == {"pty_fleet_a", "pty_fleet_a_main", "pty_dev"}, job_id

    # registering a stored document again answers settld's hash and stores nothing more
    assert put_contract(db, T, DOC) == new["doc"] and len(_keys(db)) == 4


def test_registration_keys_by_settlds_hash_and_aliases_the_old_one(db: Database) -> None:
    bundle = parse_json(gzip.decompress(
        (VECTORS / "reference_runs" / "contract_hashes.json.gz").read_bytes()).decode("utf-8"))
    pinned = [c for c in bundle["cases"] if c["settld"]["document"]["ok"]
              and "connect" in c["document"] and "scope" not in c["document"]][:5]
    assert pinned
    for case in pinned:
        settlds = case["settld"]["document"]["contractHash"]
        assert put_contract(db, T, case["document"]) == settlds
        assert get_contract(db, T, settlds) == case["document"]
        assert get_contract(db, T, legacy_contract_hash(case["document"])) == case["document"]

    # two documents that differ only in an absent against a null key: two hashes (as in settld); the old hash,
    # which both shared, stays with the first
    site_absent, site_null = {**DOC, "scope": {}}, {**DOC, "scope": {"siteId": None}}
    first, second = put_contract(db, T, site_absent), put_contract(db, T, site_null)
    assert first != second and legacy_contract_hash(site_absent) == legacy_contract_hash(site_null)
    assert get_contract(db, T, first) == site_absent and get_contract(db, T, second) == site_null
    assert get_contract(db, T, legacy_contract_hash(site_absent)) == site_absent
    # a document's own hash wins over an alias: FULL with every optional key given hashes to FULL's old hash
    put_contract(db, T, FULL)
    explicit = normalize_contract_document(FULL)
    assert put_contract(db, T, explicit) == legacy_contract_hash(FULL)
    assert get_contract(db, T, legacy_contract_hash(FULL)) == explicit


def test_a_split_plan_giving_one_party_two_roles(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """One party under two roles of a plan: its allocations of a posting differ by role only. Before, the second
    broke ledger_allocations' key (tenant, entry, posting, party) and the append was answered 409
    PREV_CHAIN_HASH_MISMATCH every time: the job could never settle. The party's timeline row is their sum."""
    plan = {"type": "SplitPlan.v1", "v": 1, "currency": "USD", "rules": [
        {"partyRole": "operator", "partyId": "pty_same", "share": {"type": "percentage", "valueBasisPoints": 5000}},
        {"partyRole": "subcontractor", "partyId": "pty_same", "share": {"type": "remainder"}}]}
    doc = {**DOC, "connect": {"enabled": True, "splitPlan": plan}}
    monkeypatch.setattr(sys.modules[__name__], "DOC", doc)  # _settled_job pins this document's policy hash
    digest = put_contract(db, T, doc)
    store, signers = _appender_with_signers(db)
    for event in _signed(_settled_job("job_same", digest), signers):
        store.append(T, "job_same", [event])
    owner = [a for a in ledger_rows.allocations_for_job(db, T, "job_same") if a["accountId"] == "acct_owner_payable"]
    assert sorted((a["partyId"], a["partyRole"]) for a in owner) == [("pty_same", "operator"),
                                                                       ("pty_same", "subcontractor")]
    party_total = sum(a["amountCents"] for a in owner)
    balances = timeline.balances_as_of(db, T, "p", 2**62, party_id="pty_same")
    assert balances["acct_owner_payable"] == party_total != 0
    assert rebuild(db).differences == []  # the rebuild keys allocations by role too
