"""Delivery hardening on both backends: a 410 fails only its own delivery, enabling a destination offers (and
performs) a backfill of what it missed, leases are renewed while a send is in flight, and a worker process
SIGKILLed mid-send costs the delivery no attempt."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from test_delivery_worker import SECRET, Artifacts, Clock, add_destination, artifact, deliveries, enqueue, run
from typer.testing import CliRunner

from settlekit.application import destinations
from settlekit.cli.deliveries import delivery_app
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.fairness import Caps
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.events.canonical import canonical_json
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.api import client, key_for, make_app
from support.failpoints import SimulatedCrash, on_worker
from support.receiver import FaultyReceiver


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "whsec.txt"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return f"file:{path}"


def worker(db: Database, arts: Any, clock: Any, worker_id: str = "w", **cfg: Any) -> DeliveryWorker:
    failpoint = cfg.pop("failpoint", None)
    if failpoint is not None:
        on_worker(worker_id, failpoint)
    config = WorkerConfig(
        allow_insecure_http=True,
        allow_loopback=True,
        lease=cfg.pop("lease", timedelta(seconds=2)),
        lease_renew=cfg.pop("lease_renew", 0.3),
        lease_margin=0.5,
        sender=cfg.pop("sender", SenderConfig(timeout=5.0, connect_timeout=1.0, concurrency=4)),
        retry=RetryPolicy(base=1, cap=2, max_attempts=5, jitter="none"),
        **cfg,
    )
    return DeliveryWorker(db, artifact_loader=arts, config=config, clock=clock, worker_id=worker_id,
                          registry=CollectorRegistry())


def store_artifact(db: Database, doc: dict[str, Any]) -> None:
    """An artifacts-table row, as the artifacts consumer writes it (the real worker reads these)."""
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO artifacts (tenant_id, artifact_id, job_id, artifact_type, source_event_id,"
            " source_chain_hash, artifact_hash, job_version, artifact_json, generated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (doc["tenantId"], doc["artifactId"], doc["jobId"], doc["artifactType"], f"evt_{doc['artifactId']}",
             "ch", doc["artifactHash"], doc["jobVersion"], canonical_json(doc), "2026-01-02T00:00:00.000Z"),
        )


# --- item 9: 410 Gone ---------------------------------------------------------------------------------------


def test_410_fails_only_its_delivery_and_enable_backfill_sends_the_rest(db: Database, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as gone, \
            FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as fine:
        add_destination(db, gone.url, secret_file, destination_id="gone")
        add_destination(db, fine.url, secret_file, destination_id="fine")
        for i in range(12):  # distinct jobs: every delivery is its own group, sent concurrently
            enqueue(db, arts, artifact(f"j{i}", 1), now=clock())
        gone.inject(410, count=100)
        result = run(_one_pass(worker(db, arts, clock)))
        # one pass sends at most the per-destination cap to each destination
        assert (result.disabled, result.failed, result.delivered) == (1, 0, Caps().per_destination)
        assert run(worker(db, arts, clock).drain(timeout=20))  # the rest of `fine`; nothing more to `gone`
        rows = deliveries(db, destination_id="gone")
        failed = [d for d in rows if d.state == "failed"]
        pending = [d for d in rows if d.state == "pending"]
        assert [(d.last_error, d.last_status, d.attempts) for d in failed] == [("gone", 410, 1)]
        assert len(pending) == 11 and all(d.lease_owner is None for d in pending)
        # requests already in flight when the 410 came back are recorded but stay pending; nothing else is sent
        assert len(gone.requests) <= Caps().per_destination
        held = [d for d in pending if d.last_status == 410]
        assert len(held) == len(gone.requests) - 1 and all(d.attempts == 1 for d in held)
        assert all(d.attempts == 0 and d.last_status is None for d in pending if d not in held)
        assert {d.state for d in deliveries(db, destination_id="fine")} == {"delivered"}
        with db.read() as tx:
            dest = store.get_destination(tx, "ten", "gone")
        assert dest is not None and (dest.status, dest.disabled_reason) == ("disabled", "gone")
        clock.advance(60)
        assert run(_one_pass(worker(db, arts, clock))).claimed == 0  # nothing claimed while disabled

        gone.clear_faults()
        _, report = destinations.enable_destination_with_backfill(
            db, "ten", "gone", backfill=True, policy=destinations.DestinationPolicy.local(), now=clock())
        assert (report.created, report.requeued) == (0, 1)  # the delivery its 410 failed is pending again
        assert run(worker(db, arts, clock).drain(timeout=20))
        assert {d.state for d in deliveries(db, destination_id="gone")} == {"delivered"}
        assert len(gone.received) == 12 and gone.rejected == 0


def test_410_from_a_destination_disabled_meanwhile_keeps_the_delivery_pending(db: Database, secret_file: str) -> None:
    """An operator (or another worker's 410) disabled the destination while the request was in flight: this
    410 neither fails the delivery nor overwrites the reason."""
    arts, clock = Artifacts(), Clock()
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as rx:
        add_destination(db, rx.url, secret_file)
        enqueue(db, arts, artifact("a", 1), now=clock())
        rx.inject(410)

        def meanwhile(name: str) -> None:
            if name == "sent":
                destinations.disable_destination(db, "ten", "d1", reason="maintenance", now=clock())

        result = run(_one_pass(worker(db, arts, clock, failpoint=meanwhile)))
        assert (result.held, result.disabled, result.failed) == (1, 0, 0)
        (d,) = deliveries(db)
        assert (d.state, d.attempts, d.last_status, d.lease_owner) == ("pending", 1, 410, None)
        with db.read() as tx:
            dest = store.get_destination(tx, "ten", "d1")
        assert dest is not None and (dest.status, dest.disabled_reason) == ("disabled", "maintenance")


async def _one_pass(w: DeliveryWorker) -> Any:
    async with w:
        return await w.run_once()


def test_enable_offers_backfill_and_requeue_since_is_idempotent(db: Database, secret_file: str) -> None:
    add_destination(db, "http://127.0.0.1:9/", secret_file, destination_id="d1")
    add_destination(db, "http://127.0.0.1:9/", secret_file, destination_id="settle_only",
                    artifact_types=("SettlementStatement.v1",))
    now = datetime.now(UTC)

    def build(doc: dict[str, Any]) -> None:
        store_artifact(db, doc)
        with db.transaction() as tx:
            enqueue_artifact(tx, "ten", doc, now=datetime.now(UTC))

    build(artifact("before", 1))
    destinations.disable_destination(db, "ten", "d1", now=now - timedelta(seconds=1))
    destinations.disable_destination(db, "ten", "settle_only", now=now - timedelta(seconds=1))
    missed = [artifact("during", 1), artifact("during", 2, "SettlementStatement.v1"), artifact("other", 1)]
    for doc in missed:
        build(doc)
    assert deliveries(db, destination_id="d1")[0].artifact_id == "cert_before_evt_1"
    assert len(deliveries(db)) == 1  # both destinations were disabled: no rows for the missed artifacts

    dest, offer = destinations.enable_destination_with_backfill(db, "ten", "d1", backfill=False,
                                                           policy=destinations.DestinationPolicy.local())
    assert dest.status == "active" and offer.since is not None
    assert (offer.missing, offer.created, offer.requeued) == (3, 0, 0)  # an offer: nothing created yet
    assert len(deliveries(db, destination_id="d1")) == 1

    runner = CliRunner()
    since = offer.to_json()["since"]
    args = ["requeue", "--db", db.url, "--tenant", "ten", "--destination-id", "d1", "--since", str(since)]
    out = runner.invoke(delivery_app, args)
    assert out.exit_code == 0, out.output
    assert "3 deliveries created" in out.output
    got = deliveries(db, destination_id="d1")
    assert sorted(d.artifact_id for d in got) == sorted(["cert_before_evt_1", *(d["artifactId"] for d in missed)])
    assert all(d.state == "pending" and d.attempts == 0 for d in got)
    again = runner.invoke(delivery_app, args)
    assert again.exit_code == 0 and "0 deliveries created" in again.output  # idempotent
    assert len(deliveries(db, destination_id="d1")) == 4

    # enable of the filtered destination: only the settlement statement is offered; the API route backfills
    api = client(make_app(db), key_for(db, "ten"))
    r = api.post("/v1/destinations/settle_only/enable")
    assert r.status_code == 200, r.text
    assert r.json()["backfill"]["missing"] == 1 and r.json()["backfill"]["created"] == 0
    r = api.post("/v1/deliveries/requeue", json={"since": r.json()["backfill"]["since"]})  # every active one
    assert r.status_code == 200, r.text
    assert (r.json()["created"], r.json()["requeued"]) == (1, 0)
    assert [d.artifact_type for d in deliveries(db, destination_id="settle_only")] == ["SettlementStatement.v1"]
    r = api.post("/v1/deliveries/requeue", json={"since": "2026-01-02T00:00:00"})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID"  # a naive time is refused
    r = api.post("/v1/deliveries/requeue", json={"since": "0001-01-01T00:00:00+01:00"})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID"  # before year 1 in UTC
    r = api.post("/v1/deliveries/requeue", json={"since": since, "destinationId": "nope"})
    assert r.status_code == 404
    bad = runner.invoke(delivery_app, ["requeue", "--db", db.url, "--tenant", "ten", "--since", "yesterday"])
    assert bad.exit_code != 0


# --- item 10: leases ----------------------------------------------------------------------------------------


def test_lease_is_renewed_while_the_send_is_in_flight(db: Database, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as rx:
        add_destination(db, rx.url, secret_file)
        enqueue(db, arts, artifact("slow", 1), now=clock())
        rx.inject(None, delay=6.0)  # the answer takes longer than the 2 s lease
        a = worker(db, arts, clock, "A", sender=SenderConfig(timeout=10.0, connect_timeout=1.0))

        def renewals() -> float:
            return a.metrics.lease_renewals._value.get()

        async def scenario() -> tuple[Any, int]:
            async with a:
                task = asyncio.create_task(a.run_once())
                while not [d for d in deliveries(db) if d.lease_owner == "A"]:
                    await asyncio.sleep(0.02)
                clock.advance(1.9)  # just before the claim's lease ends …
                seen = renewals()
                while renewals() < seen + 2:  # … a renewal (taken after the advance) moves it on
                    assert not task.done(), "the send ended before two renewals (machine too slow?)"
                    await asyncio.sleep(0.02)
                (row,) = deliveries(db)
                assert row.lease_expires_at is not None and row.lease_expires_at > clock() + timedelta(seconds=1)
                clock.advance(0.6)  # past the original lease: without renewal B would take the row
                async with worker(db, arts, clock, "B") as b:
                    stolen = (await b.run_once()).claimed
                return await task, stolen

        result, stolen = run(scenario())
        assert stolen == 0 and result.delivered == 1
        (d,) = deliveries(db)
        assert (d.state, d.attempts, d.lease_owner) == ("delivered", 1, None)
        assert (len(rx.received), rx.duplicates) == (1, 0)


@pytest.mark.parametrize("point", ["sending", "sent"])
def test_crash_mid_send_then_reclaim_costs_no_attempt(db: Database, secret_file: str, point: str) -> None:
    """Failpoints: the worker dies as its requests start (`sending`) or once one was answered but nothing was
    recorded (`sent`). The lease expires, another worker sends again; the crash consumed no attempt."""

    arts, clock = Artifacts(), Clock()
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as rx:
        add_destination(db, rx.url, secret_file)
        for i in range(3):
            enqueue(db, arts, artifact(f"c{i}", 1), now=clock())

        def crash(name: str) -> None:
            if name == point:
                raise SimulatedCrash(name)

        with pytest.raises(SimulatedCrash):
            run(_one_pass(worker(db, arts, clock, "A", failpoint=crash)))
        rows = deliveries(db)
        assert all(d.state == "pending" and d.lease_owner == "A" and d.attempts == 0 for d in rows)
        # `sent`: the crash came as the first answer arrived; the other requests may have reached the receiver
        before = len(rx.received)
        assert (before >= 1) if point == "sent" else before == 0
        clock.advance(1.0)
        assert run(_one_pass(worker(db, arts, clock, "B"))).claimed == 0  # lease (2 s) still held
        clock.advance(1.5)
        # reclaimed after one crash, they go out together (isolation starts at a second claim without an outcome)
        assert run(_one_pass(worker(db, arts, clock, "B"))).delivered == 3
        rows = deliveries(db)
        assert all(d.state == "delivered" and d.attempts == 1 for d in rows)
        with db.read() as tx:
            assert all(store.list_attempts(tx, d.id) == [(1, 200, None)] for d in rows)
        # resends of what reached the receiver before the crash (a cancelled request may have arrived after it)
        assert len(rx.received) == 3 and ((1 <= rx.duplicates <= 3) if point == "sent" else rx.duplicates == 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigkilled_worker_mid_send_costs_no_attempt(db: Database, secret_file: str, tmp_path: Path) -> None:
    """`settlekit worker` (a subprocess, flags and env) is SIGKILLed while the receiver holds one request open
    (the failpoint) and the others are recorded; a restarted worker delivers the held one within a lease, attempts
    unchanged by the crash."""
    n = 20
    rx = FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10).start()
    procs: list[subprocess.Popen[bytes]] = []
    metrics_port = _free_port()
    env = {**os.environ, "SETTLEKIT_DELIVERY_MAX_ATTEMPTS": "4", "SETTLEKIT_DELIVERY_BACKOFF_BASE": "0.5",
           "SETTLEKIT_DELIVERY_BACKOFF_CAP": "1", "SETTLEKIT_DELIVERY_LEASE_RENEW": "1"}

    def spawn(i: int, *extra: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"worker{i}.log").open("wb")
        p = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "worker", "--db", db.url,
                              "--allow-loopback-webhooks", "--lease", "3", *extra],
                             env={**env, "SETTLEKIT_INSTANCE_ID": f"w{i}"}, stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        add_destination(db, rx.url, secret_file)
        for i in range(n):
            doc = artifact(f"k{i}", 1)
            store_artifact(db, doc)
            with db.transaction() as tx:
                enqueue_artifact(tx, "ten", doc, now=datetime.now(UTC))
        rx.inject(None, delay=120.0)  # failpoint: the first request gets no answer
        first = spawn(1, "--metrics-port", str(metrics_port))
        assert rx.wait_for(lambda r: len(r.received) >= n - 1, timeout=60), (rx.stats(), _log(tmp_path, 1))
        # Each outcome is recorded as soon as it ends: the held request holds only its own delivery.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(d.state == "delivered" for d in deliveries(db)) < n - 1:
            time.sleep(0.05)
        rows = deliveries(db)
        held = [d for d in rows if d.message_id not in rx.received]
        assert len(held) == 1 and (held[0].state, held[0].attempts) == ("pending", 0) and held[0].lease_owner
        assert all(d.state == "delivered" and d.attempts == 1 for d in rows if d.id != held[0].id)
        # /metrics of the worker: the queue, and lease renewals of the held batch while its request hangs
        def scrape() -> dict[str, float]:
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            return {k: float(v) for k, _, v in (ln.rpartition(" ") for ln in text.splitlines() if ln[:1] != "#")}

        deadline = time.monotonic() + 30
        while scrape().get("settlekit_delivery_lease_renewals_total", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        metrics = scrape()
        assert metrics["settlekit_delivery_lease_renewals_total"] >= 2
        assert metrics['settlekit_deliveries_pending{state="pending"}'] == 1
        assert metrics['settlekit_deliveries_pending{state="delivered"}'] == n - 1
        assert "settlekit_consumer_lag_events" in " ".join(metrics)  # the dispatcher's metrics too
        first.kill()  # SIGKILL mid-send: the held request is in flight, its lease held
        killed_at = time.monotonic()
        first.wait(10)
        assert first.returncode == -signal.SIGKILL
        second = spawn(2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(d.state != "delivered" for d in deliveries(db)):
            time.sleep(0.05)
        recovery = time.monotonic() - killed_at
        rows = deliveries(db)
        assert {d.state for d in rows} == {"delivered"}, _log(tmp_path, 2)
        assert all(d.attempts == 1 for d in rows)  # the crash cost the held delivery no attempt
        with db.read() as tx:
            log = store.list_attempts(tx, held[0].id)
        assert log == [(1, 200, None)]
        assert set(rx.received) == {d.message_id for d in rows} and rx.rejected == 0
        assert rx.duplicates == 0  # the others were recorded before the crash: only the held one was sent again
        print(f"recovery after SIGKILL (lease 3 s, renewed every 1 s, incl. worker start): {recovery:.1f} s")
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, _log(tmp_path, 2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        rx.stop()


def _log(tmp_path: Path, i: int) -> str:
    path = tmp_path / f"worker{i}.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def test_worker_settings_from_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from settlekit.errors import ConfigurationError
    from settlekit.runtime import Settings, worker_config

    monkeypatch.setenv("SETTLEKIT_DELIVERY_LEASE", "20")
    monkeypatch.setenv("SETTLEKIT_DELIVERY_MAX_ATTEMPTS", "7")
    monkeypatch.setenv("SETTLEKIT_REARM_COOLDOWN", "12.5")
    monkeypatch.setenv("SETTLEKIT_METRICS_PORT", "9105")
    s = Settings(delivery_lease=30.0, delivery_backoff_cap=90.0)  # flags win over the environment
    assert (s.delivery_lease, s.delivery_max_attempts, s.rearm_cooldown, s.metrics_port) == (30.0, 7, 12.5, 9105)
    cfg = worker_config(s)
    assert cfg.lease == timedelta(seconds=30) and cfg.renew_interval == 9.0
    assert (cfg.retry.max_attempts, cfg.retry.base, cfg.retry.cap) == (7, 2.0, 90.0)
    monkeypatch.setenv("SETTLEKIT_DELIVERY_BACKOFF_BASE", "soon")
    with pytest.raises(ConfigurationError) as exc:
        Settings()
    assert exc.value.code == "SETTINGS_INVALID"
    monkeypatch.delenv("SETTLEKIT_DELIVERY_BACKOFF_BASE")
    with pytest.raises(ConfigurationError):
        worker_config(Settings(delivery_backoff_base=10.0, delivery_backoff_cap=1.0))
    assert json.dumps(Settings().metrics_host) == '"127.0.0.1"'


def test_a_delivery_worker_run_alone_takes_the_settings_of_the_embedded_one() -> None:
    """`settlekit deliveries run` configures its worker as the embedded workers are configured (retries, metrics,
    network policy), with its command line's figures for what those set."""
    from settlekit.runtime import Settings, delivery_run_config, worker_config

    settings = Settings(delivery_max_attempts=4, delivery_backoff_base=3.0, delivery_backoff_cap=60.0,
                        metrics_per_destination=True, allow_loopback_webhooks=True,
                        delivery_destination_concurrency=3, delivery_tenant_concurrency=5)
    alone = delivery_run_config(settings, concurrency=12, batch=7, idle_sleep=0.4, lease=20.0, lease_renew=5.0,
                                timeout=9.0, max_claims=3)
    embedded = worker_config(settings)
    assert alone.retry == embedded.retry and (alone.retry.max_attempts, alone.retry.base) == (4, 3.0)
    assert alone.per_destination_metrics and alone.allow_loopback
    assert alone.allow_insecure_http, "loopback destinations are http: allowed as for the embedded workers"
    assert (alone.caps.in_flight, alone.caps.per_destination, alone.caps.per_tenant) == (12, 3, 5)
    assert (alone.batch_size, alone.idle_sleep, alone.lease, alone.renew_interval, alone.max_claims) == (
        7, 0.4, timedelta(seconds=20), 5.0, 3)
    assert (alone.sender.concurrency, alone.sender.timeout, alone.sender.connect_timeout) == (12, 9.0, 5.0)
    assert (alone.circuit, alone.replay, alone.auto_disable) == (embedded.circuit, embedded.replay,
                                                                 embedded.auto_disable)


@pytest.mark.parametrize("option", [["--concurrency", "0"], ["--batch", "0"], ["--timeout", "0"], ["--lease", "-1"],
                                    ["--max-claims", "0"], ["--delivery-max-attempts", "0"]])
def test_a_delivery_worker_run_alone_refuses_figures_that_cannot_work(option: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(delivery_app, ["run", "--db", f"sqlite:///{tmp_path / 'never.db'}", *option])
    assert result.exit_code == 2, result.output
    assert "SETTINGS_INVALID" in result.output
    assert not (tmp_path / "never.db").exists(), "nothing was opened"
