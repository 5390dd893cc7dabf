"""Artifact repository and the artifacts consumer on both backends: vectors through the store and the
dispatcher, reuse, conflicts, quota, reads, incremental per-job fold, BOOKED/RISK_SCORED batches, failpoints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from conftest import load_vector
from settlekit.append import Appender, job_appender
from settlekit.artifacts import state as fold_module
from settlekit.artifacts.build import build_all
from settlekit.artifacts.builders import compute_artifact_hash
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json
from settlekit.projections.artifact_store import ArtifactStore
from settlekit.projections.artifacts import ArtifactConsumer
from settlekit.store.db import Database
from settlekit.store.deliveries import Destination, put_destination
from settlekit.store.streams import row_to_stored
from support.failpoints import SimulatedCrash, crash_at

T = "tenant_default"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
VECTOR_TIME = datetime(2026, 2, 1, tzinfo=UTC)


def _load(db: Database, name: str, *, one_by_one: bool) -> tuple[Appender, dict[str, Any]]:
    vector = load_vector(name)
    # The golden vectors are streams settld's core accepted; sla_credit's credit has no recorded breach, which
    # settld's API (and the live path's server rules) refuse, so they are replayed without the server rules.
    store = job_appender(db, clock=lambda: NOW, server_rules=False)
    for signer in vector["signers"]:
        store.signer_keys.register(T, signer["publicKeyPem"], signer["role"])
    events = vector["events"]
    if one_by_one:
        for event in events:
            store.append(T, events[0]["streamId"], [event])
    else:
        store.append(T, events[0]["streamId"], events)
    return store, vector


def _one_destination(db: Database) -> None:
    """One active destination for every artifact type: each stored artifact gets exactly one delivery."""
    with db.transaction() as tx:
        put_destination(tx, Destination(T, "d0", "https://example.com/d0", "inline:s3cret"), now=NOW)


def _dispatcher(db: Database, consumer: ArtifactConsumer) -> Dispatcher:
    return Dispatcher(db, [consumer.consumer()], listen=False)


def _stored(db: Database, job_id: str) -> list[dict[str, Any]]:
    with db.read() as tx:
        page = ArtifactStore().list_for_job(tx, T, job_id, limit=1000)
    return [a.artifact for a in page.items]


def _count(db: Database, table: str) -> int:
    with db.read() as tx:
        return int(tx.scalar(f"SELECT count(*) FROM {table}"))


def _handle_all(db: Database, consumer: ArtifactConsumer, store: Appender) -> list[Any]:
    """Call the handler directly, one transaction per event, as a dispatcher turn would."""
    outcomes = []
    for se in store.streams.read_positions(0, 10_000):
        with db.transaction() as tx:
            outcomes += consumer.handle(tx, se)
    return outcomes


@pytest.mark.parametrize("name", ["claim_adjust_paid.json", "assist_coverage_royalty.json", "sla_credit.json"])
def test_dispatcher_builds_vector_artifacts(db: Database, name: str) -> None:
    _, vector = _load(db, name, one_by_one=False)
    _one_destination(db)
    consumer = ArtifactConsumer(generated_at="wall_clock", clock=lambda: VECTOR_TIME)
    _dispatcher(db, consumer).drain()
    stored = _stored(db, vector["events"][0]["streamId"])
    by_id = {a["artifactId"]: canonical_json(a) for a in stored}
    assert by_id == {a["artifactId"]: canonical_json(a) for a in vector["artifacts"]}
    assert _count(db, "deliveries") == len(vector["artifacts"])


def test_one_by_one_appends_anchor_coverage_at_the_booking(db: Database) -> None:
    store, vector = _load(db, "assist_coverage_royalty.json", one_by_one=True)
    events = vector["events"]
    _dispatcher(db, ArtifactConsumer()).drain()
    cert = _stored(db, events[0]["streamId"])[0]
    assert cert["artifactType"] == "CoverageCertificate.v1"
    # RISK_SCORED came in a later batch: the certificate is anchored at the BOOKED itself
    assert cert["atChainHash"] == events[2]["chainHash"] and cert["jobVersion"] == 3
    assert cert["job"]["risk"] is None
    # deterministic default: generatedAt is the anchor event's time, equal to the pure one-fold build
    expected = build_all(events, batch_ids=list(range(len(events))))
    assert [canonical_json(a) for a in _stored(db, events[0]["streamId"])] == [canonical_json(a) for a in expected]


def test_handler_reuses_and_never_duplicates(db: Database) -> None:
    store, vector = _load(db, "claim_adjust_paid.json", one_by_one=True)
    _one_destination(db)
    consumer = ArtifactConsumer()
    first = _handle_all(db, consumer, store)
    assert [o.created for o in first] == [True] * 10
    again = _handle_all(db, consumer, store)  # e.g. a consumer reset: every task is a reuse
    assert [o.created for o in again] == [False] * 10
    assert [o.artifact_id for o in again] == [o.artifact_id for o in first]
    assert _count(db, "artifacts") == 10 and _count(db, "deliveries") == 10


def test_incremental_fold_applies_each_event_once(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    store, vector = _load(db, "claim_adjust_paid.json", one_by_one=True)
    calls = [0]
    real = fold_module.validate_and_apply

    def counting(state: Any, event: Any) -> Any:
        calls[0] += 1
        return real(state, event)

    monkeypatch.setattr(fold_module, "validate_and_apply", counting)
    _handle_all(db, ArtifactConsumer(), store)
    events = vector["events"]
    assert calls[0] == len(events) - 1  # every event folded exactly once over the whole stream
    with db.read() as tx:
        assert tx.scalar("SELECT seq FROM artifact_job_state WHERE tenant_id = ? AND job_id = ?",
                         (T, events[0]["streamId"])) == len(events)
    calls[0] = 0
    _handle_all(db, ArtifactConsumer(incremental=False), store)  # reuse path: no folding at all
    assert calls[0] == 0


def test_direct_handler_with_minimal_ctx(db: Database) -> None:
    store, vector = _load(db, "sla_credit.json", one_by_one=False)
    _one_destination(db)

    class Ctx:
        def __init__(self, tx: Any) -> None:
            self.tx = tx

    consumer = ArtifactConsumer()
    credit = next(se for se in store.streams.read_positions(0, 100) if se.type == "SLA_CREDIT_ISSUED")
    with db.transaction() as tx:
        consumer(credit, Ctx(tx))
    ids = sorted(a["artifactId"] for a in _stored(db, credit.stream_id))
    assert ids == ["credit_job_sla_credit_cred_1", f"settlement_job_sla_credit_{credit.event_id}"]
    assert _count(db, "deliveries") == 2


@pytest.mark.parametrize("point", ["after_build_before_store", "after_store_before_deliveries"])
def test_failpoint_crash_then_restart_yields_exactly_one(db: Database, point: str) -> None:
    _, vector = _load(db, "claim_adjust_paid.json", one_by_one=True)
    with db.transaction() as tx:
        for dest in ("d1", "d2"):
            put_destination(tx, Destination(T, dest, f"https://example.com/{dest}", "inline:s3cret"), now=NOW)
    crash_at(f"artifacts.{point}")
    crashing = ArtifactConsumer(sink=WebhookDeliverySink(clock=lambda: NOW))
    with pytest.raises(SimulatedCrash, match=point):
        _dispatcher(db, crashing).drain()
    assert _count(db, "artifacts") == 0 and _count(db, "deliveries") == 0
    # restart: a fresh dispatcher and consumer resume from the committed cursor
    _dispatcher(db, ArtifactConsumer(sink=WebhookDeliverySink(clock=lambda: NOW))).drain()
    stored = _stored(db, vector["events"][0]["streamId"])
    assert len(stored) == len(vector["artifacts"]) == _count(db, "artifacts")
    with db.read() as tx:
        rows = tx.fetchall("SELECT artifact_id, destination_id FROM deliveries ORDER BY artifact_id, destination_id")
    assert len(rows) == 2 * len(stored) and len(set(rows)) == len(rows)
    assert {r[0] for r in rows} == {a["artifactId"] for a in stored}


def test_dispatcher_crash_before_commit_is_exactly_once(db: Database) -> None:
    _load(db, "sla_credit.json", one_by_one=True)
    _one_destination(db)
    consumer = ArtifactConsumer()
    dispatcher = _dispatcher(db, consumer)
    crash_at("dispatch.before_commit", subject="settlekit:artifacts")
    with pytest.raises(SimulatedCrash):
        dispatcher.drain()
    assert _count(db, "artifacts") == 0 and _count(db, "artifact_job_state") == 0
    _dispatcher(db, ArtifactConsumer()).drain()
    assert _count(db, "artifacts") == 4 and _count(db, "deliveries") == 4


# ------------------------------------------------------------------ repository


def _rehash(artifact: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {k: v for k, v in artifact.items() if k != "artifactHash"}
    out.update(changes)
    out["artifactHash"] = compute_artifact_hash(out)
    return out


def test_put_reuse_and_conflicts(db: Database) -> None:
    vector = load_vector("claim_adjust_paid.json")
    artifact = vector["artifacts"][0]
    repo = ArtifactStore()
    with db.transaction() as tx:
        first = repo.put(tx, T, artifact)
        assert first.created is True
        assert first.stored == repo.get(tx, T, artifact["artifactId"])  # the row as stored, without a read back
        again = repo.put(tx, T, artifact)
        assert again.created is False and again.stored.artifact == artifact
    cases = [
        (_rehash(artifact, generatedAt="2030-01-01T00:00:00.000Z"), "ARTIFACT_HASH_MISMATCH"),
        (_rehash(artifact, artifactId="cert_other"), "ARTIFACT_SOURCE_EVENT_CONFLICT"),
        (_rehash(artifact, artifactType="SettlementStatement.v1", schemaVersion="SettlementStatement.v1"),
         "ARTIFACT_TYPE_CONFLICT"),
        (_rehash(artifact, atChainHash="f" * 64), "ARTIFACT_ANCHOR_CONFLICT"),
        (dict(artifact, jobVersion=99), "ARTIFACT_HASH_INVALID"),
    ]
    for bad, code in cases:
        with pytest.raises(SettlekitError) as err, db.transaction() as tx:
            repo.put(tx, T, bad)
        assert err.value.code == code
    with db.read() as tx:
        stored = repo.get(tx, T, artifact["artifactId"])
        assert stored is not None and stored.artifact == artifact  # never overwritten
        assert int(tx.scalar("SELECT count(*) FROM artifacts")) == 1


def test_quota_per_job_and_type(db: Database) -> None:
    vector = load_vector("claim_adjust_paid.json")
    packets = [a for a in vector["artifacts"] if a["artifactType"] == "IncidentPacket.v1"]
    repo = ArtifactStore(max_artifacts_per_job_type=lambda tenant: 2)
    with db.transaction() as tx:
        repo.put(tx, T, packets[0])
        repo.put(tx, T, packets[1])
        repo.put(tx, T, packets[1])  # reuse does not count against the quota
        repo.put(tx, T, vector["artifacts"][0])  # another type
    with pytest.raises(SettlekitError) as err, db.transaction() as tx:
        repo.put(tx, T, packets[2])
    assert err.value.code == "ARTIFACT_QUOTA_EXCEEDED"
    assert err.value.details["limit"] == 2 and err.value.details["current"] == 2


def test_consumer_quota_fails_the_turn(db: Database) -> None:
    store, _ = _load(db, "claim_adjust_paid.json", one_by_one=True)
    consumer = ArtifactConsumer(ArtifactStore(max_artifacts_per_job_type=1))
    with pytest.raises(SettlekitError) as err:
        _handle_all(db, consumer, store)
    assert err.value.code == "ARTIFACT_QUOTA_EXCEEDED"


def test_reads_list_filter_paginate_effective(db: Database) -> None:
    store, vector = _load(db, "claim_adjust_paid.json", one_by_one=True)
    _handle_all(db, ArtifactConsumer(), store)
    job = vector["events"][0]["streamId"]
    repo = ArtifactStore()
    with db.read() as tx:
        seen: list[str] = []
        after = None
        while True:
            page = repo.list_for_job(tx, T, job, after=after, limit=3)
            seen += [a.artifact_id for a in page.items]
            if page.next_cursor is None:
                break
            after = page.next_cursor
        assert len(seen) == 10 and len(set(seen)) == 10
        versions = [repo.get(tx, T, i).job_version for i in seen]  # type: ignore[union-attr]
        assert versions == sorted(versions)
        statements = repo.list_for_job(tx, T, job, artifact_type="SettlementStatement.v1").items
        assert len(statements) == 4
        settled = vector["events"][12]
        assert settled["type"] == "SETTLED"
        only = repo.list_for_job(tx, T, job, source_event_id=settled["id"]).items
        assert {a.artifact_type for a in only} == {"WorkCertificate.v1", "SettlementStatement.v1"}
        eff = repo.effective(tx, T, job, "SettlementStatement.v1")
        assert eff is not None and eff.source_event_id == settled["id"]
        latest_packet = repo.effective(tx, T, job, "IncidentPacket.v1")
        assert latest_packet is not None and latest_packet.source_event_id == vector["events"][-1]["id"]
        assert repo.effective(tx, T, job, "ProofReceipt.v1") is None
        assert repo.get(tx, T, "nope") is None


def test_state_rows_round_trip_through_stored_events(db: Database) -> None:
    store, vector = _load(db, "assist_coverage_royalty.json", one_by_one=False)
    with db.read() as tx:
        rows = tx.fetchall("SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid FROM events"
                           " ORDER BY position")
    consumer = ArtifactConsumer(generated_at="wall_clock", clock=lambda: VECTOR_TIME)
    for r in rows:
        with db.transaction() as tx:
            consumer.handle(tx, row_to_stored(r))
    assert [canonical_json(a) for a in _stored(db, vector["events"][0]["streamId"])] == \
        [canonical_json(a) for a in vector["artifacts"]]


@pytest.mark.parametrize("second", ["identical", "other hash"])
def test_put_racing_an_uncommitted_insert_on_postgres(pg_url: str, second: str) -> None:
    """Two workers store the same artifact at once: the second insert waits for the first transaction, then adds
    nothing; it reuses the committed row when identical, else raises the conflict. One row in the end."""
    import threading

    from settlekit.store.db import connect

    artifact = load_vector("claim_adjust_paid.json")["artifacts"][0]
    other = artifact if second == "identical" else _rehash(artifact, generatedAt="2030-01-01T00:00:00.000Z")
    db = connect(pg_url)
    repo = ArtifactStore()
    try:
        first_stored = threading.Event()
        results: list[Any] = []

        def racer() -> None:
            first_stored.wait(10)
            try:
                with db.transaction() as tx:
                    results.append(repo.put(tx, T, other))
            except SettlekitError as exc:
                results.append(exc.code)

        thread = threading.Thread(target=racer)
        thread.start()
        with db.transaction() as tx:
            assert repo.put(tx, T, artifact).created is True
            first_stored.set()
            thread.join(0.5)
            assert thread.is_alive()  # the second insert waits for this transaction
        thread.join(10)
        assert not thread.is_alive()
        if second == "identical":
            assert len(results) == 1 and results[0].created is False and results[0].stored.artifact == artifact
        else:
            assert results == ["ARTIFACT_HASH_MISMATCH"]
        with db.read() as tx:
            assert int(tx.scalar("SELECT count(*) FROM artifacts")) == 1
    finally:
        db.close()
