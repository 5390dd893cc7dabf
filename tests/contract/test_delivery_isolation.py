"""One tenant's endpoints cannot stall another's deliveries (both backends, loopback endpoints only):

- fairness: tenant A's destination holds every request 10 s and A replays 200 deliveries; tenant B's deliveries,
  enqueued meanwhile, keep their normal latency while A's backlog is still draining;
- a black hole (accepts the connection, never answers) and a resetter: their deliveries time out or fail on their
  own, the circuit opens and their due deliveries wait without spending attempts, B is untouched; a half-open
  circuit sends one probe at a time, and an answer closes it;
- a worker process killed with 64 sends in flight loses nothing: every delivery delivered once in the database,
  the resends carry the same webhook-id.

Run as a script (`python test_delivery_isolation.py DB_URL`), this module is the worker process the kill test kills.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_delivery_faults import RealClock, regenerate
from test_delivery_worker import SECRET, Artifacts, add_destination, artifact, deliveries, enqueue

from settlekit.application.destinations import replays
from settlekit.delivery.circuit import CircuitPolicy
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.fairness import Caps
from settlekit.delivery.replays import ReplayPolicy
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.secrets import store_secret
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.store import deliveries as store
from settlekit.store.db import Database, connect
from support.endpoints import BlackHole, HoldingReceiver, Resetter

A, B = "tenant-a", "tenant-b"


def destination(db: Database, url: str, tenant: str, destination_id: str) -> None:
    """An active destination of `tenant` signing with SECRET (stored as the tenant's secret)."""
    with db.transaction() as tx:
        ref = store_secret(tx, tenant, SECRET)
    add_destination(db, url, ref, tenant_id=tenant, destination_id=destination_id)


def worker_for(db: Database, arts: Any, clock: Any = None, **cfg: Any) -> DeliveryWorker:
    config = dict(allow_insecure_http=True, allow_loopback=True, lease=timedelta(seconds=20), idle_sleep=0.05,
                  sender=SenderConfig(timeout=15.0, connect_timeout=2.0),
                  retry=RetryPolicy(base=60.0, cap=60.0, jitter="none"))
    config.update(cfg)
    return DeliveryWorker(db, artifact_loader=arts, config=WorkerConfig(**config),
                          **({"clock": clock} if clock is not None else {}))


class Running:
    """A worker's `run()` on a thread of its own, stopped (and joined) on exit."""

    def __init__(self, worker: DeliveryWorker):
        self.worker = worker
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            async with self.worker:
                await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__
            self.error = exc

    def __enter__(self) -> Running:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self._thread.join(30)
        assert not self._thread.is_alive()
        assert self.error is None, self.error


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q + 0.999999) - 1))]


@pytest.fixture
def slow() -> Iterator[HoldingReceiver]:
    rx = HoldingReceiver(hold=10.0, secrets=[SECRET], tolerance_seconds=10**10).start()
    yield rx
    rx.stop()


@pytest.fixture
def fast() -> Iterator[HoldingReceiver]:
    rx = HoldingReceiver(secrets=[SECRET], tolerance_seconds=10**10).start()
    yield rx
    rx.stop()


def test_a_slow_tenant_replaying_200_deliveries_does_not_delay_another_tenant(
        db: Database, slow: HoldingReceiver, fast: HoldingReceiver) -> None:
    arts = Artifacts()
    destination(db, slow.url, A, "slow")
    destination(db, fast.url, B, "fast")
    created = datetime.now(UTC) - timedelta(hours=1)
    for i in range(200):
        enqueue(db, arts, artifact(f"a{i}", 1, tenant=A), now=created)
    with db.transaction() as tx:  # A's day of deliveries, delivered once
        tx.execute("UPDATE deliveries SET state = 'delivered', delivered_at = ? WHERE tenant_id = ?",
                   (store.db_time(tx, created), A))
    with db.transaction() as tx:  # ... and replayed (as `POST /v1/destinations/slow/replay` does)
        replay, _ = replays.create(tx, A, "slow", since=created - timedelta(minutes=1), until=datetime.now(UTC),
                                   policy=ReplayPolicy(rate=100.0), actor="test", now=datetime.now(UTC))
    assert replay.total == 200
    latencies: list[float] = []
    with Running(worker_for(db, arts, replay=ReplayPolicy(rate=100.0))) as running:
        assert slow.wait_held(Caps().per_destination, 20), "A's endpoint never got its share of requests"
        sent_at: dict[str, float] = {}
        for i in range(30):  # B's jobs, as they come, while A's requests hang
            doc = artifact(f"b{i}", 1, tenant=B)
            enqueue(db, arts, doc, now=datetime.now(UTC))
            sent_at[doc["artifactId"]] = time.monotonic()
            running.worker.wake()
            time.sleep(0.1)
        wait_until(lambda: len(fast.received) == 30, 30, "B's deliveries")
        by_message = {d.message_id: d.artifact_id for d in deliveries(db, B)}
        latencies = [fast.arrivals[m] - sent_at[by_message[m]] for m in fast.received]
        pending_a = len(deliveries(db, A, state="pending", limit=1000))
        assert slow.max_held <= Caps().per_destination
        slow.release()  # let the held requests end, so the worker stops at once
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(f"B's delivery latency while A's 10 s endpoint drains 200 replayed deliveries: p50 {p50 * 1000:.0f} ms,"
          f" p99 {p99 * 1000:.0f} ms; A still pending: {pending_a}")
    assert pending_a >= 150, pending_a  # A's backlog was still draining the whole time
    assert p99 < 3.0, latencies


def _circuit(db: Database, tenant: str, destination: str) -> store.Circuit:
    with db.read() as tx:
        circuit = store.get_circuit(tx, tenant, destination)
    assert circuit is not None
    return circuit


@pytest.mark.parametrize("endpoint", [BlackHole, Resetter], ids=["black_hole", "reset"])
def test_a_dead_endpoint_only_hurts_itself_and_its_circuit_opens_then_probes(
        db: Database, fast: HoldingReceiver, endpoint: type[BlackHole | Resetter]) -> None:
    arts, clock = Artifacts(), RealClock()
    policy = CircuitPolicy(threshold=3, probe=timedelta(seconds=60), probe_max=timedelta(seconds=240))
    with endpoint() as dead:
        destination(db, dead.url, A, "dead")
        destination(db, fast.url, B, "fast")
        for i in range(12):
            enqueue(db, arts, artifact(f"a{i}", 1, tenant=A), now=clock())
        worker = worker_for(db, arts, clock, circuit=policy, sender=SenderConfig(timeout=1.0, connect_timeout=0.5))
        with Running(worker) as running:
            for i in range(10):
                enqueue(db, arts, artifact(f"b{i}", 1, tenant=B), now=clock())
                running.worker.wake()
            wait_until(lambda: len(fast.received) == 10, 20, "B's deliveries")
            wait_until(lambda: _circuit(db, A, "dead").open_until is not None, 20, "the circuit to open")
            wait_until(lambda: sum(d.attempts > 0 for d in deliveries(db, A)) == dead.accepted, 10,
                       "the sends in flight when it opened to end")
            rows = deliveries(db, A)
            attempted = [d for d in rows if d.attempts > 0]
            # at most the sends in flight when it opened (one destination's cap) beyond the threshold
            assert policy.threshold <= len(attempted) <= policy.threshold + Caps().per_destination, attempted
            assert all(d.last_error in ("timeout", "network_error") for d in attempted)
            assert all(d.attempts == 0 for d in rows if d not in attempted)  # waiting without spending attempts
            assert dead.accepted == len(attempted)
            circuit = _circuit(db, A, "dead")
            assert circuit.opens == 1 and circuit.failures >= policy.threshold
            # half-open after the probe interval: one request at a time; another failure doubles the interval
            accepted = dead.accepted
            clock.advance(61)
            running.worker.wake()
            wait_until(lambda: _circuit(db, A, "dead").opens == 2, 20, "the probe to fail")
            assert dead.accepted == accepted + 1
            reopened = _circuit(db, A, "dead")
            assert reopened.open_until is not None
            assert timedelta(seconds=115) < reopened.open_until - clock() <= timedelta(seconds=120)
        # the endpoint answers again: the next probe closes the circuit and the rest are delivered
        with db.transaction() as tx:
            tx.execute("UPDATE destinations SET url = ? WHERE tenant_id = ? AND destination_id = ?",
                       (fast.url, A, "dead"))
            tx.execute("UPDATE deliveries SET next_attempt_at = ? WHERE tenant_id = ?", (store.db_time(tx, clock()), A))
        clock.advance(121)
        with Running(worker_for(db, arts, clock, circuit=policy)):
            wait_until(lambda: all(d.state == "delivered" for d in deliveries(db, A)), 20, "A's deliveries")
        assert _circuit(db, A, "dead") == store.Circuit()


def test_the_circuit_shows_on_the_destination(db: Database) -> None:
    from support.api import client, key_for, make_app

    destination(db, "http://127.0.0.1:9/hook", A, "d")  # no worker runs here
    api = client(make_app(db), key_for(db, A, ["ops"]))
    assert api.get("/v1/destinations/d").json()["circuit"] == {
        "state": "closed", "consecutiveTimeouts": 0, "opens": 0, "openUntil": None}
    until = datetime.now(UTC) + timedelta(minutes=5)
    with db.transaction() as tx:
        store.set_circuit(tx, A, "d", store.Circuit(7, 2, until))
    shown = api.get("/v1/destinations/d").json()["circuit"]
    assert (shown["state"], shown["consecutiveTimeouts"], shown["opens"]) == ("open", 7, 2)
    assert api.get("/v1/destinations/d/stats").json()["circuit"]["state"] == "open"
    with db.transaction() as tx:
        store.set_circuit(tx, A, "d", store.Circuit(7, 2, datetime.now(UTC) - timedelta(seconds=1)))
    assert api.get("/v1/destinations/d").json()["circuit"]["state"] == "half_open"
    api.post("/v1/destinations/d/disable")
    assert api.post("/v1/destinations/d/enable").status_code == 200
    assert api.get("/v1/destinations/d").json()["circuit"]["state"] == "closed"  # enabling closes it


# --- a worker process killed with 64 sends in flight -----------------------------------------------------------

TENANTS, DESTINATIONS_PER_TENANT, PER_DESTINATION = 4, 4, 8


def _worker_main(db_url: str) -> None:
    """The kill test's worker process: default caps (64 in flight, 4 per destination, 16 per tenant)."""
    db = connect(db_url)

    async def main() -> None:
        worker = DeliveryWorker(db, artifact_loader=regenerate, config=WorkerConfig(
            allow_insecure_http=True, allow_loopback=True, lease=timedelta(seconds=3), lease_margin=0.5,
            idle_sleep=0.05, sender=SenderConfig(timeout=30.0)))
        async with worker:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
            await worker.run()

    try:
        asyncio.run(main())
    finally:
        db.close()


def test_a_worker_killed_with_64_sends_in_flight_loses_nothing(db: Database) -> None:
    rx = HoldingReceiver(hold=60.0, secrets=[SECRET], tolerance_seconds=10**10).start()
    procs: list[subprocess.Popen[bytes]] = []

    def spawn() -> subprocess.Popen[bytes]:
        here = Path(__file__).resolve().parent
        path = os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])
        p = subprocess.Popen([sys.executable, __file__, db.url], stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": path})
        procs.append(p)
        return p

    try:
        n = 0
        for t in range(TENANTS):
            for d in range(DESTINATIONS_PER_TENANT):
                destination(db, f"{rx.url}t{t}/{d}", f"t{t}", f"d{d}")
        with db.transaction() as tx:
            for t in range(TENANTS):
                for j in range(PER_DESTINATION):
                    n += enqueue_artifact(tx, f"t{t}", artifact(f"k{j}", 1, tenant=f"t{t}"), now=RealClock()())
        assert n == TENANTS * DESTINATIONS_PER_TENANT * PER_DESTINATION
        first = spawn()
        assert rx.wait_held(64, 30), f"only {rx.held} requests in flight"
        first.kill()  # SIGKILL with 64 sends in flight
        first.wait(10)
        assert first.returncode == -signal.SIGKILL
        assert all(d.state == "pending" and d.attempts == 0 for t in range(TENANTS) for d in deliveries(db, f"t{t}"))
        rx.release()  # the endpoint answers from now on
        second = spawn()
        wait_until(lambda: all(d.state == "delivered" for t in range(TENANTS) for d in deliveries(db, f"t{t}")),
                   60, "every delivery after the restart")
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=30)
        assert second.returncode == 0, err.decode()
        rows = [d for t in range(TENANTS) for d in deliveries(db, f"t{t}")]
        assert len(rows) == n and all(d.attempts == 1 for d in rows)  # the kill cost no attempt
        assert set(rx.received) == {d.message_id for d in rows} and rx.rejected == 0
        # the 64 in flight reached the endpoint (it answered once released) and were sent again after the kill:
        # the same webhook-id each time, so the endpoint dedupes them
        assert rx.duplicates == 64
        print(f"killed with {rx.max_held} in flight; {rx.stats()}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        rx.stop()


if __name__ == "__main__":
    _worker_main(sys.argv[1])
