"""Dispatcher benchmark on PostgreSQL (creates and drops its own database).

1. Catch-up: a no-op consumer delivering N (default 200,000) events, against
   a. a raw paged SELECT of the same rows and columns (same page size), target ≥ 0.3×;
   b. the eventsourcing 9.5.6 ProjectionRunner + PostgresTrackingRecorder on N events of its own schema, using
      its documented pattern (the projection records a Tracking row per event), target dispatcher ≥ 10×.
      Capped at BENCH_ES_SECONDS (default 60 s); if the cap is hit, its rate is events tracked / elapsed.
2. Live latency: 500 appends/s (Appender.append, one event each) with the dispatcher running on LISTEN/NOTIFY;
   commit (append returned) → handler call, p50 and p99, target p99 ≤ 25 ms.

Run: python bench/dispatch.py   (env: BENCH_EVENTS, BENCH_PAGE, BENCH_ES_SECONDS, BENCH_LIVE_SECONDS)
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

from settlekit.append import Appender
from settlekit.dispatch import Consumer, ConsumerContext, DispatchedEvent, Dispatcher
from settlekit.store.db import connect

ADMIN_URL = os.environ.get("SETTLEKIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
N = int(os.environ.get("BENCH_EVENTS", "200000"))
PAGE = int(os.environ.get("BENCH_PAGE", "1000"))
ES_SECONDS = float(os.environ.get("BENCH_ES_SECONDS", "60"))
LIVE_SECONDS = float(os.environ.get("BENCH_LIVE_SECONDS", "6"))
LIVE_RATE = 500
COLUMNS = (
    "position, tenant_id, stream_id, stream_type, seq, event_json, txid::text::bigint, event_id, type, correlation_id"
)


def line(name: str, value: float, unit: str, ratio: float | None = None, ratio_of: str = "", target: str = "") -> None:
    out = f"{name:<44} {value:>12,.1f} {unit}"
    if ratio is not None:
        out += f"   ratio {ratio:6.2f}x {ratio_of}"
    if target:
        out += f"   (target {target})"
    print(out, flush=True)


@contextlib.contextmanager
def scratch_database() -> Iterator[tuple[str, str]]:
    name = f"sk_bench_dispatch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{ADMIN_URL.rsplit('/', 1)[0]}/{name}", name
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def load_events(url: str, n: int) -> None:
    """n envelope-sized rows over 1,000 streams, inserted set-based (positions from the sequence)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, n, 50_000):
            stop = min(n, start + 50_000)
            body = (
                '\'{"v":1,"id":"evt_\' || g || \'","at":"2026-01-05T10:00:10.000Z","streamId":"job_\''
                ' || (g % 1000) || \'","type":"JOB_HEARTBEAT","actor":{"type":"robot","id":"rob_1"},'
                '"payload":{"t":"2026-01-05T10:00:10.000Z","stage":"TASK","progress":0.5,'
                '"robotId":"rob_1","metrics":{"batteryPct":81,"tempC":36.5}},"payloadHash":"\''
                ' || md5(g::text) || \'","prevChainHash":null,"chainHash":"\' || md5(g::text || \'c\')'
                ' || \'","signature":null,"signerKeyId":null}\''
            )
            conn.execute(  # no parameters: the literal bounds are ints
                "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
                " chain_hash, event_json, txid, batch_id)"
                " SELECT 't1', 'job', 'job_' || (g % 1000), g / 1000 + 1, 'evt_' || g, 'JOB_HEARTBEAT',"
                " '2026-01-05T10:00:10.000Z', md5(g::text) || md5(g::text), md5(g::text || 'c') || md5(g::text),"
                f" {body}, pg_current_xact_id(), gen_random_uuid()"
                f" FROM generate_series({int(start)}, {int(stop) - 1}) AS g"
            )
        conn.execute("VACUUM ANALYZE events")


def raw_read(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        cursor, total = 0, 0
        while True:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM events WHERE position > %s ORDER BY position LIMIT %s", (cursor, PAGE)
            ).fetchall()
            if not rows:
                break
            total += len(rows)
            cursor = rows[-1][0]
        elapsed = time.perf_counter() - started
    assert total == N, total
    return N / elapsed


def dispatcher_catch_up(url: str) -> float:
    db = connect(url)
    count = [0]

    def noop(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        count[0] += 1

    d = Dispatcher(db, [Consumer("noop", noop)], batch_size=PAGE, listen=False, registry=CollectorRegistry())
    d.ensure_registered()
    started = time.perf_counter()
    d.drain(timeout=600)
    elapsed = time.perf_counter() - started
    db.close()
    assert count[0] == N, count[0]
    return N / elapsed


def eventsourcing_rate(dbname: str) -> tuple[float, int, bool]:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event
    from eventsourcing.postgres import PostgresTrackingRecorder
    from eventsourcing.projection import Projection, ProjectionRunner

    class Job(Aggregate):
        @event("Heartbeat")
        def heartbeat(self, progress: float, stage: str) -> None:
            pass

    class Jobs(Application[Any]):
        pass

    class Noop(Projection[PostgresTrackingRecorder]):
        name = "noop"

        def process_event(self, domain_event: Any, tracking: Any) -> None:
            self.view.insert_tracking(tracking)

    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": "127.0.0.1",
        "POSTGRES_PORT": "5432",
        "POSTGRES_USER": "postgres",
        "POSTGRES_PASSWORD": "",
        "POSTGRES_SCHEMA": "public",
    }
    app = Jobs(env=env)
    per_aggregate = 1000
    written = 0
    while written < N:
        job = Job()
        for _ in range(min(per_aggregate, N - written) - 1):
            job.heartbeat(progress=0.5, stage="TASK")
        app.save(job)
        written += min(per_aggregate, N - written)
    last = app.recorder.max_notification_id() or 0
    app.close()
    runner = ProjectionRunner(
        application_class=Jobs, projection_class=Noop, view_class=PostgresTrackingRecorder, env=env
    )
    started = time.perf_counter()
    with runner:
        deadline = started + ES_SECONDS
        done = False
        while time.perf_counter() < deadline:
            tracked = runner.view.max_tracking_id(runner.app_name) or 0
            if tracked >= last:
                done = True
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        tracked = runner.view.max_tracking_id(runner.app_name) or 0
    return tracked / elapsed, tracked, done


def live_latency(url: str) -> tuple[float, float, int]:
    db = connect(url)
    seen: dict[int, float] = {}

    def handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        seen.setdefault(event.position, time.perf_counter())

    d = Dispatcher(
        db, [Consumer("live", handler, start_from="now")], poll_interval=0.1, listen=True, registry=CollectorRegistry()
    )
    d.start()
    committed: dict[int, float] = {}
    lock = threading.Lock()

    def writer(i: int, rate: float) -> None:
        wdb = connect(url, max_size=2)
        store = Appender(wdb)
        version: dict[str, int] = {}
        interval = 1.0 / rate
        next_at = time.perf_counter()
        stop_at = next_at + LIVE_SECONDS
        k = 0
        while next_at < stop_at:
            now = time.perf_counter()
            if now < next_at:
                time.sleep(next_at - now)
            stream = f"live{i}_{k % 50}"
            k += 1
            res = store.append(
                "t1",
                stream,
                [{"type": "JOB_HEARTBEAT", "actor": {"type": "system", "id": "b"}, "payload": {"k": k}}],
                expected_version=version.get(stream, 0),
            )
            done = time.perf_counter()
            version[stream] = version.get(stream, 0) + 1
            with lock:
                committed[res.positions[0]] = done
            next_at += interval
        wdb.close()

    threads = [threading.Thread(target=writer, args=(i, LIVE_RATE / 2)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d.drain(timeout=30)
    d.stop()
    db.close()
    lat = sorted(max(0.0, seen[p] - c) * 1000 for p, c in committed.items() if p in seen)
    assert len(lat) == len(committed), (len(lat), len(committed))
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return statistics.median(lat), p99, len(committed)


def main() -> None:
    with scratch_database() as (url, dbname):
        connect(url).migrate()
        t0 = time.perf_counter()
        load_events(url, N)
        print(f"loaded {N:,} events in {time.perf_counter() - t0:.1f} s; page size {PAGE}", flush=True)
        raw = raw_read(url)
        line("raw paged SELECT (same columns)", raw, "events/s")
        disp = dispatcher_catch_up(url)
        line("dispatcher catch-up, no-op consumer", disp, "events/s", disp / raw, "of raw read", "≥ 0.3x")
        t0 = time.perf_counter()
        es_rate, es_tracked, es_done = eventsourcing_rate(dbname)
        note = "" if es_done else f" (capped at {ES_SECONDS:.0f} s: {es_tracked:,} of {N:,} events)"
        line(f"eventsourcing ProjectionRunner{note}", es_rate, "events/s")
        line("dispatcher vs eventsourcing", disp, "events/s", disp / es_rate, "of eventsourcing", "≥ 10x")
        p50, p99, n = live_latency(url)
        print(f"live: {n:,} appends at {LIVE_RATE}/s for {LIVE_SECONDS:.0f} s", flush=True)
        line("commit → handler p50", p50, "ms")
        line("commit → handler p99", p99, "ms", p99 / 25.0, "of the 25 ms budget", "≤ 25 ms")


if __name__ == "__main__":
    main()
