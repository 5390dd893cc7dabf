"""Delivery engine: throughput against a sequential raw httpx loop (the anchor, in the same run), and one tenant's
latency while another tenant's slow endpoint drains a replay. Loopback traffic only.

    python bench/deliver.py [--db sqlite|postgres] [--n 3000] [--slow-n 800]

1. Fast receiver (a minimal asyncio HTTP server in its own process, answering 200 at once): deliveries/s of the
   DeliveryWorker (`run()`, default caps: 64 in flight, 4 per destination, 16 per tenant; claim, sign, send,
   record) over 16 destinations of 4 tenants, against a sequential raw httpx loop posting the same signed bodies.
   Target >= 2x. Printed with CPU per delivery of the worker's process, the receiver and PostgreSQL.
2. The same receiver answering after 250 ms: target >= 20x the sequential loop.
3. Tenant B's delivery latency (enqueue to arrival at its receiver), first alone, then while tenant A's endpoint holds
   every request 10 s and A replays 200 deliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pids_running, process_cpu_seconds, report, scratch_pg  # noqa: E402
from settlekit.application.destinations import replays  # noqa: E402
from settlekit.delivery.enqueue import enqueue_artifact  # noqa: E402
from settlekit.delivery.message import prepare_request  # noqa: E402
from settlekit.delivery.replays import ReplayPolicy  # noqa: E402
from settlekit.delivery.secrets import store_secret  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig  # noqa: E402
from settlekit.events.canonical import canonical_hash  # noqa: E402
from settlekit.store import deliveries as store  # noqa: E402
from settlekit.store.db import Database, connect  # noqa: E402

TENANTS, DESTINATIONS = 4, 4


def make_artifact(i: int, tenant: str, tag: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
        "artifactId": f"cert_job{tag}{i}_evt_1", "tenantId": tenant, "jobId": f"job{tag}{i}", "jobVersion": 1,
        "payload": {"units": i, "note": "x" * 400},
    }
    doc["artifactHash"] = canonical_hash(doc)
    return doc


# --- the receivers: one process, a minimal HTTP/1.1 server per port -----------------------------------------------


async def _serve_http(port_q: Any, delays: list[float], hold_events: Any, arrivals: Any) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, record: bool) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, webhook_id = 0, b""
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    elif name.lower() == b"webhook-id":
                        webhook_id = value.strip()
                await reader.readexactly(length)
                if record:
                    arrivals.put((webhook_id.decode(), time.time()))
                if delay:
                    await asyncio.sleep(delay)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    servers = []
    for i, delay in enumerate(delays):
        record = i == len(delays) - 1  # the last port records arrivals (tenant B's receiver)
        server = await asyncio.start_server(lambda r, w, d=delay, rec=record: handle(r, w, d, rec), "127.0.0.1", 0,
                                            backlog=512)
        servers.append(server)
    port_q.put([s.sockets[0].getsockname()[1] for s in servers])
    await asyncio.get_running_loop().run_in_executor(None, hold_events.wait)


def _receiver_main(port_q: Any, delays: list[float], stop: Any, arrivals: Any) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_serve_http(port_q, delays, stop, arrivals))


@contextlib.contextmanager
def receivers(delays: list[float]) -> Iterator[tuple[list[str], int, Any]]:
    """Ports answering after each delay (10 s: a slow endpoint); the last records arrivals."""
    ctx = mp.get_context("spawn")
    q, stop, arrivals = ctx.Queue(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_receiver_main, args=(q, delays, stop, arrivals), daemon=True)
    p.start()
    ports = q.get(timeout=30)
    try:
        yield [f"http://127.0.0.1:{port}/hook" for port in ports], p.pid or 0, arrivals
    finally:
        stop.set()
        p.join(5)
        if p.is_alive():
            p.kill()


def cpu_of(pids: set[int] | None = None, match: str | None = None) -> float:
    """CPU seconds of the processes `pids` and of those whose command line starts with `match`."""
    chosen = set(pids or ()) | set(pids_running(match) if match is not None else ())
    return sum(process_cpu_seconds(pid) or 0.0 for pid in chosen)


# --- the anchor ----------------------------------------------------------------------------------------------------


RAW_CPU: dict[str, float] = {}  # url -> CPU ms per request of the last sequential loop


async def sequential_loop(url: str, secret: str, docs: list[dict[str, Any]]) -> float:
    """Deliveries/s of a bare httpx.AsyncClient posting pre-signed requests one after another (no database)."""
    reqs = [prepare_request(url=url, artifact=d, tenant_id="raw", destination_id="raw", secrets=[secret])
            for d in docs]
    async with httpx.AsyncClient(timeout=15.0, trust_env=False) as client:
        t0, c0 = time.perf_counter(), time.process_time()
        for r in reqs:
            resp = await client.post(r.url, content=r.body, headers=dict(r.headers))
            if resp.status_code != 200:
                raise RuntimeError(f"raw loop got {resp.status_code}")
        RAW_CPU[url] = 1000 * (time.process_time() - c0) / len(reqs)
        return len(reqs) / (time.perf_counter() - t0)


# --- the worker ----------------------------------------------------------------------------------------------------


class Docs:
    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, tx: Any, tenant: str, artifact_id: str) -> dict[str, Any] | None:
        return self.by_key.get((tenant, artifact_id))


def add_destinations(db: Database, secret: str, urls: dict[tuple[str, str], str]) -> None:
    now = datetime.now(UTC)
    with db.transaction() as tx:
        refs = {tenant: store_secret(tx, tenant, secret) for tenant, _ in urls}
        for (tenant, dest), url in urls.items():
            store.put_destination(tx, store.Destination(tenant_id=tenant, destination_id=dest, url=url,
                                                        secret_ref=refs[tenant]), now=now)


def enqueue(db: Database, docs: Docs, tenant: str, items: list[dict[str, Any]], when: datetime | None = None) -> None:
    with db.transaction() as tx:
        for d in items:
            docs.by_key[(tenant, d["artifactId"])] = d
            enqueue_artifact(tx, tenant, d, now=when or datetime.now(UTC))


class RunningWorker:
    def __init__(self, db: Database, docs: Docs):
        self.worker = DeliveryWorker(db, artifact_loader=docs, config=WorkerConfig(
            allow_insecure_http=True, allow_loopback=True, idle_sleep=0.02, lease=timedelta(seconds=30)))
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        async with self.worker:
            await self.worker.run()

    def __enter__(self) -> RunningWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self._thread.join(60)


def delivered(db: Database, tenant_prefix: str) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT count(*) FROM deliveries WHERE state = 'delivered' AND tenant_id LIKE ?",
                             (tenant_prefix + "%",)))


def wait_delivered(db: Database, prefix: str, n: int, timeout: float) -> float:
    t0 = time.perf_counter()
    while delivered(db, prefix) < n:
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"only {delivered(db, prefix)} of {n} delivered in {timeout} s")
        time.sleep(0.05)
    return time.perf_counter() - t0


def throughput(db: Database, docs: Docs, secret: str, urls: list[str], prefix: str, n: int,
               receiver_pid: int) -> tuple[float, str]:
    """Deliveries/s of the worker over TENANTS x DESTINATIONS destinations on `urls` (round robin)."""
    targets = {(f"{prefix}{t}", f"d{d}"): urls[(t * DESTINATIONS + d) % len(urls)]
               for t in range(TENANTS) for d in range(DESTINATIONS)}
    add_destinations(db, secret, targets)
    for t in range(TENANTS):  # each artifact goes to the tenant's DESTINATIONS destinations
        enqueue(db, docs, f"{prefix}{t}", [make_artifact(i, f"{prefix}{t}", prefix) for i in
                                           range(n // (TENANTS * DESTINATIONS))])
    total = (n // (TENANTS * DESTINATIONS)) * TENANTS * DESTINATIONS
    cpu0 = (time.process_time(), cpu_of({receiver_pid}), cpu_of(match="postgres: "))
    with RunningWorker(db, docs):
        elapsed = wait_delivered(db, prefix, total, 600)
    cpu1 = (time.process_time(), cpu_of({receiver_pid}), cpu_of(match="postgres: "))
    per = [1000 * (b - a) / total for a, b in zip(cpu0, cpu1, strict=True)]
    return total / elapsed, (f"CPU per delivery (ms): worker process {per[0]:.3f}, receiver {per[1]:.3f}, "
                             f"PostgreSQL {per[2]:.3f}")


def latencies_of_b(db: Database, docs: Docs, arrivals: Any, tag: str, count: int = 60) -> list[float]:
    sent: dict[str, float] = {}
    for i in range(count):
        doc = make_artifact(i, "b", tag)
        enqueue(db, docs, "b", [doc])
        with db.read() as tx:
            [row] = [r for r in store.list_deliveries(tx, "b", limit=100_000) if r.artifact_id == doc["artifactId"]]
        sent[row.message_id] = time.time()
        time.sleep(0.05)
    got: dict[str, float] = {}
    deadline = time.time() + 60
    while len(got) < count and time.time() < deadline:
        with contextlib.suppress(Exception):
            webhook_id, at = arrivals.get(timeout=1)
            if webhook_id in sent:
                got[webhook_id] = at
    return sorted(got[m] - sent[m] for m in got)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, int(len(values) * q + 0.999999) - 1))] if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--slow-n", type=int, default=800)
    ap.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    args = ap.parse_args()
    secret = generate_secret()
    with tempfile.TemporaryDirectory() as tmp, receivers([0.0, 0.25, 10.0, 0.0]) as (urls, rx_pid, arrivals):
        fast, slow250, hold10, b_url = urls
        db_ctx = scratch_pg("deliver") if args.db == "postgres" else contextlib.nullcontext(f"sqlite:///{tmp}/b.db")
        with db_ctx as db_url:
            db = connect(db_url)
            try:
                db.migrate()
                docs = Docs()
                warm = [make_artifact(i, "raw", "w") for i in range(200)]
                asyncio.run(sequential_loop(fast, secret, warm))
                throughput(db, docs, secret, [fast], "warm", 320, rx_pid)
                raw_fast = asyncio.run(sequential_loop(fast, secret, [make_artifact(i, "raw", "f")
                                                                      for i in range(2000)]))
                sk_fast, cpu_fast = throughput(db, docs, secret, [fast], "fast", args.n, rx_pid)
                raw_slow = asyncio.run(sequential_loop(slow250, secret, [make_artifact(i, "raw", "s")
                                                                         for i in range(16)]))
                sk_slow, cpu_slow = throughput(db, docs, secret, [slow250], "slow", args.slow_n, rx_pid)
                # tenant B alone, then under tenant A's replay toward a 10 s endpoint
                add_destinations(db, secret, {("b", "b"): b_url, ("a", "a"): hold10})
                created = datetime.now(UTC) - timedelta(hours=1)
                enqueue(db, docs, "a", [make_artifact(i, "a", "a") for i in range(200)], when=created)
                with db.transaction() as tx:
                    tx.execute("UPDATE deliveries SET state = 'delivered' WHERE tenant_id = 'a'")
                with RunningWorker(db, docs):
                    alone = latencies_of_b(db, docs, arrivals, "alone")
                    with db.transaction() as tx:
                        replays.create(tx, "a", "a", since=created - timedelta(minutes=1), until=datetime.now(UTC),
                                       policy=ReplayPolicy(), actor="bench", now=datetime.now(UTC))
                    time.sleep(1.0)
                    attacked = latencies_of_b(db, docs, arrivals, "attacked")
                    with db.read() as tx:
                        a_left = sum(1 for r in store.list_deliveries(tx, "a", limit=1000) if r.state == "pending")
            finally:
                db.close()
    print(f"deliveries: db={args.db}, {TENANTS} tenants x {DESTINATIONS} destinations, default caps "
          f"(64 in flight, 4 per destination, 16 per tenant); {os.cpu_count()} cores")
    report("sequential raw httpx loop, fast receiver", raw_fast, "deliveries/s")
    print(f"  CPU per request (ms): the loop's process {RAW_CPU[fast]:.3f}")
    report("settlekit DeliveryWorker, fast receiver", sk_fast, "deliveries/s", anchor=raw_fast,
           anchor_name="sequential loop", target=">= 2x")
    print(f"  {cpu_fast}")
    report("sequential raw httpx loop, receiver answering after 250 ms", raw_slow, "deliveries/s")
    report("settlekit DeliveryWorker, receiver answering after 250 ms", sk_slow, "deliveries/s", anchor=raw_slow,
           anchor_name="sequential loop", target=">= 20x")
    print(f"  {cpu_slow}")
    print(f"tenant B delivery latency alone: p50 {pct(alone, 0.5) * 1000:.0f} ms, p99 {pct(alone, 0.99) * 1000:.0f} ms"
          f" ({len(alone)} deliveries)")
    print(f"tenant B delivery latency while tenant A replays 200 deliveries to an endpoint holding each request 10 s:"
          f" p50 {pct(attacked, 0.5) * 1000:.0f} ms, p99 {pct(attacked, 0.99) * 1000:.0f} ms ({len(attacked)}"
          f" deliveries; A still pending at the end: {a_left})")


if __name__ == "__main__":
    main()
