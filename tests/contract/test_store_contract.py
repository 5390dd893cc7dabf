"""Event store contract, run on both backends."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from conftest import load_vector
from settlekit.append import Appender, Idempotency
from settlekit.append import idempotency as idempotent
from settlekit.errors import (
    ConflictError,
    SettlekitError,
    SignerPolicyError,
    ValidationError,
    VerificationError,
)
from settlekit.events.canonical import storable_json
from settlekit.events.envelope import Signer, finalize_chain, make_draft, parse_keys_file, verify_chain
from settlekit.store import idempotency as idempotency_keys
from settlekit.store.db import Database

T = "tenant_a"
ACTOR = {"type": "system", "id": "proxy"}


def draft(i: int = 0, etype: str = "NOTE") -> dict:
    return {"type": etype, "actor": ACTOR, "payload": {"n": i, "text": "héllo"}}


def test_append_and_read(db: Database) -> None:
    store = Appender(db)
    r1 = store.append(T, "job_1", [draft(0)], expected_prev_chain_hash=None)
    assert r1.first_seq == 1 and len(r1.positions) == 1
    r2 = store.append(T, "job_1", [draft(1), draft(2)], expected_prev_chain_hash=r1.head_chain_hash)
    assert r2.first_seq == 2 and r2.positions == sorted(r2.positions)
    events = store.streams.read_stream(T, "job_1")
    assert [e["payload"]["n"] for e in events] == [0, 1, 2]
    verify_chain(events)
    assert store.streams.head(T, "job_1").seq == 3  # type: ignore[union-attr]
    assert store.streams.read_stream(T, "job_1", through_chain_hash=events[1]["chainHash"]) == events[:2]
    assert store.streams.high_water_mark() == r2.positions[-1]
    stored = store.streams.read_positions(0)
    assert [s.event for s in stored] == events
    assert [s.seq for s in stored] == [1, 2, 3]


def test_expected_version(db: Database) -> None:
    store = Appender(db)
    store.append(T, "s", [draft()], expected_version=0)
    store.append(T, "s", [draft()], expected_version=1)
    with pytest.raises(ConflictError) as err:
        store.append(T, "s", [draft()], expected_version=1)
    assert err.value.code == "VERSION_CONFLICT"
    assert len(store.streams.read_stream(T, "s")) == 2


def test_precondition_required(db: Database) -> None:
    with pytest.raises(SettlekitError) as err:
        Appender(db).append(T, "s", [draft()])
    assert err.value.code == "PRECONDITION_REQUIRED" and err.value.status == 428


def test_stale_head_conflicts_and_writes_nothing(db: Database) -> None:
    store = Appender(db)
    r1 = store.append(T, "s", [draft()], expected_prev_chain_hash=None)
    store.append(T, "s", [draft()], expected_prev_chain_hash=r1.head_chain_hash)
    with pytest.raises(ConflictError) as err:
        store.append(T, "s", [draft(), draft()], expected_prev_chain_hash=r1.head_chain_hash)
    assert err.value.code == "PREV_CHAIN_HASH_MISMATCH"
    assert err.value.details["currentPrevChainHash"] == store.streams.head(T, "s").chain_hash  # type: ignore[union-attr]
    with pytest.raises(ConflictError):
        store.append(T, "s", [draft()], expected_prev_chain_hash=None)
    assert len(store.streams.read_stream(T, "s")) == 2
    verify_chain(store.streams.read_stream(T, "s"))


def test_concurrent_appenders_exactly_one_wins(db: Database) -> None:
    store = Appender(db)
    head = store.append(T, "s", [draft()], expected_prev_chain_hash=None).head_chain_hash
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            store.append(T, "s", [draft(i)], expected_prev_chain_hash=head)
            outcomes.append("ok")
        except ConflictError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["PREV_CHAIN_HASH_MISMATCH"] * 3 + ["ok"]
    events = store.streams.read_stream(T, "s")
    assert len(events) == 2
    verify_chain(events)


def test_concurrent_genesis(db: Database) -> None:
    store = Appender(db)
    outcomes: list[str] = []
    barrier = threading.Barrier(3)

    def writer() -> None:
        barrier.wait()
        try:
            store.append(T, "g", [draft()], expected_prev_chain_hash=None)
            outcomes.append("ok")
        except ConflictError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1
    assert len(store.streams.read_stream(T, "g")) == 1


def test_idempotency(db: Database) -> None:
    store = Appender(db)
    first = store.append(T, "s", [draft(1)], expected_prev_chain_hash=None, idempotency=Idempotency("k1"))
    again = store.append(T, "s", [draft(1)], expected_prev_chain_hash=None, idempotency=Idempotency("k1"))
    assert again.replayed and again.events == first.events and again.positions == first.positions
    with pytest.raises(ConflictError) as err:
        store.append(T, "s", [draft(2)], expected_prev_chain_hash=None, idempotency=Idempotency("k1"))
    assert err.value.code == "IDEMPOTENCY_KEY_REUSED"
    assert len(store.streams.read_stream(T, "s")) == 1
    # keys are per tenant
    other = store.append("tenant_b", "s", [draft(1)], expected_prev_chain_hash=None, idempotency=Idempotency("k1"))
    assert not other.replayed


def test_idempotency_of_finalized_events_does_not_depend_on_an_expected_head(db: Database) -> None:
    """Finalized events carry their head: a retry that adds or drops `expected_prev_chain_hash` is the same
    request, and a key stored while that head was part of the hash still replays."""
    signer = Signer.generate()
    store = Appender(db)
    store.signer_keys.register(T, signer.public_key_pem, "server")
    events = finalize_chain([make_draft(stream_id="f", type="NOTE", actor=ACTOR, payload={"n": i})
                             for i in range(3)], None, signer)
    first = store.append(T, "f", [events[0]], expected_prev_chain_hash=None, idempotency=Idempotency("k1"))
    again = store.append(T, "f", [events[0]], idempotency=Idempotency("k1"))
    assert again.replayed and again.events == first.events
    second = store.append(T, "f", [events[1]], idempotency=Idempotency("k2"))
    again = store.append(T, "f", [events[1]], expected_prev_chain_hash=events[0]["chainHash"],
                         idempotency=Idempotency("k2"))
    assert again.replayed and again.events == second.events
    # a key recorded under the earlier hash (the head included) answers a retry with the head given
    legacy = Idempotency("k3")
    earlier = idempotent.append_request_hash(legacy, "f", events[1]["chainHash"], None, [events[2]])
    third = store.append(T, "f", [events[2]], idempotency=Idempotency("k3-new"))
    with db.transaction() as tx:
        idempotency_keys.record(tx, legacy.scope(T), earlier, 201, storable_json(third.to_json()))
    again = store.append(T, "f", [events[2]], expected_prev_chain_hash=events[1]["chainHash"], idempotency=legacy)
    assert again.replayed and again.events == third.events
    with pytest.raises(ConflictError):  # another request under that key is still a conflict
        store.append(T, "f", [events[1]], expected_prev_chain_hash=events[0]["chainHash"],
                     idempotency=Idempotency("k3"))
    assert len(store.streams.read_stream(T, "f")) == 3


def test_tenancy_isolation(db: Database) -> None:
    store = Appender(db)
    r = store.append("tenant_a", "shared_id", [draft()], expected_prev_chain_hash=None)
    assert store.streams.read_stream("tenant_b", "shared_id") == []
    assert store.streams.head("tenant_b", "shared_id") is None
    # tenant B cannot append onto A's stream: it sees an empty stream, so A's head is a mismatch
    with pytest.raises(ConflictError):
        store.append("tenant_b", "shared_id", [draft()], expected_prev_chain_hash=r.head_chain_hash)
    store.append("tenant_b", "shared_id", [draft()], expected_prev_chain_hash=None)
    assert len(store.streams.read_stream("tenant_a", "shared_id")) == 1
    assert [s.tenant_id for s in store.streams.read_positions(0, tenant_id="tenant_b")] == ["tenant_b"]


def _vector_store(db: Database, name: str = "settle_completed.json") -> tuple[Appender, dict]:
    vector = load_vector(name)
    store = Appender(db, clock=lambda: datetime(2026, 1, 6, tzinfo=UTC))
    for signer in vector["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    return store, vector


def test_client_finalized_vector_stream(db: Database) -> None:
    store, vector = _vector_store(db)
    events = vector["events"]
    stream = events[0]["streamId"]
    store.append(T, stream, events[:4])
    for event in events[4:]:
        store.append(T, stream, [event])
    stored = store.streams.read_stream(T, stream)
    assert stored == events
    verify_chain(stored, parse_keys_file(vector["signers"]))
    replay = store.append(T, stream, [events[5]])
    assert replay.already_exists
    changed = dict(events[5], payload={"changed": True})
    with pytest.raises(SettlekitError):
        store.append(T, stream, [changed])


def test_client_finalized_rejections(db: Database) -> None:
    store, vector = _vector_store(db)
    events = vector["events"]
    stream = events[0]["streamId"]
    bad_hash = dict(events[0], payloadHash="0" * 64)
    with pytest.raises(VerificationError) as verr:
        store.append(T, stream, [bad_hash])
    assert verr.value.code == "PAYLOAD_HASH_MISMATCH"
    with pytest.raises(ValidationError) as err:
        store.append(T, stream, [dict(events[0], actor={"type": "x", "id": "y", "extra": 1})])
    assert err.value.code == "SCHEMA_INVALID"
    with pytest.raises(ValidationError):
        store.append(T, stream, [dict(events[0], v="1")])
    with pytest.raises(ConflictError):
        store.append(T, stream, [events[1]])  # not linked to the (empty) head
    # unknown signer key
    store2 = Appender(db)
    with pytest.raises(SettlekitError) as err2:
        store2.append("tenant_other", stream, [events[0]])
    assert err2.value.code == "SIGNER_UNKNOWN"
    # future timestamp
    signer = Signer.generate()
    store.signer_keys.register(T, signer.public_key_pem, "server")
    future = (datetime(2026, 1, 6, tzinfo=UTC) + timedelta(minutes=6)).isoformat().replace("+00:00", "Z")
    ev = finalize_chain([make_draft(stream_id="f", type="NOTE", actor=ACTOR, payload={}, at=future)], None, signer)
    with pytest.raises(ValidationError) as err:
        store.append(T, "f", ev)
    assert err.value.code == "FUTURE_TIMESTAMP"
    assert store.streams.read_stream(T, stream) == [] and store.streams.read_stream(T, "f") == []


def test_revoked_key_refused(db: Database) -> None:
    store = Appender(db)
    signer = Signer.generate()
    store.signer_keys.register(T, signer.public_key_pem, "server")
    ev = finalize_chain([make_draft(stream_id="s", type="NOTE", actor=ACTOR, payload={})], None, signer)
    store.signer_keys.change_status(T, signer.key_id, "revoked", allowed_from=("active",))
    with pytest.raises(SignerPolicyError) as err:
        store.append(T, "s", ev)
    assert err.value.code == "SIGNER_KEY_NOT_ACTIVE"
    store.signer_keys.change_status(T, signer.key_id, "active", allowed_from=("revoked",))
    store.append(T, "s", ev)
    robot = Signer.generate()
    store.signer_keys.register(T, robot.public_key_pem, "robot")
    ev2 = finalize_chain([make_draft(stream_id="s", type="NOTE", actor=ACTOR, payload={})], ev[0]["chainHash"], robot)
    with pytest.raises(SignerPolicyError) as err:
        store.append(T, "s", ev2)
    assert err.value.code == "SIGNER_KEY_PURPOSE_MISMATCH"


def test_bad_inputs_store_nothing(db: Database) -> None:
    store = Appender(db, max_payload_bytes=100)
    cases = [
        [{"type": "", "actor": ACTOR, "payload": {}}],
        [{"type": "NOTE", "actor": {"type": "system"}, "payload": {}}],
        [{"type": "NOTE", "actor": ACTOR, "payload": {"x": float("nan")}}],
        [{"type": "NOTE", "actor": ACTOR, "payload": {"big": "x" * 200}}],
        [{"type": "NOTE", "actor": ACTOR, "payload": {}, "bogus": 1}],
        [{"type": "NOTE", "actor": {"type": "robot", "id": "r1"}, "payload": {}}],
        [draft(), {"type": "NOTE", "actor": ACTOR, "payload": {"n": 2**60}}],
    ]
    for items in cases:
        with pytest.raises(SettlekitError) as err:
            store.append(T, "s", items, expected_prev_chain_hash=None)
        assert 400 <= err.value.status < 500, err.value
    assert store.streams.read_stream(T, "s") == []
    assert store.streams.high_water_mark() == 0


def test_server_signer_signs_drafts(db: Database) -> None:
    signer = Signer.generate()
    store = Appender(db, server_signer=signer)
    store.append(T, "s", [draft(), draft()], expected_prev_chain_hash=None)
    events = store.streams.read_stream(T, "s")
    assert all(e["signerKeyId"] == signer.key_id for e in events)
    verify_chain(events, {signer.key_id: signer.public_key_pem})


def test_tampering_detected(db: Database) -> None:
    store = Appender(db)
    r = store.append(T, "s", [draft(i) for i in range(5)], expected_prev_chain_hash=None)
    with db.transaction() as tx:
        tx.execute("UPDATE events SET event_json = replace(event_json, '\"n\":3', '\"n\":33') WHERE position = ?",
                   (r.positions[3],))
    with pytest.raises(VerificationError) as err:
        verify_chain(store.streams.read_stream(T, "s"))
    assert err.value.index == 3 and err.value.code == "PAYLOAD_HASH_MISMATCH"


def test_migrate_is_idempotent(db: Database) -> None:
    assert db.migrate() == []
    assert db.pending_migrations() == []


def test_concurrent_migrate_from_two_connections(pg_template: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two processes' worth of Database objects migrating one fresh database at once: each migration once."""
    import psycopg

    from conftest import PG_ADMIN_URL, _pg_url
    from settlekit.store.db import connect, migration_files

    name = f"sk_test_migrate_{threading.get_ident()}_{id(tmp_path) % 100000}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        for url in (_pg_url(name), f"sqlite:///{tmp_path / 'm.db'}"):
            dbs = [connect(url), connect(url)]
            applied: list[list[str]] = []
            barrier = threading.Barrier(2)

            def run(d: Database, barrier: threading.Barrier, applied: list[list[str]]) -> None:
                barrier.wait()
                applied.append(d.migrate())

            threads = [threading.Thread(target=run, args=(d, barrier, applied)) for d in dbs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            names = [n for n, _ in migration_files(dbs[0].dialect)]
            assert sorted(applied, key=len) == [[], names]
            assert dbs[0].applied_migrations() == names
            for d in dbs:
                d.close()
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_hot_json_columns_compress_with_lz4_where_the_server_has_it(pg_url: str) -> None:
    """A stream's snapshot is rewritten on every append: its column (and the other large JSON ones written on the
    hot paths) uses lz4, several times faster to compress than the default pglz; the value reads back unchanged."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            conn.execute("SET default_toast_compression = lz4")
        except psycopg.errors.InvalidParameterValue:
            pytest.skip("this PostgreSQL server is built without lz4")
        methods = dict(conn.execute(
            "SELECT attrelid::regclass::text || '.' || attname, attcompression FROM pg_attribute"
            " WHERE attrelid::regclass::text IN ('streams', 'artifact_job_state', 'artifacts', 'events',"
            " 'idempotency_keys') AND attname LIKE '%\\_json'").fetchall())
        assert methods == {"streams.snapshot_json": "l", "artifact_job_state.state_json": "l",
                           "artifacts.artifact_json": "l", "events.event_json": "l",
                           "idempotency_keys.response_json": "l"}
        snapshot = json.dumps({"fold": [{"n": n, "note": "x" * (n % 7)} for n in range(2_000)]})
        conn.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                     " head_event_id, snapshot_json) VALUES ('t', 's', 'job', 1, 'h', 'e', %s)", (snapshot,))
        stored = conn.execute("SELECT snapshot_json, pg_column_compression(snapshot_json) FROM streams").fetchone()
        assert stored == (snapshot, "lz4")


def test_after_commit_callbacks_run_once_committed_and_never_on_rollback(db: Database) -> None:
    ran: list[str] = []
    with db.transaction() as tx:
        tx.after_commit(lambda: ran.append("first"))
        tx.after_commit(lambda: ran.append("second"))
        assert ran == []  # not before the commit
    assert ran == ["first", "second"]
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.after_commit(lambda: ran.append("rolled back"))
        raise RuntimeError("the transaction fails")
    assert ran == ["first", "second"]
