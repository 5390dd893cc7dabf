"""Bounded loopback load test of the HTTP API (issue 7): `python bench/load.py`.

A scratch PostgreSQL database, an API key, a local webhook receiver on 127.0.0.1 and `settlekit serve
--allow-loopback-webhooks` (API and embedded workers) as a subprocess. LOAD_CLIENTS (50) concurrent keep-alive
clients each drive their own simulated jobs (client-finalized, signed events from settlekit.simulate.job_stream),
one event per POST /v1/jobs/{id}/events, for LOAD_SECONDS (20). Reported: requests/s, p50/p99 latency, 2xx/4xx/5xx
counts. Then, with the load stopped, it waits (bounded) for the dispatcher and the deliveries to finish and checks
that nothing was lost: every acknowledged event is in GET /v1/jobs/{id}/export at its index with the same chain
hash, and every artifact of a job that reached a triggering event was received by the local receiver. Last, the
server gets SIGTERM and must exit 0 within LOAD_SHUTDOWN_SECONDS (30).

Only 127.0.0.1 is contacted. Exit status 1 only when the test could not run; missed targets are reported.
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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report, scratch_pg  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.artifacts.build import tasks_for_event  # noqa: E402
from settlekit.delivery.receiver import ReceiverServer  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.simulate import Fleet, job_stream, scenario_for  # noqa: E402
from settlekit.store.db import connect  # noqa: E402

CLIENTS = int(os.environ.get("LOAD_CLIENTS", "50"))
SECONDS = float(os.environ.get("LOAD_SECONDS", "20"))
DRAIN_SECONDS = float(os.environ.get("LOAD_DRAIN_SECONDS", "180"))
SHUTDOWN_SECONDS = float(os.environ.get("LOAD_SHUTDOWN_SECONDS", "30"))
MAX_JOBS_PER_CLIENT = 10_000  # hard bound on the client loop besides the clock
TENANT = "tenant_load"
OPERATOR_TENANT = "system"  # the default SETTLEKIT_OPERATOR_TENANT: reads consumer lag


class CannotRun(Exception):
    """The load test could not be set up or driven (not a missed target)."""


@dataclass
class JobRecord:
    job_id: str
    acked: list[str] = field(default_factory=list)  # chain hashes of events answered 2xx, in stream order
    triggered: bool = False  # an acknowledged event has artifact build tasks


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # transport errors by exception type
    client_problems: Counter[str] = field(default_factory=Counter)  # 4xx/5xx by problem code
    jobs: list[JobRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process (Linux /proc); 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def start_server(url: str, port: int, tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    env = {**os.environ,
           "SETTLEKIT_SECRETS_DIR": str(tmp / "secrets"),
           "SETTLEKIT_SERVER_KEY_FILE": str(tmp / "server-key.pem"),
           "SETTLEKIT_RATE_LIMIT_PER_SECOND": "1000000",
           "SETTLEKIT_RATE_LIMIT_BURST": "1000000",
           "SETTLEKIT_OPERATOR_TENANT": OPERATOR_TENANT}
    env.pop("SETTLEKIT_DB", None)
    env.pop("SETTLEKIT_PORT", None)
    log = tmp / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "settlekit.cli", "serve", "--db", url, "--host", "127.0.0.1",
             "--port", str(port), "--allow-loopback-webhooks"],
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CannotRun(f"settlekit serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise CannotRun(f"/readyz not ready within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def checked(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 400:
        raise CannotRun(f"{resp.request.method} {resp.request.url.path} -> {resp.status_code}: {resp.text[:500]}")
    return resp


def setup_tenant(base: str, headers: dict[str, str], fleet: Fleet, receiver: ReceiverServer, secret: str) -> None:
    with httpx.Client(base_url=base, headers=headers, timeout=30) as admin:
        for key in fleet.registrations():
            body = {k: key[k] for k in ("publicKeyPem", "purpose")}
            if "entityId" in key:
                body["entityId"] = key["entityId"]
            checked(admin.post("/v1/keys", json=body))
        checked(admin.post("/v1/destinations", json={"destinationId": "dst_load", "url": f"{receiver.url}hook",
                                                     "secret": secret, "allowPrivateNetwork": True}))


def run_clients(base: str, headers: dict[str, str], fleet: Fleet) -> tuple[Results, float]:
    """CLIENTS threads, each with its own keep-alive client, appending until the clock runs out."""
    results = Results()
    barrier = threading.Barrier(CLIENTS + 1)
    go = threading.Event()
    stop_at = [0.0]

    def client(index: int) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            http.get("/v1/jobs", params={"limit": 1})  # open the keep-alive connection before the clock starts
            barrier.wait()
            go.wait()
            for n in range(MAX_JOBS_PER_CLIENT):
                if time.monotonic() >= stop_at[0]:
                    return
                seed = index * MAX_JOBS_PER_CLIENT + n
                record = JobRecord(f"job_load_{index:03d}_{n:05d}")
                with results.lock:
                    results.jobs.append(record)
                for event in job_stream(scenario_for(seed), record.job_id, fleet, seed):
                    if time.monotonic() >= stop_at[0]:
                        return
                    t0 = time.perf_counter()
                    try:
                        resp = http.post(f"/v1/jobs/{record.job_id}/events", json=event)
                    except httpx.HTTPError as exc:  # counted; the job stops here (its next event would not chain)
                        with results.lock:
                            results.errors[type(exc).__name__] += 1
                        break
                    dt = time.perf_counter() - t0
                    code = resp.status_code
                    with results.lock:
                        results.latencies.append(dt)
                        results.statuses[code] += 1
                        if code >= 400:
                            results.client_problems[f"{code} {problem_code(resp)}"] += 1
                    if not 200 <= code < 300:
                        break
                    record.acked.append(event["chainHash"])
                    if not record.triggered and tasks_for_event(event, TENANT, record.job_id):
                        record.triggered = True

    threads = [threading.Thread(target=client, args=(i,), name=f"load-{i}", daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        barrier.wait(timeout=60)
    except threading.BrokenBarrierError as exc:
        raise CannotRun("the load clients did not all connect within 60 s") from exc
    stop_at[0] = time.monotonic() + SECONDS
    started = time.perf_counter()
    go.set()
    for t in threads:
        t.join(SECONDS + 120)
    elapsed = time.perf_counter() - started
    if any(t.is_alive() for t in threads):
        raise CannotRun("load clients still running 120 s after the deadline")
    return results, elapsed


def problem_code(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return "?"
    return str(body.get("code", "?")) if isinstance(body, dict) else "?"


def drain(base: str, headers: dict[str, str], operator_headers: dict[str, str]) -> tuple[bool, float]:
    """Wait until the artifact consumer has no lag and no delivery is pending (bounded)."""
    started = time.monotonic()
    deadline = started + DRAIN_SECONDS
    with httpx.Client(base_url=base, timeout=30) as http:
        while time.monotonic() < deadline:
            consumers = checked(http.get("/v1/ops/consumers", headers=operator_headers)).json()["consumers"]
            lag = sum(int(c.get("lag") or 0) + len(c.get("pendingGapPositions") or ()) for c in consumers)
            pending = checked(http.get("/v1/deliveries", headers=headers,
                                       params={"state": "pending", "limit": 1})).json()["deliveries"]
            if lag == 0 and not pending:
                return True, time.monotonic() - started
            time.sleep(0.5)
    return False, time.monotonic() - started


def paged_artifact_ids(http: httpx.Client, job_id: str) -> set[str]:
    ids: set[str] = set()
    cursor: str | None = None
    for _ in range(100):
        params: dict[str, Any] = {"limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = checked(http.get(f"/v1/jobs/{job_id}/artifacts", params=params)).json()
        ids.update(a["artifactId"] for a in page["artifacts"])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return ids


@dataclass
class Check:
    events_acked: int = 0
    events_lost: int = 0  # acknowledged but missing or different at its index
    events_unacked_stored: int = 0  # stored beyond the acknowledged prefix (a reply lost in transit)
    jobs_triggered: int = 0
    jobs_without_artifacts: int = 0
    artifacts_built: int = 0
    artifacts_received: int = 0
    artifacts_not_received: int = 0


def verify(base: str, headers: dict[str, str], jobs: list[JobRecord], received: set[str]) -> Check:
    out = Check()
    lock = threading.Lock()

    def one(http: httpx.Client, job: JobRecord) -> None:
        resp = http.get(f"/v1/jobs/{job.job_id}/export")
        if resp.status_code != 404:  # 404: the job is not there at all (every acknowledged event lost)
            checked(resp)
        stored = [e["chainHash"] for e in resp.json()] if resp.status_code == 200 else []
        lost = sum(1 for i, h in enumerate(job.acked) if i >= len(stored) or stored[i] != h)
        ids = paged_artifact_ids(http, job.job_id) if stored else set()
        with lock:
            out.events_acked += len(job.acked)
            out.events_lost += lost
            out.events_unacked_stored += max(0, len(stored) - len(job.acked))
            out.artifacts_built += len(ids)
            out.artifacts_received += len(ids & received)
            out.artifacts_not_received += len(ids - received)
            if job.triggered:
                out.jobs_triggered += 1
                if not ids:
                    out.jobs_without_artifacts += 1

    local = threading.local()
    clients: list[httpx.Client] = []

    def task(job: JobRecord) -> None:
        http = getattr(local, "http", None)
        if http is None:
            http = local.http = httpx.Client(base_url=base, headers=headers, timeout=30)
            with lock:
                clients.append(http)
        one(http, job)

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(task, [j for j in jobs if j.acked]))
    finally:
        for c in clients:
            c.close()
    return out


def stop_server(proc: subprocess.Popen[bytes]) -> tuple[int | None, float]:
    """SIGTERM; (exit status or None when it had to be killed, seconds taken)."""
    started = time.monotonic()
    if proc.poll() is not None:
        return proc.returncode, 0.0
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=SHUTDOWN_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None, time.monotonic() - started
    return code, time.monotonic() - started


def main() -> int:
    try:
        return run()
    except CannotRun as exc:
        print(f"load test could not run: {exc}", file=sys.stderr)
        return 1


def run() -> int:
    with scratch_pg("load") as url, tempfile.TemporaryDirectory(prefix="settlekit-load-") as tmp_name:
        tmp = Path(tmp_name)
        db = connect(url)
        try:
            db.migrate()
            _, api_key = create_api_key(db, TENANT, ["jobs:read", "jobs:write", "ops", "admin"])
            _, operator_key = create_api_key(db, OPERATOR_TENANT, ["admin"], label="load-test lag reader")
        finally:
            db.close()
        headers = {"authorization": f"Bearer {api_key}"}
        operator_headers = {"authorization": f"Bearer {operator_key}"}
        secret = generate_secret()
        receiver = ReceiverServer(secrets=[secret], host="127.0.0.1", port=0)
        receiver.start()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server, log = start_server(url, port, tmp)
        exit_code: int | None = None
        try:
            wait_ready(base, server, log)
            fleet = Fleet.create(robots=8, operators=4)
            setup_tenant(base, headers, fleet, receiver, secret)

            server_cpu0, client_cpu0 = cpu_seconds(server.pid), time.process_time()
            results, elapsed = run_clients(base, headers, fleet)
            server_cpu = cpu_seconds(server.pid) - server_cpu0
            client_cpu = time.process_time() - client_cpu0

            drained, drain_seconds = drain(base, headers, operator_headers)
            received = {a["artifactId"] for a in receiver.artifacts}
            check = verify(base, headers, results.jobs, received)
            with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                failed = checked(http.get("/v1/deliveries", params={"state": "failed", "limit": 1000})
                                 ).json()["deliveries"]
        finally:
            exit_code, shutdown_seconds = stop_server(server)
            receiver.stop()

        log_text = log.read_text(errors="replace")
        tracebacks = log_text.count("Traceback (most recent call last)")
        total = len(results.latencies)
        statuses = results.statuses
        five = sum(c for s, c in statuses.items() if s >= 500)
        four = sum(c for s, c in statuses.items() if 400 <= s < 500)
        two = sum(c for s, c in statuses.items() if 200 <= s < 300)
        qs = statistics.quantiles(results.latencies, n=100) if total >= 2 else [0.0] * 99
        jobs_started = len(results.jobs)
        jobs_finished = sum(1 for j in results.jobs if j.triggered)

        print(f"-- load: {CLIENTS} clients x {SECONDS:.0f} s, one client-finalized event per request, "
              f"serve (API + workers) on 127.0.0.1, PostgreSQL")
        report("API appends", total / elapsed if elapsed else 0.0, "requests/s")
        report("latency p50", qs[49] * 1000, "ms")
        report("latency p99", qs[98] * 1000, "ms")
        report("latency max", max(results.latencies, default=0.0) * 1000, "ms")
        print(f"responses: 2xx={two} 4xx={four} 5xx={five} transport errors={sum(results.errors.values())}"
              f"  {dict(sorted(statuses.items()))}")
        if results.client_problems:
            print(f"  error codes: {dict(results.client_problems.most_common())}")
        if results.errors:
            print(f"  transport errors: {dict(results.errors)}")
        print(f"jobs: {jobs_started} started, {jobs_finished} reached a triggering event")
        print(f"CPU during the load window: server {server_cpu:.1f} s ({server_cpu / elapsed:.0%} of one core), "
              f"load client {client_cpu:.1f} s ({client_cpu / elapsed:.0%})")
        print(f"drain: {'done' if drained else 'NOT done'} in {drain_seconds:.1f} s (limit {DRAIN_SECONDS:.0f} s)")
        print(f"events acknowledged: {check.events_acked}; lost or altered: {check.events_lost}; "
              f"stored without acknowledgement: {check.events_unacked_stored}")
        print(f"artifacts built: {check.artifacts_built}; delivered to the receiver: {check.artifacts_received}; "
              f"not delivered: {check.artifacts_not_received}; jobs with a trigger but no artifact: "
              f"{check.jobs_without_artifacts}; failed deliveries: {len(failed)}; receiver duplicates: "
              f"{receiver.duplicates}, rejected: {receiver.rejected}")
        print("shutdown: SIGTERM -> "
              + (f"exit {exit_code} in {shutdown_seconds:.1f} s" if exit_code is not None
                 else f"killed after {SHUTDOWN_SECONDS:.0f} s")
              + f"; tracebacks in the server log: {tracebacks}")
        misses = []
        if five:
            misses.append(f"{five} 5xx")
        if four:
            misses.append(f"{four} 4xx")
        if check.events_lost:
            misses.append(f"{check.events_lost} lost events")
        if check.artifacts_not_received or check.jobs_without_artifacts or not drained:
            misses.append("undelivered artifacts")
        if exit_code != 0:
            misses.append("unclean shutdown")
        print("targets: " + ("all met" if not misses else "MISSED: " + ", ".join(misses)), flush=True)
        if tracebacks:
            start = log_text.find("Traceback (most recent call last)")
            print(log_text[start:start + 3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
