"""Replays of a destination's deliveries as recorded, bounded jobs: their policy and how they advance.

A replay sends again every delivered or failed delivery of one destination created in a window: each goes back to
pending, due now, with its attempts counted afresh (the attempt log numbers on) and the same message id, so
receivers see the same `webhook-id`. Creating one (`application.destinations.replays`) records it and requeues its
first `rate` deliveries at once; the delivery worker requeues the rest at `rate` per second (`advance`: so a replay
never turns the server into a burst toward one URL), in id order, skipping those that are pending by then. At most
one replay runs per destination; a window is at most `max_window` long and holds at most `max_deliveries` to
replay; a tenant has at most `max_running_per_tenant` replays running.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from settlekit.store import delivery_recovery as store
from settlekit.store.db import Database, Tx
from settlekit.store.delivery_recovery import ReplayRow

RUNNING: Final = "running"
DONE: Final = "done"
CANCELED: Final = "canceled"
ADVANCE_BATCH: Final = 100  # running replays one worker advances per tick at most


@dataclass(frozen=True)
class ReplayPolicy:
    """`rate`: deliveries a replay requeues per second (and at once when created); `max_deliveries`: delivered or
    failed deliveries a replay's window may hold; `max_window`: its longest window; `tick`: how often a worker
    advances the running replays (s)."""

    rate: float = 20.0
    max_deliveries: int = 10_000
    max_window: timedelta = timedelta(days=30)
    tick: float = 1.0
    max_running_per_tenant: int = 2  # so a tenant's replays together send at most this × `rate` per second

    def __post_init__(self) -> None:
        if (self.rate <= 0 or self.max_deliveries < 1 or self.tick <= 0 or self.max_window <= timedelta(0)
                or self.max_running_per_tenant < 1):
            raise ValueError("replay rate, window, count, tick and running replays must be positive")

    @property
    def burst(self) -> int:
        return max(1, math.ceil(self.rate))


def advance_one(tx: Tx, row: ReplayRow, limit: int, now: datetime) -> ReplayRow:
    """Requeue the replay's next `limit` deliveries (at most) and record how far it got; done when none is left."""
    replayed, skipped, last = store.replay_chunk(tx, row, limit=limit, now=now)
    done = last is None or (replayed + skipped < limit)
    moved = replace(row, replayed=row.replayed + replayed, skipped=row.skipped + skipped,
                    cursor_id=row.cursor_id if last is None else last, updated_at=now,
                    status=DONE if done else RUNNING, finished_at=now if done else None)
    store.update_replay(tx, row.replay_id, status=moved.status, replayed=moved.replayed, skipped=moved.skipped,
                        cursor_id=moved.cursor_id, now=now, finished=done)
    return moved


def advance(db: Database, policy: ReplayPolicy, now: datetime) -> int:
    """Requeue the next deliveries of every running replay, `rate` per second since it last moved; returns how
    many were requeued."""
    requeued = 0
    with db.read() as tx:
        if not store.any_running_replay(tx):
            return 0
    with db.transaction() as tx:
        for row in store.lock_running_replays(tx, limit=ADVANCE_BATCH):
            allowed = math.floor(policy.rate * max(0.0, (now - row.updated_at).total_seconds()))
            if allowed < 1:
                continue
            moved = advance_one(tx, row, min(allowed, policy.burst * 10), now)
            requeued += moved.replayed - row.replayed
    return requeued
