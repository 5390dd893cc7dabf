"""Recording a batch's outcomes when delivery workers overlap: two workers whose failed batches touch the same
destinations in opposite orders (PostgreSQL row locks), an outcome that arrives after its lease was lost, and the
leases of deliveries that failed before sending while the rest of their batch is sent."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from settlekit import failpoints
from settlekit.application.destinations import destination_stats
from settlekit.delivery import auto_disable
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.secrets import store_secret
from settlekit.delivery.sender import Outcome, SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.errors import DatabaseUnavailableError
from settlekit.events.canonical import canonical_hash
from settlekit.store import deliveries as store
from settlekit.store import delivery_recovery
from settlekit.store.db import Database, Tx

T0 = datetime(2026, 1, 2, tzinfo=UTC)
TENANT = "ten"


def _artifact(job: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
                           "artifactId": f"cert_{job}_evt_1", "tenantId": TENANT, "jobId": job, "jobVersion": 1}
    doc["artifactHash"] = canonical_hash(doc)
    return doc


def _loader(docs: Mapping[str, Mapping[str, Any]]) -> Any:
    def load(tx: Tx, tenant: str, artifact_id: str) -> Mapping[str, Any] | None:
        return docs.get(artifact_id)
    return load


def _lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock'").fetchone()
    return int(row[0]) if row else 0


def test_workers_recording_failures_to_the_same_destinations_in_opposite_orders(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker A's batch fails to d1 then d2, worker B's to d2 then d1. A has counted d1's failure (its row locked)
    when B records; before, B locked d2 and waited for d1 while A waited for d2: PostgreSQL aborted one pass,
    whose outcomes were lost and whose deliveries stayed leased. Now both passes are recorded."""
    if db.dialect != "postgres":
        pytest.skip("SQLite's writers take turns: no row locks")
    url = db.url  # type: ignore[attr-defined]
    docs = {}
    with db.transaction() as tx:
        ref = store_secret(tx, TENANT, generate_secret())
        for dest in ("d1", "d2"):  # nothing listens on port 9: every send fails at once
            store.put_destination(tx, store.Destination(tenant_id=TENANT, destination_id=dest,
                                                        url="http://127.0.0.1:9/hook", secret_ref=ref), now=T0)
    for job in ("a", "b"):
        doc = _artifact(job)
        docs[doc["artifactId"]] = doc
        with db.transaction() as tx:
            enqueue_artifact(tx, TENANT, doc, now=T0)
    # due times that make A's batch [a -> d1, a -> d2] and B's [b -> d2, b -> d1]
    due = {("cert_a_evt_1", "d1"): 1, ("cert_a_evt_1", "d2"): 2, ("cert_b_evt_1", "d2"): 3,
           ("cert_b_evt_1", "d1"): 4}
    with db.transaction() as tx:
        for (artifact_id, dest), seconds in due.items():
            tx.execute("UPDATE deliveries SET next_attempt_at = ? WHERE artifact_id = ? AND destination_id = ?",
                       (T0 + timedelta(seconds=seconds), artifact_id, dest))
    now = T0 + timedelta(minutes=1)
    config = WorkerConfig(batch_size=2, allow_insecure_http=True, allow_loopback=True,
                          sender=SenderConfig(timeout=2.0, connect_timeout=1.0),
                          retry=RetryPolicy(base=2, cap=60, max_attempts=5, jitter="none"))
    a_counted_first = threading.Event()
    original = auto_disable.store.update_streak

    def update_streak(tx: Tx, *args: Any, **kwargs: Any) -> None:
        original(tx, *args, **kwargs)
        if not a_counted_first.is_set():  # the first count is A's (B starts after it)
            a_counted_first.set()  # d1's row is locked by A: hold it until B waits for a row lock
            deadline = time.monotonic() + 20
            while _lock_waiters(url) == 0 and time.monotonic() < deadline:
                time.sleep(0.02)

    monkeypatch.setattr(auto_disable.store, "update_streak", update_streak)
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        async def one_pass() -> Any:
            async with DeliveryWorker(db, artifact_loader=_loader(docs), config=config, clock=lambda: now,
                                      worker_id=name) as worker:
                return await worker.run_once()
        try:
            results[name] = asyncio.run(one_pass())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results[name] = exc

    a = threading.Thread(target=run, args=("A",), name="worker-A")
    a.start()
    assert a_counted_first.wait(20)
    b = threading.Thread(target=run, args=("B",), name="worker-B")
    b.start()
    a.join(60)
    b.join(60)
    with db.read() as tx:
        rows = store.list_deliveries(tx, TENANT)
    assert {name: type(r).__name__ for name, r in results.items()} == {"A": "DeliveryPassResult",
                                                                        "B": "DeliveryPassResult"}, results
    assert sorted((r.artifact_id, r.destination_id, r.attempts, r.lease_owner) for r in rows) == [
        ("cert_a_evt_1", "d1", 1, None), ("cert_a_evt_1", "d2", 1, None),
        ("cert_b_evt_1", "d1", 1, None), ("cert_b_evt_1", "d2", 1, None)]
    with db.read() as tx:
        streaks = {dest: delivery_recovery.streak(tx, TENANT, dest)[0] for dest in ("d1", "d2")}
    assert streaks == {"d1": 2, "d2": 2}


def _claimed_twice(db: Database, job: str) -> tuple[DeliveryWorker, Any, DeliveryWorker, Any, datetime]:
    """One delivery claimed by worker A, then, once A's lease ran out, by worker B: (A, A's claim, B, B's claim,
    the time of B's claim)."""
    doc = _artifact(job)
    with db.transaction() as tx:
        store.put_destination(tx, store.Destination(tenant_id=TENANT, destination_id="d1",
                                                    url="https://a.example/", secret_ref="env:X"), now=T0)
        enqueue_artifact(tx, TENANT, doc, now=T0)
    config = WorkerConfig()
    later = T0 + config.lease + timedelta(seconds=1)
    a, b = (DeliveryWorker(db, artifact_loader=_loader({doc["artifactId"]: doc}), config=config,
                           clock=lambda: later, worker_id=name) for name in ("A", "B"))
    with db.transaction() as tx:
        [claimed_a] = store.claim(tx, worker="A", limit=10, lease=config.lease, now=T0)
    with db.transaction() as tx:
        [claimed_b] = store.claim(tx, worker="B", limit=10, lease=config.lease, now=later)
    assert claimed_a.id == claimed_b.id
    return a, claimed_a, b, claimed_b, later


def test_an_outcome_after_its_lease_was_lost_does_not_take_the_attempt_log(db: Database) -> None:
    """A's send outlives its lease, B claims the delivery and delivers it, then A's timeout arrives: the attempt
    log holds B's 200 (before, A's late timeout took the attempt number and B's success was dropped), and the
    destination's statistics and failure streak count only B's attempt."""
    a, claimed_a, b, claimed_b, later = _claimed_twice(db, "j")
    done = b._complete([Outcome(tag=claimed_b, status=200, error=None, error_message=None, retry_after=None,
                                duration_ms=5.0, started_at=later)], sent=1)
    assert done.delivered == 1
    late = a._complete([Outcome(tag=claimed_a, status=None, error="timeout", error_message="timed out",
                                retry_after=None, duration_ms=30000.0, started_at=T0)], sent=1)
    assert late.lease_lost == 1
    with db.read() as tx:
        row = store.get_delivery(tx, claimed_b.id)
        attempts = store.list_attempts(tx, claimed_b.id)
        streak = delivery_recovery.streak(tx, TENANT, "d1")[0]
    assert row is not None and (row.state, row.last_status, row.attempts) == ("delivered", 200, 1)
    assert attempts == [(1, 200, None)]
    assert streak == 0
    stats = destination_stats(db, TENANT, "d1", since=T0 - timedelta(hours=1), until=T0 + timedelta(hours=1))
    assert stats["attempts"]["succeeded"] == 1 and stats["lastError"] is None, stats


def test_a_lease_lost_outcome_arriving_first_is_not_logged_either(db: Database) -> None:
    """The other order: A's late failure arrives before B's success. It is not logged, B's success is attempt 1."""
    a, claimed_a, b, claimed_b, later = _claimed_twice(db, "k")
    late = a._complete([Outcome(tag=claimed_a, status=503, error=None, error_message=None, retry_after=None,
                                duration_ms=9.0, started_at=T0)], sent=1)
    assert late.lease_lost == 1
    with db.read() as tx:
        assert store.list_attempts(tx, claimed_a.id) == []
        assert delivery_recovery.streak(tx, TENANT, "d1")[0] == 0
    b._complete([Outcome(tag=claimed_b, status=200, error=None, error_message=None, retry_after=None,
                         duration_ms=5.0, started_at=later)], sent=1)
    with db.read() as tx:
        assert store.list_attempts(tx, claimed_b.id) == [(1, 200, None)]


def test_a_delivery_failing_before_the_send_is_recorded_at_once_while_the_other_is_sent(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim of one delivery that is sent and one whose artifact is missing: the missing one is recorded at once
    (not held until the send ends), and the lease renewals during the send cover the one in flight."""
    sent_doc, missing_doc = _artifact("s"), _artifact("m")
    with db.transaction() as tx:
        ref = store_secret(tx, TENANT, generate_secret())
        store.put_destination(tx, store.Destination(tenant_id=TENANT, destination_id="d1",
                                                    url="http://127.0.0.1:9/hook", secret_ref=ref), now=T0)
        enqueue_artifact(tx, TENANT, sent_doc, now=T0)
        enqueue_artifact(tx, TENANT, missing_doc, now=T0)
    config = WorkerConfig(allow_insecure_http=True, allow_loopback=True, lease=timedelta(seconds=10),
                          lease_renew=0.05)
    worker = DeliveryWorker(db, artifact_loader=_loader({sent_doc["artifactId"]: sent_doc}), config=config,
                            clock=lambda: T0 + timedelta(minutes=1), worker_id="A")
    renewed: list[list[int]] = []
    original_renew = worker._renew

    def renew(ids: list[int]) -> int:
        renewed.append(sorted(ids))
        return original_renew(ids)

    monkeypatch.setattr(worker, "_renew", renew)
    states_during_send: list[dict[str, str]] = []

    async def slow_send(request: Any) -> Outcome:
        deadline = time.monotonic() + 10
        while not renewed and time.monotonic() < deadline:  # the send lasts past a renewal
            await asyncio.sleep(0.01)
        with db.read() as tx:
            states_during_send.append({r.artifact_id: r.state for r in store.list_deliveries(tx, TENANT)})
        return Outcome(tag=request.tag, status=200, error=None, error_message=None, retry_after=None,
                       duration_ms=300.0, started_at=T0)

    monkeypatch.setattr(worker._sender, "send", slow_send)

    async def one_pass() -> Any:
        async with worker:
            return await worker.run_once()

    result = asyncio.run(one_pass())
    assert (result.delivered, result.failed + result.retried, result.lease_lost) == (1, 1, 0)
    assert states_during_send[0][sent_doc["artifactId"]] == "pending"
    with db.read() as tx:
        [in_flight] = [r.id for r in store.list_deliveries(tx, TENANT) if r.artifact_id == sent_doc["artifactId"]]
    assert renewed and all(batch == [in_flight] for batch in renewed), (renewed, in_flight)


def _outage_pass(db: Database, monkeypatch: pytest.MonkeyPatch, *, failures: int,
                 lease: timedelta) -> tuple[Any, list[int], store.Delivery]:
    """One worker pass whose send answers 200 and whose completion meets `failures` database outages first:
    (the pass's result or the error it raised, the ids whose leases were renewed meanwhile, the delivery)."""
    doc = _artifact("o")
    with db.transaction() as tx:
        ref = store_secret(tx, TENANT, generate_secret())
        store.put_destination(tx, store.Destination(tenant_id=TENANT, destination_id="d1",
                                                    url="http://127.0.0.1:9/hook", secret_ref=ref), now=T0)
        enqueue_artifact(tx, TENANT, doc, now=T0)
    config = WorkerConfig(allow_insecure_http=True, allow_loopback=True, lease=lease, lease_renew=0.05,
                          lease_margin=0.01, error_sleep=0.02)
    worker = DeliveryWorker(db, artifact_loader=_loader({doc["artifactId"]: doc}), config=config,
                            clock=lambda: T0 + timedelta(minutes=1), worker_id="A")
    renewed: list[int] = []
    original_renew = worker._renew

    def renew(ids: list[int]) -> int:
        renewed.extend(ids)
        return original_renew(ids)

    monkeypatch.setattr(worker, "_renew", renew)

    async def send(request: Any) -> Outcome:
        return Outcome(tag=request.tag, status=200, error=None, error_message=None, retry_after=None,
                       duration_ms=3.0, started_at=T0)

    monkeypatch.setattr(worker._sender, "send", send)
    left = [failures]

    def outage(worker_id: str) -> None:  # inside the completion's transaction: it rolls back
        if left[0] > 0:
            left[0] -= 1
            time.sleep(0.03)
            raise DatabaseUnavailableError(cause="OperationalError")

    failpoints.arm("delivery.completing", outage)

    async def one_pass() -> Any:
        async with worker:
            try:
                return await worker.run_once()
            except DatabaseUnavailableError as exc:
                return exc

    result = asyncio.run(one_pass())
    with db.read() as tx:
        [row] = store.list_deliveries(tx, TENANT)
    return result, renewed, row


def test_a_completion_that_meets_a_short_database_outage_is_recorded_once_the_database_is_back(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The send answered 200, then recording it failed twice (database unavailable). Before, the pass failed: the
    delivery stayed leased until its lease ran out, was sent again and its claim counted toward crash_loop. Now
    the completion is retried with the lease renewed meanwhile: delivered, one attempt logged, lease released."""
    result, renewed, row = _outage_pass(db, monkeypatch, failures=2, lease=timedelta(seconds=5))
    assert not isinstance(result, BaseException), result
    assert result.delivered == 1
    assert (row.state, row.attempts, row.lease_owner, row.last_status) == ("delivered", 1, None, 200)
    with db.read() as tx:
        assert store.list_attempts(tx, row.id) == [(1, 200, None)]


def test_a_completion_outage_longer_than_the_lease_fails_the_pass_and_leaves_the_lease_to_expire(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past one lease of retries the pass fails as before: nothing is recorded, the delivery stays leased to the
    worker (claimable once the lease has expired), and the leases were renewed while it retried."""
    result, renewed, row = _outage_pass(db, monkeypatch, failures=1000, lease=timedelta(seconds=0.3))
    assert isinstance(result, DatabaseUnavailableError)
    assert (row.state, row.attempts, row.lease_owner) == ("pending", 0, "A")
    assert renewed and set(renewed) == {row.id}
    with db.read() as tx:
        assert store.list_attempts(tx, row.id) == []
