"""Replays of a destination's deliveries (recorded, bounded jobs; their policy and how the worker advances them:
`delivery.replays`): create one, read one or the destination's latest, cancel one.

Creating a replay records it and requeues its first `rate` deliveries at once; the delivery worker requeues the
rest at `rate` per second. A replay can be canceled: what it requeued stays queued, the rest is not requeued.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from settlekit.delivery.replays import CANCELED, RUNNING, ReplayPolicy, advance_one
from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.events.canonical import iso_millis
from settlekit.store import deliveries as deliveries_store
from settlekit.store import delivery_recovery as store
from settlekit.store.db import Database, Tx
from settlekit.store.delivery_recovery import ReplayRow

audit = logging.getLogger("settlekit.delivery.audit")

LIST_LIMIT: Final = 50


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
    row = advance_one(tx, row, policy.burst, now)
    tx.after_commit(lambda: audit.info(
        "replay created", extra={"tenant_id": tenant_id, "destination_id": destination_id, "replay_id": row.replay_id,
                                 "since": iso_millis(since), "until": iso_millis(until), "total": total,
                                 "actor": actor}))
    return row, pending


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
