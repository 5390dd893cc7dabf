"""Console page times against the JSON routes that serve the same data (PostgreSQL).

A tenant gets REAL simulated jobs through the API (client-signed streams, artifacts built by the dispatcher,
deliveries to one destination, a month close); then the rows of those jobs (streams, events, artifacts,
deliveries) are copied by INSERT … SELECT until the tenant has `--jobs` jobs (100,000 by default, about a million
events), so every index the pages read is full size. Each console page is then timed (p50 and p99 of `--repeat`
requests, in process through the ASGI app as a browser's request would go, session cookie and all) against the
JSON route or routes a client would call for the same data (the job page: the job, its events, ledger entries,
allocations and artifacts; the ratio is page / routes). Target: every page under 100 ms.

Run: python bench/console.py [--jobs N] [--repeat R]
"""

from __future__ import annotations

import argparse
import base64
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import psycopg
from prometheus_client import CollectorRegistry

from common import scratch_pg
from settlekit.api.app import create_app
from settlekit.api.auth import create_api_key
from settlekit.application import finance as fin
from settlekit.application.destinations import DestinationPolicy
from settlekit.console import console_mounts
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.dispatch import Dispatcher
from settlekit.projections.artifacts import artifacts_consumer
from settlekit.runtime.settings import Settings
from settlekit.simulate import Fleet, job_stream, scenario_for
from settlekit.store.db import Database, connect

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TENANT = "tenant_bench"
REAL = 40  # jobs appended through the API; the rest are copies of their rows
TARGET_MS = 100.0
ORIGIN = "http://testserver"
# the copied rows: table -> {column: expression over the source row `s` and the copy number `g`}
_JOB = "s.stream_id || '_' || lpad(g::text, 6, '0')"
COPIES: dict[str, dict[str, str]] = {
    "streams": {"stream_id": _JOB},
    "events": {"stream_id": _JOB, "event_id": "s.event_id || '_' || g", "txid": "pg_current_xact_id()",
               "batch_id": "gen_random_uuid()", "position": ""},
    "artifacts": {"artifact_id": "s.artifact_id || '_' || g", "job_id": "s.job_id || '_' || lpad(g::text, 6, '0')"},
    "deliveries": {"artifact_id": "s.artifact_id || '_' || g", "dedupe_key": "s.dedupe_key || '_' || g",
                   "message_id": "s.message_id || '_' || g", "id": ""},
}


def seed(db: Database, url: str, app: Any, key: str, jobs: int) -> dict[str, Any]:
    api = TestClient(app, headers={"authorization": f"Bearer {key}"})
    fleet = Fleet.create()
    for reg in fleet.registrations():
        body = {k: v for k, v in reg.items() if k != "keyId"}
        r = api.post("/v1/keys", json=body)
        assert r.status_code in (200, 201), r.text
    r = api.post("/v1/destinations", json={"destinationId": "dst_bench", "url": "http://127.0.0.1:9/hook",
                                           "secret": generate_secret()})
    assert r.status_code == 201, r.text
    ids = []
    for i in range(REAL):
        job_id = f"job_{i:04d}"
        for event in job_stream(scenario_for(i), job_id, fleet, i, tenant_id=TENANT):
            r = api.post(f"/v1/jobs/{job_id}/events", json=event)
            assert r.status_code == 201, r.text
        ids.append(job_id)
    Dispatcher(db, [artifacts_consumer(sink=WebhookDeliverySink())], listen=False).drain(120)
    started = time.perf_counter()
    copies = max(0, jobs // REAL - 1)
    with db.transaction() as tx:
        for table, changes in COPIES.items():
            columns = [r[0] for r in tx.fetchall(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                (table,))]
            kept = [c for c in columns if changes.get(c) != ""]
            select = ", ".join(changes.get(c) or f"s.{c}" for c in kept)
            tx.execute(f"INSERT INTO {table} ({', '.join(kept)}) SELECT {select} FROM {table} s"
                       f" CROSS JOIN generate_series(1, {copies}) g WHERE s.tenant_id = ?", (TENANT,))
        counts = {t: tx.fetchone(f"SELECT count(*) FROM {t} WHERE tenant_id = ?", (TENANT,))[0] for t in COPIES}
    with psycopg.connect(url, autocommit=True) as conn:  # as autovacuum leaves them: statistics, visibility map
        for table in COPIES:
            conn.execute(f"VACUUM ANALYZE {table}")
    month = str(api.get(f"/v1/jobs/{ids[0]}").json()["job"]["createdAt"])[:7]
    signer = app.state.settlekit.appender.server_signer
    fin.close_month(db, TENANT, month, signer, now=datetime.now(UTC))
    print(f"seeded {counts['streams']:,} jobs, {counts['events']:,} events, {counts['artifacts']:,} artifacts, "
          f"{counts['deliveries']:,} deliveries (copies: {time.perf_counter() - started:.1f} s)", flush=True)
    return {"jobs": ids, "month": month, "counts": counts}


def sign_in(app: Any, key: str) -> TestClient:
    browser = TestClient(app, base_url=ORIGIN)
    form = browser.get("/console/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    r = browser.post("/console/login", data={"csrf": token.group(1), "api_key": key}, headers={"origin": ORIGIN},
                     follow_redirects=False)
    assert r.status_code == 303, r.text
    return browser


def timed(calls: Callable[[], None], repeat: int) -> tuple[float, float]:
    calls()  # warm
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        calls()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def getter(client: TestClient, *paths: str) -> Callable[[], None]:
    def call() -> None:
        for path in paths:
            r = client.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text[:300])

    return call


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with scratch_pg("console") as url:
        db = connect(url)
        db.migrate()
        settings = Settings(rate_limit_per_second=1e6, rate_limit_burst=1_000_000, operator_tenant=TENANT)
        from settlekit.events.envelope import Signer

        app = create_app(db, settings, server_signer=Signer.generate(), destination_policy=DestinationPolicy.local(),
                         registry=CollectorRegistry(), mounts=console_mounts(settings))
        try:
            key = create_api_key(db, TENANT, ["jobs:read", "jobs:write", "finance:write", "ops", "admin"])[1]
            seeded = seed(db, url, app, key, args.jobs)
            api = TestClient(app, headers={"authorization": f"Bearer {key}"})
            browser = sign_in(app, key)
            job = seeded["jobs"][REAL // 2]
            middle = f"{seeded['jobs'][REAL // 2]}_{max(1, args.jobs // REAL // 2):06d}"
            cursor = base64.urlsafe_b64encode(middle.encode()).decode().rstrip("=")
            month = seeded["month"]
            cases = [
                ("overview", ["/console/"], ["/v1/destinations/dst_bench/stats", "/v1/ops/consumers"]),
                ("jobs, first page", ["/console/jobs"], ["/v1/jobs?limit=50"]),
                ("jobs, a middle page", [f"/console/jobs?after={quote(middle)}"],
                 [f"/v1/jobs?limit=50&cursor={cursor}"]),
                ("jobs, id prefix", [f"/console/jobs?q={quote(job[:7])}"], ["/v1/jobs?limit=50"]),
                ("jobs, status filter", ["/console/jobs?status=SETTLED"], ["/v1/jobs?limit=50&status=SETTLED"]),
                ("job page", [f"/console/job?id={job}"],
                 [f"/v1/jobs/{job}", f"/v1/jobs/{job}/events", f"/v1/jobs/{job}/ledger/entries",
                  f"/v1/jobs/{job}/ledger/allocations", f"/v1/jobs/{job}/artifacts"]),
                ("deliveries", ["/console/deliveries"], ["/v1/destinations", "/v1/destinations/dst_bench/stats"]),
                ("destination", ["/console/destination?id=dst_bench"],
                 ["/v1/destinations/dst_bench/stats", "/v1/deliveries?destinationId=dst_bench&limit=50",
                  "/v1/destinations/dst_bench/replays"]),
                ("dispatcher", ["/console/dispatcher"], ["/v1/ops/consumers"]),
                ("ledger balances", ["/console/ledger"], ["/v1/ledger/balances"]),
                ("ledger as of", ["/console/ledger?asOf=2026-01-31T00:00:00Z"],
                 ["/v1/ledger/balances?asOf=2026-01-31T00:00:00Z"]),
                ("account history", ["/console/ledger/account?id=acct_cash"],
                 ["/v1/ledger/accounts/acct_cash/postings?limit=50"]),
                ("month closes", ["/console/finance"], [f"/v1/finance/closes/{month}"]),
                ("inclusion proof", [f"/console/finance/proof?month={month}&job={job}"],
                 [f"/v1/finance/closes/{month}/proofs/{job}"]),
            ]
            worst = 0.0
            print(f"{'page':<22} {'page p50':>9} {'p99':>8} {'JSON p50':>9} {'p99':>8} {'ratio':>6}")
            for name, pages, routes in cases:
                page50, page99 = timed(getter(browser, *pages), args.repeat)
                json50, json99 = timed(getter(api, *routes), args.repeat)
                worst = max(worst, page50)
                print(f"{name:<22} {page50:8.1f}ms {page99:7.1f}ms {json50:8.1f}ms {json99:7.1f}ms "
                      f"{page50 / json50:5.2f}x", flush=True)
            print(f"slowest page p50: {worst:.1f} ms at {seeded['counts']['streams']:,} jobs / "
                  f"{seeded['counts']['events']:,} events (target < {TARGET_MS:.0f} ms)")
        finally:
            app.state.settlekit.appender.close()
            db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
