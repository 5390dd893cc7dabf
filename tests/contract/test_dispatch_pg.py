"""PostgreSQL-only dispatcher behaviour: the exact gap rule under a deterministic interleaving, row locking
across dispatchers, and a bounded torture run (8 writers holding positions, 2 dispatchers, 3 consumers)."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from settlekit.append import Appender, DomainOutcome, PassThroughDomain
from settlekit.application.consumers import get_state, list_consumers
from settlekit.dispatch import SHARED_INSTANCE, Consumer, ConsumerContext, DispatchedEvent, Dispatcher
from settlekit.errors import ConflictError
from settlekit.events.envelope import Event
from settlekit.store.db import Database, Tx, connect

ACTOR = {"type": "system", "id": "test"}



class _Rollback(Exception):
    pass


class HoldingDomain(PassThroughDomain):
    """Runs `hook(tx, events)` inside the append transaction, after the positions were drawn."""

    def __init__(self, hook: Any):
        self.hook = hook

    def process(
        self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None, events: list[Event], first_seq: int,
        may_block: bool = True, *, recorded: bool = False,
    ) -> DomainOutcome:
        return DomainOutcome(write=lambda tx, positions: self.hook(tx, events))


def append(db: Database, stream: str, n: int = 1, domain: Any = None) -> list[int]:
    store = Appender(db, domain=domain)
    head = store.streams.head("t1", stream)
    items = [{"type": "T", "actor": ACTOR, "payload": {"i": i}} for i in range(n)]
    return store.append("t1", stream, items, expected_version=head.seq if head else 0).positions


def raw_insert(conn: psycopg.Connection[Any], stream: str) -> int:
    row = conn.execute(
        "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash, chain_hash,"
        " event_json, txid, batch_id) VALUES ('t1', 'generic', %s, 1, %s, 'T', '2026-01-01T00:00:00.000Z', 'x',"
        " %s, %s, pg_current_xact_id(), gen_random_uuid()) RETURNING position",
        (stream, f"evt_{stream}", f"ch_{stream}", f'{{"id":"evt_{stream}","type":"T"}}'),
    ).fetchone()
    assert row is not None
    return int(row[0])


def holder(
    db: Database, stream: str, rollback: bool
) -> tuple[threading.Thread, threading.Event, threading.Event, list[Any]]:
    """A thread appending to `stream` that stops inside its transaction until released."""
    inside, release = threading.Event(), threading.Event()
    out: list[Any] = []

    def hook(tx: Tx, events: list[Event]) -> None:
        inside.set()
        release.wait(10)
        if rollback:
            raise _Rollback()

    def run() -> None:
        try:
            out.append(append(db, stream, domain=HoldingDomain(hook)))
        except _Rollback:
            out.append("rolled back")

    t = threading.Thread(target=run)
    t.start()
    assert inside.wait(10)
    return t, inside, release, out


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_lower_position_committing_after_a_higher_one(pg: Database, pg_url: str, outcome: str) -> None:
    seen: list[int] = []
    d = Dispatcher(
        pg, [Consumer("c", lambda e, ctx: seen.append(e.position))], registry=CollectorRegistry(), listen=False
    )
    d.ensure_registered()
    # B takes its xid first, then A draws position p and holds it, then B draws p+1 and commits: the snapshot
    # xmax after B's commit can be ≤ A's xid, so only a freshly assigned observation xid bounds A exactly.
    conn_b = psycopg.connect(pg_url, autocommit=False)
    conn_b.execute("SELECT pg_current_xact_id()")
    t, _, release, out = holder(pg, "sA", rollback=outcome == "rollback")
    p_b = raw_insert(conn_b, "sB")
    conn_b.commit()
    conn_b.close()
    d.run_once()
    state = get_state(pg, "c")
    assert state is not None and state.cursor == p_b and seen == [p_b]
    assert [(g.lo, g.hi) for g in state.pending_gaps] == [(p_b - 1, p_b - 1)]
    d.run_once()  # A is still running: the gap neither resolves nor retires
    state = get_state(pg, "c")
    assert state is not None and len(state.pending_gaps) == 1 and seen == [p_b]
    release.set()
    t.join(10)
    until = time.monotonic() + 10  # retirement waits for the cluster-wide xmin; other sessions may hold it back
    while True:
        d.run_once()
        state = get_state(pg, "c")
        if not (state and state.pending_gaps) or time.monotonic() > until:
            break
        time.sleep(0.02)
    assert state is not None and state.pending_gaps == [] and state.cursor == p_b
    if outcome == "commit":
        assert out == [[p_b - 1]] and seen == [p_b, p_b - 1]
        assert d.metrics.gaps_resolved.labels("c", SHARED_INSTANCE)._value.get() == 1
    else:
        assert out == ["rolled back"] and seen == [p_b]
        assert d.metrics.gaps_retired.labels("c", SHARED_INSTANCE)._value.get() == 1


def test_row_lock_shows_processing_and_makes_other_dispatchers_skip(pg: Database, pg_url: str) -> None:
    append(pg, "s1", 2)
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: None)], registry=CollectorRegistry(), listen=False)
    d.ensure_registered()
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT 1 FROM consumer_state WHERE name = 'c' FOR UPDATE")
        assert d.run_once().by_consumer["c"].outcome == "locked_by_other_instance"
        state = get_state(pg, "c")
        assert state is not None and state.processing and state.to_json()["status"] == "processing"
        assert [p.state.processing for p in list_consumers(pg)] == [True]
    d.drain(timeout=10)
    state = get_state(pg, "c")
    assert state is not None and state.cursor == 2 and not state.processing


def test_torture_concurrent_writers_and_dispatchers(pg_url: str) -> None:
    writers_db = connect(pg_url, max_size=12)
    with writers_db.transaction() as tx:
        tx.execute(
            "CREATE TABLE applied (consumer TEXT NOT NULL, position BIGINT NOT NULL, stream_id TEXT NOT NULL,"
            " seq BIGINT NOT NULL, ord BIGINT GENERATED ALWAYS AS IDENTITY, PRIMARY KEY (consumer, position))"
        )
    streams = [f"s{i}" for i in range(12)]
    committed: dict[str, tuple[str, int, int]] = {}  # event id -> (stream, seq, position)
    rolled_back: set[str] = set()
    lock = threading.Lock()
    deadline = time.monotonic() + 3.0
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        rng = random.Random(i)

        def hook(tx: Tx, events: list[Event]) -> None:
            time.sleep(rng.uniform(0, 0.05))
            if rng.random() < 0.15:
                with lock:
                    rolled_back.update(e["id"] for e in events)
                raise _Rollback()

        store = Appender(writers_db, domain=HoldingDomain(hook))
        try:
            while time.monotonic() < deadline:
                stream = rng.choice(streams)
                head = store.streams.head("t1", stream)
                n = rng.randint(1, 3)
                items = [{"type": "T", "actor": ACTOR, "payload": {"w": i}} for _ in range(n)]
                try:
                    res = store.append("t1", stream, items, expected_version=head.seq if head else 0)
                except (_Rollback, ConflictError):
                    continue
                with lock:
                    for k, e in enumerate(res.events):
                        committed[e["id"]] = (stream, res.first_seq + k, res.positions[k])
        except BaseException as exc:
            errors.append(exc)

    plain_seen: list[tuple[str, int, str]] = []
    dupes: list[tuple[str, int]] = []

    def tx_handler(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        n = ctx.tx.execute(
            "INSERT INTO applied (consumer, position, stream_id, seq) VALUES ('tx', ?, ?, ?) ON CONFLICT DO NOTHING",
            (event.position, event.stream_id, event.seq),
        )
        if n == 0:
            dupes.append(("tx", event.position))

    def batch_one(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        ctx.tx.execute(
            "INSERT INTO applied (consumer, position, stream_id, seq) VALUES ('batch', ?, ?, ?)",
            (event.position, event.stream_id, event.seq),
        )

    def batch_many(events: Sequence[DispatchedEvent], ctx: ConsumerContext) -> None:
        ctx.tx.executemany(
            "INSERT INTO applied (consumer, position, stream_id, seq) VALUES ('batch', ?, ?, ?)",
            [(e.position, e.stream_id, e.seq) for e in events],
        )

    def plain(event: DispatchedEvent, ctx: ConsumerContext) -> None:
        plain_seen.append((event.stream_id, event.seq, event.event_id))

    def consumers() -> list[Consumer]:
        return [
            Consumer("tx", tx_handler),
            Consumer("batch", batch_one, batch_handler=batch_many),
            Consumer("plain", plain),
        ]

    dbs = [connect(pg_url), connect(pg_url)]
    registries = [CollectorRegistry(), CollectorRegistry()]
    dispatchers = [
        Dispatcher(dbs[k], consumers(), instance_id=f"w{k}", batch_size=16, poll_interval=0.02, registry=registries[k])
        for k in range(2)
    ]
    try:
        for d in dispatchers:
            d.start()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        dispatchers[0].drain(timeout=30)
        # every gap is eventually retired or resolved once no writer is left (bounded wait)
        until = time.monotonic() + 20
        while any(p.state.pending_gaps for p in list_consumers(writers_db)) and time.monotonic() < until:
            time.sleep(0.05)
        for d in dispatchers:
            d.stop()
        for d in dispatchers:
            assert d.last_error is None, d.last_error
    finally:
        for d in dispatchers:
            d.stop()
        for db in dbs:
            db.close()

    assert len(committed) > 100 and rolled_back
    with writers_db.read() as tx:
        hwm = int(tx.scalar("SELECT MAX(position) FROM events"))
        rows = tx.fetchall("SELECT consumer, position, stream_id, seq FROM applied ORDER BY ord")
    progress = list_consumers(writers_db)
    writers_db.close()
    assert {p.state.name: (p.state.cursor, p.state.pending_gaps, p.state.status) for p in progress} == {
        name: (hwm, [], "idle") for name in ("tx", "batch", "plain")
    }
    expected = sorted(pos for _, _, pos in committed.values())
    by_consumer: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for consumer, position, stream, seq in rows:
        by_consumer[consumer].append((int(position), stream, int(seq)))
    for name in ("tx", "batch"):
        got = by_consumer[name]
        assert sorted(p for p, _, _ in got) == expected, name  # exactly once: PK + same multiset
        last: dict[str, int] = {}
        for _, stream, seq in got:  # in application order, each stream's seqs go 1, 2, 3, …
            assert seq == last.get(stream, 0) + 1, (name, stream, seq)
            last[stream] = seq
    assert not dupes
    ids = [eid for _, _, eid in plain_seen]
    assert set(ids) == set(committed) and not (set(ids) & rolled_back)
    first_seen: dict[str, int] = {}
    for stream, seq, _ in plain_seen:  # at least once; first deliveries in stream order
        if seq > first_seen.get(stream, 0):
            assert seq == first_seen.get(stream, 0) + 1, (stream, seq)
            first_seen[stream] = seq
    gap_events = sum(
        (
            reg.get_sample_value("settlekit_consumer_gaps_resolved_total", {"consumer": c, "instance_id": "__shared__"})
            or 0
        )
        + (
            reg.get_sample_value("settlekit_consumer_gaps_retired_total", {"consumer": c, "instance_id": "__shared__"})
            or 0
        )
        for reg in registries
        for c in ("tx", "batch", "plain")
    )
    assert gap_events > 0  # the run did exercise the gap path
