"""The live append path accepts exactly what the settld 0.1.0 API accepts: every corpus stream appended event by
event through the store (client-finalized envelopes, the corpus signer keys registered for the tenant by role)
accepts every event before the first of `serverRejections` and refuses that one with nothing written. Posting
errors never refuse an event: they are recorded (ledger_errors) with the reference's message.

One deliberate difference (README, "Compatibility"): an unsigned client-finalized event is refused by the signer
policy, as settld's API itself does ("robot-signed events require signature", "server-signed events require
signature"), although the corpus' `serverRejections` (domain rules only) do not list it (30 streams hold one
before their first rejection). The store test signs each unsigned event with a test key of the role its type
needs (the chain does not cover the signature), so the live path is checked over every stream's whole prefix,
and checks apart that the event as recorded is refused; the pure test below checks the domain rules over the
whole prefix of every stream. Likewise new input holding a lone UTF-16 surrogate may be refused by the live API
(documented); the store test stops at such an event."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from conftest import backend_database, differential_corpus, load_differential, load_vector
from settlekit.append import Appender, job_appender
from settlekit.errors import SettlekitError, SignerPolicyError
from settlekit.events.canonical import parse_json, storable_json
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.jobs import process_job_events, required_signer_kind
from settlekit.jobs.server_rules import STATE_KEY, ServerRuleViolation
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database

T = "tenant_default"
NOW = datetime(2026, 12, 31, tzinfo=UTC)
STREAMS = list(differential_corpus())
FILL_SIGNERS = {role: Signer.generate() for role in ("server", "robot", "operator")}


def _rows(db: Database, tenant: str, job_id: str) -> tuple[Any, ...]:
    return (
        ledger_rows.entries_for_job(db, tenant, job_id),
        ledger_rows.allocations_for_job(db, tenant, job_id),
        ledger_rows.errors_for_job(db, tenant, job_id),
        ledger_rows.balances(db, tenant),
    )


def _has_lone_surrogate(x: Any) -> bool:
    if isinstance(x, str):
        return any("\ud800" <= ch <= "\udfff" for ch in x)
    if isinstance(x, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in x.items())
    if isinstance(x, list):
        return any(_has_lone_surrogate(v) for v in x)
    return False


def _first_unsigned_event(events: list[dict[str, Any]]) -> int | None:
    """The first event the signer policy refuses for want of a signature (every known type needs one)."""
    for i, e in enumerate(events):
        if e.get("signature") is None:
            return i
    return None


@pytest.mark.parametrize("name", STREAMS)
def test_server_rules_refuse_exactly_the_reference_rejections(name: str) -> None:
    """The pure live pipeline (payload validation, transitions, server rules) event by event: every event
    before the first rejection is accepted, that one is refused with the reference's message."""
    v = load_differential(name)
    events = v["events"]
    rejections = v["serverRejections"]
    stop = rejections[0]["index"] if rejections else len(events)
    state = None
    for event in events[:stop]:
        state = process_job_events(state, [event], live=True).state
    if not rejections:
        return
    if rejections[0]["code"] == "SIGNER_KIND":  # the signer policy, enforced by the store (test above)
        return
    with pytest.raises(ServerRuleViolation) as exc:
        process_job_events(state, [events[stop]], live=True)
    assert exc.value.message == rejections[0]["error"]
    if rejections[0]["code"] is not None:
        assert exc.value.code == rejections[0]["code"]
    # Offline the same event is accepted: the server rules belong to the live path only.
    process_job_events(state, [events[stop]])


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shared_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """One database per backend for the whole module (each stream gets its own tenant): one PostgreSQL
    database instead of 204 keeps the test fast."""
    with backend_database(request, tmp_path_factory, request.param) as database:
        yield database


def _signed_where_missing(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events, each unsigned one signed by the test key of the role its type needs (the chain covers the
    payload hash, not the signature, so the stream is otherwise the very same)."""
    out = []
    for e in events:
        if e.get("signature") is None:
            signer = FILL_SIGNERS[required_signer_kind(e["type"], e["actor"]["type"])]
            e = {**e, "signature": signer.sign_payload_hash(e["payloadHash"]), "signerKeyId": signer.key_id}
        out.append(e)
    return out


def _live_store(db: Database, tenant: str, v: dict[str, Any]) -> Appender:
    store = job_appender(db, clock=lambda: NOW)
    for signer in v["signers"]:
        store.signer_keys.register(tenant, signer["publicKeyPem"], signer["role"])
    for role, fill in FILL_SIGNERS.items():
        store.signer_keys.register(tenant, fill.public_key_pem, role)
    return store


def _live_replay(db: Database, tenant: str, name: str
                 ) -> tuple[dict[str, Any], list[dict[str, Any]], str, Appender, list[dict[str, Any]], int]:
    """A corpus stream set up for a live replay: (the vector, its events signed where unsigned, the job id, a store
    with the stream's signers registered for `tenant`, the reference's rejections, the index of the first)."""
    v = load_differential(name)
    events = _signed_where_missing(v["events"])
    rejections = v["serverRejections"]
    stop = rejections[0]["index"] if rejections else len(events)
    return v, events, events[0]["streamId"], _live_store(db, tenant, v), rejections, stop


@pytest.mark.parametrize("name", STREAMS)
def test_live_path_refuses_exactly_the_reference_rejections(shared_db: Database, name: str) -> None:
    db, T = shared_db, f"tenant_{name}"
    v, events, job_id, store, rejections, stop = _live_replay(db, T, name)
    surrogate = next((i for i, e in enumerate(events[:stop]) if _has_lone_surrogate(e)), None)
    if surrogate is not None:
        rejections, stop = [], surrogate
    for event in events[:stop]:
        store.append(T, job_id, [event])
    head = store.streams.head(T, job_id)
    assert head is not None and head.seq == stop and head.event_id == events[stop - 1]["id"]
    accepted = {e["id"] for e in events[:stop]}
    entries, allocations, errors, _ = _rows(db, T, job_id)
    assert entries == [x for x in v["ledgerEntries"] if x["eventId"] in accepted]
    entry_ids = {x["entry"]["id"] for x in entries}
    assert allocations == [{**a, "tenantId": T} for a in v["allocations"] if a["entryId"] in entry_ids]
    assert [(x["eventId"], x["eventType"], x["error"]["message"]) for x in errors] == [
        (x["eventId"], x["eventType"], x["error"]) for x in v["ledgerErrors"] if x["eventId"] in accepted
    ]
    before = _rows(db, T, job_id), store.streams.snapshot(T, job_id)
    if surrogate is not None:
        try:
            store.append(T, job_id, [events[stop]])
        except SettlekitError as exc:
            assert exc.code == "SCHEMA_INVALID"
            assert store.streams.head(T, job_id) == head
            assert (_rows(db, T, job_id), store.streams.snapshot(T, job_id)) == before
        return
    if not rejections:
        return
    refused = rejections[0]
    with pytest.raises(SettlekitError) as exc:
        store.append(T, job_id, [events[stop]])
    if isinstance(exc.value, ServerRuleViolation):
        assert exc.value.message == refused["error"]
        assert exc.value.code and exc.value.status == 409
        if refused["code"] is not None:
            assert exc.value.code == refused["code"]
    else:  # the signer policy: a robot-only event signed by another key
        assert isinstance(exc.value, SignerPolicyError), exc.value
        assert refused["code"] == "SIGNER_KIND"
    assert store.streams.head(T, job_id) == head
    assert (_rows(db, T, job_id), store.streams.snapshot(T, job_id)) == before


UNSIGNED_STREAMS = [name for name in STREAMS if _first_unsigned_event(load_differential(name)["events"]) is not None]


@pytest.mark.parametrize("name", UNSIGNED_STREAMS)
def test_live_path_refuses_an_unsigned_event(shared_db: Database, name: str) -> None:
    """The corpus' first unsigned event, as recorded, is refused by the signer policy with nothing written; signed
    by a key of the role its type needs, the same event is accepted."""
    db, T = shared_db, f"tenant_unsigned_{name}"
    v = load_differential(name)
    k = _first_unsigned_event(v["events"])
    assert k is not None
    events = _signed_where_missing(v["events"][:k + 1])
    job_id = events[0]["streamId"]
    store = _live_store(db, T, v)
    for event in events[:k]:
        store.append(T, job_id, [event])
    head, before = store.streams.head(T, job_id), _rows(db, T, job_id)
    with pytest.raises(SignerPolicyError) as exc:
        store.append(T, job_id, [v["events"][k]])
    assert exc.value.details["requiredSigner"] == required_signer_kind(events[k]["type"], events[k]["actor"]["type"])
    assert store.streams.head(T, job_id) == head and _rows(db, T, job_id) == before
    assert store.append(T, job_id, [events[k]]).already_exists is False


def test_posting_error_is_stored_without_an_entry_and_the_event_is_accepted(db: Database) -> None:
    # d142: the reference API accepts a SETTLED whose posting fails ("amountCents must be non-zero").
    v = load_differential("d142_amounts")
    events = v["events"]
    job_id = events[0]["streamId"]
    store = job_appender(db, clock=lambda: NOW)
    for signer in v["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    rejections = v["serverRejections"]
    stop = rejections[0]["index"] if rejections else len(events)
    errors_in_prefix = [x for x in v["ledgerErrors"] if x["eventId"] in {e["id"] for e in events[:stop]}]
    assert errors_in_prefix, "the stream must hold a posting error the API accepts"
    for event in events[:stop]:
        store.append(T, job_id, [event])
    recorded = ledger_rows.errors_for_job(db, T, job_id)
    assert [x["eventId"] for x in recorded] == [x["eventId"] for x in errors_in_prefix]
    assert [x["error"]["message"] for x in recorded] == [x["error"] for x in errors_in_prefix]
    assert all(x["error"]["code"] for x in recorded)
    stored_ids = {e["id"] for e in store.streams.read_stream(T, job_id)}
    assert {x["eventId"] for x in recorded} <= stored_ids
    assert not {x["eventId"] for x in ledger_rows.entries_for_job(db, T, job_id)} & {x["eventId"] for x in recorded}


@pytest.mark.parametrize(("event_type", "actor_type", "signed_by"), [
    ("INCIDENT_REPORTED", "robot", "server"), ("INCIDENT_REPORTED", "robot", "robot"),
    ("CLAIM_TRIAGED", "robot", "server"), ("EVIDENCE_CAPTURED", "operator", "server"),
    ("JOB_EXECUTION_ABORTED", "operator", "operator"), ("QUOTE_PROPOSED", "robot", "server"),
    ("SETTLED", "operator", "server"), ("SETTLED", "robot", "unsigned"),
    ("EN_ROUTE", "system", "robot"), ("JOB_HEARTBEAT", "operator", "robot"), ("ASSIST_ACCEPTED", "robot", "operator"),
    ("ZONE_COVERAGE_REPORTED", "system", "robot"), ("SKILL_USED", "system", "unsigned")])
def test_the_actor_must_be_of_the_kind_that_signs(db: Database, event_type: str, actor_type: str,
                                                  signed_by: str) -> None:
    """settld's signature policy, before any signature check, whoever signed: a server type cannot carry a
    robot/operator actor (nor a server_or_operator type a robot, a server_or_robot type an operator); a robot type
    needs a robot actor, an operator type an operator actor, a robot_or_operator type one of the two. Nothing is
    written."""
    server = Signer.generate()
    store = job_appender(db, clock=lambda: NOW, server_signer=server)
    v = load_vector("settle_completed.json")
    for signer in v["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    store.signer_keys.register(T, FILL_SIGNERS["robot"].public_key_pem, "robot")
    store.signer_keys.register(T, FILL_SIGNERS["operator"].public_key_pem, "operator")
    created = v["events"][0]
    job_id = created["streamId"]
    store.append(T, job_id, [created])
    before = _rows(db, T, job_id), store.streams.snapshot(T, job_id)
    signer = None if signed_by == "unsigned" else server if signed_by == "server" else FILL_SIGNERS[signed_by]
    event = finalize(make_draft(stream_id=job_id, type=event_type, actor={"type": actor_type, "id": "x_1"},
                                payload={}, at=created["at"]), created["chainHash"], signer)
    with pytest.raises(SignerPolicyError) as exc:
        store.append(T, job_id, [event])
    assert exc.value.details == {"index": 0, "eventType": event_type, "actorType": actor_type}
    if signed_by in ("robot", "operator") and actor_type not in ("robot", "operator"):
        assert exc.value.message.endswith("-signed events require actor.type=robot|operator"
                                          if event_type in ("ZONE_COVERAGE_REPORTED", "SKILL_USED")
                                          else f"{signed_by}-signed events require actor.type={signed_by}")
    head = store.streams.head(T, job_id)
    assert head is not None and head.seq == 1
    assert (_rows(db, T, job_id), store.streams.snapshot(T, job_id)) == before


def _forget_rule_history(db: Database, tenant: str, job_id: str) -> None:
    """Make the stored job state look as an earlier version stored it: without its rule history."""
    with db.transaction() as tx:
        text = tx.scalar("SELECT snapshot_json FROM streams WHERE tenant_id = ? AND stream_id = ?", (tenant, job_id))
        state = parse_json(text)
        state.pop(STATE_KEY, None)
        tx.execute("UPDATE streams SET snapshot_json = ? WHERE tenant_id = ? AND stream_id = ?",
                   (storable_json(state), tenant, job_id))


@pytest.mark.parametrize("name", ["d055_holds", "d058_holds", "d059_holds", "d096_claims"])
def test_a_state_stored_without_the_current_rule_history_is_judged_on_the_whole_stream(
        shared_db: Database, name: str) -> None:
    """Before each append the stored rule history is dropped (a job stored by an earlier version): the live path
    rebuilds it from the stream's events and judges every event exactly as with the history kept."""
    db, T = shared_db, f"tenant_rebuilt_{name}"
    _, events, job_id, store, rejections, stop = _live_replay(db, T, name)
    for i, event in enumerate(events[:stop]):
        if i:
            _forget_rule_history(db, T, job_id)
        store.append(T, job_id, [event])
    snapshot = store.streams.snapshot(T, job_id)
    assert snapshot is not None and snapshot[STATE_KEY] == process_job_events(
        None, events[:stop], live=True).state[STATE_KEY]
    if rejections and rejections[0]["code"] != "SIGNER_KIND":
        _forget_rule_history(db, T, job_id)
        with pytest.raises(ServerRuleViolation) as exc:
            store.append(T, job_id, [events[stop]])
        assert exc.value.message == rejections[0]["error"]
