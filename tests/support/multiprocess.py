"""The several-process workload shared by the e2e tests (no tests here): two API processes and two worker
processes on one PostgreSQL, a workload sent through both APIs, then the checks that nothing was lost or
duplicated and that SIGTERM stops each process cleanly."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from settlekit.api.auth import create_api_key
from settlekit.delivery.receiver import ReceiverServer
from settlekit.delivery.signing import generate_secret
from settlekit.events.envelope import verify_chain
from settlekit.runtime.workers import wait_until_caught_up
from settlekit.simulate import SCENARIO_ORDER, Fleet, job_stream, scenario_for
from settlekit.store.db import connect

TENANT = "tenant_mp"


@dataclass(frozen=True)
class SharedWorkloadOutcome:
    """What the shared workload left behind, for the test to judge."""

    events_sent: int
    events_stored: int
    streams_exported_intact: int  # streams whose export equals what was sent and verifies
    artifacts_built: frozenset[str]
    artifacts_received: frozenset[str]
    duplicate_deliveries: int
    delivery_states: dict[str, int]
    ledger_total_cents: int
    exit_codes: tuple[int, ...]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "settlekit.cli", *args], env=env, stdout=handle,
                            stderr=subprocess.STDOUT)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"process exited early: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{url} not ready: {log.read_text()[-2000:]}")


def run_shared_workload(check_url: str, tmp_path: Path, process_env: dict[str, str]) -> SharedWorkloadOutcome:
    """Start two `serve --no-workers` and two `worker` processes with `process_env` (SETTLEKIT_DB and the
    like), drive every scenario through both APIs (every append must be acknowledged), wait for the workers to
    deliver to a loopback receiver, stop every process with SIGTERM and report what was stored, built and
    delivered. `check_url` is a direct URL of the same database, for the set-up and the checks."""
    db = connect(check_url)
    db.migrate()
    _, api_key = create_api_key(db, TENANT, ["admin"])
    secret = generate_secret()
    receiver = ReceiverServer(secrets=[secret], port=0)
    receiver.start()
    env = {**os.environ, "SETTLEKIT_SERVER_KEY_FILE": str(tmp_path / "server.pem"),
           "SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS": "true",
           "SETTLEKIT_RATE_LIMIT_PER_SECOND": "100000", "SETTLEKIT_RATE_LIMIT_BURST": "100000", **process_env}
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    urls = []
    try:
        for i in range(2):
            port = free_port()
            log = tmp_path / f"api{i}.log"
            procs.append((_spawn(["serve", "--no-workers", "--port", str(port)], env, log), log))
            urls.append(f"http://127.0.0.1:{port}")
        for i in range(2):
            log = tmp_path / f"worker{i}.log"
            procs.append((_spawn(["worker"], {**env, "SETTLEKIT_INSTANCE_ID": f"worker-{i}"}, log), log))
        for url, (proc, log) in zip(urls, procs, strict=False):
            _wait_ready(url, proc, log)

        headers = {"authorization": f"Bearer {api_key}"}
        clients = [httpx.Client(base_url=u, headers=headers, timeout=30) for u in urls]
        fleet = Fleet.create()
        for key in fleet.registrations():
            body = {k: key[k] for k in ("publicKeyPem", "purpose")}
            if "entityId" in key:
                body["entityId"] = key["entityId"]
            assert clients[0].post("/v1/keys", json=body).status_code < 300
        r = clients[1].post("/v1/destinations", json={"destinationId": "dst_mp", "url": f"{receiver.url}hook",
                                                      "secret": secret, "allowPrivateNetwork": True})
        assert r.status_code < 300, r.text

        jobs = 2 * len(SCENARIO_ORDER)
        streams = {f"job_mp_{n:03d}": job_stream(scenario_for(n), f"job_mp_{n:03d}", fleet, n, tenant_id=TENANT)
                   for n in range(jobs)}
        errors: list[str] = []

        def drive(job_ids: list[str], seed: int) -> None:
            rng = random.Random(seed)
            for job_id in job_ids:
                for event in streams[job_id]:
                    resp = clients[rng.randrange(2)].post(f"/v1/jobs/{job_id}/events", json=event)
                    if resp.status_code not in (200, 201):
                        errors.append(f"{job_id} {event['type']}: {resp.status_code} {resp.text[:200]}")
                        return

        ids = sorted(streams)
        threads = [threading.Thread(target=drive, args=(ids[i::3], i)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []

        # Wait until the workers have built and delivered everything.
        assert wait_until_caught_up(db, lambda: len(receiver.artifacts), timeout=120, min_artifacts=1), \
            "the workers did not build and deliver everything within 120 s"
        with db.read() as tx:
            stored_events = tx.scalar("SELECT count(*) FROM events WHERE tenant_id = ?", (TENANT,))
            artifact_ids = {r[0] for r in tx.fetchall("SELECT artifact_id FROM artifacts WHERE tenant_id = ?",
                                                      (TENANT,))}
            delivery_states = dict(tx.fetchall("SELECT state, count(*) FROM deliveries GROUP BY state"))
        intact = 0
        for job_id, events in streams.items():
            exported = clients[0].get(f"/v1/jobs/{job_id}/export").json()
            if exported == events:
                verify_chain(exported, fleet.public_keys())
                intact += 1
        balances = clients[1].get("/v1/ledger/balances").json()
        assert balances["balances"], balances
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int] = []
        for proc, log in procs:
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"process did not stop on SIGTERM: {log.read_text()[-2000:]}")
            codes.append(code)
            assert code == 0, log.read_text()[-3000:]
        receiver.stop()
        db.close()
    return SharedWorkloadOutcome(
        events_sent=sum(len(events) for events in streams.values()), events_stored=stored_events,
        streams_exported_intact=intact, artifacts_built=frozenset(artifact_ids),
        artifacts_received=frozenset(a["artifactId"] for a in receiver.artifacts),
        duplicate_deliveries=receiver.duplicates, delivery_states=delivery_states,
        ledger_total_cents=balances["totalCents"], exit_codes=tuple(codes))


def assert_nothing_lost_or_duplicated(outcome: SharedWorkloadOutcome) -> None:
    """Every event stored once and exported intact, every artifact built once and delivered exactly once, the
    ledger balanced, every process stopped cleanly."""
    assert outcome.events_stored == outcome.events_sent > 0
    assert outcome.streams_exported_intact == 2 * len(SCENARIO_ORDER)
    assert outcome.artifacts_received == outcome.artifacts_built and outcome.artifacts_built
    assert outcome.duplicate_deliveries == 0, "a delivery was sent twice"
    assert outcome.delivery_states == {"delivered": len(outcome.artifacts_built)}
    assert outcome.ledger_total_cents == 0
    assert outcome.exit_codes == (0, 0, 0, 0)
