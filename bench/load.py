"""Bounded loopback load test of the HTTP API (issue 7), as a ratio of the framework ceiling (issue 13).

The framework ceiling (ceiling.py: a minimal FastAPI app in one process inserting each body as one row) is
measured first and again after each settlekit case, and a case's ratio is to the mean of the ceiling runs just
before and just after it: on a shared machine the speed can drift by tens of percent within minutes, and a ratio
to a ceiling measured several minutes earlier would carry that drift. Between the ceiling runs, back to back,
`settlekit serve --no-workers` (one API process) and `serve --no-workers --workers 2` (two API processes on one
port), each with a separate `settlekit worker`, run as subprocesses on a scratch
PostgreSQL database, and the same generator (`common.run_job_load`: 50 clients appending client-finalized, signed
job events for 20 s, one event per request; LOAD_CLIENTS, LOAD_SECONDS override; LOAD_PROCESSES="1" or "2" runs
one case) loads the API. A third case, informational ("1-alone" in LOAD_PROCESSES), loads one API process while
no worker runs (it starts when the load ends and catches up), as when the workers run on other hosts.
Reports requests/s (and its ratio to the ceiling's), p50/p99 latency and the 4xx/5xx counts; then waits for the
deliveries and checks that nothing was lost: every accepted event is in the exported stream at its index, and
every artifact built was received by the local webhook receiver. Finally SIGTERM must stop the server cleanly.
Only 127.0.0.1 is contacted. The load generator itself needs most of a core at ~700 requests/s: on a small
machine it competes with the servers it measures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ceiling  # noqa: E402
from common import (  # noqa: E402
    LOAD_TENANT,
    CpuSampler,
    LoadResult,
    child_processes,
    free_port,
    run_job_load,
    scratch_pg,
    stop_process,
    wait_ready,
)
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.delivery.receiver import ReceiverServer  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.runtime.workers import wait_until_caught_up  # noqa: E402
from settlekit.simulate import Fleet  # noqa: E402
from settlekit.store.db import Database, connect  # noqa: E402

TARGETS = {1: "target ratio >= 0.6x, p99 <= 150 ms, 0 errors", 2: "target ratio >= 1.0x, 0 errors"}
# The third case, informational: one API process while no worker runs on the machine (it starts after the load and
# catches up), as when the workers run on other hosts; on a small machine the worker takes CPU from the API.
API_ALONE = "1-alone"


def main() -> int:
    """The ceiling, then settlekit with one API process, then with two (`serve --workers 2`), back to back, with
    the ceiling measured again after each case; LOAD_PROCESSES (e.g. "1" or "2") limits the runs."""
    cases = [n.strip() for n in os.environ.get("LOAD_PROCESSES", f"1,2,{API_ALONE}").split(",") if n.strip()]
    ceilings = [ceiling.measure()]
    results: dict[str, tuple[LoadResult, LoadResult, LoadResult]] = {}
    for case in cases:
        before = ceilings[-1]
        if before is None:
            print("the framework ceiling did not start")
            return 1
        alone = case == API_ALONE
        result = measure(before, 1 if alone else int(case), worker_during_load=not alone)
        if result is None:
            return 1
        ceilings.append(ceiling.measure())
        after = ceilings[-1]
        if after is None:
            print("the framework ceiling did not start")
            return 1
        results[case] = (result, before, after)
    rates = ", ".join(f"{c.rate:,.1f}" for c in ceilings if c is not None)
    print(f"== summary (framework ceiling, measured before the first case and after each: {rates} requests/s; "
          "each case's ratio is to the mean of the ceiling runs just before and just after it)")
    for case, (result, before, after) in results.items():
        name = ("1 API process, no worker during the load (informational)" if case == API_ALONE
                else f"{case} API process(es)")
        target = "" if case == API_ALONE else f" ({TARGETS.get(int(case), '')})"
        anchor_rate = (before.rate + after.rate) / 2
        print(f"settlekit, {name}: {result.rate:,.1f} requests/s = "
              f"{result.rate / anchor_rate:.2f}x the ceiling ({anchor_rate:,.1f}: {before.rate:,.1f} before, "
              f"{after.rate:,.1f} after; p99 {before.quantile_ms(99):,.1f} / {after.quantile_ms(99):,.1f} ms); "
              f"p50 {result.quantile_ms(50):,.1f} ms, p99 {result.quantile_ms(99):,.1f} ms; "
              f"4xx {result.errors_4xx}, 5xx {result.errors_5xx}{target}", flush=True)
    return 0


def _start(processes: int, env: dict[str, str], tmp: str, *, with_worker: bool = True
           ) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """The API (`serve --no-workers`, with `--workers N` above one process) and, unless not `with_worker`, a
    separate `settlekit worker`, so the API and the workers do not share one interpreter lock."""
    serve = [sys.executable, "-m", "settlekit.cli", "serve", "--no-workers"]
    if processes > 1:
        serve += ["--workers", str(processes)]
    log = Path(tmp) / "serve.log"
    server = subprocess.Popen(serve, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    return [("serve", server), _start_worker(env, tmp)] if with_worker else [("serve", server)]


def _start_worker(env: dict[str, str], tmp: str) -> tuple[str, subprocess.Popen[bytes]]:
    worker = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "worker"], env=env,
                              stdout=(Path(tmp) / "worker.log").open("ab"), stderr=subprocess.STDOUT)
    return "worker", worker


def _register(base: str, headers: dict[str, str], fleet: Fleet, receiver_url: str, secret: str) -> None:
    with httpx.Client(base_url=base, headers=headers, timeout=30) as admin:
        for key in fleet.registrations():
            body = {k: key[k] for k in ("publicKeyPem", "purpose")}
            if "entityId" in key:
                body["entityId"] = key["entityId"]
            admin.post("/v1/keys", json=body).raise_for_status()
        admin.post("/v1/destinations", json={"destinationId": "dst_load", "url": f"{receiver_url}hook",
                                             "secret": secret, "allowPrivateNetwork": True}).raise_for_status()


def measure(anchor: LoadResult, processes: int, *, worker_during_load: bool = True) -> LoadResult | None:
    """Load settlekit with `processes` API processes on a scratch database, print its figures against the
    ceiling's and the loss checks; None if it did not start. Without `worker_during_load`, the worker starts
    when the load ends."""
    with scratch_pg("load") as url, tempfile.TemporaryDirectory() as tmp:
        db = connect(url)
        db.migrate()
        _, api_key = create_api_key(db, LOAD_TENANT, ["admin"])
        secret = generate_secret()
        receiver = ReceiverServer(secrets=[secret], port=0)
        receiver.start()
        port = free_port()
        env = {**os.environ, "SETTLEKIT_DB": url, "SETTLEKIT_PORT": str(port),
               "SETTLEKIT_SERVER_KEY_FILE": f"{tmp}/server.pem",
               "SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS": "true", "SETTLEKIT_RATE_LIMIT_PER_SECOND": "1000000",
               "SETTLEKIT_RATE_LIMIT_BURST": "1000000"}
        procs = _start(processes, env, tmp, with_worker=worker_during_load)
        base = f"http://127.0.0.1:{port}"
        try:
            if not wait_ready(f"{base}/readyz", procs[0][1], Path(tmp) / "serve.log"):
                return None
            headers = {"authorization": f"Bearer {api_key}"}
            fleet = Fleet.create(robots=8, operators=4)
            _register(base, headers, fleet, receiver.url, secret)
            server = procs[0][1]
            sampler = CpuSampler({pid: name for name, pid in ((n, p.pid) for n, p in procs)},
                                 lambda: child_processes(server.pid) if processes > 1 else [server.pid])
            result = run_job_load(base, headers, fleet)
            cpu = sampler.report(len(result.latencies))
            if not worker_during_load:
                procs.append(_start_worker(env, tmp))
            name = f"{processes} API process{'es' if processes > 1 else ''}"
            result.print(f"API appends ({name}{'' if worker_during_load else ', no worker during the load'})",
                         anchor=anchor, anchor_name="the framework ceiling run just before")
            target = TARGETS.get(processes, "") if worker_during_load else "informational"
            print(f"framework ceiling just before: {anchor.rate:,.1f} requests/s; {target}", flush=True)
            print(cpu, flush=True)
            _check_nothing_lost(db, base, headers, receiver, result)
        finally:
            for name, proc in procs:
                stop_process(name, proc)
            receiver.stop()
            db.close()
            _print_server_problems(Path(tmp) / "serve.log")
    return result


def _print_server_problems(log: Path) -> None:
    """The server's log lines at warning level or above, and those about its processes (a 5xx or a reset
    connection in the figures is explained here)."""
    shown = 0
    for line in log.read_text(errors="replace").splitlines():
        if ('"level":"info"' in line.replace(" ", "") and "child process" not in line.lower()) or not line.strip():
            continue
        if shown == 0:
            print("server log, warnings and process changes:")
        if shown < 40:
            print("  " + line[:400])
        shown += 1
    if shown > 40:
        print(f"  ... {shown - 40} more")


def _check_nothing_lost(db: Database, base: str, headers: dict[str, str], receiver: ReceiverServer,
                        result: LoadResult) -> None:
    """Accepted events are readable at their index, every artifact built is delivered."""
    wait_until_caught_up(db, lambda: len(receiver.artifacts), timeout=300, poll=0.5)
    accepted = result.accepted
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
          f"not delivered: {len(artifact_ids - received)}; receiver duplicates deduped: {receiver.duplicates}")


if __name__ == "__main__":
    sys.exit(main())
