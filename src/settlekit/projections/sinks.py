"""Where a stored (or reused) artifact goes next, inside the same transaction.

`DeliverySink.enqueue(tx, tenant_id, artifact_row) -> int` receives the stored artifact document (with
`artifactId`, `artifactType`, `artifactHash`, `jobId`, `jobVersion`) and returns how many rows it created.
It must be idempotent: calling it again for the same artifact creates nothing (the consumer calls it on every
reuse, §10.2).

- `OutboxTableSink` (default): one `artifact_outbox` row per artifact.
- `DeliveryQueueSink`: one `deliveries` row per matching active destination (spec 06), via the delivery
  area's `enqueue_artifact`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from settlekit.store.artifacts import insert_outbox
from settlekit.store.db import Tx


@runtime_checkable
class DeliverySink(Protocol):
    def enqueue(self, tx: Tx, tenant_id: str, artifact_row: Mapping[str, Any]) -> int: ...


class OutboxTableSink:
    """Writes `artifact_outbox(tenant_id, artifact_id, artifact_type, artifact_hash, created_at)`, once per
    artifact."""

    def enqueue(self, tx: Tx, tenant_id: str, artifact_row: Mapping[str, Any]) -> int:
        return insert_outbox(tx, tenant_id, artifact_row)


class DeliveryQueueSink:
    """One delivery per active destination of the tenant that accepts the artifact's type."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None, max_pending: int | None = None):
        self.clock = clock or (lambda: datetime.now(UTC))
        self.max_pending = max_pending

    def enqueue(self, tx: Tx, tenant_id: str, artifact_row: Mapping[str, Any]) -> int:
        from settlekit.delivery.enqueue import enqueue_artifact

        return enqueue_artifact(tx, tenant_id, artifact_row, now=self.clock(), max_pending=self.max_pending)
