"""Bounded loopback load test of the HTTP API (issue 7).

`settlekit serve --no-workers` and `settlekit worker` run as subprocesses on a scratch PostgreSQL database; 50
clients append client-finalized, signed job events for 20 s (LOAD_CLIENTS, LOAD_SECONDS override), one event per
request. Reports
requests/s, p50/p99 latency and the 4xx/5xx counts; then waits for the deliveries and checks that nothing was lost:
every accepted event is in the exported stream at its index, and every artifact built was received by the local
webhook receiver. Finally SIGTERM must stop the server cleanly. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report, scratch_pg  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.delivery.receiver import ReceiverServer  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.simulate import Fleet, job_stream, scenario_for  # noqa: E402
from settlekit.store.db import connect  # noqa: E402

CLIENTS = int(os.environ.get("LOAD_CLIENTS", "50"))
SECONDS = float(os.environ.get("LOAD_SECONDS", "20"))
TENANT = "tenant_load"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    with scratch_pg("load") as url, tempfile.TemporaryDirectory() as tmp:
        db = connect(url)
        db.migrate()
        _, api_key = create_api_key(db, TENANT, ["admin"])
        secret = generate_secret()
        receiver = ReceiverServer(secrets=[secret], port=0)
        receiver.start()
        port = free_port()
        env = {**os.environ, "SETTLEKIT_DB": url, "SETTLEKIT_PORT": str(port),
               "SETTLEKIT_SERVER_KEY_FILE": f"{tmp}/server.pem",
               "SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS": "true", "SETTLEKIT_RATE_LIMIT_PER_SECOND": "1000000",
               "SETTLEKIT_RATE_LIMIT_BURST": "1000000"}
        log = Path(tmp) / "serve.log"
        # The API and the workers in two processes, so they do not share one interpreter lock.
        server = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--no-workers"], env=env,
                                  stdout=log.open("wb"), stderr=subprocess.STDOUT)
        worker = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "worker"], env=env,
                                  stdout=(Path(tmp) / "worker.log").open("wb"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    print(log.read_text()[-3000:])
                    return 1
                time.sleep(0.2)
            headers = {"authorization": f"Bearer {api_key}"}
            fleet = Fleet.create(robots=8, operators=4)
            with httpx.Client(base_url=base, headers=headers, timeout=30) as admin:
                for key in fleet.registrations():
                    body = {k: key[k] for k in ("publicKeyPem", "purpose")}
                    if "entityId" in key:
                        body["entityId"] = key["entityId"]
                    admin.post("/v1/keys", json=body).raise_for_status()
                admin.post("/v1/destinations", json={"destinationId": "dst_load", "url": f"{receiver.url}hook",
                                                     "secret": secret, "allowPrivateNetwork": True}
                           ).raise_for_status()

            latencies: list[float] = []
            statuses: dict[int, int] = {}
            accepted: dict[str, list[dict]] = {}
            lock = threading.Lock()
            stop_at = time.monotonic() + SECONDS

            def client(index: int) -> None:
                n = 0
                with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                    while time.monotonic() < stop_at:
                        job_id = f"job_load_{index:03d}_{n:04d}"
                        events = job_stream(scenario_for(index + n), job_id, fleet, index + n)
                        n += 1
                        ok: list[dict] = []
                        for event in events:
                            if time.monotonic() >= stop_at:
                                break
                            t0 = time.perf_counter()
                            resp = http.post(f"/v1/jobs/{job_id}/events", json=event)
                            dt = time.perf_counter() - t0
                            with lock:
                                latencies.append(dt)
                                statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                            if resp.status_code not in (200, 201):
                                break
                            ok.append(event)
                        if ok:
                            with lock:
                                accepted[job_id] = ok

            started = time.perf_counter()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - started
            total = len(latencies)
            five = sum(c for s, c in statuses.items() if s >= 500)
            four = sum(c for s, c in statuses.items() if 400 <= s < 500)
            qs = statistics.quantiles(latencies, n=100)
            report(f"API appends, {CLIENTS} concurrent clients, {SECONDS:.0f} s", total / elapsed, "requests/s")
            report("latency p50", qs[49] * 1000, "ms")
            report("latency p99", qs[98] * 1000, "ms")
            print(f"status counts: {dict(sorted(statuses.items()))}  5xx={five}  4xx={four}")

            # Nothing lost: accepted events are readable, every artifact built is delivered.
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                with db.read() as tx:
                    pending = tx.scalar("SELECT count(*) FROM deliveries WHERE state <> 'delivered'")
                    built = tx.scalar("SELECT count(*) FROM artifacts")
                    behind = tx.scalar("SELECT count(*) FROM consumer_state WHERE last_processed_position <"
                                       " (SELECT COALESCE(max(position), 0) FROM events)")
                if pending == 0 and behind == 0 and len(receiver.artifacts) >= built:
                    break
                time.sleep(0.5)
            lost = 0
            with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                for job_id, events in accepted.items():
                    exported = http.get(f"/v1/jobs/{job_id}/export").json()
                    if [e["chainHash"] for e in exported[: len(events)]] != [e["chainHash"] for e in events]:
                        lost += 1
            with db.read() as tx:
                artifact_ids = {r[0] for r in tx.fetchall("SELECT artifact_id FROM artifacts")}
            received = {a["artifactId"] for a in receiver.artifacts}
            print(f"accepted events: {sum(len(v) for v in accepted.values())} in {len(accepted)} jobs; "
                  f"jobs with a lost or altered event: {lost}")
            print(f"artifacts built: {len(artifact_ids)}; delivered and received: {len(artifact_ids & received)}; "
                  f"not delivered: {len(artifact_ids - received)}; receiver duplicates deduped: "
                  f"{receiver.duplicates}")
        finally:
            for name, proc in (("serve", server), ("worker", worker)):
                proc.send_signal(signal.SIGTERM)
                try:
                    code = proc.wait(timeout=60)
                    print(f"{name} stopped on SIGTERM with exit status {code}")
                except subprocess.TimeoutExpired:
                    proc.kill()
                    print(f"{name} did not stop within 60 s of SIGTERM")
            receiver.stop()
            db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
