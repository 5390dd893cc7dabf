"""The client executor's spool: how fast events are spooled, and how fast a spool drains to the API, each with its
ratio against an anchor measured in the same run.

- Spooling (sign + fsync'd insert), one event per transaction and 25 per transaction, against raw sqlite3 inserts
  of the same JSON texts into a file with the same settings (WAL, synchronous=FULL), one row / 25 rows per commit.
- Draining: a spool of robot heartbeats (10 jobs) flushed to the API on SQLite over loopback HTTP, against the
  same kind of events POSTed straight to the API in the same batches (100 per request) without a spool.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import report  # noqa: E402
from settlekit.client import Client  # noqa: E402
from settlekit.client.executor import Executor  # noqa: E402
from settlekit.client.spool import Spool, dumps_event  # noqa: E402
from settlekit.events.envelope import Signer, finalize, make_draft, now_iso  # noqa: E402
from settlekit.store.db import connect  # noqa: E402
from support.api import TENANT_A, key_for, make_app  # noqa: E402
from support.http_server import serve  # noqa: E402
from support.sdk import dispatched_job, heartbeat, start_events  # noqa: E402

WRITES = int(os.environ.get("BENCH_SPOOL_EVENTS", "2000"))
JOBS = 10
PER_JOB = int(os.environ.get("BENCH_SPOOL_PER_JOB", "300"))
SIGNER = Signer.generate()


def _event(stream: str, n: int, prev: str | None) -> dict:
    draft = make_draft(stream_id=stream, type="JOB_HEARTBEAT", actor={"type": "robot", "id": "rob_1"},
                       payload={"jobId": stream, "robotId": "rob_1", "t": now_iso(), "stage": "TASK",
                                "progress": n}, at=now_iso())
    return finalize(draft, prev, SIGNER)


def _rate(count: int, run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return count / (time.perf_counter() - started)


def bench_spooling(folder: Path) -> None:
    texts = []
    prev = None
    for n in range(WRITES):
        event = _event("job_raw", n, prev)
        texts.append(dumps_event(event))
        prev = event["chainHash"]
    for per_tx in (1, 25):
        raw = sqlite3.connect(folder / f"raw{per_tx}.db", isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=FULL")
        raw.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")

        def raw_run(conn: sqlite3.Connection = raw, size: int = per_tx) -> None:
            for start in range(0, WRITES, size):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT INTO t (body) VALUES (?)", [(t,) for t in texts[start:start + size]])
                conn.execute("COMMIT")

        anchor = _rate(WRITES, raw_run)
        raw.close()
        spool = Spool(folder / f"spool{per_tx}.db")

        def spool_run(size: int = per_tx, spool: Spool = spool) -> None:
            for start in range(0, WRITES, size):
                spool.add_many("job_s", [lambda prev, n=n: _event("job_s", n, prev)
                                         for n in range(start, start + size)])

        value = _rate(WRITES, spool_run)
        spool.close()
        report(f"spooling, {per_tx} event(s) per transaction (sign + fsync)", value, "events/s", anchor=anchor,
               anchor_name=f"raw sqlite3 insert, {per_tx} row(s) per commit ({anchor:,.0f}/s)")


def bench_draining(folder: Path) -> None:
    db = connect(f"sqlite:///{folder / 'api.db'}")
    db.migrate()
    with serve(make_app(db)) as url:
        key = key_for(db, TENANT_A)
        admin = Client(url, key)
        with Executor(Client(url, key), Signer.generate(), actor_type="robot", actor_id="rob_1",
                      spool=str(folder / "drain.spool")) as robot:
            robot.register_key()
            direct, spooled = [f"job_d{j}" for j in range(JOBS)], [f"job_s{j}" for j in range(JOBS)]
            for job_id in direct + spooled:
                dispatched_job(admin, job_id, "rob_1")
                for event_type, payload in start_events(job_id):
                    robot.append(job_id, event_type, payload)
            for job_id in spooled:
                robot.append_many(job_id, [heartbeat(job_id, "rob_1", n) for n in range(PER_JOB)], wait=False)
            batches = []
            for job_id in direct:
                head = admin.get_job(job_id)["headChainHash"]
                events = []
                for n in range(PER_JOB):
                    event_type, payload, at = heartbeat(job_id, "rob_1", n)
                    draft = make_draft(stream_id=job_id, type=event_type, actor=robot.actor, payload=payload, at=at)
                    events.append(finalize(draft, head, robot.signer))
                    head = events[-1]["chainHash"]
                batches += [(job_id, events[i:i + 100]) for i in range(0, PER_JOB, 100)]
            anchor = _rate(JOBS * PER_JOB, lambda: [admin.append_events(j, b) for j, b in batches])
            value = _rate(JOBS * PER_JOB, lambda: robot.flush())
        admin.close()
    db.close()
    report(f"draining a spool of {JOBS * PER_JOB} events to the API (SQLite, loopback)", value, "events/s",
           anchor=anchor, anchor_name=f"the same batches POSTed without a spool ({anchor:,.0f}/s)")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        bench_spooling(Path(folder))
        bench_draining(Path(folder))


if __name__ == "__main__":
    main()
