"""Which deliveries an artifact creates (spec 06 §2, §5): one per active destination of the tenant whose
artifact-type filter accepts it, within the tenant's pending quota, keyed by `DeliveryKeys`; and the backfill of a
destination enabled again. The rows are written by the repository (`settlekit.store.deliveries`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from settlekit.delivery.errors import QuotaExceededError
from settlekit.delivery.message import DeliveryKeys
from settlekit.store import deliveries
from settlekit.store.db import Tx


def new_delivery(tenant_id: str, destination_id: str, artifact: Mapping[str, Any]) -> deliveries.NewDelivery:
    """The delivery row of one (destination, artifact document) with its derived keys."""
    k = DeliveryKeys.for_job_artifact(tenant_id, destination_id, artifact)
    return deliveries.NewDelivery(
        tenant_id=tenant_id,
        destination_id=destination_id,
        artifact_type=str(artifact["artifactType"]),
        artifact_id=str(artifact["artifactId"]),
        artifact_hash=str(artifact["artifactHash"]),
        dedupe_key=k.dedupe_key,
        message_id=k.message_id,
        scope_key=k.scope_key,
        order_seq=k.order_seq,
        priority=k.priority,
        order_key=k.order_key,
    )


def enqueue_artifact(
    tx: Tx, tenant_id: str, artifact: Mapping[str, Any], *, now: datetime, max_pending: int | None = None
) -> int:
    """Create one delivery per active destination accepting the artifact's type; returns rows created.

    Called in the transaction that stores the artifact. Re-enqueueing the same artifact is a no-op.
    """
    a_type = str(artifact["artifactType"])
    targets = [d for d in deliveries.list_destinations(tx, tenant_id, active_only=True) if d.accepts(a_type)]
    if not targets:
        return 0
    if max_pending is not None:
        pending = deliveries.count_pending(tx, tenant_id)
        if pending + len(targets) > max_pending:
            raise QuotaExceededError(
                "too many pending deliveries", tenant_id=tenant_id, limit=max_pending, pending=pending
            )
    return sum(
        deliveries.insert_delivery(tx, new_delivery(tenant_id, dest.destination_id, artifact), now=now)
        for dest in targets
    )


def backfill(tx: Tx, dest: deliveries.Destination, *, since: datetime, now: datetime, page: int = 500) -> int:
    """Create the missing delivery rows of `dest` for the artifacts built at or after `since` (due now).
    Idempotent: an artifact that already has a row for the destination is skipped. Returns rows created."""
    created = 0
    after = ""
    while True:
        missing = deliveries.missing_artifacts(tx, dest, since=since, after=after, limit=page)
        for a in missing:
            doc = {"artifactId": a.artifact_id, "artifactType": a.artifact_type, "artifactHash": a.artifact_hash,
                   "jobId": a.job_id, "jobVersion": a.job_version}
            created += deliveries.insert_delivery(tx, new_delivery(dest.tenant_id, dest.destination_id, doc),
                                                  now=now)
        if len(missing) < page:
            return created
        after = missing[-1].artifact_id
