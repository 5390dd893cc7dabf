"""Replays of a destination's deliveries as recorded, bounded jobs.

A replay sends again every delivered or failed delivery of one destination created in a window: each goes back to
pending, due now, with its attempts counted afresh (the attempt log numbers on) and the same message id, so
receivers see the same `webhook-id`. Creating one records it and requeues its first `rate` deliveries at once; the
delivery worker requeues the rest at `rate` per second (so a replay never turns the server into a burst toward one
URL), in id order, skipping those that are pending by then. At most one replay runs per destination; a window is at
most `max_window` long and holds at most `max_deliveries` to replay; a tenant has at most `max_running_per_tenant`
replays running. A replay can be canceled: what it requeued
stays queued, the rest is not requeued.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.events.canonical import iso_millis
from settlekit.store import deliveries as deliveries_store
from settlekit.store import delivery_recovery as store
from settlekit.store.db import Database, Tx
from settlekit.store.delivery_recovery import ReplayRow

audit = logging.getLogger("settlekit.delivery.audit")

RUNNING: Final = "running"
DONE: Final = "done"
CANCELED: Final = "canceled"
LIST_LIMIT: Final = 50
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


def to_json(row: ReplayRow) -> dict[str, Any]:
    return {"replayId": row.replay_id, "destinationId": row.destination_id, "since": iso_millis(row.since),
            "until": iso_millis(row.until), "status": row.status, "total": row.total, "replayed": row.replayed,
            "skipped": row.skipped, "createdAt": iso_millis(row.created_at), "updatedAt": iso_millis(row.updated_at),
            "finishedAt": iso_millis(row.finished_at) if row.finished_at else None}


def create(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, until: datetime, policy: ReplayPolicy,
           actor: str | None, now: datetime) -> tuple[ReplayRow, int]:
    """Record a replay of the window and requeue its first `policy.burst` deliveries; returns it with the
    deliveries of the window that were pending already. NOT_FOUND, DELIVERY_WINDOW_INVALID, REPLAY_RUNNING (one
    runs for the destination), REPLAY_TOO_LARGE."""
    if deliveries_store.get_destination(tx, tenant_id, destination_id, lock=True) is None:
        raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)
    if until - since > policy.max_window:
        raise ValidationError(f"a replay window spans at most {_span(policy.max_window)}",
                              code="DELIVERY_WINDOW_INVALID", since=iso_millis(since), until=iso_millis(until))
    running = store.running_replay(tx, tenant_id, destination_id)
    if running is not None:
        raise ConflictError("a replay of this destination is running; wait for it or cancel it",
                            code="REPLAY_RUNNING", replay_id=running.replay_id)
    others = store.running_replays_of(tx, tenant_id)
    if others >= policy.max_running_per_tenant:
        raise ConflictError(f"{others} replays of the tenant are running, as many as allowed; wait for one or "
                            "cancel one", code="REPLAY_RUNNING", running=others,
                            limit=policy.max_running_per_tenant)
    total, pending = store.window_counts(tx, tenant_id, destination_id, since=since, until=until)
    if total > policy.max_deliveries:
        raise ValidationError(f"the window holds {total} deliveries to replay, more than {policy.max_deliveries}; "
                              "replay a shorter window", code="REPLAY_TOO_LARGE", status=422, total=total,
                              limit=policy.max_deliveries)
    row = ReplayRow(f"rpl_{uuid.uuid4().hex}", tenant_id, destination_id, since, until, RUNNING, total, 0, 0, 0,
                    actor, now, now, None)
    store.insert_replay(tx, row)
    row = _advance_one(tx, row, policy.burst, now)
    tx.after_commit(lambda: audit.info(
        "replay created", extra={"tenant_id": tenant_id, "destination_id": destination_id, "replay_id": row.replay_id,
                                 "since": iso_millis(since), "until": iso_millis(until), "total": total,
                                 "actor": actor}))
    return row, pending


def _advance_one(tx: Tx, row: ReplayRow, limit: int, now: datetime) -> ReplayRow:
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
            moved = _advance_one(tx, row, min(allowed, policy.burst * 10), now)
            requeued += moved.replayed - row.replayed
    return requeued


def get(db: Database, tenant_id: str, destination_id: str, replay_id: str) -> ReplayRow:
    with db.read() as tx:
        row = store.get_replay(tx, tenant_id, destination_id, replay_id)
    if row is None:
        raise NotFoundError("replay not found", destination_id=destination_id, replay_id=replay_id)
    return row


def list_for(db: Database, tenant_id: str, destination_id: str) -> list[ReplayRow]:
    """The destination's latest replays, newest first (NOT_FOUND for an unknown destination)."""
    with db.read() as tx:
        if deliveries_store.get_destination(tx, tenant_id, destination_id) is None:
            raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)
        return store.list_replays(tx, tenant_id, destination_id, limit=LIST_LIMIT)


def cancel(tx: Tx, tenant_id: str, destination_id: str, replay_id: str, *, actor: str | None,
           now: datetime) -> ReplayRow:
    """Stop a running replay (what it requeued stays queued); REPLAY_NOT_RUNNING when it has ended."""
    row = store.get_replay(tx, tenant_id, destination_id, replay_id, lock=True)
    if row is None:
        raise NotFoundError("replay not found", destination_id=destination_id, replay_id=replay_id)
    if row.status != RUNNING:
        raise ConflictError(f"the replay is {row.status}", code="REPLAY_NOT_RUNNING", replay_id=replay_id,
                            replay_status=row.status)
    store.update_replay(tx, replay_id, status=CANCELED, replayed=row.replayed, skipped=row.skipped,
                        cursor_id=row.cursor_id, now=now, finished=True)
    tx.after_commit(lambda: audit.info("replay canceled", extra={
        "tenant_id": tenant_id, "destination_id": destination_id, "replay_id": replay_id, "actor": actor}))
    return replace(row, status=CANCELED, updated_at=now, finished_at=now)


def _span(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 24 else f"{hours:g} hours"
