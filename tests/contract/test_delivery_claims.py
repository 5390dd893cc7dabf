"""The worker's claim path under concurrency (both backends; the lock tests PostgreSQL): what a read chose is claimed
only if it is still due; a killed worker's deliveries do not hide another tenant's; the records, streak and circuit
updates and lease renewals of several workers never wait on each other in a cycle; a tenant's slow name servers do
not hold up other tenants' deliveries."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from test_delivery_isolation import Running, destination, wait_until, worker_for
from test_delivery_worker import SECRET, T0, Artifacts, artifact, enqueue

from settlekit.delivery.auto_disable import AutoDisable, record_outcomes
from settlekit.delivery.fairness import Caps, allocate
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.endpoints import HoldingReceiver

LEASE = timedelta(seconds=10)


def _due_now(db: Database, now: datetime) -> list[store.DueDelivery]:
    with db.read() as tx:
        return store.due_per_destination(tx, per_destination=4, now=now)


def test_a_claim_takes_only_what_is_still_due(db: Database) -> None:
    """A read chose a delivery; meanwhile another worker sent it and scheduled its retry, or the destination was
    disabled, or its circuit opened: the claim leaves it out."""
    arts = Artifacts()
    destination(db, "http://127.0.0.1:9/a", "ten", "d1")
    enqueue(db, arts, artifact("j1", 1))
    now = T0 + timedelta(seconds=1)
    [seen] = _due_now(db, now)
    with db.transaction() as tx:  # another worker: claim, send, retry in 60 s
        [d] = store.claim_ids(tx, [seen.id], worker="w2", lease=LEASE, now=now)
        assert store.mark_retry(tx, d.id, "w2", status=500, error="non_2xx",
                                next_attempt_at=now + timedelta(seconds=60), now=now)
    with db.transaction() as tx:
        assert store.claim_ids(tx, [seen.id], worker="w1", lease=LEASE, now=now) == []
    later = now + timedelta(seconds=61)
    [seen] = _due_now(db, later)
    with db.transaction() as tx:
        store.set_circuit(tx, "ten", "d1", store.Circuit(5, 1, later + timedelta(seconds=30)))
    with db.transaction() as tx:
        assert store.claim_ids(tx, [seen.id], worker="w1", lease=LEASE, now=later) == []
    with db.transaction() as tx:
        store.set_circuit(tx, "ten", "d1", store.Circuit())
        assert store.disable_if_active(tx, "ten", "d1", reason="gone", now=later)
    with db.transaction() as tx:
        assert store.claim_ids(tx, [seen.id], worker="w1", lease=LEASE, now=later) == []


def test_deliveries_in_flight_at_a_kill_do_not_hide_another_tenants_new_ones(db: Database) -> None:
    """A killed worker's deliveries come back claimed once: they go out as usual (only a delivery claimed twice
    without an outcome goes alone), so tenant B's new deliveries are dealt as well."""
    arts = Artifacts()
    destination(db, "http://127.0.0.1:9/a", "A", "slow")
    destination(db, "http://127.0.0.1:9/b", "B", "fast")
    for i in range(8):
        enqueue(db, arts, artifact(f"a{i}", 1, tenant="A"), now=T0)
    for i in range(4):
        enqueue(db, arts, artifact(f"b{i}", 1, tenant="B"), now=T0 + timedelta(seconds=1))
    with db.transaction() as tx:  # in flight at the kill
        tx.execute("UPDATE deliveries SET claims = 1")
    for i in range(4, 20):
        enqueue(db, arts, artifact(f"b{i}", 1, tenant="B"), now=T0 + timedelta(seconds=30))
    picks = allocate(_due_now(db, T0 + timedelta(seconds=40)), slots=63, caps=Caps(), busy_destinations={},
                     busy_tenants={}, quarantine_free=False)
    assert sum(p.tenant_id == "B" for p in picks) == Caps().per_destination
    assert sum(p.tenant_id == "A" for p in picks) == Caps().per_destination


def _outcome(ok: bool, now: datetime) -> Outcome:
    return Outcome(tag=None, status=200 if ok else 500, error=None, error_message=None, retry_after=None,
                   duration_ms=1.0, started_at=now)


def test_two_records_updating_the_same_destinations_never_deadlock(db: Database) -> None:
    """Worker 1 records a failure to A and a success to B, worker 2 the reverse, at once: each locks every
    destination it records for first, in one order (as `DeliveryWorker._complete` does)."""
    if db.dialect != "postgres":
        pytest.skip("row locks: PostgreSQL (SQLite's writers take turns)")
    for d in ("A", "B"):
        destination(db, "http://127.0.0.1:9/x", "t", d)
    now = datetime.now(UTC)
    with db.transaction() as tx:  # both with a failure streak going: a success resets it (a write)
        tx.execute("UPDATE destinations SET failure_streak = 2, failing_since = ?", (store.db_time(tx, now),))
    barrier, errors = threading.Barrier(2), []

    def record(failed: str, succeeded: str) -> None:
        try:
            with db.transaction() as tx:
                store.lock_destinations(tx, [("t", failed), ("t", succeeded)])
                barrier.wait(timeout=1)
                record_outcomes(tx, [("t", failed, _outcome(False, now)), ("t", succeeded, _outcome(True, now))],
                                AutoDisable(), now)
        except threading.BrokenBarrierError:
            pass  # the other one holds the locks: it goes first, this one after
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=record, args=pair) for pair in (("A", "B"), ("B", "A"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors


def test_a_lease_renewal_and_a_record_never_deadlock(db: Database) -> None:
    """The renewal of everything in flight skips rows a record holds (they are being recorded) and locks the rest
    in id order; the record updates rows in id order too."""
    if db.dialect != "postgres":
        pytest.skip("row locks: PostgreSQL")
    arts = Artifacts()
    destination(db, "http://127.0.0.1:9/x", "t", "d")
    for i in range(2):
        enqueue(db, arts, artifact(f"j{i}", 1, tenant="t"), now=T0)
    now = T0 + timedelta(seconds=1)
    with db.transaction() as tx:
        ids = sorted(d.id for d in store.claim_ids(tx, [d.id for d in _due_now(db, now)], worker="w", lease=LEASE,
                                                    now=now))
    holding, errors, renewed = threading.Event(), [], []

    def record() -> None:
        try:
            with db.transaction() as tx:
                store.mark_retry(tx, ids[1], "w", status=500, error="x", next_attempt_at=now, now=now)
                holding.set()
                time.sleep(0.5)
                store.mark_retry(tx, ids[0], "w", status=500, error="x", next_attempt_at=now, now=now)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def renew() -> None:
        holding.wait(5)
        try:
            with db.transaction() as tx:
                renewed.append(store.renew_leases(tx, ids, "w", lease=LEASE, now=now))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=record), threading.Thread(target=renew)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert renewed == [1]  # the row being recorded was skipped


def test_a_tenants_slow_name_servers_do_not_hold_up_another_tenants_deliveries(db: Database) -> None:
    """Tenant A's 16 sends wait 8 s each for a host name lookup (its own slow name servers, simulated on the
    event loop's default executor, as the lookups used to run); tenant B's deliveries go out at once: the worker's
    claims and records run on threads of its own."""

    async def slow_resolver(host: str, port: int) -> list[str]:
        if host.startswith("slow"):
            await asyncio.get_running_loop().run_in_executor(None, time.sleep, 3.0)
        return ["127.0.0.1"]

    fast = HoldingReceiver(secrets=[SECRET], tolerance_seconds=10**10).start()
    try:
        arts = Artifacts()
        for i in range(4):
            destination(db, f"http://slow{i}.example:9/x", "A", f"s{i}")
        destination(db, fast.url, "B", "fast")
        for i in range(16):
            enqueue(db, arts, artifact(f"a{i}", 1, tenant="A"), now=datetime.now(UTC))
        worker = worker_for(db, arts, sender=SenderConfig(timeout=2.0, connect_timeout=2.0))
        worker._sender = WebhookSender(worker.config.sender, resolver=slow_resolver)
        with Running(worker) as running:
            time.sleep(0.5)  # A's sends have started; their lookups hold the default executor's threads
            t0 = time.monotonic()
            for i in range(5):
                enqueue(db, arts, artifact(f"b{i}", 1, tenant="B"), now=datetime.now(UTC))
            running.worker.wake()
            wait_until(lambda: len(fast.received) == 5, 60, "B's deliveries")
            took = time.monotonic() - t0
        print(f"B's 5 deliveries while A's lookups hang: {took:.2f} s")
        assert took < 2.0, took  # behind A's lookups it would take 3 s and more
    finally:
        fast.stop()
