"""Dispatcher cost while it is blocked by a full pending-gap list (PostgreSQL; creates and drops its own database).

A transaction holds a position open, burnt positions fill the gap list (`max_pending_gap_ranges`), and more than a
batch of committed events waits past the blocking gap: no turn can deliver anything until the holder ends. The
dispatcher runs on its background thread (LISTEN/NOTIFY on, default poll interval) for BENCH_SECONDS; reported:
dispatcher turns/s, committed transactions/s of the database (pg_stat_database.xact_commit), CPU share of one core
(this process, and the database's backends), and the dispatcher's log lines/s, each against the same dispatcher idle
(the anchor, measured first in the same run).

Run: python bench/dispatch_blocked.py   (env: BENCH_SECONDS, default 5)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

from common import process_cpu_seconds, scratch_pg
from settlekit.append import Appender, DomainOutcome, PassThroughDomain
from settlekit.dispatch import Consumer, Dispatcher
from settlekit.events.envelope import Event
from settlekit.store.db import Tx, connect

SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
ACTOR = {"type": "system", "id": "bench"}


class _Hold(PassThroughDomain):
    def __init__(self, inside: threading.Event, release: threading.Event):
        self.inside, self.release = inside, release

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None, events: list[Event],
                first_seq: int, may_block: bool = True, *, recorded: bool = False) -> DomainOutcome:
        def write(tx: Tx, positions: Sequence[int]) -> None:
            self.inside.set()
            self.release.wait(120)

        return DomainOutcome(write=write)


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


def _append(db: Any, stream: str, n: int = 1, domain: Any = None) -> None:
    store = Appender(db, domain=domain)
    head = store.streams.head("t1", stream)
    items = [{"type": "T", "actor": ACTOR, "payload": {"i": i}} for i in range(n)]
    store.append("t1", stream, items, expected_version=head.seq if head else 0)


def _burn(url: str) -> None:
    """Draw a position and roll back: a hole that only retires once the holder has ended."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT pg_current_xact_id()")
        conn.execute("SELECT nextval(pg_get_serial_sequence('events', 'position'))")
        conn.rollback()


def _backend_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of the given local processes so far; processes that ended count 0."""
    return sum(process_cpu_seconds(pid) or 0.0 for pid in pids)


def _window(url: str, reg: CollectorRegistry, counter: _Count) -> dict[str, float]:
    """Rates over one BENCH_SECONDS window while the dispatcher thread runs."""
    with psycopg.connect(url, autocommit=True) as conn:
        def commits() -> int:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                               ).fetchone()
            assert row is not None
            return int(row[0])

        def turns() -> float:
            return reg.get_sample_value("settlekit_dispatcher_turn_duration_seconds_count", {"consumer": "c"}) or 0.0

        pids = [int(r[0]) for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()]
        c0, t0, lines0, b0 = commits(), turns(), counter.n, _backend_cpu(pids)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(SECONDS)
        c1, t1, lines1, b1 = commits(), turns(), counter.n, _backend_cpu(pids)
        cpu1, wall1 = time.process_time(), time.perf_counter()
    wall = wall1 - wall0
    return {"turns/s": (t1 - t0) / wall, "transactions/s": (c1 - c0) / wall,
            "CPU % (process)": 100 * (cpu1 - cpu0) / wall, "CPU % (backends)": 100 * (b1 - b0) / wall,
            "log lines/s": (lines1 - lines0) / wall}


def main() -> None:
    with scratch_pg("blocked") as url:
        db = connect(url)
        db.migrate()
        reg = CollectorRegistry()
        d = Dispatcher(db, [Consumer("c", lambda e, ctx: None)], registry=reg, batch_size=20,
                       max_pending_gap_ranges=2)
        counter = _Count()
        logging.getLogger("settlekit.dispatch").addHandler(counter)
        _append(db, "s_idle")
        d.start()  # anchor: the same dispatcher with nothing to do
        time.sleep(0.5)
        idle = _window(url, reg, counter)
        d.stop()

        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_append, args=(db, "held", 1, _Hold(inside, release)))
        holder.start()
        assert inside.wait(10)
        _append(db, "s0")
        d.run_once()  # gap 1: the held position
        _burn(url)
        _append(db, "s1")
        d.run_once()  # gap 2: a burnt position
        _burn(url)
        _append(db, "s2", 50)  # behind a third hole: blocked
        d.start()
        time.sleep(0.5)
        blocked = _window(url, reg, counter)
        d.stop()
        release.set()
        holder.join(10)
        print(f"dispatcher blocked by a full gap list vs idle ({SECONDS:g} s windows; transactions: whole database)")
        print(f"  {'':24} {'idle (anchor)':>14} {'blocked':>10} {'ratio':>8}")
        for k in idle:
            ratio = blocked[k] / idle[k] if idle[k] else float("nan")
            print(f"  {k:24} {idle[k]:14.1f} {blocked[k]:10.1f} {ratio:7.2f}x")
        print("  (target: blocked transactions/s within 3x of idle, i.e. one turn per wake-up or poll, no busy loop)")
        db.close()


if __name__ == "__main__":
    main()
