"""Bounded loopback load test of the HTTP API (issue 7), as a ratio of the framework ceiling (issue 13).

First the framework ceiling (ceiling.py: a minimal FastAPI app inserting each body as one row) is measured. Then
`settlekit serve --no-workers` and `settlekit worker` run as subprocesses on a scratch PostgreSQL database and the
same generator (`common.run_job_load`: 50 clients appending client-finalized, signed job events for 20 s, one event
per request; LOAD_CLIENTS, LOAD_SECONDS override) loads the API. Reports requests/s (and its ratio to the
ceiling's), p50/p99 latency and the 4xx/5xx counts; then waits for the deliveries and checks that nothing was lost:
every accepted event is in the exported stream at its index, and every artifact built was received by the local
webhook receiver. Finally SIGTERM must stop the server cleanly. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ceiling  # noqa: E402
from common import free_port, run_job_load, scratch_pg, stop_process, wait_ready  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.delivery.receiver import ReceiverServer  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.simulate import Fleet  # noqa: E402
from settlekit.store.db import connect  # noqa: E402

TENANT = "tenant_load"
TARGET_RATIO = 0.6


def main() -> int:
    anchor = ceiling.measure()
    if anchor is None:
        print("the framework ceiling did not start")
        return 1
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
            if not wait_ready(f"{base}/readyz", server, log):
                return 1
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

            result = run_job_load(base, headers, fleet)
            result.print("API appends", anchor=anchor, anchor_name="framework ceiling")
            print(f"framework ceiling in this run: {anchor.rate:,.1f} requests/s; "
                  f"target ratio >= {TARGET_RATIO}x, p99 <= 150 ms, 0 errors", flush=True)
            accepted = result.accepted

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
                stop_process(name, proc)
            receiver.stop()
            db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
