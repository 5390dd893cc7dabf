"""Worker faults against a real ReceiverServer: crashes at failpoints and SIGKILLed worker processes lose
nothing (every artifact received exactly once after dedupe, every row delivered); graceful stop, drain,
wake-up; timeouts, receiver down then up, lease expiry, redelivery dedupe, rotated secrets.

Run as a script (`python test_delivery_faults.py DB_URL`), this module is the worker process the SIGKILL test
kills.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_delivery_worker import (
    SECRET,
    Artifacts,
    Clock,
    add_destination,
    artifact,
    deliveries,
    enqueue,
    one_pass,
    run,
)

from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.fairness import Caps
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.store.db import Database, Tx, connect
from support.failpoints import SimulatedCrash, on_worker
from support.receiver import FaultyReceiver

FAST = dict(
    lease=timedelta(seconds=2),
    lease_margin=0.5,
    allow_insecure_http=True,
    allow_loopback=True,
    idle_sleep=0.02,
)


def fast_worker(db: Database, arts: Any, clock: Any, worker_id: str, **kw: Any) -> DeliveryWorker:
    cfg = {**FAST, **kw.pop("config", {})}
    cfg.setdefault("sender", SenderConfig(timeout=1.0, connect_timeout=0.5))
    cfg.setdefault("retry", RetryPolicy(base=0.05, cap=0.2, max_attempts=50, jitter="none"))
    failpoint = kw.pop("failpoint", None)
    if failpoint is not None:
        on_worker(worker_id, failpoint)
    return DeliveryWorker(
        db, artifact_loader=arts, config=WorkerConfig(**cfg), clock=clock, worker_id=worker_id, **kw
    )


class RealClock(Clock):
    """Wall time plus an offset the test can advance (to expire leases without waiting)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> Any:
        from datetime import UTC, datetime

        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def regenerate(tx: Tx, tenant_id: str, artifact_id: str) -> Mapping[str, Any] | None:
    """Loader for worker processes: the test artifacts are a pure function of their id."""
    _, job, _, version = artifact_id.split("_")
    return artifact(job, int(version), tenant=tenant_id)


def assert_exactly_once(db: Database, rx: FaultyReceiver, n: int) -> None:
    rows = deliveries(db, limit=10 * n)
    assert len(rows) == n
    assert {d.state for d in rows} == {"delivered"}
    assert all(d.lease_owner is None for d in rows)
    assert set(rx.received) == {d.message_id for d in rows}  # each exactly once after dedupe
    by_id = {d.message_id: d for d in rows}
    for mid, doc in rx.received.items():
        assert doc["artifactHash"] == by_id[mid].artifact_hash
    accepted = sum(1 for r in rx.requests if r.outcome == "accepted")
    assert accepted == n and rx.rejected == 0


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "whsec.txt"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return f"file:{path}"


@pytest.fixture
def rx() -> Any:
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as server:
        yield server


# --- nothing lost -------------------------------------------------------------------------------------------


def test_crashes_at_random_failpoints_lose_nothing(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    n = 500
    arts, clock, rng = Artifacts(), RealClock(), random.Random(6)
    add_destination(db, rx.url, secret_file)
    with db.transaction() as tx:
        for i in range(n):
            doc = arts.add(artifact(f"j{i // 5}", i % 5 + 1))
            enqueue_artifact(tx, "ten", doc, now=clock())
    crashes: list[str] = []
    points = ["claimed", "sent", "completing", "completed"]

    def crash_at(point: str, skip: int) -> Any:
        def failpoint(name: str) -> None:
            nonlocal skip
            if name == point:
                if skip == 0:
                    crashes.append(name)
                    raise SimulatedCrash(name)
                skip -= 1

        return failpoint

    async def life(k: int) -> bool:
        fp = crash_at(points[k % 4], rng.randint(0, 1)) if k < 8 else None
        # max_claims above the 8 crashes: a delivery in flight at most of them is not a poison one here (the
        # crash-loop guard has tests of its own, in test_delivery_legacy)
        async with fast_worker(db, arts, clock, f"life{k}", failpoint=fp,
                               config={"batch_size": 30, "max_claims": 20}) as w:
            return await w.drain(timeout=20)

    for k in range(10):
        if k == 8:  # after the crashing lives (whose resends must reach the receiver): some retries on top
            rx.inject(500, count=20)
        try:
            run(life(k))
        except SimulatedCrash:
            clock.advance(3)  # the crashed worker's leases expire
    assert sorted(crashes) == sorted(points * 2)
    for _ in range(50):  # drain() returns while a retried row backs off (pending but not due)
        if not deliveries(db, state="pending"):
            break
        assert run(fast_worker(db, arts, clock, "final").drain(timeout=20))
        clock.advance(0.2)  # the retry policy's cap: what backs off is due
    assert_exactly_once(db, rx, n)
    print(f"{len(crashes)} crashes, {rx.stats()}")
    assert rx.duplicates > 0  # crashes after sending caused resends, deduped by the receiver


def _worker_main(db_url: str) -> None:
    """Entry point of the SIGKILL test's worker process: deliver until SIGTERM, then stop gracefully."""
    db = connect(db_url)

    async def main() -> None:
        worker = fast_worker(db, regenerate, RealClock(), f"proc{os.getpid()}",
                             config={"batch_size": 20, "sender": SenderConfig(timeout=1.0, concurrency=4)})
        async with worker:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, worker.stop)
            await worker.run()

    try:
        asyncio.run(main())
    finally:
        db.close()


def test_sigkilled_worker_processes_lose_nothing(pg_url: str, secret_file: str) -> None:
    """PostgreSQL only (the multi-process deployment); SQLite runs the failpoint variant."""
    n = 500
    db_url = pg_url
    db = connect(db_url)
    db.migrate()
    rx = FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10).start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        add_destination(db, rx.url, secret_file)
        with db.transaction() as tx:
            for i in range(n):
                enqueue_artifact(tx, "ten", artifact(f"j{i // 5}", i % 5 + 1), now=RealClock()())

        def spawn() -> subprocess.Popen[bytes]:
            # run as a script, this module needs tests/ (for `support`) and its own folder on the import path
            here = Path(__file__).resolve().parent
            path = os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])
            p = subprocess.Popen([sys.executable, __file__, db_url], stderr=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": path})
            procs.append(p)
            return p

        for target in (100, 250):
            p = spawn()
            assert rx.wait_for(lambda r, t=target: len(r.received) >= t, timeout=30), rx.stats()
            p.kill()  # SIGKILL: mid-batch, leases held, requests in flight
            p.wait(10)
            assert p.returncode == -signal.SIGKILL
        last = spawn()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if all(d.state == "delivered" for d in deliveries(db, limit=2 * n)):
                break
            time.sleep(0.1)
        last.send_signal(signal.SIGTERM)  # graceful
        _, err = last.communicate(timeout=10)
        assert last.returncode == 0, err.decode()
        assert_exactly_once(db, rx, n)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        rx.stop()
        db.close()


# --- lifecycle ----------------------------------------------------------------------------------------------


def test_stop_finishes_in_flight_and_releases_unsent(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), RealClock()
    add_destination(db, rx.url, secret_file)
    for i in range(8):
        enqueue(db, arts, artifact(f"j{i}", 1), now=clock())
    rx.inject(None, delay=0.4, count=8)
    claimed = threading.Event()
    w = fast_worker(db, arts, clock, "w", failpoint=lambda name: claimed.set() if name == "claimed" else None,
                    config={"sender": SenderConfig(timeout=2.0), "caps": Caps(per_destination=2),
                            "lease": timedelta(seconds=5)})

    async def scenario() -> None:
        async with w:
            task = asyncio.create_task(w.run())
            await asyncio.to_thread(claimed.wait, 5)
            # two requests in flight: each met its delayed fault
            assert await asyncio.to_thread(rx.wait_for, lambda r: r.faults_left() <= 6, 5)
            w.stop()
            await asyncio.wait_for(task, 5)

    run(scenario())
    rows = deliveries(db)
    done = [d for d in rows if d.state == "delivered"]
    waiting = [d for d in rows if d.state == "pending"]
    assert len(done) == 2 and len(rx.received) == 2  # in-flight attempts finished and were recorded
    assert len(waiting) == 6 and all(d.lease_owner is None and d.attempts == 0 for d in waiting)
    assert run(fast_worker(db, arts, clock, "w2").drain(timeout=10))  # claimable at once by another worker
    assert len(rx.received) == 8


def test_drain_and_prompt_wakeup(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), RealClock()
    add_destination(db, rx.url, secret_file)
    for i in range(20):
        enqueue(db, arts, artifact(f"j{i}", 1), now=clock())
    rx.inject(500)  # one delivery backs off: pending but not due, so drain still returns True
    slow = {"retry": RetryPolicy(base=3600, cap=3600, jitter="none")}
    assert run(fast_worker(db, arts, clock, "w", config=slow).drain(timeout=10))
    assert len(rx.received) == 19, [(d.last_error, d.last_status) for d in deliveries(db) if d.state != "delivered"]
    assert len(deliveries(db, state="pending")) == 1

    # an idle worker with a long poll interval picks new work up at once when woken
    w = fast_worker(db, arts, clock, "w", config={"idle_sleep": 30.0})

    async def scenario() -> bool:
        async with w:
            task = asyncio.create_task(w.run())
            await asyncio.sleep(0)  # run() binds its wake-up; its first pass finds nothing due and sleeps 30 s
            await asyncio.to_thread(enqueue, db, arts, artifact("late", 1), clock())
            w.wake()
            # well before the 30 s idle sleep ends
            ok = await asyncio.to_thread(rx.wait_for, lambda r: len(r.received) == 20, 5)
            w.stop()
            await asyncio.wait_for(task, 5)
            return ok

    assert run(scenario())


# --- attempt outcomes through the worker --------------------------------------------------------------------


def test_timeout_then_retry_is_deduped(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file)
    enqueue(db, arts, artifact("a", 1))
    rx.inject(None, delay=1.5)  # answered only after the 1 s timeout (and then processed)
    w = fast_worker(db, arts, clock, "w")
    r1 = run(one_pass(w))
    (d,) = deliveries(db)
    assert (r1.retried, d.last_error, d.last_status) == (1, "timeout", None)
    assert rx.wait_for(lambda r: len(r.received) == 1, 5)  # the slow request did arrive
    clock.advance(1)
    assert run(one_pass(fast_worker(db, arts, clock, "w"))).delivered == 1
    assert (len(rx.received), rx.duplicates) == (1, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_receiver_down_then_up(db: Database, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    port = _free_port()
    add_destination(db, f"http://127.0.0.1:{port}/", secret_file)
    enqueue(db, arts, artifact("a", 1))
    assert run(one_pass(fast_worker(db, arts, clock, "w"))).retried == 1
    (d,) = deliveries(db)
    assert (d.state, d.last_error) == ("pending", "network_error")
    with FaultyReceiver(secrets=[SECRET], port=port, tolerance_seconds=10**10) as rx:
        clock.advance(1)
        assert run(one_pass(fast_worker(db, arts, clock, "w"))).delivered == 1
        assert len(rx.received) == 1
    (d,) = deliveries(db)
    assert (d.state, d.attempts) == ("delivered", 2)


def test_lease_expiry_after_killed_worker_and_redelivery_dedupe(
    db: Database, rx: FaultyReceiver, secret_file: str
) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file)
    enqueue(db, arts, artifact("a", 1))

    def crash_after_send(name: str) -> None:
        if name == "sent":
            raise SimulatedCrash(name)

    with pytest.raises(SimulatedCrash):
        run(one_pass(fast_worker(db, arts, clock, "A", failpoint=crash_after_send)))
    assert len(rx.received) == 1  # sent, but the outcome was never recorded
    (d,) = deliveries(db)
    assert (d.state, d.lease_owner, d.attempts) == ("pending", "A", 0)  # no outcome recorded: no attempt
    clock.advance(1.5)  # lease (2 s) still held
    assert run(one_pass(fast_worker(db, arts, clock, "B"))).claimed == 0
    clock.advance(1)
    assert run(one_pass(fast_worker(db, arts, clock, "B"))).delivered == 1
    (d,) = deliveries(db)
    assert (d.state, d.attempts, d.lease_owner) == ("delivered", 1, None)
    assert (len(rx.received), rx.duplicates) == (1, 1)
    ids = {r.headers["webhook-id"] for r in rx.requests}
    assert ids == {d.message_id}  # same webhook-id on the resend


def test_rotated_secrets_end_to_end(db: Database, tmp_path: Path) -> None:
    arts, clock = Artifacts(), Clock()
    old, new = generate_secret(), generate_secret()
    f = tmp_path / "rotating.txt"
    f.write_text(f"{old}\n{new}\n", encoding="utf-8")
    with (
        FaultyReceiver(secrets=[old], tolerance_seconds=10**10) as rx_old,
        FaultyReceiver(secrets=[new], tolerance_seconds=10**10) as rx_new,
        FaultyReceiver(secrets=[generate_secret()], tolerance_seconds=10**10) as rx_other,
    ):
        add_destination(db, rx_old.url, f"file:{f}", destination_id="old")
        add_destination(db, rx_new.url, f"file:{f}", destination_id="new")
        add_destination(db, rx_other.url, f"file:{f}", destination_id="other")
        enqueue(db, arts, artifact("a", 1))
        result = run(one_pass(fast_worker(db, arts, clock, "w")))
        assert (result.delivered, result.retried) == (2, 1)
        assert len(rx_old.received) == len(rx_new.received) == 1 and rx_other.received == {}
        sig = rx_new.requests[0].headers["webhook-signature"]
        assert len(sig.split(" ")) == 2  # both secrets sign during rotation
        assert rx_other.requests[0].status == 401


if __name__ == "__main__":
    _worker_main(sys.argv[1])
