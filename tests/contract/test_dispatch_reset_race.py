"""`consumers reset --to now` racing an append in flight: the event commits after the reset, below the new cursor.
Before, it was acknowledged to its client and never delivered to the consumer (no dead letter either); the reset
now records the holes below the high-water mark as pending gaps. Found by a reviewer."""
from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry

from settlekit.append import Appender, DomainOutcome, PassThroughDomain
from settlekit.application.consumers import reset_consumer
from settlekit.dispatch import Consumer, Dispatcher
from settlekit.store.db import Database, Tx

ACTOR = {"type": "system", "id": "test"}


class HoldingDomain(PassThroughDomain):
    def __init__(self, hook: Any):
        self.hook = hook

    def process(self, tenant_id: str, stream_id: str, snapshot: Any, events: Any, first_seq: int,
                may_block: bool = True, *, recorded: bool = False) -> DomainOutcome:
        return DomainOutcome(write=lambda tx, positions: self.hook(tx, events))


def append(db: Database, stream: str, domain: Any = None) -> list[int]:
    store = Appender(db, domain=domain)
    head = store.streams.head("t1", stream)
    return store.append("t1", stream, [{"type": "T", "actor": ACTOR, "payload": {}}],
                        expected_version=head.seq if head else 0).positions



def test_event_in_flight_during_reset_to_now_is_delivered_once_committed(pg: Database) -> None:
    seen: list[int] = []
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: seen.append(e.position))], registry=CollectorRegistry(),
                   listen=False)
    d.ensure_registered()
    append(pg, "s0")  # position 1: the backlog the operator wants to skip
    d.drain(timeout=10)
    assert seen == [1]

    inside, release = threading.Event(), threading.Event()
    out: list[Any] = []

    def hook(tx: Tx, events: Any) -> None:
        inside.set()
        release.wait(10)

    t = threading.Thread(target=lambda: out.append(append(pg, "sA", HoldingDomain(hook))))
    t.start()
    assert inside.wait(10)          # an append has drawn position 2 and not committed yet
    later = append(pg, "sB")        # position 3 commits
    state = reset_consumer(pg, "c", "now")  # the operator skips the backlog: cursor -> 3
    assert state.cursor == later[0]
    release.set()                   # the append in flight commits after the reset and is acknowledged
    t.join(10)
    in_flight = out[0][0]
    assert in_flight < later[0]
    d.drain(timeout=10)
    for _ in range(20):
        d.run_once()
    assert in_flight in seen, (f"event at position {in_flight}, committed after the reset to now, was never "
                               f"delivered (delivered {seen})")
    assert seen.count(in_flight) == 1 and later[0] not in seen  # the backlog up to the reset stays skipped
