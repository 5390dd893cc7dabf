"""`settlekit demo`: simulate jobs end to end and prove the result offline.

1. A fresh database (embedded SQLite in a temp dir unless --db), a local reference receiver on 127.0.0.1 in this
   process, and, as in a deployment, the API (`settlekit serve --no-workers`) and the workers (`settlekit worker`:
   dispatcher + artifact consumer, webhook delivery worker) in processes of their own.
2. N jobs through realistic lifecycles (completed, aborted, assisted with coverage, incident and claim, SLA
   credit), appended over HTTP; robots and operators sign their own events with their own keys.
3. Wait until every artifact is delivered, export every stream, verify each stream and each delivered artifact
   with the offline verifier, check that the ledger balances, and print a summary. Exit 0 only if all verified.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from settlekit.artifacts.verify import verify_artifact_against_stream
from settlekit.errors import VerificationError
from settlekit.events.envelope import verify_chain
from settlekit.runtime import Settings
from settlekit.runtime.workers import wait_until_caught_up
from settlekit.simulate import OUTCOME_BY_SCENARIO, Fleet, job_stream, scenario_for
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database, connect

TENANT = "tenant_demo"
CLIENTS = 8  # concurrent HTTP clients appending jobs


def _child_env(settings: Settings) -> dict[str, str]:
    """The environment of the API and worker processes: this demo's database, key file and limits."""
    return {**os.environ, "SETTLEKIT_DB": settings.db_url, "SETTLEKIT_LOG_LEVEL": "WARNING",
            "SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS": "true", "SETTLEKIT_SERVER_KEY_FILE": str(settings.server_key_file),
            "SETTLEKIT_RATE_LIMIT_PER_SECOND": str(settings.rate_limit_per_second),
            "SETTLEKIT_RATE_LIMIT_BURST": str(settings.rate_limit_burst)}


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def worker_process(settings: Settings, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`settlekit worker` in a process of its own; stopped with SIGTERM (it finishes its work in flight)."""
    with log_path.open("wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "worker"], env=_child_env(settings),
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        yield worker
    finally:
        _stop(worker)


@contextlib.contextmanager
def api_server(settings: Settings, log_path: Path) -> Iterator[str]:
    """`settlekit serve --no-workers` on a free loopback port, in a process of its own; stopped with SIGTERM."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log_path.open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--no-workers", "--host",
                                   "127.0.0.1", "--port", str(port)], env=_child_env(settings), stdout=log,
                                  stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base_url, server, log_path)
        yield base_url
    finally:
        _stop(server)


def _wait_ready(base_url: str, server: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the API server did not start:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.1)


def run_demo(*, jobs: int = 200, db_url: str | None = None) -> int:
    from settlekit.api.auth import create_api_key
    from settlekit.delivery.receiver import ReceiverServer
    from settlekit.delivery.signing import generate_secret

    console = Console()
    tmp = tempfile.TemporaryDirectory(prefix="settlekit-demo-")
    db_url = db_url or f"sqlite:///{Path(tmp.name) / 'demo.db'}"
    console.print(f"[bold]settlekit demo[/bold]: {jobs} jobs on {db_url}")
    started = time.perf_counter()
    db = connect(db_url, **({"max_size": 24} if db_url.startswith("postgres") else {}))
    receiver: ReceiverServer | None = None
    try:
        db.migrate()
        settings = Settings(db_url=db_url, allow_loopback_webhooks=True, rate_limit_per_second=1e6,
                            rate_limit_burst=1_000_000, server_key_file=str(Path(tmp.name) / "server.pem"))
        webhook_secret = generate_secret()
        receiver = ReceiverServer(secrets=[webhook_secret], port=0, out_dir=Path(tmp.name) / "received")
        receiver.start()
        _, api_key = create_api_key(db, TENANT, ["jobs:read", "jobs:write", "finance:write", "ops", "admin"])
        fleet = Fleet.create()
        with worker_process(settings, Path(tmp.name) / "worker.log") as worker, api_server(
                settings, Path(tmp.name) / "serve.log") as base_url, httpx.Client(
                base_url=base_url, headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
            _register(client, fleet, f"{receiver.url}webhooks", webhook_secret)
            appending = time.perf_counter()
            outcomes, job_ids, events_total = _append_jobs(console, base_url, dict(client.headers), fleet, jobs)
            append_seconds = time.perf_counter() - appending
            console.print("waiting for artifacts to be built and delivered …")
            drained = _wait_for_workers(db, receiver, worker, Path(tmp.name) / "worker.log",
                                        timeout=max(120.0, jobs * 1.0))
            if not drained:
                console.print("[red]deliveries did not finish in time[/red]")
                return 1
            streams = {job_id: _ok(client.get(f"/v1/jobs/{job_id}/export")).json() for job_id in job_ids}
        failures, balances = _check(console, db, streams, fleet, receiver)
        delivered = receiver.artifacts
        elapsed = time.perf_counter() - started
        _summary(console, outcomes, events_total, balances, delivered, receiver, failures, elapsed, append_seconds,
                 appending - started)
        for failure in failures[:20]:
            console.print(f"[red]FAILED[/red] {failure}")
        return 0 if not failures else 1
    finally:
        if receiver is not None:
            receiver.stop()
        db.close()
        tmp.cleanup()


def _wait_for_workers(db: Database, receiver: Any, worker: subprocess.Popen[bytes], log_path: Path, *,
                      timeout: float) -> bool:
    """Wait until the worker has processed every event and the receiver has every artifact built: True, False at
    `timeout`; RuntimeError (with its log) when the worker process stopped."""
    deadline = time.monotonic() + timeout
    while not wait_until_caught_up(db, lambda: len(receiver.artifacts), timeout=1.0, poll=0.1):
        if worker.poll() is not None:
            raise RuntimeError(f"the worker stopped (exit status {worker.returncode}):\n"
                               f"{log_path.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            return False
    return True


def _register(client: httpx.Client, fleet: Fleet, webhook_url: str, webhook_secret: str) -> None:
    """Register the fleet's signing keys and the receiver as the tenant's webhook destination."""
    for key in fleet.registrations():
        body = {"publicKeyPem": key["publicKeyPem"], "purpose": key["purpose"]}
        if "entityId" in key:
            body["entityId"] = key["entityId"]
        _ok(client.post("/v1/keys", json=body))
    _ok(client.post("/v1/destinations", json={
        "destinationId": "dst_demo_receiver", "url": webhook_url, "secret": webhook_secret,
        "allowPrivateNetwork": True}))


def _append_jobs(console: Console, base_url: str, headers: dict[str, str], fleet: Fleet,
                 jobs: int) -> tuple[Counter[str], list[str], int]:
    """Append the events of `jobs` simulated jobs over HTTP, one event per request, from CLIENTS concurrent
    clients (each job's events in order, by one client): the jobs by outcome, their ids, the event count."""
    outcomes: Counter[str] = Counter(OUTCOME_BY_SCENARIO[scenario_for(n)] for n in range(jobs))
    job_ids = [f"job_demo_{n:05d}" for n in range(jobs)]
    counts = [0] * CLIENTS
    lock = threading.Lock()
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("appending job events over HTTP", total=jobs)

        def client(index: int) -> None:
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
                for n in range(index, jobs, CLIENTS):
                    for event in job_stream(scenario_for(n), job_ids[n], fleet, n, tenant_id=TENANT):
                        _ok(http.post(f"/v1/jobs/{job_ids[n]}/events", json=event))
                        counts[index] += 1
                    with lock:
                        progress.advance(task)

        with ThreadPoolExecutor(CLIENTS) as pool:
            for done in [pool.submit(client, i) for i in range(CLIENTS)]:
                done.result()
    return outcomes, job_ids, sum(counts)


def _check(console: Console, db: Database, streams: dict[str, list[dict[str, Any]]], fleet: Fleet,
           receiver: Any) -> tuple[list[str], dict[str, int]]:
    """Verify streams and delivered artifacts offline and check the ledger balances: the failures and the
    tenant's balances."""
    failures = _verify(console, streams, fleet, receiver)
    balances = ledger_rows.balances(db, TENANT).get(TENANT, {})
    if sum(balances.values()) != 0:
        failures.append(f"ledger does not balance: total {sum(balances.values())}")
    return failures, balances


def _ok(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.method} {response.request.url.path} → {response.status_code}: "
                           f"{response.text[:500]}")
    return response


def _verify(console: Console, streams: dict[str, list[dict[str, Any]]], fleet: Fleet,
            receiver: Any) -> list[str]:
    failures: list[str] = []
    keys = fleet.public_keys()
    for job_id, events in streams.items():
        try:
            verify_chain(events, keys)
        except VerificationError as exc:
            failures.append(f"{job_id}: stream verification failed at event {exc.index}: {exc.code}")
    artifacts = receiver.artifacts
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("verifying delivered artifacts offline", total=len(artifacts))
        for artifact in artifacts:
            stream_events = streams.get(artifact.get("jobId", ""))
            if stream_events is None:
                failures.append(f"{artifact.get('artifactId')}: delivered for an unknown job")
            else:
                report = verify_artifact_against_stream(stream_events, artifact)
                if not report.get("ok"):
                    failures.append(f"{artifact.get('artifactId')}: {report.get('differences') or report}")
            progress.advance(task)
    expected = {job_id for job_id in streams}
    received_jobs = {a.get("jobId") for a in artifacts}
    missing = expected - received_jobs
    if missing:
        failures.append(f"{len(missing)} job(s) have no delivered artifact, e.g. {sorted(missing)[0]}")
    return failures


def _two_column_table(title: str, key: str, value: str, rows: list[tuple[str, str]]) -> Table:
    """A titled table of (key, right-aligned value) rows."""
    table = Table(title=title)
    table.add_column(key)
    table.add_column(value, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def _summary(console: Console, outcomes: Counter[str], events_total: int, balances: dict[str, int],
             delivered: list[dict[str, Any]], receiver: Any, failures: list[str], elapsed: float,
             append_seconds: float, startup_seconds: float) -> None:
    console.print(_two_column_table("jobs by outcome", "outcome", "jobs",
                                    [(outcome, str(count)) for outcome, count in sorted(outcomes.items())]))
    balance_rows = [(account, f"{cents:,}") for account, cents in sorted(balances.items())]
    balance_rows.append(("[bold]total[/bold]", f"[bold]{sum(balances.values()):,}[/bold]"))
    console.print(_two_column_table("ledger totals by account (cents)", "account", "balance", balance_rows))
    by_type = Counter(a.get("artifactType", "?") for a in delivered)
    console.print(_two_column_table("artifacts delivered by type", "type", "delivered",
                                    [(kind, str(count)) for kind, count in sorted(by_type.items())]))
    verification = "[green]all verified[/green]" if not failures else f"[red]{len(failures)} failure(s)[/red]"
    console.print(_two_column_table("settlekit demo summary", "what", "value", [
        ("jobs", str(sum(outcomes.values()))),
        ("events appended (HTTP)", str(events_total)),
        ("artifacts delivered (unique)", str(len(delivered))),
        ("redelivered duplicates deduped by the receiver", str(receiver.duplicates)),
        ("verification", verification),
        ("wall time", f"{elapsed:.1f} s"),
        ("start-up (database, receiver, workers, API, keys)", f"{startup_seconds:.1f} s"),
        ("append throughput (from the first append to the last)", f"{events_total / append_seconds:,.0f} events/s"),
    ]))

