"""consumers reset --to now keeps the consumer's pending gaps that are not visible yet: an append in flight whose
position is already a pending gap (below the cursor, because a later append was delivered first) is delivered once
it commits after the reset. Before, the reset dropped those gaps. Found by a reviewer."""
from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry
from test_dispatch_reset_race import HoldingDomain, append

from settlekit.application.consumers import reset_consumer
from settlekit.dispatch import Consumer, Dispatcher
from settlekit.store.db import Database, Tx


def test_pending_gap_below_the_cursor_survives_reset_to_now(pg: Database) -> None:
    seen: list[int] = []
    d = Dispatcher(pg, [Consumer("c", lambda e, ctx: seen.append(e.position))], registry=CollectorRegistry(),
                   listen=False)
    d.ensure_registered()
    append(pg, "s0")
    d.drain(timeout=10)

    inside, release = threading.Event(), threading.Event()
    out: list[Any] = []

    def hook(tx: Tx, events: Any) -> None:
        inside.set()
        release.wait(10)

    t = threading.Thread(target=lambda: out.append(append(pg, "sA", HoldingDomain(hook))))
    t.start()
    assert inside.wait(10)      # position 2 drawn, not committed
    later = append(pg, "sB")    # position 3 commits
    d.run_once()                # delivers 3, position 2 becomes a pending gap (below the cursor)
    backlog = append(pg, "sC")  # position 4: the backlog the operator skips
    before = reset_consumer(pg, "c", "now")
    print("after reset:", before.cursor, before.pending_gaps, "seen", seen)
    release.set()
    t.join(10)
    in_flight = out[0][0]
    assert in_flight < later[0] < backlog[0]
    for _ in range(20):
        d.run_once()
    assert in_flight in seen, (f"event at position {in_flight}, in flight during the reset to now (a pending gap "
                               f"below the cursor), was never delivered (delivered {seen})")
