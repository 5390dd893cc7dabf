"""Job appends through the store: vectors reproduce (snapshot, ledger rows, balances) on both backends, illegal
transitions store nothing, snapshots rebuild from events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from conftest import load_vector, scenario_names
from settlekit.append import Appender, job_appender
from settlekit.errors import SettlekitError
from settlekit.events.envelope import Signer, finalize, make_draft, verify_chain
from settlekit.jobs import process_job_events
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database

T = "tenant_default"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
CORE_ONLY = {"sla_credit.json"}  # valid for settld's core, refused in part by its API


def _loaded(db: Database, name: str, *, one_by_one: bool = True) -> tuple[Appender, dict]:
    vector = load_vector(name)
    # Golden vectors come from settld's core; sla_credit's credit has no recorded SLA breach, which the live
    # API refuses (test_live_path_refuses_a_credit_without_breach), so vectors replay without server rules.
    store = job_appender(db, clock=lambda: NOW, server_rules=name not in CORE_ONLY)
    for signer in vector["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    events = vector["events"]
    stream = events[0]["streamId"]
    if one_by_one:
        for event in events:
            store.append(T, stream, [event])
    else:
        store.append(T, stream, events)
    return store, vector


@pytest.mark.parametrize("name", scenario_names())
def test_vector_through_store(db: Database, name: str) -> None:
    store, vector = _loaded(db, name)
    job_id = vector["events"][0]["streamId"]
    state = store.streams.snapshot(T, job_id)
    assert state is not None and state["snapshot"] == vector["job"]
    assert ledger_rows.entries_for_job(db, T, job_id) == vector["ledgerEntries"]
    assert ledger_rows.allocations_for_job(db, T, job_id) == vector["allocations"]
    totals = {k: v for k, v in ledger_rows.balances(db, T).get(T, {}).items()}
    assert totals == vector["ledgerTotalsByAccountId"]
    assert sum(totals.values()) == 0
    # the stored state equals a rebuild from the stored events
    assert state == process_job_events(None, store.streams.read_stream(T, job_id)).state


def test_batch_append_of_whole_stream(db: Database) -> None:
    store, vector = _loaded(db, "claim_adjust_paid.json", one_by_one=False)
    job_id = vector["events"][0]["streamId"]
    assert store.streams.snapshot(T, job_id)["snapshot"] == vector["job"]  # type: ignore[index]
    assert ledger_rows.entries_for_job(db, T, job_id) == vector["ledgerEntries"]


def test_illegal_transition_stores_nothing(db: Database) -> None:
    server = Signer.generate()
    store = job_appender(db, server_signer=server)
    actor = {"type": "system", "id": "proxy"}
    r = store.append(T, "job_x", [{"type": "JOB_CREATED", "actor": actor,
                                   "payload": {"templateId": "reset_lite", "constraints": {}, "tenantId": T}}],
                     expected_prev_chain_hash=None)
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_x", [{"type": "SETTLED", "actor": actor, "payload": {}}],
                     expected_prev_chain_hash=r.head_chain_hash)
    assert err.value.code == "INVALID_TRANSITION" and err.value.status == 409
    assert "CREATED" in err.value.message and "SETTLED" in err.value.message
    assert len(store.streams.read_stream(T, "job_x")) == 1
    assert store.streams.head(T, "job_x").chain_hash == r.head_chain_hash  # type: ignore[union-attr]
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_x", [{"type": "NOT_A_TYPE", "actor": actor, "payload": {}}],
                     expected_prev_chain_hash=r.head_chain_hash)
    assert err.value.code == "EVENT_TYPE_UNKNOWN"
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_y", [{"type": "QUOTE_PROPOSED", "actor": actor, "payload": {"amountCents": 1}}],
                     expected_prev_chain_hash=None)
    assert err.value.status in (400, 409)
    assert store.streams.read_stream(T, "job_y") == []


def test_the_live_path_keeps_its_rules_where_the_offline_tools_take_settlds(db: Database) -> None:
    """What `settlekit verify` and the offline tools take as settld does (a signature in a base64 spelling node
    reads, a second JOB_CREATED, a foreign type) the live path refuses, with nothing written (README)."""
    client = Signer.generate()
    store = job_appender(db, clock=lambda: NOW)
    store.signer_keys.register(T, client.public_key_pem, "server")
    actor = {"type": "system", "id": "proxy"}

    def event(n: int, t: str, prev: str | None) -> dict:
        draft = make_draft(stream_id="job_l", type=t, actor=actor, payload={"templateId": "t", "tenantId": T},
                           at=f"2026-02-01T00:00:0{n}.000Z", id=f"evt_l_{n}")
        return finalize(draft, prev, client)

    first = event(1, "JOB_CREATED", None)
    unpadded = {**first, "signature": first["signature"].rstrip("=")}
    verify_chain([unpadded], {client.key_id: client.public_key_pem})  # settld reads it, so does verify
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_l", [unpadded])
    assert err.value.code == "SIG_INVALID"
    assert store.streams.read_stream(T, "job_l") == []
    store.append(T, "job_l", [first])
    for t, code in (("JOB_CREATED", "INVALID_TRANSITION"), ("NOTE_ADDED", "EVENT_TYPE_UNKNOWN"),
                    ("MONTH_CLOSED", "EVENT_TYPE_NOT_ALLOWED")):
        with pytest.raises(SettlekitError) as err:
            store.append(T, "job_l", [event(2, t, first["chainHash"])])
        assert err.value.code == code, (t, err.value.code)
    assert store.streams.read_stream(T, "job_l") == [first]


def test_robot_types_need_robot_signature(db: Database) -> None:
    store, vector = _loaded(db, "settle_completed.json")
    robot_event = next(e for e in vector["events"] if e["actor"]["type"] == "robot")
    with pytest.raises(SettlekitError) as err:
        job_appender(db).append(T, "job_new", [{"type": robot_event["type"], "actor": {"type": "system", "id": "s"},
                                             "payload": robot_event["payload"]}], expected_prev_chain_hash=None)
    assert err.value.code == "SIGNER_POLICY_VIOLATION"


def test_lone_surrogates_in_new_input_are_refused(db: Database) -> None:
    # deliberate: offline tools reproduce streams holding them, the live path never stores a new one (README)
    server = Signer.generate()
    store = job_appender(db, server_signer=server, clock=lambda: NOW)
    actor = {"type": "system", "id": "proxy"}
    created = {"type": "JOB_CREATED", "actor": actor, "payload": {"templateId": "reset_lite\ud800", "tenantId": T}}
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_s", [created], expected_prev_chain_hash=None)
    assert err.value.code == "SCHEMA_INVALID" and err.value.details["path"] == "$[0].payload.templateId"
    assert store.streams.read_stream(T, "job_s") == [] and store.streams.head(T, "job_s") is None
    # a client-finalized envelope: its hashes are right (computed as settld does), still refused
    client = Signer.generate()
    store.signer_keys.register(T, client.public_key_pem, "server")
    event = finalize(
        make_draft(stream_id="job_s", type="JOB_CREATED", actor=actor, payload={"templateId": "t", "note": "\udc00"},
                   at="2026-02-01T00:00:00.000Z", id="evt_s_1"),
        None,
        client,
    )
    verify_chain([event], {client.key_id: client.public_key_pem})
    with pytest.raises(SettlekitError) as err:
        store.append(T, "job_s", [event])
    assert err.value.code == "SCHEMA_INVALID" and err.value.details["path"] == "$[0].payload.note"
    assert store.streams.read_stream(T, "job_s") == []


def test_live_path_refuses_a_credit_without_breach(db: Database) -> None:
    vector = load_vector("sla_credit.json")
    store = job_appender(db, clock=lambda: NOW)
    for signer in vector["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    events = vector["events"]
    stream = events[0]["streamId"]
    credit = next(i for i, e in enumerate(events) if e["type"] == "SLA_CREDIT_ISSUED")
    for event in events[:credit]:
        store.append(T, stream, [event])
    head = store.streams.head(T, stream)
    with pytest.raises(SettlekitError) as exc:
        store.append(T, stream, [events[credit]])
    assert exc.value.code == "SLA_BREACH_REQUIRED" and exc.value.status == 409
    assert exc.value.message == "SLA credit requires a recorded SLA breach"
    assert store.streams.head(T, stream) == head
