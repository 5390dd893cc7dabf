"""Delivery throughput: the DeliveryWorker (claim, sign, send, record on PostgreSQL or SQLite) against a raw
httpx loop posting the same signed bodies with the same concurrency, both to a local ReceiverServer running in
its own process (verifies signatures and artifact hashes, dedupes). Loopback traffic only.

    python bench/deliver.py [--n 2000] [--concurrency 16] [--db sqlite|postgres]

Target: worker ≥ 0.6× the raw loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, scratch_pg  # noqa: E402
from settlekit.delivery.enqueue import enqueue_artifact  # noqa: E402
from settlekit.delivery.message import prepare_request  # noqa: E402
from settlekit.delivery.receiver import ReceiverServer  # noqa: E402
from settlekit.delivery.secrets import store_secret  # noqa: E402
from settlekit.delivery.sender import SenderConfig  # noqa: E402
from settlekit.delivery.signing import generate_secret  # noqa: E402
from settlekit.delivery.ssrf import SsrfPolicy  # noqa: E402
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig  # noqa: E402
from settlekit.events.canonical import canonical_hash  # noqa: E402
from settlekit.store import deliveries as store  # noqa: E402
from settlekit.store.db import Database, connect  # noqa: E402


def make_artifact(i: int, tenant: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": "WorkCertificate.v1",
        "artifactType": "WorkCertificate.v1",
        "artifactId": f"cert_job{i // 4}_evt_{i % 4 + 1}",
        "tenantId": tenant,
        "jobId": f"job{i // 4}",
        "jobVersion": i % 4 + 1,
        "payload": {"units": i, "note": "x" * 400},
    }
    doc["artifactHash"] = canonical_hash(doc)
    return doc


def _serve(secret: str, port_q: Any, stop: Any) -> None:
    rx = ReceiverServer(secrets=[secret]).start()
    port_q.put(rx.port)
    stop.wait()
    port_q.put(rx.stats())
    rx.stop()


@contextlib.contextmanager
def receiver_process(secret: str) -> Iterator[tuple[str, Any]]:
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_serve, args=(secret, q, stop), daemon=True)
    p.start()
    port = q.get(timeout=30)
    stats: dict[str, Any] = {}
    try:
        yield f"http://127.0.0.1:{port}/", stats
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            stats.update(q.get(timeout=10))
        p.join(10)


async def raw_loop(url: str, secret: str, docs: list[dict[str, Any]], concurrency: int) -> float:
    """Deliveries/s of a bare httpx.AsyncClient: pre-signed requests, `concurrency` tasks, no database."""
    reqs = [
        prepare_request(url=url, artifact=d, tenant_id="raw", destination_id="raw", secrets=[secret])
        for d in docs
    ]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=15.0, trust_env=False) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(reqs)):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                r = reqs[queue.get_nowait()]
                resp = await client.post(r.url, content=r.body, headers=dict(r.headers))
                if resp.status_code != 200:
                    raise RuntimeError(f"raw loop got {resp.status_code}: {resp.text[:200]}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(reqs) / (time.perf_counter() - t0)


def setup_db(db: Database, url: str, secret: str, docs: list[dict[str, Any]], tenant: str) -> None:
    now = datetime.now(UTC)
    with db.transaction() as tx:
        secret_ref = store_secret(tx, tenant, secret)
        store.put_destination(
            tx, store.Destination(tenant_id=tenant, destination_id="bench", url=url, secret_ref=secret_ref),
            now=now,
        )
        for d in docs:
            enqueue_artifact(tx, tenant, d, now=now)


async def worker_run(db: Database, docs: dict[tuple[str, str], dict[str, Any]], concurrency: int,
                     batch: int) -> float:
    config = WorkerConfig(
        batch_size=batch,
        allow_insecure_http=True,
        allow_loopback=True,
        idle_sleep=0.01,
        sender=SenderConfig(concurrency=concurrency, max_connections=concurrency,
                            max_keepalive_connections=concurrency),
    )
    async with DeliveryWorker(
        db, artifact_loader=lambda tx, t, a: docs.get((t, a)), config=config, worker_id="bench"
    ) as w:
        t0 = time.perf_counter()
        assert await w.drain(timeout=600)
        elapsed = time.perf_counter() - t0
    with db.read() as tx:
        counts = store.pending_counts(tx)
    n = sum(1 for k in docs if k[0] != "warm")
    delivered = counts.get("delivered", 0)
    if counts.get("pending") or counts.get("failed"):
        raise RuntimeError(f"not everything was delivered: {counts}")
    return (delivered - (len(docs) - n)) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    args = ap.parse_args()
    secret = generate_secret()
    SsrfPolicy.for_local_testing()  # the worker uses the same allowances (loopback, http)
    with tempfile.TemporaryDirectory() as tmp, receiver_process(secret) as (url, stats):
        db_ctx = (
            scratch_pg("deliver") if args.db == "postgres" else contextlib.nullcontext(f"sqlite:///{tmp}/b.db")
        )
        with db_ctx as db_url:
            db = connect(db_url)
            try:
                db.migrate()
                warm = [make_artifact(i, "warm") for i in range(100)]
                docs = [make_artifact(i, "ten") for i in range(args.n)]
                by_key = {(d["tenantId"], d["artifactId"]): d for d in warm + docs}
                asyncio.run(raw_loop(url, secret, warm, args.concurrency))  # warm-up
                setup_db(db, url, secret, warm, "warm")
                asyncio.run(worker_run(db, {k: v for k, v in by_key.items() if k[0] == "warm"},
                                       args.concurrency, args.batch))
                setup_db(db, url, secret, docs, "ten")
                raw1 = asyncio.run(raw_loop(url, secret, docs, args.concurrency))
                sk = asyncio.run(worker_run(db, by_key, args.concurrency, args.batch))
                raw_docs = [dict(d, payload={**d["payload"], "pass": 2}) for d in docs]
                for d in raw_docs:
                    d["artifactHash"] = canonical_hash({k: v for k, v in d.items() if k != "artifactHash"})
                raw2 = asyncio.run(raw_loop(url, secret, raw_docs, args.concurrency))
            finally:
                db.close()
    raw = (raw1 + raw2) / 2
    print(f"deliveries: n={args.n} concurrency={args.concurrency} batch={args.batch} db={args.db}")
    report("raw httpx loop (same bodies, same concurrency)", raw, "deliveries/s")
    report("settlekit DeliveryWorker (claim+sign+send+record)", sk, "deliveries/s", anchor=raw,
           anchor_name="raw loop", target=">= 0.6x")
    print(f"receiver: {stats}")


if __name__ == "__main__":
    main()
