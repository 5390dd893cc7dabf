"""Append throughput on PostgreSQL (and SQLite), each figure with its ratio against its anchor.

- 8 writers, one event per transaction: settlekit vs a raw psycopg loop of single-row insert transactions
  (the physical limit for Python here) and vs the eventsourcing 9.5.6 PostgreSQL recorder.
- 8 writers, 100 events per transaction: target ≥ 40,000 events/s.
- SQLite, one writer: 1 and 100 events per transaction.
Also: canonicalize + hash of a typical ~300-byte event (target < 20 µs).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import timeit
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg  # noqa: E402

from common import report, run_threads, scratch_pg  # noqa: E402
from settlekit.append import Appender  # noqa: E402
from settlekit.events.envelope import compute_payload_hash  # noqa: E402
from settlekit.store.db import connect  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WRITERS = 8
ACTOR = {"type": "system", "id": "proxy"}
PAYLOAD = {"t": "2026-01-05T10:00:10.000Z", "stage": "TASK", "progress": 0.5, "robotId": "rob_1",
           "metrics": {"batteryPct": 81, "tempC": 36.5}}


def typical_event() -> dict[str, Any]:
    return {"v": 1, "id": "evt_6f1c1d4e-0b7a-4c1e-9a55-2c7f0b1d9e21", "at": "2026-01-05T10:00:10.000Z",
            "streamId": "job_7a1b2c3d", "type": "JOB_HEARTBEAT", "actor": {"type": "robot", "id": "rob_1"},
            "payload": PAYLOAD}


def bench_hash() -> None:
    from settlekit.events.canonical import canonical_json
    from settlekit.events.envelope import payload_material

    event = typical_event()
    size = len(canonical_json({k: event[k] for k in event}).encode())
    n = 50000
    us = timeit.timeit(lambda: compute_payload_hash(event), number=n) / n * 1e6
    report(f"canonicalize+hash of a {size}-byte event", us, "µs", target="< 20 µs")
    assert payload_material(event)


def settlekit_writer(store: Appender, per_tx: int) -> Any:
    def make(i: int) -> Any:
        def step() -> int:
            stream = f"s_{uuid.uuid4().hex}"
            store.append("tenant_bench", stream, [{"type": "JOB_HEARTBEAT", "actor": ACTOR, "payload": PAYLOAD}]
                         * per_tx, expected_prev_chain_hash=None)
            return per_tx
        return step
    return make


def raw_writer(url: str) -> Any:
    def make(i: int) -> Any:
        conn = psycopg.connect(url, autocommit=False)

        def step() -> int:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO raw_events (stream_id, body) VALUES (%s, %s)",
                            (uuid.uuid4().hex, '{"t":"2026-01-05T10:00:10.000Z","stage":"TASK","progress":0.5}'))
            conn.commit()
            return 1
        return step
    return make


def eventsourcing_writer(url: str) -> Any:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate

    class Job(Aggregate):
        pass

    info = psycopg.conninfo.conninfo_to_dict(url)
    env = {"PERSISTENCE_MODULE": "eventsourcing.postgres", "POSTGRES_DBNAME": str(info["dbname"]),
           "POSTGRES_HOST": str(info.get("host", "127.0.0.1")), "POSTGRES_PORT": str(info.get("port", "5432")),
           "POSTGRES_USER": str(info.get("user", "postgres")), "POSTGRES_PASSWORD": "",
           "POSTGRES_POOL_SIZE": str(WRITERS), "CREATE_TABLE": "y"}
    app = Application(env=env)

    def make(i: int) -> Any:
        def step() -> int:
            app.save(Job())
            return 1
        return step
    return make


def main() -> None:
    bench_hash()
    with scratch_pg("append") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE raw_events (id BIGSERIAL PRIMARY KEY, stream_id TEXT NOT NULL, body TEXT)")
        db = connect(url, max_size=WRITERS + 2)
        db.migrate()
        store = Appender(db)
        # Alternate the two loops so load from anything else on the machine hits both alike; report medians.
        # Warm up first: every pooled connection prepares its statements and caches the function's plans.
        run_threads(WRITERS, 1.0, raw_writer(url))
        run_threads(WRITERS, 1.0, settlekit_writer(store, 1))
        raws, singles = [], []
        for _ in range(ROUNDS):
            raws.append(run_threads(WRITERS, SECONDS, raw_writer(url)))
            singles.append(run_threads(WRITERS, SECONDS, settlekit_writer(store, 1)))
        raw, single = statistics.median(raws), statistics.median(singles)
        report("raw psycopg single-row insert transactions, 8 writers (median)", raw, "events/s")
        report("settlekit append, 8 writers, 1 event/tx (median)", single, "events/s", anchor=raw,
               anchor_name="raw loop", target="≥ 0.7x raw")
        print(f"  per-round ratios: {', '.join(f'{s / r:.2f}' for s, r in zip(singles, raws, strict=True))}")
        es = run_threads(WRITERS, SECONDS, eventsourcing_writer(url))
        report("eventsourcing 9.5.6 PostgreSQL recorder, 8 writers, 1 event/aggregate", es, "events/s")
        report("settlekit vs eventsourcing", single / es, "x", target="≥ 5x")
        batch = run_threads(WRITERS, SECONDS, settlekit_writer(store, 100))
        report("settlekit append, 8 writers, 100 events/tx", batch, "events/s", anchor=40000.0,
               anchor_name="target 40,000/s", target="≥ 40,000 events/s")
        db.close()
    with tempfile.TemporaryDirectory() as tmp:
        db = connect(f"sqlite:///{tmp}/bench.db")
        db.migrate()
        store = Appender(db)
        s1 = run_threads(1, SECONDS, settlekit_writer(store, 1))
        report("settlekit SQLite append, 1 writer, 1 event/tx", s1, "events/s")
        s100 = run_threads(1, SECONDS, settlekit_writer(store, 100))
        report("settlekit SQLite append, 1 writer, 100 events/tx", s100, "events/s")
        db.close()


if __name__ == "__main__":
    main()
